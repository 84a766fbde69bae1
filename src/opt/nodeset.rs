//! Persistent sets of dense node indices with the total cost of their members, for DAG-cost
//! extraction ([`super::extract`]).
//!
//! Extraction keeps, per e-class, the set of nodes its derivation needs. On a transformer those
//! sets are nested along the residual stream (layer i's set holds layers 0..i), so flat bitsets
//! cost O(classes × nodes) time and memory: quadratic in the layer count. Here a set is a
//! fixed-depth trie (16-way branches over 64-bit leaves) whose subtrees are shared between
//! sets: adding a node copies one path, and a union or difference of two sets that share most
//! subtrees only visits the paths where they differ (shared subtrees are recognised by
//! pointer). Every subtree caches the cost and count of its members.

use std::rc::Rc;

/// Index bits consumed by a leaf (64 members).
const LEAF_BITS: u32 = 6;
/// Index bits consumed by a branch (16 children).
const BRANCH_BITS: u32 = 4;
const FANOUT: usize = 1 << BRANCH_BITS;

/// The shape of the sets of one extraction: how many branch levels cover its node indices.
#[derive(Debug, Clone, Copy)]
pub(super) struct Universe {
    depth: u32,
}

impl Universe {
    /// A universe holding indices `0..nodes`.
    pub(super) fn new(nodes: usize) -> Universe {
        let last = nodes.saturating_sub(1);
        let mut depth = 0;
        while depth < 15 && (last >> (LEAF_BITS + BRANCH_BITS * depth)) > 0 {
            depth += 1;
        }
        Universe { depth }
    }

    /// How many indices one child of a branch at `level` covers (a power of two).
    fn span(self, level: u32) -> usize {
        1 << (LEAF_BITS + BRANCH_BITS * (self.depth - 1 - level))
    }

    fn slot(self, k: usize, level: u32) -> usize {
        (k / self.span(level)) % FANOUT
    }
}

/// A persistent set of node indices; cloning is O(1).
#[derive(Debug, Clone, Default)]
pub(super) struct NodeSet(Option<Rc<Trie>>);

#[derive(Debug)]
enum Trie {
    Leaf {
        bits: u64,
        cost: f64,
        count: usize,
    },
    Branch {
        children: [NodeSet; FANOUT],
        cost: f64,
        count: usize,
    },
}

impl Trie {
    fn totals(&self) -> (f64, usize) {
        match self {
            Trie::Leaf { cost, count, .. } | Trie::Branch { cost, count, .. } => (*cost, *count),
        }
    }
}

impl NodeSet {
    /// Whether `k` is a member.
    pub(super) fn contains(&self, u: Universe, k: usize) -> bool {
        let mut at = self;
        for level in 0..u.depth {
            match at.0.as_deref() {
                Some(Trie::Branch { children, .. }) => at = &children[u.slot(k, level)],
                _ => return false,
            }
        }
        match at.0.as_deref() {
            Some(Trie::Leaf { bits, .. }) => bits & (1 << (k % 64)) != 0,
            _ => false,
        }
    }

    /// This set plus `k` (own cost `cost[k]`).
    pub(super) fn with(&self, u: Universe, k: usize, cost: &[f64]) -> NodeSet {
        self.insert(u, 0, k, cost)
    }

    fn insert(&self, u: Universe, level: u32, k: usize, cost: &[f64]) -> NodeSet {
        if level == u.depth {
            let old = match self.0.as_deref() {
                Some(Trie::Leaf { bits, cost, count }) => (*bits, *cost, *count),
                _ => (0, 0.0, 0),
            };
            let bit = 1 << (k % 64);
            if old.0 & bit != 0 {
                return self.clone();
            }
            return NodeSet(Some(Rc::new(Trie::Leaf {
                bits: old.0 | bit,
                cost: old.1 + cost[k],
                count: old.2 + 1,
            })));
        }
        let mut children = match self.0.as_deref() {
            Some(Trie::Branch { children, .. }) => children.clone(),
            _ => Default::default(),
        };
        let s = u.slot(k, level);
        children[s] = children[s].insert(u, level + 1, k, cost);
        NodeSet::branch(children)
    }

    fn branch(children: [NodeSet; FANOUT]) -> NodeSet {
        let (cost, count) = children
            .iter()
            .filter_map(|c| c.0.as_deref())
            .map(Trie::totals)
            .fold((0.0, 0), |(c, n), (dc, dn)| (c + dc, n + dn));
        NodeSet(Some(Rc::new(Trie::Branch {
            children,
            cost,
            count,
        })))
    }

    fn same(&self, other: &NodeSet) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Rc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// The union of both sets; subtrees the two share are reused, not visited.
    pub(super) fn union(&self, u: Universe, other: &NodeSet, cost: &[f64]) -> NodeSet {
        self.union_at(other, u, 0, 0, cost)
    }

    /// [`NodeSet::union`] of subtrees at `level` whose first index is `base`.
    fn union_at(
        &self,
        other: &NodeSet,
        u: Universe,
        level: u32,
        base: usize,
        cost: &[f64],
    ) -> NodeSet {
        let (a, b) = match (self.0.as_deref(), other.0.as_deref()) {
            (None, _) => return other.clone(),
            (_, None) => return self.clone(),
            _ if self.same(other) => return self.clone(),
            (Some(a), Some(b)) => (a, b),
        };
        match (a, b) {
            (Trie::Leaf { bits: x, .. }, Trie::Leaf { bits: y, .. }) => {
                if x | y == *x {
                    return self.clone();
                }
                if x | y == *y {
                    return other.clone();
                }
                let (extra, n) = bit_costs(y & !x, base, cost);
                let (c, count) = a.totals();
                NodeSet(Some(Rc::new(Trie::Leaf {
                    bits: x | y,
                    cost: c + extra,
                    count: count + n,
                })))
            }
            (Trie::Branch { children: xs, .. }, Trie::Branch { children: ys, .. }) => {
                let span = u.span(level);
                let merged: [NodeSet; FANOUT] = std::array::from_fn(|i| {
                    xs[i].union_at(&ys[i], u, level + 1, base + i * span, cost)
                });
                if merged.iter().zip(xs).all(|(m, x)| m.same(x)) {
                    return self.clone();
                }
                if merged.iter().zip(ys).all(|(m, y)| m.same(y)) {
                    return other.clone();
                }
                NodeSet::branch(merged)
            }
            _ => unreachable!("sets of one universe have the same depth"),
        }
    }

    /// The cost and count of the members of `other` that are not members of this set.
    pub(super) fn missing_from(&self, u: Universe, other: &NodeSet, cost: &[f64]) -> (f64, usize) {
        self.missing_at(other, u, 0, 0, cost)
    }

    /// [`NodeSet::missing_from`] of subtrees at `level` whose first index is `base`.
    fn missing_at(
        &self,
        other: &NodeSet,
        u: Universe,
        level: u32,
        base: usize,
        cost: &[f64],
    ) -> (f64, usize) {
        let b = match other.0.as_deref() {
            None => return (0.0, 0),
            Some(b) => b,
        };
        let a = match self.0.as_deref() {
            None => return b.totals(),
            Some(_) if self.same(other) => return (0.0, 0),
            Some(a) => a,
        };
        match (a, b) {
            (Trie::Leaf { bits: x, .. }, Trie::Leaf { bits: y, .. }) => {
                bit_costs(y & !x, base, cost)
            }
            (Trie::Branch { children: xs, .. }, Trie::Branch { children: ys, .. }) => {
                let span = u.span(level);
                xs.iter()
                    .zip(ys)
                    .enumerate()
                    .map(|(i, (x, y))| x.missing_at(y, u, level + 1, base + i * span, cost))
                    .fold((0.0, 0), |(c, n), (dc, dn)| (c + dc, n + dn))
            }
            _ => unreachable!("sets of one universe have the same depth"),
        }
    }
}

/// The total cost and count of the members `bits` of the leaf starting at index `base`.
fn bit_costs(mut bits: u64, base: usize, cost: &[f64]) -> (f64, usize) {
    let mut total = 0.0;
    let mut n = 0;
    while bits != 0 {
        total += cost[base + bits.trailing_zeros() as usize];
        n += 1;
        bits &= bits - 1;
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
        let u = Universe::new(n);
        let mut a = NodeSet::default();
        let mut plain_a = std::collections::BTreeSet::new();
        for k in (0..n).step_by(3) {
            a = a.with(u, k, &cost);
            plain_a.insert(k);
        }
        // b shares a's subtrees and adds a few members.
        let mut b = a.clone();
        let mut plain_b = plain_a.clone();
        for k in [1, 64, 4097, n - 1] {
            b = b.with(u, k, &cost);
            plain_b.insert(k);
        }
        let total = |s: &std::collections::BTreeSet<usize>| s.iter().map(|&k| cost[k]).sum::<f64>();
        let (c, count) = a.missing_from(u, &b, &cost);
        assert_eq!(count, 4);
        assert_eq!(c, total(&plain_b) - total(&plain_a));
        assert_eq!(b.missing_from(u, &a, &cost), (0.0, 0));
        let ab = a.union(u, &b, &cost);
        assert!(ab.same(&b), "a union that adds nothing to b is b itself");
        let mut c_set = NodeSet::default();
        for k in [2, 5, 4097] {
            c_set = c_set.with(u, k, &cost);
        }
        let all = b.union(u, &c_set, &cost);
        let mut plain_all = plain_b.clone();
        plain_all.extend([2, 5, 4097]);
        for k in 0..n {
            assert_eq!(all.contains(u, k), plain_all.contains(&k), "{k}");
        }
        assert_eq!(
            NodeSet::default().missing_from(u, &all, &cost),
            (total(&plain_all), plain_all.len())
        );
    }

    #[test]
    fn tiny_universes_have_only_a_leaf() {
        let cost = [1.0, 2.0];
        let u = Universe::new(2);
        let s = NodeSet::default().with(u, 1, &cost);
        assert!(s.contains(u, 1) && !s.contains(u, 0));
        assert_eq!(NodeSet::default().missing_from(u, &s, &cost), (2.0, 1));
    }
}
