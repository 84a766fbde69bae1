//! Appliers of the interleaved rotary rules (`rewrites/recognize/rotary_interleaved.rules`):
//! TorchScript's `repeat_interleave(2)` subgraph as the pairwise repetition
//! `Reshape(Concat(u, u), …)`, and a proven rotate-every-two chain as
//! `RotaryEmbedding(…; interleaved 1)` over half-width caches. The predicates are in
//! `src/rulebook/recognize_interleave.rs`.

use egg::Id;

use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::rulebook::recognize_interleave::{
    merged_heads_source, pair_table_rows, read_heads_last_rotation, read_interleave,
};
use crate::rulebook::recognize_rotary::HalfTable;

pub(super) const REPEAT_INTERLEAVE: Applier<7> = Applier::new(
    ["?t", "?p1", "?axes", "?shape", "?idx", "?bd", "?p2"],
    repeat_interleave,
);
pub(super) const ROTATE_PAIRS: Applier<3> = Applier::new(["?x", "?cos", "?sin"], rotate_pairs);

/// Reads the GatherND subgraph (proven by `repeat-interleave`) as
/// `Reshape(Concat(u, u; axis n), [0, …, 0, 2m])`, `u = Unsqueeze(h, [n])`, `h` the input
/// transposed so that the repeated axis is last (no Transpose when already so).
fn repeat_interleave(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 7]) -> Option<Id> {
    let read = read_interleave(g, vars)?;
    let n = read.rank as i64;
    let mut e = Emit::new(g);
    let h = match &read.perm {
        Some(p) => e.transpose(read.input, p),
        None => read.input,
    };
    let u = e.unsqueeze(h, &[n]);
    let pairs = e.concat(&[u, u], n);
    let mut target = vec![0; read.rank - 1];
    target.push(2 * read.width);
    Some(e.reshape(pairs, &target))
}

/// The half-width cache `table` describes: its steps replayed on the angles.
fn half_cache(g: &mut OnnxGraph, table: &HalfTable) -> Id {
    table
        .steps
        .iter()
        .fold(table.leaf, |inner, (node, carrier)| {
            let mut node = node.clone();
            node.children[*carrier] = inner;
            g.add(Onnx::Op(node))
        })
}

/// The half-width cache of `table`, expanded to `x`'s batch when it has one row.
fn batch_cache(g: &mut OnnxGraph, (table, one_row): &(HalfTable, bool), x: Id) -> Option<Id> {
    let cache = half_cache(g, table);
    if !one_row {
        return Some(cache);
    }
    let batch = g[x].data.tensor()?.shape.as_ref()?.first()?.clone();
    let mut e = Emit::new(g);
    let shape = match batch.known() {
        Some(b) => e.ints(&[b, 1, 1]),
        None => {
            let rows = e.op(
                "Shape",
                &[x],
                &[("start", AttrValue::Int(0)), ("end", AttrValue::Int(1))],
            );
            let ones = e.ints(&[1, 1]);
            e.op("Concat", &[rows, ones], &[("axis", AttrValue::Int(0))])
        }
    };
    Some(e.op("Expand", &[cache, shape], &[]))
}

/// Reads `?x ?cos ?sin` of `x · cos + rotate_every_two(x) · sin` (proven by `rotate-pairs`):
/// `RotaryEmbedding(x, cos_cache, sin_cache; interleaved 1)`, the caches `[B, S, D/2]`.
fn rotate_pairs(g: &mut OnnxGraph, _: Site<'_>, [x, cos, sin]: [Id; 3]) -> Option<Id> {
    let (cos, sin) = (pair_table_rows(g, cos, x)?, pair_table_rows(g, sin, x)?);
    let cos = batch_cache(g, &cos, x)?;
    let sin = batch_cache(g, &sin, x)?;
    Some(Emit::new(g).op(
        "RotaryEmbedding",
        &[x, cos, sin],
        &[("interleaved", AttrValue::Int(1))],
    ))
}

pub(super) const ROTATE_PAIRS_HEADS_LAST: Applier<12> = Applier::new(
    [
        "?xr", "?odd", "?a1", "?even", "?a2", "?axis", "?shape", "?az", "?cos", "?sin", "?pass",
        "?caxis",
    ],
    rotate_pairs_heads_last,
);

/// Reads GPT-J's partial rotation on `[B, S, H, D]` heads (proven by
/// `rotate-pairs-heads-last`) as `RotaryEmbedding(Reshape(x, [0, 0, −1]), cos, sin;
/// interleaved 1, num_heads H, rotary_embedding_dim r)` viewed back as `[0, 0, H, D]` (the
/// projection `x` was split from in place of the merge, where there is one).
fn rotate_pairs_heads_last(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 12]) -> Option<Id> {
    let read = read_heads_last_rotation(g, vars)?;
    let source = merged_heads_source(g, read.x);
    let mut e = Emit::new(g);
    let merged = source.unwrap_or_else(|| e.reshape(read.x, &[0, 0, -1]));
    let rotated = e.op(
        "RotaryEmbedding",
        &[merged, read.cos, read.sin],
        &[
            ("interleaved", AttrValue::Int(1)),
            ("num_heads", AttrValue::Int(read.heads)),
            ("rotary_embedding_dim", AttrValue::Int(read.rotary)),
        ],
    );
    Some(e.reshape(rotated, &[0, 0, read.heads, read.head_dim]))
}
