//! Standard-ONNX bodies of the contrib ops mobius emits, written into each model that calls
//! them as model-local functions: a runtime without the contrib kernel can inline the body,
//! while onnxruntime keeps its kernel. The bodies are not written here: they are the inline
//! rules of `rewrites/inline/` read as functions ([`rule_body`]), so the optimizer and saved
//! models share one definition of each op. Export and import are given them as
//! [`ContribFunctions`]. Only calls that fit a body get it (the input
//! counts the rules cover, outputs the body produces).
//!
//! One exception, [`HAND_WRITTEN`]: the inline rules of `com.microsoft::MatMulNBits` re-lay out
//! its initializers at save time, which a function body cannot do (its inputs are arbitrary
//! tensors), so its body unpacks the codes with standard ops, written by hand in
//! [`matmul_nbits_body`].

pub mod matmul_nbits_body;
pub mod rule_body;

use std::sync::OnceLock;

use egg::ENodeOrVar;

use crate::ir::{Attr, Graph, Model};
use crate::onnx::functions::KnownFunctions;
use crate::onnx::proto::FunctionProto;
use crate::opt::lang::Onnx;
use crate::opt::rules::{RuleSpec, Stage};
use crate::Result;
use rule_body::{derive, RuleBody, BODY_OPSET};

/// The contrib ops (`domain::Op`) whose bodies are written by hand rather than derived from
/// their inline rules (those rules are not function bodies).
pub const HAND_WRITTEN: &[&str] = &["com.microsoft::MatMulNBits"];

/// The contrib ops (`domain::Op`) with inline rules but no body: the rules re-lay out
/// initializers (`com.microsoft::MoE`'s and `QMoE`'s expert weights back into the dense
/// block's stacks) or build a subgraph attribute (`com.microsoft::LinearAttention`'s `Scan`),
/// which the derived function bodies cannot, and no body is written by hand yet, so a saved
/// model's calls carry none (as GroupQueryAttention's); the optimizer still inlines them for
/// EPs without the kernel.
pub const NO_BODY: &[&str] = &[
    "com.microsoft::MoE",
    "com.microsoft::QMoE",
    "com.microsoft::LinearAttention",
];

/// The contrib op (`domain::Op`) a rule's pattern is rooted at.
fn rule_op(rule: &RuleSpec) -> Option<String> {
    rule.pattern.ast.as_ref().iter().find_map(|n| match n {
        ENodeOrVar::ENode(Onnx::Op(op)) if op.op.as_str().contains("::") => Some(op.op.to_string()),
        _ => None,
    })
}

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

/// The bodies of every contrib op with inline rules but those [`HAND_WRITTEN`] and
/// [`NO_BODY`], derived from those rules (in op order); an error names the rule that has no function form.
pub fn derived_bodies() -> Result<Vec<RuleBody>> {
    let inline: Vec<_> = super::rules()?
        .rules
        .into_iter()
        .filter(|r| r.stage == Stage::Inline)
        .filter(|r| {
            rule_op(r).is_none_or(|op| ![HAND_WRITTEN, NO_BODY].concat().contains(&op.as_str()))
        })
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
    (domain, name) == matmul_nbits_body::OP
        || bodies()
            .iter()
            .any(|b| b.function.domain == domain && b.function.name == name)
}

/// The function bodies for the contrib ops `graph` calls, in a fixed order: a body is written
/// when every call of its op fits it (present inputs a prefix of a length the rules cover,
/// outputs among those the body produces; for MatMulNBits see
/// [`matmul_nbits_body::body_for`]).
pub fn bodies_for(graph: &Graph) -> Vec<FunctionProto> {
    let derived = bodies()
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
        .map(|b| b.function.clone());
    derived.chain(matmul_nbits_body::body_for(graph)).collect()
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

/// The contrib-op bodies of the rulebook, as export and import are given them.
#[derive(Debug, Clone, Copy)]
pub struct ContribFunctions;

impl KnownFunctions for ContribFunctions {
    /// [`bodies_for`] the model's graph. A model must import the opset its functions import:
    /// an imported model kept at an older opset (see `opt::opset`) is written without the
    /// bodies, which onnxruntime does not need.
    fn functions_for(&self, model: &Model) -> Vec<FunctionProto> {
        match model.opsets.get("") {
            Some(&BODY_OPSET) => bodies_for(&model.graph),
            _ => Vec::new(),
        }
    }

    fn is_known(&self, domain: &str, name: &str) -> bool {
        is_known(domain, name)
    }
}
