//! One rule group's equality saturation: `egg`'s `Runner` loop with the `SimpleScheduler`
//! (every iteration searches every rule, applies every match, then rebuilds; until an
//! iteration applies nothing and adds nothing, or a limit is hit), except that an e-graph
//! that neither gained a class nor merged two since it was last rebuilt is not rebuilt again.
//! Such a rebuild is a full pass over every class that changes nothing (the classes, their
//! nodes' order and the op index all stay as they are), and the runner does one before its
//! first iteration and one after its last, saturated, iteration, whose rules re-apply what is
//! already there: on a graph of thousands of layers those passes cost more than the rewrites.

use std::time::{Duration, Instant};

use egg::{Rewrite, SearchMatches, StopReason, Symbol};

use super::analysis::{rebuild, OnnxAnalysis, OnnxGraph};
use super::lang::Onnx;

/// The limits of one run (those of `egg::Runner`).
#[derive(Debug, Clone, Copy)]
pub(super) struct RunLimits {
    /// Iterations.
    pub(super) iterations: usize,
    /// E-nodes (the size of the hash-cons table).
    pub(super) nodes: usize,
    /// Wall time.
    pub(super) time: Duration,
}

impl RunLimits {
    /// The limit that stops the run before iteration `iteration` (counted from 0) or after a
    /// search or an application in it, if any.
    fn check(
        &self,
        start: Instant,
        iteration: usize,
        egraph: &OnnxGraph,
    ) -> Result<(), StopReason> {
        let elapsed = start.elapsed();
        if elapsed > self.time {
            return Err(StopReason::TimeLimit(elapsed.as_secs_f64()));
        }
        let size = egraph.total_size();
        if size > self.nodes {
            return Err(StopReason::NodeLimit(size));
        }
        if iteration >= self.iterations {
            return Err(StopReason::IterationLimit(iteration));
        }
        Ok(())
    }
}

/// What a run did.
#[derive(Debug)]
pub(super) struct Run {
    /// Iterations started.
    pub(super) iterations: usize,
    /// Per rule, the classes its applications changed, summed over the iterations.
    pub(super) applied: Vec<(Symbol, usize)>,
    /// Why it stopped ([`StopReason::Saturated`] when an iteration changed nothing).
    pub(super) stop: StopReason,
}

/// What is known of a run's first iteration before it starts: the e-graph is clean and a
/// fixpoint of `rules[..known]` (a run of them saturated on it, or they match nothing in it),
/// and `matches` are those of `rules[known..]`, searched in it as it is. Applying the first
/// rules would then change nothing, and searching the others again would find the same: the
/// first iteration only applies `matches` (a run of the stage's rules after a new group's
/// searched the whole e-graph for every rule twice, each rule of the groups before for nothing).
pub(super) struct FirstIteration<'r> {
    /// How many of the run's first rules the e-graph is a fixpoint of.
    pub(super) known: usize,
    /// The matches of each of the other rules.
    pub(super) matches: Vec<Vec<SearchMatches<'r, Onnx>>>,
}

/// Runs `rules` on `egraph` as `egg::Runner::new(..).with_egraph(egraph)
/// .with_scheduler(SimpleScheduler)` with these limits would, leaving the e-graph exactly as
/// that run would (see the module documentation for the rebuilds it leaves out, and
/// [`FirstIteration`] for the searches).
pub(super) fn saturate<'r>(
    egraph: &mut OnnxGraph,
    rules: &'r [Rewrite<Onnx, OnnxAnalysis>],
    limits: RunLimits,
    mut first: Option<FirstIteration<'r>>,
) -> Run {
    let start = Instant::now();
    if !egraph.clean {
        debug_assert!(
            first.is_none(),
            "matches searched in an e-graph not rebuilt"
        );
        first = None;
        rebuild(egraph);
    }
    let mut applied: Vec<(Symbol, usize)> = Vec::new();
    let mut iteration = 0;
    loop {
        let (iteration_applied, outcome) =
            iterate(egraph, rules, limits, start, iteration, first.take());
        iteration += 1;
        for (rule, n) in iteration_applied {
            match applied.iter_mut().find(|(r, _)| *r == rule) {
                Some((_, total)) => *total += n,
                None => applied.push((rule, n)),
            }
        }
        let stop = outcome
            .err()
            .or_else(|| limits.check(start, iteration, egraph).err());
        if let Some(stop) = stop {
            return Run {
                iterations: iteration,
                applied,
                stop,
            };
        }
    }
}

/// One iteration: search every rule, apply every match, rebuild if anything changed. Returns
/// the classes each rule's applications changed, and `Err` with the reason to stop (a limit,
/// or saturation).
fn iterate<'r>(
    egraph: &mut OnnxGraph,
    rules: &'r [Rewrite<Onnx, OnnxAnalysis>],
    limits: RunLimits,
    start: Instant,
    iteration: usize,
    first: Option<FirstIteration<'r>>,
) -> (Vec<(Symbol, usize)>, Result<(), StopReason>) {
    let nodes = egraph.total_size();
    let classes = egraph.number_of_classes();
    let changes = egraph.analysis.changes;
    let mut applied = Vec::new();
    let mut outcome = limits.check(start, iteration, egraph);
    // The rules searched and applied: all, or those a first iteration does not know.
    let (rules, matches) = match first {
        Some(FirstIteration { known, matches }) => (&rules[known..], matches),
        None => {
            let mut matches = Vec::with_capacity(rules.len());
            if outcome.is_ok() {
                for rule in rules {
                    matches.push(rule.search(egraph));
                    outcome = limits.check(start, iteration, egraph);
                    if outcome.is_err() {
                        break;
                    }
                }
            }
            (rules, matches)
        }
    };
    if outcome.is_ok() {
        for (rule, found) in rules.iter().zip(&matches) {
            let changed = rule.apply(egraph, found).len();
            if changed > 0 {
                applied.push((rule.name, changed));
            }
            outcome = limits.check(start, iteration, egraph);
            if outcome.is_err() {
                break;
            }
        }
    }
    drop(matches);
    // `changes` counts every class made and every merge: unchanged, the e-graph is the one
    // last rebuilt (the applications only re-added existing nodes and re-unioned classes
    // that were one already), so a rebuild would leave it as it is.
    if egraph.analysis.changes == changes {
        egraph.clean = true;
    } else {
        rebuild(egraph);
    }
    let saturated =
        applied.is_empty() && nodes == egraph.total_size() && classes == egraph.number_of_classes();
    if saturated && outcome.is_ok() {
        outcome = Err(StopReason::Saturated);
    }
    (applied, outcome)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use egg::{Runner, SimpleScheduler};

    use super::*;
    use crate::ir::DType;
    use crate::opt::gate::KvCache;
    use crate::opt::lift::lift;
    use crate::opt::rules::Stage;
    use crate::role::Role;

    /// Every class with its nodes and data, in the e-graph's order.
    fn snapshot(egraph: &OnnxGraph) -> Vec<String> {
        egraph
            .classes()
            .map(|c| format!("{} {:?} {:?}", c.id, c.nodes, c.data))
            .collect()
    }

    #[test]
    fn runs_leave_the_egraph_as_eggs_runner_does() {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama");
        let config = crate::models::load_config(&config.join("config.json")).unwrap();
        let model = crate::models::build_model(&config, DType::F16).unwrap();
        let caps = crate::ep::get_ep("cuda").unwrap();
        let rules = crate::rulebook::rules().unwrap().rules;
        let mut ours = lift(&model.graph).unwrap().egraph;
        let limits = RunLimits {
            iterations: 16,
            nodes: 100_000,
            time: Duration::from_secs(60),
        };
        // Runs, runs the pipeline skips, runs whose first iteration applies known matches.
        let (mut runs, mut idle, mut primed) = (0, 0, 0);
        for stage in Stage::ALL {
            let mut active = Vec::new();
            // The pipeline skips the run of a rule that matches nothing on a fixpoint of the
            // rules before it: such a run must change nothing.
            let mut fixpoint = true;
            for rule in rules.iter().filter(|r| {
                r.stage == stage
                    && r.gate
                        .enabled(&caps, DType::F16, Role::Decoder, KvCache::AsIs)
            }) {
                active.push(rule.rewrite().unwrap());
                let found = active.last().unwrap().search(&ours);
                let skippable = fixpoint && found.is_empty();
                let before = snapshot(&ours);
                let runner = Runner::<Onnx, OnnxAnalysis>::new(OnnxAnalysis::default())
                    .with_egraph(ours.clone())
                    .with_scheduler(SimpleScheduler)
                    .with_iter_limit(limits.iterations)
                    .with_node_limit(limits.nodes)
                    .with_time_limit(limits.time)
                    .run(&active);
                // As the pipeline runs it: the first iteration applies the matches the skip
                // test found, when the e-graph was a fixpoint of the rules before.
                primed += usize::from(fixpoint && ours.clean && !skippable);
                let first = (fixpoint && ours.clean).then(|| FirstIteration {
                    known: active.len() - 1,
                    matches: vec![found],
                });
                let run = saturate(&mut ours, &active, limits, first);
                assert_eq!(run.iterations, runner.iterations.len(), "{}", rule.name);
                assert_eq!(
                    format!("{:?}", Some(&run.stop)),
                    format!("{:?}", runner.stop_reason.as_ref())
                );
                let applied: Vec<(Symbol, usize)> = runner
                    .iterations
                    .iter()
                    .flat_map(|i| i.applied.iter().map(|(r, n)| (*r, *n)))
                    .fold(Vec::new(), |mut acc, (r, n)| {
                        match acc.iter_mut().find(|(s, _)| *s == r) {
                            Some((_, t)) => *t += n,
                            None => acc.push((r, n)),
                        }
                        acc
                    });
                assert_eq!(run.applied, applied, "{}", rule.name);
                assert!(ours.clean);
                assert_eq!(snapshot(&ours), snapshot(&runner.egraph), "{}", rule.name);
                if skippable {
                    assert_eq!(run.iterations, 1, "{}", rule.name);
                    assert!(run.applied.is_empty(), "{}", rule.name);
                    assert_eq!(snapshot(&ours), before, "{}", rule.name);
                    idle += 1;
                }
                fixpoint = matches!(run.stop, StopReason::Saturated);
                runs += 1;
            }
        }
        assert!(
            runs > 20 && idle > 10 && primed > 3,
            "{runs} runs, {idle} idle, {primed} primed"
        );
        assert!(
            ours.classes().any(|c| c
                .nodes
                .iter()
                .any(|n| n.to_string().contains("GroupQueryAttention"))),
            "the run rewrote something"
        );
    }
}
