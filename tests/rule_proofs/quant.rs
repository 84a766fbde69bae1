//! Proofs of the quantized-weight rules: the MatMulNBits fusion (`rewrites/fusion/
//! matmul_nbits.rules`) on random block-quantized weights, its inverse (`rewrites/inline/
//! matmul_nbits.rules`) on random MatMulNBits calls (and the exact round trip through both),
//! and PackQKV over weights that `--quant` turned into `DequantizeLinear` of initializers.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{
    Attr, DType, Graph, GraphBuilder, Initializer, QuantParams, TensorData, TensorSource,
};
use mobius::passes::quantize::{quantize_graph, QuantRequest};
use mobius::quant::nbits::{nbits_shapes, nbits_weight, nbits_zero_points};
use mobius::weights::eval::Evaluator;
use proptest::prelude::*;

use super::{dims, projected_gqa, prove_on, random_tensor};
use mobius::ops::Tensor;

/// An initializer of one-byte values (4- or 8-bit integers) drawn below `limit`, shifted down
/// by `offset` (signed types).
fn int_init(
    b: &mut GraphBuilder,
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    rng: &mut Rng,
) -> String {
    let (limit, offset) = match dtype {
        DType::I4 => (16, 8),
        DType::U4 => (16, 0),
        DType::I8 => (256, 128),
        _ => (256, 0),
    };
    let n: usize = shape.iter().product();
    let bytes = (0..n)
        .map(|_| (rng.below(limit) as i64 - offset) as i8 as u8)
        .collect();
    float_or_bytes(b, name, dtype, shape, bytes)
}

/// An f32 initializer of values in [-1, 1).
fn float_init(b: &mut GraphBuilder, name: &str, shape: Vec<usize>, rng: &mut Rng) -> String {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
    let bytes = bytemuck::cast_slice(&values).to_vec();
    float_or_bytes(b, name, DType::F32, shape, bytes)
}

fn float_or_bytes(
    b: &mut GraphBuilder,
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
) -> String {
    b.initializer(Initializer {
        name: name.into(),
        dtype,
        shape: shape.clone(),
        source: Some(TensorSource::Inline(TensorData {
            dtype,
            shape,
            bytes,
        })),
    })
}

/// `y = MatMul(x, DequantizeLinear(q, scales[, zero_points]; axis 0, block))`, x `[b, s, K]`,
/// with random values of `dtype` (I4/U4/I8/U8; the unsigned ones get zero points).
fn quantized_matmul(
    (batch, seq, k, n): (usize, usize, usize, usize),
    block: usize,
    dtype: DType,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&[batch, seq, k]));
    b.output("y", DType::F32, dims(&[batch, seq, n]));
    let blocks = k.div_ceil(block);
    let q = int_init(&mut b, "w.q", dtype, vec![k, n], &mut rng);
    let s = float_init(&mut b, "w.scales", vec![blocks, n], &mut rng);
    let mut dq_inputs = vec![q, s];
    if matches!(dtype, DType::U4 | DType::U8) {
        dq_inputs.push(int_init(
            &mut b,
            "w.zero_points",
            dtype,
            vec![blocks, n],
            &mut rng,
        ));
    }
    let refs: Vec<&str> = dq_inputs.iter().map(String::as_str).collect();
    let w = b.op(
        "DequantizeLinear",
        &refs,
        vec![
            ("axis", Attr::Int(0)),
            ("block_size", Attr::Int(block as i64)),
        ],
    );
    b.op_into("MatMul", &[&x, &w], vec![], "y");
    let inputs = HashMap::from([(
        "x".to_string(),
        random_tensor(DType::F32, &[batch, seq, k], &mut rng),
    )]);
    (b.finish(), inputs)
}

/// `y = Add(MatMulNBits(x, B, scales[, zero_points]), bias)` over random packed 4-bit values.
fn nbits_with_bias(
    (batch, seq, k, n): (usize, usize, usize, usize),
    block: usize,
    zero_points: bool,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&[batch, seq, k]));
    b.output("y", DType::F32, dims(&[batch, seq, n]));
    let blocks = k.div_ceil(block);
    let packed = int_init(
        &mut b,
        "w.b",
        DType::U8,
        vec![n, blocks, block / 2],
        &mut rng,
    );
    let scales = float_init(&mut b, "w.scales", vec![n, blocks], &mut rng);
    let bias = float_init(&mut b, "w.bias", vec![n], &mut rng);
    let zp = int_init(
        &mut b,
        "w.zp",
        DType::U8,
        vec![n, blocks.div_ceil(2)],
        &mut rng,
    );
    let mut inputs = vec![x.as_str(), &packed, &scales];
    if zero_points {
        inputs.push(&zp);
    }
    b.node(
        "com.microsoft",
        "MatMulNBits",
        &inputs,
        vec![
            ("K", Attr::Int(k as i64)),
            ("N", Attr::Int(n as i64)),
            ("bits", Attr::Int(4)),
            ("block_size", Attr::Int(block as i64)),
        ],
        vec!["product".into()],
    );
    b.op_into("Add", &["product", &bias], vec![], "y");
    let inputs = HashMap::from([(
        "x".to_string(),
        random_tensor(DType::F32, &[batch, seq, k], &mut rng),
    )]);
    (b.finish(), inputs)
}

/// One MatMulNBits call of `bits` over random codes packed as mobius packs them (the rows of
/// B past K are padding), random scales (`flat`: `[N·blocks]`), random packed zero points
/// when `zero_points` (else the kernel's default), and a random bias when `bias`.
struct NBitsCall {
    size: (usize, usize, usize, usize),
    block: usize,
    bits: u8,
    zero_points: bool,
    bias: bool,
    flat: bool,
}

impl NBitsCall {
    /// The graph `y = MatMulNBits(x, …)` and a random `x`.
    fn graph(&self, seed: u64) -> (Graph, HashMap<String, Tensor>) {
        let (batch, seq, k, n) = self.size;
        let mut rng = Rng::new(seed);
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&[batch, seq, k]));
        b.output("y", DType::F32, dims(&[batch, seq, n]));
        let spec = QuantParams {
            bits: self.bits,
            block_size: self.block,
            symmetric: !self.zero_points,
        };
        let shapes = nbits_shapes(k, n, &spec);
        let codes = int_tensor(spec.value_dtype(), k * n, &mut rng);
        let packed = nbits_weight(&codes, k, n, &spec);
        let weight = float_or_bytes(&mut b, "w.b", DType::U8, shapes.weight.to_vec(), packed);
        let scale_shape = if self.flat {
            vec![shapes.scales.iter().product()]
        } else {
            shapes.scales.to_vec()
        };
        // Scales of weights in [-1, 1], as a quantizer gives them.
        let count: usize = scale_shape.iter().product();
        let half_range = (1u16 << (self.bits - 1)) as f32;
        let scales: Vec<f32> = (0..count)
            .map(|_| (rng.unit() * 2.0 - 1.0) as f32 / half_range)
            .collect();
        let bytes = bytemuck::cast_slice(&scales).to_vec();
        let scales = float_or_bytes(&mut b, "w.scales", DType::F32, scale_shape, bytes);
        let mut inputs = vec![x.clone(), weight, scales];
        if self.zero_points {
            let zp = int_tensor(spec.value_dtype(), spec.blocks(k) * n, &mut rng);
            let packed = nbits_zero_points(&zp, k, n, &spec);
            let shape = if self.flat {
                vec![packed.len()]
            } else {
                shapes.zero_points.to_vec()
            };
            inputs.push(float_or_bytes(&mut b, "w.zp", DType::U8, shape, packed));
        }
        if self.bias {
            inputs.resize(5, String::new());
            inputs.push(float_init(&mut b, "w.bias", vec![n], &mut rng));
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        b.node(
            "com.microsoft",
            "MatMulNBits",
            &refs,
            vec![
                ("K", Attr::Int(k as i64)),
                ("N", Attr::Int(n as i64)),
                ("bits", Attr::Int(self.bits.into())),
                ("block_size", Attr::Int(self.block as i64)),
            ],
            vec!["y".into()],
        );
        let x = random_tensor(DType::F32, &[batch, seq, k], &mut rng);
        (b.finish(), HashMap::from([("x".to_string(), x)]))
    }

    /// The inline rule that rewrites this call.
    fn rule(&self) -> &'static str {
        match (self.bias, self.zero_points) {
            (true, _) => "matmul-nbits-with-bias-to-dequantize",
            (false, true) => "matmul-nbits-with-zero-points-to-dequantize",
            (false, false) => "matmul-nbits-to-dequantize",
        }
    }
}

/// `len` random one-byte values of the 4- or 8-bit `dtype` (two's complement when signed).
fn int_tensor(dtype: DType, len: usize, rng: &mut Rng) -> Vec<u8> {
    let (limit, offset) = match dtype {
        DType::I4 => (16, 8),
        DType::U4 => (16, 0),
        DType::I8 => (256, 128),
        _ => (256, 0),
    };
    (0..len)
        .map(|_| (rng.below(limit) as i64 - offset) as i8 as u8)
        .collect()
}

/// The saved bytes of every initializer of `g`, by name.
fn initializer_bytes(g: &Graph) -> HashMap<String, Vec<u8>> {
    let mut eval = Evaluator::new(None);
    g.initializers
        .iter()
        .map(|i| {
            let source = i.source.as_ref().expect("initializers have sources");
            (i.name.clone(), eval.materialize(source).unwrap().2)
        })
        .collect()
}

fn sizes() -> impl Strategy<Value = (usize, usize, usize, usize)> {
    (1usize..3, 1usize..4, 1usize..80, 1usize..7)
}

fn quant_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        Just(DType::I4),
        Just(DType::U4),
        Just(DType::I8),
        Just(DType::U8)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn matmul_nbits(size in sizes(), block in prop_oneof![Just(16usize), Just(32)], dtype in quant_dtype(), seed in any::<u64>()) {
        let (graph, inputs) = quantized_matmul(size, block, dtype, seed);
        let rule = if matches!(dtype, DType::U4 | DType::U8) {
            "matmul-nbits"
        } else {
            "matmul-nbits-without-zero-points"
        };
        prove_on(rule, "cpu", graph, inputs, 1e-4)?;
    }

    #[test]
    fn matmul_nbits_bias(size in sizes(), block in prop_oneof![Just(16usize), Just(32)], zero_points in any::<bool>(), seed in any::<u64>()) {
        let (graph, inputs) = nbits_with_bias(size, block, zero_points, seed);
        let rule = if zero_points { "matmul-nbits-with-zero-points-bias" } else { "matmul-nbits-bias" };
        prove_on(rule, "cpu", graph, inputs, 1e-4)?;
    }

    #[test]
    fn pack_quantized_qkv_for_gqa(batch in 1usize..3, seq in 1usize..4, past in 0usize..3, kv in 1usize..3, group in 1usize..3, bias in any::<bool>(), symmetric in any::<bool>(), seed in any::<u64>()) {
        let (mut graph, inputs) = projected_gqa(batch, seq, past, kv, group, bias, false, seed);
        let request = QuantRequest {
            params: QuantParams { bits: 4, block_size: 16, symmetric },
            exclude: Vec::new(),
            embeddings: false,
        };
        let summary = quantize_graph(&mut graph, &request, false).unwrap();
        prop_assert_eq!(summary.weights, 3);
        let rule = if bias { "pack-qkv-with-bias-for-gqa" } else { "pack-qkv-for-gqa" };
        prove_on(rule, "cpu", graph, inputs, 1e-4)?;
    }

    #[test]
    fn matmul_nbits_to_dequantize(size in sizes(), block in prop_oneof![Just(16usize), Just(32)], bits in prop_oneof![Just(4u8), Just(8)], zero_points in any::<bool>(), bias in any::<bool>(), flat in any::<bool>(), seed in any::<u64>()) {
        let call = NBitsCall { size, block, bits, zero_points, bias, flat };
        let (graph, inputs) = call.graph(seed);
        prove_on(call.rule(), "onnx-standard", graph, inputs, 1e-4)?;
    }

    /// MatMulNBits → standard form (onnx-standard) → MatMulNBits (cpu) gives back the same
    /// bytes of B, scales and zero points, and DequantizeLinear with 4-bit values between.
    /// The weights have more than 8,192 values (smaller ones are constant-folded).
    #[test]
    fn matmul_nbits_round_trip_is_exact(size in (1usize..3, 1usize..3, 129usize..200, 64usize..70), block in prop_oneof![Just(16usize), Just(32)], bits in prop_oneof![Just(4u8), Just(8)], zero_points in any::<bool>(), bias in any::<bool>(), seed in any::<u64>()) {
        let call = NBitsCall { size, block, bits, zero_points, bias, flat: false };
        let (graph, _) = call.graph(seed);
        let standard = round_trip_step(&graph, "onnx-standard");
        let counts = standard.op_counts();
        prop_assert_eq!(counts.get("com.microsoft::MatMulNBits"), None);
        prop_assert_eq!(counts.get("DequantizeLinear"), Some(&1));
        let values = standard.initializers.iter().find(|i| i.name == "w.b__from_nbits").unwrap();
        let want = QuantParams { bits, block_size: block, symmetric: !zero_points }.value_dtype();
        prop_assert_eq!(values.dtype, want);
        let back = round_trip_step(&standard, "cpu");
        let counts = back.op_counts();
        prop_assert_eq!(counts.get("com.microsoft::MatMulNBits"), Some(&1));
        let node = back.nodes.iter().find(|n| n.op_type == "MatMulNBits").unwrap();
        let (before, after) = (initializer_bytes(&graph), initializer_bytes(&back));
        let original = graph.nodes.iter().find(|n| n.op_type == "MatMulNBits").unwrap();
        for (i, name) in original.inputs.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
            if i == 0 {
                continue;
            }
            prop_assert_eq!(&before[name], &after[&node.inputs[i]], "input {} ({})", i, name);
        }
    }
}

/// `graph` optimized for `ep` with every rule.
fn round_trip_step(graph: &Graph, ep: &str) -> Graph {
    let model = super::model(graph.clone());
    let options = super::options(None);
    let (out, _) = mobius::rulebook::optimize(&model, &mobius::ep::get_ep(ep).unwrap(), &options)
        .unwrap_or_else(|e| panic!("optimize for {ep}: {e}"));
    out.graph
}
