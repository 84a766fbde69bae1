//! Proofs of the quantized-weight rules: the MatMulNBits fusion (`rewrites/fusion/
//! matmul_nbits.rules`) on random block-quantized weights, and PackQKV over weights that
//! `--quant` turned into `DequantizeLinear` of initializers.

use std::collections::HashMap;

use mobius::interp::Tensor;
use mobius::ir::{
    Attr, DType, Graph, GraphBuilder, Initializer, QuantParams, TensorData, TensorSource,
};
use mobius::quant::pass::{quantize_graph, QuantRequest};
use mobius::verify::Rng;
use proptest::prelude::*;

use super::{dims, projected_gqa, prove_on, random_tensor};

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
        let (mut graph, inputs) = projected_gqa(batch, seq, past, kv, group, bias, seed);
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
}
