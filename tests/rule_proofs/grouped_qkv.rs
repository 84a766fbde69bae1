//! Proofs of `recognize/grouped_qkv.rules`: CodeGen's grouped qkv projection `y [B, S, N]`
//! viewed as `[B, S, G, C]` and split on the last axis, each part read as a column gather of
//! `y` (`split-of-grouped-columns`), and a Reshape of a Reshape read as one Reshape when the
//! outer target's 0s copy dims the inner one copied too (`reshape-of-reshape`).

use std::collections::HashMap;

use mobius::interp::{run_graph, Rng};
use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder};
use mobius::ops::Tensor;
use mobius::weights::eval::Evaluator;
use proptest::prelude::*;

use super::common::compare::max_abs_diff;
use super::{
    dims, model, optimize_with_rules, options, prove_on, prove_with, random_tensor, rule, rules_for,
};

/// A grouped split: `G` groups of the three parts' widths.
#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    seq: usize,
    groups: usize,
    widths: [usize; 3],
    /// The Reshape target `[0, 0, G, −1]` (else `[0, 0, G, C]`).
    inferred: bool,
    /// The batch and sequence dims symbolic (a decoder's).
    symbolic: bool,
    /// Near miss: the view `[B, G, S, C]` (`[0, G, −1, C]`): the groups are not the last
    /// axis's blocks of every row.
    groups_before_rows: bool,
}

impl Case {
    fn columns(&self) -> usize {
        self.widths.iter().sum()
    }
}

/// `y [B, S, G·C]` reshaped to `[B, S, G, C]`, split on axis −1 into the widths, each part
/// reshaped to `[0, 0, −1]` and the three concatenated on the last axis (output `out`).
fn grouped(c: &Case) -> Graph {
    let n = c.groups * c.columns();
    let mut b = GraphBuilder::new("g");
    let y = b.input("y", DType::F32, dims(&[c.batch, c.seq, n]));
    b.output("out", DType::F32, dims(&[c.batch, c.seq, n]));
    let (g, cols) = (c.groups as i64, c.columns() as i64);
    let target = if c.groups_before_rows {
        b.const_i64(&[0, g, -1, cols])
    } else if c.inferred {
        b.const_i64(&[0, 0, g, -1])
    } else {
        b.const_i64(&[0, 0, g, cols])
    };
    let view = b.op("Reshape", &[&y, &target], vec![]);
    let sizes = b.const_i64(&c.widths.map(|w| w as i64));
    let parts: Vec<String> = (0..3).map(|_| b.fresh_name("part")).collect();
    b.node(
        "",
        "Split",
        &[&view, &sizes],
        vec![("axis", Attr::Int(-1))],
        parts.clone(),
    );
    let flat = b.const_i64(&[0, 0, -1]);
    let flat: Vec<String> = parts
        .iter()
        .map(|p| b.op("Reshape", &[p, &flat], vec![]))
        .collect();
    let refs: Vec<&str> = flat.iter().map(String::as_str).collect();
    if c.groups_before_rows {
        // Back to [B, S, N] (the same elements in order), to compare with the rows' grouping.
        let joined = b.op("Concat", &refs, vec![("axis", Attr::Int(-1))]);
        let rows = b.const_i64(&[c.batch as i64, c.seq as i64, n as i64]);
        b.node("", "Reshape", &[&joined, &rows], vec![], vec!["out".into()]);
    } else {
        b.node(
            "",
            "Concat",
            &refs,
            vec![("axis", Attr::Int(-1))],
            vec!["out".into()],
        );
    }
    let mut g = b.finish();
    if c.symbolic {
        for v in g.inputs.iter_mut().chain(&mut g.outputs) {
            v.shape.0[0] = Dim::sym("batch");
            v.shape.0[1] = Dim::sym("sequence_len");
        }
    }
    g
}

fn inputs(c: &Case, seed: u64) -> HashMap<String, Tensor> {
    let n = c.groups * c.columns();
    let mut rng = Rng::new(seed);
    HashMap::from([(
        "y".into(),
        random_tensor(DType::F32, &[c.batch, c.seq, n], &mut rng),
    )])
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..3, 1usize..4, 1usize..5),
        [1usize..5, 1usize..5, 1usize..5],
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |((batch, seq, groups), widths, (inferred, symbolic))| Case {
                batch,
                seq,
                groups,
                widths,
                inferred,
                symbolic,
                groups_before_rows: false,
            },
        )
}

/// `split-of-grouped-columns` with the Reshape rules that then take the views out.
fn prove_split(c: &Case, seed: u64) -> Result<(), TestCaseError> {
    let name = "split-of-grouped-columns";
    let mut rules = rules_for(name);
    rules.extend(["reshape-of-reshape", "reshape-to-own-shape"].map(rule));
    prove_with(
        &rule(name),
        rules,
        "default",
        grouped(c),
        inputs(c, seed),
        0.0,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Each part of the grouped split is the gather of its columns of every group, exactly.
    #[test]
    fn split_of_grouped_columns(c in case(), seed in any::<u64>()) {
        prove_split(&c, seed)?;
    }

    /// `Reshape(Reshape(x, a), b)` → `Reshape(x, b)`, `b`'s 0s where `a` has 0s, or none.
    #[test]
    fn reshape_of_reshape(
        (batch, seq, split) in (1usize..3, 1usize..4, 1usize..4),
        (heads, d) in (1usize..4, 1usize..4),
        copies in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let n = split * heads * d;
        let mut b = GraphBuilder::new("g");
        let x = b.input("x", DType::F32, dims(&[batch, seq, n]));
        b.output("out", DType::F32, dims(&[batch, seq, heads, split * d]));
        let a = b.const_i64(&[0, 0, split as i64, heads as i64, d as i64]);
        let inner = b.op("Reshape", &[&x, &a], vec![]);
        let outer = if copies {
            b.const_i64(&[0, 0, heads as i64, -1])
        } else {
            b.const_i64(&[batch as i64, seq as i64, heads as i64, (split * d) as i64])
        };
        b.node("", "Reshape", &[&inner, &outer], vec![], vec!["out".into()]);
        let mut rng = Rng::new(seed);
        let values = HashMap::from([(
            "x".to_string(),
            random_tensor(DType::F32, &[batch, seq, n], &mut rng),
        )]);
        prove_on("reshape-of-reshape", "default", b.finish(), values, 0.0)?;
    }
}

/// The number of `op` nodes after optimizing `g` with `rules`.
fn count_after(g: &Graph, rules: &[&str], op: &str) -> usize {
    let rules: Vec<_> = rules.iter().map(|r| rule(r)).collect();
    let cpu = mobius::ep::get_ep("default").unwrap();
    let out = optimize_with_rules(&model(g.clone()), &cpu, &options(None), &rules)
        .unwrap()
        .0
        .graph;
    out.op_counts().get(op).copied().unwrap_or(0)
}

/// Near misses. The view `[B, G, S, C]` puts the groups before the rows: the columns the
/// gather would take (`g·C + o + t` of each row) are not the part's elements, through the
/// interpreter, and the rule leaves that split alone. A Reshape of a Reshape whose outer 0
/// copies a dim the inner target set is not merged: it would copy another dim.
#[test]
fn near_misses_are_not_read() {
    let c = Case {
        batch: 2,
        seq: 3,
        groups: 2,
        widths: [2, 1, 3],
        inferred: false,
        symbolic: false,
        groups_before_rows: true,
    };
    let miss = grouped(&c);
    let values = inputs(&c, 5);
    let as_rows = Case {
        groups_before_rows: false,
        ..c.clone()
    };
    let run = |g: &Graph| run_graph(g, &values, &mut Evaluator::new(None)).unwrap();
    // The gather reading is the rows' grouping's outputs, not the near miss's.
    assert!(max_abs_diff(&run(&miss)["out"], &run(&grouped(&as_rows))["out"]) > 1e-3);
    let rules = [
        "split-of-grouped-columns",
        "reshape-of-reshape",
        "reshape-to-own-shape",
    ];
    assert_eq!(count_after(&miss, &rules, "Gather"), 0);
    assert_eq!(count_after(&grouped(&as_rows), &rules, "Gather"), 3);

    // x [2, 6, 6] → [3, 0, 2, 2] (the 0 copies 6) → [0, 0, −1] is [3, 6, 4]; the outer 0
    // at index 0 copies the inner 3, not x's 2 ([0, 0, −1] of x is [2, 6, 6]).
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, dims(&[2, 6, 6]));
    b.output("out", DType::F32, dims(&[3, 6, 4]));
    let a = b.const_i64(&[3, 0, 2, 2]);
    let inner = b.op("Reshape", &[&x, &a], vec![]);
    let outer = b.const_i64(&[0, 0, -1]);
    b.node("", "Reshape", &[&inner, &outer], vec![], vec!["out".into()]);
    let g = b.finish();
    assert_eq!(count_after(&g, &["reshape-of-reshape"], "Reshape"), 2);
}
