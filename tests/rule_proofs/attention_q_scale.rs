//! Proof of `q-scale-into-attention` (`rewrites/recognize/attention_q_scale.rules`): q scaled
//! by a power of two before an Attention (OPT's `q_proj(x) · head_dim^−½`) read as the
//! Attention's `scale`; and the near misses it leaves alone (a factor that is not a power of
//! two, an unset scale).

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Shape, TensorData};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{optimize_with_rules, prove_with, random_tensor, rule, rules_for};

/// One instance: `[B, S, H·D]` q, k, v over a cache of `past` positions, the factor on q,
/// the Attention's scale (`None`: unset).
#[derive(Debug, Clone, Copy)]
struct Case {
    batch: usize,
    seq: usize,
    past: usize,
    heads: usize,
    head_dim: usize,
    factor: f32,
    scale: Option<f32>,
}

fn fixed(d: &[usize]) -> Shape {
    Shape(d.iter().map(|&v| Dim::Fixed(v as i64)).collect())
}

/// `Attention(Mul(q, factor), k, v, mask, past_k, past_v; scale)`, mask a float `[B, 1, S, T]`.
fn scaled_q(c: &Case) -> Graph {
    let (bsz, s, p, h, d) = (c.batch, c.seq, c.past, c.heads, c.head_dim);
    let t = s + p;
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, fixed(&[bsz, s, h * d]));
    let k = b.input("k", DType::F32, fixed(&[bsz, s, h * d]));
    let v = b.input("v", DType::F32, fixed(&[bsz, s, h * d]));
    let mask = b.input("mask", DType::F32, fixed(&[bsz, 1, s, t]));
    let pk = b.input("past_key", DType::F32, fixed(&[bsz, h, p, d]));
    let pv = b.input("past_value", DType::F32, fixed(&[bsz, h, p, d]));
    let factor = b.constant(TensorData::from_f32(vec![], &[c.factor]));
    let q = b.op("Mul", &[&q, &factor], vec![]);
    let mut attrs = vec![
        ("kv_num_heads", Attr::Int(h as i64)),
        ("q_num_heads", Attr::Int(h as i64)),
    ];
    if let Some(scale) = c.scale {
        attrs.push(("scale", Attr::Float(scale)));
    }
    b.output("y", DType::F32, fixed(&[bsz, s, h * d]));
    b.output("present_key", DType::F32, fixed(&[bsz, h, t, d]));
    b.output("present_value", DType::F32, fixed(&[bsz, h, t, d]));
    b.node(
        "",
        "Attention",
        &[&q, &k, &v, &mask, &pk, &pv],
        attrs,
        vec!["y".into(), "present_key".into(), "present_value".into()],
    );
    b.finish()
}

fn inputs(g: &Graph, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Rng::new(seed);
    g.inputs
        .iter()
        .map(|v| {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    Dim::Fixed(x) => *x as usize,
                    Dim::Sym(_) => unreachable!("proof graphs have static shapes"),
                })
                .collect();
            (v.name.clone(), random_tensor(v.dtype, &shape, &mut rng))
        })
        .collect()
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..3,
        1usize..4,
        0usize..3,
        1usize..3,
        prop_oneof![Just(2usize), Just(4), Just(8)],
        -4i32..3,
        prop_oneof![Just(1.0f32), Just(0.5), Just(0.3)],
    )
        .prop_map(|(batch, seq, past, heads, head_dim, e, scale)| Case {
            batch,
            seq,
            past,
            heads,
            head_dim,
            factor: 2f32.powi(e),
            scale: Some(scale),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn q_scale_into_attention(c in case(), seed in 0u64..1000) {
        let g = scaled_q(&c);
        let values = inputs(&g, seed);
        let name = "q-scale-into-attention";
        // Exact in the interpreter (a power of two only shifts exponents).
        prove_with(&rule(name), rules_for(name), "default", g, values, 0.0)?;
    }

    #[test]
    fn near_misses_keep_the_mul(c in case(), unset in any::<bool>()) {
        let c = if unset {
            Case { scale: None, ..c }
        } else {
            Case { factor: c.factor * 0.75, ..c }
        };
        let (out, _) = optimize_with_rules(
            &super::model(scaled_q(&c)),
            &mobius::ep::get_ep("default").unwrap(),
            &super::options(None),
            &[rule("q-scale-into-attention")],
        )
        .unwrap();
        let ops = out.graph.op_counts();
        prop_assert_eq!(ops.get("Mul"), Some(&1), "{:?}: {:?}", c, ops);
    }
}
