//! Appliers of the rotary recognition rules (`rewrites/recognize/rotary.rules`): the ONNX
//! `RotaryEmbedding` a proven rotate-half chain computes, over half-width caches rebuilt from
//! the angles, and a partial rotation folded into `rotary_embedding_dim`. The predicates are in
//! `src/rulebook/recognize_rotary.rs`.

use egg::Id;

use crate::ops::value::AttrValue;
use crate::ops::value::Literal;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::rulebook::recognize_rotary::{
    outer_product_angles, partial_split, rotary_table_rows, HalfTable,
};

pub(super) const ROTATE_HALF: Applier<3> = Applier::new(["?x", "?cos", "?sin"], rotate_half);
pub(super) const PARTIAL_ROTATION: Applier<6> = Applier::new(
    ["?rot", "?pass", "?cos", "?sin", "?inter", "?heads"],
    partial_rotation,
);
pub(super) const OUTER_ANGLES: Applier<2> = Applier::new(["?product", "?perm"], outer_angles);

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

/// Reads `?x ?cos ?sin` of `x · cos + rotate_half(x) · sin` (proven by `rotate-half`):
/// `RotaryEmbedding(x, cos_cache, sin_cache)`, the caches `[B, S, D/2]` (one half of each
/// table; a table of one batch row expanded to `x`'s batch, [`batch_expanded`]), no
/// `position_ids`, every attribute at its default (halves, rotate all of `D`).
fn rotate_half(g: &mut OnnxGraph, _: Site<'_>, [x, cos, sin]: [Id; 3]) -> Option<Id> {
    let (cos, sin) = (rotary_table_rows(g, cos, x)?, rotary_table_rows(g, sin, x)?);
    let cos = batch_expanded(g, &cos, x)?;
    let sin = batch_expanded(g, &sin, x)?;
    Some(Emit::new(g).op("RotaryEmbedding", &[x, cos, sin], &[]))
}

/// The half-width cache of `table`; when it has one batch row (`one_row`), that cache
/// `[1, S, D/2]` expanded to `[B, S, D/2]` (`B` `x`'s batch, [`batch_shape`]): every row a
/// copy of the one the factor broadcast.
fn batch_expanded(g: &mut OnnxGraph, (table, one_row): &(HalfTable, bool), x: Id) -> Option<Id> {
    let cache = half_cache(g, table);
    if !one_row {
        return Some(cache);
    }
    let shape = batch_shape(g, x)?;
    Some(Emit::new(g).op("Expand", &[cache, shape], &[]))
}

/// `[B, 1, 1]` for `x`'s batch `B` (its first dim): a constant when `B` is a number, else
/// `Concat(Shape(t; 0, 1), [1, 1])` of the graph input `t` of the lowest class whose first dim
/// is the same symbol (`input_ids`, shared by every layer), or of `x` itself.
fn batch_shape(g: &mut OnnxGraph, x: Id) -> Option<Id> {
    let batch = g[x].data.tensor()?.shape.as_ref()?.first()?.clone();
    if let Some(b) = batch.known() {
        return Some(Emit::new(g).ints(&[b, 1, 1]));
    }
    let source = g
        .classes()
        .filter(|c| c.nodes.iter().any(|n| matches!(n, Onnx::Input(_))))
        .filter(|c| {
            c.data
                .tensor()
                .and_then(|t| t.shape.as_ref()?.first().cloned())
                .is_some_and(|d| d == batch)
        })
        .map(|c| c.id)
        .min()
        .unwrap_or(x);
    let mut e = Emit::new(g);
    let rows = e.op(
        "Shape",
        &[source],
        &[("start", AttrValue::Int(0)), ("end", AttrValue::Int(1))],
    );
    let ones = e.ints(&[1, 1]);
    Some(e.op("Concat", &[rows, ones], &[("axis", AttrValue::Int(0))]))
}

/// Reads `?rot ?pass ?cos ?sin ?inter ?heads` of
/// `Concat(RotaryEmbedding(x[…, :r], cos, sin), x[…, r:])` (proven by `partial-rotation`):
/// `RotaryEmbedding(x, cos, sin; rotary_embedding_dim r)`, the interleaving kept.
fn partial_rotation(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [rot, pass, cos, sin, inter, heads]: [Id; 6],
) -> Option<Id> {
    let (x, r) = partial_split(g, rot, pass)?;
    let rd = g.add(Onnx::Attr(AttrValue::Int(r)));
    Some(Emit::new(g).op_with(
        "RotaryEmbedding",
        &[x, cos, sin],
        &[
            ("interleaved", inter),
            ("num_heads", heads),
            ("rotary_embedding_dim", rd),
        ],
    ))
}

/// Reads `?product ?perm` of `Transpose(MatMul(f, Cast(Unsqueeze(x, [1]))), [0, 2, 1])`
/// (proven by `outer-angles`): `Mul(Cast(Unsqueeze(x, [2])), frequencies)` with the
/// frequencies the `[1, N, 1]` constant's values as `[N]` (the same Cast target).
fn outer_angles(g: &mut OnnxGraph, _: Site<'_>, [product, perm]: [Id; 2]) -> Option<Id> {
    let read = outer_product_angles(g, product, perm)?;
    let lit = g[read.column].data.konst.as_deref()?;
    let flat = Literal {
        shape: vec![lit.shape.iter().product()],
        ..lit.clone()
    };
    let frequencies = g.add(Onnx::Const(Box::new(flat)));
    let column = Emit::new(g).unsqueeze(read.positions, &[2]);
    let mut cast = read.cast;
    cast.children[0] = column;
    let positions = g.add(Onnx::Op(cast));
    Some(Emit::new(g).bin("Mul", positions, frequencies))
}
