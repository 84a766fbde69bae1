//! The ALiBi bias of transformers' BLOOM / Falcon (`build_alibi_tensor`, as optimum-onnx exports
//! them): `slopes[:, None] · Cast_f32(((CumSum(m, 1) − 1) · m)[:, None, :])`, `[B, H, T]`,
//! reshaped to `[B·H, 1, T]` and on to the Attention's `[B, H, 1, T]`.
//!
//! [`alibi_bias`] reads it exactly: every op it passes either keeps the row-major order of the
//! elements (`Reshape`, `Unsqueeze`, `Squeeze`, a `Cast` to the dtype the tensor has) or is the
//! one broadcast `Mul` of a constant that varies along one axis only (the heads) by a tensor of
//! extent 1 along that axis, so element `(b, h, 0, t)` of the bias is `slopes[h] · P[b, t]`
//! when the axes before the heads' hold `B` elements and those after it `T`.

use egg::Id;

use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::OpNode;
use crate::opt::query::{
    const_floats, const_ints, int_attr, is_input, known_dims, ops_named, scalar_float,
};

/// Deepest chain of order-keeping ops [`alibi_bias`] passes between two ops it reads.
const MAX_MOVES: usize = 8;

/// An ALiBi bias `[B, H, 1, T]`: element `(b, h, 0, t)` is
/// `slopes[h] · Cast_f32((CumSum(attention_mask, 1)[b, t] − 1) · attention_mask[b, t])`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlibiBias {
    /// The slope of each head (`H` values, as the export's constant holds them).
    pub slopes: Vec<f64>,
    /// The integer `[B, T]` graph input the positions are counted from.
    pub attention_mask: Id,
}

/// Reads the float bias `bias` of an Attention with `heads` query heads as an ALiBi bias (see
/// the module doc): `Some` only when it is exactly that tensor, of dims `[B, H, 1, T]`.
pub fn alibi_bias(g: &OnnxGraph, bias: Id, heads: usize) -> Option<AlibiBias> {
    let dims = known_dims(g, bias, 4)?;
    let [b, h, one, t] = dims.as_slice() else {
        return None;
    };
    if *h != SymDim::Known(heads as i64) || *one != SymDim::Known(1) {
        return None;
    }
    let float = g[bias].data.tensor()?.dtype?;
    if float != DType::F32 {
        return None;
    }
    moved_from(g, bias, float, MAX_MOVES, &|id| {
        scaled_positions(g, id, b, t, heads)
    })
}

/// `read(x)` for the first `x` that `id` is through order-keeping ops (`Reshape`, `Unsqueeze`,
/// `Squeeze`, `Cast` to `dtype` of a `dtype` tensor), `id` itself first.
fn moved_from<T>(
    g: &OnnxGraph,
    id: Id,
    dtype: DType,
    depth: usize,
    read: &dyn Fn(Id) -> Option<T>,
) -> Option<T> {
    if let Some(found) = read(id) {
        return Some(found);
    }
    if depth == 0 {
        return None;
    }
    g[id].nodes.iter().find_map(|n| {
        let op = n.as_op()?;
        let x = *op.input_ids().first()?;
        let keeps = match op.op.as_str() {
            "Reshape" => op.attr_id("allowzero").is_none_or(|a| zero(g, a)),
            "Unsqueeze" | "Squeeze" => true,
            "Cast" => {
                let to = DType::from_onnx_code(int_attr(g, op.attr_id("to")?)? as i32)?;
                to == dtype
            }
            _ => false,
        };
        let same = g[x].data.tensor()?.dtype? == dtype;
        (keeps && same)
            .then(|| moved_from(g, x, dtype, depth - 1, read))
            .flatten()
    })
}

/// `Mul(slopes, x)` (either order) of dims `O`: `slopes` a float constant of `H` elements,
/// extent 1 on every axis of `O` but one, `k` (extent `H`); `x` of `O`'s dims with `k` set to 1,
/// the product of `O`'s extents before `k` equal to `b` and after it to `t`; `x` the float cast
/// of the positions of [`positions`].
fn scaled_positions(
    g: &OnnxGraph,
    id: Id,
    b: &SymDim,
    t: &SymDim,
    heads: usize,
) -> Option<AlibiBias> {
    ops_named(g, id, "Mul").iter().find_map(|mul| {
        let [l, r] = mul.input_ids() else {
            return None;
        };
        [(*l, *r), (*r, *l)].into_iter().find_map(|(c, x)| {
            let slopes = const_floats(g, c)?;
            let out = g[id].data.tensor()?.shape.clone()?;
            let c_dims = g[c].data.tensor()?.shape.clone()?;
            let x_dims = g[x].data.tensor()?.shape.clone()?;
            if slopes.len() != heads || c_dims.len() > out.len() || x_dims.len() != out.len() {
                return None;
            }
            let pad = out.len() - c_dims.len();
            let c_at = |a: usize| {
                if a < pad {
                    SymDim::Known(1)
                } else {
                    c_dims[a - pad].clone()
                }
            };
            let h = SymDim::Known(heads as i64);
            let k = (0..out.len()).find(|&a| c_at(a) == h)?;
            let one = SymDim::Known(1);
            let shaped = (0..out.len()).all(|a| {
                if a == k {
                    out[a] == h && x_dims[a] == one
                } else {
                    c_at(a) == one && x_dims[a] == out[a]
                }
            });
            let product = |d: &[SymDim]| d.iter().fold(one.clone(), |p, e| p.mul(e));
            if !shaped || product(&out[..k]) != *b || product(&out[k + 1..]) != *t {
                return None;
            }
            let mask = moved_from(g, x, DType::F32, MAX_MOVES, &|y| {
                ops_named(g, y, "Cast").iter().find_map(|cast| {
                    let to = DType::from_onnx_code(int_attr(g, cast.attr_id("to")?)? as i32)?;
                    let p = *cast.input_ids().first()?;
                    let from = g[p].data.tensor()?.dtype?;
                    if to != DType::F32 || !matches!(from, DType::I64 | DType::I32) {
                        return None;
                    }
                    moved_from(g, p, from, MAX_MOVES, &|q| positions(g, q, b, t))
                })
            })?;
            Some(AlibiBias {
                slopes,
                attention_mask: mask,
            })
        })
    })
}

/// `(CumSum(m, 1) − 1) · m` (the `Mul` either order), `m` an integer graph input of dims
/// `[b, t]`, the `CumSum` neither exclusive nor reversed: the mask `m`.
fn positions(g: &OnnxGraph, id: Id, b: &SymDim, t: &SymDim) -> Option<Id> {
    let dims = known_dims(g, id, 2)?;
    if dims != [b.clone(), t.clone()] {
        return None;
    }
    ops_named(g, id, "Mul").iter().find_map(|mul| {
        let [l, r] = mul.input_ids() else {
            return None;
        };
        [(*l, *r), (*r, *l)].into_iter().find_map(|(sub, m)| {
            if !is_input(g, m, None) || known_dims(g, m, 2)? != dims {
                return None;
            }
            let m = g.find(m);
            ops_named(g, sub, "Sub").iter().find_map(|s| {
                let [cum, one] = s.input_ids() else {
                    return None;
                };
                if const_ints(g, *one)?.as_slice() != [1] {
                    return None;
                }
                ops_named(g, *cum, "CumSum")
                    .iter()
                    .any(|c| counts(g, c, m))
                    .then_some(m)
            })
        })
    })
}

/// Whether `c` is `CumSum(m, axis 1 or −1)`, neither exclusive nor reversed.
fn counts(g: &OnnxGraph, c: &OpNode, m: Id) -> bool {
    let [x, axis] = c.input_ids() else {
        return false;
    };
    let flag = |name: &str| c.attr_id(name).is_none_or(|a| zero(g, a));
    g.find(*x) == m
        && matches!(const_ints(g, *axis).as_deref(), Some([1] | [-1]))
        && flag("exclusive")
        && flag("reverse")
}

/// Whether the attribute class `a` is unset or the integer 0.
fn zero(g: &OnnxGraph, a: Id) -> bool {
    matches!(g[a].data.attr(), Some(AttrValue::Unset | AttrValue::Int(0)))
}

/// An Attention bias read as the ALiBi bias plus the causal padding mask of the export
/// ([`alibi_export_bias`]): what `mobius build` writes instead as
/// `Where(attention_mask ≠ 0, slopes · (CumSum(attention_mask) − 1), −FLT_MAX)` with
/// `is_causal=1`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlibiExportBias {
    /// The slope of each head, as the bias scales the positions (f32 values).
    pub slopes: Vec<f32>,
    /// The integer `[B, T]` graph input both the positions and the mask read.
    pub attention_mask: Id,
}

/// Reads the float bias `bias` of an Attention over 3-D queries `q` (`heads` query heads) and
/// the cache `past_key` as an ALiBi bias `A` ([`alibi_bias`]) over the export's causal padding
/// mask `M` ([`super::float_export_mask`], no window), both of the same `attention_mask`:
/// BLOOM's `Add(A, M)` (either order), or Falcon's `Where(Less(M, c), f, Div(A, d))` with
/// `−FLT_MAX < c < 0` (only the masked elements, `−FLT_MAX`, are below it), `f ≤ −FLT_MAX`
/// and `d` a positive power of two (`slopes / d` exact, normal, so `(s · x) / d = (s / d) · x`
/// bit for bit). Where `M` is `±0` the bias is exactly `A`'s element (`/ d`); elsewhere it is
/// `≤ −FLT_MAX`, so the key gets no weight.
pub fn alibi_export_bias(
    g: &OnnxGraph,
    bias: Id,
    q: Id,
    past_key: Id,
    heads: usize,
) -> Option<AlibiExportBias> {
    let read = |a: Id, m: Id, d: f32| -> Option<AlibiExportBias> {
        let mask = super::float_export_mask(g, m, q, past_key)?;
        let alibi = alibi_bias(g, a, heads)?;
        if mask.window.is_some() || g.find(mask.attention_mask) != g.find(alibi.attention_mask) {
            return None;
        }
        let slopes = alibi
            .slopes
            .iter()
            .map(|&s| {
                let s = s as f32;
                let r = s / d;
                (r == 0.0 && s == 0.0 || r.is_normal() && r * d == s).then_some(r)
            })
            .collect::<Option<Vec<f32>>>()?;
        Some(AlibiExportBias {
            slopes,
            attention_mask: g.find(alibi.attention_mask),
        })
    };
    g[bias].nodes.iter().find_map(|n| {
        let op = n.as_op()?;
        match (op.op.as_str(), op.input_ids()) {
            ("Add", [l, r]) => read(*l, *r, 1.0).or_else(|| read(*r, *l, 1.0)),
            ("Where", [cond, fill, div]) => {
                if scalar_float(g, *fill)? > -f64::from(f32::MAX) {
                    return None;
                }
                let m = ops_named(g, *cond, "Less").iter().find_map(|less| {
                    let [m, c] = less.input_ids() else {
                        return None;
                    };
                    let c = scalar_float(g, *c)?;
                    (c > -f64::from(f32::MAX) && c < 0.0).then_some(*m)
                })?;
                ops_named(g, *div, "Div").iter().find_map(|dv| {
                    let [a, d] = dv.input_ids() else {
                        return None;
                    };
                    let d = scalar_float(g, *d)?;
                    let d32 = d as f32;
                    let power = d32 > 0.0 && d32.is_normal() && d32.to_bits() & 0x7f_ffff == 0;
                    (power && f64::from(d32) == d)
                        .then(|| read(*a, m, d32))
                        .flatten()
                })
            }
            _ => None,
        }
    })
}
