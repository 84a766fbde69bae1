//! The default-domain opset of an optimized model: rules may introduce standard ops newer than
//! the opset an imported model declares (an exported opset-18 model gains opset-23
//! `RMSNormalization`), so the saved model declares the opset its ops need, and the cost model
//! never picks an op the model cannot declare.

use crate::ir::{Graph, Model};

/// The newest default-domain opset the optimizer writes (the one `mobius build` emits).
pub const NEWEST: i64 = 24;

/// Standard ops whose meaning changed incompatibly between opset 18 and [`NEWEST`]
/// (`DFT`'s axis became an input and `GridSample`'s modes were renamed in 20,
/// `GroupNormalization`'s scale and bias became per-channel in 21): a model holding one keeps
/// its declared opset.
const CHANGED_AFTER_18: &[&str] = &["DFT", "GridSample", "GroupNormalization"];

/// The opset in which the standard op `op_type` first appeared, when a rule may introduce it
/// (its registry entry's [`since`](crate::ops::OpDef::since)).
pub fn introduced_in(op_type: &str) -> Option<i64> {
    crate::ops::find_in("", op_type).and_then(|def| def.since)
}

/// The default-domain opset `model` declares (0 when it imports none).
pub fn declared(model: &Model) -> i64 {
    model.opsets.get("").copied().unwrap_or(0)
}

/// The newest opset the optimized form of `model` may declare: [`NEWEST`] when every op of its
/// graph means the same there as at its declared opset (opset 18 or later, no op of
/// [`CHANGED_AFTER_18`]), its declared opset otherwise (opset 17 `ReduceMean` takes its axes
/// as an attribute, for one).
pub fn ceiling(model: &Model) -> i64 {
    let own = declared(model);
    let portable = model
        .graph
        .nodes
        .iter()
        .all(|n| !n.domain.is_empty() || !CHANGED_AFTER_18.contains(&n.op_type.as_str()));
    if own >= 18 && portable {
        NEWEST.max(own)
    } else {
        own
    }
}

/// The opset `graph` needs when its model declared `declared` and may declare up to
/// `ceiling`: the newest opset in which one of its standard ops appeared, or `declared` if that
/// is newer. A graph calling contrib ops also carries their function bodies, which import
/// [`NEWEST`] (a model must import the opset its functions import): such a graph is declared
/// at [`NEWEST`] when the ceiling allows it (below it the bodies are left out when saving).
pub fn required(graph: &Graph, declared: i64, ceiling: i64) -> i64 {
    let standard = graph
        .nodes
        .iter()
        .filter(|n| n.domain.is_empty() || n.domain == "ai.onnx")
        .filter_map(|n| introduced_in(&n.op_type))
        .fold(declared, i64::max);
    let contrib = graph.nodes.iter().any(|n| n.domain == "com.microsoft");
    if contrib && ceiling >= NEWEST {
        standard.max(NEWEST)
    } else {
        standard
    }
}

/// The IR version that goes with `opset` at the least: opsets 23 and later were released with
/// IR version 11.
pub fn min_ir_version(opset: i64) -> i64 {
    if opset >= 23 {
        11
    } else {
        0
    }
}
