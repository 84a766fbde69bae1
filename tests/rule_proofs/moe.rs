//! Proofs of the MoE fusion (`rewrites/fusion/moe.rules`) and of its inverse
//! (`rewrites/inline/moe.rules`: random MoE calls over random weights, rewritten into the dense
//! block for onnx-standard). The fusion: the dense mixture-of-experts block
//! exactly as the model builder writes it ([`sparse_moe`]: random batch, sequence, width,
//! expert width, number of experts, top-k, renormalisation, f32 or f16), its checkpoint
//! weights replaced by random values, is rewritten into `com.microsoft::MoE` over re-laid-out
//! expert weights and compared with the dense block through the reference interpreter (whose
//! MoE is cross-checked against onnxruntime's CPU kernel in tests/ort).
//!
//! The QMoE fusion and its inverse likewise: the same block with its expert stacks quantized
//! as `--quant int4` quantizes them (signed 4-bit values, block-wise scales, no zero points),
//! rewritten into `com.microsoft::QMoE` over packed experts; random QMoE calls over random
//! packed values and scales rewritten into the dense block over DequantizeLinear.
//!
//! The kernel and TopK break ties of the k-th and (k+1)-th router probability differently
//! (the higher expert index, the lower), a difference the rule documents: cases with such a
//! tie (only equal f16 logits give one here) are rejected.

use std::collections::HashMap;

use half::f16;
use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder, QuantParams, TensorData, TensorSource};
use mobius::models::components::{sparse_moe, ExpertWeights, MoeSpec, Router};
use mobius::passes::quantize::{quantize_graph, QuantRequest};
use proptest::prelude::*;

use super::{dims, prove_on};
use mobius::ops::Tensor;

/// Sizes of one case: batch, sequence, hidden, expert width, experts, top-k.
pub(super) type Sizes = (usize, usize, usize, usize, usize, usize);

pub(super) fn sizes() -> impl Strategy<Value = Sizes> {
    (1usize..3, 1usize..4, 2usize..9, 1usize..5, 1usize..7)
        .prop_flat_map(|(b, s, h, i, e)| (Just(b), Just(s), Just(h), Just(i), Just(e), 1..=e))
}

/// Values in `[-scale, scale)` rounded to `dtype`.
pub(super) fn values(n: usize, scale: f64, dtype: DType, rng: &mut Rng) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v = ((rng.unit() * 2.0 - 1.0) * scale) as f32;
            match dtype {
                DType::F16 => f16::from_f32(v).to_f32(),
                _ => v,
            }
        })
        .collect()
}

/// `v` as little-endian `dtype` bytes (f16 or f32).
pub(super) fn bytes(v: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F16 => v
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect(),
        _ => bytemuck::cast_slice(v).to_vec(),
    }
}

/// The block of `sizes` in `dtype` (`y = sparse_moe(x)`), its weights random, with an input x
/// and the router's weight `[H, E]` (as the graph holds it).
fn dense_block(
    sizes: Sizes,
    normalize: bool,
    dtype: DType,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>, Vec<f32>) {
    scaled_dense_block(sizes, normalize, dtype, false, seed)
}

/// [`dense_block`], with the experts' weights scaled by `sqrt(8 / fan-in)` when `fan_in` and
/// their fan-in is over 8 (wide blocks keep outputs of order 1).
fn scaled_dense_block(
    (batch, seq, h, i, e, k): Sizes,
    normalize: bool,
    dtype: DType,
    fan_in: bool,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(&[batch, seq, h]));
    b.output("y", dtype, dims(&[batch, seq, h]));
    let spec = MoeSpec {
        hidden: h,
        intermediate: i,
        experts: e,
        top_k: k,
        router: Router::Softmax { normalize },
        weights: ExpertWeights::PROJ,
        scaled_inputs: false,
        expert_norm: None,
        zero_experts: 0,
    };
    let y = sparse_moe(&mut b, &x, "moe", &spec, dtype);
    b.op_into("Identity", &[&y], vec![], "y");
    let mut g = b.finish();
    let mut router = Vec::new();
    for init in &mut g.initializers {
        if matches!(init.source, Some(TensorSource::Inline(_))) {
            continue;
        }
        let n = init.shape.iter().product();
        // Outputs of order 1 (their f16 rounding is then what the tolerance bounds).
        let router_weight = init.name == "moe.gate.weight_t";
        let scale = match (router_weight, fan_in, init.shape.first()) {
            (true, ..) => 2.0,
            (false, true, Some(&rows)) if rows > 8 => 1.2 * (8.0 / rows as f64).sqrt(),
            _ => 1.2,
        };
        let v = values(n, scale, dtype, &mut rng);
        if router_weight {
            router = v.clone();
        }
        init.source = Some(TensorSource::Inline(TensorData {
            dtype,
            shape: init.shape.clone(),
            bytes: bytes(&v, dtype),
        }));
    }
    let xs = values(batch * seq * h, 1.0, dtype, &mut rng);
    let input = Tensor::float(dtype, vec![batch, seq, h], xs);
    (g, HashMap::from([("x".to_string(), input)]), router)
}

/// Whether some token's k-th and (k+1)-th router logits are equal once rounded to `dtype`
/// (then so are their probabilities, and the kernel and TopK pick different experts), or so
/// close that the rounding of the products could make them so.
fn boundary_tie(x: &Tensor, router: &[f32], (_, _, h, _, e, k): Sizes, dtype: DType) -> bool {
    if k == e {
        return false;
    }
    let xs = x.as_f64();
    xs.chunks(h).any(|token| {
        let mut logits: Vec<f64> = (0..e)
            .map(|j| (0..h).map(|c| token[c] * router[c * e + j] as f64).sum())
            .collect();
        logits.sort_by(|a, b| b.partial_cmp(a).unwrap());
        let gap = logits[k - 1] - logits[k];
        let scale = logits[0].abs().max(logits[e - 1].abs()).max(1e-3);
        let eps = match dtype {
            DType::F16 => 4.0 * 2f64.powi(-10),
            _ => 1e-5,
        };
        gap <= eps * scale
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn dense_moe_fusion(
        sizes in sizes(),
        normalize in any::<bool>(),
        half in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (graph, inputs, router) = dense_block(sizes, normalize, dtype, seed);
        prop_assume!(!boundary_tie(&inputs["x"], &router, sizes, dtype));
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("dense-moe", "cpu", graph, inputs, tol)?;
    }
}

/// `graph` with its expert stacks (`*gate_proj.weight_t`, `*up_proj.weight_t` `[H, E·I]`,
/// `*down_proj.weight_t` `[E·I, H]`) computed as `Concat` of one f32/f16 initializer per
/// expert (the gate and up ones along their columns, the down ones along their rows), as
/// `recognize/moe_loop.rules` stacks an export's experts.
fn expert_concats(mut graph: Graph, experts: usize) -> Graph {
    let mut concats = Vec::new();
    let mut parts_of = Vec::new();
    graph.initializers.retain(|init| {
        let columns =
            init.name.ends_with("gate_proj.weight_t") || init.name.ends_with("up_proj.weight_t");
        let rows = init.name.ends_with("down_proj.weight_t");
        let Some(TensorSource::Inline(data)) = &init.source else {
            return true;
        };
        if !(columns || rows) {
            return true;
        }
        let [r, c] = init.shape[..] else {
            return true;
        };
        let width = data.bytes.len() / (r * c);
        let mut names = Vec::new();
        for e in 0..experts {
            let (shape, bytes): (Vec<usize>, Vec<u8>) = if columns {
                let w = c / experts;
                let bytes = (0..r)
                    .flat_map(|row| {
                        let at = (row * c + e * w) * width;
                        data.bytes[at..at + w * width].to_vec()
                    })
                    .collect();
                (vec![r, w], bytes)
            } else {
                let h = r / experts;
                let at = e * h * c * width;
                (vec![h, c], data.bytes[at..at + h * c * width].to_vec())
            };
            let name = format!("{}.{e}", init.name);
            parts_of.push(mobius::ir::Initializer {
                name: name.clone(),
                dtype: init.dtype,
                shape: shape.clone(),
                source: Some(TensorSource::Inline(TensorData {
                    dtype: init.dtype,
                    shape,
                    bytes,
                })),
            });
            names.push(name);
        }
        concats.push(mobius::ir::Node {
            name: format!("{}_concat", init.name),
            domain: String::new(),
            op_type: "Concat".into(),
            inputs: names,
            outputs: vec![init.name.clone()],
            attrs: [("axis".to_string(), Attr::Int(i64::from(columns)))]
                .into_iter()
                .collect(),
        });
        false
    });
    assert_eq!(concats.len(), 3, "the gate, up and down stacks");
    graph.initializers.extend(parts_of);
    concats.append(&mut graph.nodes);
    graph.nodes = concats;
    graph
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The dense block over stacks that are Concats of per-expert initializers.
    #[test]
    fn dense_moe_fusion_of_expert_concats(
        sizes in sizes(),
        normalize in any::<bool>(),
        half in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (graph, inputs, router) = dense_block(sizes, normalize, dtype, seed);
        prop_assume!(!boundary_tie(&inputs["x"], &router, sizes, dtype));
        let graph = expert_concats(graph, sizes.4);
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("dense-moe", "cpu", graph, inputs, tol)?;
    }
}

/// Whether some row of `router` (`[T, E]`) has its k-th and (k+1)-th largest values within
/// `eps` of each other (the k-th of equal ones is where the kernel and TopK differ).
fn router_tie(router: &[f32], e: usize, k: usize, eps: f64) -> bool {
    k < e
        && router.chunks(e).any(|row| {
            let mut row: Vec<f64> = row.iter().map(|&v| v as f64).collect();
            row.sort_by(|a, b| b.partial_cmp(a).unwrap());
            row[k - 1] - row[k] <= eps
        })
}

/// One `com.microsoft::MoE` call as onnxruntime's CPU kernel takes it: x `[B, S, H]` and router
/// logits `[B·S, E]` inputs, random fc1 `[E, 2·I, H]` and fc2 `[E, H, I]` initializers, SwiGLU
/// parameters written out (α = 1, β = 0, no limit) or left unset.
fn moe_call(
    (batch, seq, h, i, e, k): Sizes,
    normalize: bool,
    explicit: bool,
    dtype: DType,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(&[batch, seq, h]));
    let router = b.input("router", dtype, dims(&[batch * seq, e]));
    b.output("y", dtype, dims(&[batch, seq, h]));
    let mut weight = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>| {
        let v = values(shape.iter().product(), 1.2, dtype, &mut rng);
        b.initializer(mobius::ir::Initializer {
            name: name.into(),
            dtype,
            shape: shape.clone(),
            source: Some(TensorSource::Inline(TensorData {
                dtype,
                shape,
                bytes: bytes(&v, dtype),
            })),
        })
    };
    let fc1 = weight(&mut b, "fc1", vec![e, 2 * i, h]);
    let fc2 = weight(&mut b, "fc2", vec![e, h, i]);
    let mut attrs = vec![
        ("activation_type", Attr::String("swiglu".into())),
        ("swiglu_fusion", Attr::Int(1)),
        ("k", Attr::Int(k as i64)),
        ("normalize_routing_weights", Attr::Int(i64::from(normalize))),
    ];
    if explicit {
        attrs.extend([
            ("activation_alpha", Attr::Float(1.0)),
            ("activation_beta", Attr::Float(0.0)),
            ("swiglu_limit", Attr::Float(f32::INFINITY)),
        ]);
    }
    b.node(
        "com.microsoft",
        "MoE",
        &[&x, &router, &fc1, "", &fc2],
        attrs,
        vec!["y".into()],
    );
    let xs = values(batch * seq * h, 1.0, dtype, &mut rng);
    let logits = values(batch * seq * e, 2.0, dtype, &mut rng);
    let inputs = HashMap::from([
        (
            "x".to_string(),
            Tensor::float(dtype, vec![batch, seq, h], xs),
        ),
        (
            "router".to_string(),
            Tensor::float(dtype, vec![batch * seq, e], logits.clone()),
        ),
    ]);
    (b.finish(), inputs, logits)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn moe_to_dense_inline(
        sizes in sizes(),
        normalize in any::<bool>(),
        explicit in any::<bool>(),
        half in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (graph, inputs, logits) = moe_call(sizes, normalize, explicit, dtype, seed);
        prop_assume!(!router_tie(&logits, sizes.4, sizes.5, 1e-6));
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("moe-to-dense", "onnx-standard", graph, inputs, tol)?;
    }
}

/// Sizes of a QMoE case ([`Sizes`]) with hidden and expert widths multiples of the block size
/// (16 or 32), and that block size.
fn qmoe_sizes() -> impl Strategy<Value = (Sizes, usize)> {
    (
        1usize..3,
        1usize..3,
        1usize..3,
        1usize..3,
        1usize..5,
        prop_oneof![Just(16usize), Just(32)],
    )
        .prop_flat_map(|(b, s, hm, im, e, block)| {
            (
                (
                    Just(b),
                    Just(s),
                    Just(hm * block),
                    Just(im * block),
                    Just(e),
                    1..=e,
                ),
                Just(block),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The dense block of renormalised top-k weights, its expert stacks (not its router)
    /// quantized to signed 4-bit values in blocks of `block` along the input dimension.
    #[test]
    fn dense_qmoe_fusion(
        (sizes, block) in qmoe_sizes(),
        half in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (mut graph, inputs, router) = scaled_dense_block(sizes, true, dtype, true, seed);
        prop_assume!(!boundary_tie(&inputs["x"], &router, sizes, dtype));
        let request = QuantRequest {
            params: QuantParams::new(4, block, true),
            exclude: vec!["moe.gate.weight_t".into()],
            embeddings: false,
        };
        let summary = quantize_graph(&mut graph, &request, false).unwrap();
        prop_assert_eq!(summary.weights, 3);
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("dense-qmoe", "cpu", graph, inputs, tol)?;
    }
}

/// An initializer `name` of `dtype` and `shape` holding `bytes`.
fn inline_init(
    b: &mut GraphBuilder,
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
) -> String {
    b.initializer(mobius::ir::Initializer {
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

/// One `com.microsoft::QMoE` call as `dense-qmoe` writes it: x `[B, S, H]` and router logits
/// `[B·S, E]` inputs, random packed 4-bit experts fc1 `[E, 2·I, H/2]` and fc2 `[E, H, I/2]`
/// (any byte is two values) with random block-wise scales `[E, 2·I, H/block]` and
/// `[E, H, I/block]` (weights of order `1/sqrt(fan-in)`), the optional attributes
/// (SwiGLU's α, β and limit, `quant_type`, `expert_weight_bits`) written out or left unset,
/// and `accuracy_level` (which neither side reads).
fn qmoe_call(
    ((batch, seq, h, i, e, k), block): (Sizes, usize),
    explicit: bool,
    level: i64,
    dtype: DType,
    seed: u64,
) -> (Graph, HashMap<String, Tensor>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", dtype, dims(&[batch, seq, h]));
    let router = b.input("router", dtype, dims(&[batch * seq, e]));
    b.output("y", dtype, dims(&[batch, seq, h]));
    let packed = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, rng: &mut Rng| {
        let n: usize = shape.iter().product();
        let data = (0..n).map(|_| rng.below(256) as u8).collect();
        inline_init(b, name, DType::U8, shape, data)
    };
    let scales = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>, rng: &mut Rng| {
        let fan_in = if name == "fc1_scales" { h } else { i };
        let scale = 1.0 / (8.0 * (fan_in as f64).sqrt());
        let v = values(shape.iter().product(), scale, dtype, rng);
        inline_init(b, name, dtype, shape, bytes(&v, dtype))
    };
    let fc1 = packed(&mut b, "fc1", vec![e, 2 * i, h / 2], &mut rng);
    let fc1_scales = scales(&mut b, "fc1_scales", vec![e, 2 * i, h / block], &mut rng);
    let fc2 = packed(&mut b, "fc2", vec![e, h, i / 2], &mut rng);
    let fc2_scales = scales(&mut b, "fc2_scales", vec![e, h, i / block], &mut rng);
    let mut attrs = vec![
        ("accuracy_level", Attr::Int(level)),
        ("activation_type", Attr::String("swiglu".into())),
        ("block_size", Attr::Int(block as i64)),
        ("swiglu_fusion", Attr::Int(1)),
        ("k", Attr::Int(k as i64)),
        ("normalize_routing_weights", Attr::Int(1)),
    ];
    if explicit {
        attrs.extend([
            ("activation_alpha", Attr::Float(1.0)),
            ("activation_beta", Attr::Float(0.0)),
            ("swiglu_limit", Attr::Float(f32::INFINITY)),
            ("quant_type", Attr::String("int".into())),
            ("expert_weight_bits", Attr::Int(4)),
        ]);
    }
    b.node(
        "com.microsoft",
        "QMoE",
        &[&x, &router, &fc1, &fc1_scales, "", &fc2, &fc2_scales],
        attrs,
        vec!["y".into()],
    );
    let xs = values(batch * seq * h, 1.0, dtype, &mut rng);
    let logits = values(batch * seq * e, 2.0, dtype, &mut rng);
    let inputs = HashMap::from([
        (
            "x".to_string(),
            Tensor::float(dtype, vec![batch, seq, h], xs),
        ),
        (
            "router".to_string(),
            Tensor::float(dtype, vec![batch * seq, e], logits.clone()),
        ),
    ]);
    (b.finish(), inputs, logits)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn qmoe_to_dense_inline(
        sizes in qmoe_sizes(),
        explicit in any::<bool>(),
        level in prop_oneof![Just(0i64), Just(4)],
        half in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let dtype = if half { DType::F16 } else { DType::F32 };
        let (graph, inputs, logits) = qmoe_call(sizes, explicit, level, dtype, seed);
        let (_, _, _, _, e, k) = sizes.0;
        prop_assume!(!router_tie(&logits, e, k, 1e-6));
        let tol = if half { 2e-2 } else { 1e-5 };
        prove_on("qmoe-to-dense", "onnx-standard", graph, inputs, tol)?;
    }
}
