//! The applier of `fusion/skip_norm.rules` (Add + RMSNormalization →
//! `com.microsoft::SkipSimplifiedLayerNormalization`), and the part it shares with
//! [`super::skip_layer_norm`].

use egg::Id;

use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::lang::Onnx;

/// `skip-simplified-layer-norm`.
pub(super) const SKIP_SIMPLIFIED_LAYER_NORM: Applier<4> =
    Applier::new(["?a", "?b", "?w", "?eps"], skip_simplified_layer_norm);

/// Reads `?a ?b ?w ?eps` of `(RMSNormalization (Add ?a ?b) ?w ?axis ?eps ?stash)`: one
/// `com.microsoft::SkipSimplifiedLayerNormalization(a, b, w)` whose output 0 is the norm and
/// whose output 3 (the sum) is united with the Add, so the Add's other consumers read it.
fn skip_simplified_layer_norm(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [a, b, w, eps]: [Id; 4],
) -> Option<Id> {
    let norm = "com.microsoft::SkipSimplifiedLayerNormalization";
    fuse_skip_norm(g, site.rule, norm, [a, b, w, eps], None)
}

/// The shared part of the Skip*Normalization fusions: for a norm over `Add(a, b)` with scale
/// `w` and epsilon attribute `eps`, adds `norm_op(a, b, w[, beta]; epsilon)` with 4 outputs,
/// unites output 3 (the sum) with the Add and returns output 0 (the norm). An unset epsilon is
/// the standard norms' default 1e-5 (the contrib ops' own default differs, so it is always
/// written).
pub(super) fn fuse_skip_norm(
    g: &mut OnnxGraph,
    rule: &str,
    norm_op: &str,
    [a, b, w, eps]: [Id; 4],
    beta: Option<Id>,
) -> Option<Id> {
    let epsilon = match g[eps].data.attr()? {
        AttrValue::Float(bits) => *bits,
        AttrValue::Unset => 1e-5f32.to_bits(),
        _ => return None,
    };
    let add = g.lookup(Onnx::op("Add", &[], 2, 1, vec![a, b]))?;
    let eps = g.add(Onnx::Attr(AttrValue::Float(epsilon)));
    let mut children = vec![a, b, w];
    children.extend(beta);
    let inputs = children.len();
    children.push(eps);
    let fused = g.add(Onnx::op(norm_op, &["epsilon"], inputs, 4, children));
    let norm = g.add(Onnx::Get {
        index: 0,
        tuple: [fused],
    });
    let sum = g.add(Onnx::Get {
        index: 3,
        tuple: [fused],
    });
    if check_union(g, add, sum, rule) {
        g.union(add, sum);
    }
    Some(norm)
}
