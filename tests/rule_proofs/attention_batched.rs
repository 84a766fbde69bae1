//! Proof of `batched-sdpa-to-attention` (`rewrites/recognize/attention.rules`): attention on
//! 3-D `[B·H, ·, ·]` tensors as BLOOM's eager attention (baddbmm) writes it.

use mobius::ir::{Attr, DType, Graph, GraphBuilder};
use proptest::prelude::*;

use super::attention_recognize::inputs;
use super::{dims, prove_on, scalar};

/// One batched attention: sizes, and how it is spelled.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    heads: usize,
    seq: usize,
    /// Cached tokens; `None`: no cache.
    past: Option<usize>,
    head_dim: usize,
    scale: f32,
    /// Scores divided by the scale's inverse instead of multiplied.
    divide: bool,
    /// The 3-D bias: `None`, or `(leading dim is B·H (else 1), one query row (else S))`.
    bias: Option<(bool, bool)>,
    /// The bias scaled by a constant (`β·alibi`), the scores' operand first or second.
    beta: Option<f32>,
    bias_first: bool,
    /// The 4-D mask per head (`[B, H, S, T]`) or broadcast (`[B, 1, S, T]`).
    mask_per_head: bool,
    /// The probabilities merged to `[B·H, S, −1]` (else `[B·H, S, T]`).
    minus_one: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..3, 1usize..4, 1usize..4, prop::option::of(0usize..4)),
        (
            prop_oneof![Just(4usize), Just(8)],
            0.05f32..2.0,
            any::<bool>(),
        ),
        (
            prop::option::of((any::<bool>(), any::<bool>())),
            prop::option::of(0.5f32..2.0),
            any::<bool>(),
        ),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (batch, heads, seq, past),
                (head_dim, scale, divide),
                (bias, beta, bias_first),
                (mask_per_head, minus_one),
            )| Case {
                batch,
                heads,
                seq,
                past,
                head_dim,
                scale,
                divide,
                bias,
                beta,
                bias_first,
                mask_per_head,
                minus_one,
            },
        )
}

/// The batched attention of `c`: q `[B, H, S, D]`, k/v `[B, H, S, D]` (after caches `[B, H,
/// P, D]`), the 3-D bias and the 4-D mask inputs; outputs `y` `[B, H, S, D]`, the 3-D product
/// `y3` (when merged by `[B·H, S, −1]`) and, with a cache, the presents.
fn batched_graph(c: &Case) -> Graph {
    let (b_, h, s, d) = (c.batch, c.heads, c.seq, c.head_dim);
    let t = c.past.unwrap_or(0) + s;
    let bh = (b_ * h) as i64;
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, dims(&[b_, h, s, d]));
    let k_new = b.input("k", DType::F32, dims(&[b_, h, s, d]));
    let v_new = b.input("v", DType::F32, dims(&[b_, h, s, d]));
    let mask = b.input(
        "mask",
        DType::F32,
        dims(&[b_, if c.mask_per_head { h } else { 1 }, s, t]),
    );
    let cached = |b: &mut GraphBuilder, new: &str, name: &str, out: &str| match c.past {
        Some(p) => {
            let past = b.input(name, DType::F32, dims(&[b_, h, p, d]));
            b.output(out, DType::F32, dims(&[b_, h, t, d]));
            b.op_into("Concat", &[&past, new], vec![("axis", Attr::Int(-2))], out);
            out.to_string()
        }
        None => new.to_string(),
    };
    let k = cached(&mut b, &k_new, "past_key", "present_key");
    let v = cached(&mut b, &v_new, "past_value", "present_value");
    let merge = |b: &mut GraphBuilder, x: &str, rows: usize| {
        let shape = b.const_i64(&[bh, rows as i64, d as i64]);
        b.op("Reshape", &[x, &shape], vec![])
    };
    let q3 = merge(&mut b, &q, s);
    let k3 = merge(&mut b, &k, t);
    let v3 = merge(&mut b, &v, t);
    let kt = b.op(
        "Transpose",
        &[&k3],
        vec![("perm", Attr::Ints(vec![0, 2, 1]))],
    );
    let raw = b.op("MatMul", &[&q3, &kt], vec![]);
    let scores = if c.divide {
        let inv = scalar(&mut b, 1.0 / c.scale);
        b.op("Div", &[&raw, &inv], vec![])
    } else {
        let cs = scalar(&mut b, c.scale);
        b.op("Mul", &[&raw, &cs], vec![])
    };
    let scores = match c.bias {
        Some((full, one_row)) => {
            let shape = [
                if full { b_ * h } else { 1 },
                if one_row { 1 } else { s },
                t,
            ];
            let bias = b.input("bias", DType::F32, dims(&shape));
            let bias = match c.beta {
                Some(beta) => {
                    let beta = scalar(&mut b, beta);
                    b.op("Mul", &[&bias, &beta], vec![])
                }
                None => bias,
            };
            if c.bias_first {
                b.op("Add", &[&bias, &scores], vec![])
            } else {
                b.op("Add", &[&scores, &bias], vec![])
            }
        }
        None => scores,
    };
    let split = b.const_i64(&[b_ as i64, h as i64, s as i64, t as i64]);
    let scores4 = b.op("Reshape", &[&scores, &split], vec![]);
    let biased = b.op("Add", &[&scores4, &mask], vec![]);
    let p = b.op("Softmax", &[&biased], vec![("axis", Attr::Int(-1))]);
    let last = if c.minus_one { -1 } else { t as i64 };
    let pshape = b.const_i64(&[bh, s as i64, last]);
    let p3 = b.op("Reshape", &[&p, &pshape], vec![]);
    // The 3-D product is an output too where the rule also reads it from the Attention
    // (merged by the graph's own [B·H, S, −1]).
    let y3 = if c.minus_one {
        b.output("y3", DType::F32, dims(&[b_ * h, s, d]));
        b.op_into("MatMul", &[&p3, &v3], vec![], "y3");
        "y3".to_string()
    } else {
        b.op("MatMul", &[&p3, &v3], vec![])
    };
    let out = b.const_i64(&[b_ as i64, h as i64, s as i64, d as i64]);
    b.output("y", DType::F32, dims(&[b_, h, s, d]));
    b.op_into("Reshape", &[&y3, &out], vec![], "y");
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn batched_sdpa_to_attention(c in case(), seed in any::<u64>()) {
        let g = batched_graph(&c);
        prove_on("batched-sdpa-to-attention", "default", g.clone(), inputs(&g, seed), 1e-4)?;
    }
}

/// MPT's attention: `Softmax(Where(m, low, q·kᵀ·c + bias)) · v` over q `[B, H, S, D]`, k and
/// v `[B, H, T, D]`, m `[B, 1, S, T]` boolean, bias `[1, H, 1, T]`, low −FLT_MAX or −inf; every
/// row keeps its first key unmasked (a row masked throughout is where Attention and the
/// decomposition differ, see the rule file).
fn masked_scores_graph(shape: [usize; 4], inf: bool) -> Graph {
    let [b_, h, s, t] = shape;
    let d = 4;
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, dims(&[b_, h, s, d]));
    let k = b.input("k", DType::F32, dims(&[b_, h, t, d]));
    let v = b.input("v", DType::F32, dims(&[b_, h, t, d]));
    let bias = b.input("bias", DType::F32, dims(&[1, h, 1, t]));
    let m = b.input("m", DType::Bool, dims(&[b_, 1, s, t]));
    let mut keep = vec![true; t];
    keep[0] = false;
    let keep = b.constant(mobius::ir::TensorData {
        dtype: DType::Bool,
        shape: vec![t],
        bytes: keep.iter().map(|&k| k as u8).collect(),
    });
    let m = b.op("And", &[&m, &keep], vec![]);
    let kt = b.op(
        "Transpose",
        &[&k],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let raw = b.op("MatMul", &[&q, &kt], vec![]);
    let c = scalar(&mut b, 0.5);
    let scores = b.op("Mul", &[&raw, &c], vec![]);
    let low = scalar(&mut b, if inf { f32::NEG_INFINITY } else { f32::MIN });
    let sum = b.op("Add", &[&scores, &bias], vec![]);
    let masked = b.op("Where", &[&m, &low, &sum], vec![]);
    let p = b.op("Softmax", &[&masked], vec![("axis", Attr::Int(-1))]);
    b.output("y", DType::F32, dims(&[b_, h, s, d]));
    b.op_into("MatMul", &[&p, &v], vec![], "y");
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With `sdpa-to-attention`, which reads the rewritten Softmax (the rewrite alone leaves
    /// the same ops); without the rule (mutation testing) nothing is recognised.
    #[test]
    fn masked_scores_as_bias(
        shape in (1usize..3, 1usize..4, 1usize..4, 1usize..6),
        inf in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let g = masked_scores_graph([shape.0, shape.1, shape.2, shape.3.max(shape.2)], inf);
        let mut rules = super::rules_for("masked-scores-as-bias");
        rules.push(super::rule("sdpa-to-attention"));
        super::prove_with(&super::rule("masked-scores-as-bias"), rules, "default", g.clone(), inputs(&g, seed), 1e-4)?;
    }
}
