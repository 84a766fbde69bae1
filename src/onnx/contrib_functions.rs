//! Standard-ONNX bodies of the contrib ops mobius emits, written into each model that calls
//! them as model-local functions: a runtime without the contrib kernel can inline the body,
//! while onnxruntime keeps its kernel. The bodies are not written here: they are the inline
//! rules of `rewrites/inline/` read as functions ([`super::rule_body`]), so the optimizer and
//! saved models share one definition of each op. Only calls that fit a body get it (the input
//! counts the rules cover, outputs the body produces).

use std::sync::OnceLock;

use super::proto::FunctionProto;
use super::rule_body::{derive, RuleBody};
use crate::ir::{Attr, Graph};
use crate::opt::rules::{all_rules, Stage};
use crate::Result;

/// onnxruntime's schema defaults of the contrib-op attributes the inline rules require to be
/// set (`when attr-is-set`): a call without the attribute means the op with this value.
const ATTRIBUTE_DEFAULTS: &[(&str, &str, Attr)] = &[
    (
        "com.microsoft::SkipLayerNormalization",
        "epsilon",
        Attr::Float(1e-12),
    ),
    (
        "com.microsoft::SkipSimplifiedLayerNormalization",
        "epsilon",
        Attr::Float(1e-12),
    ),
];

/// The bodies of every contrib op with inline rules, derived from those rules (in op order);
/// an error names the rule that has no function form.
pub fn derived_bodies() -> Result<Vec<RuleBody>> {
    let inline: Vec<_> = all_rules()?
        .into_iter()
        .filter(|r| r.stage == Stage::Inline)
        .collect();
    derive(&inline, |op, attr| {
        ATTRIBUTE_DEFAULTS
            .iter()
            .find(|(o, a, _)| *o == op && *a == attr)
            .map(|(_, _, v)| v.clone())
    })
}

/// The derived bodies, computed once (the rules are embedded in the binary, and the tests
/// derive every one of them).
fn bodies() -> &'static [RuleBody] {
    static BODIES: OnceLock<Vec<RuleBody>> = OnceLock::new();
    BODIES.get_or_init(|| {
        derived_bodies().expect("the embedded inline rules are function bodies (tested)")
    })
}

/// Whether mobius writes the body of `domain::name` itself (such calls are kept as the op on
/// import; the body is attached again on save).
pub fn is_known(domain: &str, name: &str) -> bool {
    bodies()
        .iter()
        .any(|b| b.function.domain == domain && b.function.name == name)
}

/// The function bodies for the contrib ops `graph` calls, in a fixed order: a body is written
/// when every call of its op fits it (present inputs a prefix of a length the rules cover,
/// outputs among those the body produces).
pub fn bodies_for(graph: &Graph) -> Vec<FunctionProto> {
    bodies()
        .iter()
        .filter(|b| {
            let f = &b.function;
            let mut calls = graph
                .nodes
                .iter()
                .filter(|n| n.domain == f.domain && n.op_type == f.name)
                .peekable();
            calls.peek().is_some() && calls.all(|n| fits(b, &n.inputs, &n.outputs))
        })
        .map(|b| b.function.clone())
        .collect()
}

/// Whether a call with these inputs and outputs ("" = absent) computes what `body` computes.
fn fits(body: &RuleBody, inputs: &[String], outputs: &[String]) -> bool {
    let present = inputs
        .iter()
        .rposition(|i| !i.is_empty())
        .map_or(0, |i| i + 1);
    inputs[..present].iter().all(|i| !i.is_empty())
        && body.arities.contains(&present)
        && outputs
            .iter()
            .enumerate()
            .all(|(o, name)| name.is_empty() || o < body.function.output.len())
}
