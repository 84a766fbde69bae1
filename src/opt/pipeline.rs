//! The optimizer pipeline: lift → stages (cleanup → recognize → fusion → inline → lowering),
//! each a run of the rule groups the EP enables → DAG extraction with the EP cost model → lower.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use egg::{Id, Rewrite, StopReason};

use super::analysis::{OnnxAnalysis, OnnxGraph};
use super::cost::CostModel;
use super::extract::{greedy_dag, ExtractError, Extraction};
use super::fingerprint::LeafValues;
use super::gate::KvCache;
use super::lang::Onnx;
use super::lift::{lift_with, output_types, Lifted};
use super::lower::{lower, Picked};
use super::opset;
use super::rules::{RuleSet, Stage};
use super::saturate::{saturate, FirstIteration, RunLimits};
use super::trace::{GroupReport, OptimizeReport, StageReport};
use crate::ep::EpCapabilities;
use crate::ir::{DType, Graph, Model};
use crate::ops::types::TensorType;
use crate::role::Role;
use crate::{Error, Result};

/// Bounds on one stage's equality saturation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Saturation iterations per stage.
    pub iterations: usize,
    /// E-nodes allowed, as a multiple of the lifted graph's e-nodes (at least 10,000).
    pub node_factor: usize,
    /// Wall time per stage.
    pub time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            iterations: 16,
            node_factor: 10,
            time: Duration::from_secs(20),
        }
    }
}

/// Options of [`optimize`].
#[derive(Debug, Clone)]
pub struct OptimizeOptions {
    /// The model dtype (gates dtype-specific rules).
    pub dtype: DType,
    /// The model role.
    pub role: Role,
    /// Saturation limits.
    pub limits: Limits,
    /// Verification mode (`--verify-rewrites`): values of every graph input and initializer
    /// on which each e-class is evaluated; a rewrite that changes a value stops the run.
    pub fingerprint_leaves: Option<LeafValues>,
    /// The `accuracy_level` of the `MatMulNBits` ops fused from block-quantized weights
    /// (`None`: the EP's `default_int4_accuracy_level`).
    pub accuracy_level: Option<u8>,
    /// The KV-cache contract the model will run under (gates the `genai_kv_cache` rules).
    pub kv_cache: KvCache,
    /// Measure what each rule group changed (`--trace`): the input graph's cost and every
    /// group's op-count change, at the price of one extraction of the e-graph per group that
    /// changed it. Off, only the final graph is extracted (the same graph): the report's
    /// [`cost_before`](OptimizeReport::cost_before) and group
    /// [`delta`](super::trace::GroupReport::delta)s are `None`.
    pub trace: bool,
}

/// Optimizes `model` for the EP `caps` with the rules of `rules`; returns the new model and
/// what each stage did.
pub fn optimize(
    model: &Model,
    caps: &EpCapabilities,
    opts: &OptimizeOptions,
    rules: &RuleSet,
) -> Result<(Model, OptimizeReport)> {
    let start = Instant::now();
    let Lifted {
        mut egraph,
        root,
        names,
    } = lift_with(&model.graph, opts.fingerprint_leaves.clone())?;
    egraph.analysis.nbits_accuracy_level = i64::from(
        opts.accuracy_level
            .unwrap_or(caps.default_int4_accuracy_level),
    );
    let ceiling = opset::ceiling(model);
    let cost = CostModel::new(caps).with_opset_ceiling(ceiling);
    let mut report =
        OptimizeReport::new(&caps.name, opts.dtype, opts.role, model.graph.nodes.len());
    // Before rewriting, the graph may hold ops the EP cannot run (infinite cost) that later
    // stages rewrite; the trace then starts from the input graph's counts.
    // The extraction of the e-graph as it is now, when one was made and nothing changed since.
    let mut current: Option<Extraction<Onnx>> = None;
    // The op counts of the graph as it is now (traced runs only).
    let mut counts = None;
    if opts.trace {
        counts = Some(match extract(&egraph, root, &cost) {
            Ok(first) => {
                report.cost_before = Some(first.cost);
                let counts = op_counts(&egraph, root, &first);
                current = Some(first);
                counts
            }
            Err(_) => {
                report.cost_before = Some(f64::INFINITY);
                model.graph.op_counts()
            }
        });
    }
    let run_limits = RunLimits {
        iterations: opts.limits.iterations,
        nodes: (egraph.total_number_of_nodes() * opts.limits.node_factor).max(10_000),
        time: opts.limits.time,
    };

    for stage in Stage::ALL {
        let stage_start = Instant::now();
        let enabled: Vec<_> = rules
            .rules
            .iter()
            .filter(|r| {
                r.stage == stage && r.gate.enabled(caps, opts.dtype, opts.role, opts.kv_cache)
            })
            .collect();
        let mut groups: Vec<&str> = Vec::new();
        for r in &enabled {
            if !groups.contains(&r.group.as_str()) {
                groups.push(&r.group);
            }
        }
        let mut stage_report = StageReport::new(stage, groups.len());
        let mut active: Vec<Rewrite<Onnx, OnnxAnalysis>> = Vec::new();
        // Whether the e-graph is a fixpoint of `active`: applying those rules to it would
        // change nothing (true of no rules; after a run, when it saturated).
        let mut fixpoint = true;
        for group in groups {
            let new_rules = active.len();
            for r in enabled.iter().filter(|r| r.group == group) {
                active.push(r.rewrite()?);
            }
            // A run would apply the rules before this group's to no effect, and this group's
            // rules to nothing when they match nothing: it would end saturated after one
            // iteration with the e-graph as it is. Skipping it saves a search and a
            // re-application of every rule of the stage so far. When they match, the run's
            // first iteration only applies these matches (a clean e-graph: they are the ones
            // its search would find).
            let mut first = None;
            let idle = if !fixpoint || !within_limits(&egraph, &run_limits) {
                false
            } else if egraph.clean {
                let matches: Vec<_> = active[new_rules..]
                    .iter()
                    .map(|rule| rule.search(&egraph))
                    .collect();
                let idle = matches.iter().all(Vec::is_empty);
                first = Some(FirstIteration {
                    known: new_rules,
                    matches,
                });
                idle
            } else {
                active[new_rules..]
                    .iter()
                    .all(|rule| rule.search(&egraph).is_empty())
            };
            if idle {
                stage_report.groups.push(GroupReport {
                    group: group.to_string(),
                    delta: counts.as_ref().map(|_| BTreeMap::new()),
                    found: 0,
                });
                continue;
            }
            let changes_before = egraph.analysis.changes;
            let group_start = Instant::now();
            let run = saturate(&mut egraph, &active, run_limits, first);
            stage_report.iterations += run.iterations;
            let found: usize = run
                .applied
                .iter()
                .filter(|(rule, _)| {
                    enabled
                        .iter()
                        .any(|r| r.group == group && r.name == rule.as_str())
                })
                .map(|(_, n)| n)
                .sum();
            tracing::debug!(
                "{stage} / {group}: {} iterations, {} e-nodes, {:.1} ms",
                run.iterations,
                egraph.total_number_of_nodes(),
                group_start.elapsed().as_secs_f64() * 1e3
            );
            if !matches!(run.stop, StopReason::Saturated) {
                let reason = format!("{:?}", run.stop);
                tracing::warn!(
                    "{stage} stopped early ({reason}); using the best graph found so far"
                );
                stage_report.limit_hit = Some(reason);
            }
            fixpoint = matches!(run.stop, StopReason::Saturated);
            if let Some(v) = egraph.analysis.violations.first() {
                return Err(Error::UnsoundRewrite {
                    rule: v.rule.clone(),
                    before: v.before.clone(),
                    after: v.after.clone(),
                });
            }
            // A group that neither added a class nor merged two leaves the e-graph, and so the
            // extraction, as it was.
            let changed = egraph.analysis.changes != changes_before;
            if changed {
                current = None;
            }
            let delta = match &mut counts {
                Some(counts) => {
                    let after = if changed {
                        match extract(&egraph, root, &cost) {
                            Ok(extraction) => {
                                let after = op_counts(&egraph, root, &extraction);
                                current = Some(extraction);
                                after
                            }
                            Err(_) => counts.clone(),
                        }
                    } else {
                        counts.clone()
                    };
                    let delta = GroupReport::delta(counts, &after);
                    *counts = after;
                    Some(delta)
                }
                None => None,
            };
            let group_report = GroupReport {
                group: group.to_string(),
                delta,
                found,
            };
            stage_report.groups.push(group_report);
        }
        stage_report.enodes = egraph.total_number_of_nodes();
        stage_report.eclasses = egraph.number_of_classes();
        stage_report.seconds = stage_start.elapsed().as_secs_f64();
        report.stages.push(stage_report);
    }

    if let Some(leaves) = &egraph.analysis.fingerprint_leaves {
        if let Some(warning) = leaves.stats().partial_warning(leaves.budget_bytes()) {
            tracing::warn!("{warning}");
        }
    }
    let extraction = match current {
        Some(extraction) => extraction,
        None => extract(&egraph, root, &cost)?,
    };
    report.cost_after = extraction.cost;
    let picked = Picked::new(
        &egraph,
        root,
        &|class| extraction.node(class).clone(),
        names,
    )?;
    // Done with the e-graph: free it before the new graph is built (a lower peak of memory).
    drop((egraph, extraction));
    let graph = lower(&model.graph, picked)?;
    check_supported(&graph, caps)?;
    check_output_types(&graph, "the optimized graph")?;
    report.nodes_after = graph.nodes.len();
    report.leftovers = (rules.leftovers)(&model.graph, &graph);
    report.seconds = start.elapsed().as_secs_f64();
    // Everything but the graph is copied from the input model (cloning it whole would copy
    // the input graph only to drop it).
    let mut opsets = model.opsets.clone();
    let declared = opset::declared(model);
    let needed = opset::required(&graph, declared, ceiling);
    if needed > declared {
        tracing::info!(
            "the optimized graph uses ops of opset {needed}: declared instead of {declared}"
        );
        opsets.insert(String::new(), needed);
    }
    opsets.remove("com.microsoft");
    if graph.nodes.iter().any(|n| n.domain == "com.microsoft") {
        opsets.insert("com.microsoft".into(), 1);
    }
    let out = Model {
        graph,
        opsets,
        ir_version: model.ir_version.max(opset::min_ir_version(needed)),
        producer_name: model.producer_name.clone(),
        producer_version: model.producer_version.clone(),
    };
    Ok((out, report))
}

/// Whether a run's first iteration would start: it stops before searching when the e-graph
/// is over the node limit or a limit allows no iteration at all.
fn within_limits(egraph: &OnnxGraph, limits: &RunLimits) -> bool {
    egraph.total_size() <= limits.nodes && limits.iterations > 0 && !limits.time.is_zero()
}

fn extract(egraph: &OnnxGraph, root: Id, cost: &CostModel<'_>) -> Result<Extraction<Onnx>> {
    let start = Instant::now();
    let extraction = greedy_dag(egraph, &[root], |class, node| {
        cost.node_cost(egraph, class, node)
    });
    tracing::debug!(
        "extraction of {} e-nodes: {:.1} ms",
        egraph.total_number_of_nodes(),
        start.elapsed().as_secs_f64() * 1e3
    );
    extraction.map_err(|e| match e {
        ExtractError::Unextractable { .. } => {
            let mut ops: Vec<String> = egraph
                .classes()
                .flat_map(|c| c.nodes.iter().map(move |n| (c.id, n)))
                .filter(|(id, n)| cost.node_cost(egraph, *id, n).is_infinite())
                .map(|(_, n)| n.to_string())
                .collect();
            ops.sort();
            ops.dedup();
            Error::EpCannotRun {
                ep: cost.ep_name().to_string(),
                ops,
            }
        }
        other => Error::Graph(other.to_string()),
    })
}

/// Op counts (`domain::op` keys as in [`Graph::op_counts`]) of an extraction.
fn op_counts(
    egraph: &OnnxGraph,
    root: Id,
    extraction: &Extraction<Onnx>,
) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for class in extraction.topo_order(egraph, &[root]) {
        if let Onnx::Op(op) = extraction.node(class) {
            // Weight relayouts and concatenations of initializers are folded into
            // initializers, not nodes.
            let name = op.op.as_str();
            if name.starts_with("ai.mobius::") || (name == "Concat" && egraph[class].data.init_only)
            {
                continue;
            }
            *counts.entry(op.op.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// Types inferred on `graph` (called `what` in errors) agree with its declared outputs: after
/// lowering, and on an imported graph before optimizing it.
pub fn check_output_types(graph: &Graph, what: &str) -> Result<()> {
    let inferred = output_types(graph)?;
    for (declared, got) in graph.outputs.iter().zip(inferred) {
        let mut want = TensorType::of(declared.dtype, &declared.shape);
        if graph.unshaped.contains(&declared.name) {
            want.shape = None;
        }
        if let Some(got) = got {
            if !got.compatible(&want) {
                return Err(Error::Graph(format!(
                    "output `{}` is declared {want} but {what} computes {got}",
                    declared.name
                )));
            }
        }
    }
    Ok(())
}

/// After extraction: every op is one the EP runs.
fn check_supported(graph: &Graph, caps: &EpCapabilities) -> Result<()> {
    if caps.supports_contrib_ops {
        return Ok(());
    }
    match graph.nodes.iter().find(|n| !n.domain.is_empty()) {
        Some(n) => Err(Error::EpCannotRun {
            ep: caps.name.clone(),
            ops: vec![format!("{}::{}", n.domain, n.op_type)],
        }),
        None => Ok(()),
    }
}
