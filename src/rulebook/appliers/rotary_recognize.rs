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
    outer_product_angles, partial_split, rotary_table, HalfTable,
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
/// table), no `position_ids`, every attribute at its default (halves, rotate all of `D`).
fn rotate_half(g: &mut OnnxGraph, _: Site<'_>, [x, cos, sin]: [Id; 3]) -> Option<Id> {
    let (cos, sin) = (rotary_table(g, cos, x)?, rotary_table(g, sin, x)?);
    let (cos, sin) = (half_cache(g, &cos), half_cache(g, &sin));
    Some(Emit::new(g).op("RotaryEmbedding", &[x, cos, sin], &[]))
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
