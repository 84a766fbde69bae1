//! The rule files in `rewrites/` (embedded at build time) → egg rewrites.
//!
//! Format (documented in `rewrites/README.md`): a rule starts with `rule NAME` and has one
//! `key value` line per field: `group` (trace name), `stage` (cleanup, recognize, fusion,
//! inline, lowering), `gate` (a capability expression, see [`super::gate`]), `pattern` (one rooted
//! pattern), any number of `when CONDITION ?var…`, and either `replace PATTERN` or
//! `apply APPLIER`. `#` starts a comment. Conditions and appliers are Rust functions registered
//! by name in [`super::conditions`] and [`super::appliers`]; their variables are resolved
//! against the pattern when the rule is read ([`super::bind`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

use super::analysis::{OnnxAnalysis, OnnxGraph};
use super::appliers::applier;
use super::bind::{AnyApplier, AnyCondition, BoundApplier, BoundCondition, Site};
use super::checked_union::check_union;
use super::conditions::condition;
use super::gate::Gate;
use super::lang::Onnx;
use crate::{Error, Result};

/// The rule files, by path under `rewrites/`.
pub const RULE_FILES: &[(&str, &str)] = &[
    (
        "recognize/rms_norm.rules",
        include_str!("../../rewrites/recognize/rms_norm.rules"),
    ),
    (
        "recognize/layer_norm.rules",
        include_str!("../../rewrites/recognize/layer_norm.rules"),
    ),
    (
        "recognize/norm_casts.rules",
        include_str!("../../rewrites/recognize/norm_casts.rules"),
    ),
    (
        "recognize/norm_scale.rules",
        include_str!("../../rewrites/recognize/norm_scale.rules"),
    ),
    (
        "recognize/bias_order.rules",
        include_str!("../../rewrites/recognize/bias_order.rules"),
    ),
    (
        "recognize/gemm.rules",
        include_str!("../../rewrites/recognize/gemm.rules"),
    ),
    (
        "recognize/attention.rules",
        include_str!("../../rewrites/recognize/attention.rules"),
    ),
    (
        "recognize/rotary.rules",
        include_str!("../../rewrites/recognize/rotary.rules"),
    ),
    (
        "recognize/head_layout.rules",
        include_str!("../../rewrites/recognize/head_layout.rules"),
    ),
    (
        "fusion/gqa.rules",
        include_str!("../../rewrites/fusion/gqa.rules"),
    ),
    (
        "fusion/gqa_genai.rules",
        include_str!("../../rewrites/fusion/gqa_genai.rules"),
    ),
    (
        "fusion/gelu.rules",
        include_str!("../../rewrites/fusion/gelu.rules"),
    ),
    (
        "fusion/pack_qkv.rules",
        include_str!("../../rewrites/fusion/pack_qkv.rules"),
    ),
    (
        "fusion/matmul_nbits.rules",
        include_str!("../../rewrites/fusion/matmul_nbits.rules"),
    ),
    (
        "fusion/moe.rules",
        include_str!("../../rewrites/fusion/moe.rules"),
    ),
    (
        "fusion/moe_clamped.rules",
        include_str!("../../rewrites/fusion/moe_clamped.rules"),
    ),
    (
        "fusion/skip_norm.rules",
        include_str!("../../rewrites/fusion/skip_norm.rules"),
    ),
    (
        "fusion/skip_layer_norm.rules",
        include_str!("../../rewrites/fusion/skip_layer_norm.rules"),
    ),
    (
        "fusion/bias_gelu.rules",
        include_str!("../../rewrites/fusion/bias_gelu.rules"),
    ),
    (
        "inline/bias_gelu.rules",
        include_str!("../../rewrites/inline/bias_gelu.rules"),
    ),
    (
        "inline/matmul_nbits.rules",
        include_str!("../../rewrites/inline/matmul_nbits.rules"),
    ),
    (
        "inline/moe.rules",
        include_str!("../../rewrites/inline/moe.rules"),
    ),
    (
        "inline/moe_clamped.rules",
        include_str!("../../rewrites/inline/moe_clamped.rules"),
    ),
    (
        "inline/skip_layer_norm.rules",
        include_str!("../../rewrites/inline/skip_layer_norm.rules"),
    ),
    (
        "inline/skip_norm.rules",
        include_str!("../../rewrites/inline/skip_norm.rules"),
    ),
    (
        "cleanup/algebraic.rules",
        include_str!("../../rewrites/cleanup/algebraic.rules"),
    ),
    (
        "cleanup/identity.rules",
        include_str!("../../rewrites/cleanup/identity.rules"),
    ),
    (
        "lowering/decompose_rotary.rules",
        include_str!("../../rewrites/lowering/decompose_rotary.rules"),
    ),
    (
        "lowering/decompose_attention.rules",
        include_str!("../../rewrites/lowering/decompose_attention.rules"),
    ),
    (
        "lowering/htp_rank4_rmsnorm.rules",
        include_str!("../../rewrites/lowering/htp_rank4_rmsnorm.rules"),
    ),
    (
        "lowering/range.rules",
        include_str!("../../rewrites/lowering/range.rules"),
    ),
    (
        "lowering/tensor_scatter.rules",
        include_str!("../../rewrites/lowering/tensor_scatter.rules"),
    ),
];

/// The optimizer stages, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Identity elimination, algebraic no-ops, constant folding.
    Cleanup,
    /// Decomposed forms exporters emit → the standard ops the builder emits.
    Recognize,
    /// Fusions into larger (contrib) ops.
    Fusion,
    /// Standard-ONNX bodies of contrib ops (equivalences).
    Inline,
    /// EP-specific lowerings.
    Lowering,
}

impl Stage {
    /// All stages in order.
    pub const ALL: [Stage; 5] = [
        Stage::Cleanup,
        Stage::Recognize,
        Stage::Fusion,
        Stage::Inline,
        Stage::Lowering,
    ];
}

impl FromStr for Stage {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Stage, String> {
        Ok(match s {
            "cleanup" => Stage::Cleanup,
            "recognize" => Stage::Recognize,
            "fusion" => Stage::Fusion,
            "inline" => Stage::Inline,
            "lowering" => Stage::Lowering,
            other => {
                return Err(format!(
                "unknown stage `{other}` (expected cleanup, recognize, fusion, inline or lowering)"
            ))
            }
        })
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Cleanup => "Cleanup",
            Stage::Recognize => "Recognize",
            Stage::Fusion => "Fusion",
            Stage::Inline => "InlinePass",
            Stage::Lowering => "Lowering",
        })
    }
}

/// What a rule puts in place of its match.
#[derive(Debug, Clone)]
pub enum Replacement {
    /// A pattern over the match's variables.
    Pattern(Pattern<Onnx>),
    /// A registered Rust applier.
    Applier {
        /// Its registered name.
        name: String,
        /// It, reading the variables of the rule's pattern.
        bound: Arc<dyn BoundApplier>,
    },
}

/// A side condition of a rule (`when NAME ?var…`).
#[derive(Debug, Clone)]
pub struct When {
    /// The registered condition's name.
    pub name: String,
    /// The variables it is given, in order.
    pub vars: Vec<Var>,
    /// It, reading those variables of the rule's pattern.
    bound: Arc<dyn BoundCondition>,
}

/// One rule as read from its file.
#[derive(Debug, Clone)]
pub struct RuleSpec {
    /// Unique rule name.
    pub name: String,
    /// Group shown in the trace.
    pub group: String,
    /// Stage the rule runs in.
    pub stage: Stage,
    /// When the rule is enabled.
    pub gate: Gate,
    /// The rooted pattern it matches.
    pub pattern: Pattern<Onnx>,
    /// Side conditions.
    pub conditions: Vec<When>,
    /// The replacement.
    pub replacement: Replacement,
    /// `file:line` of the `rule` line.
    pub origin: String,
}

/// Parses one rule file.
pub fn parse_rules(file: &str, text: &str) -> Result<Vec<RuleSpec>> {
    let err = |line: usize, message: String| Error::RuleFile {
        path: format!("rewrites/{file}").into(),
        line,
        message,
    };
    let mut rules = Vec::new();
    let mut current: Option<(usize, Partial)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let text = raw.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            continue;
        }
        let (key, value) = text
            .split_once(char::is_whitespace)
            .map_or((text, ""), |(k, v)| (k, v.trim()));
        if key == "rule" {
            if let Some((at, p)) = current.take() {
                rules.push(p.finish(file, at).map_err(|m| err(at, m))?);
            }
            if value.is_empty() {
                return Err(err(line, "`rule` needs a name".into()));
            }
            current = Some((line, Partial::new(value)));
            continue;
        }
        let Some((_, p)) = current.as_mut() else {
            return Err(err(
                line,
                format!("`{key}` outside a rule (start one with `rule NAME`)"),
            ));
        };
        p.set(key, value).map_err(|m| err(line, m))?;
    }
    if let Some((at, p)) = current {
        rules.push(p.finish(file, at).map_err(|m| err(at, m))?);
    }
    Ok(rules)
}

/// Every rule of every embedded rule file; rule names are unique.
pub fn all_rules() -> Result<Vec<RuleSpec>> {
    let mut rules = Vec::new();
    for (file, text) in RULE_FILES {
        rules.extend(parse_rules(file, text)?);
    }
    let mut seen = std::collections::HashSet::new();
    for r in &rules {
        if !seen.insert(r.name.clone()) {
            return Err(Error::Graph(format!(
                "{}: rule name `{}` is used twice",
                r.origin, r.name
            )));
        }
    }
    Ok(rules)
}

/// A rule being read.
#[derive(Default)]
struct Partial {
    name: String,
    group: Option<String>,
    stage: Option<Stage>,
    gate: Option<Gate>,
    pattern: Option<Pattern<Onnx>>,
    conditions: Vec<(String, &'static dyn AnyCondition, Vec<Var>)>,
    replacement: Option<PartialReplacement>,
}

/// A `replace` or `apply` line, before the pattern's variables are known.
enum PartialReplacement {
    Pattern(Pattern<Onnx>),
    Applier(String, &'static dyn AnyApplier),
}

impl Partial {
    fn new(name: &str) -> Partial {
        Partial {
            name: name.to_string(),
            ..Partial::default()
        }
    }

    fn set(&mut self, key: &str, value: &str) -> std::result::Result<(), String> {
        let pattern = |v: &str| {
            v.parse::<Pattern<Onnx>>()
                .map_err(|e| format!("bad pattern: {e}"))
        };
        let once = |set: bool| {
            if set {
                Err(format!("`{key}` given twice"))
            } else {
                Ok(())
            }
        };
        match key {
            "group" => {
                once(self.group.is_some())?;
                self.group = Some(value.to_string());
            }
            "stage" => {
                once(self.stage.is_some())?;
                self.stage = Some(value.parse()?);
            }
            "gate" => {
                once(self.gate.is_some())?;
                self.gate = Some(value.parse()?);
            }
            "pattern" => {
                once(self.pattern.is_some())?;
                let p = pattern(value)?;
                if matches!(p.ast.as_ref().last(), Some(egg::ENodeOrVar::Var(_))) {
                    return Err("a pattern must be rooted at an op, not a variable".into());
                }
                self.pattern = Some(p);
            }
            "when" => {
                let mut words = value.split_whitespace();
                let name = words.next().ok_or("`when` needs a condition name")?;
                let check =
                    condition(name).ok_or_else(|| format!("unknown condition `{name}`"))?;
                let vars = words
                    .map(|w| w.parse::<Var>().map_err(|_| format!("`{w}` is not a ?variable")))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                self.conditions.push((name.to_string(), check, vars));
            }
            "replace" => {
                once(self.replacement.is_some())?;
                self.replacement = Some(PartialReplacement::Pattern(pattern(value)?));
            }
            "apply" => {
                once(self.replacement.is_some())?;
                let body = applier(value).ok_or_else(|| format!("unknown applier `{value}`"))?;
                self.replacement = Some(PartialReplacement::Applier(value.to_string(), body));
            }
            other => return Err(format!("unknown field `{other}` (expected group, stage, gate, pattern, when, replace or apply)")),
        }
        Ok(())
    }

    fn finish(self, file: &str, line: usize) -> std::result::Result<RuleSpec, String> {
        let missing = |f: &str| format!("rule `{}` has no `{f}`", self.name);
        let pattern = self.pattern.ok_or_else(|| missing("pattern"))?;
        let bound = pattern.vars();
        let conditions = self
            .conditions
            .into_iter()
            .map(|(name, check, vars)| {
                let bound = check
                    .resolve(&vars, &bound)
                    .map_err(|m| format!("condition `{name}` {m}"))?;
                Ok(When { name, vars, bound })
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let replacement = match self.replacement {
            Some(PartialReplacement::Pattern(r)) => {
                if let Some(v) = r.vars().into_iter().find(|v| !bound.contains(v)) {
                    return Err(format!(
                        "the replacement uses {v}, which the pattern does not bind"
                    ));
                }
                Some(Replacement::Pattern(r))
            }
            Some(PartialReplacement::Applier(name, body)) => {
                let bound = body
                    .resolve(&bound)
                    .map_err(|m| format!("applier `{name}` {m}"))?;
                Some(Replacement::Applier { name, bound })
            }
            None => None,
        };
        Ok(RuleSpec {
            group: self.group.ok_or_else(|| missing("group"))?,
            stage: self.stage.ok_or_else(|| missing("stage"))?,
            gate: self.gate.ok_or_else(|| missing("gate"))?,
            replacement: replacement.ok_or_else(|| missing("replace` or `apply"))?,
            conditions,
            origin: format!("rewrites/{file}:{line}"),
            name: self.name,
            pattern,
        })
    }
}

/// Conditions plus replacement, as an egg applier.
struct RuleApplier {
    conditions: Vec<Arc<dyn BoundCondition>>,
    replacement: Replacement,
}

impl Applier<Onnx, OnnxAnalysis> for RuleApplier {
    fn apply_one(
        &self,
        egraph: &mut OnnxGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<Onnx>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        if !self.conditions.iter().all(|c| c.holds(egraph, subst)) {
            return Vec::new();
        }
        let _ = searcher_ast;
        let result = match &self.replacement {
            Replacement::Pattern(p) => egraph.add_instantiation(&p.ast, subst),
            Replacement::Applier { bound, .. } => {
                let site = Site {
                    class: eclass,
                    rule: rule_name.as_str(),
                };
                match bound.apply(egraph, site, subst) {
                    Some(id) => id,
                    None => return Vec::new(),
                }
            }
        };
        if !check_union(egraph, eclass, result, rule_name.as_str()) {
            return Vec::new();
        }
        if egraph.union(eclass, result) {
            vec![eclass]
        } else {
            Vec::new()
        }
    }
}

impl RuleSpec {
    /// The egg rewrite of this rule.
    pub fn rewrite(&self) -> Result<Rewrite<Onnx, OnnxAnalysis>> {
        let applier = RuleApplier {
            conditions: self.conditions.iter().map(|w| w.bound.clone()).collect(),
            replacement: self.replacement.clone(),
        };
        Rewrite::new(self.name.clone(), self.pattern.clone(), applier)
            .map_err(|e| Error::Graph(format!("{}: {e}", self.origin)))
    }
}
