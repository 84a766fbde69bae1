//! Proofs of the rotary recognition rules (`rewrites/recognize/rotary.rules`): each operand
//! order of the rotate-half spelling (built by `tests/common/rope_spellings.rs`) becomes one
//! `RotaryEmbedding`, on random shapes (known or symbolic batch and sequence), slice and
//! table spellings and values; a partial rotation folds into `rotary_embedding_dim`.

use std::collections::HashMap;

use mobius::interp::Rng;
use mobius::ir::{Attr, DType, Dim, Graph, GraphBuilder, Shape};
use mobius::ops::Tensor;
use proptest::prelude::*;

use super::rope_spellings::{rope, Rope, Table};
use super::{prove_on, random_tensor};

/// `[B, H, S]`, head size, symbolic batch/seq, last axis as 3 (else −1), slice to the end,
/// steps input, table decoration, seed.
type Case = ([usize; 3], usize, bool, bool, bool, bool, Table, u64);

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..3, 1usize..4, 1usize..4),
        (1usize..9).prop_map(|h| 2 * h),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            Just(Table::Plain),
            Just(Table::Scaled(1.0)),
            Just(Table::Scaled(0.75)),
            Just(Table::Cast)
        ],
        any::<u64>(),
    )
        .prop_map(|((b, h, s), d, sym, axis3, to_end, steps, table, seed)| {
            ([b, h, s], d, sym, axis3, to_end, steps, table, seed)
        })
}

/// `[B, rest…]` with `B` and the dim at `seq_at` named `batch` and `seq` when `symbolic`.
fn shape(dims: &[usize], seq_at: usize, symbolic: bool) -> Shape {
    Shape(
        dims.iter()
            .enumerate()
            .map(|(i, &d)| match (symbolic, i) {
                (true, 0) => Dim::Sym("batch".into()),
                (true, i) if i == seq_at => Dim::Sym("seq".into()),
                _ => Dim::Fixed(d as i64),
            })
            .collect(),
    )
}

/// Inputs `x` `[B, H, S, D]` and `f` `[B, S, w]` (the angles; `w` = D/2 unless given), output
/// `y` `[B, H, S, D]` computed by `body(x, f)`; with random values for both.
fn graph(
    dims: [usize; 3],
    d: usize,
    w: usize,
    symbolic: bool,
    seed: u64,
    body: impl FnOnce(&mut GraphBuilder, &str, &str) -> String,
) -> (Graph, HashMap<String, Tensor>) {
    graph_rows(dims, d, w, symbolic, false, seed, body)
}

/// [`graph`], with angles `f` `[1, S, w]` (one batch row, broadcast over `x`'s) when
/// `one_row`.
fn graph_rows(
    [b, h, s]: [usize; 3],
    d: usize,
    w: usize,
    symbolic: bool,
    one_row: bool,
    seed: u64,
    body: impl FnOnce(&mut GraphBuilder, &str, &str) -> String,
) -> (Graph, HashMap<String, Tensor>) {
    let mut gb = GraphBuilder::new("g");
    let x = gb.input("x", DType::F32, shape(&[b, h, s, d], 2, symbolic));
    let rows = if one_row { 1 } else { b };
    let mut f_shape = shape(&[rows, s, w], 1, symbolic);
    if one_row {
        f_shape.0[0] = Dim::Fixed(1);
    }
    let f = gb.input("f", DType::F32, f_shape);
    gb.output("y", DType::F32, shape(&[b, h, s, d], 2, symbolic));
    let y = body(&mut gb, &x, &f);
    gb.op_into("Identity", &[&y], vec![], "y");
    let mut rng = Rng::new(seed);
    let values = HashMap::from([
        (
            "x".to_string(),
            random_tensor(DType::F32, &[b, h, s, d], &mut rng),
        ),
        (
            "f".to_string(),
            random_tensor(DType::F32, &[rows, s, w], &mut rng),
        ),
    ]);
    (gb.finish(), values)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn rotate_half_recognition(
        (dims, d, symbolic, axis3, to_end, steps, table, seed) in case()
    ) {
        for order in Rope::all_orders() {
            let spelling = Rope {
                axis: if axis3 { 3 } else { -1 },
                to_end,
                steps,
                table,
                ..order
            };
            let (g, values) = graph(dims, d, d / 2, symbolic, seed, |b, x, f| {
                rope(b, x, [f, f, f], d, &spelling)
            });
            prove_on(&spelling.rule(), "cpu", g, values, 1e-5)?;
            // Angles of one batch row [1, S, D/2] (positions from the past length, as
            // optimum's exports without position_ids compute them), broadcast over x's batch:
            // the caches are expanded to it.
            let (g, values) = graph_rows(dims, d, d / 2, symbolic, true, seed, |b, x, f| {
                rope(b, x, [f, f, f], d, &spelling)
            });
            prove_on(&spelling.rule(), "cpu", g, values, 1e-5)?;
        }
    }

    #[test]
    fn partial_rotation_folding(
        (dims, d, symbolic, _axis3, to_end, steps, _table, seed) in case(),
        r in 1usize..8,
    ) {
        // RotaryEmbedding(x[…, :r]) ‖ x[…, r:] with caches [B, S, r/2] given as inputs.
        let d = d + 2;
        let r = 2 * (r % (d / 2)).max(1);
        let (g, values) = graph(dims, d, r / 2, symbolic, seed, |b, x, f| {
            let bound = |b: &mut GraphBuilder, v: i64| b.const_i64(&[v]);
            let (zero, rr, end, axis) = (
                bound(b, 0),
                bound(b, r as i64),
                bound(b, if to_end { i64::MAX } else { d as i64 }),
                bound(b, -1),
            );
            let (rot, pass) = if steps {
                let one = bound(b, 1);
                (
                    b.op("Slice", &[x, &zero, &rr, &axis, &one], vec![]),
                    b.op("Slice", &[x, &rr, &end, &axis, &one], vec![]),
                )
            } else {
                (
                    b.op("Slice", &[x, &zero, &rr, &axis], vec![]),
                    b.op("Slice", &[x, &rr, &end, &axis], vec![]),
                )
            };
            let cos = b.op("Cos", &[f], vec![]);
            let sin = b.op("Sin", &[f], vec![]);
            let rotated = b.op("RotaryEmbedding", &[&rot, &cos, &sin], vec![]);
            b.op("Concat", &[&rotated, &pass], vec![("axis", Attr::Int(-1))])
        });
        prove_on("rotary-partial", "cpu", g, values, 1e-5)?;
    }
}

/// How the outer-product angles' frequency column reaches the MatMul.
#[derive(Debug, Clone, Copy)]
enum Column {
    /// The `[1, N, 1]` constant itself.
    Plain,
    /// Expanded to `[B, 1, 1]`, a constant target (static dims only).
    Expanded,
    /// Expanded to `Concat(Shape(x)[0:1], [1, 1])`.
    ExpandedFromShape,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn outer_product_angles(
        (b, s, n) in (1usize..4, 1usize..5, 1usize..6),
        symbolic in any::<bool>(),
        column in prop_oneof![Just(Column::Plain), Just(Column::Expanded), Just(Column::ExpandedFromShape)],
        negative_axis in any::<bool>(),
        cos in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // Transpose(MatMul(f [1, N, 1] (expanded), Cast(Unsqueeze(x [B, S], [1]))), [0, 2, 1]),
        // optionally under Cos, with integer positions x (negative ones included).
        let column = match column {
            Column::Expanded if symbolic => Column::ExpandedFromShape,
            c => c,
        };
        let mut gb = GraphBuilder::new("g");
        let x = gb.input("x", DType::I64, shape(&[b, s], 1, symbolic));
        gb.output("y", DType::F32, shape(&[b, s, n], 1, symbolic));
        let mut rng = Rng::new(seed);
        let freqs: Vec<f32> = (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
        let f = gb.constant(mobius::ir::TensorData::from_f32(vec![1, n, 1], &freqs));
        let f = match column {
            Column::Plain => f,
            Column::Expanded => {
                let target = gb.const_i64(&[b as i64, 1, 1]);
                gb.op("Expand", &[&f, &target], vec![])
            }
            Column::ExpandedFromShape => {
                let rows = gb.op("Shape", &[&x], vec![("start", Attr::Int(0)), ("end", Attr::Int(1))]);
                let rest = gb.const_i64(&[1, 1]);
                let target = gb.op("Concat", &[&rows, &rest], vec![("axis", Attr::Int(0))]);
                gb.op("Expand", &[&f, &target], vec![])
            }
        };
        let axes = gb.const_i64(&[if negative_axis { -2 } else { 1 }]);
        let at = gb.op("Unsqueeze", &[&x, &axes], vec![]);
        let at = gb.op("Cast", &[&at], vec![("to", Attr::Int(DType::F32.onnx_code() as i64))]);
        let outer = gb.op("MatMul", &[&f, &at], vec![]);
        let angles = gb.op("Transpose", &[&outer], vec![("perm", Attr::Ints(vec![0, 2, 1]))]);
        let y = if cos { gb.op("Cos", &[&angles], vec![]) } else { angles };
        gb.op_into("Identity", &[&y], vec![], "y");
        let values = HashMap::from([("x".to_string(), random_tensor(DType::I64, &[b, s], &mut rng))]);
        prove_on("outer-angles", "cpu", gb.finish(), values, 0.0)?;
    }
}
