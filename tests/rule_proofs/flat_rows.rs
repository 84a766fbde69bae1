//! Proofs of `rewrites/recognize/flat_rows.rules`: hidden states flattened to rows
//! (`Reshape(x, [−1, D])`) around row-wise ops, read on x's own dims (OPT's decoder MLP as
//! torch.onnx exports it). `residual-through-row-flattening`: `Reshape(Add(Reshape(x, flat), y),
//! shape)` with `shape` x's dims → `Add(x, Reshape(y, Shape(x)))`;
//! `layer-norm-through-row-flattening`: `LayerNormalization(Reshape(x, flat))` over the last
//! axis → `Reshape(LayerNormalization(x), flat)` (proven where SkipLayerNormalization then
//! fuses the norm with the Add that makes x). Near misses: an outer Reshape that is not x's
//! dims, a broadcast y, a norm over another axis.

use std::collections::HashMap;

use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Shape};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{feeds_sized, optimize_with_rules, prove_with, rule, rules_for};

/// One instance: x `[B, S, D]` (dims named `batch`/`seq` or numbers), how the outer target is
/// written, and what is changed to make a near miss.
#[derive(Debug, Clone, Copy)]
struct Case {
    batch: usize,
    seq: usize,
    d: usize,
    symbolic: bool,
    /// The outer target computed from `Shape(x)` (as the export does) instead of a constant.
    computed: bool,
    miss: Miss,
}

/// What a near miss changes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Miss {
    None,
    /// The outer Reshape gives `[S, B, D]` (same count, not x's dims).
    NotInverse,
    /// y is `[1, D]`, broadcast over the rows by the Add.
    Broadcast,
    /// The LayerNormalization normalizes axis 0 of the rows.
    OtherAxis,
}

fn row_dims(c: &Case, d: usize) -> Shape {
    let (b, s) = if c.symbolic {
        (Dim::Sym("batch".into()), Dim::Sym("seq".into()))
    } else {
        (Dim::Fixed(c.batch as i64), Dim::Fixed(c.seq as i64))
    };
    Shape(vec![b, s, Dim::Fixed(d as i64)])
}

fn fixed(d: &[usize]) -> Shape {
    Shape(d.iter().map(|&v| Dim::Fixed(v as i64)).collect())
}

/// The target `[B, S, D]` of `c` (or `[S, B, D]` for [`Miss::NotInverse`]), constant or
/// computed from `Shape(x)`.
fn target(b: &mut GraphBuilder, c: &Case, x: &str) -> String {
    let (first, second) = if c.miss == Miss::NotInverse {
        (1, 0)
    } else {
        (0, 1)
    };
    if c.computed {
        let part = |b: &mut GraphBuilder, at: i64| {
            b.op(
                "Shape",
                &[x],
                vec![("start", Attr::Int(at)), ("end", Attr::Int(at + 1))],
            )
        };
        let (p, q) = (part(b, first), part(b, second));
        let tail = b.const_i64(&[c.d as i64]);
        b.op("Concat", &[&p, &q, &tail], vec![("axis", Attr::Int(0))])
    } else {
        let rows = [c.batch as i64, c.seq as i64];
        b.const_i64(&[rows[first as usize], rows[second as usize], c.d as i64])
    }
}

fn out_dims(c: &Case) -> Shape {
    let d = row_dims(c, c.d).0;
    if c.miss == Miss::NotInverse {
        Shape(vec![d[1].clone(), d[0].clone(), d[2].clone()])
    } else {
        Shape(d)
    }
}

/// `Reshape(Add(Reshape(x, [−1, D]), y), target)`, y = `Relu(Reshape(z, [−1, D]))` of another
/// input z of x's dims (or an input `[1, D]` for [`Miss::Broadcast`]).
fn residual(c: &Case) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, row_dims(c, c.d));
    let flat = b.const_i64(&[-1, c.d as i64]);
    let rows = b.op("Reshape", &[&x, &flat], vec![]);
    let y = if c.miss == Miss::Broadcast {
        b.input("z", DType::F32, fixed(&[1, c.d]))
    } else {
        let z = b.input("z", DType::F32, row_dims(c, c.d));
        let z_rows = b.op("Reshape", &[&z, &flat], vec![]);
        b.op("Relu", &[&z_rows], vec![])
    };
    let sum = b.op("Add", &[&rows, &y], vec![]);
    let shape = target(&mut b, c, &x);
    b.output("out", DType::F32, out_dims(c));
    b.op_into("Reshape", &[&sum, &shape], vec![], "out");
    b.finish()
}

/// `Reshape(LayerNormalization(Reshape(Add(a, r), [−1, D]), γ, β), target)`: the norm of the
/// rows of the residual sum (axis −1, or 0 for [`Miss::OtherAxis`]).
fn norm_of_rows(c: &Case) -> Graph {
    let mut b = GraphBuilder::new("g");
    let a = b.input("a", DType::F32, row_dims(c, c.d));
    let r = b.input("r", DType::F32, row_dims(c, c.d));
    let g = b.input("g", DType::F32, fixed(&[c.d]));
    let beta = b.input("beta", DType::F32, fixed(&[c.d]));
    let x = b.op("Add", &[&a, &r], vec![]);
    let flat = b.const_i64(&[-1, c.d as i64]);
    let rows = b.op("Reshape", &[&x, &flat], vec![]);
    let axis = if c.miss == Miss::OtherAxis { 0 } else { -1 };
    let n = b.op(
        "LayerNormalization",
        &[&rows, &g, &beta],
        vec![("axis", Attr::Int(axis)), ("epsilon", Attr::Float(1e-5))],
    );
    let shape = target(&mut b, c, &x);
    b.output("out", DType::F32, out_dims(c));
    b.op_into("Reshape", &[&n, &shape], vec![], "out");
    b.finish()
}

/// Random values for every input of `g`, the named dims `batch` and `seq` as `c` gives them.
fn inputs(g: &Graph, c: &Case, seed: u64) -> HashMap<String, Tensor> {
    feeds_sized(g, |s| if s == "batch" { c.batch } else { c.seq }, seed)
}

fn case(miss: Miss) -> impl Strategy<Value = Case> {
    (
        1usize..4,
        1usize..4,
        1usize..9,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(move |(batch, seq, d, symbolic, computed)| Case {
            batch,
            seq,
            d,
            // A constant target needs numbers.
            symbolic: symbolic && computed,
            computed,
            miss,
        })
}

/// The op counts of `graph` optimized for `ep` with the named rules alone.
fn counts(graph: Graph, ep: &str, names: &[&str]) -> std::collections::BTreeMap<String, usize> {
    let rules: Vec<_> = names.iter().map(|n| rule(n)).collect();
    let (out, _) = optimize_with_rules(
        &super::model(graph),
        &mobius::ep::get_ep(ep).unwrap(),
        &super::options(None),
        &rules,
    )
    .unwrap();
    out.graph.op_counts()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn residual_through_row_flattening(c in case(Miss::None), seed in 0u64..1000) {
        let g = residual(&c);
        let values = inputs(&g, &c, seed);
        let name = "residual-through-row-flattening";
        prove_with(&rule(name), rules_for(name), "default", g, values, 0.0)?;
    }

    #[test]
    fn layer_norm_through_row_flattening(c in case(Miss::None), seed in 0u64..1000) {
        let g = norm_of_rows(&c);
        let values = inputs(&g, &c, seed);
        let name = "layer-norm-through-row-flattening";
        let mut rules = rules_for(name);
        rules.push(rule("add-layernorm-to-skip-layer-norm"));
        prove_with(&rule(name), rules, "cpu", g, values, 1e-5)?;
    }

    #[test]
    fn near_misses_keep_the_rows(c in prop_oneof![
        case(Miss::NotInverse), case(Miss::Broadcast), case(Miss::OtherAxis)
    ]) {
        // S ≠ B so that [S, B, D] is not [B, S, D] by accident.
        let c = Case { seq: c.batch + 1, ..c };
        let names = ["residual-through-row-flattening", "layer-norm-through-row-flattening", "add-layernorm-to-skip-layer-norm"];
        let (g, before) = match c.miss {
            Miss::OtherAxis => (norm_of_rows(&c), counts(norm_of_rows(&c), "cpu", &[])),
            _ => (residual(&c), counts(residual(&c), "cpu", &[])),
        };
        let after = counts(g, "cpu", &names);
        prop_assert_eq!(&after, &before, "{:?}", c.miss);
    }
}
