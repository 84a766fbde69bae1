//! Recognition of rotate-half rotary embeddings (rules in `rewrites/recognize/rotary.rules`):
//! the predicates that prove an exported chain computes exactly an ONNX `RotaryEmbedding`
//! (registered in [`super::conditions`]), and the readings the appliers in
//! `appliers/rotary_recognize.rs` rebuild from.
//!
//! transformers writes RoPE as `x · cos + rotate_half(x) · sin`, where
//! `rotate_half(x) = Concat(−x[…, D/2:], x[…, :D/2])` and `cos`, `sin` are
//! `Unsqueeze(Cos(Concat(f, f)), 1)` (likewise Sin) for the angles `f` `[B, S, D/2]`. Both
//! halves of `Concat(f, f)` being the same class makes element `i` and `i + D/2` of each
//! table equal, which is exactly the pairing `RotaryEmbedding` applies: the chain is
//! `RotaryEmbedding(x, Cos(f), Sin(f))` with the caches `[B, S, D/2]` and no `position_ids`
//! (opset 23; onnxruntime's CPU kernel takes this form for a 4-D `[B, H, S, D]` input and
//! requires the caches' batch and sequence dims to equal the input's, no broadcasting). Every
//! reading walks all e-nodes of the classes it inspects.

use egg::Id;

use crate::ir::DType;
use crate::ops::infer::literal_ints;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::lang::{Onnx, OpNode};
use crate::opt::query::{const_ints, int_attr};

/// The deepest chain of elementwise steps read above a `Concat(f, f)` in a table.
const MAX_TABLE_STEPS: usize = 6;

/// How one half-width cache is rebuilt from the angles `f` of a `Concat(f, f)`: the
/// elementwise ops between that Concat and the table, innermost first.
#[derive(Debug, Clone, PartialEq)]
pub struct HalfTable {
    /// The class `f` concatenated with itself.
    pub leaf: Id,
    /// Each step: the op e-node and the position of its child that carries the table (its
    /// other children — a Cast target, a single-element scale — are kept as they are).
    pub steps: Vec<(OpNode, usize)>,
}

/// The op e-nodes named `op` in class `id`.
fn ops<'a>(g: &'a OnnxGraph, id: Id, op: &'a str) -> impl Iterator<Item = &'a OpNode> + 'a {
    g[id]
        .nodes
        .iter()
        .filter_map(move |n| n.as_op().filter(|o| o.op.as_str() == op))
}

/// The shape of a rotary input `x`: 4-D `[B, H, S, D]` of a float type `RotaryEmbedding`
/// takes, `D` known, even and positive. Returns the dims.
fn rotary_input(g: &OnnxGraph, x: Id) -> Option<&[SymDim]> {
    let t = g[x].data.tensor()?;
    matches!(t.dtype, Some(DType::F32 | DType::F16 | DType::BF16)).then_some(())?;
    let dims = t.shape.as_deref()?;
    let d = dims.get(3)?.known()?;
    (dims.len() == 4 && d > 0 && d % 2 == 0).then_some(dims)
}

/// The single value of an integer constant class holding one element.
fn one_int(g: &OnnxGraph, c: Id) -> Option<i64> {
    match const_ints(g, c)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

/// The range `[start, end)` a `Slice` e-node of class `s` takes from the last axis of `x`
/// (rank 4, last dim `d`): constant one-element starts, ends and axes (`3` or `−1`), step 1
/// or absent; bounds clamped as `Slice` does.
fn last_axis_slices(g: &OnnxGraph, s: Id, x: Id, d: i64) -> Vec<(i64, i64)> {
    let x = g.find(x);
    let clamp = |v: i64| if v < 0 { v + d } else { v }.clamp(0, d);
    ops(g, s, "Slice")
        .filter_map(|sl| {
            let ins = sl.input_ids();
            (g.find(*ins.first()?) == x).then_some(())?;
            let (start, end) = (one_int(g, *ins.get(1)?)?, one_int(g, *ins.get(2)?)?);
            let axis = one_int(g, *ins.get(3)?)?;
            let step = match ins.get(4) {
                Some(&st) if !matches!(g[st].nodes[..], [Onnx::Absent]) => one_int(g, st)?,
                _ => 1,
            };
            (matches!(axis, 3 | -1) && step == 1).then_some((clamp(start), clamp(end)))
        })
        .collect()
}

/// Whether class `s` holds `x[…, start:end]` on the last axis of 4-D `x` (last dim `d`).
fn is_last_axis_slice(g: &OnnxGraph, s: Id, x: Id, d: i64, range: (i64, i64)) -> bool {
    last_axis_slices(g, s, x, d).contains(&range)
}

/// Whether `axis` (a Concat attribute class) names the last axis of a rank-4 tensor.
fn is_last_axis(g: &OnnxGraph, axis: Id) -> bool {
    matches!(g[axis].data.attr(), Some(AttrValue::Int(3 | -1)))
}

/// Whether class `k` is a float constant of one element and rank at most `rank` (a scale
/// that broadcasts nothing into the table's shape).
fn single_scale(g: &OnnxGraph, k: Id, rank: usize) -> bool {
    g[k].data.konst.as_deref().is_some_and(|lit| {
        matches!(
            lit.dtype,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64
        ) && lit.shape.iter().product::<usize>() == 1
            && lit.shape.len() <= rank
    })
}

/// A table of class `c` whose two last-axis halves are equal, within `depth` steps: the
/// `Concat(f, f)` itself (last axis, the same class twice), or `Cos`, `Sin`, `Cast` of such a
/// table, or such a table multiplied or divided by a single-element float constant.
fn halves_within(g: &OnnxGraph, c: Id, depth: usize) -> Option<HalfTable> {
    let rank = g[c].data.tensor()?.rank()?;
    let concat = ops(g, c, "Concat").find_map(|n| match (n.input_ids(), n.attr_id("axis")) {
        ([a, b], Some(axis)) if g.find(*a) == g.find(*b) => {
            let last = matches!(g[axis].data.attr(), Some(AttrValue::Int(v)) if *v == -1 || *v == rank as i64 - 1);
            last.then(|| HalfTable {
                leaf: g.find(*a),
                steps: Vec::new(),
            })
        }
        _ => None,
    });
    if concat.is_some() || depth == 0 {
        return concat;
    }
    g[c].nodes.iter().filter_map(Onnx::as_op).find_map(|n| {
        let carrier = match (n.op.as_str(), n.input_ids()) {
            ("Cos" | "Sin" | "Cast", [_]) => 0,
            ("Mul", [_, k]) if single_scale(g, *k, rank) => 0,
            ("Mul", [k, _]) if single_scale(g, *k, rank) => 1,
            ("Div", [_, k]) if single_scale(g, *k, rank) => 0,
            _ => return None,
        };
        let mut inner = halves_within(g, n.children[carrier], depth - 1)?;
        inner.steps.push((n.clone(), carrier));
        Some(inner)
    })
}

/// The shortest reading of class `c` as a table with equal halves ([`halves_within`]).
pub fn equal_halves(g: &OnnxGraph, c: Id) -> Option<HalfTable> {
    (0..=MAX_TABLE_STEPS).find_map(|depth| halves_within(g, c, depth))
}

/// The half-width cache of a rotary factor `c4` applied to `x` `[B, H, S, D]`:
/// `c4 = Unsqueeze(c, [1])` with `c` `[B, S, D]` of `x`'s dtype and equal halves, the angles
/// `f` `[B, S, D/2]` with `B` and `S` the very dims of `x` (known or the same symbol); or a
/// table of one batch row: angles `f` `[1, S, D/2]` (positions
/// computed from the past length, the same for every row, as optimum's exports without
/// `position_ids` write them), which the factor broadcasts over `x`'s batch. The flag says
/// which: true for one row (the cache must then be expanded to `x`'s batch, as onnxruntime
/// takes no broadcast caches).
pub fn rotary_table_rows(g: &OnnxGraph, c4: Id, x: Id) -> Option<(HalfTable, bool)> {
    let dims = rotary_input(g, x)?;
    let dtype = g[x].data.tensor()?.dtype;
    ops(g, c4, "Unsqueeze").find_map(|u| {
        let [c, axes] = u.input_ids() else {
            return None;
        };
        let axes = g[*axes].data.konst.as_deref().and_then(literal_ints)?;
        let ct = g[*c].data.tensor()?;
        (matches!(axes[..], [1] | [-3]) && ct.rank() == Some(3) && ct.dtype == dtype)
            .then_some(())?;
        let table = equal_halves(g, *c)?;
        let f = g[table.leaf].data.tensor()?.shape.as_deref()?;
        let same = |a: &SymDim, b: &SymDim| *a != SymDim::Unknown && a == b;
        let half = dims[3].known()? / 2;
        let one_row = !same(&f.first()?.clone(), &dims[0]) && f[0] == SymDim::Known(1);
        (f.len() == 3
            && (one_row || same(&f[0], &dims[0]))
            && same(&f[1], &dims[2])
            && f[2].known() == Some(half))
        .then_some((table, one_row))
    })
}

/// `?x ?hi ?lo ?axis ?cos ?sin` of `x · cos + Concat(−hi, lo) · sin`: `x` is 4-D
/// `[B, H, S, D]` (float, `D` known and even), `?hi` and `?lo` are `x[…, D/2:]` and
/// `x[…, :D/2]` (constant last-axis Slices), the Concat is on the last axis, and `?cos`,
/// `?sin` are rotary factors with equal halves over angles `[B, S, D/2]` or `[1, S, D/2]`
/// ([`rotary_table_rows`]).
pub fn rotate_half(g: &OnnxGraph, [x, hi, lo, axis, cos, sin]: [Id; 6]) -> bool {
    let Some(d) = rotary_input(g, x).and_then(|dims| dims[3].known()) else {
        return false;
    };
    is_last_axis(g, axis)
        && is_last_axis_slice(g, hi, x, d, (d / 2, d))
        && is_last_axis_slice(g, lo, x, d, (0, d / 2))
        && rotary_table_rows(g, cos, x).is_some()
        && rotary_table_rows(g, sin, x).is_some()
}

/// The input `x` and rotary width `r` of a partial rotation: class `rot` holds `x[…, :r]` and
/// `pass` holds `x[…, r:]` for one 4-D `x` (last dim `D` known, `0 < r < D`, `r` even).
pub fn partial_split(g: &OnnxGraph, rot: Id, pass: Id) -> Option<(Id, i64)> {
    ops(g, rot, "Slice").find_map(|sl| {
        let x = g.find(*sl.input_ids().first()?);
        let d = rotary_input(g, x)?[3].known()?;
        last_axis_slices(g, rot, x, d)
            .into_iter()
            .find_map(|(start, r)| {
                (start == 0
                    && r > 0
                    && r < d
                    && r % 2 == 0
                    && is_last_axis_slice(g, pass, x, d, (r, d)))
                .then_some(r)
            })
            .map(|r| (x, r))
    })
}

/// `?rot ?pass ?axis ?heads ?rd`: `Concat(RotaryEmbedding(rot), pass)` on the last axis is a
/// partial rotation of one tensor ([`partial_split`]): the rotation has no `num_heads` (a 4-D
/// input) and rotates all of `rot` (`rotary_embedding_dim` unset, 0, or `rot`'s width).
pub fn partial_rotation(g: &OnnxGraph, [rot, pass, axis, heads, rd]: [Id; 5]) -> bool {
    let Some((_, r)) = partial_split(g, rot, pass) else {
        return false;
    };
    let whole = matches!(
        g[rd].data.attr(),
        Some(AttrValue::Unset | AttrValue::Int(0))
    ) || matches!(g[rd].data.attr(), Some(AttrValue::Int(v)) if *v == r);
    is_last_axis(g, axis) && whole && matches!(g[heads].data.attr(), Some(AttrValue::Unset))
}

/// The outer-product spelling of RoPE angles, read by [`outer_product_angles`]:
/// `Transpose(MatMul(column, Cast(Unsqueeze(x, [1]))), [0, 2, 1])`.
#[derive(Debug, Clone, PartialEq)]
pub struct OuterAngles {
    /// The positions `x` `[B, S]`.
    pub positions: Id,
    /// The `Cast` e-node over `Unsqueeze(x, [1])` (its target type is kept).
    pub cast: OpNode,
    /// The float constant `[1, N, 1]` (the frequencies), possibly expanded over the batch.
    pub column: Id,
    /// `N`, the number of frequencies.
    pub width: i64,
}

/// The constant `[1, N, 1]` (float) class `f` holds, or of which it is an `Expand` to
/// `[1 or B, N, 1]` (the expanded dims read from the class's inferred shape): `(constant, N)`.
fn frequency_column(g: &OnnxGraph, f: Id, batch: &SymDim) -> Option<(Id, i64)> {
    let column = |k: Id| {
        let t = g[k].data.tensor()?;
        let ok = g[k].data.konst.is_some() && t.dtype.is_some_and(DType::is_float);
        match t.static_shape()?.as_slice() {
            [1, n, 1] if ok && *n > 0 => Some((g.find(k), *n)),
            _ => None,
        }
    };
    column(f).or_else(|| {
        let dims = g[f].data.tensor()?.shape.clone()?;
        ops(g, f, "Expand").find_map(|e| {
            let (k, n) = column(*e.input_ids().first()?)?;
            let expanded = dims.len() == 3
                && (dims[0] == SymDim::Known(1)
                    || (*batch != SymDim::Unknown && dims[0] == *batch))
                && dims[1] == SymDim::Known(n)
                && dims[2] == SymDim::Known(1);
            expanded.then_some((k, n))
        })
    })
}

/// Reads `?product ?perm` of `Transpose(product, perm)` as outer-product angles: `perm`
/// `[0, 2, 1]`; `product` holds `MatMul(f, p)` with `p` = `Cast(Unsqueeze(x, [1]))` to `f`'s
/// float type, `x` 2-D `[B, S]` (dims known or symbolic), `f` a float constant `[1, N, 1]` or
/// its `Expand` to `[1 or B, N, 1]`, and `product`'s inferred shape is `[B, N, S]`. The inner
/// dimension of the product is 1, so each element is the single product `f[i] · x[b, s]` —
/// exactly what `Mul(Cast(Unsqueeze(x, [2])), f as [N])` computes at `[b, s, i]` (the
/// TorchScript exporter's `inv_freq[None, :, None] @ position_ids[:, None, :]`, transposed).
pub fn outer_product_angles(g: &OnnxGraph, product: Id, perm: Id) -> Option<OuterAngles> {
    if !matches!(g[perm].data.attr(), Some(AttrValue::Ints(v)) if v.as_slice() == [0, 2, 1]) {
        return None;
    }
    let out = g[product].data.tensor()?.shape.clone()?;
    ops(g, product, "MatMul").find_map(|matmul| {
        let [f, p] = matmul.input_ids() else {
            return None;
        };
        ops(g, *p, "Cast").find_map(|cast| {
            let to = DType::from_onnx_code(int_attr(g, cast.attr_id("to")?)? as i32)?;
            let unsqueeze = ops(g, *cast.input_ids().first()?, "Unsqueeze").find(|u| {
                let axes = u.input_ids().get(1).and_then(|a| const_ints(g, *a));
                matches!(axes.as_deref(), Some([1] | [-2]))
            })?;
            let x = g.find(*unsqueeze.input_ids().first()?);
            let x_dims = g[x].data.tensor()?.shape.clone()?;
            let [b, s] = x_dims.as_slice() else {
                return None;
            };
            if *b == SymDim::Unknown || *s == SymDim::Unknown {
                return None;
            }
            let (column, width) = frequency_column(g, *f, b)?;
            let same_type = g[column].data.tensor()?.dtype == Some(to);
            let shape_ok = out == [b.clone(), SymDim::Known(width), s.clone()];
            (same_type && shape_ok).then(|| OuterAngles {
                positions: x,
                cast: cast.clone(),
                column,
                width,
            })
        })
    })
}

/// `?product ?perm`: `Transpose(product, perm)` reads as outer-product angles
/// ([`outer_product_angles`]).
pub fn outer_angles(g: &OnnxGraph, [product, perm]: [Id; 2]) -> bool {
    outer_product_angles(g, product, perm).is_some()
}
