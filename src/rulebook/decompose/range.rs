//! RangeToCumSum: `Range(start, limit, 1)` over int64 → positions from a running sum of ones,
//! for EPs without `Range`: `CumSum(Expand([1], [max(limit − start, 0)])) + (start − 1)`.

use egg::Id;

use crate::ir::DType;
use crate::ops::infer::literal_ints;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;

/// `range-to-cumsum`.
pub(crate) const RANGE_TO_CUMSUM: Applier<3> =
    Applier::new(["?start", "?limit", "?delta"], range_to_cumsum);

/// Reads `?start ?limit ?delta` of `(Range ?start ?limit ?delta)`; declines unless the
/// bounds are int64 and `delta` is the constant 1.
fn range_to_cumsum(g: &mut OnnxGraph, _: Site<'_>, [start, limit, delta]: [Id; 3]) -> Option<Id> {
    let step = g[delta].data.konst.as_deref().and_then(literal_ints)?;
    let mut e = Emit::new(g);
    let int64 = |e: &Emit<'_>, id: Id| e.tensor(id).and_then(|t| t.dtype) == Some(DType::I64);
    if step != [1] || !int64(&e, start) || !int64(&e, limit) || !int64(&e, delta) {
        return None;
    }
    let (zero, one) = (e.ints(&[0]), e.ints(&[1]));
    let span = e.bin("Sub", limit, start);
    let negative = e.bin("Less", span, zero);
    let count = e.op("Where", &[negative, zero, span], &[]);
    let count = e.reshape(count, &[1]);
    let ones = e.bin("Expand", one, count);
    let axis = e.ints(&[0]);
    let counted = e.op("CumSum", &[ones, axis], &[]); // 1, 2, …, n
    let offset = e.bin("Sub", start, one);
    Some(e.bin("Add", counted, offset))
}
