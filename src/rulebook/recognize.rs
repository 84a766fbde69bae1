//! Recognition of the norms exporters decompose (rules in `rewrites/recognize/`): the
//! predicates that prove a decomposed chain computes exactly a standard norm (registered in
//! [`super::conditions`]); the appliers that build that norm are in
//! `appliers/norm_recognize.rs`.
//!
//! A recognised normalization first becomes the norm with a unit scale
//! (`RMSNormalization(x, ones)`, `LayerNormalization(x, ones)`), itself a complete, exact
//! reading of the chain; separate rules then fold a `[hidden]` weight `Mul`, a bias `Add` and the
//! f32 up/down `Cast`s around it. Every predicate walks all e-nodes of the classes it inspects,
//! so a spelling is found whatever other readings its classes hold.

use egg::Id;

use crate::ir::DType;
use crate::ops::infer::literal_ints;
use crate::ops::value::{AttrValue, Literal};
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::{Onnx, OpNode};

/// The value of a single-element float constant (any rank), as f64.
fn single_float(lit: &Literal) -> Option<f64> {
    if lit.shape.iter().product::<usize>() != 1 {
        return None;
    }
    let b = &lit.bytes;
    Some(match lit.dtype {
        DType::F32 => f32::from_le_bytes(b.get(..4)?.try_into().ok()?) as f64,
        DType::F64 => f64::from_le_bytes(b.get(..8)?.try_into().ok()?),
        DType::F16 => half::f16::from_le_bytes([*b.first()?, *b.get(1)?]).to_f64(),
        DType::BF16 => half::bf16::from_le_bytes([*b.first()?, *b.get(1)?]).to_f64(),
        _ => return None,
    })
}

/// The value of class `c` when it is a single-element float constant of `x`'s dtype whose rank
/// is at most `x`'s (so adding it broadcasts nothing into `x`'s shape).
fn scalar_like(g: &OnnxGraph, c: Id, x: Id) -> Option<f64> {
    let lit = g[c].data.konst.as_deref()?;
    let xt = g[x].data.tensor()?;
    (Some(lit.dtype) == xt.dtype && lit.shape.len() <= xt.rank()?).then_some(())?;
    single_float(lit)
}

/// The op e-nodes named `op` in class `id`.
fn ops<'a>(g: &'a OnnxGraph, id: Id, op: &'a str) -> impl Iterator<Item = &'a OpNode> + 'a {
    g[id]
        .nodes
        .iter()
        .filter_map(move |n| n.as_op().filter(|o| o.op.as_str() == op))
}

/// The last-axis width of an f32 tensor class `x` of known rank ≥ 1: what the norms recognised
/// here normalize over. Statistics in the decomposed chain are then computed in f32, as the
/// recognised norm's `stash_type` 1 does.
fn f32_hidden(g: &OnnxGraph, x: Id) -> Option<i64> {
    let t = g[x].data.tensor()?;
    (t.dtype == Some(DType::F32)).then_some(())?;
    t.shape.as_ref()?.last()?.known()
}

/// Whether `reduce` (a `ReduceMean` e-node) averages over exactly the last axis of `x`, keeping
/// it: axes `[-1]` or `[rank − 1]` (an input since opset 18, an attribute before), `keepdims`
/// 1 or unset.
fn means_last_axis(g: &OnnxGraph, reduce: &OpNode, x: Id) -> bool {
    let Some(rank) = g[x].data.tensor().and_then(|t| t.rank()) else {
        return false;
    };
    let attr = |name: &str| reduce.attr_id(name).and_then(|a| g[a].data.attr());
    let keeps = matches!(
        attr("keepdims"),
        None | Some(AttrValue::Unset) | Some(AttrValue::Int(1))
    );
    let axes = match (reduce.input_ids(), attr("axes")) {
        ([_, axes], None | Some(AttrValue::Unset)) => {
            g[*axes].data.konst.as_deref().and_then(literal_ints)
        }
        ([_], Some(AttrValue::Ints(axes))) => Some(axes.clone()),
        _ => None,
    };
    let last = rank as i64 - 1;
    keeps && matches!(axes.as_deref(), Some([a]) if *a == -1 || *a == last)
}

/// Whether class `c` is a single-element constant exponent of exactly 2 (float of `x`'s dtype
/// or integer) whose rank is at most `x`'s.
fn is_two(g: &OnnxGraph, c: Id, x: Id) -> bool {
    let Some(lit) = &g[c].data.konst else {
        return false;
    };
    let rank_ok = g[x]
        .data
        .tensor()
        .and_then(|t| t.rank())
        .is_some_and(|r| lit.shape.len() <= r);
    let two = match literal_ints(lit) {
        Some(v) => v == [2],
        None => scalar_like(g, c, x) == Some(2.0),
    };
    rank_ok && two
}

/// Whether class `sq` holds `x²`: `Pow(x, 2)` with a single-element exponent of exactly 2, or
/// `Mul(x, x)`.
fn is_square_of(g: &OnnxGraph, sq: Id, x: Id) -> bool {
    let x = g.find(x);
    let pow = ops(g, sq, "Pow").any(|p| match p.input_ids() {
        [base, exp] => g.find(*base) == x && is_two(g, *exp, x),
        _ => false,
    });
    pow || ops(g, sq, "Mul").any(|m| m.input_ids().iter().all(|&i| g.find(i) == x))
}

/// The epsilon of class `v` when it holds `mean(x²) + ε` (either operand order): the mean a
/// last-axis `ReduceMean` keeping the axis, ε a finite single-element constant of `x`'s dtype
/// and rank ≤ `x`'s.
pub fn mean_square_eps(g: &OnnxGraph, v: Id, x: Id) -> Option<f32> {
    ops(g, v, "Add").find_map(|add| {
        let [a, b] = add.input_ids() else {
            return None;
        };
        [(*a, *b), (*b, *a)].into_iter().find_map(|(mean, eps)| {
            let eps = scalar_like(g, eps, x)? as f32;
            let mean_square = ops(g, mean, "ReduceMean")
                .any(|r| means_last_axis(g, r, x) && is_square_of(g, r.input_ids()[0], x));
            (mean_square && eps.is_finite()).then_some(eps)
        })
    })
}

/// `?v ?x`: `?v` is `mean(x²) + ε` over `x`'s last axis ([`mean_square_eps`]), `x` f32 with a
/// known last dim.
pub fn mean_square_plus_eps(g: &OnnxGraph, [v, x]: [Id; 2]) -> bool {
    f32_hidden(g, x).is_some() && mean_square_eps(g, v, x).is_some()
}

/// `?m ?x`: `?m` is the mean of `x` over its last axis, the axis kept.
pub fn mean_over_last_axis(g: &OnnxGraph, [m, x]: [Id; 2]) -> bool {
    f32_hidden(g, x).is_some()
        && ops(g, m, "ReduceMean")
            .any(|r| g.find(r.input_ids()[0]) == g.find(x) && means_last_axis(g, r, x))
}

/// The epsilon of class `v` when it holds `mean((x − m)²) + ε` for the class `Sub(x, m)`.
pub fn centered_eps(g: &OnnxGraph, v: Id, x: Id, m: Id) -> Option<f32> {
    let centered = g.lookup(Onnx::op("Sub", &[], 2, 1, vec![x, m]))?;
    mean_square_eps(g, v, centered)
}

/// `?v ?x ?m`: `?v` is the variance of `x` around its mean `?m` plus ε
/// (`mean((x − m)²) + ε`, [`mean_square_eps`] of `Sub(x, m)`).
pub fn centered_variance_plus_eps(g: &OnnxGraph, [v, x, m]: [Id; 3]) -> bool {
    centered_eps(g, v, x, m).is_some()
}

/// `?c ?x`: `?c` is a single-element constant 1 of `?x`'s dtype and rank ≤ `?x`'s.
pub fn is_one(g: &OnnxGraph, [c, x]: [Id; 2]) -> bool {
    scalar_like(g, c, x) == Some(1.0)
}

/// Whether class `s` is a constant of ones only.
fn all_ones(g: &OnnxGraph, s: Id) -> bool {
    let Some(lit) = &g[s].data.konst else {
        return false;
    };
    let size = match lit.dtype {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        _ => return false,
    };
    let one = match lit.dtype {
        DType::F32 => 1f32.to_le_bytes().to_vec(),
        DType::F16 => half::f16::ONE.to_le_bytes().to_vec(),
        _ => half::bf16::ONE.to_le_bytes().to_vec(),
    };
    lit.bytes.chunks_exact(size).all(|c| c == one.as_slice())
}

/// `?s`: the norm's scale is a constant of ones (a norm recognised without its weight yet).
pub fn unit_scale(g: &OnnxGraph, [scale]: [Id; 1]) -> bool {
    all_ones(g, scale)
}

/// `?w ?x`: `?w` is 1-D `[hidden]` of `?x`'s dtype, `hidden` being `?x`'s known last dim: a
/// weight or bias that broadcasts only along the normalized axis.
pub fn scale_on_last_axis(g: &OnnxGraph, [w, x]: [Id; 2]) -> bool {
    let (Some(wt), Some(xt)) = (g[w].data.tensor(), g[x].data.tensor()) else {
        return false;
    };
    let hidden = xt.shape.as_ref().and_then(|d| d.last()?.known());
    let width = match wt.shape.as_deref() {
        Some([d]) => d.known(),
        _ => None,
    };
    xt.dtype.is_some() && wt.dtype == xt.dtype && hidden.is_some() && width == hidden
}

/// `?x ?up ?down`: `Cast(x → up)` then `Cast(… → down)` is the f32 round trip of a 16-bit float
/// `x` (`up` f32, `down` `x`'s own dtype).
pub fn f32_round_trip(g: &OnnxGraph, [x, up, down]: [Id; 3]) -> bool {
    let to = |v: Id| {
        g[v].data
            .attr()
            .and_then(AttrValue::int)
            .and_then(|c| DType::from_onnx_code(c as i32))
    };
    let dtype = g[x].data.tensor().and_then(|t| t.dtype);
    matches!(dtype, Some(DType::F16 | DType::BF16))
        && to(up) == Some(DType::F32)
        && to(down) == dtype
}
