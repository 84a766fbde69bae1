//! The rule files in `rewrites/` (embedded at build time) → egg rewrites.
//!
//! Format (documented in `rewrites/README.md`): a rule starts with `rule NAME` and has one
//! `key value` line per field: `group` (trace name), `stage` (cleanup, recognize, fusion,
//! inline, lowering), `gate` (a capability expression, see [`super::gate`]), `pattern` (one rooted
//! pattern), any number of `when CONDITION ?var…`, and either `replace PATTERN` or
//! `apply APPLIER`. `#` starts a comment. Conditions and appliers are Rust functions a
//! [`Vocabulary`] names (the rulebook's, `crate::rulebook`); their variables are resolved
//! against the pattern when the rule is read ([`super::bind`]).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

use super::analysis::{OnnxAnalysis, OnnxGraph};
use super::bind::{AnyApplier, AnyCondition, BoundApplier, BoundCondition, Site};
use super::checked_union::check_union;
use super::gate::Gate;
use super::lang::Onnx;
use crate::ir::Graph;
use crate::{Error, Result};

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

/// The conditions and appliers rule files may name, by name.
#[derive(Clone, Copy)]
pub struct Vocabulary {
    /// The side conditions (`when NAME ?var…`).
    pub conditions: &'static [(&'static str, &'static dyn AnyCondition)],
    /// The appliers (`apply NAME`).
    pub appliers: &'static [(&'static str, &'static dyn AnyApplier)],
}

impl Vocabulary {
    /// The condition named `name`.
    pub fn condition(&self, name: &str) -> Option<&'static dyn AnyCondition> {
        self.conditions
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, c)| *c)
    }

    /// The applier named `name`.
    pub fn applier(&self, name: &str) -> Option<&'static dyn AnyApplier> {
        self.appliers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
    }
}

/// What the optimizer runs: the rules, and what reports the decomposed shapes they did not
/// recognise.
#[derive(Debug, Clone)]
pub struct RuleSet {
    /// The rules, in the order they are added to a stage.
    pub rules: Vec<RuleSpec>,
    /// The decomposed computations of an input graph left in the optimized graph (input,
    /// optimized), listed by `--trace`.
    pub leftovers: fn(&Graph, &Graph) -> Vec<Leftover>,
}

/// One kind of decomposed shape left in the optimized graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    /// What the shape computes and how it was recognised (`"RMSNorm / LayerNorm: ReduceMean
    /// of a square"`).
    pub shape: &'static str,
    /// How many instances are left.
    pub count: usize,
    /// The output name of the first one, to find it in the graph.
    pub example: String,
}

/// Parses one rule file, whose conditions and appliers are those of `vocabulary`.
pub fn parse_rules(file: &str, text: &str, vocabulary: &Vocabulary) -> Result<Vec<RuleSpec>> {
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
        p.set(key, value, vocabulary).map_err(|m| err(line, m))?;
    }
    if let Some((at, p)) = current {
        rules.push(p.finish(file, at).map_err(|m| err(at, m))?);
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

    fn set(
        &mut self,
        key: &str,
        value: &str,
        vocabulary: &Vocabulary,
    ) -> std::result::Result<(), String> {
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
                let check = vocabulary
                    .condition(name)
                    .ok_or_else(|| format!("unknown condition `{name}`"))?;
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
                let body = vocabulary
                    .applier(value)
                    .ok_or_else(|| format!("unknown applier `{value}`"))?;
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
