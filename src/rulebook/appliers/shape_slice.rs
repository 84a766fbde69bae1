//! The appliers of `cleanup/shape_slice.rules`: a constant one-axis `Slice` of `Shape(x)` is
//! `Shape(x; start, end)` (opset 15), one node instead of two, as exporters read a dim or a
//! range of dims of a tensor.

use egg::Id;

use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::query::const_ints;

/// `slice-of-shape`.
pub(super) const SLICE_OF_SHAPE: Applier<5> =
    Applier::new(["?x", "?end", "?start", "?starts", "?ends"], slice_of_shape);

/// `slice-of-shape-on-axis`.
pub(super) const SLICE_OF_SHAPE_ON_AXIS: Applier<6> = Applier::new(
    ["?x", "?end", "?start", "?starts", "?ends", "?axes"],
    slice_of_shape_on_axis,
);

/// `Shape(x; start, end)` for `Slice(Shape(x), [s], [e])` (step 1) when the Shape has no
/// `start`/`end` of its own. Exact: both count a negative bound from the end (the rank) and
/// clamp to `[0, rank]`, and give nothing when the start is not before the end.
fn sliced(g: &mut OnnxGraph, [x, end, start, starts, ends]: [Id; 5]) -> Option<Id> {
    let unset = |g: &OnnxGraph, a: Id| matches!(g[a].data.attr(), Some(AttrValue::Unset));
    if !unset(g, end) || !unset(g, start) {
        return None;
    }
    let (&[s], &[e]) = (
        const_ints(g, starts)?.as_slice(),
        const_ints(g, ends)?.as_slice(),
    ) else {
        return None;
    };
    Some(Emit::new(g).shape(x, s, e))
}

/// Reads `(Slice (Shape ?x ?end ?start) ?starts ?ends)`, see [`sliced`].
fn slice_of_shape(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 5]) -> Option<Id> {
    sliced(g, vars)
}

/// Reads `(Slice (Shape ?x ?end ?start) ?starts ?ends ?axes)` with axes `[0]` or `[-1]` (the
/// only axis of a shape), see [`sliced`].
fn slice_of_shape_on_axis(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 6]) -> Option<Id> {
    let [x, end, start, starts, ends, axes] = vars;
    if !matches!(const_ints(g, axes)?.as_slice(), [0] | [-1]) {
        return None;
    }
    sliced(g, [x, end, start, starts, ends])
}
