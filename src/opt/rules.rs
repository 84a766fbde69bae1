//! The rule files in `rewrites/` (embedded at build time) → egg rewrites.
//!
//! Format (documented in `rewrites/README.md`): a rule starts with `rule NAME` and has one
//! `key value` line per field: `group` (trace name), `stage` (cleanup, recognize, fusion,
//! inline, lowering), `gate` (a capability expression, see [`super::gate`]), `pattern` (one rooted
//! pattern), any number of `when CONDITION ?var…`, and either `replace PATTERN` or
//! `apply APPLIER`. `#` starts a comment. Conditions and appliers are Rust functions registered
//! by name in [`super::conditions`].

use std::fmt;
use std::str::FromStr;

use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

use super::analysis::{OnnxAnalysis, OnnxGraph};
use super::conditions::{applier, condition, ApplierFn, ConditionFn};
use super::fingerprint::check_union;
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
        "fusion/gqa.rules",
        include_str!("../../rewrites/fusion/gqa.rules"),
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
    Applier(String),
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
    /// Named side conditions with their variables.
    pub conditions: Vec<(String, Vec<Var>)>,
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
#[derive(Debug, Default)]
struct Partial {
    name: String,
    group: Option<String>,
    stage: Option<Stage>,
    gate: Option<Gate>,
    pattern: Option<Pattern<Onnx>>,
    conditions: Vec<(String, Vec<Var>)>,
    replacement: Option<Replacement>,
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
                if condition(name).is_none() {
                    return Err(format!("unknown condition `{name}`"));
                }
                let vars = words
                    .map(|w| w.parse::<Var>().map_err(|_| format!("`{w}` is not a ?variable")))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                self.conditions.push((name.to_string(), vars));
            }
            "replace" => {
                once(self.replacement.is_some())?;
                self.replacement = Some(Replacement::Pattern(pattern(value)?));
            }
            "apply" => {
                once(self.replacement.is_some())?;
                if applier(value).is_none() {
                    return Err(format!("unknown applier `{value}`"));
                }
                self.replacement = Some(Replacement::Applier(value.to_string()));
            }
            other => return Err(format!("unknown field `{other}` (expected group, stage, gate, pattern, when, replace or apply)")),
        }
        Ok(())
    }

    fn finish(self, file: &str, line: usize) -> std::result::Result<RuleSpec, String> {
        let missing = |f: &str| format!("rule `{}` has no `{f}`", self.name);
        let pattern = self.pattern.ok_or_else(|| missing("pattern"))?;
        let bound = pattern.vars();
        for (cond, vars) in &self.conditions {
            if let Some(v) = vars.iter().find(|v| !bound.contains(v)) {
                return Err(format!(
                    "condition `{cond}` uses {v}, which the pattern does not bind"
                ));
            }
        }
        let needed: Vec<Var> = match &self.replacement {
            Some(Replacement::Pattern(r)) => r.vars(),
            Some(Replacement::Applier(name)) => applier(name)
                .map(|(_, vars)| vars.iter().filter_map(|v| v.parse().ok()).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        if let Some(v) = needed.into_iter().find(|v| !bound.contains(v)) {
            return Err(format!(
                "the replacement uses {v}, which the pattern does not bind"
            ));
        }
        Ok(RuleSpec {
            group: self.group.ok_or_else(|| missing("group"))?,
            stage: self.stage.ok_or_else(|| missing("stage"))?,
            gate: self.gate.ok_or_else(|| missing("gate"))?,
            replacement: self
                .replacement
                .ok_or_else(|| missing("replace` or `apply"))?,
            conditions: self.conditions,
            origin: format!("rewrites/{file}:{line}"),
            name: self.name,
            pattern,
        })
    }
}

/// Conditions plus replacement, as an egg applier.
struct RuleApplier {
    conditions: Vec<(ConditionFn, Vec<Var>)>,
    replacement: Replacement,
    custom: Option<ApplierFn>,
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
        if !self
            .conditions
            .iter()
            .all(|(c, vars)| c(egraph, subst, vars))
        {
            return Vec::new();
        }
        let _ = searcher_ast;
        let result = match (&self.replacement, self.custom) {
            (Replacement::Pattern(p), _) => egraph.add_instantiation(&p.ast, subst),
            (Replacement::Applier(_), Some(f)) => {
                match f(egraph, eclass, subst, rule_name.as_str()) {
                    Some(id) => id,
                    None => return Vec::new(),
                }
            }
            (Replacement::Applier(_), None) => return Vec::new(),
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
        let conditions = self
            .conditions
            .iter()
            .map(|(name, vars)| (condition(name).expect("checked when parsed"), vars.clone()))
            .collect();
        let custom = match &self.replacement {
            Replacement::Applier(name) => Some(applier(name).expect("checked when parsed").0),
            Replacement::Pattern(_) => None,
        };
        let applier = RuleApplier {
            conditions,
            replacement: self.replacement.clone(),
            custom,
        };
        Rewrite::new(self.name.clone(), self.pattern.clone(), applier)
            .map_err(|e| Error::Graph(format!("{}: {e}", self.origin)))
    }
}
