//! The appliers of the multi-query head layout in `recognize/head_layout.rules`, as GPT-BigCode's
//! export writes it: the packed projection `qkv [B, S, N]` unsqueezed to `[B, 1, S, N]` and split
//! on its last axis into q `[B, 1, S, Hq·D]` (then viewed as heads by a Reshape to
//! `[B, S, Hq, D]` and a Transpose) and the single key and value head `[B, 1, S, D]`. Read as
//! the 3-D parts of `qkv` (a Split of the unsqueezed tensor is the unsqueezed Split) and a
//! single head `Unsqueeze(x, [1])` as the head view of `x` with one head, so the 3-D Attention
//! rules apply.

use egg::Id;

use crate::ops::schema;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::{const_ints, int_attr, known_dims};

/// `split-of-unsqueezed`.
pub(super) const SPLIT_OF_UNSQUEEZED: Applier<5> = Applier::new(
    ["?x", "?axes", "?sizes", "?axis", "?n"],
    split_of_unsqueezed,
);

/// `unsqueezed-single-head`.
pub(super) const UNSQUEEZED_SINGLE_HEAD: Applier<2> =
    Applier::new(["?x", "?axes"], unsqueezed_single_head);

/// The inserted axes of `Unsqueeze(x, axes)` (constant, normalized against the output rank
/// `rank`), sorted; `None` when not read or repeated.
fn inserted_axes(g: &OnnxGraph, axes: Id, rank: i64) -> Option<Vec<i64>> {
    let mut out = const_ints(g, axes)?
        .into_iter()
        .map(|a| if a < 0 { a + rank } else { a })
        .collect::<Vec<_>>();
    out.sort_unstable();
    let distinct = out.windows(2).all(|w| w[0] != w[1]);
    (distinct && out.iter().all(|a| (0..rank).contains(a))).then_some(out)
}

/// Reads `?x ?axes ?sizes ?axis ?n` of `(get0 (Split/3 (Unsqueeze ?x ?axes) ?sizes ?axis ?n))`:
/// when the split axis is not one `Unsqueeze` inserts, each output `i` of the Split is
/// `Unsqueeze(get_i(Split(x, sizes; axis′)), axes)`, `axis′` the same axis of `x` (the inserted
/// axes before it left out). Exact: the inserted axes have extent 1 and the parts are the same
/// slices of the same elements. Outputs 1 and 2 are united here (checked), output 0 returned.
fn split_of_unsqueezed(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 5]) -> Option<Id> {
    let [x, axes, sizes, axis, n] = vars;
    let rank = g[x].data.tensor()?.rank()? as i64;
    let inserted = inserted_axes(g, axes, rank + const_ints(g, axes)?.len() as i64)?;
    let out_rank = rank + inserted.len() as i64;
    let a = int_attr(g, axis)?;
    let a = if a < 0 { a + out_rank } else { a };
    if !(0..out_rank).contains(&a) || inserted.contains(&a) {
        return None;
    }
    let inner = a - inserted.iter().filter(|&&i| i < a).count() as i64;
    let names = schema("Split")?;
    let unsqueezed = g.lookup(Onnx::op(
        "Unsqueeze",
        schema("Unsqueeze")?,
        2,
        1,
        vec![x, axes],
    ))?;
    let old = g.lookup(Onnx::op(
        "Split",
        names,
        2,
        3,
        vec![unsqueezed, sizes, axis, n],
    ))?;
    let inner_axis = g.add(Onnx::Attr(crate::ops::value::AttrValue::Int(inner)));
    let split = g.add(Onnx::op(
        "Split",
        names,
        2,
        3,
        vec![x, sizes, inner_axis, n],
    ));
    let mut parts = Vec::new();
    for index in 0..3 {
        let part = g.add(Onnx::Get {
            index,
            tuple: [split],
        });
        parts.push(Emit::new(g).op("Unsqueeze", &[part, axes], &[]));
    }
    for index in [1, 2] {
        let was = g.add(Onnx::Get {
            index,
            tuple: [old],
        });
        let now = parts[index];
        if check_union(g, was, now, site.rule) {
            g.union(was, now);
        }
    }
    Some(parts[0])
}

/// Reads `?x ?axes` of `(Unsqueeze ?x ?axes)`: `x` 3-D `[B, S, D]` (known dims) unsqueezed at
/// axis 1 is its head view with one head, `Transpose(Reshape(x, [0, 0, 1, D]), [0, 2, 1, 3])`
/// (what multi-query attention's single key and value head is). Exact: both are `[B, 1, S, D]`
/// holding `x`'s elements in the same order.
fn unsqueezed_single_head(g: &mut OnnxGraph, _: Site<'_>, [x, axes]: [Id; 2]) -> Option<Id> {
    let dims = known_dims(g, x, 3)?;
    let d = dims[2].known()?;
    if inserted_axes(g, axes, 4)? != [1] || d <= 0 {
        return None;
    }
    let mut e = Emit::new(g);
    let split = e.reshape(x, &[0, 0, 1, d]);
    Some(e.transpose(split, &[0, 2, 1, 3]))
}
