//! MPT's ALiBi as optimum-onnx exports it (transformers' `MptAttention`): a constant table
//! `[H, 1, L]` (`L` the model's `max_seq_len`) whose row `h` is `slope_h · (k − (L − 1))`,
//! sliced to the keys by cache index, `Slice(table, L − T, ∞, axis −1)` (`T` the keys), added
//! to the scores, and the scores masked by `Where(Cast_bool(M), −FLT_MAX, ·)`, `M`
//! transformers' legacy float 4-D mask (`_prepare_4d_causal_attention_mask`, the
//! `AttentionMaskConverter.to_4d` spelling, not the one [`super::float_export_mask`] reads).
//!
//! torch computes the table (`build_mpt_alibi_tensor`) as the int32 `arange(1 − L, 1)` times
//! the f32 slopes, so entry `k` of row `h` is `fl32(s_h · f32(k − c))`, `c = L − 1`: each
//! product rounded to f32. For slopes that are powers of two (e.g. 4, 6 or 8 heads) every
//! product is exact; for others (MPT-7B's 32 heads: `2^(−i/4)`) the rows are not exactly on a
//! line. The reader takes each row's f32 slope `s_h` exactly from the table and its `c` from
//! where the row is 0, and accepts only a table whose every entry is that rounded product bit
//! for bit ([`rounded_products_slope`]); the slopes need no formula.
//!
//! [`table_export_bias`] reads that bias as the ALiBi bias `mobius build` writes, under
//! onnxruntime-genai's contract (the `--kv-cache genai` gate; the proof,
//! `tests/rule_proofs/alibi_table_genai.rs`, draws its inputs from it):
//! - `attention_mask` holds 0 and 1 only, so `1 − Cast_f32(m)` (the converter's inverted mask)
//!   is 0 exactly where `m ≠ 0`;
//! - the keys `T` are at most the table's `L` (genai's context length is the model's
//!   `max_seq_len`; beyond it the export's slice does not cover the keys);
//! - each row of the softmax sees a key whose position is its cache index (a right-padded
//!   prompt without past, or a step whose rows are all full): there `CumSum(m) − 1` is the cache
//!   index of every visible key, and the table's `fl32(s_h · f32(L − T + j − c))` is, in real
//!   arithmetic before the rounding, the build's `s_h · (CumSum(m)[j] − 1)` plus the constant
//!   `s_h · (L − T − c)` along the row, which softmax does not see. The build computes its bias
//!   in f32 the same way (`Mul(slopes, Cast_f32(position))`, one rounding per element), so the
//!   rewrite is exact in real arithmetic and the two biases differ only by the rounding of each
//!   element (at most half an ulp of each). In genai's layout for a right-padded row the
//!   build's positions are the row's own (its tokens counted over the mask), which is what the
//!   model computes on the row alone; the export's table would count the padding.
//!
//! The mask's elements are read as [`super::float_mask`]'s are: two-valued, `±0` where a
//! conjunction of atoms holds and exactly `−FLT_MAX` elsewhere, each op only where that form is
//! exact:
//! - `ConstantOfShape(shape, −FLT_MAX)` never holds, `ConstantOfShape(shape, 0)` always;
//! - `Where(c, 0, x)`, `c` a boolean of [`super::Reader`], `x` never: `±0` where `c`;
//! - `Where(Cast_bool(y), −FLT_MAX, x)`: `±0` where `y` is 0 and `x` is `±0` (`y` two-valued,
//!   or the inverted mask with `x = y`, 0 where `m ≠ 0`);
//! - `Concat([a, x], −1)` with `a` always `±0` and `x`'s atoms (shifted along the last axis)
//!   true over all of `a`: those atoms over the whole;
//! - `Unsqueeze` and `Expand` move elements without changing them.

use std::collections::HashMap;

use egg::Id;

use super::{
    broadcast, graph_input, predicate, unsqueezed, Affine, Atom, Reader, Sym, Value, MAX_DEPTH,
};
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::OpNode;
use crate::opt::query::{const_floats, const_ints, int_attr, ops_named, scalar_float};

use super::alibi::AlibiExportBias;
use super::float_mask::{is_never, never};

/// The class's ops.
fn ops_of(g: &OnnxGraph, id: Id) -> Vec<OpNode> {
    g[g.find(id)]
        .nodes
        .iter()
        .filter_map(|n| n.as_op().cloned())
        .collect()
}

/// `x` of `Cast(x, to = bool)` in class `c`, `x` of dtype `from`.
fn bool_cast_of(g: &OnnxGraph, c: Id, from: DType) -> Vec<Id> {
    ops_named(g, c, "Cast")
        .iter()
        .filter_map(|o| {
            let to = DType::from_onnx_code(int_attr(g, o.attr_id("to")?)? as i32)?;
            let x = *o.input_ids().first()?;
            (to == DType::Bool && g[x].data.tensor()?.dtype? == from).then_some(x)
        })
        .collect()
}

/// Reads the two-valued float tensors of the converter's mask (see the module doc).
struct ConverterReader<'a> {
    g: &'a OnnxGraph,
    ints: Reader<'a>,
    memo: HashMap<Id, Option<Sym>>,
}

impl ConverterReader<'_> {
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
        let got = ops_of(self.g, id)
            .iter()
            .find_map(|op| self.op(op, depth - 1));
        self.memo.insert(id, got.clone());
        got
    }

    fn op(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let ins = op.input_ids();
        match op.op.as_str() {
            "ConstantOfShape" => {
                let value = op.attr_id("value").and_then(|a| self.g[a].data.attr());
                let v = match value {
                    None | Some(AttrValue::Unset) => 0.0,
                    Some(AttrValue::Tensor(lit)) if lit.dtype == DType::F32 => {
                        let b: [u8; 4] = lit.bytes.as_slice().try_into().ok()?;
                        f32::from_le_bytes(b)
                    }
                    _ => return None,
                };
                let dims = self.ints.shape_value(ins[0])?;
                let atoms = if v == -f32::MAX {
                    vec![never(dims.len())]
                } else if v == 0.0 {
                    Vec::new()
                } else {
                    return None;
                };
                Some(Sym {
                    value: Value::Bool(atoms),
                    dims,
                })
            }
            "Where" => self.where_op(op, depth),
            "Concat" => self.concat(op, depth),
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
            _ => None,
        }
    }

    /// `Where(c, 0, never)` or `Where(Cast_bool(y), −FLT_MAX, x)` (see the module doc).
    fn where_op(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let [c, fill, x] = op.input_ids() else {
            return None;
        };
        let fill = scalar_float(self.g, *fill)?;
        if fill == 0.0 {
            let x = self.read(*x, depth)?;
            let c = self.ints.read(*c, depth)?;
            let dims = broadcast(&x.dims, &c.dims)?;
            let (x, c) = (x.aligned(&dims), c.aligned(&dims));
            if !is_never(x.atoms()?) {
                return None;
            }
            return Some(Sym {
                value: Value::Bool(c.atoms()?.to_vec()),
                dims,
            });
        }
        if fill != -(f32::MAX as f64) {
            return None;
        }
        bool_cast_of(self.g, *c, DType::F32)
            .into_iter()
            .find_map(|y| {
                let (zero, x) = match self.read(y, depth) {
                    Some(zero) => (zero, self.read(*x, depth)?),
                    // Where y is 0, x = y is 0 too.
                    None if self.g.find(y) == self.g.find(*x) => {
                        let zero = self.inverted(y, depth)?;
                        (zero.clone(), zero)
                    }
                    None => return None,
                };
                let dims = broadcast(&zero.dims, &x.dims)?;
                let (zero, x) = (zero.aligned(&dims), x.aligned(&dims));
                let mut atoms = zero.atoms()?.to_vec();
                atoms.extend_from_slice(x.atoms()?);
                Some(Sym {
                    value: Value::Bool(atoms),
                    dims,
                })
            })
    }

    /// `Sub(1, Cast_f32(m))`, `m` the mask's values ([`Self::mask`]): where it is 0 (under the
    /// contract's 0/1 mask, where `m ≠ 0`), as the atoms of a boolean.
    fn inverted(&mut self, id: Id, depth: usize) -> Option<Sym> {
        ops_named(self.g, id, "Sub").iter().find_map(|sub| {
            let [one, cast] = sub.input_ids() else {
                return None;
            };
            if scalar_float(self.g, *one) != Some(1.0) {
                return None;
            }
            ops_named(self.g, *cast, "Cast").iter().find_map(|c| {
                let to = DType::from_onnx_code(int_attr(self.g, c.attr_id("to")?)? as i32)?;
                (to == DType::F32)
                    .then(|| self.mask(c.input_ids()[0], depth))
                    .flatten()
            })
        })
    }

    /// An integer tensor whose elements are `attention_mask`'s (a 2-D integer graph input),
    /// through `Unsqueeze`, `Expand` and integer `Cast`s: `Mask` atoms at their positions.
    fn mask(&mut self, id: Id, depth: usize) -> Option<Sym> {
        let integral = |d: DType| matches!(d, DType::I64 | DType::I32);
        if depth == 0 || !integral(self.g[id].data.tensor()?.dtype?) {
            return None;
        }
        if let Some(input) = graph_input(self.g, id) {
            let dims = self.g[input].data.tensor()?.shape.clone()?;
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
            return Some(Sym {
                value: Value::Bool(vec![Atom::Mask {
                    mask: self.g.find(input),
                    row: pos(0),
                    col: pos(1),
                }]),
                dims,
            });
        }
        ops_of(self.g, id).iter().find_map(|op| {
            let ins = op.input_ids();
            match op.op.as_str() {
                "Cast" => {
                    let to = DType::from_onnx_code(int_attr(self.g, op.attr_id("to")?)? as i32)?;
                    let from = self.g[ins[0]].data.tensor()?.dtype?;
                    // Widening only: every value kept.
                    let wide = to == DType::I64 || from == DType::I32;
                    (integral(to) && wide)
                        .then(|| self.mask(ins[0], depth - 1))
                        .flatten()
                }
                "Unsqueeze" => {
                    let x = self.mask(ins[0], depth - 1)?;
                    unsqueezed(&x, &const_ints(self.g, *ins.get(1)?)?)
                }
                "Expand" => {
                    let x = self.mask(ins[0], depth - 1)?;
                    let shape = self.ints.shape_value(ins[1])?;
                    let dims = broadcast(&x.dims, &shape)?;
                    Some(x.aligned(&dims))
                }
                _ => None,
            }
        })
    }

    /// `Concat([a, x], −1)`: `a` always `±0`, `x`'s atoms (each `c · pos + o ≤ 0`) shifted by
    /// `a`'s extent along the last axis and true over all of `a`'s positions.
    fn concat(&mut self, op: &OpNode, depth: usize) -> Option<Sym> {
        let [a, x] = op.input_ids() else {
            return None;
        };
        let (a, x) = (self.read(*a, depth)?, self.read(*x, depth)?);
        let rank = x.dims.len();
        let axis = int_attr(self.g, op.attr_id("axis")?)?;
        if rank == 0 || !(axis == -1 || axis == rank as i64 - 1) || a.dims.len() != rank {
            return None;
        }
        let last = rank - 1;
        if a.dims[..last] != x.dims[..last] || !a.atoms()?.is_empty() {
            return None;
        }
        let width = a.dims[last].clone();
        let mut dims = x.dims.clone();
        dims[last] = width.add(&x.dims[last]);
        if dims[last] == SymDim::Unknown {
            return None;
        }
        let one = SymDim::Known(1);
        let atoms = x
            .atoms()?
            .iter()
            .map(|atom| {
                let Atom::NonPositive(f) = atom else {
                    return None;
                };
                let mut coef = f.coef.clone();
                if x.dims[last] == one {
                    coef[last] = 0;
                }
                // Position along the last axis in x is pos − width.
                let offset = f.offset.sub(&SymDim::Known(coef[last]).mul(&width));
                let shifted = Affine { coef, offset };
                // Its largest value over a's positions (each extent ≥ 1; none is vacuous).
                let most = (0..rank).try_fold(shifted.offset.clone(), |m, k| {
                    let c = shifted.coef[k];
                    let top = a.dims[k].sub(&one);
                    let m = if c > 0 {
                        m.add(&SymDim::Known(c).mul(&top))
                    } else {
                        m
                    };
                    (m != SymDim::Unknown).then_some(m)
                })?;
                SymDim::Known(0)
                    .sub(&most)
                    .is_nonnegative()
                    .then(|| Atom::NonPositive(shifted.normalized(&dims)))
            })
            .collect::<Option<Vec<Atom>>>()?;
        Some(Sym {
            value: Value::Bool(atoms),
            dims,
        })
    }
}

/// The slope `s` of a row whose every entry is bit for bit `fl32(s · f32(k − c))` over its
/// index `k`, for one f32 `s` and one integer `c` (how torch computes MPT's table: the int32
/// `arange(1 − L, 1)` times the f32 slopes, each product rounded to f32): `c` is where the row
/// is 0 (the first such index; if `s ≠ 0` the only one, as `|s · n| ≥ |s| > 0` for `n ≠ 0`),
/// and `s` is read exactly from the entry at `c − 1`, `fl32(−s) = −s` (or at `c + 1`, `s`,
/// where `c = 0`). The row is then `s · (k − c)` up to the rounding of each entry.
fn rounded_products_slope(row: &[f32]) -> Option<f32> {
    let c = row.iter().position(|&v| v == 0.0)?;
    let s = match c.checked_sub(1) {
        Some(before) => -row[before],
        None => *row.get(c + 1)?,
    };
    let product = |k: usize| s * (k as i64 - c as i64) as f32;
    let exact = row
        .iter()
        .enumerate()
        .all(|(k, v)| product(k).to_bits() == v.to_bits());
    exact.then_some(s)
}

/// The slope of each of `heads` heads of the table `Slice(table, L − T, ≥ L, axis −1[, step
/// 1])` over `t` keys, `table` an f32 constant whose dims align to `[1, H or 1, 1, L]` and
/// whose every row is `fl32(slope · f32(k − c_h))` bit for bit ([`rounded_products_slope`]):
/// element `j` of the slice (`T ≤ L`) is `slope · j` plus a constant of the row,
/// `slope · (L − T − c_h)`, up to the f32 rounding of the element.
fn sliced_slopes(g: &OnnxGraph, a: Id, heads: usize, t: &SymDim) -> Option<Vec<f32>> {
    ops_named(g, a, "Slice").iter().find_map(|slice| {
        let ins = slice.input_ids();
        let table = *ins.first()?;
        let dims = g[table].data.tensor()?.static_shape()?;
        let values = const_floats(g, table)?;
        if g[table].data.tensor()?.dtype? != DType::F32 || dims.is_empty() || dims.len() > 4 {
            return None;
        }
        let mut aligned = vec![1i64; 4 - dims.len()];
        aligned.extend(&dims);
        let [1, h, 1, l] = aligned[..] else {
            return None;
        };
        if !(h == 1 || h == heads as i64) || l < 2 {
            return None;
        }
        let rank = dims.len() as i64;
        let one_of = |id: Option<&Id>, default: i64| match id {
            None => Some(default),
            Some(&i) => match const_ints(g, i)?[..] {
                [v] => Some(v),
                _ => None,
            },
        };
        let axis = one_of(ins.get(3), 0)?;
        let step = one_of(ins.get(4), 1)?;
        let end = one_of(Some(ins.get(2)?), 0)?;
        if !(axis == -1 || axis == rank - 1) || step != 1 || end < l {
            return None;
        }
        let mut reader = Reader {
            g,
            memo: HashMap::new(),
        };
        let start = reader.read(ins[1], MAX_DEPTH)?;
        let flat = start.dims.iter().all(|d| *d == SymDim::Known(1));
        let start = start
            .int()
            .filter(|s| flat && s.coef.iter().all(|&c| c == 0))?;
        if start.offset != SymDim::Known(l).sub(t) {
            return None;
        }
        // f32 constants: each value as f64 is exact.
        let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        let slopes = values
            .chunks_exact(l as usize)
            .map(rounded_products_slope)
            .collect::<Option<Vec<f32>>>()?;
        Some(if slopes.len() == 1 {
            vec![slopes[0]; heads]
        } else {
            slopes
        })
    })
}

/// Reads the float bias `bias` of an Attention over 3-D queries `q` (`heads` query heads) and
/// the cache `past_key` as MPT's (see the module doc): `Where(Cast_bool(M), f, A)` with
/// `f ≤ −FLT_MAX`, `M` the converter's mask reading `j ≤ P + i ∧ attention_mask[b, j] ≠ 0`
/// (no window) and `A` the sliced table of rounded products ([`sliced_slopes`]): the build's
/// ALiBi bias over the same `attention_mask` (up to the rounding of each element), under the
/// contract the module doc states.
pub fn table_export_bias(
    g: &OnnxGraph,
    bias: Id,
    q: Id,
    past_key: Id,
    heads: usize,
) -> Option<AlibiExportBias> {
    let q_dims = g[q].data.tensor()?.shape.clone()?;
    let [b, s, _] = q_dims.as_slice() else {
        return None;
    };
    let p = g[past_key].data.tensor()?.shape.as_ref()?.get(2)?.clone();
    let t = p.add(s);
    if [b, s, &p, &t].contains(&&SymDim::Unknown) {
        return None;
    }
    ops_named(g, bias, "Where").iter().find_map(|w| {
        let [c, fill, a] = w.input_ids() else {
            return None;
        };
        if scalar_float(g, *fill)? > -f64::from(f32::MAX) {
            return None;
        }
        let slopes = sliced_slopes(g, *a, heads, &t)?;
        let mut reader = ConverterReader {
            g,
            ints: Reader {
                g,
                memo: HashMap::new(),
            },
            memo: HashMap::new(),
        };
        bool_cast_of(g, *c, DType::F32).into_iter().find_map(|m| {
            let m = reader.read(m, MAX_DEPTH)?;
            if m.dims.len() > 4 {
                return None;
            }
            let want = [b.clone(), SymDim::Known(1), s.clone(), t.clone()];
            let m = m.aligned(&broadcast(&m.dims, &want)?);
            if m.dims != want {
                return None;
            }
            let mask = predicate(g, m.atoms()?, &p, &want)?;
            mask.window.is_none().then(|| AlibiExportBias {
                slopes: slopes.clone(),
                attention_mask: g.find(mask.attention_mask),
            })
        })
    })
}
