//! DAG-cost extraction from an `egg` e-graph, generic over any [`Language`] and [`Analysis`].
//!
//! egg's own `Extractor` minimises *tree* cost, which pays for a shared value once per use. On a
//! transformer's residual stream every layer's hidden state feeds both the norm and the residual
//! add, so tree cost grows like 2^layers and hides every per-layer saving. Here we minimise
//! **DAG cost** instead: the sum of the own costs of the distinct chosen e-nodes reachable from
//! the roots, each shared class counted once.
//!
//! [`greedy_dag`] is a fast heuristic (extraction is NP-hard): a sharing-aware bottom-up fixpoint
//! followed by a local search that switches one class at a time while that lowers the exact DAG
//! cost. The result is always acyclic and never uses an infinite-cost node.

use std::collections::{BTreeMap, VecDeque};

use egg::{Analysis, EGraph, Id, Language};

use super::nodeset::{NodeSet, Sets, Universe};

/// The result of an extraction: one chosen e-node per needed e-class.
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction<L> {
    /// The chosen e-node of every class reachable from the roots through chosen nodes, keyed by
    /// canonical class id. The children of every chosen node are canonical ids, each a key here.
    pub choices: BTreeMap<Id, L>,
    /// The DAG cost of `choices` from the roots (see [`dag_cost`]).
    pub cost: f64,
}

impl<L: Language> Extraction<L> {
    /// The chosen node of a canonical class.
    ///
    /// # Panics
    /// If `class` has no chosen node (it is not needed by the roots, or not canonical).
    pub fn node(&self, class: Id) -> &L {
        match self.choices.get(&class) {
            Some(node) => node,
            None => panic!("e-class {class} has no chosen node in this extraction"),
        }
    }

    /// The DAG cost of these choices from `roots` (canonical ids) under another cost function,
    /// e.g. another shape profile. See [`dag_cost`].
    pub fn dag_cost(
        &self,
        roots: &[Id],
        cost: impl FnMut(Id, &L) -> f64,
    ) -> Result<f64, ExtractError> {
        dag_cost(&self.choices, roots, cost)
    }

    /// The classes reachable from `roots` through chosen nodes, children before parents (a
    /// deterministic depth-first post-order). Roots are canonicalised with `egraph`.
    ///
    /// # Panics
    /// If a reachable class has no chosen node or the choices form a cycle; neither happens for
    /// an extraction returned by [`greedy_dag`] for the same roots.
    pub fn topo_order<N: Analysis<L>>(&self, egraph: &EGraph<L, N>, roots: &[Id]) -> Vec<Id> {
        let roots: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
        match postorder(&self.choices, &roots) {
            Ok(order) => order,
            Err(e) => panic!("invalid extraction: {e}"),
        }
    }
}

/// Why an extraction could not be produced or costed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    /// A needed class (a root, or for [`dag_cost`] a class missing from the choices) has no
    /// finite-cost acyclic derivation.
    #[error("e-class {class} has no finite-cost acyclic derivation")]
    Unextractable {
        /// The class that cannot be extracted.
        class: Id,
    },
    /// The chosen nodes form a cycle, so they describe no finite graph.
    #[error("the chosen e-nodes form a cycle")]
    Cycle,
}

/// The DAG cost of `choices` from `roots`: the sum of `cost(class, node)` over the distinct
/// classes reachable from the roots through chosen nodes, each counted once.
///
/// `roots` and the children of the chosen nodes must be keys of `choices` (canonical ids).
/// A NaN cost counts as +∞ and a negative one as 0, as in [`greedy_dag`].
///
/// # Errors
/// [`ExtractError::Unextractable`] naming the first reachable class that has no choice;
/// [`ExtractError::Cycle`] if the reachable choices form a cycle.
pub fn dag_cost<L: Language>(
    choices: &BTreeMap<Id, L>,
    roots: &[Id],
    mut cost: impl FnMut(Id, &L) -> f64,
) -> Result<f64, ExtractError> {
    let order = postorder(choices, roots)?;
    Ok(order
        .iter()
        .map(|id| sanitize(cost(*id, &choices[id])))
        .sum())
}

/// Greedy DAG extraction of `roots` from a rebuilt `egraph`.
///
/// `cost(class, node)` is the node's own cost, excluding its children: +∞ for a node the
/// execution provider cannot run, otherwise > 0 (a tiny ε for leaves and projections is fine).
/// NaN counts as +∞ and a negative cost as 0. It is called once per node reachable from the
/// roots.
///
/// 1. **Bottom-up fixpoint.** Every class keeps the node minimising its own cost plus the cost
///    of the union of the node sets its children's derivations need (shared nodes counted once),
///    recomputed over a worklist of parents whenever a child's choice improves. A node is only
///    chosen once all its children have finite derivations that do not contain its class, and a
///    class only changes its choice for a strictly better (cost, size) pair, which keeps the
///    choices acyclic and makes the fixpoint terminate.
/// 2. **Local search.** Each needed class tries each alternative node; the switch is kept when
///    it keeps the choices acyclic and lowers the exact DAG cost (computed incrementally with
///    reference counts). A switch that does not pay alone is completed by switching the other
///    needed classes that can read what it newly made needed (the other outputs of a fused
///    multi-output op) and kept when the whole move pays. Sweeps repeat until none helps (at
///    most 16).
///
/// Infinite-cost nodes are never chosen, and the result is checked to be acyclic. Ties go to the
/// node listed first in its class, so the same e-graph always gives the same choices.
///
/// Quality: extraction is NP-hard, and this is a heuristic. On random e-graphs of up to 7
/// classes (`tests/extract_optimality.rs`) the result is **within 1.5× of the optimal DAG
/// cost**, and exactly optimal in 99.8% of cases (worst seen 1.46× over 20,000 of them). It
/// cannot see a saving that needs two classes to switch together (e.g. packing Q, K and V into
/// one MatMul when each projection alone is cheaper unpacked).
///
/// Cost: the node sets share structure ([`NodeSet`]), so a class whose derivation extends its
/// children's by a few nodes costs O(few × log nodes) time and memory; on a transformer time
/// and memory grow linearly with the layer count.
///
/// # Errors
/// [`ExtractError::Unextractable`] naming the first root with no finite-cost acyclic
/// derivation; [`ExtractError::Cycle`] if the final check finds a cycle (a bug).
pub fn greedy_dag<L: Language, N: Analysis<L>>(
    egraph: &EGraph<L, N>,
    roots: &[Id],
    cost: impl FnMut(Id, &L) -> f64,
) -> Result<Extraction<L>, ExtractError> {
    let roots: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
    let problem = Problem::new(egraph, &roots, cost);
    let mut choice = problem.bottom_up();
    let root_idx: Vec<usize> = roots.iter().map(|&r| problem.index.dense(r)).collect();
    if let Some(&r) = root_idx.iter().find(|&&r| choice[r] == NONE) {
        return Err(ExtractError::Unextractable {
            class: problem.ids[r],
        });
    }
    problem.local_search(&mut choice, &root_idx);

    // Collect the needed classes, with canonical children.
    let mut choices = BTreeMap::new();
    let mut seen = vec![false; problem.ids.len()];
    let mut stack = root_idx;
    while let Some(c) = stack.pop() {
        if std::mem::replace(&mut seen[c], true) {
            continue;
        }
        let k = choice[c];
        let node = problem.nodes[k].clone().map_children(|x| egraph.find(x));
        choices.insert(problem.ids[c], node);
        stack.extend_from_slice(problem.children(k));
    }
    let cost = dag_cost(&choices, &roots, |id, _| {
        problem.cost[choice[problem.index.dense(id)]]
    })?;
    Ok(Extraction { choices, cost })
}

/// Marks "no node chosen yet".
const NONE: usize = usize::MAX;

/// Marks an id [`IdIndex`] does not hold.
const ABSENT: usize = usize::MAX - 1;

/// A map from e-class ids to dense indices, stored as a vector over the id numbers (egg's ids
/// are small consecutive integers), so a lookup neither hashes nor leaves the cache as often as
/// a hash map over tens of thousands of classes.
#[derive(Default)]
struct IdIndex(Vec<usize>);

impl IdIndex {
    /// The value of `id`, if it has one.
    fn get(&self, id: Id) -> Option<usize> {
        self.0
            .get(usize::from(id))
            .copied()
            .filter(|&d| d != ABSENT)
    }

    fn set(&mut self, id: Id, value: usize) {
        let i = usize::from(id);
        if i >= self.0.len() {
            self.0.resize(i + 1, ABSENT);
        }
        self.0[i] = value;
    }

    /// The dense index of a class of the problem.
    ///
    /// # Panics
    /// If `id` is not a class of the problem.
    fn dense(&self, id: Id) -> usize {
        match self.get(id) {
            Some(d) if d != NONE => d,
            _ => panic!("e-class {id} is not part of the extraction problem"),
        }
    }
}

/// Most local-search sweeps over the needed classes.
const MAX_SWEEPS: usize = 16;

/// Co-switches ([`Problem::co_switch`]) only try the readers of a newly needed class read by at
/// most this many classes (a multi-output op's projections).
const MAX_CO_READERS: usize = 8;

/// NaN → +∞, negative → 0.
fn sanitize(cost: f64) -> f64 {
    if cost.is_nan() {
        f64::INFINITY
    } else {
        cost.max(0.0)
    }
}

/// The classes reachable from `roots` through `choices`, children first.
fn postorder<L: Language>(
    choices: &BTreeMap<Id, L>,
    roots: &[Id],
) -> Result<Vec<Id>, ExtractError> {
    const ON_STACK: usize = 0;
    const FINISHED: usize = 1;
    let mut state = IdIndex::default();
    let mut order = Vec::new();
    let mut stack: Vec<(Id, &L, usize)> = Vec::new();
    let lookup = |id: Id| {
        choices
            .get(&id)
            .ok_or(ExtractError::Unextractable { class: id })
    };
    for &root in roots {
        if state.get(root).is_some() {
            continue;
        }
        state.set(root, ON_STACK);
        stack.push((root, lookup(root)?, 0));
        while let Some(top) = stack.last_mut() {
            let (id, node, i) = *top;
            let Some(&child) = node.children().get(i) else {
                stack.pop();
                state.set(id, FINISHED);
                order.push(id);
                continue;
            };
            top.2 += 1;
            match state.get(child) {
                Some(ON_STACK) => return Err(ExtractError::Cycle),
                Some(_) => {}
                None => {
                    state.set(child, ON_STACK);
                    stack.push((child, lookup(child)?, 0));
                }
            }
        }
    }
    Ok(order)
}

/// The part of the e-graph reachable from the roots, with dense indices.
///
/// Classes are numbered in depth-first post-order from the roots (children tend to come
/// first); nodes are numbered contiguously class by class, in the order egg lists them.
struct Problem<'a, L> {
    /// Dense class → canonical id.
    ids: Vec<Id>,
    /// Canonical id → dense class.
    index: IdIndex,
    /// The nodes of class `c` are `node_start[c]..node_start[c + 1]`.
    node_start: Vec<usize>,
    /// Dense node → the e-node.
    nodes: Vec<&'a L>,
    /// Dense node → own cost (sanitised).
    cost: Vec<f64>,
    /// The children of node `k` are `children[child_start[k]..child_start[k + 1]]`.
    child_start: Vec<usize>,
    /// Dense child classes of all nodes.
    children: Vec<usize>,
    /// Dense class → the distinct classes with a node that has it as a child.
    parents: Vec<Vec<usize>>,
    /// The shape of node sets over the dense nodes.
    universe: Universe,
}

impl<'a, L: Language> Problem<'a, L> {
    fn new<N: Analysis<L>>(
        egraph: &'a EGraph<L, N>,
        roots: &[Id],
        mut cost: impl FnMut(Id, &L) -> f64,
    ) -> Self {
        // Iterative DFS post-order over all nodes' children.
        let mut index = IdIndex::default();
        let mut ids = Vec::new();
        // The nodes of each dense class, kept from the walk so that the e-graph is not asked
        // again (a hash lookup and a likely cache miss per class).
        let mut class_nodes_of: Vec<&'a [L]> = Vec::new();
        let mut stack: Vec<(Id, &'a [L], usize, usize)> = Vec::new();
        for &root in roots {
            if index.get(root).is_some() {
                continue;
            }
            index.set(root, NONE);
            stack.push((root, &egraph[root].nodes, 0, 0));
            while let Some(top) = stack.last_mut() {
                let (id, class_nodes, n, i) = *top;
                let Some(node) = class_nodes.get(n) else {
                    stack.pop();
                    index.set(id, ids.len());
                    ids.push(id);
                    class_nodes_of.push(class_nodes);
                    continue;
                };
                let Some(&child) = node.children().get(i) else {
                    *top = (id, class_nodes, n + 1, 0);
                    continue;
                };
                top.3 += 1;
                let child = egraph.find(child);
                if index.get(child).is_none() {
                    index.set(child, NONE);
                    stack.push((child, &egraph[child].nodes, 0, 0));
                }
            }
        }

        let mut node_start = Vec::with_capacity(ids.len() + 1);
        let mut nodes = Vec::new();
        let mut costs = Vec::new();
        let mut child_start = vec![0];
        let mut children = Vec::new();
        let mut parents: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
        for (c, (&id, &class_nodes)) in ids.iter().zip(&class_nodes_of).enumerate() {
            node_start.push(nodes.len());
            for node in class_nodes {
                for &child in node.children() {
                    let d = index.dense(egraph.find(child));
                    children.push(d);
                    if parents[d].last() != Some(&c) {
                        parents[d].push(c);
                    }
                }
                child_start.push(children.len());
                costs.push(sanitize(cost(id, node)));
                nodes.push(node);
            }
        }
        node_start.push(nodes.len());
        let universe = Universe::new(nodes.len());
        Problem {
            ids,
            index,
            node_start,
            nodes,
            cost: costs,
            child_start,
            children,
            parents,
            universe,
        }
    }

    fn node_range(&self, c: usize) -> std::ops::Range<usize> {
        self.node_start[c]..self.node_start[c + 1]
    }

    fn children(&self, k: usize) -> &[usize] {
        &self.children[self.child_start[k]..self.child_start[k + 1]]
    }

    /// Phase 1: the sharing-aware bottom-up fixpoint. Returns the chosen node of every class
    /// (`NONE` where no finite acyclic derivation was found).
    ///
    /// Each class `c` keeps the set `sets[c]` of nodes its derivation needed when chosen (a
    /// persistent [`NodeSet`] over dense nodes), their total cost `val[c]` and count `size[c]`. A class only
    /// changes its choice for a lexicographically smaller `(val, size)`, so that pair only
    /// decreases; and when a node is chosen, its set strictly contains each child's set of the
    /// moment, so the parent's pair exceeds each child's pair then, and hence forever after.
    /// Every choice edge therefore goes from a larger pair to a smaller one: no cycles.
    fn bottom_up(&self) -> Vec<usize> {
        let n = self.ids.len();
        let mut state = BottomUp {
            choice: vec![NONE; n],
            val: vec![f64::INFINITY; n],
            size: vec![usize::MAX; n],
            sets: vec![NodeSet::default(); n],
            arena: Sets::new(self.universe),
        };
        let mut queue: VecDeque<usize> = (0..n).collect();
        let mut queued = vec![true; n];
        while let Some(c) = queue.pop_front() {
            queued[c] = false;
            let mut best: Option<(f64, usize, usize)> = None;
            for k in self.node_range(c) {
                if let Some((v, s)) = self.evaluate(&mut state, c, k) {
                    if best.is_none_or(|(bv, bs, _)| better(v, s, bv, bs)) {
                        best = Some((v, s, k));
                    }
                }
            }
            let Some((v, s, k)) = best else { continue };
            if !better(v, s, state.val[c], state.size[c]) {
                continue;
            }
            self.choose(&mut state, c, k);
            state.val[c] = v;
            state.size[c] = s;
            for &p in &self.parents[c] {
                if !queued[p] {
                    queued[p] = true;
                    queue.push_back(p);
                }
            }
        }
        let (leaves, branches) = state.arena.len();
        tracing::debug!(
            "extraction: {} classes, {} nodes, node sets of {leaves} leaves and {branches} branches",
            n,
            self.nodes.len()
        );
        state.choice
    }

    /// The `(cost, size)` of the union of node `k`'s children's sets plus `k`, or `None` if `k`
    /// cannot be chosen for class `c` now.
    fn evaluate(&self, state: &mut BottomUp, c: usize, k: usize) -> Option<(f64, usize)> {
        let own = self.cost[k];
        if !own.is_finite() {
            return None;
        }
        let children = self.children(k);
        let mut base: Option<usize> = None;
        for &d in children {
            if d == c
                || state.choice[d] == NONE
                || self.set_has_class(&state.arena, state.sets[d], c)
            {
                return None;
            }
            if base.is_none_or(|b| better(state.val[b], state.size[b], state.val[d], state.size[d]))
            {
                base = Some(d);
            }
        }
        let Some(b) = base else {
            return Some((own, 1));
        };
        // Start from the most expensive child (so the sum is at least every child's), then add
        // the nodes the other children need that it does not.
        // `others` is only needed here: its tries are given back before returning.
        let mark = state.arena.mark();
        let mut others = NodeSet::default();
        for &d in children.iter().filter(|&&d| d != b) {
            others = state.arena.union(others, state.sets[d], &self.cost);
        }
        let (extra, n) = state.arena.missing_from(state.sets[b], others, &self.cost);
        state.arena.release(mark);
        Some((state.val[b] + extra + own, state.size[b] + n + 1))
    }

    /// Whether the node set `set` holds a node of class `c`.
    fn set_has_class(&self, arena: &Sets, set: NodeSet, c: usize) -> bool {
        self.node_range(c).any(|k| arena.contains(set, k))
    }

    /// Makes `k` the choice of class `c` and its set the union of its children's plus `k`.
    fn choose(&self, state: &mut BottomUp, c: usize, k: usize) {
        let mut set = NodeSet::default();
        for &d in self.children(k) {
            set = state.arena.union(set, state.sets[d], &self.cost);
        }
        state.sets[c] = state.arena.with(set, k, &self.cost);
        state.choice[c] = k;
    }

    /// Phase 2: single-class switches that lower the exact DAG cost, until none helps.
    fn local_search(&self, choice: &mut [usize], roots: &[usize]) {
        let n = self.ids.len();
        let mut search = LocalSearch {
            refs: vec![0; n],
            pos: self.positions(choice),
            mark: vec![0; n],
            stamp: 0,
            stack: Vec::new(),
        };
        // Roots hold one reference each, so they stay needed.
        for &r in roots {
            search.stack.push(r);
            self.retain(choice, &mut search.refs, &mut search.stack);
        }
        // Single switches until none helps; then one sweep that also tries co-switches (dearer:
        // each failed switch tries the classes around it), and single switches again after a
        // co-switch changed something.
        let mut co = false;
        for _ in 0..MAX_SWEEPS {
            let mut changed = false;
            for c in 0..n {
                if search.refs[c] == 0 {
                    continue;
                }
                for k in self.node_range(c) {
                    let old = choice[c];
                    if k == old
                        || !self.cost[k].is_finite()
                        || self.children(k).iter().any(|&d| choice[d] == NONE)
                        || !self.switch_is_acyclic(choice, &mut search, c, k)
                    {
                        continue;
                    }
                    // Children that only this switch makes needed (a multi-output op's
                    // tuple, say): other classes may then read them for free.
                    let newly: Vec<usize> = match co {
                        true => self
                            .children(k)
                            .iter()
                            .copied()
                            .filter(|&d| search.refs[d] == 0)
                            .collect(),
                        false => Vec::new(),
                    };
                    let (added, removed) = self.switch(choice, &mut search, c, k);
                    // A relative margin keeps rounding noise from flip-flopping between ties.
                    if added < removed * (1.0 - 1e-9) {
                        changed = true;
                        if self
                            .children(k)
                            .iter()
                            .any(|&d| search.pos[d] > search.pos[c])
                        {
                            search.pos = self.positions(choice);
                        }
                    } else if co && self.co_switch(choice, &mut search, c, &newly, added, removed) {
                        changed = true;
                    } else {
                        self.switch(choice, &mut search, c, old);
                    }
                }
            }
            match (changed, co) {
                (false, true) => break,
                (false, false) => co = true,
                (true, _) => co = false,
            }
        }
    }

    /// Completes a tentative switch of class `c` (which added `added` and removed `removed`,
    /// not a saving alone) by switching other needed classes to nodes that read a class the
    /// switch newly made needed (`newly`): the other outputs of a fused multi-output op, which
    /// then cost nothing more. Each such class takes its best saving, if any; the whole move is
    /// kept (true) when it lowers the DAG cost, else those switches are undone (false, and the
    /// caller undoes `c`'s). This finds what single switches cannot: a fused op whose outputs
    /// replace two classes at once (a residual Add and its norm).
    fn co_switch(
        &self,
        choice: &mut [usize],
        search: &mut LocalSearch,
        c: usize,
        newly: &[usize],
        mut added: f64,
        mut removed: f64,
    ) -> bool {
        let reads = |k: usize, d: usize| self.children(k).contains(&d);
        // A fused op's outputs are read by a few classes (one per output); a value many classes
        // read (a shared mask, the sequence lengths) is no such op, and trying all its readers
        // at every failed switch would make the search quadratic in the layer count.
        let candidates: Vec<(usize, usize)> = newly
            .iter()
            .filter(|&&d| self.parents[d].len() <= MAX_CO_READERS)
            .flat_map(|&d| self.parents[d].iter().map(move |&p| (p, d)))
            .filter(|&(p, d)| p != c && search.refs[p] > 0 && !reads(choice[p], d))
            .collect();
        if candidates.is_empty() {
            return false;
        }
        // Positions stay a topological order unless a new child sits above its parent; then
        // they are recomputed for the tentative choice, so the acyclicity checks below hold.
        let stale =
            |pos: &[usize], c: usize| self.children(choice[c]).iter().any(|&d| pos[d] > pos[c]);
        let before = match stale(&search.pos, c) {
            true => Some(std::mem::replace(&mut search.pos, self.positions(choice))),
            false => None,
        };
        let mut done: Vec<(usize, usize)> = Vec::new();
        for (p, d) in candidates {
            let old = choice[p];
            if reads(old, d) {
                continue;
            }
            let mut best: Option<(f64, usize)> = None;
            for k in self.node_range(p) {
                if !reads(k, d)
                    || !self.cost[k].is_finite()
                    || self.children(k).iter().any(|&x| choice[x] == NONE)
                    || !self.switch_is_acyclic(choice, search, p, k)
                {
                    continue;
                }
                let (a, r) = self.switch(choice, search, p, k);
                self.switch(choice, search, p, old);
                if r - a > best.map_or(0.0, |(gain, _)| gain) {
                    best = Some((r - a, k));
                }
            }
            if let Some((_, k)) = best {
                let (a, r) = self.switch(choice, search, p, k);
                added += a;
                removed += r;
                done.push((p, old));
                if self
                    .children(k)
                    .iter()
                    .any(|&x| search.pos[x] > search.pos[p])
                {
                    search.pos = self.positions(choice);
                }
            }
        }
        if added < removed * (1.0 - 1e-9) {
            return true;
        }
        for &(p, old) in done.iter().rev() {
            self.switch(choice, search, p, old);
        }
        match before {
            Some(pos) => search.pos = pos,
            // Positions valid for the tentative choices stay valid once they are undone.
            None if done.is_empty() => {}
            None => search.pos = self.positions(choice),
        }
        false
    }

    /// Switches class `c` to node `k`, updating reference counts; returns the own costs of the
    /// nodes that became needed (including `k`) and of those no longer needed.
    fn switch(
        &self,
        choice: &mut [usize],
        search: &mut LocalSearch,
        c: usize,
        k: usize,
    ) -> (f64, f64) {
        let old = choice[c];
        choice[c] = k;
        // Take the new references first, so nodes both sides need are never released.
        search.stack.extend_from_slice(self.children(k));
        let added = self.cost[k] + self.retain(choice, &mut search.refs, &mut search.stack);
        search.stack.extend_from_slice(self.children(old));
        let mut removed = self.cost[old];
        while let Some(x) = search.stack.pop() {
            search.refs[x] -= 1;
            if search.refs[x] == 0 {
                removed += self.cost[choice[x]];
                search.stack.extend_from_slice(self.children(choice[x]));
            }
        }
        (added, removed)
    }

    /// Takes one reference to each class on `stack` (draining it), recursively retaining the
    /// chosen children of classes that become needed; returns the cost they add.
    fn retain(&self, choice: &[usize], refs: &mut [usize], stack: &mut Vec<usize>) -> f64 {
        let mut added = 0.0;
        while let Some(x) = stack.pop() {
            refs[x] += 1;
            if refs[x] == 1 {
                added += self.cost[choice[x]];
                stack.extend_from_slice(self.children(choice[x]));
            }
        }
        added
    }

    /// Whether switching class `c` to node `k` keeps the choice graph acyclic, i.e. no child of
    /// `k` reaches `c` through chosen nodes. Paths down from a child to `c` only pass classes
    /// placed after `c` in the topological order `pos`, which bounds the search.
    fn switch_is_acyclic(
        &self,
        choice: &[usize],
        search: &mut LocalSearch,
        c: usize,
        k: usize,
    ) -> bool {
        search.stamp += 1;
        search.stack.clear();
        for &d in self.children(k) {
            if search.pos[d] >= search.pos[c] {
                search.stack.push(d);
            }
        }
        while let Some(x) = search.stack.pop() {
            if x == c {
                search.stack.clear();
                return false;
            }
            if search.mark[x] == search.stamp || search.pos[x] < search.pos[c] {
                continue;
            }
            search.mark[x] = search.stamp;
            search.stack.extend_from_slice(self.children(choice[x]));
        }
        true
    }

    /// A topological position (children first) for every class with a choice.
    fn positions(&self, choice: &[usize]) -> Vec<usize> {
        let n = self.ids.len();
        let mut pos = vec![NONE; n];
        let mut next = 0;
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for start in 0..n {
            if choice[start] == NONE || pos[start] != NONE {
                continue;
            }
            // NONE - 1 marks "on the stack".
            pos[start] = NONE - 1;
            stack.push((start, 0));
            while let Some(top) = stack.last_mut() {
                let (c, i) = *top;
                let Some(&d) = self.children(choice[c]).get(i) else {
                    stack.pop();
                    pos[c] = next;
                    next += 1;
                    continue;
                };
                top.1 += 1;
                if pos[d] == NONE {
                    pos[d] = NONE - 1;
                    stack.push((d, 0));
                }
            }
        }
        pos
    }
}

/// Whether `(v, s)` beats `(bv, bs)`: lower cost, then fewer nodes.
fn better(v: f64, s: usize, bv: f64, bs: usize) -> bool {
    v < bv || (v == bv && s < bs)
}

/// Working state of [`Problem::bottom_up`].
struct BottomUp {
    choice: Vec<usize>,
    val: Vec<f64>,
    size: Vec<usize>,
    /// Per class, the dense nodes its derivation needs.
    sets: Vec<NodeSet>,
    /// The tries of `sets`.
    arena: Sets,
}

/// Working state of [`Problem::local_search`].
struct LocalSearch {
    /// Per class, references from needed chosen nodes (with multiplicity) and roots.
    refs: Vec<usize>,
    /// Per class with a choice, its position in a topological order of the choice graph.
    pos: Vec<usize>,
    /// Visited marks for [`Problem::switch_is_acyclic`], valid when equal to `stamp`.
    mark: Vec<u64>,
    stamp: u64,
    stack: Vec<usize>,
}
