//! HtpRank4RMSNorm: `RMSNormalization` over the last axis of a rank-4 input whose last two
//! dims are static → Reshape to rank 3, the same norm, Reshape back (for EPs that run the
//! norm on rank-3 inputs only).

use egg::{Id, Subst};

use super::Emit;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::{AttrValue, Onnx};

/// Reads `?x ?w ?eps ?stash` of `(RMSNormalization ?x ?w ?axis ?eps ?stash)` (the rule checks
/// that `?axis` is the last one): `Reshape(RMSNormalization(Reshape(x, [0, −1, D]), w;
/// axis −1), [0, −1, H, D])`.
pub fn rank4_rms_norm_via_rank3(
    g: &mut OnnxGraph,
    _matched: Id,
    s: &Subst,
    _rule: &str,
) -> Option<Id> {
    let var = |name: &str| Emit::bound(s, name);
    let mut e = Emit::new(g);
    let (x, w, eps, stash) = (var("?x")?, var("?w")?, var("?eps")?, var("?stash")?);
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
