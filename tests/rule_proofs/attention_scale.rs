//! Proof of `scaled-after-mask` (`rewrites/recognize/attention.rules`): scores scaled after
//! the mask is added, as CodeGen's eager attention writes it.

use mobius::ir::{Attr, DType, Graph, GraphBuilder};
use proptest::prelude::*;

use super::attention_recognize::inputs;
use super::{dims, scalar};

/// CodeGen's attention: `Softmax((q·kᵀ + mask) / c) · v` over q `[B, H, S, D]`, k and v
/// `[B, H, T, D]`, the float mask `Where(keep, bias, −FLT_MAX)` `[B, 1, S, T]` (every row keeps
/// key 0: a row masked throughout is where Attention and the decomposition differ, see the
/// rule file), `c` a power of two.
fn scaled_after_mask_graph(shape: [usize; 4], c: f32) -> Graph {
    let [b_, h, s, t] = shape;
    let d = 4;
    let mut b = GraphBuilder::new("g");
    let q = b.input("q", DType::F32, dims(&[b_, h, s, d]));
    let k = b.input("k", DType::F32, dims(&[b_, h, t, d]));
    let v = b.input("v", DType::F32, dims(&[b_, h, t, d]));
    let bias = b.input("bias", DType::F32, dims(&[b_, 1, s, t]));
    let keep = b.input("keep", DType::Bool, dims(&[b_, 1, s, t]));
    let low = scalar(&mut b, f32::MIN);
    let mask = b.op("Where", &[&keep, &bias, &low], vec![]);
    let kt = b.op(
        "Transpose",
        &[&k],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    );
    let raw = b.op("MatMul", &[&q, &kt], vec![]);
    let sum = b.op("Add", &[&raw, &mask], vec![]);
    let c = scalar(&mut b, c);
    let scaled = b.op("Div", &[&sum, &c], vec![]);
    let p = b.op("Softmax", &[&scaled], vec![("axis", Attr::Int(-1))]);
    b.output("y", DType::F32, dims(&[b_, h, s, d]));
    b.op_into("MatMul", &[&p, &v], vec![], "y");
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// With `sdpa-to-attention`, which reads the rewritten Softmax (the rewrite alone leaves
    /// the same ops); without the rule (mutation testing) nothing is recognised.
    #[test]
    fn scaled_after_mask(
        shape in (1usize..3, 1usize..4, 1usize..4, 1usize..6),
        e in -3i32..5,
        seed in any::<u64>(),
    ) {
        let c = 2f32.powi(e);
        let g = scaled_after_mask_graph([shape.0, shape.1, shape.2, shape.3.max(shape.2)], c);
        let mut rules = super::rules_for("scaled-after-mask");
        rules.push(super::rule("sdpa-to-attention"));
        super::prove_with(&super::rule("scaled-after-mask"), rules, "default", g.clone(), inputs(&g, seed), 1e-4)?;
    }
}
