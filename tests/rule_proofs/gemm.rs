//! Proof of GemmAsMatMul (`rewrites/recognize/gemm.rules`): the exporters' Linear,
//! `Reshape(Gemm(Reshape(x, [−1, K]), W, b), [B, S, N])`, is `Add(MatMul(x, W), b)`; and the
//! near misses it must leave alone (a transposed W, alpha ≠ 1, a bias that is not `[N]`, an
//! outer Reshape that is not the inverse of the flattening).

use std::collections::HashMap;

use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Shape};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::{feeds_sized, optimize_with_rules, prove_with, rule, rules_for};

/// One instance: rows `B × S` (named `batch`/`seq` or numbers), K, N, how the targets are
/// written, and what is changed to make a near miss.
#[derive(Debug, Clone, Copy)]
struct Case {
    batch: usize,
    seq: usize,
    symbolic: bool,
    k: usize,
    n: usize,
    /// The outer target computed from `Shape(x)` (the dynamo exporter) instead of a constant.
    computed: bool,
    /// `allowzero` 1 on both Reshapes (the dynamo exporter) instead of unset.
    allowzero: bool,
    miss: Miss,
}

/// What a near miss changes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Miss {
    None,
    /// W `[N, K]` read with `transB` 1.
    TransB,
    /// `alpha` 0.5.
    Alpha,
    /// The outer Reshape gives `[S, B, N]` (same count, not the inverse).
    NotInverse,
    /// b `[1, N]` (Gemm broadcasts it; MatMul+Add would too, but it is not the `[N]` bias).
    Bias2d,
}

fn fixed(d: &[usize]) -> Shape {
    Shape(d.iter().map(|&v| Dim::Fixed(v as i64)).collect())
}

fn dims(c: &Case, last: usize) -> Shape {
    let (b, s) = if c.symbolic {
        (Dim::Sym("batch".into()), Dim::Sym("seq".into()))
    } else {
        (Dim::Fixed(c.batch as i64), Dim::Fixed(c.seq as i64))
    };
    Shape(vec![b, s, Dim::Fixed(last as i64)])
}

/// The exported Linear of `c`, with x, W and b graph inputs.
fn linear(c: &Case) -> Graph {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(c, c.k));
    let (wk, wn) = if c.miss == Miss::TransB {
        (c.n, c.k)
    } else {
        (c.k, c.n)
    };
    let w = b.input("w", DType::F32, fixed(&[wk, wn]));
    let bias_shape = if c.miss == Miss::Bias2d {
        vec![1, c.n]
    } else {
        vec![c.n]
    };
    let bias = b.input("b", DType::F32, fixed(&bias_shape));
    let zero = || {
        if c.allowzero {
            vec![("allowzero", Attr::Int(1))]
        } else {
            vec![]
        }
    };
    let flat = b.const_i64(&[-1, c.k as i64]);
    let rows = b.op("Reshape", &[&x, &flat], zero());
    let mut attrs = vec![
        (
            "alpha",
            Attr::Float(if c.miss == Miss::Alpha { 0.5 } else { 1.0 }),
        ),
        ("beta", Attr::Float(1.0)),
        ("transA", Attr::Int(0)),
    ];
    if c.miss == Miss::TransB {
        attrs.push(("transB", Attr::Int(1)));
    }
    let y = b.op("Gemm", &[&rows, &w, &bias], attrs);
    let (first, second) = if c.miss == Miss::NotInverse {
        (1, 0)
    } else {
        (0, 1)
    };
    let target = if c.computed {
        let part = |b: &mut GraphBuilder, at: i64| {
            b.op(
                "Shape",
                &[&x],
                vec![("start", Attr::Int(at)), ("end", Attr::Int(at + 1))],
            )
        };
        let (p, q) = (part(&mut b, first), part(&mut b, second));
        let tail = b.const_i64(&[c.n as i64]);
        b.op("Concat", &[&p, &q, &tail], vec![("axis", Attr::Int(0))])
    } else {
        let rows = [c.batch as i64, c.seq as i64];
        b.const_i64(&[rows[first as usize], rows[second as usize], c.n as i64])
    };
    let out = if c.miss == Miss::NotInverse {
        let d = dims(c, c.n).0;
        Shape(vec![d[1].clone(), d[0].clone(), d[2].clone()])
    } else {
        dims(c, c.n)
    };
    b.output("y", DType::F32, out);
    b.op_into("Reshape", &[&y, &target], zero(), "y");
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
        any::<bool>(),
        1usize..9,
        1usize..9,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            move |(batch, seq, symbolic, k, n, computed, allowzero)| Case {
                batch,
                seq,
                // A constant target needs numbers.
                symbolic: symbolic && computed,
                k,
                n,
                computed,
                allowzero,
                miss,
            },
        )
}

/// Gemm sums the products in f64 and rounds once in the interpreter: `y₁ = fl(d + b)` with
/// `d = Σ x·w` exact. MatMul rounds the sum, then Add rounds again: `y₂ = fl(fl(d) + b)`.
/// Each rounding is at most ½ ulp ≤ 2⁻²⁴ of its value, so
/// `|y₁ − y₂| ≤ 2⁻²⁴ (|d + b| + |d| + |fl(d) + b|)`. Inputs lie in [−4, 4), so |d| ≤ 16 K
/// and |b| ≤ 4: at most 2⁻²⁴ (48 K + 8), rounded up to 2⁻²⁴ (48 K + 16) for fl(d)'s own
/// excess. The two results may be neighbouring floats, a full ulp of the sum apart; a
/// bound on the product sum alone (16 K · 2⁻²⁴) missed that (K = 1, N = 8 in CI).
fn rounding(k: usize) -> f64 {
    (48.0 * k as f64 + 16.0) * f64::powi(2.0, -24)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn gemm_as_matmul_add(c in case(Miss::None), seed in 0u64..1000) {
        let g = linear(&c);
        let values = inputs(&g, &c, seed);
        prove_with(&rule("gemm-as-matmul-add"), rules_for("gemm-as-matmul-add"), "default", g, values, rounding(c.k))?;
    }

    #[test]
    fn near_misses_keep_the_gemm(c in prop_oneof![
        case(Miss::TransB), case(Miss::Alpha), case(Miss::NotInverse), case(Miss::Bias2d)
    ]) {
        // S ≠ B so that [S, B, N] is not [B, S, N] by accident.
        let c = Case { seq: c.batch + 1, ..c };
        let g = linear(&c);
        let rules = vec![rule("gemm-as-matmul-add")];
        let (out, _) = optimize_with_rules(
            &super::model(g),
            &mobius::ep::get_ep("default").unwrap(),
            &super::options(None),
            &rules,
        )
        .unwrap();
        let ops = out.graph.op_counts();
        prop_assert_eq!(ops.get("Gemm"), Some(&1), "{:?}: {:?}", c.miss, ops);
        prop_assert!(!ops.contains_key("MatMul"), "{:?}: {:?}", c.miss, ops);
    }
}
