//! TensorScatterToScatterND: the static KV cache's `TensorScatter` (axis 1 of a 3-D cache,
//! linear mode) as `ScatterND` over `(b, write_indices[b] + s)` index pairs, for EPs without
//! TensorScatter. Row and token numbers come from running sums of ones (no `Range`).

use egg::Id;

use crate::ir::DType;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;

/// `tensor-scatter-to-scatternd`.
pub(crate) const TENSOR_SCATTER_TO_SCATTER_ND: Applier<5> = Applier::new(
    ["?cache", "?update", "?write", "?axis", "?mode"],
    tensor_scatter_to_scatter_nd,
);

/// `0, 1, …, n − 1` for the 1-D int64 count `n` (`[1]`).
fn counting(e: &mut Emit<'_>, n: Id) -> Id {
    let one = e.ints(&[1]);
    let ones = e.bin("Expand", one, n);
    let axis = e.int(0);
    let counted = e.op("CumSum", &[ones, axis], &[]);
    e.bin("Sub", counted, one)
}

/// Reads `?cache ?update ?write ?axis ?mode` of a TensorScatter; declines unless the cache is
/// 3-D, the axis is 1 (or the default −2), the mode linear and `write_indices` an int64 input.
fn tensor_scatter_to_scatter_nd(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [cache, update, write, axis, mode]: [Id; 5],
) -> Option<Id> {
    let mut e = Emit::new(g);
    if e.tensor(cache)?.rank()? != 3 || e.tensor(update)?.rank()? != 3 {
        return None;
    }
    if !matches!(e.int_or(axis, -2)?, 1 | -2) {
        return None;
    }
    match e.attr(mode)? {
        AttrValue::Unset => {}
        AttrValue::Str(s) if s.as_str() == "linear" => {}
        _ => return None,
    }
    if e.is_absent(write) || e.tensor(write)?.dtype? != DType::I64 {
        return None;
    }
    let batch = e.shape(update, 0, 1);
    let rows = counting(&mut e, batch); // [B]
    let tokens = e.shape(update, 1, 2);
    let offsets = counting(&mut e, tokens); // [S]
    let starts = e.unsqueeze(write, &[1]); // [B, 1]
    let slots = e.bin("Add", starts, offsets); // [B, S]
    let rows = e.unsqueeze(rows, &[1]); // [B, 1]
    let grid = e.op("Shape", &[slots], &[]);
    let rows = e.bin("Expand", rows, grid); // [B, S]
    let rows = e.unsqueeze(rows, &[2]);
    let slots = e.unsqueeze(slots, &[2]);
    let indices = e.concat(&[rows, slots], 2); // [B, S, 2]
    Some(e.op("ScatterND", &[cache, indices, update], &[]))
}
