//! What the optimizer did, in the peer's `[EP Trace]` format plus e-graph statistics.

use std::collections::BTreeMap;
use std::fmt;

use super::rules::{Leftover, Stage};
use crate::ir::DType;
use crate::role::Role;

/// What one rule group did.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupReport {
    /// The group name.
    pub group: String,
    /// Op → count change of the extracted graph (non-zero entries only); `None` when the run
    /// was not traced ([`OptimizeOptions::trace`](super::OptimizeOptions::trace)).
    pub delta: Option<BTreeMap<String, i64>>,
    /// Equalities the group's rules added (a recognition rule: the instances it recognised,
    /// whether or not the EP's extraction then picks them).
    pub found: usize,
}

impl GroupReport {
    /// The non-zero op-count changes from `before` to `after`.
    pub fn delta(
        before: &BTreeMap<String, usize>,
        after: &BTreeMap<String, usize>,
    ) -> BTreeMap<String, i64> {
        let mut delta = BTreeMap::new();
        for op in before.keys().chain(after.keys()) {
            let d = *after.get(op).unwrap_or(&0) as i64 - *before.get(op).unwrap_or(&0) as i64;
            if d != 0 {
                delta.insert(op.clone(), d);
            }
        }
        delta
    }

    /// Net change in node count (0 when not measured).
    pub fn net(&self) -> i64 {
        self.delta.iter().flat_map(|d| d.values()).sum()
    }
}

/// One stage's run.
#[derive(Debug, Clone, PartialEq)]
pub struct StageReport {
    /// The stage.
    pub stage: Stage,
    /// Rule groups enabled for the EP.
    pub enabled_groups: usize,
    /// Per-group changes, in run order.
    pub groups: Vec<GroupReport>,
    /// Saturation iterations.
    pub iterations: usize,
    /// E-nodes after the stage.
    pub enodes: usize,
    /// E-classes after the stage.
    pub eclasses: usize,
    /// A limit that stopped saturation early, if any.
    pub limit_hit: Option<String>,
    /// Wall time.
    pub seconds: f64,
}

impl StageReport {
    /// An empty report for `stage`.
    pub fn new(stage: Stage, enabled_groups: usize) -> StageReport {
        StageReport {
            stage,
            enabled_groups,
            groups: Vec::new(),
            iterations: 0,
            enodes: 0,
            eclasses: 0,
            limit_hit: None,
            seconds: 0.0,
        }
    }
}

/// The whole optimization.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizeReport {
    /// The EP name.
    pub ep: String,
    /// The model dtype.
    pub dtype: DType,
    /// The model role.
    pub role: Role,
    /// Nodes of the input graph.
    pub nodes_before: usize,
    /// Nodes of the output graph.
    pub nodes_after: usize,
    /// DAG cost of the input graph under the EP cost model (µs); `None` when the run was not
    /// traced ([`OptimizeOptions::trace`](super::OptimizeOptions::trace)).
    pub cost_before: Option<f64>,
    /// DAG cost of the output graph (µs).
    pub cost_after: f64,
    /// The stages.
    pub stages: Vec<StageReport>,
    /// Decomposed shapes of the input graph left as they were (none for a graph built by
    /// mobius).
    pub leftovers: Vec<Leftover>,
    /// Total wall time.
    pub seconds: f64,
}

impl OptimizeReport {
    /// A report before any stage ran.
    pub fn new(ep: &str, dtype: DType, role: Role, nodes_before: usize) -> OptimizeReport {
        OptimizeReport {
            ep: ep.to_string(),
            dtype,
            role,
            nodes_before,
            nodes_after: nodes_before,
            cost_before: None,
            cost_after: 0.0,
            stages: Vec::new(),
            leftovers: Vec::new(),
            seconds: 0.0,
        }
    }
}

/// ONNX's name for a dtype (`FLOAT16`), as the peer's trace prints it.
fn onnx_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "FLOAT",
        DType::F16 => "FLOAT16",
        DType::BF16 => "BFLOAT16",
        DType::F64 => "DOUBLE",
        DType::I64 => "INT64",
        DType::I32 => "INT32",
        DType::I8 => "INT8",
        DType::U8 => "UINT8",
        DType::I16 => "INT16",
        DType::U16 => "UINT16",
        DType::U32 => "UINT32",
        DType::U64 => "UINT64",
        DType::Bool => "BOOL",
        DType::I4 => "INT4",
        DType::U4 => "UINT4",
        DType::F8E4M3FN => "FLOAT8E4M3FN",
    }
}

impl fmt::Display for OptimizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const P: &str = "[EP Trace]";
        writeln!(
            f,
            "{P} Target: {}, dtype: {}, role: {}",
            self.ep,
            onnx_name(self.dtype),
            self.role
        )?;
        let mut nodes = self.nodes_before as i64;
        for (i, s) in self.stages.iter().enumerate() {
            let title = match s.stage {
                Stage::Cleanup => format!("Stage 1: Cleanup ({} rule groups)", s.enabled_groups),
                Stage::Recognize => format!(
                    "Stage 1b: Recognize ({} rule groups, exported decompositions)",
                    s.enabled_groups
                ),
                Stage::Fusion => format!("Stage 2: Fusion ({} rule groups)", s.enabled_groups),
                Stage::Inline => "Stage 2b: InlinePass (expand unsupported custom ops)".to_string(),
                Stage::Lowering => format!(
                    "Stage 3: Lowering ({} rule groups for {})",
                    s.enabled_groups, self.ep
                ),
            };
            writeln!(f, "{P} {title}")?;
            let traced = s.groups.iter().all(|g| g.delta.is_some());
            if i == 0 && traced {
                // Cleanup also counts what lifting did (CSE by hash-consing, constant folding).
                let after = nodes + s.groups.iter().map(GroupReport::net).sum::<i64>();
                writeln!(
                    f,
                    "{P}   Cleanup: {} → {} nodes ({:+})",
                    nodes,
                    after,
                    after - nodes
                )?;
                nodes = after;
            } else {
                for g in &s.groups {
                    let Some(delta) = &g.delta else {
                        writeln!(
                            f,
                            "{P}   {:<25}: found {} (op counts not traced)",
                            g.group, g.found
                        )?;
                        continue;
                    };
                    if s.stage == Stage::Recognize {
                        let changes: Vec<String> =
                            delta.iter().map(|(op, d)| format!("{d:+} {op}")).collect();
                        let changes = match changes.is_empty() {
                            true => "graph unchanged".to_string(),
                            false => changes.join(", "),
                        };
                        writeln!(f, "{P}   {:<25}: found {} ({changes})", g.group, g.found)?;
                    } else if delta.is_empty() {
                        writeln!(f, "{P}   {:<25}: no matches (0 nodes affected)", g.group)?;
                    } else {
                        let added = delta
                            .iter()
                            .filter(|(_, d)| **d > 0)
                            .map(|(op, d)| format!("+{d} {op}"));
                        let removed = delta
                            .iter()
                            .filter(|(_, d)| **d < 0)
                            .map(|(op, d)| format!("-{} {op}", -d));
                        writeln!(
                            f,
                            "{P}   {:<25}: {}",
                            g.group,
                            added.chain(removed).collect::<Vec<_>>().join(", ")
                        )?;
                    }
                    nodes += g.net();
                }
            }
            write!(
                f,
                "{P}     e-graph: {} iterations, {} e-nodes, {} e-classes, {:.1} ms",
                s.iterations,
                s.enodes,
                s.eclasses,
                s.seconds * 1e3
            )?;
            match &s.limit_hit {
                Some(limit) => writeln!(f, ", stopped early: {limit}")?,
                None => writeln!(f, ", saturated")?,
            }
        }
        if !self.leftovers.is_empty() {
            writeln!(
                f,
                "{P} Left as the input wrote them (no rule's conditions held):"
            )?;
            for l in &self.leftovers {
                writeln!(f, "{P}   {} × {}, e.g. `{}`", l.count, l.shape, l.example)?;
            }
        }
        let cost = match self.cost_before {
            Some(before) => format!("{before:.1} → {:.1}", self.cost_after),
            None => format!("{:.1}", self.cost_after),
        };
        writeln!(
            f,
            "{P} Summary: {} nodes total, ep={}, dtype={}, cost {cost} µs (prefill), {:.1} ms",
            self.nodes_after,
            self.ep,
            onnx_name(self.dtype),
            self.seconds * 1e3
        )
    }
}
