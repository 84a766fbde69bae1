//! Proofs of the attention recognition rules (`rewrites/recognize/attention.rules`), on the
//! default EP (which runs Attention), and the near misses they must leave alone.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Graph, GraphBuilder};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::common::compare::{assert_tensors_close, atol};
use super::{dims, optimize_with_rules, prove_on, random_tensor, scalar};

/// One decomposed attention: sizes, and how it is spelled.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    seq: usize,
    /// Cached tokens; `None`: no cache (k and v are the new tokens only).
    past: Option<usize>,
    kv_heads: usize,
    /// Query heads per kv head (`repeat_kv` when above 1).
    n_rep: usize,
    head_dim: usize,
    /// `Some(a, b)`: `(q·a)·(kᵀ·b)` (torch's sdpa); `None`: `(q·kᵀ)·c`.
    split_scale: Option<(f32, f32)>,
    /// Eager scale on the scores (when `split_scale` is `None`): divide instead of multiply.
    divide: bool,
    scale: f32,
    /// The NaN guard `Where(IsNaN(p), 0, p)` on the probabilities.
    guard: bool,
    /// The bias broadcasts over heads (`[B, 1, S, T]`) or is full (`[B, H, S, T]`).
    bias_per_head: bool,
    /// One kv head broadcast over the query heads by the MatMuls (no `repeat_kv`; Falcon's
    /// multi-query export): `kv_heads` 1, q with `n_rep` heads.
    broadcast: bool,
    /// The scores masked by a boolean input `keep` `[1, 1, S, T]` (−FLT_MAX where it is false)
    /// before the bias is added (GPT-Neo); never with the NaN guard.
    keep: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..3, 1usize..4, prop::option::of(0usize..4)),
        (
            1usize..3,
            1usize..3,
            prop_oneof![Just(4usize), Just(8), Just(16)],
        ),
        (
            prop::option::of((0.1f32..2.0, 0.1f32..2.0)),
            any::<bool>(),
            0.05f32..2.0,
        ),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (batch, seq, past),
                (kv_heads, n_rep, head_dim),
                (split, divide, scale),
                (guard, per_head, broadcast),
            )| Case {
                batch,
                seq,
                past,
                kv_heads: if broadcast { 1 } else { kv_heads },
                n_rep,
                head_dim,
                split_scale: split,
                divide,
                scale,
                guard,
                bias_per_head: per_head,
                broadcast,
                keep: false,
            },
        )
}

/// How a near miss differs from the recognised form.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Miss {
    None,
    /// The scale is a graph input, not a constant.
    ScaleInput,
    /// Softmax over the query axis.
    SoftmaxAxis,
    /// The bias has one key column (broadcast over the keys).
    BiasOneKey,
    /// `repeat_kv` unsqueezes axis 1: head i reads kv head i mod Hkv, not i / n_rep.
    RepeatOnAxis1,
}

impl Case {
    fn heads(&self) -> usize {
        self.kv_heads * self.n_rep
    }
    fn total(&self) -> usize {
        self.past.unwrap_or(0) + self.seq
    }
}

/// The decomposed attention of `c` (q `[B, H, S, D]`, k/v `[B, Hkv, S, D]`, caches
/// `[B, Hkv, P, D]`, bias input) with output `y`, and for a cache the presents as outputs.
fn sdpa_graph(c: &Case, miss: Miss) -> Graph {
    let (b_, s, d, h, kvh) = (c.batch, c.seq, c.head_dim, c.heads(), c.kv_heads);
    let t = c.total();
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, dims(&[b_, h, s, d]));
    let k_new = b.input("k", DType::F32, dims(&[b_, kvh, s, d]));
    let v_new = b.input("v", DType::F32, dims(&[b_, kvh, s, d]));
    let bias_shape = match miss {
        Miss::BiasOneKey => vec![b_, 1, s, 1],
        _ if c.bias_per_head => vec![b_, h, s, t],
        _ => vec![b_, 1, s, t],
    };
    let bias = b.input("bias", DType::F32, dims(&bias_shape));
    let cached = |b: &mut GraphBuilder, new: &str, name: &str, out: &str| match c.past {
        Some(p) => {
            let past = b.input(name, DType::F32, dims(&[b_, kvh, p, d]));
            b.output(out, DType::F32, dims(&[b_, kvh, t, d]));
            b.op_into("Concat", &[&past, new], vec![("axis", Attr::Int(-2))], out);
            out.to_string()
        }
        None => new.to_string(),
    };
    let k = cached(&mut b, &k_new, "past_key", "present_key");
    let v = cached(&mut b, &v_new, "past_value", "present_value");
    let repeat = |b: &mut GraphBuilder, x: &str, width: usize| {
        if c.n_rep == 1 || c.broadcast {
            return x.to_string();
        }
        let axis = if miss == Miss::RepeatOnAxis1 { 1 } else { 2 };
        let axes = b.const_i64(&[axis]);
        let u = b.op("Unsqueeze", &[x, &axes], vec![]);
        let shape = if axis == 2 {
            [b_, kvh, c.n_rep, t, width]
        } else {
            [b_, c.n_rep, kvh, t, width]
        };
        let shape: Vec<i64> = shape.iter().map(|&v| v as i64).collect();
        let shape = b.const_i64(&shape);
        let e = b.op("Expand", &[&u, &shape], vec![]);
        let flat = b.const_i64(&[b_ as i64, h as i64, t as i64, width as i64]);
        b.op("Reshape", &[&e, &flat], vec![])
    };
    let k = repeat(&mut b, &k, d);
    let v = repeat(&mut b, &v, d);
    let kt = b.op(
        "Transpose",
        &[&k],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let constant = |b: &mut GraphBuilder, value: f32| -> String {
        if miss == Miss::ScaleInput {
            b.input("scale", DType::F32, dims(&[]))
        } else {
            scalar(b, value)
        }
    };
    let scores = match c.split_scale {
        Some((a, sb)) => {
            let ca = constant(&mut b, a);
            let qa = b.op("Mul", &[&q, &ca], vec![]);
            let cb = scalar(&mut b, sb);
            let kb = b.op("Mul", &[&cb, &kt], vec![]);
            b.op("MatMul", &[&qa, &kb], vec![])
        }
        None => {
            let raw = b.op("MatMul", &[&q, &kt], vec![]);
            let cs = constant(&mut b, c.scale);
            b.op(if c.divide { "Div" } else { "Mul" }, &[&raw, &cs], vec![])
        }
    };
    let scores = if c.keep {
        let keep = b.input("keep", DType::Bool, dims(&[1, 1, s, t]));
        let fill = scalar(&mut b, -f32::MAX);
        b.op("Where", &[&keep, &scores, &fill], vec![])
    } else {
        scores
    };
    let biased = b.op("Add", &[&scores, &bias], vec![]);
    let axis = if miss == Miss::SoftmaxAxis { 2 } else { -1 };
    let p = b.op("Softmax", &[&biased], vec![("axis", Attr::Int(axis))]);
    let p = if c.guard {
        let nan = b.op("IsNaN", &[&p], vec![]);
        let zero = scalar(&mut b, 0.0);
        b.op("Where", &[&nan, &zero, &p], vec![])
    } else {
        p
    };
    b.output("y", DType::F32, dims(&[b_, h, s, d]));
    b.op_into("MatMul", &[&p, &v], vec![], "y");
    b.finish()
}

/// Random values for every input of `g` (floats in [−4, 4]: the bias is never at or below
/// −FLT_MAX, where Attention and the decomposition differ, see the rule file).
pub(super) fn inputs(g: &Graph, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs
        .iter()
        .map(|v| {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    mobius::ir::Dim::Fixed(x) => *x as usize,
                    _ => unreachable!("proof graphs have static shapes"),
                })
                .collect();
            if v.name == "keep" {
                // Every query row keeps key 0 (a row with no key kept is a fully masked row,
                // where Attention and the decomposition differ, see the rule file).
                let t = *shape.last().unwrap();
                let n = shape.iter().product::<usize>();
                let values = (0..n).map(|i| i % t == 0 || rng.below(2) == 1).collect();
                return (v.name.clone(), Tensor::bool(shape, values));
            }
            (v.name.clone(), random_tensor(v.dtype, &shape, &mut rng))
        })
        .collect()
}

/// The rule that recognises case `c`.
fn rule_of(c: &Case) -> &'static str {
    if c.keep {
        "masked-scores-to-attention"
    } else if c.guard {
        "guarded-sdpa-to-attention"
    } else {
        "sdpa-to-attention"
    }
}

/// `Reshape(Transpose(Reshape(k, [-1, T, D]); [0, 2, 1]), [B, H, D, T])` with the shapes
/// computed from `Shape(k)` as torch's sdpa decomposition writes them, or constant.
fn key_through_3d(batch: usize, heads: usize, t: usize, d: usize, computed: bool) -> Graph {
    let mut b = GraphBuilder::new("g");
    let k = b.input("k", DType::F32, dims(&[batch, heads, t, d]));
    let (merged, split) = if computed {
        let shape = b.op("Shape", &[&k], vec![]);
        let slice = |b: &mut GraphBuilder, start: i64, end: i64| {
            let (s, e) = (b.const_i64(&[start]), b.const_i64(&[end]));
            b.op("Slice", &[&shape, &s, &e], vec![])
        };
        let last = slice(&mut b, -1, i64::MAX);
        let len = slice(&mut b, -2, -1);
        let lead = slice(&mut b, i64::MIN, -2);
        let minus = b.const_i64(&[-1]);
        let axis = vec![("axis", Attr::Int(0))];
        let merged = b.op("Concat", &[&minus, &len, &last], axis.clone());
        let split = b.op("Concat", &[&lead, &last, &len], axis);
        (merged, split)
    } else {
        let merged = b.const_i64(&[-1, t as i64, d as i64]);
        let split = b.const_i64(&[batch as i64, heads as i64, d as i64, t as i64]);
        (merged, split)
    };
    let k3 = b.op("Reshape", &[&k, &merged], vec![]);
    let k3t = b.op(
        "Transpose",
        &[&k3],
        vec![("perm", Attr::Ints(vec![0, 2, 1]))],
    );
    b.output("kt", DType::F32, dims(&[batch, heads, d, t]));
    b.op_into("Reshape", &[&k3t, &split], vec![], "kt");
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn sdpa_to_attention(mut c in case(), seed in any::<u64>()) {
        c.guard = false;
        let g = sdpa_graph(&c, Miss::None);
        prove_on(rule_of(&c), "default", g.clone(), inputs(&g, seed), 1e-4)?;
    }

    #[test]
    fn guarded_sdpa_to_attention(mut c in case(), seed in any::<u64>()) {
        c.guard = true;
        let g = sdpa_graph(&c, Miss::None);
        prove_on(rule_of(&c), "default", g.clone(), inputs(&g, seed), 1e-4)?;
    }

    #[test]
    fn masked_scores_to_attention(mut c in case(), seed in any::<u64>()) {
        c.guard = false;
        c.keep = true;
        let g = sdpa_graph(&c, Miss::None);
        prove_on(rule_of(&c), "default", g.clone(), inputs(&g, seed), 1e-4)?;
    }

    #[test]
    fn transposed_key_through_3d(batch in 1usize..3, heads in 1usize..4, t in 1usize..5, d in 1usize..5, computed in any::<bool>(), seed in any::<u64>()) {
        let g = key_through_3d(batch, heads, t, d, computed);
        prove_on("transposed-key-through-3d", "default", g.clone(), inputs(&g, seed), 0.0)?;
    }
}

/// `g` optimized with all rules for the default EP.
fn optimized(g: &Graph) -> Graph {
    let rules = mobius::rulebook::rules().unwrap().rules;
    let (out, _) = optimize_with_rules(
        &super::model(g.clone()),
        &mobius::ep::get_ep("default").unwrap(),
        &super::options(None),
        &rules,
    )
    .unwrap();
    out.graph
}

/// The number of `Attention` nodes after optimizing `g` with all rules for the default EP.
fn attentions(g: &Graph) -> usize {
    let out = optimized(g);
    out.op_counts().get("Attention").copied().unwrap_or(0)
}

/// `a` and `b` agree within 1e-4 on random inputs (through the interpreter).
fn assert_same_values(a: &Graph, b: &Graph) {
    let feeds = inputs(a, 7);
    let run = |g: &Graph| {
        let mut weights = mobius::weights::eval::Evaluator::new(None);
        mobius::interp::run_graph(g, &feeds, &mut weights).unwrap()
    };
    let (want, got) = (run(a), run(b));
    for (name, x) in &want {
        assert_tensors_close(name, x, &got[name], atol(1e-4));
    }
}

#[test]
fn near_misses_are_not_rewritten() {
    let base = Case {
        batch: 2,
        seq: 3,
        past: Some(2),
        kv_heads: 2,
        n_rep: 2,
        head_dim: 8,
        split_scale: Some((0.5, 0.5)),
        divide: false,
        scale: 0.25,
        guard: true,
        bias_per_head: false,
        broadcast: false,
        keep: false,
    };
    assert_eq!(
        attentions(&sdpa_graph(&base, Miss::None)),
        1,
        "the base case is recognised"
    );
    let eager = Case {
        split_scale: None,
        guard: false,
        ..base.clone()
    };
    assert_eq!(attentions(&sdpa_graph(&eager, Miss::None)), 1);
    for miss in [Miss::SoftmaxAxis, Miss::BiasOneKey] {
        assert_eq!(
            attentions(&sdpa_graph(&base, miss)),
            0,
            "{miss:?} was rewritten"
        );
    }
    // kv heads repeated the other way round (head i reads kv head i mod Hkv) are not read as
    // grouped heads: the Attention reads the repeated k/v as they are (one kv head per query
    // head, no cache input), and computes what the graph does.
    let g = sdpa_graph(&base, Miss::RepeatOnAxis1);
    let out = optimized(&g);
    let attention: Vec<_> = out
        .nodes
        .iter()
        .filter(|n| n.op_type == "Attention")
        .collect();
    assert_eq!(attention.len(), 1);
    assert_eq!(attention[0].inputs.len(), 4, "{:?}", attention[0]);
    assert_same_values(&g, &out);
    // A scale that is a graph input: on the scores, nothing is recognised; on q (sdpa), it
    // stays a Mul in front of the Attention (which takes the constant on kᵀ as its scale).
    assert_eq!(attentions(&sdpa_graph(&eager, Miss::ScaleInput)), 0);
    let g = sdpa_graph(&base, Miss::ScaleInput);
    let out = optimized(&g);
    assert_eq!(
        out.op_counts().get("Mul"),
        Some(&1),
        "{:?}",
        out.op_counts()
    );
    assert_same_values(&g, &out);
    // A Reshape that does not merge the leading axes is not a transposed key.
    let mut b = GraphBuilder::new("g");
    let k = b.input("k", DType::F32, dims(&[2, 3, 4, 5]));
    let merged = b.const_i64(&[-1, 4, 5]);
    let split = b.const_i64(&[2, 3, 4, 5]);
    let k3 = b.op("Reshape", &[&k, &merged], vec![]);
    let k3t = b.op(
        "Transpose",
        &[&k3],
        vec![("perm", Attr::Ints(vec![0, 2, 1]))],
    );
    b.output("kt", DType::F32, dims(&[2, 3, 4, 5]));
    b.op_into("Reshape", &[&k3t, &split], vec![], "kt");
    let g = b.finish();
    let rules = mobius::rulebook::rules().unwrap().rules;
    let (out, _) = optimize_with_rules(
        &super::model(g.clone()),
        &mobius::ep::get_ep("default").unwrap(),
        &super::options(None),
        &rules,
    )
    .unwrap();
    assert_eq!(out.graph.op_counts(), g.op_counts());
}
