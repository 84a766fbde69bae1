//! HtpRank4RMSNorm: `RMSNormalization` over the last axis of a rank-4 input whose last two
//! dims are static → Reshape to rank 3, the same norm, Reshape back (for EPs that run the
//! norm on rank-3 inputs only).

use egg::Id;

use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;

/// `rank4-rms-norm-via-rank3`.
pub(crate) const RANK4_RMS_NORM_VIA_RANK3: Applier<4> =
    Applier::new(["?x", "?w", "?eps", "?stash"], rank4_rms_norm_via_rank3);

/// Reads `?x ?w ?eps ?stash` of `(RMSNormalization ?x ?w ?axis ?eps ?stash)` (the rule checks
/// that `?axis` is the last one): `Reshape(RMSNormalization(Reshape(x, [0, −1, D]), w;
/// axis −1), [0, −1, H, D])`.
fn rank4_rms_norm_via_rank3(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, w, eps, stash]: [Id; 4],
) -> Option<Id> {
    let mut e = Emit::new(g);
    let shape = e.tensor(x)?.shape.clone()?;
    let [_, _, heads, size] = shape.as_slice() else {
        return None;
    };
    let (heads, size) = (heads.known()?, size.known()?);
    // The scale must broadcast over the last axis only (1-D `[D]` or `[1]`), as the spec allows.
    match e.tensor(w)?.shape.as_deref()? {
        [d] if d.known() == Some(size) || d.known() == Some(1) => {}
        _ => return None,
    }
    let flat = e.reshape(x, &[0, -1, size]);
    let axis = e.g.add(Onnx::Attr(AttrValue::Int(-1)));
    let attrs = [("axis", axis), ("epsilon", eps), ("stash_type", stash)];
    let normed = e.op_with("RMSNormalization", &[flat, w], &attrs);
    Some(e.reshape(normed, &[0, -1, heads, size]))
}
