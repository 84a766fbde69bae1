//! The greedy DAG extractor against an exact one on real fixture e-graphs: the llama fixture's
//! graph saturated with the EP's rules (as the optimizer's stages do), then every combination
//! of the e-classes that hold more than one runnable node enumerated, when there are few enough
//! (the gap of `greedy_dag` there is reported, and must be 0). The three largest e-graphs are an
//! ignored test that `scripts/slow_tests.sh` runs.

mod common;

use std::collections::BTreeMap;

use common::*;
use egg::{Id, Language, Runner, SimpleScheduler};
use mobius::ep::{get_ep, load_ep_file, EpCapabilities};
use mobius::ir::{DType, Model};
use mobius::models::build_model;
use mobius::opt::analysis::{OnnxAnalysis, OnnxGraph};
use mobius::opt::cost::CostModel;
use mobius::opt::extract::{dag_cost, greedy_dag};
use mobius::opt::lang::Onnx;
use mobius::opt::lift::lift;
use mobius::opt::rules::Stage;
use mobius::opt::{opset, KvCache, Limits, Role};
use mobius::rulebook::optimize;

/// The lifted graph of `model` after every stage's enabled rule groups ran, as the pipeline
/// runs them (groups in order, each adding its rules to the stage's active set).
fn saturate(model: &Model, caps: &EpCapabilities, dtype: DType) -> (OnnxGraph, Id) {
    let lifted = lift(&model.graph).unwrap();
    let (mut egraph, root) = (lifted.egraph, lifted.root);
    egraph.analysis.nbits_accuracy_level = i64::from(caps.default_int4_accuracy_level);
    let limits = Limits::default();
    let node_limit = (egraph.total_number_of_nodes() * limits.node_factor).max(10_000);
    let rules = mobius::rulebook::rules().unwrap().rules;
    for stage in Stage::ALL {
        let enabled: Vec<_> = rules
            .iter()
            .filter(|r| {
                r.stage == stage && r.gate.enabled(caps, dtype, Role::Decoder, KvCache::AsIs)
            })
            .collect();
        let mut groups: Vec<&str> = Vec::new();
        for r in &enabled {
            if !groups.contains(&r.group.as_str()) {
                groups.push(&r.group);
            }
        }
        let mut active = Vec::new();
        for group in groups {
            for r in enabled.iter().filter(|r| r.group == group) {
                active.push(r.rewrite().unwrap());
            }
            egraph = Runner::<Onnx, OnnxAnalysis>::new(OnnxAnalysis::default())
                .with_egraph(egraph)
                .with_scheduler(SimpleScheduler)
                .with_iter_limit(limits.iterations)
                .with_node_limit(node_limit)
                .with_time_limit(limits.time)
                .run(&active)
                .egraph;
        }
    }
    let root = egraph.find(root);
    (egraph, root)
}

/// The most combinations enumerated per e-graph.
const MAX_COMBINATIONS: f64 = 65_536.0;

/// `(classes reachable, decisions, combinations, greedy cost, exact cost)` of `fixture` built
/// in `dtype` and saturated for `ep` (a built-in EP or an EP file); the exact cost is `None`
/// past [`MAX_COMBINATIONS`].
fn gap(fixture: &str, ep: &str, dtype: DType) -> (usize, usize, f64, f64, Option<f64>) {
    let model = build_model(&fixture_config(fixture), dtype).unwrap();
    let caps = if ep.ends_with(".toml") {
        load_ep_file(&root().join(ep)).unwrap()
    } else {
        get_ep(ep).unwrap()
    };
    let (egraph, root) = saturate(&model, &caps, dtype);
    let cost = CostModel::new(&caps).with_opset_ceiling(opset::ceiling(&model));
    let node_cost = |class: Id, node: &Onnx| cost.node_cost(&egraph, class, node);
    let greedy = greedy_dag(&egraph, &[root], node_cost).unwrap();
    // The pipeline's own extraction of the same e-graph costs the same: the saturation above
    // is the optimizer's.
    let (_, report) = optimize(&model, &caps, &optimize_options(dtype, Role::Decoder)).unwrap();
    assert_eq!(
        greedy.cost, report.cost_after,
        "{fixture} {ep}: not the optimizer's e-graph"
    );
    // The runnable nodes of every class reachable through runnable nodes; classes with several
    // are the decisions.
    let mut options: BTreeMap<Id, Vec<Onnx>> = BTreeMap::new();
    let mut stack = vec![root];
    while let Some(c) = stack.pop() {
        if options.contains_key(&c) {
            continue;
        }
        let nodes: Vec<Onnx> = egraph[c]
            .nodes
            .iter()
            .filter(|n| node_cost(c, n).is_finite())
            .cloned()
            .collect();
        for n in &nodes {
            stack.extend(n.children().iter().map(|&k| egraph.find(k)));
        }
        options.insert(c, nodes);
    }
    let decisions: Vec<Id> = options
        .iter()
        .filter(|(_, n)| n.len() > 1)
        .map(|(&c, _)| c)
        .collect();
    let space: f64 = decisions.iter().map(|c| options[c].len() as f64).product();
    if space > MAX_COMBINATIONS {
        return (options.len(), decisions.len(), space, greedy.cost, None);
    }
    // A class with no runnable node has no choice: a combination that needs it is no graph.
    let mut choices: BTreeMap<Id, Onnx> = options
        .iter()
        .filter_map(|(&c, n)| Some((c, n.first()?.clone())))
        .collect();
    let mut digits = vec![0usize; decisions.len()];
    let mut best = f64::INFINITY;
    loop {
        for (d, &c) in digits.iter().zip(&decisions) {
            choices.insert(c, options[&c][*d].clone());
        }
        // A combination whose choices form a cycle or need a class without a choice is no
        // graph.
        if let Ok(total) = dag_cost(&choices, &[root], node_cost) {
            best = best.min(total);
        }
        let mut i = 0;
        loop {
            if i == digits.len() {
                return (
                    options.len(),
                    decisions.len(),
                    space,
                    greedy.cost,
                    Some(best),
                );
            }
            digits[i] += 1;
            if digits[i] < options[&decisions[i]].len() {
                break;
            }
            digits[i] = 0;
            i += 1;
        }
    }
}

#[test]
fn greedy_matches_exact_on_fixture_egraphs() {
    // A few seconds.
    let cases = [
        ("llama", "cpu", DType::F32),
        ("llama", "qnn", DType::F16),
        ("llama", "default", DType::F32),
        ("phi3", "webgpu", DType::F16),
        // Calibrated parameters with per-op corrections (scripts/calibrate.py).
        ("llama", "examples/cpu-calibrated.toml", DType::F32),
    ];
    check_gap_is_zero(&cases, 4);
}

#[test]
#[ignore = "slow: e-graphs of up to 36,864 combinations; run by scripts/slow_tests.sh"]
fn greedy_matches_exact_on_the_largest_fixture_egraphs() {
    // Half a minute in a debug build.
    let cases = [
        ("llama", "cuda", DType::F16),
        ("qwen3", "cpu", DType::F32),
        ("gpt2", "cpu", DType::F32),
    ];
    check_gap_is_zero(&cases, cases.len());
}

/// The greedy extraction's gap to the exact one is 0 on each case small enough to enumerate,
/// and at least `min_exact` cases are.
fn check_gap_is_zero(cases: &[(&str, &str, DType)], min_exact: usize) {
    let mut exact_checks = 0;
    for &(fixture, ep, dtype) in cases {
        let (classes, decisions, space, greedy, exact) = gap(fixture, ep, dtype);
        match exact {
            Some(exact) => {
                exact_checks += 1;
                let gap = greedy / exact - 1.0;
                eprintln!(
                    "{fixture} {ep} {dtype}: {classes} classes, {decisions} decisions, {space} \
                     combinations: greedy {greedy:.3} µs, exact {exact:.3} µs, gap {:.2e}",
                    gap
                );
                assert!(
                    gap.abs() <= 1e-9,
                    "{fixture} {ep}: greedy {greedy} vs exact {exact}"
                );
            }
            None => eprintln!(
                "{fixture} {ep} {dtype}: {classes} classes, {decisions} decisions, {space:e} \
                 combinations: too many to enumerate"
            ),
        }
    }
    assert!(
        exact_checks >= min_exact,
        "only {exact_checks} fixture e-graphs small enough"
    );
}
