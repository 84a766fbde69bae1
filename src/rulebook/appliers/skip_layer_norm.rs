//! The appliers of `fusion/skip_layer_norm.rules`: Add + LayerNormalization (with or without
//! its bias) → `com.microsoft::SkipLayerNormalization`.

use egg::Id;

use super::skip_norm::fuse_skip_norm;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};

const OP: &str = "com.microsoft::SkipLayerNormalization";

/// `skip-layer-norm`.
pub(super) const SKIP_LAYER_NORM: Applier<4> =
    Applier::new(["?a", "?b", "?w", "?eps"], skip_layer_norm);

/// `skip-layer-norm-with-bias`.
pub(super) const SKIP_LAYER_NORM_WITH_BIAS: Applier<5> = Applier::new(
    ["?a", "?b", "?w", "?beta", "?eps"],
    skip_layer_norm_with_bias,
);

/// Reads `?a ?b ?w ?eps` of `(LayerNormalization (Add ?a ?b) ?w ?axis ?eps ?stash)`: one
/// `com.microsoft::SkipLayerNormalization(a, b, w)` whose output 0 is the norm and whose
/// output 3 (the sum) is united with the Add.
fn skip_layer_norm(g: &mut OnnxGraph, site: Site<'_>, vars: [Id; 4]) -> Option<Id> {
    fuse_skip_norm(g, site.rule, OP, vars, None)
}

/// [`skip_layer_norm`] with the bias: reads `?a ?b ?w ?beta ?eps` of
/// `(LayerNormalization (Add ?a ?b) ?w ?beta ?axis ?eps ?stash)`.
fn skip_layer_norm_with_bias(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [a, b, w, beta, eps]: [Id; 5],
) -> Option<Id> {
    fuse_skip_norm(g, site.rule, OP, [a, b, w, eps], Some(beta))
}
