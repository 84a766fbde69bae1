//! Persistent sets of dense node indices with the total cost of their members, for DAG-cost
//! extraction ([`super::extract`]).
//!
//! Extraction keeps, per e-class, the set of nodes its derivation needs. On a transformer those
//! sets are nested along the residual stream (layer i's set holds layers 0..i), so flat bitsets
//! cost O(classes × nodes) time and memory: quadratic in the layer count. Here a set is a
//! fixed-depth trie (16-way branches over 256-bit leaves) whose subtrees are shared between
//! sets: adding a node copies one path, and a union or difference of two sets that share most
//! subtrees only visits the paths where they differ (shared subtrees are recognised by
//! identity). Every subtree caches the cost and count of its members.
//!
//! The tries of one extraction live in one arena ([`Sets`]) and refer to each other by index:
//! creating one is a push, and they are all freed at once with the arena (freeing hundreds of
//! thousands of separately allocated, reference-counted subtrees one by one cost more than
//! building them on large graphs, for lack of locality). Sets a caller only needed for a while
//! are given back with [`Sets::mark`] and [`Sets::release`].

/// Index bits consumed by a leaf (256 members): a Llama of 100 to 1,000 layers (4,000 to
/// 42,000 extraction nodes) needs two branch levels, where 64-member leaves needed a third past
/// 16,384 nodes (a quarter more work per union on the larger graphs).
const LEAF_BITS: u32 = 8;
/// The 64-bit words of a leaf.
const WORDS: usize = 1 << (LEAF_BITS - 6);
/// The members of a leaf, 64 to a word.
type Bits = [u64; WORDS];
/// Index bits consumed by a branch (16 children).
const BRANCH_BITS: u32 = 4;
const FANOUT: usize = 1 << BRANCH_BITS;

/// The shape of the sets of one extraction: how many branch levels cover its node indices.
#[derive(Debug, Clone, Copy)]
pub(super) struct Universe {
    depth: u32,
    /// The indices are `0..nodes`.
    nodes: usize,
}

impl Universe {
    /// A universe holding indices `0..nodes`.
    pub(super) fn new(nodes: usize) -> Universe {
        let last = nodes.saturating_sub(1);
        let mut depth = 0;
        while depth < 15 && (last >> (LEAF_BITS + BRANCH_BITS * depth)) > 0 {
            depth += 1;
        }
        Universe { depth, nodes }
    }

    /// How many indices one child of a branch at `level` covers (a power of two).
    fn span(self, level: u32) -> usize {
        1 << (LEAF_BITS + BRANCH_BITS * (self.depth - 1 - level))
    }

    fn slot(self, k: usize, level: u32) -> usize {
        (k / self.span(level)) % FANOUT
    }
}

/// A persistent set of node indices: a trie of a [`Sets`] arena (copying it is O(1)). The
/// index is into the arena's leaves for a trie at the leaf level, into its branches otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct NodeSet(u32);

/// The empty set (slot 0 of both arenas is never a trie).
const EMPTY: NodeSet = NodeSet(0);

/// The members of a set among 256 consecutive indices.
#[derive(Debug, Clone, Copy)]
struct Leaf {
    bits: Bits,
    cost: f64,
    count: u32,
}

/// A set's subtrees over 16 consecutive spans.
#[derive(Debug, Clone, Copy)]
struct Branch {
    children: [NodeSet; FANOUT],
    cost: f64,
    count: u32,
}

/// What a union or difference of two tries compares.
enum Pair<'a> {
    Leaves(&'a Leaf, &'a Leaf),
    Branches(&'a Branch, &'a Branch),
}

/// The arena holding the tries of the sets over one [`Universe`]: leaves and branches apart
/// (a leaf takes a third of a branch's room), a trie's level telling which one it is.
#[derive(Debug)]
pub(super) struct Sets {
    universe: Universe,
    leaves: Vec<Leaf>,
    branches: Vec<Branch>,
}

/// A point of a [`Sets`] arena to give back the sets made after it ([`Sets::release`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    leaves: usize,
    branches: usize,
}

impl Sets {
    /// An arena for sets over `universe`.
    pub(super) fn new(universe: Universe) -> Sets {
        // Room for what an extraction makes (measured on Llama configs of 100 to 1,000
        // layers: about 1.4 leaves per node and 1.4 branches per node and level), so that the
        // arena is not copied to larger and larger vectors as it fills: an untouched
        // reservation costs address space, not memory.
        let room = universe.nodes.saturating_mul(2);
        let mut leaves = Vec::with_capacity(room.saturating_add(1));
        let mut branches = Vec::with_capacity(
            room.saturating_mul(universe.depth as usize)
                .saturating_add(1),
        );
        // Slot 0 of each stands for the empty set and is never read.
        leaves.push(Leaf {
            bits: [0; WORDS],
            cost: 0.0,
            count: 0,
        });
        branches.push(Branch {
            children: [EMPTY; FANOUT],
            cost: 0.0,
            count: 0,
        });
        Sets {
            universe,
            leaves,
            branches,
        }
    }

    /// The totals of the trie `s` at `level`.
    fn totals(&self, s: NodeSet, level: u32) -> (f64, usize) {
        if s == EMPTY {
            return (0.0, 0);
        }
        if level == self.universe.depth {
            let leaf = &self.leaves[s.0 as usize];
            (leaf.cost, leaf.count as usize)
        } else {
            let branch = &self.branches[s.0 as usize];
            (branch.cost, branch.count as usize)
        }
    }

    /// The tries `a` and `b` (neither empty) at `level`.
    fn pair(&self, a: NodeSet, b: NodeSet, level: u32) -> Pair<'_> {
        if level == self.universe.depth {
            Pair::Leaves(&self.leaves[a.0 as usize], &self.leaves[b.0 as usize])
        } else {
            Pair::Branches(&self.branches[a.0 as usize], &self.branches[b.0 as usize])
        }
    }

    fn push_leaf(&mut self, leaf: Leaf) -> NodeSet {
        let index = u32::try_from(self.leaves.len()).expect("fewer than 2^32 set leaves");
        self.leaves.push(leaf);
        NodeSet(index)
    }

    /// The current end of the arena: sets made after it can be given back with
    /// [`Sets::release`].
    pub(super) fn mark(&self) -> Mark {
        Mark {
            leaves: self.leaves.len(),
            branches: self.branches.len(),
        }
    }

    /// How many leaves and branches the arena holds.
    pub(super) fn len(&self) -> (usize, usize) {
        (self.leaves.len(), self.branches.len())
    }

    /// Frees every set made since `mark`; none of them may be used afterwards.
    pub(super) fn release(&mut self, mark: Mark) {
        self.leaves.truncate(mark.leaves.max(1));
        self.branches.truncate(mark.branches.max(1));
    }

    /// Whether `k` is a member of `s`.
    pub(super) fn contains(&self, s: NodeSet, k: usize) -> bool {
        let u = self.universe;
        let mut at = s;
        for level in 0..u.depth {
            if at == EMPTY {
                return false;
            }
            at = self.branches[at.0 as usize].children[u.slot(k, level)];
        }
        let bit = k % (1 << LEAF_BITS);
        at != EMPTY && self.leaves[at.0 as usize].bits[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// `s` plus `k` (own cost `cost[k]`).
    pub(super) fn with(&mut self, s: NodeSet, k: usize, cost: &[f64]) -> NodeSet {
        self.insert(s, 0, k, cost)
    }

    fn insert(&mut self, s: NodeSet, level: u32, k: usize, cost: &[f64]) -> NodeSet {
        let u = self.universe;
        if level == u.depth {
            let old = match s {
                EMPTY => ([0; WORDS], 0.0, 0),
                _ => {
                    let leaf = &self.leaves[s.0 as usize];
                    (leaf.bits, leaf.cost, leaf.count)
                }
            };
            let bit = k % (1 << LEAF_BITS);
            let (word, bit) = (bit / 64, 1 << (bit % 64));
            if old.0[word] & bit != 0 {
                return s;
            }
            let mut bits = old.0;
            bits[word] |= bit;
            return self.push_leaf(Leaf {
                bits,
                cost: old.1 + cost[k],
                count: old.2 + 1,
            });
        }
        let mut children = match s {
            EMPTY => [EMPTY; FANOUT],
            _ => self.branches[s.0 as usize].children,
        };
        let slot = u.slot(k, level);
        children[slot] = self.insert(children[slot], level + 1, k, cost);
        self.branch(children, level)
    }

    /// A new branch at `level` over `children`.
    fn branch(&mut self, children: [NodeSet; FANOUT], level: u32) -> NodeSet {
        let (cost, count) = children
            .iter()
            .filter(|&&c| c != EMPTY)
            .map(|&c| self.totals(c, level + 1))
            .fold((0.0, 0), |(c, n), (dc, dn)| (c + dc, n + dn));
        let index = u32::try_from(self.branches.len()).expect("fewer than 2^32 set branches");
        self.branches.push(Branch {
            children,
            cost,
            count: u32::try_from(count).expect("fewer than 2^32 nodes"),
        });
        NodeSet(index)
    }

    /// The union of both sets; subtrees the two share are reused, not visited.
    pub(super) fn union(&mut self, a: NodeSet, b: NodeSet, cost: &[f64]) -> NodeSet {
        self.union_at(a, b, 0, 0, cost)
    }

    /// [`Sets::union`] of subtrees at `level` whose first index is `base`.
    fn union_at(
        &mut self,
        a: NodeSet,
        b: NodeSet,
        level: u32,
        base: usize,
        cost: &[f64],
    ) -> NodeSet {
        if a == EMPTY || a == b {
            return b;
        }
        if b == EMPTY {
            return a;
        }
        match self.pair(a, b, level) {
            Pair::Leaves(
                &Leaf {
                    bits: x,
                    cost: c,
                    count,
                },
                &Leaf { bits: y, .. },
            ) => {
                let both: Bits = std::array::from_fn(|w| x[w] | y[w]);
                if both == x {
                    return a;
                }
                if both == y {
                    return b;
                }
                let (extra, n) = bit_costs(&std::array::from_fn(|w| y[w] & !x[w]), base, cost);
                self.push_leaf(Leaf {
                    bits: both,
                    cost: c + extra,
                    count: count + n as u32,
                })
            }
            Pair::Branches(&Branch { children: xs, .. }, &Branch { children: ys, .. }) => {
                let span = self.universe.span(level);
                let mut merged = [EMPTY; FANOUT];
                for i in 0..FANOUT {
                    let (x, y) = (xs[i], ys[i]);
                    // The cases `union_at` returns at once, decided here: on the residual
                    // stream all but a child or two are shared or empty, and a call per child
                    // cost more than the comparison.
                    merged[i] = if x == EMPTY || x == y {
                        y
                    } else if y == EMPTY {
                        x
                    } else {
                        self.union_at(x, y, level + 1, base + i * span, cost)
                    };
                }
                if merged == xs {
                    return a;
                }
                if merged == ys {
                    return b;
                }
                self.branch(merged, level)
            }
        }
    }

    /// The cost and count of the members of `b` that are not members of `a`.
    pub(super) fn missing_from(&self, a: NodeSet, b: NodeSet, cost: &[f64]) -> (f64, usize) {
        self.missing_at(a, b, 0, 0, cost)
    }

    /// [`Sets::missing_from`] of subtrees at `level` whose first index is `base`.
    fn missing_at(
        &self,
        a: NodeSet,
        b: NodeSet,
        level: u32,
        base: usize,
        cost: &[f64],
    ) -> (f64, usize) {
        if b == EMPTY || a == b {
            return (0.0, 0);
        }
        if a == EMPTY {
            return self.totals(b, level);
        }
        match self.pair(a, b, level) {
            Pair::Leaves(x, y) => {
                bit_costs(&std::array::from_fn(|w| y.bits[w] & !x.bits[w]), base, cost)
            }
            Pair::Branches(xs, ys) => {
                let span = self.universe.span(level);
                // As in `union_at`, the children `missing_at` answers at once (nothing
                // missing) are skipped here; adding their (0.0, 0) changed no total.
                xs.children
                    .iter()
                    .zip(&ys.children)
                    .enumerate()
                    .filter(|&(_, (&x, &y))| y != EMPTY && x != y)
                    .map(|(i, (&x, &y))| self.missing_at(x, y, level + 1, base + i * span, cost))
                    .fold((0.0, 0), |(c, n), (dc, dn)| (c + dc, n + dn))
            }
        }
    }
}

/// The total cost and count of the members `bits` of the leaf starting at index `base`, added
/// in index order.
fn bit_costs(words: &Bits, base: usize, cost: &[f64]) -> (f64, usize) {
    let mut total = 0.0;
    let mut n = 0;
    for (w, &word) in words.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            total += cost[base + 64 * w + bits.trailing_zeros() as usize];
            n += 1;
            bits &= bits - 1;
        }
    }
    (total, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unions_and_differences_match_plain_sets() {
        let n = 5000;
        let cost: Vec<f64> = (0..n).map(|k| 1.0 + (k % 7) as f64).collect();
        let mut sets = Sets::new(Universe::new(n));
        let mut a = NodeSet::default();
        let mut plain_a = std::collections::BTreeSet::new();
        for k in (0..n).step_by(3) {
            a = sets.with(a, k, &cost);
            plain_a.insert(k);
        }
        // b shares a's subtrees and adds a few members.
        let mut b = a;
        let mut plain_b = plain_a.clone();
        for k in [1, 64, 4097, n - 1] {
            b = sets.with(b, k, &cost);
            plain_b.insert(k);
        }
        let total = |s: &std::collections::BTreeSet<usize>| s.iter().map(|&k| cost[k]).sum::<f64>();
        let (c, count) = sets.missing_from(a, b, &cost);
        assert_eq!(count, 4);
        assert_eq!(c, total(&plain_b) - total(&plain_a));
        assert_eq!(sets.missing_from(b, a, &cost), (0.0, 0));
        let ab = sets.union(a, b, &cost);
        assert_eq!(ab, b, "a union that adds nothing to b is b itself");
        let mark = sets.mark();
        let mut c_set = NodeSet::default();
        for k in [2, 5, 4097] {
            c_set = sets.with(c_set, k, &cost);
        }
        let all = sets.union(b, c_set, &cost);
        let mut plain_all = plain_b.clone();
        plain_all.extend([2, 5, 4097]);
        for k in 0..n {
            assert_eq!(sets.contains(all, k), plain_all.contains(&k), "{k}");
        }
        assert_eq!(
            sets.missing_from(NodeSet::default(), all, &cost),
            (total(&plain_all), plain_all.len())
        );
        // Giving back the sets made since the mark leaves the older ones intact.
        sets.release(mark);
        for k in 0..n {
            assert_eq!(sets.contains(b, k), plain_b.contains(&k), "{k}");
        }
        assert_eq!(
            sets.missing_from(NodeSet::default(), b, &cost),
            (total(&plain_b), plain_b.len())
        );
    }

    #[test]
    fn tiny_universes_have_only_a_leaf() {
        let cost = [1.0, 2.0];
        let mut sets = Sets::new(Universe::new(2));
        let s = sets.with(NodeSet::default(), 1, &cost);
        assert!(sets.contains(s, 1) && !sets.contains(s, 0));
        assert_eq!(sets.missing_from(NodeSet::default(), s, &cost), (2.0, 1));
    }
}
