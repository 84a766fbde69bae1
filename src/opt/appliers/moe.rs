//! The applier of `fusion/moe.rules` (MoEFusion): the dense mixture-of-experts block
//! ([`crate::models::components::sparse_moe`]: every SwiGLU expert on every token through
//! stacked 2-D weights, weighted by a routing matrix of softmax → TopK → optionally
//! renormalised weights) → one `com.microsoft::MoE` over the router logits, its expert weights
//! re-laid out at save time (`ai.mobius::MoEFc1` of the gate and up stacks joined along their
//! columns, `ai.mobius::MoEFc2` of the down stack, folded into initializers when the graph is
//! lowered). And the inverse (`inline/moe.rules`): a MoE call over initializers → that dense
//! block over the stacks read back from its weights (`ai.mobius::MoEGateStack`, `MoEUpStack`,
//! `MoEDownStack`), for EPs without the kernel.

use egg::Id;

use crate::ir::DType;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::{AttrValue, Onnx, OpNode};
use crate::opt::query::{const_ints, find_op, int_attr};

/// `dense-moe`.
pub(super) const DENSE_MOE: Applier<9> = Applier::new(
    [
        "?x",
        "?wg",
        "?wu",
        "?wd",
        "?per_expert",
        "?per_expert_zero",
        "?routing",
        "?merged",
        "?merged_zero",
    ],
    dense_moe,
);

/// What the routing matrix of a dense block computes.
struct Routing {
    /// The router logits `[B, S, E]`, in the block's dtype.
    logits: Id,
    /// Experts per token.
    k: i64,
    /// Whether the top-k weights are divided by their sum.
    normalize: bool,
}

/// Whether the attribute class `id` is unset or holds `value`.
pub(super) fn unset_or(g: &OnnxGraph, id: Option<Id>, value: i64) -> bool {
    id.is_some_and(|a| match g[a].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Int(v)) => *v == value,
        _ => false,
    })
}

/// The input of class `id` when it is `Unsqueeze(x, [-1])` of a rank-`rank` x (or the axis
/// spelled `rank`).
pub(super) fn unsqueezed_last(g: &OnnxGraph, id: Id, rank: i64) -> Option<Id> {
    find_op(g, id, "Unsqueeze").and_then(|u| match u.input_ids() {
        [x, axes] if matches!(const_ints(g, *axes)?.as_slice(), [a] if *a == -1 || *a == rank) => {
            Some(*x)
        }
        _ => None,
    })
}

/// The input of class `id` when it is `Cast(x → to)`.
pub(super) fn cast_to(g: &OnnxGraph, id: Id, to: DType) -> Option<Id> {
    find_op(g, id, "Cast").and_then(|c| {
        (int_attr(g, c.attr_id("to")?)? == to.onnx_code() as i64).then(|| c.input_ids()[0])
    })
}

/// `ReduceSum(x, [axis])` in class `id` with the axis one of `axes` and the axis kept: x.
pub(super) fn summed_over(g: &OnnxGraph, id: Id, axes: [i64; 2]) -> Option<Id> {
    find_op(g, id, "ReduceSum").and_then(|r| match r.input_ids() {
        [x, a]
            if matches!(const_ints(g, *a)?.as_slice(), [v] if axes.contains(v))
                && unset_or(g, r.attr_id("keepdims"), 1)
                && unset_or(g, r.attr_id("noop_with_empty_axes"), 0) =>
        {
            Some(*x)
        }
        _ => None,
    })
}

/// The tuple class whose output `index` class `id` projects.
pub(super) fn projected(g: &OnnxGraph, id: Id, index: usize) -> Option<Id> {
    g[id].nodes.iter().find_map(|n| match n {
        Onnx::Get { index: i, tuple } if *i == index => Some(tuple[0]),
        _ => None,
    })
}

/// The TopK e-node of class `tuple` over the last axis of a rank-3 input, largest first.
pub(super) fn top_k(g: &OnnxGraph, tuple: Id) -> Option<OpNode> {
    let node = find_op(g, tuple, "TopK")?;
    let axis = int_attr(g, node.attr_id("axis")?).unwrap_or(-1);
    (matches!(axis, -1 | 2) && unset_or(g, node.attr_id("largest"), 1)).then_some(node)
}

/// Reads the routing matrix `[B, S, E, 1]` of a dense block in `dtype` over `experts`
/// experts, as [`crate::models::components::sparse_moe`] builds it:
/// `Reshape(Cast?(ReduceSum(Cast(Equal(Unsqueeze(i, −1), 0..E) → f32) · Unsqueeze(w, −1),
/// −2)), [0, 0, E, 1])`, where `(p, i) = TopK(Softmax(Cast?(logits → f32), −1), k)` and `w` is
/// `p` or `p / ReduceSum(p, −1)` (the casts present exactly when `dtype` is not f32).
fn routing(g: &OnnxGraph, routing: Id, dtype: DType, experts: i64) -> Option<Routing> {
    let reshape = find_op(g, routing, "Reshape")?;
    let [matrix, shape] = reshape.input_ids() else {
        return None;
    };
    if const_ints(g, *shape)? != [0, 0, experts, 1] || !unset_or(g, reshape.attr_id("allowzero"), 0)
    {
        return None;
    }
    let f32_matrix = match dtype {
        DType::F32 => *matrix,
        _ => cast_to(g, *matrix, dtype)?,
    };
    let spread = summed_over(g, f32_matrix, [-2, 2])?;
    let mul = find_op(g, spread, "Mul")?;
    let [a, b] = mul.input_ids() else {
        return None;
    };
    // One factor is the one-hot rows of the picked experts, the other the weights column.
    let one_hot = |id: Id| {
        let equal = find_op(g, cast_to(g, id, DType::F32)?, "Equal")?;
        let [picked, ids] = equal.input_ids() else {
            return None;
        };
        let want: Vec<i64> = (0..experts).collect();
        (const_ints(g, *ids)? == want).then_some(())?;
        projected(g, unsqueezed_last(g, *picked, 3)?, 1)
    };
    let (indices_of, weights) = match (one_hot(*a), one_hot(*b)) {
        (Some(t), _) => (t, unsqueezed_last(g, *b, 3)?),
        (None, Some(t)) => (t, unsqueezed_last(g, *a, 3)?),
        (None, None) => return None,
    };
    let (values_of, normalize) = match projected(g, weights, 0) {
        Some(t) => (t, false),
        None => {
            let div = find_op(g, weights, "Div")?;
            let [p, sum] = div.input_ids() else {
                return None;
            };
            let t = projected(g, *p, 0)?;
            (g.find(summed_over(g, *sum, [-1, 2])?) == g.find(*p)).then_some(())?;
            (t, true)
        }
    };
    if g.find(values_of) != g.find(indices_of) {
        return None;
    }
    let top = top_k(g, values_of)?;
    let [probs, k] = top.input_ids() else {
        return None;
    };
    let k = match const_ints(g, *k)?.as_slice() {
        [k] if (1..=experts).contains(k) => *k,
        _ => return None,
    };
    let softmax = find_op(g, *probs, "Softmax")?;
    if !matches!(int_attr(g, softmax.attr_id("axis")?), None | Some(-1 | 2)) {
        return None;
    }
    let scores = softmax.input_ids()[0];
    let logits = match dtype {
        DType::F32 => scores,
        _ => cast_to(g, scores, DType::F32)?,
    };
    let t = g[logits].data.tensor()?;
    let dims = t.shape.as_ref()?;
    if t.dtype? != dtype || dims.len() != 3 || dims[2].known() != Some(experts) {
        return None;
    }
    Some(Routing {
        logits,
        k,
        normalize,
    })
}

/// Whether class `id` is an initializer.
pub(super) fn is_init(g: &OnnxGraph, id: Id) -> bool {
    g[id].nodes.iter().any(|n| matches!(n, Onnx::Init(_)))
}

/// The static 2-D shape of class `id`.
pub(super) fn matrix(g: &OnnxGraph, id: Id) -> Option<(i64, i64)> {
    match g[id].data.tensor()?.static_shape()?[..] {
        [r, c] => Some((r, c)),
        _ => None,
    }
}

/// The dense block `MatMul(Reshape(Reshape(SwiGLU(x · Wg, x · Wu), [0, 0, E, I]) · R,
/// [0, 0, E·I]), Wd)` with the routing matrix `R` → `com.microsoft::MoE(x, Reshape(logits,
/// [−1, E]), MoEFc1(Concat(Wg, Wu)), none, MoEFc2(Wd); swiglu, k, normalize)`. Fires for a
/// 3-D f32 or f16 `x` `[B, S, H]`, initializer stacks `Wg`, `Wu` `[H, E·I]` and `Wd`
/// `[E·I, H]`, and a routing matrix [`routing`] reads whose logits have x's B and S. SwiGLU's parameters are written out
/// (α = 1, β = 0, no limit), as onnxruntime's kernels default them differently.
fn dense_moe(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, wg, wu, wd, per_expert, per_expert_zero, routing_matrix, merged, merged_zero]: [Id; 9],
) -> Option<Id> {
    let t = g[x].data.tensor()?;
    let dtype = t.dtype?;
    let dims = t.shape.as_ref()?;
    if !matches!(dtype, DType::F32 | DType::F16) || dims.len() != 3 {
        return None;
    }
    let h = dims[2].known()?;
    let (gate, up, down) = (matrix(g, wg)?, matrix(g, wu)?, matrix(g, wd)?);
    let ei = gate.1;
    if gate.0 != h || up != gate || down != (ei, h) || ![wg, wu, wd].iter().all(|&w| is_init(g, w))
    {
        return None;
    }
    let [.., e, i] = const_ints(g, per_expert)?[..] else {
        return None;
    };
    let zero = |z| matches!(g[z].data.attr(), Some(AttrValue::Unset | AttrValue::Int(0)));
    if const_ints(g, per_expert)? != [0, 0, e, i]
        || const_ints(g, merged)? != [0, 0, ei]
        || e < 1
        || e * i != ei
        || !zero(per_expert_zero)
        || !zero(merged_zero)
    {
        return None;
    }
    let r = routing(g, routing_matrix, dtype, e)?;
    let tokens = |id: Id| Some(g[id].data.tensor()?.shape.as_ref()?.get(..2)?.to_vec());
    if tokens(r.logits)? != tokens(x)? {
        return None;
    }
    let mut em = Emit::new(g);
    let stack = em.concat(&[wg, wu], 1);
    let experts = [("experts", AttrValue::Int(e))];
    let fc1 = em.op("ai.mobius::MoEFc1", &[stack], &experts);
    let fc2 = em.op("ai.mobius::MoEFc2", &[wd], &experts);
    let router = em.reshape(r.logits, &[-1, e]);
    let none = em.g.add(Onnx::Absent);
    Some(em.op(
        "com.microsoft::MoE",
        &[x, router, fc1, none, fc2],
        &[
            ("activation_alpha", AttrValue::Float(1f32.to_bits())),
            ("activation_beta", AttrValue::Float(0f32.to_bits())),
            ("activation_type", AttrValue::Str("swiglu".into())),
            ("k", AttrValue::Int(r.k)),
            (
                "normalize_routing_weights",
                AttrValue::Int(i64::from(r.normalize)),
            ),
            ("swiglu_fusion", AttrValue::Int(1)),
            ("swiglu_limit", AttrValue::Float(f32::INFINITY.to_bits())),
        ],
    ))
}

/// `moe-to-dense`.
pub(super) const MOE_TO_DENSE: Applier<12> = Applier::new(
    [
        "?x",
        "?router",
        "?fc1",
        "?fc2",
        "?alpha",
        "?beta",
        "?activation",
        "?k",
        "?normalize",
        "?fusion",
        "?limit",
        "?sparse_mixer",
    ],
    moe_to_dense,
);

/// The float attribute of class `id`: `Some(default)` when unset.
pub(super) fn float_or(g: &OnnxGraph, id: Id, default: f32) -> Option<f32> {
    match g[id].data.attr()? {
        AttrValue::Unset => Some(default),
        AttrValue::Float(bits) => Some(f32::from_bits(*bits)),
        _ => None,
    }
}

/// The static shape of class `id` when it is an initializer of `dtype`.
pub(super) fn init_shape(g: &OnnxGraph, id: Id, dtype: DType) -> Option<Vec<i64>> {
    let t = g[id].data.tensor()?;
    (is_init(g, id) && t.dtype? == dtype).then(|| t.static_shape())?
}

/// `com.microsoft::MoE(x, router, fc1, none, fc2)` as onnxruntime's CPU kernel computes it
/// (interleaved SwiGLU experts, α = 1, β = 0, no limit: set so or unset, the CPU kernel's
/// defaults; no sparse mixer) → the dense block [`dense_moe`] reads, over the gate, up and
/// down stacks read back from the initializers `fc1` `[E, 2·I, H]` and `fc2` `[E, H, I]`
/// (`ai.mobius::MoEGateStack`, `MoEUpStack`, `MoEDownStack`) and the router logits
/// `[B·S, E]` read as `[B, S, E]`. Fires for a 3-D f32 or f16 `x` `[B, S, H]`; exact but for
/// the rule's ties and non-finite logits (`fusion/moe.rules`).
fn moe_to_dense(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, router, fc1, fc2, alpha, beta, activation, k, normalize, fusion, limit, sparse_mixer]: [Id;
        12],
) -> Option<Id> {
    let t = g[x].data.tensor()?;
    let dtype = t.dtype?;
    let dims = t.shape.as_ref()?;
    if !matches!(dtype, DType::F32 | DType::F16) || dims.len() != 3 {
        return None;
    }
    let h = dims[2].known()?;
    let swiglu =
        matches!(g[activation].data.attr(), Some(AttrValue::Str(s)) if s.as_str() == "swiglu");
    let plain = float_or(g, alpha, 1.0)? == 1.0
        && float_or(g, beta, 0.0)? == 0.0
        && float_or(g, limit, f32::INFINITY)? == f32::INFINITY;
    let int = |id: Id, default: i64| match g[id].data.attr() {
        Some(AttrValue::Unset) => Some(default),
        Some(AttrValue::Int(v)) => Some(*v),
        _ => None,
    };
    let (k, normalize) = (int(k, 1)?, int(normalize, 0)?);
    if !swiglu || !plain || int(fusion, 0)? != 1 || int(sparse_mixer, 0)? != 0 {
        return None;
    }
    let [e, rows, fc1_h] = init_shape(g, fc1, dtype)?[..] else {
        return None;
    };
    let [fc2_e, fc2_h, i] = init_shape(g, fc2, dtype)?[..] else {
        return None;
    };
    let r = g[router].data.tensor()?;
    let router_ok =
        r.dtype? == dtype && matches!(r.shape.as_deref(), Some([_, n]) if n.known() == Some(e));
    if !router_ok
        || fc1_h != h
        || rows != 2 * i
        || (fc2_e, fc2_h) != (e, h)
        || !(1..=e).contains(&k)
        || !matches!(normalize, 0 | 1)
    {
        return None;
    }
    let mut em = Emit::new(g);
    let experts = [("experts", AttrValue::Int(e))];
    let wg = em.op("ai.mobius::MoEGateStack", &[fc1], &experts);
    let wu = em.op("ai.mobius::MoEUpStack", &[fc1], &experts);
    let wd = em.op("ai.mobius::MoEDownStack", &[fc2], &experts);
    let tokens = em.shape(x, 0, 2);
    let width = em.ints(&[e]);
    let shape = em.concat(&[tokens, width], 0);
    let logits = em.op("Reshape", &[router, shape], &[]);
    let routing = routing_matrix(&mut em, logits, (e, k), normalize == 1, dtype)?;
    let gate = em.bin("MatMul", x, wg);
    let sig = em.op("Sigmoid", &[gate], &[]);
    let gate = em.bin("Mul", gate, sig);
    let up = em.bin("MatMul", x, wu);
    let act = em.bin("Mul", gate, up);
    let act = em.reshape(act, &[0, 0, e, i]);
    let weighted = em.bin("Mul", act, routing);
    let weighted = em.reshape(weighted, &[0, 0, e * i]);
    Some(em.bin("MatMul", weighted, wd))
}

/// The routing matrix `[B, S, E, 1]` in `dtype` of router `logits` `[B, S, E]` (in `dtype`),
/// as [`crate::models::components::sparse_moe`] builds it (the form [`routing`] reads).
fn routing_matrix(
    em: &mut Emit<'_>,
    logits: Id,
    (experts, k): (i64, i64),
    normalize: bool,
    dtype: DType,
) -> Option<Id> {
    let cast = |em: &mut Emit<'_>, v: Id, to: DType| {
        em.op(
            "Cast",
            &[v],
            &[("to", AttrValue::Int(to.onnx_code() as i64))],
        )
    };
    let logits = match dtype {
        DType::F32 => logits,
        _ => cast(em, logits, DType::F32),
    };
    let probs = em.op("Softmax", &[logits], &[("axis", AttrValue::Int(-1))]);
    let k = em.ints(&[k]);
    let axis = em.g.add(Onnx::Attr(AttrValue::Int(-1)));
    let unset = em.g.add(Onnx::Attr(AttrValue::Unset));
    let names = crate::opt::schema::schema("TopK")?;
    let top = em.g.add(Onnx::op(
        "TopK",
        names,
        2,
        2,
        vec![probs, k, axis, unset, unset],
    ));
    let weights = em.g.add(Onnx::Get {
        index: 0,
        tuple: [top],
    });
    let picked = em.g.add(Onnx::Get {
        index: 1,
        tuple: [top],
    });
    let weights = if normalize {
        let last = em.ints(&[-1]);
        let sum = em.op("ReduceSum", &[weights, last], &[]);
        em.bin("Div", weights, sum)
    } else {
        weights
    };
    let picked = em.unsqueeze(picked, &[-1]);
    let ids: Vec<i64> = (0..experts).collect();
    let ids = em.ints(&ids);
    let one_hot = em.bin("Equal", picked, ids);
    let one_hot = cast(em, one_hot, DType::F32);
    let weights = em.unsqueeze(weights, &[-1]);
    let spread = em.bin("Mul", one_hot, weights);
    let over_k = em.ints(&[-2]);
    let routing = em.op("ReduceSum", &[spread, over_k], &[]);
    let routing = match dtype {
        DType::F32 => routing,
        _ => cast(em, routing, dtype),
    };
    Some(em.reshape(routing, &[0, 0, experts, 1]))
}
