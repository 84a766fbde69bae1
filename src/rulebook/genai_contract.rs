//! What the GroupQueryAttention rules for exports (`rewrites/fusion/gqa_genai.rules`, enabled by
//! `--kv-cache genai`) read of an exported graph: the attention mask an exporter builds from
//! `attention_mask` as a predicate over (batch, query, key) positions, and RoPE angles computed
//! from `position_ids` as a table over positions.
//!
//! **The mask.** torch.onnx exports build it from index tensors: `Range`s over the batch, the
//! query rows (`Range(0, S) + past`, the cache positions) and the keys (`Range(0, past + S)`),
//! unsqueezed, expanded, compared (`LessOrEqual` for causality, `Greater` with a shifted query
//! index for a sliding window), joined by `And` with `attention_mask[b, j]` (a `GatherND` of the
//! boolean mask by broadcast (batch, key) index pairs), expanded to `[B, 1, S, T]` and turned
//! into an additive bias by `Where(m, 0, −FLT_MAX)`. [`export_mask`] evaluates that subgraph
//! symbolically: every integer tensor is an affine function of the positions along its axes
//! (`Σ c_a · pos_a + offset`, the offset a symbolic dim), every boolean tensor a conjunction of
//! atoms (`affine ≤ 0`, or `attention_mask[row, col]` with affine row and column), each axis
//! with its extent. The reading is exact: a subgraph it cannot evaluate (another op, an
//! unknown extent, a broadcast of two different extents) is not read, and the rule declines.
//!
//! **The angles.** transformers' rotary tables are `Cos(Cast(Unsqueeze(position_ids, [2])) ·
//! inv_freq)` (and `Sin`), `[B, S, D/2]`; [`position_table`] reads that chain, so the rule can
//! rebuild the same ops over `Range(0, T)` instead of `position_ids`: a `[T, D/2]` table whose
//! row `p` is computed exactly as the export computes the angles of a token at position `p`.

use std::collections::HashMap;

use egg::Id;

use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::{Onnx, OpNode};
use crate::opt::query::{const_ints, find_op, int_attr, is_input, ops_named, scalar_float};

mod alibi;
mod buffer_mask;
mod float_mask;
mod scaled_mask;
mod table_alibi;
pub use alibi::{alibi_export_bias, AlibiExportBias};
pub use buffer_mask::summed_export_mask;
pub use float_mask::float_export_mask;
pub use scaled_mask::scaled_float_export_mask;
pub use table_alibi::table_export_bias;

/// Deepest chain of ops [`export_mask`] follows from the mask to its leaves.
const MAX_DEPTH: usize = 48;

/// An integer expression over the positions along a tensor's axes:
/// `Σ coef[a] · pos[a] + offset` (one coefficient per axis, zero along axes of extent 1).
#[derive(Debug, Clone, PartialEq)]
struct Affine {
    coef: Vec<i64>,
    offset: SymDim,
}

impl Affine {
    /// The constant `offset` over `rank` axes.
    fn constant(rank: usize, offset: SymDim) -> Affine {
        Affine {
            coef: vec![0; rank],
            offset,
        }
    }

    /// The same expression over `rank ≥ self.rank` axes (numpy alignment: new axes in front).
    fn aligned(&self, rank: usize) -> Affine {
        let mut coef = vec![0; rank - self.coef.len()];
        coef.extend(&self.coef);
        Affine {
            coef,
            offset: self.offset.clone(),
        }
    }

    /// `self + sign · other` over the same axes; `None` when the offset is not known.
    fn plus(&self, other: &Affine, sign: i64) -> Option<Affine> {
        let coef = self
            .coef
            .iter()
            .zip(&other.coef)
            .map(|(a, b)| a.checked_add(b.checked_mul(sign)?))
            .collect::<Option<Vec<i64>>>()?;
        let offset = if sign == 1 {
            self.offset.add(&other.offset)
        } else {
            self.offset.sub(&other.offset)
        };
        (offset != SymDim::Unknown).then_some(Affine { coef, offset })
    }

    /// `self + k`.
    fn shifted(&self, k: i64) -> Option<Affine> {
        let offset = self.offset.add(&SymDim::Known(k));
        (offset != SymDim::Unknown).then(|| Affine {
            coef: self.coef.clone(),
            offset,
        })
    }

    /// The expression with the coefficients of extent-1 axes zeroed (their position is 0).
    fn normalized(mut self, dims: &[SymDim]) -> Affine {
        for (c, d) in self.coef.iter_mut().zip(dims) {
            if *d == SymDim::Known(1) {
                *c = 0;
            }
        }
        self
    }

    /// Whether this is exactly the position along axis `axis` of a tensor of extents `dims`
    /// (always 0 along an axis of extent 1).
    fn is_position(&self, axis: usize, dims: &[SymDim]) -> bool {
        let position = Affine {
            coef: (0..dims.len()).map(|a| i64::from(a == axis)).collect(),
            offset: SymDim::Known(0),
        };
        *self == position.normalized(dims)
    }
}

/// One conjunct of a boolean tensor.
#[derive(Debug, Clone, PartialEq)]
enum Atom {
    /// `affine ≤ 0`.
    NonPositive(Affine),
    /// `attention_mask[row, col] ≠ 0`, for the graph input `mask` (2-D).
    Mask { mask: Id, row: Affine, col: Affine },
}

impl Atom {
    fn aligned(&self, rank: usize) -> Atom {
        match self {
            Atom::NonPositive(a) => Atom::NonPositive(a.aligned(rank)),
            Atom::Mask { mask, row, col } => Atom::Mask {
                mask: *mask,
                row: row.aligned(rank),
                col: col.aligned(rank),
            },
        }
    }
}

/// What a tensor of the mask subgraph holds, element by element.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// An integer tensor.
    Int(Affine),
    /// A boolean tensor: the conjunction of the atoms (true when there are none).
    Bool(Vec<Atom>),
}

/// A symbolically evaluated tensor: its extents and its elements.
#[derive(Debug, Clone, PartialEq)]
struct Sym {
    dims: Vec<SymDim>,
    value: Value,
}

impl Sym {
    /// The tensor with its axes broadcast to `dims` (numpy rules; `self` must broadcast).
    fn aligned(&self, dims: &[SymDim]) -> Sym {
        let rank = dims.len();
        let value = match &self.value {
            Value::Int(a) => Value::Int(a.aligned(rank)),
            Value::Bool(atoms) => Value::Bool(atoms.iter().map(|a| a.aligned(rank)).collect()),
        };
        Sym {
            dims: dims.to_vec(),
            value,
        }
    }

    fn int(&self) -> Option<&Affine> {
        match &self.value {
            Value::Int(a) => Some(a),
            Value::Bool(_) => None,
        }
    }

    fn atoms(&self) -> Option<&[Atom]> {
        match &self.value {
            Value::Bool(atoms) => Some(atoms),
            Value::Int(_) => None,
        }
    }
}

/// The numpy broadcast of two shapes: equal extents, or 1 against anything; `None` for two
/// different extents (even symbolic ones that might be 1 at run time) or an unknown one.
fn broadcast(a: &[SymDim], b: &[SymDim]) -> Option<Vec<SymDim>> {
    let rank = a.len().max(b.len());
    let at = |d: &[SymDim], i: usize| {
        let pad = rank - d.len();
        if i < pad {
            SymDim::Known(1)
        } else {
            d[i - pad].clone()
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (SymDim::Unknown, _) | (_, SymDim::Unknown) => None,
            (x, y) if x == y => Some(x),
            (SymDim::Known(1), y) => Some(y),
            (x, SymDim::Known(1)) => Some(x),
            _ => None,
        })
        .collect()
}

/// Evaluates classes of the mask subgraph, each once.
struct Reader<'a> {
    g: &'a OnnxGraph,
    memo: HashMap<Id, Option<Sym>>,
}

impl Reader<'_> {
    fn read(&mut self, id: Id, depth: usize) -> Option<Sym> {
        let id = self.g.find(id);
        if let Some(known) = self.memo.get(&id) {
            return known.clone();
        }
        if depth == 0 {
            return None;
        }
        // A cycle through this class reads as unknown.
        self.memo.insert(id, None);
        let got = self.leaf(id).or_else(|| {
            let ops: Vec<OpNode> = self.g[id]
                .nodes
                .iter()
                .filter_map(|n| n.as_op().cloned())
                .collect();
            ops.iter().find_map(|op| self.op(op, depth - 1))
        });
        self.memo.insert(id, got.clone());
        got
    }

    /// A constant or a symbolic shape value with one element (any rank of extent-1 axes),
    /// or a boolean constant that is all true.
    fn leaf(&self, id: Id) -> Option<Sym> {
        let data = &self.g[id].data;
        let ty = data.tensor()?;
        let dims = ty.shape.clone()?;
        if !dims.iter().all(|d| *d == SymDim::Known(1)) {
            return None;
        }
        let rank = dims.len();
        if let Some(lit) = &data.konst {
            if lit.dtype == DType::Bool {
                return (lit.bytes.iter().all(|&b| b != 0)).then(|| Sym {
                    dims,
                    value: Value::Bool(Vec::new()),
                });
            }
            let [v] = const_ints(self.g, id)?[..] else {
                return None;
            };
            return Some(Sym {
                dims,
                value: Value::Int(Affine::constant(rank, SymDim::Known(v))),
            });
        }
        match data.value.as_deref()? {
            [d] if *d != SymDim::Unknown && ty.dtype == Some(DType::I64) => Some(Sym {
                dims,
                value: Value::Int(Affine::constant(rank, d.clone())),
            }),
            _ => None,
        }
    }

    /// The value of the op e-node `op`.
    fn op(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let ins = op.input_ids();
        match op.op.as_str() {
            "Identity" => self.read(ins[0], depth),
            "Range" => {
                let [start, limit, delta] = ins else {
                    return None;
                };
                let (start, limit) = (self.scalar(*start, depth)?, self.scalar(*limit, depth)?);
                if const_ints(self.g, *delta)? != [1] {
                    return None;
                }
                let extent = limit.sub(&start);
                // A Range of a negative extent is empty; a known one must be a size.
                if extent == SymDim::Unknown || extent.known().is_some_and(|e| e < 0) {
                    return None;
                }
                let extent = match extent {
                    SymDim::Known(_) => extent,
                    _ if extent.is_nonnegative() => extent,
                    _ => return None,
                };
                Some(Sym {
                    value: Value::Int(Affine {
                        coef: vec![i64::from(extent != SymDim::Known(1))],
                        offset: start,
                    }),
                    dims: vec![extent],
                })
            }
            "Add" | "Sub" => {
                let (a, b) = (self.read(ins[0], depth)?, self.read(ins[1], depth)?);
                let dims = broadcast(&a.dims, &b.dims)?;
                let (a, b) = (a.aligned(&dims), b.aligned(&dims));
                let sign = if op.op.as_str() == "Add" { 1 } else { -1 };
                let sum = a.int()?.plus(b.int()?, sign)?;
                Some(Sym {
                    value: Value::Int(sum.normalized(&dims)),
                    dims,
                })
            }
            "LessOrEqual" | "Less" | "GreaterOrEqual" | "Greater" => {
                let (a, b) = (self.read(ins[0], depth)?, self.read(ins[1], depth)?);
                let dims = broadcast(&a.dims, &b.dims)?;
                let (a, b) = (a.aligned(&dims), b.aligned(&dims));
                let (a, b) = (a.int()?, b.int()?);
                // Integers: a < b is a − b + 1 ≤ 0.
                let atom = match op.op.as_str() {
                    "LessOrEqual" => a.plus(b, -1)?,
                    "Less" => a.plus(b, -1)?.shifted(1)?,
                    "GreaterOrEqual" => b.plus(a, -1)?,
                    _ => b.plus(a, -1)?.shifted(1)?,
                };
                Some(Sym {
                    value: Value::Bool(vec![Atom::NonPositive(atom.normalized(&dims))]),
                    dims,
                })
            }
            "And" => {
                let (a, b) = (self.read(ins[0], depth)?, self.read(ins[1], depth)?);
                let dims = broadcast(&a.dims, &b.dims)?;
                let (a, b) = (a.aligned(&dims), b.aligned(&dims));
                let mut atoms = a.atoms()?.to_vec();
                atoms.extend_from_slice(b.atoms()?);
                Some(Sym {
                    value: Value::Bool(atoms),
                    dims,
                })
            }
            "Unsqueeze" => {
                let x = self.read(ins[0], depth)?;
                let axes = const_ints(self.g, *ins.get(1)?)?;
                unsqueezed(&x, &axes)
            }
            "Squeeze" => {
                let x = self.read(ins[0], depth)?;
                let rank = x.dims.len();
                let axes = const_ints(self.g, *ins.get(1)?)?;
                let removed: Vec<usize> = axes
                    .iter()
                    .map(|&a| usize::try_from(if a < 0 { a + rank as i64 } else { a }).ok())
                    .collect::<Option<_>>()?;
                if removed
                    .iter()
                    .any(|&a| a >= rank || x.dims[a] != SymDim::Known(1))
                {
                    return None;
                }
                let keep: Vec<usize> = (0..rank).filter(|a| !removed.contains(a)).collect();
                Some(squeezed(&x, &keep))
            }
            "Expand" => {
                let x = self.read(ins[0], depth)?;
                let shape = self.shape_value(ins[1])?;
                let dims = broadcast(&x.dims, &shape)?;
                Some(x.aligned(&dims))
            }
            "Cast" => {
                let to = DType::from_onnx_code(int_attr(self.g, op.attr_id("to")?)? as i32)?;
                let from = self.g[ins[0]].data.tensor()?.dtype?;
                let integral = |d: DType| matches!(d, DType::I64 | DType::I32);
                if let Some(input) = (to == DType::Bool)
                    .then(|| graph_input(self.g, ins[0]))
                    .flatten()
                {
                    // attention_mask ≠ 0, a 2-D graph input.
                    return integral(from).then(|| mask_sym(self.g, input)).flatten();
                }
                let x = self.read(ins[0], depth)?;
                let same_kind = match x.value {
                    Value::Int(_) => integral(from) && to == DType::I64,
                    Value::Bool(_) => from == DType::Bool && to == DType::Bool,
                };
                same_kind.then_some(x)
            }
            "GatherND" => self.gather_nd(op, depth),
            "Gather" => self.flat_gather(op, depth),
            "Reshape" => self.reshape(op, depth),
            "Slice" => self.full_slice(op, depth),
            _ => None,
        }
    }

    /// `Gather(Flatten(attention_mask ≠ 0, axis 2), row · T + col)` (axis 0; the TorchScript
    /// exporter's spelling, `T` the mask's width read from its shape): `attention_mask[row,
    /// col]` over the index's axes and a last axis of extent 1, where `col` is the position
    /// along an index axis of extent `T` (so `row · T + col` is the element at row `row`,
    /// column `col`, and a `row` beyond the mask's makes the export fail, not read another).
    fn flat_gather(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        if op
            .attr_id("axis")
            .is_some_and(|a| int_attr(self.g, a) != Some(0))
        {
            return None;
        }
        let [data, indices] = op.input_ids() else {
            return None;
        };
        let flatten = ops_named(self.g, *data, "Flatten").into_iter().find(|f| {
            f.attr_id("axis")
                .is_some_and(|a| int_attr(self.g, a) == Some(2))
        })?;
        let m = self.read(flatten.input_ids()[0], depth)?;
        let [Atom::Mask { mask, row, col }] = m.atoms()? else {
            return None;
        };
        if m.dims.len() != 2 || !row.is_position(0, &m.dims) || !col.is_position(1, &m.dims) {
            return None;
        }
        let (mask, width) = (*mask, m.dims[1].clone());
        for add in ops_named(self.g, *indices, "Add") {
            let [a, b] = add.input_ids() else {
                continue;
            };
            for (scaled, col) in [(*a, *b), (*b, *a)] {
                for mul in ops_named(self.g, scaled, "Mul") {
                    let [x, y] = mul.input_ids() else {
                        continue;
                    };
                    for (row, t) in [(*x, *y), (*y, *x)] {
                        if self.scalar(t, depth).as_ref() != Some(&width) {
                            continue;
                        }
                        let (Some(r), Some(c)) = (self.read(row, depth), self.read(col, depth))
                        else {
                            continue;
                        };
                        let Some(dims) = broadcast(&r.dims, &c.dims) else {
                            continue;
                        };
                        let (r, c) = (r.aligned(&dims), c.aligned(&dims));
                        let (Some(ra), Some(ca)) = (r.int(), c.int()) else {
                            continue;
                        };
                        let on_width =
                            (0..dims.len()).any(|k| dims[k] == width && ca.is_position(k, &dims));
                        if !on_width {
                            continue;
                        }
                        let rank = dims.len();
                        let keep: Vec<usize> = (0..rank).collect();
                        let atom = Sym {
                            dims: dims.clone(),
                            value: Value::Bool(vec![Atom::Mask {
                                mask,
                                row: ra.clone(),
                                col: ca.clone(),
                            }]),
                        };
                        return Some(reaxed(&atom, rank + 1, &keep));
                    }
                }
            }
        }
        None
    }

    /// `Reshape(x, shape)` that only adds or drops axes of extent 1 (elements stay in order),
    /// read through the `Reshape`s `x` comes out of (a reshape of a reshape is the outer one
    /// alone: TorchScript's `Reshape(Reshape(g, [−1]), Shape(index))`).
    fn reshape(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let target = self.shape_value(*op.input_ids().get(1)?)?;
        let target = self.inferred_reshape(op, target)?;
        // At most `depth` reshapes deep: an e-class may hold a Reshape of itself.
        let mut src = op.input_ids()[0];
        let mut x = self.read(src, depth);
        for _ in 0..depth {
            if x.is_some() {
                break;
            }
            src = find_op(self.g, src, "Reshape")?.input_ids()[0];
            x = self.read(src, depth);
        }
        let x = x?;
        let wide = |dims: &[SymDim]| -> Vec<usize> {
            (0..dims.len())
                .filter(|&a| dims[a] != SymDim::Known(1))
                .collect()
        };
        let (from, to) = (wide(&x.dims), wide(&target));
        let same =
            from.len() == to.len() && from.iter().zip(&to).all(|(&a, &b)| x.dims[a] == target[b]);
        same.then(|| reaxed(&squeezed(&x, &from), target.len(), &to))
    }

    /// The `Reshape` target `target` with its sizes all positive: a single `−1` read as the
    /// extent of the one input axis not of extent 1 (the others of the target all 1, so it is
    /// every element: `Reshape(Range(P, P + S), [−1, 1])`); else `None` for any size ≤ 0.
    fn inferred_reshape(&self, op: &OpNode, mut target: Vec<SymDim>) -> Option<Vec<SymDim>> {
        let inferred: Vec<usize> = (0..target.len())
            .filter(|&a| target[a] == SymDim::Known(-1))
            .collect();
        if let [a] = inferred[..] {
            let others_one = (0..target.len()).all(|k| k == a || target[k] == SymDim::Known(1));
            let x = self.g[op.input_ids()[0]].data.tensor()?.shape.clone()?;
            let wide: Vec<&SymDim> = x.iter().filter(|d| **d != SymDim::Known(1)).collect();
            if !others_one || x.contains(&SymDim::Unknown) {
                return None;
            }
            target[a] = match wide[..] {
                [] => SymDim::Known(1),
                [d] => d.clone(),
                _ => return None,
            };
        }
        (!target.iter().any(|d| d.known().is_some_and(|v| v <= 0))).then_some(target)
    }

    /// `Slice(x, starts, ends, axes[, steps])` that keeps every element: starts 0, steps 1,
    /// each end the axis's extent (or beyond it: `i64::MAX`).
    fn full_slice(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let ins = op.input_ids();
        let x = self.read(*ins.first()?, depth)?;
        let rank = x.dims.len() as i64;
        let starts = const_ints(self.g, *ins.get(1)?)?;
        let axes = match ins.get(3) {
            Some(&a) => const_ints(self.g, a)?,
            None => (0..starts.len() as i64).collect(),
        };
        let steps = match ins.get(4) {
            Some(&s) => const_ints(self.g, s)?,
            None => vec![1; starts.len()],
        };
        let ends = self.shape_value(*ins.get(2)?)?;
        if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
            return None;
        }
        for (((&start, end), &axis), &step) in starts.iter().zip(&ends).zip(&axes).zip(&steps) {
            let axis = if axis < 0 { axis + rank } else { axis };
            let extent = x.dims.get(usize::try_from(axis).ok()?)?;
            let to_end = end == extent || end.known() == Some(i64::MAX);
            if start != 0 || step != 1 || !to_end {
                return None;
            }
        }
        Some(x)
    }

    /// `GatherND(attention_mask ≠ 0, Concat(Unsqueeze(row, −1), Unsqueeze(col, −1)))`
    /// (batch_dims 0): `attention_mask[row, col]` over the index tensors' axes.
    fn gather_nd(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let batch_dims = op.attr_id("batch_dims").and_then(|a| self.g[a].data.attr());
        if !matches!(
            batch_dims,
            None | Some(AttrValue::Unset | AttrValue::Int(0))
        ) {
            return None;
        }
        let [data, indices] = op.input_ids() else {
            return None;
        };
        let data = self.read(*data, depth)?;
        let [Atom::Mask { mask, row, col }] = data.atoms()? else {
            return None;
        };
        if data.dims.len() != 2
            || !row.is_position(0, &data.dims)
            || !col.is_position(1, &data.dims)
        {
            return None;
        }
        let mask = *mask;
        let concat_ops: Vec<OpNode> = self.g[self.g.find(*indices)]
            .nodes
            .iter()
            .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == "Concat").cloned())
            .collect();
        concat_ops.iter().find_map(|concat| {
            let [r, c] = concat.input_ids() else {
                return None;
            };
            let (r, c) = (self.read(*r, depth)?, self.read(*c, depth)?);
            let rank = r.dims.len();
            let axis = int_attr(self.g, concat.attr_id("axis")?)?;
            let last = axis == -1 || axis == rank as i64 - 1;
            // Both index parts [.., 1] over the same leading axes (Concat does not broadcast).
            if !last || rank == 0 || r.dims != c.dims || r.dims[rank - 1] != SymDim::Known(1) {
                return None;
            }
            let lead = &r.dims[..rank - 1];
            let drop_last = |a: &Affine| Affine {
                coef: a.coef[..rank - 1].to_vec(),
                offset: a.offset.clone(),
            };
            Some(Sym {
                value: Value::Bool(vec![Atom::Mask {
                    mask,
                    row: drop_last(r.int()?),
                    col: drop_last(c.int()?),
                }]),
                dims: lead.to_vec(),
            })
        })
    }

    /// An integer scalar (rank 0, or one element) that does not vary: its value.
    fn scalar(&mut self, id: Id, depth: usize) -> Option<SymDim> {
        let x = self.read(id, depth)?;
        let a = x.int()?;
        (x.dims.iter().all(|d| *d == SymDim::Known(1)) && a.coef.iter().all(|&c| c == 0))
            .then(|| a.offset.clone())
    }

    /// The elements of a 1-D shape tensor (constant or symbolic), none unknown.
    fn shape_value(&self, id: Id) -> Option<Vec<SymDim>> {
        let data = &self.g[id].data;
        let values = match (&data.konst, &data.value) {
            (Some(_), _) => const_ints(self.g, id)?
                .into_iter()
                .map(SymDim::Known)
                .collect(),
            (None, Some(v)) => v.clone(),
            _ => return None,
        };
        (!values.contains(&SymDim::Unknown)).then_some(values)
    }
}

/// A graph input whose dims read as `rows` (`[B, S]`, every dim known or named, never unknown):
/// its `Shape` is the same value for every layer (one computation, as the build's), where a
/// shape read from a layer's own tensor would be one per layer. The first by name when several
/// are (a decoder's `input_ids` and `position_ids`: either is `[B, S]`).
pub fn rows_input(g: &OnnxGraph, rows: &[SymDim]) -> Option<Id> {
    if rows.len() != 2 || rows.contains(&SymDim::Unknown) {
        return None;
    }
    g.classes()
        .filter(|c| c.data.tensor().and_then(|t| t.shape.as_deref()) == Some(rows))
        .flat_map(|c| {
            c.nodes.iter().filter_map(move |n| match n {
                Onnx::Input(s) => Some((s.as_str(), c.id)),
                _ => None,
            })
        })
        .min()
        .map(|(_, id)| id)
}

/// The graph input class `id` holds: the input itself, or a `Reshape` of it to its own dims
/// (GPT-2's `attention_mask.view(batch, −1)`), which leaves every element where it was.
fn graph_input(g: &OnnxGraph, id: Id) -> Option<Id> {
    if is_input(g, id, None) {
        return Some(g.find(id));
    }
    let dims = g[id].data.tensor()?.shape.clone()?;
    if dims.contains(&SymDim::Unknown) {
        return None;
    }
    g[id].nodes.iter().find_map(|n| {
        let reshape = n.as_op().filter(|o| o.op.as_str() == "Reshape")?;
        let x = *reshape.input_ids().first()?;
        let same = g[x].data.tensor()?.shape.as_ref() == Some(&dims);
        (same && is_input(g, x, None)).then(|| g.find(x))
    })
}

/// `Unsqueeze(x, axes)`: `x` with new axes of extent 1 at `axes` (normalized against the
/// output rank); `None` when an axis is out of range or repeated.
fn unsqueezed(x: &Sym, axes: &[i64]) -> Option<Sym> {
    let rank = x.dims.len() + axes.len();
    let mut inserted: Vec<usize> = axes
        .iter()
        .map(|&a| usize::try_from(if a < 0 { a + rank as i64 } else { a }).ok())
        .collect::<Option<_>>()?;
    inserted.sort_unstable();
    inserted.dedup();
    if inserted.len() != axes.len() || inserted.last().is_some_and(|&a| a >= rank) {
        return None;
    }
    let keep: Vec<usize> = (0..rank).filter(|a| !inserted.contains(a)).collect();
    Some(reaxed(x, rank, &keep))
}

/// `x` over `rank` axes, its own axes at positions `keep` (new axes of extent 1).
fn reaxed(x: &Sym, rank: usize, keep: &[usize]) -> Sym {
    let dims_at = |old: &[SymDim]| {
        let mut dims = vec![SymDim::Known(1); rank];
        for (&k, d) in keep.iter().zip(old) {
            dims[k] = d.clone();
        }
        dims
    };
    let move_affine = |a: &Affine| {
        let mut coef = vec![0; rank];
        for (&k, &c) in keep.iter().zip(&a.coef) {
            coef[k] = c;
        }
        Affine {
            coef,
            offset: a.offset.clone(),
        }
    };
    Sym {
        dims: dims_at(&x.dims),
        value: map_affines(&x.value, move_affine),
    }
}

/// `x` with only its axes `keep` (the others of extent 1).
fn squeezed(x: &Sym, keep: &[usize]) -> Sym {
    let pick = |a: &Affine| Affine {
        coef: keep.iter().map(|&k| a.coef[k]).collect(),
        offset: a.offset.clone(),
    };
    Sym {
        dims: keep.iter().map(|&k| x.dims[k].clone()).collect(),
        value: map_affines(&x.value, pick),
    }
}

/// `value` with `f` applied to every affine expression in it.
fn map_affines(value: &Value, f: impl Fn(&Affine) -> Affine) -> Value {
    match value {
        Value::Int(a) => Value::Int(f(a)),
        Value::Bool(atoms) => Value::Bool(
            atoms
                .iter()
                .map(|atom| match atom {
                    Atom::NonPositive(a) => Atom::NonPositive(f(a)),
                    Atom::Mask { mask, row, col } => Atom::Mask {
                        mask: *mask,
                        row: f(row),
                        col: f(col),
                    },
                })
                .collect(),
        ),
    }
}

/// The causal padding mask an export builds, read by [`export_mask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportMask {
    /// The `attention_mask` graph input the mask reads.
    pub attention_mask: Id,
    /// The sliding window: keys a query sees, counting itself (`None` = all).
    pub window: Option<i64>,
}

/// `attention_mask[row, col] ≠ 0` over the mask's own dims (row and column the positions along
/// its two axes): the boolean reading of the 2-D graph input `input` (integer, every dim known),
/// shared by the boolean and the float mask readers.
fn mask_sym(g: &OnnxGraph, input: Id) -> Option<Sym> {
    let dims = g[input].data.tensor()?.shape.clone()?;
    if dims.len() != 2 || dims.contains(&SymDim::Unknown) {
        return None;
    }
    let pos = |axis: usize| {
        Affine {
            coef: (0..2).map(|a| i64::from(a == axis)).collect(),
            offset: SymDim::Known(0),
        }
        .normalized(&dims)
    };
    Some(Sym {
        value: Value::Bool(vec![Atom::Mask {
            mask: g.find(input),
            row: pos(0),
            col: pos(1),
        }]),
        dims,
    })
}

/// Reads the float attention bias `mask` of an Attention over 3-D queries `q` `[B, S, ·]` and
/// the cache `past_key` `[B, ·, P, ·]` (`T = P + S` keys): `Some` when it is exactly
/// `Where(m, 0, v)` with `v ≤ −FLT_MAX` and `m[b, 0, i, j]` (`[B, 1, S, T]`, or fewer leading
/// axes) equal to `j ≤ P + i ∧ attention_mask[b, j] ≠ 0`, optionally `∧ P + i − j < W`
/// (`W > 0`, the window), `attention_mask` a graph input of dims `[B, T]`.
pub fn export_mask(g: &OnnxGraph, mask: Id, q: Id, past_key: Id) -> Option<ExportMask> {
    let q_dims = g[q].data.tensor()?.shape.clone()?;
    let [b, s, _] = q_dims.as_slice() else {
        return None;
    };
    let p = g[past_key].data.tensor()?.shape.as_ref()?.get(2)?.clone();
    let t = p.add(s);
    if [b, s, &p, &t].contains(&&SymDim::Unknown) {
        return None;
    }
    let mut reader = Reader {
        g,
        memo: HashMap::new(),
    };
    let wheres: Vec<OpNode> = g[g.find(mask)]
        .nodes
        .iter()
        .filter_map(|n| n.as_op().filter(|o| o.op.as_str() == "Where").cloned())
        .collect();
    wheres.iter().find_map(|w| {
        let [cond, zero, masked] = w.input_ids() else {
            return None;
        };
        let zero_ok = scalar_float(g, *zero) == Some(0.0);
        let masked_ok = scalar_float(g, *masked).is_some_and(|v| v <= -(f32::MAX as f64));
        if !zero_ok || !masked_ok {
            return None;
        }
        let cond = reader.read(*cond, MAX_DEPTH)?;
        if cond.dims.len() > 4 {
            return None;
        }
        let want = [b.clone(), SymDim::Known(1), s.clone(), t.clone()];
        let cond = cond.aligned(&broadcast(&cond.dims, &want)?);
        if cond.dims != want {
            return None;
        }
        predicate(g, cond.atoms()?, &p, &want)
    })
}

/// The mask the conjunction `atoms` over `[B, 1, S, T]` encodes (see [`export_mask`]).
fn predicate(g: &OnnxGraph, atoms: &[Atom], p: &SymDim, dims: &[SymDim]) -> Option<ExportMask> {
    let (mut causal, mut attention_mask, mut window) = (false, None, None);
    let coef = |c: [i64; 4]| {
        Affine {
            coef: c.to_vec(),
            offset: SymDim::Known(0),
        }
        .normalized(dims)
        .coef
    };
    let (causal_coef, window_coef) = (coef([0, 0, -1, 1]), coef([0, 0, 1, -1]));
    for atom in atoms {
        match atom {
            Atom::Mask { mask, row, col } => {
                if !row.is_position(0, dims) || !col.is_position(3, dims) {
                    return None;
                }
                let mask_dims = g[*mask].data.tensor()?.shape.clone()?;
                if mask_dims != [dims[0].clone(), dims[3].clone()] {
                    return None;
                }
                if attention_mask.is_some_and(|m| m != *mask) {
                    return None;
                }
                attention_mask = Some(*mask);
            }
            // A constant ≤ 0: always true (a constant > 0, always false, is not read).
            Atom::NonPositive(a) if a.coef.iter().all(|&c| c == 0) => {
                if a.offset.known().is_none_or(|v| v > 0) {
                    return None;
                }
            }
            // j − i − P ≤ 0: causal (the query's cache position is P + i).
            Atom::NonPositive(a)
                if a.coef == causal_coef && a.offset.add(p) == SymDim::Known(0) =>
            {
                causal = true;
            }
            // i + P − j − (W − 1) ≤ 0: the key is less than W positions behind.
            Atom::NonPositive(a) if a.coef == window_coef => {
                let w = 1 - a.offset.sub(p).known()?;
                if w <= 0 || window.is_some_and(|v| v != w) {
                    return None;
                }
                window = Some(w);
            }
            Atom::NonPositive(_) => return None,
        }
    }
    let attention_mask = attention_mask.filter(|_| causal)?;
    Some(ExportMask {
        attention_mask,
        window,
    })
}

/// RoPE angles computed from positions, read by [`position_table`]: the table
/// `Cast(Unsqueeze(positions, [1])) · frequencies` over positions `[T]` gives, row by row, the
/// angles of the token at that position.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionTable {
    /// The positions: the graph input `position_ids` (`[B, S]`), or a tensor `[1, S]` computed
    /// as `P + s` (see `past`).
    pub positions: Id,
    /// `Some((P, S))` when the positions are not an input but computed from the past length:
    /// `[1, S]`, element `s` equal to `P + s` (optimum's exports without `position_ids`,
    /// `Unsqueeze(Range(P, P + S), [0])`, `P` the cache's length).
    pub past: Option<(SymDim, SymDim)>,
    /// The frequencies, a float constant of `D/2` elements: `[D/2]`, or `[1, D/2, 1]` (read
    /// as `[D/2]`).
    pub frequencies: Id,
    /// Whether the product is `frequencies · positions` (else `positions · frequencies`).
    pub frequencies_first: bool,
    /// The float type the positions are cast to.
    pub dtype: DType,
    /// The elementwise ops between the angles and the cache (`Cos` or `Sin`, a `Cast`, a
    /// scale), innermost first: each op e-node and the position of its child that carries the
    /// angles (its other children — a Cast target, a single-element scale — stay as they are).
    pub steps: Vec<(OpNode, usize)>,
}

/// Reads a rotary cache `c` `[B, S, D/2]` computed from positions: elementwise steps (`Cos`,
/// `Sin`, `Cast`, `Mul`/`Div` by a one-element float constant of rank ≤ 2) over the angles
/// `Mul(Cast(Unsqueeze(position_ids, [2])), frequencies)` (either operand order; the Cast to a
/// float type; `frequencies` a 1-D float constant; `position_ids` the int64 graph input
/// `[B, S]`).
pub fn position_table(g: &OnnxGraph, c: Id) -> Option<PositionTable> {
    table_within(g, c, 4).or_else(|| {
        // A table of one batch row expanded over the batch (the rotary recognition's cache
        // for angles [1, S, D/2]): every row the same, read as that row.
        ops_named(g, c, "Expand")
            .iter()
            .find_map(|e| table_within(g, e.input_ids()[0], 4))
            .filter(|t| t.past.is_some())
    })
}

fn table_within(g: &OnnxGraph, c: Id, depth: usize) -> Option<PositionTable> {
    let ops: Vec<&OpNode> = g[c].nodes.iter().filter_map(|n| n.as_op()).collect();
    if let Some(table) = ops.iter().find_map(|op| angles(g, op)) {
        return Some(table);
    }
    if depth == 0 {
        return None;
    }
    let scale = |k: Id| {
        scalar_float(g, k).is_some()
            && g[k]
                .data
                .tensor()
                .and_then(|t| t.rank())
                .is_some_and(|r| r <= 2)
    };
    ops.iter().find_map(|n| {
        let carrier = match (n.op.as_str(), n.input_ids()) {
            ("Cos" | "Sin" | "Cast", [_]) => 0,
            ("Mul", [_, k]) if scale(*k) => 0,
            ("Mul", [k, _]) if scale(*k) => 1,
            ("Div", [_, k]) if scale(*k) => 0,
            _ => return None,
        };
        let mut inner = table_within(g, n.children[carrier], depth - 1)?;
        inner.steps.push(((*n).clone(), carrier));
        Some(inner)
    })
}

/// The angles of [`product_angles`] or [`outer_angles`].
fn angles(g: &OnnxGraph, op: &OpNode) -> Option<PositionTable> {
    match op.op.as_str() {
        "Mul" => product_angles(g, op),
        "Transpose" => outer_angles(g, op),
        _ => None,
    }
}

/// `Transpose(MatMul(frequencies, Cast(Unsqueeze(position_ids, [1]))), [0, 2, 1])` with the
/// frequencies a float constant `[1, D/2, 1]`, or that constant expanded over the batch (the
/// TorchScript exporter's `inv_freq[None, :, None] @ position_ids[:, None, :]`): an outer
/// product whose inner dimension is 1, so each element is the one product `frequency ·
/// position` that `Mul` computes (the table multiplies the same two numbers).
fn outer_angles(g: &OnnxGraph, transpose: &OpNode) -> Option<PositionTable> {
    let perm = transpose.attr_id("perm").and_then(|a| g[a].data.attr());
    if !matches!(perm, Some(AttrValue::Ints(p)) if p.as_slice() == [0, 2, 1]) {
        return None;
    }
    let matmul = find_op(g, transpose.input_ids()[0], "MatMul")?;
    let [f, p] = matmul.input_ids() else {
        return None;
    };
    let column = |k: Id| {
        let t = g[k].data.tensor()?;
        let ok = g[k].data.konst.is_some()
            && t.dtype.is_some_and(DType::is_float)
            && matches!(t.static_shape()?.as_slice(), [1, _, 1]);
        ok.then(|| (g.find(k), t.dtype))
    };
    let (frequencies, dtype) = column(*f).or_else(|| {
        ops_named(g, *f, "Expand")
            .iter()
            .find_map(|e| column(e.input_ids()[0]))
    })?;
    let dtype = dtype?;
    let (positions, past) = position_cast(g, *p, dtype, 1)?;
    Some(PositionTable {
        positions,
        past,
        frequencies,
        frequencies_first: true,
        dtype,
        steps: Vec::new(),
    })
}

/// The positions of class `id` = `Cast(Unsqueeze(positions, [axis]), to = dtype)` (axis 2 is
/// also read as −1): the `position_ids` graph input (`[B, S]` int64), or positions computed
/// from the past length ([`past_positions`]), with their `(P, S)`.
fn position_cast(
    g: &OnnxGraph,
    id: Id,
    dtype: DType,
    axis: i64,
) -> Option<(Id, Option<(SymDim, SymDim)>)> {
    g[id].nodes.iter().find_map(|n| {
        let cast = n.as_op().filter(|o| o.op.as_str() == "Cast")?;
        let to = DType::from_onnx_code(int_attr(g, cast.attr_id("to")?)? as i32)?;
        let unsqueeze = find_op(g, cast.input_ids()[0], "Unsqueeze")?;
        let [ids, axes] = unsqueeze.input_ids() else {
            return None;
        };
        let ids_ok = is_input(g, *ids, Some("position_ids"))
            && g[*ids]
                .data
                .tensor()
                .is_some_and(|t| t.rank() == Some(2) && t.dtype == Some(DType::I64));
        let past = if ids_ok {
            None
        } else {
            Some(past_positions(g, *ids)?)
        };
        let axes = const_ints(g, *axes)?;
        let axis_ok = axes == [axis] || (axis == 2 && axes == [-1]);
        (to == dtype && axis_ok).then(|| (g.find(*ids), past))
    })
}

/// `(P, S)` when class `ids` is an int64 tensor `[1, S]` whose element `s` is `P + s`, read
/// symbolically (as the mask is: `Unsqueeze(Range(P, P + S), [0])`, `P` a symbolic length).
fn past_positions(g: &OnnxGraph, ids: Id) -> Option<(SymDim, SymDim)> {
    if g[ids].data.tensor()?.dtype != Some(DType::I64) {
        return None;
    }
    let mut reader = Reader {
        g,
        memo: HashMap::new(),
    };
    let x = reader.read(ids, MAX_DEPTH)?;
    let [one, seq] = x.dims.as_slice() else {
        return None;
    };
    let a = x.int()?;
    let along = Affine {
        coef: vec![0, 1],
        offset: a.offset.clone(),
    }
    .normalized(&x.dims);
    let ok = *one == SymDim::Known(1) && *seq != SymDim::Unknown && *a == along;
    ok.then(|| (a.offset.clone(), seq.clone()))
}

/// `Mul(Cast(Unsqueeze(position_ids, [2 or −1])), frequencies)` (either order).
fn product_angles(g: &OnnxGraph, mul: &OpNode) -> Option<PositionTable> {
    let [a, b] = mul.input_ids() else {
        return None;
    };
    let frequencies = |k: Id| {
        let t = g[k].data.tensor()?;
        (g[k].data.konst.is_some() && t.rank() == Some(1) && t.dtype.is_some_and(DType::is_float))
            .then_some(t.dtype?)
    };
    let (positions, frequencies_id, frequencies_first) = match (frequencies(*a), frequencies(*b)) {
        (None, Some(_)) => (*a, *b, false),
        (Some(_), None) => (*b, *a, true),
        _ => return None,
    };
    let dtype = frequencies(frequencies_id)?;
    let (positions, past) = position_cast(g, positions, dtype, 2)?;
    Some(PositionTable {
        positions,
        past,
        frequencies: g.find(frequencies_id),
        frequencies_first,
        dtype,
        steps: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(v: &[&str]) -> Vec<SymDim> {
        v.iter()
            .map(|s| match s.parse::<i64>() {
                Ok(k) => SymDim::Known(k),
                Err(_) => SymDim::expr(s),
            })
            .collect()
    }

    #[test]
    fn broadcast_refuses_two_extents_and_unknowns() {
        assert_eq!(
            broadcast(&dims(&["b", "1", "1"]), &dims(&["s", "1"])),
            Some(dims(&["b", "s", "1"]))
        );
        // Two different symbols might both be 1 at run time, or not: not read.
        assert_eq!(broadcast(&dims(&["b"]), &dims(&["s"])), None);
        assert_eq!(broadcast(&[SymDim::Unknown], &dims(&["1"])), None);
    }

    #[test]
    fn affine_arithmetic_is_exact() {
        let p = SymDim::expr("past");
        let key = Affine {
            coef: vec![0, 1],
            offset: SymDim::Known(0),
        };
        let query = Affine {
            coef: vec![1, 0],
            offset: p.clone(),
        };
        // key ≤ query: key − query ≤ 0 = j − i − past.
        let le = key.plus(&query, -1).unwrap();
        assert_eq!(le.coef, vec![-1, 1]);
        assert_eq!(le.offset.add(&p), SymDim::Known(0));
        let two = dims(&["s", "t"]);
        assert!(key.is_position(1, &two) && !query.is_position(0, &two));
        let n = Affine {
            coef: vec![3, 1],
            offset: SymDim::Known(0),
        }
        .normalized(&dims(&["1", "t"]));
        assert!(n.is_position(1, &dims(&["1", "t"])));
    }
}
