//! The applier of `q-scale-into-attention` (`rewrites/recognize/attention_q_scale.rules`): the
//! power-of-two factor of a scaled q folded into the Attention's `scale`.

use egg::Id;

use crate::ops::schema;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::lang::Onnx;
use crate::opt::query::scalar_float;

/// `q-scale-into-attention`.
pub(super) const Q_SCALE_INTO_ATTENTION: Applier<14> = Applier::new(
    [
        "?q",
        "?k",
        "?v",
        "?mask",
        "?pk",
        "?pv",
        "?causal",
        "?kvh",
        "?qnh",
        "?mode",
        "?scale",
        "?softcap",
        "?precision",
        "?c",
    ],
    q_scale_into_attention,
);

/// Reads the variables of `q-scale-into-attention`: the Attention on the unscaled q, its
/// `scale` multiplied by c (exact for the power of two the condition checked), the other
/// inputs and attributes unchanged.
fn q_scale_into_attention(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 14]) -> Option<Id> {
    let [q, k, v, mask, pk, pv, causal, kvh, qnh, mode, scale, softcap, precision, c] = vars;
    let AttrValue::Float(bits) = g[scale].data.attr()? else {
        return None;
    };
    let factor = scalar_float(g, c)? as f32;
    let (s, scaled) = (f32::from_bits(*bits), f32::from_bits(*bits) * factor);
    // Exact only while the product stays a normal number (or both are 0).
    if !(scaled.is_normal() || s == 0.0) {
        return None;
    }
    let scale = g.add(Onnx::Attr(AttrValue::Float(scaled.to_bits())));
    let children = vec![
        q, k, v, mask, pk, pv, causal, kvh, qnh, mode, scale, softcap, precision,
    ];
    Some(g.add(Onnx::op("Attention", schema("Attention")?, 6, 3, children)))
}
