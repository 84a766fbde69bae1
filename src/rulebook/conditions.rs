//! The side conditions rule files name (`when NAME ?var…`), registered here by name. Each
//! takes the classes bound to the variables of its `when` line, in that order (see
//! [`crate::opt::bind`]).

use egg::Id;

use super::{
    head_layout, recognize, recognize_flat_rows, recognize_gemm, recognize_interleave,
    recognize_q_scale, recognize_rotary,
};
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{AnyCondition, Condition};
use crate::opt::query::{const_ints, int_attr, scalar_float};
use crate::opt::shape_value::shape_value;

/// The conditions, by the name rule files give them.
pub const CONDITIONS: &[(&str, &dyn AnyCondition)] = &[
    ("attr-is-set", &Condition(attr_is_set)),
    (
        "centered-variance-plus-eps",
        &Condition(recognize::centered_variance_plus_eps),
    ),
    ("f32-round-trip", &Condition(recognize::f32_round_trip)),
    ("is-one", &Condition(recognize::is_one)),
    (
        "mean-over-last-axis",
        &Condition(recognize::mean_over_last_axis),
    ),
    (
        "mean-square-plus-eps",
        &Condition(recognize::mean_square_plus_eps),
    ),
    (
        "scale-on-last-axis",
        &Condition(recognize::scale_on_last_axis),
    ),
    ("unit-scale", &Condition(recognize::unit_scale)),
    ("rotate-half", &Condition(recognize_rotary::rotate_half)),
    (
        "partial-rotation",
        &Condition(recognize_rotary::partial_rotation),
    ),
    ("outer-angles", &Condition(recognize_rotary::outer_angles)),
    (
        "repeat-interleave",
        &Condition(recognize_interleave::repeat_interleave),
    ),
    (
        "rotate-pairs",
        &Condition(recognize_interleave::rotate_pairs),
    ),
    (
        "rotate-pairs-heads-last",
        &Condition(recognize_interleave::rotate_pairs_heads_last),
    ),
    (
        "tile-repeats-ones",
        &Condition(recognize_interleave::tile_repeats_ones),
    ),
    (
        "heads-merged-back",
        &Condition(head_layout::heads_merged_back),
    ),
    (
        "last-axis-norm-through-transpose",
        &Condition(head_layout::last_axis_norm_through_transpose),
    ),
    (
        "split-then-reshaped",
        &Condition(head_layout::split_then_reshaped),
    ),
    (
        "target-copies-no-dim",
        &Condition(head_layout::target_copies_no_dim),
    ),
    (
        "gemm-is-matmul-add",
        &Condition(recognize_gemm::gemm_is_matmul_add),
    ),
    (
        "power-of-two-scale-of",
        &Condition(recognize_q_scale::power_of_two_scale_of),
    ),
    (
        "rows-restored-by",
        &Condition(recognize_flat_rows::rows_restored_by),
    ),
    (
        "reshape-keeps-last-dim",
        &Condition(recognize_flat_rows::reshape_keeps_last_dim),
    ),
    (
        "norm-on-last-axis-of-rows",
        &Condition(recognize_flat_rows::norm_on_last_axis_of_rows),
    ),
    ("bias-on-last-axis", &Condition(bias_on_last_axis)),
    ("bias-of-width", &Condition(bias_of_width)),
    ("gelu-is-exact", &Condition(gelu_is_exact)),
    ("cast-to-own-dtype", &Condition(cast_to_own_dtype)),
    ("perm-is-identity", &Condition(perm_is_identity)),
    ("slice-keeps-whole-axes", &Condition(slice_keeps_whole_axes)),
    (
        "slice-keeps-whole-axes-unit-steps",
        &Condition(slice_keeps_whole_axes_unit_steps),
    ),
    ("erf-gelu-constants", &Condition(erf_gelu_constants)),
    ("normalizes-last-axis", &Condition(normalizes_last_axis)),
    ("rank-2-or-3", &Condition(rank_2_or_3)),
    ("reshape-keeps-shape", &Condition(reshape_keeps_shape)),
    ("reshape-copies-through", &Condition(reshape_copies_through)),
    (
        "computed-target-copies-dims",
        &Condition(computed_target_copies_dims),
    ),
    ("skip-fits-input", &Condition(skip_fits_input)),
    ("stash-is-float", &Condition(stash_is_float)),
    ("tanh-gelu-constants", &Condition(tanh_gelu_constants)),
    (
        "tanh-gelu-cubed-constants",
        &Condition(tanh_gelu_cubed_constants),
    ),
    (
        "tanh-gelu-factored-constants",
        &Condition(tanh_gelu_factored_constants),
    ),
    ("softmax-over-last-axis", &Condition(softmax_over_last_axis)),
    ("is-float-zero", &Condition(is_float_zero)),
    ("is-float-lowest", &Condition(is_float_lowest)),
    ("is-power-of-two-scale", &Condition(is_power_of_two_scale)),
];

/// `?x ?perm`: `?perm` lists the axes in order (`[0, 1, …, n − 1]`, `n` being `?x`'s rank
/// where inferred: a perm of another length is not a valid Transpose of `?x`), or is unset on a
/// tensor of rank ≤ 1 (reversing one axis keeps it).
fn perm_is_identity(g: &OnnxGraph, [x, perm]: [Id; 2]) -> bool {
    let rank = g[x].data.tensor().and_then(|t| t.rank());
    match g[perm].data.attr() {
        Some(AttrValue::Ints(p)) => {
            rank.is_none_or(|r| r == p.len()) && p.iter().enumerate().all(|(i, &a)| a == i as i64)
        }
        Some(AttrValue::Unset) => rank.is_some_and(|r| r <= 1),
        _ => false,
    }
}

/// `?x ?starts ?ends ?axes ?steps` of a Slice: it keeps every axis it names whole (start 0,
/// step 1, end INT64_MAX or the axis' extent; axes distinct and within `?x`'s known rank).
fn slice_keeps_whole_axes(g: &OnnxGraph, [x, starts, ends, axes, steps]: [Id; 5]) -> bool {
    const_ints(g, steps).is_some_and(|s| s.iter().all(|&v| v == 1))
        && slice_keeps_whole_axes_unit_steps(g, [x, starts, ends, axes])
}

/// [`slice_keeps_whole_axes`] of a Slice without steps.
fn slice_keeps_whole_axes_unit_steps(g: &OnnxGraph, [x, starts, ends, axes]: [Id; 4]) -> bool {
    let Some(dims) = g[x].data.tensor().and_then(|t| t.shape.clone()) else {
        return false;
    };
    let (Some(starts), Some(ends), Some(axes)) = (
        const_ints(g, starts),
        crate::opt::shape_value::shape_value(g, ends),
        const_ints(g, axes),
    ) else {
        return false;
    };
    let rank = dims.len() as i64;
    let mut seen = vec![false; dims.len()];
    starts.len() == axes.len()
        && ends.len() == axes.len()
        && axes
            .iter()
            .zip(&starts)
            .zip(&ends)
            .all(|((&axis, &start), end)| {
                let axis = if axis < 0 { axis + rank } else { axis };
                let Some(a) = usize::try_from(axis).ok().filter(|&a| a < dims.len()) else {
                    return false;
                };
                let fresh = !std::mem::replace(&mut seen[a], true);
                let whole =
                    end.known() == Some(i64::MAX) || (*end != SymDim::Unknown && *end == dims[a]);
                fresh && start == 0 && whole
            })
}

/// `?x ?to`: casting `?x` to type code `?to` does not change its dtype.
fn cast_to_own_dtype(g: &OnnxGraph, [x, to]: [Id; 2]) -> bool {
    let dtype = g[x].data.tensor().and_then(|t| t.dtype);
    let target = int_attr(g, to).and_then(|c| DType::from_onnx_code(c as i32));
    dtype.is_some() && dtype == target
}

/// `?x ?shape ?allowzero`: the Reshape gives `?x` its own shape. `?shape` reads
/// ([`shape_value`]: a constant, or a computed target's symbolic value) as `?x`'s dims, each
/// known or named, at their own indices, where an entry may also be a 0 that copies the dim
/// (allowzero unset or 0) and one entry may be −1: with every other entry `?x`'s own dim, the
/// −1 is inferred as the remaining one, `?x`'s dim there (when the others multiply to 0 the
/// Reshape is an error, onnxruntime's and the interpreter's alike, so no accepted input is
/// changed).
fn reshape_keeps_shape(g: &OnnxGraph, [x, shape, allowzero]: [Id; 3]) -> bool {
    let Some(dims) = g[x].data.tensor().and_then(|t| t.shape.as_ref()) else {
        return false;
    };
    let Some(target) = shape_value(g, shape) else {
        return false;
    };
    let copies = matches!(
        g[allowzero].data.attr(),
        Some(AttrValue::Unset | AttrValue::Int(0))
    );
    let inferred = target.iter().filter(|t| **t == SymDim::Known(-1)).count();
    target.len() == dims.len()
        && inferred <= 1
        && dims.iter().zip(&target).all(|(d, t)| {
            *d != SymDim::Unknown
                && (t == d || *t == SymDim::Known(-1) || (copies && *t == SymDim::Known(0)))
        })
}

/// `?x ?a ?az ?b ?bz` of `Reshape(Reshape(x, a, az), b, bz)`: `b` a constant whose every 0
/// (which copies a dim when `bz` is unset or 0) sits where `a` (a constant, `az` unset or 0)
/// has a 0 too, so `b` copies `x`'s own dim there and `Reshape(x, b, bz)` is the same
/// (a Reshape reads its input's elements in order, and their count for a −1).
fn reshape_copies_through(g: &OnnxGraph, [x, a, az, b, bz]: [Id; 5]) -> bool {
    let copies = |z: Id| matches!(g[z].data.attr(), Some(AttrValue::Unset | AttrValue::Int(0)));
    let Some(outer) = const_ints(g, b) else {
        return false;
    };
    let zeros: Vec<usize> = (0..outer.len()).filter(|&k| outer[k] == 0).collect();
    if zeros.is_empty() {
        return g[x].data.tensor().is_some();
    }
    let Some(inner) = const_ints(g, a) else {
        return false;
    };
    let rank = g[x].data.tensor().and_then(|t| t.rank());
    copies(bz)
        && copies(az)
        && rank.is_some_and(|r| zeros.iter().all(|&k| k < r && inner.get(k) == Some(&0)))
}

/// The constant a computed Reshape target `shape` of `x` can be written as: the target's
/// value read symbolically ([`shape_value`]) with every symbolic entry equal to `x`'s dim at
/// the same index written `0` (a 0 copies that dim when `allowzero` is unset or 0), its
/// numbers (a −1, a 0) kept. `None` when the target is a constant already, `allowzero` is
/// set, or a symbolic entry is not `x`'s own dim at its index.
pub(crate) fn copied_dims_target(
    g: &OnnxGraph,
    [x, shape, allowzero]: [Id; 3],
) -> Option<Vec<i64>> {
    if g[shape].data.konst.is_some()
        || !matches!(
            g[allowzero].data.attr(),
            Some(AttrValue::Unset | AttrValue::Int(0))
        )
    {
        return None;
    }
    let dims = g[x].data.tensor()?.shape.clone()?;
    shape_value(g, shape)?
        .iter()
        .enumerate()
        .map(|(i, d)| match d {
            SymDim::Known(v) => Some(*v),
            SymDim::Sym(_) if dims.get(i) == Some(d) => Some(0),
            _ => None,
        })
        .collect()
}

/// `?x ?shape ?allowzero`: the computed target `?shape` reads as a constant
/// ([`copied_dims_target`]).
fn computed_target_copies_dims(g: &OnnxGraph, vars: [Id; 3]) -> bool {
    copied_dims_target(g, vars).is_some()
}

/// `?attr`: the attribute is set on the node.
fn attr_is_set(g: &OnnxGraph, [a]: [Id; 1]) -> bool {
    g[a].data.attr().is_some_and(|v| *v != AttrValue::Unset)
}

/// `?input ?skip`: the residual `?skip` added to `?input` has its rank and, dim for dim, its
/// size (or a size not inferred), or a leading 1 (a skip that onnxruntime's fused norms
/// broadcast over the batch). Equal ranks alone are not enough: two dims named apart (an
/// export whose inputs name the batch independently) may differ, and an input dim of 1 would
/// stretch.
fn skip_fits_input(g: &OnnxGraph, [input, skip]: [Id; 2]) -> bool {
    let shape = |id: Id| g[id].data.tensor().and_then(|t| t.shape.as_deref());
    let (Some(x), Some(y)) = (shape(input), shape(skip)) else {
        return false;
    };
    x.len() == y.len()
        && x.iter().zip(y).enumerate().all(|(i, (p, q))| {
            let batch_of_one = i == 0 && x.len() == 3 && *q == SymDim::Known(1);
            let one = SymDim::Known(1);
            p == q || (p.compatible(q) && *p != one && *q != one) || batch_of_one
        })
}

/// `?axis ?x`: a normalization `axis` (unset = −1) that names the last axis of `?x`.
fn normalizes_last_axis(g: &OnnxGraph, [axis, x]: [Id; 2]) -> bool {
    let rank = g[x].data.tensor().and_then(|t| t.rank());
    match (g[axis].data.attr(), rank) {
        (Some(AttrValue::Unset), _) => true,
        (Some(AttrValue::Int(-1)), _) => true,
        (Some(AttrValue::Int(a)), Some(r)) => *a == r as i64 - 1,
        _ => false,
    }
}

/// `?stash`: statistics are computed in f32 (`stash_type` unset or 1), as the fused kernel does.
fn stash_is_float(g: &OnnxGraph, [stash]: [Id; 1]) -> bool {
    matches!(
        g[stash].data.attr(),
        Some(AttrValue::Unset) | Some(AttrValue::Int(1))
    )
}

/// `?x`: rank 2 or 3 (what SkipLayerNormalization accepts).
fn rank_2_or_3(g: &OnnxGraph, [x]: [Id; 1]) -> bool {
    matches!(g[x].data.tensor().and_then(|t| t.rank()), Some(2 | 3))
}

/// `?x ?n ?bias`: `?bias` is a 1-D initializer expression of `?x`'s dtype and length `?n` (an
/// integer attribute), e.g. the output width of a MatMulNBits over `?x`.
fn bias_of_width(g: &OnnxGraph, [x, n, bias]: [Id; 3]) -> bool {
    let (Some(xt), Some(bt)) = (g[x].data.tensor(), g[bias].data.tensor()) else {
        return false;
    };
    let width = int_attr(g, n);
    g[bias].data.init_only
        && xt.dtype.is_some()
        && xt.dtype == bt.dtype
        && matches!(bt.shape.as_deref(), Some([len]) if len.known().is_some() && len.known() == width)
}

/// Whether class `id` is a single-element float constant within 1e-3 (relative) of `want`.
fn near(g: &OnnxGraph, id: Id, want: f64) -> bool {
    let Some(lit) = &g[id].data.konst else {
        return false;
    };
    let value = match (lit.dtype, lit.bytes.len()) {
        (DType::F32, 4) => f32::from_le_bytes(lit.bytes[..4].try_into().expect("4 bytes")) as f64,
        (DType::F16, 2) => half::f16::from_le_bytes([lit.bytes[0], lit.bytes[1]]).to_f64(),
        (DType::BF16, 2) => half::bf16::from_le_bytes([lit.bytes[0], lit.bytes[1]]).to_f64(),
        _ => return false,
    };
    (value - want).abs() <= 1e-3 * want.abs()
}

/// `?c1 ?c2 ?c3`: the constants of the exact GELU `x · (erf(x / √2) + 1) · ½`.
fn erf_gelu_constants(g: &OnnxGraph, [c1, c2, c3]: [Id; 3]) -> bool {
    near(g, c1, std::f64::consts::SQRT_2) && near(g, c2, 1.0) && near(g, c3, 0.5)
}

/// `?c2 ?c3 ?c4 ?c5 ?c6`: the constants of the tanh GELU
/// `x · (tanh(√(2/π) · (x + 0.044715 · x³)) + 1) · ½`.
fn tanh_gelu_constants(g: &OnnxGraph, [c2, c3, c4, c5, c6]: [Id; 5]) -> bool {
    near(g, c2, 1.0)
        && near(g, c3, 0.5)
        && near(g, c4, (2.0 / std::f64::consts::PI).sqrt())
        && near(g, c5, 0.044715)
        && near(g, c6, 3.0)
}

/// `?c2 ?c3 ?c4 ?c5`: the constants of the tanh GELU with `x³` written `x · (x · x)`.
fn tanh_gelu_cubed_constants(g: &OnnxGraph, [c2, c3, c4, c5]: [Id; 4]) -> bool {
    near(g, c2, 1.0)
        && near(g, c3, 0.5)
        && near(g, c4, (2.0 / std::f64::consts::PI).sqrt())
        && near(g, c5, 0.044715)
}

/// `?c1 ?c2 ?c3 ?c4 ?c5`: the constants of the tanh GELU with its argument factored,
/// `x · ½ · (tanh(√(2/π) · x · (1 + 0.044715 · x · x)) + 1)`: `?c1` the inner one, `?c2` the outer.
fn tanh_gelu_factored_constants(g: &OnnxGraph, [c1, c2, c3, c4, c5]: [Id; 5]) -> bool {
    near(g, c1, 1.0) && tanh_gelu_cubed_constants(g, [c2, c3, c4, c5])
}

/// `?approximate`: a `Gelu`'s `approximate` attribute selects the exact (erf) form.
fn gelu_is_exact(g: &OnnxGraph, [a]: [Id; 1]) -> bool {
    match g[a].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Str(mode)) => mode.as_str() == "none",
        _ => false,
    }
}

/// `?x ?bias`: `?bias` is a 1-D initializer of `?x`'s dtype whose length is `?x`'s known last
/// dimension (what BiasGelu and FastGelu accept as a bias).
fn bias_on_last_axis(g: &OnnxGraph, [x, bias]: [Id; 2]) -> bool {
    let (xd, bd) = (&g[x].data, &g[bias].data);
    let (Some(xt), Some(bt)) = (xd.tensor(), bd.tensor()) else {
        return false;
    };
    let (Some(xs), Some([len])) = (&xt.shape, bt.shape.as_deref()) else {
        return false;
    };
    let last = xs.last().and_then(|d| d.known());
    bd.init_only
        && xt.dtype.is_some()
        && xt.dtype == bt.dtype
        && last.is_some()
        && last == len.known()
}

/// `?axis ?x`: a Softmax `axis` that is set and names the last axis of `?x` (an unset axis
/// means −1 from opset 13 on but axis 1 of a 2-D coercion before, and the e-graph does not know
/// the opset).
fn softmax_over_last_axis(g: &OnnxGraph, [axis, x]: [Id; 2]) -> bool {
    let rank = g[x].data.tensor().and_then(|t| t.rank());
    match (int_attr(g, axis), rank) {
        (Some(-1), Some(_)) => true,
        (Some(a), Some(r)) => a == r as i64 - 1,
        _ => false,
    }
}

/// `?c`: a one-element float constant equal to zero.
fn is_float_zero(g: &OnnxGraph, [c]: [Id; 1]) -> bool {
    scalar_float(g, c) == Some(0.0)
}

/// `?c`: a one-element float constant at or below −FLT_MAX (−FLT_MAX or −inf, the value
/// exporters fill masked scores with).
fn is_float_lowest(g: &OnnxGraph, [c]: [Id; 1]) -> bool {
    scalar_float(g, c).is_some_and(|v| v <= f32::MIN as f64)
}

/// `?c`: a one-element float constant that is a positive power of two within f32's normal
/// range (`2^e`, −126 ≤ e ≤ 127), so multiplying or dividing by it is exact but for
/// subnormal or overflowing results.
fn is_power_of_two_scale(g: &OnnxGraph, [c]: [Id; 1]) -> bool {
    scalar_float(g, c).is_some_and(|v| {
        let e = v.log2().round();
        v > 0.0 && v.is_finite() && (-126.0..=127.0).contains(&e) && 2f64.powi(e as i32) == v
    })
}

#[cfg(test)]
mod tests {

    /// Loading the embedded rules checks the arity and variables of every condition they
    /// name; this makes sure that is every registered one.
    #[test]
    fn every_registered_condition_is_named_by_a_rule() {
        let rules = crate::rulebook::rules().unwrap().rules;
        for (name, _) in super::CONDITIONS {
            let named = rules
                .iter()
                .any(|r| r.conditions.iter().any(|w| w.name == *name));
            assert!(named, "no rule uses the condition `{name}`");
        }
    }
}
