//! transformers' float 4-D causal mask (`_prepare_4d_causal_attention_mask_with_cache_position`,
//! transformers ≤ 4.57, as optimum-onnx exports OPT, Falcon, Nemotron, StableLM, GPT-J,
//! CodeGen): `full((S, T), min)`, `Trilu(upper, 1)`, times `Cast(Range(T) > cache_position)`,
//! expanded to `[B, 1, S, T]`; the padding written back by `ScatterND` over its `[..., :T]`
//! slice (`masked_fill` where `causal + attention_mask == 0`).
//!
//! [`float_export_mask`] evaluates it symbolically as a two-valued float tensor: every element
//! is `±0` where a conjunction of atoms (those of [`super::Reader`]) holds and exactly
//! `−FLT_MAX` elsewhere. Each op is read only where that form is exact:
//! - `ConstantOfShape(shape, −FLT_MAX)` is `−FLT_MAX` everywhere (the conjunction `false`);
//! - `Trilu(x, k, upper)` of such a constant is `±0` below (above) the `k`-th diagonal;
//! - `x · Cast(c, float)` (`c` boolean) is `±0` where `x` is or `c` is false (the disjunction
//!   is read when one side implies the other, e.g. `j ≤ i ⇒ j ≤ P + i` as `P ≥ 0`);
//! - `Where(Equal(x + Cast(m, float), 0), −FLT_MAX, x)` (`m` integer, `attention_mask` through
//!   `Unsqueeze`s and widening `Cast`s) is `±0` where `x` is and `m ≠ 0`: `±0 + m = 0` exactly
//!   when `m = 0` (an integer cast to f32 is 0 only when it is 0) and `−FLT_MAX + m ≠ 0`;
//! - `ScatterND(data, grid, updates)` with `grid[..., k]` the position along axis `k` over all of
//!   `data`'s axes (`Concat` of `Unsqueeze(index, −1)`) overwrites every element once: it is
//!   `updates` (of `data`'s dims);
//! - `Unsqueeze`, `Expand`, a `Reshape` to its own dims and a `Slice` that keeps every element
//!   move elements without changing them.

use std::collections::HashMap;

use egg::Id;

use super::MAX_DEPTH;
use super::{
    broadcast, graph_input, mask_sym, predicate, unsqueezed, Affine, Atom, ExportMask, Reader, Sym,
    Value,
};
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::OpNode;
use crate::opt::query::{const_ints, int_attr, scalar_float};

/// The conjunction that never holds: `1 ≤ 0`.
pub(super) fn never(rank: usize) -> Atom {
    Atom::NonPositive(Affine::constant(rank, SymDim::Known(1)))
}

/// Whether the conjunction never holds (one atom `k ≤ 0` with a constant `k > 0`).
pub(super) fn is_never(atoms: &[Atom]) -> bool {
    matches!(atoms, [Atom::NonPositive(a)]
        if a.coef.iter().all(|&c| c == 0) && a.offset.known().is_some_and(|v| v > 0))
}

/// `¬(a ≤ 0)`, i.e. `−a + 1 ≤ 0` (integers).
fn negated(a: &Affine) -> Option<Affine> {
    let zero = Affine::constant(a.coef.len(), SymDim::Known(0));
    zero.plus(a, -1)?.shifted(1)
}

/// `x ∨ y` for two conjunctions, when it is one of them: a conjunction of no atoms (always
/// true) absorbs the other, `false` yields to the other, and of two single atoms `c·pos + o ≤ 0`
/// with the same coefficients the one with the smaller offset (implied by the other).
fn either(x: &[Atom], y: &[Atom]) -> Option<Vec<Atom>> {
    if x.is_empty() || y.is_empty() {
        return Some(Vec::new());
    }
    if is_never(x) {
        return Some(y.to_vec());
    }
    if is_never(y) {
        return Some(x.to_vec());
    }
    let ([Atom::NonPositive(a)], [Atom::NonPositive(b)]) = (x, y) else {
        return None;
    };
    if a.coef != b.coef {
        return None;
    }
    // a ≤ 0 ⇒ b ≤ 0 when b − a = b.offset − a.offset ≤ 0.
    if a.offset.sub(&b.offset).is_nonnegative() {
        Some(y.to_vec())
    } else if b.offset.sub(&a.offset).is_nonnegative() {
        Some(x.to_vec())
    } else {
        None
    }
}

/// Reads the two-valued float tensors of the mask (see the module doc).
struct FloatReader<'a> {
    g: &'a OnnxGraph,
    ints: Reader<'a>,
    memo: HashMap<Id, Option<Sym>>,
}

impl FloatReader<'_> {
    /// `Sym { dims, value: Bool(atoms) }`: `±0` where the atoms hold, `−FLT_MAX` elsewhere.
    fn read(&mut self, id: Id, depth: usize) -> Option<Sym> {
        let id = self.g.find(id);
        if let Some(known) = self.memo.get(&id) {
            return known.clone();
        }
        if depth == 0 || self.g[id].data.tensor()?.dtype != Some(DType::F32) {
            return None;
        }
        self.memo.insert(id, None);
        let ops: Vec<OpNode> = self.g[id]
            .nodes
            .iter()
            .filter_map(|n| n.as_op().cloned())
            .collect();
        let got = ops.iter().find_map(|op| self.op(id, op, depth - 1));
        self.memo.insert(id, got.clone());
        got
    }

    /// The value of the op e-node `op` of class `id`.
    fn op(&mut self, id: Id, op: &OpNode, depth: usize) -> Option<Sym> {
        let ins = op.input_ids();
        match op.op.as_str() {
            "Identity" => self.read(ins[0], depth),
            "ConstantOfShape" => {
                let value = op.attr_id("value").and_then(|a| self.g[a].data.attr());
                let Some(AttrValue::Tensor(lit)) = value else {
                    return None;
                };
                let lowest = lit.dtype == DType::F32
                    && lit.bytes.len() == 4
                    && f32::from_le_bytes([lit.bytes[0], lit.bytes[1], lit.bytes[2], lit.bytes[3]])
                        == -f32::MAX;
                let dims = self.ints.shape_value(ins[0])?;
                lowest.then(|| Sym {
                    value: Value::Bool(vec![never(dims.len())]),
                    dims,
                })
            }
            "Trilu" => {
                let x = self.read(ins[0], depth)?;
                let rank = x.dims.len();
                if rank < 2 || !is_never(x.atoms()?) {
                    return None;
                }
                let k = match ins.get(1) {
                    Some(&k) => match const_ints(self.g, k)?[..] {
                        [k] => k,
                        _ => return None,
                    },
                    None => 0,
                };
                let upper = op
                    .attr_id("upper")
                    .map_or(Some(1), |a| int_attr(self.g, a))?;
                // Kept (−FLT_MAX): j − i ≥ k (upper) or j − i ≤ k (lower); ±0 elsewhere.
                let mut coef = vec![0; rank];
                let (row, col) = (rank - 2, rank - 1);
                let zero = if upper != 0 {
                    // j − i < k: j − i − k + 1 ≤ 0.
                    coef[row] = -1;
                    coef[col] = 1;
                    Affine {
                        coef,
                        offset: SymDim::Known(1 - k),
                    }
                } else {
                    // j − i > k: i − j + k + 1 ≤ 0.
                    coef[row] = 1;
                    coef[col] = -1;
                    Affine {
                        coef,
                        offset: SymDim::Known(k + 1),
                    }
                };
                Some(Sym {
                    value: Value::Bool(vec![Atom::NonPositive(zero.normalized(&x.dims))]),
                    dims: x.dims,
                })
            }
            "Mul" => {
                let [a, b] = ins else {
                    return None;
                };
                [(*a, *b), (*b, *a)]
                    .into_iter()
                    .find_map(|(x, c)| self.times_flag(x, c, depth))
            }
            "Where" => self.padding(op, depth),
            "ScatterND" => self.scatter(op, depth),
            "Unsqueeze" => {
                let x = self.read(ins[0], depth)?;
                let axes = const_ints(self.g, *ins.get(1)?)?;
                unsqueezed(&x, &axes)
            }
            "Expand" => {
                let x = self.read(ins[0], depth)?;
                let shape = self.ints.shape_value(ins[1])?;
                let dims = broadcast(&x.dims, &shape)?;
                Some(x.aligned(&dims))
            }
            "Reshape" => {
                let x = self.read(ins[0], depth)?;
                // To its own dims (the target, or the class's inferred dims): every element
                // stays where it was.
                let target = self
                    .ints
                    .shape_value(ins[1])
                    .or_else(|| self.g[id].data.tensor()?.shape.clone())?;
                (target == x.dims).then_some(x)
            }
            "Slice" => {
                let x = self.read(ins[0], depth)?;
                self.keeps_all(op, &x.dims).then_some(x)
            }
            _ => None,
        }
    }

    /// `x · Cast(c, float)`, `c` boolean.
    fn times_flag(&mut self, x: Id, c: Id, depth: usize) -> Option<Sym> {
        let cast = self.g[self.g.find(c)].nodes.iter().find_map(|n| {
            let o = n.as_op().filter(|o| o.op.as_str() == "Cast")?;
            let to = DType::from_onnx_code(int_attr(self.g, o.attr_id("to")?)? as i32)?;
            let from = self.g[o.input_ids()[0]].data.tensor()?.dtype?;
            (to == DType::F32 && from == DType::Bool).then(|| o.input_ids()[0])
        })?;
        let x = self.read(x, depth)?;
        let flag = self.ints.read(cast, depth)?;
        let dims = broadcast(&x.dims, &flag.dims)?;
        let (x, flag) = (x.aligned(&dims), flag.aligned(&dims));
        // ±0 where x is ±0 or the flag is false.
        let [Atom::NonPositive(f)] = flag.atoms()? else {
            return None;
        };
        let off = Atom::NonPositive(negated(f)?.normalized(&dims));
        let atoms = either(x.atoms()?, &[off])?;
        Some(Sym {
            value: Value::Bool(atoms),
            dims,
        })
    }

    /// `Where(Equal(x + Cast(m, float), 0), −FLT_MAX, x)`: `x` with the elements where `m = 0`
    /// masked (`m` `attention_mask` through `Unsqueeze`s and widening integer `Cast`s).
    fn padding(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let [cond, lowest, x] = op.input_ids() else {
            return None;
        };
        if scalar_float(self.g, *lowest) != Some(-(f32::MAX as f64)) {
            return None;
        }
        let x = self.read(*x, depth)?;
        let equal = self.g[self.g.find(*cond)]
            .nodes
            .iter()
            .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == "Equal").cloned())
            .collect::<Vec<_>>();
        equal.iter().find_map(|eq| {
            let [l, r] = eq.input_ids() else {
                return None;
            };
            let sum = [(*l, *r), (*r, *l)]
                .into_iter()
                .find(|(_, z)| scalar_float(self.g, *z) == Some(0.0))?
                .0;
            let adds: Vec<OpNode> = self.g[self.g.find(sum)]
                .nodes
                .iter()
                .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == "Add").cloned())
                .collect();
            adds.iter().find_map(|add| {
                let [a, b] = add.input_ids() else {
                    return None;
                };
                [(*a, *b), (*b, *a)].into_iter().find_map(|(y, m)| {
                    let y = self.read(y, depth)?;
                    let m = self.nonzero(m, true, depth)?;
                    let dims = broadcast(&y.dims, &m.dims)?;
                    let (y, m) = (y.aligned(&dims), m.aligned(&dims));
                    let xd = broadcast(&x.dims, &dims)?;
                    // The value written where the sum is not 0 is x itself: the same tensor.
                    if x.aligned(&xd) != y.aligned(&xd) || xd != dims {
                        return None;
                    }
                    let mut atoms = y.atoms()?.to_vec();
                    atoms.extend_from_slice(m.atoms()?);
                    Some(Sym {
                        value: Value::Bool(atoms),
                        dims,
                    })
                })
            })
        })
    }

    /// Class `id` as the boolean `id ≠ 0`: `Cast(to f32)` of an integer tensor (`float` on the
    /// outside only), widening integer `Cast`s, `Unsqueeze`s, of the 2-D integer graph input
    /// `attention_mask`.
    fn nonzero(&mut self, id: Id, float: bool, depth: usize) -> Option<Sym> {
        if depth == 0 {
            return None;
        }
        let ty = self.g[id].data.tensor()?.dtype?;
        let integral = |d: DType| matches!(d, DType::I64 | DType::I32);
        if !float && integral(ty) {
            if let Some(input) = graph_input(self.g, id) {
                return mask_sym(self.g, input);
            }
        }
        let ops: Vec<OpNode> = self.g[self.g.find(id)]
            .nodes
            .iter()
            .filter_map(|n| n.as_op().cloned())
            .collect();
        ops.iter().find_map(|op| {
            let ins = op.input_ids();
            match op.op.as_str() {
                "Cast" => {
                    let to = DType::from_onnx_code(int_attr(self.g, op.attr_id("to")?)? as i32)?;
                    let from = self.g[ins[0]].data.tensor()?.dtype?;
                    let ok = integral(from)
                        && ((float && to == DType::F32) || (!float && to == DType::I64));
                    ok.then(|| self.nonzero(ins[0], false, depth - 1)).flatten()
                }
                "Unsqueeze" if !float => {
                    let x = self.nonzero(ins[0], false, depth - 1)?;
                    let axes = const_ints(self.g, *ins.get(1)?)?;
                    unsqueezed(&x, &axes)
                }
                _ => None,
            }
        })
    }

    /// `ScatterND(data, grid, updates)` over the full index grid of `data`: `updates`.
    fn scatter(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        if op
            .attr_id("reduction")
            .and_then(|a| self.g[a].data.attr())
            .is_some_and(|r| {
                !matches!(r, AttrValue::Unset)
                    && !matches!(r, AttrValue::Str(s) if s.as_str() == "none")
            })
        {
            return None;
        }
        let [data, grid, updates] = op.input_ids() else {
            return None;
        };
        let dims = self.g[*data].data.tensor()?.shape.clone()?;
        if dims.contains(&SymDim::Unknown) || !self.full_grid(*grid, &dims, depth) {
            return None;
        }
        // ScatterND needs updates of dims `indices.shape[:-1] = data.shape`: a Reshape of a
        // tensor of those dims (whatever the target says) is that tensor, or the op fails.
        let reshaped: Vec<Id> = self.g[self.g.find(*updates)]
            .nodes
            .iter()
            .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == "Reshape"))
            .map(|o| o.input_ids()[0])
            .collect();
        std::iter::once(*updates)
            .chain(reshaped)
            .find_map(|u| self.read(u, depth).filter(|u| u.dims == dims))
    }

    /// Whether class `grid` is `Concat([Unsqueeze(p_0, −1), …], −1)` with `p_k` the position
    /// along axis `k` of a tensor of dims `dims` (one part per axis).
    fn full_grid(&mut self, grid: Id, dims: &[SymDim], depth: usize) -> bool {
        let rank = dims.len();
        let concats: Vec<OpNode> = self.g[self.g.find(grid)]
            .nodes
            .iter()
            .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == "Concat").cloned())
            .collect();
        concats.iter().any(|concat| {
            let axis = concat.attr_id("axis").and_then(|a| int_attr(self.g, a));
            if !(axis == Some(-1) || axis == Some(rank as i64)) || concat.input_ids().len() != rank
            {
                return false;
            }
            concat.input_ids().iter().enumerate().all(|(k, &part)| {
                let Some(p) = self.ints.read(part, depth) else {
                    return false;
                };
                let mut want = dims.to_vec();
                want.push(SymDim::Known(1));
                p.dims == want && p.int().is_some_and(|a| a.is_position(k, &want))
            })
        })
    }

    /// Whether `Slice` e-node `op` keeps every element of a tensor of dims `dims`.
    fn keeps_all(&self, op: &OpNode, dims: &[SymDim]) -> bool {
        let ins = op.input_ids();
        let rank = dims.len() as i64;
        let (Some(starts), Some(ends)) = (
            ins.get(1).and_then(|&s| const_ints(self.g, s)),
            ins.get(2).and_then(|&e| self.ints.shape_value(e)),
        ) else {
            return false;
        };
        let axes = match ins.get(3) {
            Some(&a) => const_ints(self.g, a),
            None => Some((0..starts.len() as i64).collect()),
        };
        let steps = match ins.get(4) {
            Some(&s) => const_ints(self.g, s),
            None => Some(vec![1; starts.len()]),
        };
        let (Some(axes), Some(steps)) = (axes, steps) else {
            return false;
        };
        if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
            return false;
        }
        starts
            .iter()
            .zip(&ends)
            .zip(&axes)
            .zip(&steps)
            .all(|(((&start, end), &axis), &step)| {
                let axis = if axis < 0 { axis + rank } else { axis };
                let Some(extent) = usize::try_from(axis).ok().and_then(|a| dims.get(a)) else {
                    return false;
                };
                start == 0 && step == 1 && (end == extent || end.known() == Some(i64::MAX))
            })
    }
}

/// Reads the float attention bias `mask` as [`super::export_mask`] does (same `q`, `past_key`,
/// same predicate over `[B, 1, S, T]`), for masks built as transformers' float 4-D causal mask
/// (see the module doc): `±0` exactly where `j ≤ P + i ∧ attention_mask[b, j] ≠ 0`, `−FLT_MAX`
/// elsewhere.
pub fn float_export_mask(g: &OnnxGraph, mask: Id, q: Id, past_key: Id) -> Option<ExportMask> {
    let q_dims = g[q].data.tensor()?.shape.clone()?;
    let [b, s, _] = q_dims.as_slice() else {
        return None;
    };
    let p = g[past_key].data.tensor()?.shape.as_ref()?.get(2)?.clone();
    let t = p.add(s);
    if [b, s, &p, &t].contains(&&SymDim::Unknown) {
        return None;
    }
    let mut reader = FloatReader {
        g,
        ints: Reader {
            g,
            memo: HashMap::new(),
        },
        memo: HashMap::new(),
    };
    let bias = reader.read(mask, MAX_DEPTH)?;
    if bias.dims.len() > 4 {
        return None;
    }
    let want = [b.clone(), SymDim::Known(1), s.clone(), t.clone()];
    let bias = bias.aligned(&broadcast(&bias.dims, &want)?);
    if bias.dims != want {
        return None;
    }
    predicate(g, bias.atoms()?, &p, &want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::slice::from_ref;

    fn atom(coef: &[i64], offset: SymDim) -> Atom {
        Atom::NonPositive(Affine {
            coef: coef.to_vec(),
            offset,
        })
    }

    #[test]
    fn either_keeps_the_implied_atom_only() {
        let p = SymDim::expr("past");
        // j − i ≤ 0 (Trilu's zeros) or j − i − past ≤ 0 (not after the cache position): the
        // second, as past ≥ 0.
        let below = atom(&[-1, 1], SymDim::Known(0));
        let cached = atom(&[-1, 1], SymDim::Known(0).sub(&p));
        assert_eq!(
            either(from_ref(&below), from_ref(&cached)),
            Some(vec![cached.clone()])
        );
        assert_eq!(
            either(from_ref(&cached), from_ref(&below)),
            Some(vec![cached.clone()])
        );
        // `false` yields, `true` absorbs; other coefficients or unordered offsets are not read.
        assert_eq!(
            either(&[never(2)], from_ref(&below)),
            Some(vec![below.clone()])
        );
        assert_eq!(either(&[], from_ref(&below)), Some(Vec::new()));
        let other = atom(&[1, -1], SymDim::Known(0));
        assert_eq!(either(from_ref(&below), &[other]), None);
        let unordered = atom(&[-1, 1], SymDim::expr("seq").sub(&p));
        assert_eq!(either(from_ref(&below), &[unordered]), None);
    }

    #[test]
    fn negation_is_over_integers() {
        // ¬(x − 3 ≤ 0) is 3 − x + 1 ≤ 0 (x ≥ 4).
        let a = Affine {
            coef: vec![1],
            offset: SymDim::Known(-3),
        };
        assert_eq!(
            negated(&a),
            Some(Affine {
                coef: vec![-1],
                offset: SymDim::Known(4),
            })
        );
    }
}
