//! The applier of `fusion/moe_clamped.rules` (MoEFusion): gpt-oss's dense mixture-of-experts
//! block ([`crate::models::components::clamped_moe`]: clamped-SwiGLU experts with biases on
//! every token, weighted by a routing matrix of TopK of the router logits → Softmax of the
//! picked logits) → one `com.microsoft::MoE` with the kernel's clamped SwiGLU
//! (`activation_alpha`, `activation_beta` 1, `swiglu_limit`) and both bias inputs, its
//! weights re-laid out at save time as `dense-moe`'s are.

use egg::Id;

use super::moe::{
    expert_stacks, init_shape, is_init, moe_call_input, one_hot_times_weights, projected,
    summed_over, top_k, unset_or, Stacks,
};
use crate::ir::DType;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::query::{const_ints, find_op, int_attr, scalar_float};

/// `dense-moe-clamped`.
pub(super) const DENSE_MOE_CLAMPED: Applier<19> = Applier::new(
    [
        "?x",
        "?wu",
        "?bu",
        "?lo",
        "?hi",
        "?one",
        "?wg",
        "?bg",
        "?alpha",
        "?per_expert",
        "?per_expert_zero",
        "?routing",
        "?merged",
        "?merged_zero",
        "?wd",
        "?bd",
        "?over_experts",
        "?keepdims",
        "?noop",
    ],
    dense_moe_clamped,
);

/// The router logits `[B, S, E]` (in `dtype`) and k of the routing column `[B, S, E, 1]`
/// [`crate::models::components::clamped_moe`] builds:
/// `Reshape(Reshape(ReduceSum(Cast(Equal(Unsqueeze(i, −1), 0..E) → dtype) ·
/// Unsqueeze(Softmax(v, −1), −1), −2), [0, 0, E]), [0, 0, E, 1])` with
/// `(v, i) = TopK(logits, k)`, or the same sum under the outer Reshape alone.
fn routing(g: &OnnxGraph, column: Id, dtype: DType, experts: i64) -> Option<(Id, i64)> {
    let reshaped = |id: Id, want: &[i64]| {
        let r = find_op(g, id, "Reshape")?;
        let [x, shape] = r.input_ids() else {
            return None;
        };
        (const_ints(g, *shape)? == want && unset_or(g, r.attr_id("allowzero"), 0)).then_some(*x)
    };
    // The inner `[0, 0, E]` view may already be folded into the outer one (`reshape-of-reshape`
    // in the recognize stage): the column is the sum's elements in order either way.
    let rows = reshaped(column, &[0, 0, experts, 1])?;
    let summed = reshaped(rows, &[0, 0, experts]).unwrap_or(rows);
    let spread = summed_over(g, summed, [-2, 2])?;
    let (indices_of, weights) = one_hot_times_weights(g, spread, dtype, experts)?;
    let softmax = find_op(g, weights, "Softmax")?;
    if !matches!(int_attr(g, softmax.attr_id("axis")?), None | Some(-1 | 2)) {
        return None;
    }
    let values_of = projected(g, softmax.input_ids()[0], 0)?;
    if g.find(values_of) != g.find(indices_of) {
        return None;
    }
    let top = top_k(g, values_of)?;
    let [logits, k] = top.input_ids() else {
        return None;
    };
    let k = match const_ints(g, *k)?.as_slice() {
        [k] if (1..=experts).contains(k) => *k,
        _ => return None,
    };
    let t = g[*logits].data.tensor()?;
    let dims = t.shape.as_ref()?;
    if t.dtype? != dtype || dims.len() != 3 || dims[2].known() != Some(experts) {
        return None;
    }
    Some((*logits, k))
}

/// The static shape of class `id` when it is an initializer.
fn init_dims(g: &OnnxGraph, id: Id) -> Option<Vec<i64>> {
    is_init(g, id).then(|| g[id].data.tensor()?.static_shape())?
}

/// The dense block `MatMul(Reshape(Reshape(act, [0, 0, E, I]) · R, [0, 0, E·I]), Wd) +
/// ReduceSum(R · Bd, 2)` with `act = (clamp(x·Wu + bu, ±limit) + 1) · G · σ(α·G)`,
/// `G = min(x·Wg + bg, limit)` and the routing column `R` → `com.microsoft::MoE(x,
/// Reshape(logits, [−1, E]), MoEFc1(Concat(Wg, Wu)), Reshape(Concat(bgᵀ, buᵀ), [E, 2·I]),
/// MoEFc2(Wd), Bd; swiglu, α, β = 1, limit, k, normalize_routing_weights = 1)`. Fires for a
/// 3-D f32 or f16 `x` `[B, S, H]`, initializer stacks `Wg`, `Wu` `[H, E·I]`, `Wd` `[E·I, H]`,
/// biases `bg`, `bu` `[E·I]` and `Bd` `[E, H]`, scalar constants `lo = −limit < 0 < limit =
/// hi` and `one = 1`, and a routing column [`routing`] reads whose logits have x's B and S.
fn dense_moe_clamped(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, wu, bu, lo, hi, one, wg, bg, alpha, per_expert, per_expert_zero, routing_col, merged, merged_zero, wd, bd, over_experts, keepdims, noop]: [Id; 19],
) -> Option<Id> {
    let Stacks {
        dtype,
        hidden: h,
        experts: e,
        width: i,
    } = expert_stacks(
        g,
        x,
        [wg, wu, wd],
        [per_expert, per_expert_zero, merged, merged_zero],
    )?;
    let ei = e * i;
    let zero = |z| matches!(g[z].data.attr(), Some(AttrValue::Unset | AttrValue::Int(0)));
    if ![wg, wu, wd].iter().all(|&w| is_init(g, w))
        || init_dims(g, bg)? != [ei]
        || init_dims(g, bu)? != [ei]
        || init_dims(g, bd)? != [e, h]
        || !matches!(const_ints(g, over_experts)?.as_slice(), [2] | [-2])
        || int_attr(g, keepdims)? != 0
        || !zero(noop)
    {
        return None;
    }
    let limit = scalar_float(g, hi)?;
    let alpha = scalar_float(g, alpha)?;
    if !(limit > 0.0 && limit.is_finite())
        || scalar_float(g, lo)? != -limit
        || scalar_float(g, one)? != 1.0
        || !alpha.is_finite()
    {
        return None;
    }
    let (logits, k) = routing(g, routing_col, dtype, e)?;
    let tokens = |id: Id| Some(g[id].data.tensor()?.shape.as_ref()?.get(..2)?.to_vec());
    if tokens(logits)? != tokens(x)? {
        return None;
    }
    let mut em = Emit::new(g);
    let stack = em.concat(&[wg, wu], 1);
    let experts = [("experts", AttrValue::Int(e))];
    let fc1 = em.op("ai.mobius::MoEFc1", &[stack], &experts);
    let gate_bias = em.reshape(bg, &[ei, 1]);
    let up_bias = em.reshape(bu, &[ei, 1]);
    let pairs = em.concat(&[gate_bias, up_bias], 1);
    let fc1_bias = em.reshape(pairs, &[e, 2 * i]);
    let fc2 = em.op("ai.mobius::MoEFc2", &[wd], &experts);
    let router = em.reshape(logits, &[-1, e]);
    let float = |v: f64| AttrValue::Float((v as f32).to_bits());
    Some(em.op(
        "com.microsoft::MoE",
        &[x, router, fc1, fc1_bias, fc2, bd],
        &[
            ("activation_alpha", float(alpha)),
            ("activation_beta", float(1.0)),
            ("activation_type", AttrValue::Str("swiglu".into())),
            ("k", AttrValue::Int(k)),
            ("normalize_routing_weights", AttrValue::Int(1)),
            ("swiglu_fusion", AttrValue::Int(1)),
            ("swiglu_limit", float(limit)),
        ],
    ))
}

/// `moe-clamped-to-dense`.
pub(super) const MOE_CLAMPED_TO_DENSE: Applier<14> = Applier::new(
    [
        "?x",
        "?router",
        "?fc1",
        "?fc1_bias",
        "?fc2",
        "?fc2_bias",
        "?alpha",
        "?beta",
        "?activation",
        "?k",
        "?normalize",
        "?fusion",
        "?limit",
        "?sparse_mixer",
    ],
    moe_clamped_to_dense,
);

/// `com.microsoft::MoE(x, router, fc1, fc1_bias, fc2, fc2_bias)` with interleaved SwiGLU
/// experts (`swiglu_fusion` 1), α, β and `swiglu_limit` all set (α, β finite, limit > 0),
/// `normalize_routing_weights` 1 and no sparse mixer → the dense block
/// [`dense_moe_clamped`] reads (with `+ β` for its `+ 1`), over the gate, up and down stacks
/// read back from the initializers `fc1` `[E, 2·I, H]` and `fc2` `[E, H, I]`
/// (`ai.mobius::MoEGateStack`, `MoEUpStack`, `MoEDownStack`), the fc1 bias `[E, 2·I]`
/// de-interleaved into gate and up biases, and the router logits `[B·S, E]` read as
/// `[B, S, E]` (the kernel's softmax, top-k and renormalisation is the softmax of the top-k
/// logits). Fires for a 3-D f32 or f16 `x`; exact but for the rule's ties and non-finite
/// logits.
fn moe_clamped_to_dense(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, router, fc1, fc1_bias, fc2, fc2_bias, alpha, beta, activation, k, normalize, fusion, limit, sparse_mixer]: [Id; 14],
) -> Option<Id> {
    let (dtype, h, swiglu) = moe_call_input(g, x, activation)?;
    let set = |id: Id| match g[id].data.attr()? {
        AttrValue::Float(bits) => Some(f32::from_bits(*bits)),
        _ => None,
    };
    let (alpha, beta, limit) = (set(alpha)?, set(beta)?, set(limit)?);
    let int = |id: Id, default: i64| match g[id].data.attr() {
        Some(AttrValue::Unset) => Some(default),
        Some(AttrValue::Int(v)) => Some(*v),
        _ => None,
    };
    if !swiglu
        || !alpha.is_finite()
        || !beta.is_finite()
        || limit.is_nan()
        || limit <= 0.0
        || int(fusion, 0)? != 1
        || int(sparse_mixer, 0)? != 0
        || int(normalize, 0)? != 1
    {
        return None;
    }
    let k = int(k, 1)?;
    let [e, rows, fc1_h] = init_shape(g, fc1, dtype)?[..] else {
        return None;
    };
    let [fc2_e, fc2_h, i] = init_shape(g, fc2, dtype)?[..] else {
        return None;
    };
    let shaped = |id: Id, want: &[i64]| {
        let t = g[id].data.tensor();
        t.is_some_and(|t| t.dtype == Some(dtype) && t.static_shape().as_deref() == Some(want))
    };
    let r = g[router].data.tensor()?;
    let router_ok =
        r.dtype? == dtype && matches!(r.shape.as_deref(), Some([_, n]) if n.known() == Some(e));
    if !router_ok
        || fc1_h != h
        || rows != 2 * i
        || (fc2_e, fc2_h) != (e, h)
        || !(1..=e).contains(&k)
        || !shaped(fc1_bias, &[e, 2 * i])
        || !shaped(fc2_bias, &[e, h])
    {
        return None;
    }
    let mut em = Emit::new(g);
    let experts = [("experts", AttrValue::Int(e))];
    let wg = em.op("ai.mobius::MoEGateStack", &[fc1], &experts);
    let wu = em.op("ai.mobius::MoEUpStack", &[fc1], &experts);
    let wd = em.op("ai.mobius::MoEDownStack", &[fc2], &experts);
    let pairs = em.reshape(fc1_bias, &[e * i, 2]);
    let gate_bias = em.slice(pairs, 0, 1, 1);
    let gate_bias = em.reshape(gate_bias, &[e * i]);
    let up_bias = em.slice(pairs, 1, 2, 1);
    let up_bias = em.reshape(up_bias, &[e * i]);
    let tokens = em.shape(x, 0, 2);
    let width = em.ints(&[e]);
    let shape = em.concat(&[tokens, width], 0);
    let logits = em.op("Reshape", &[router, shape], &[]);
    let column = routing_column(&mut em, logits, (e, k), dtype);

    let (lo, hi) = (em.float(dtype, -limit)?, em.float(dtype, limit)?);
    let (alpha, beta) = (em.float(dtype, alpha)?, em.float(dtype, beta)?);
    let gate = em.bin("MatMul", x, wg);
    let gate = em.bin("Add", gate, gate_bias);
    let gate = em.bin("Min", gate, hi);
    let up = em.bin("MatMul", x, wu);
    let up = em.bin("Add", up, up_bias);
    let up = em.bin("Max", up, lo);
    let up = em.bin("Min", up, hi);
    let scaled = em.bin("Mul", gate, alpha);
    let sig = em.op("Sigmoid", &[scaled], &[]);
    let glu = em.bin("Mul", gate, sig);
    let up = em.bin("Add", up, beta);
    let act = em.bin("Mul", up, glu);
    let act = em.reshape(act, &[0, 0, e, i]);
    let weighted = em.bin("Mul", act, column);
    let weighted = em.reshape(weighted, &[0, 0, e * i]);
    let y = em.bin("MatMul", weighted, wd);
    let biases = em.bin("Mul", column, fc2_bias);
    let over_experts = em.ints(&[2]);
    let biases = em.op(
        "ReduceSum",
        &[biases, over_experts],
        &[("keepdims", AttrValue::Int(0))],
    );
    Some(em.bin("Add", y, biases))
}

/// The routing column `[B, S, E, 1]` in `dtype` of router `logits` `[B, S, E]` (in `dtype`),
/// as [`crate::models::components::clamped_moe`] builds it (the form [`routing`] reads).
fn routing_column(em: &mut Emit<'_>, logits: Id, (experts, k): (i64, i64), dtype: DType) -> Id {
    let (values, picked) = em.top_k(logits, k);
    let weights = em.op("Softmax", &[values], &[("axis", AttrValue::Int(-1))]);
    let picked = em.unsqueeze(picked, &[-1]);
    let ids: Vec<i64> = (0..experts).collect();
    let ids = em.ints(&ids);
    let one_hot = em.bin("Equal", picked, ids);
    let one_hot = em.op(
        "Cast",
        &[one_hot],
        &[("to", AttrValue::Int(dtype.onnx_code() as i64))],
    );
    let weights = em.unsqueeze(weights, &[-1]);
    let spread = em.bin("Mul", one_hot, weights);
    let over_k = em.ints(&[-2]);
    let summed = em.op("ReduceSum", &[spread, over_k], &[]);
    let rows = em.reshape(summed, &[0, 0, experts]);
    em.reshape(rows, &[0, 0, experts, 1])
}
