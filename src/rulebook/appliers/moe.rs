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
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::{Onnx, OpNode};
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
    let (indices_of, weights) = one_hot_times_weights(g, spread, DType::F32, experts)?;
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

/// The expert stacks of a dense block, as [`expert_stacks`] reads them.
pub(super) struct Stacks {
    /// The block's dtype (f32 or f16).
    pub(super) dtype: DType,
    /// Hidden size H.
    pub(super) hidden: i64,
    /// Experts E.
    pub(super) experts: i64,
    /// Expert width I.
    pub(super) width: i64,
}

/// Reads the stacked experts of a dense block over a 3-D f32 or f16 `x` `[B, S, H]`: stacks
/// `Wg`, `Wu` `[H, E·I]` and `Wd` `[E·I, H]` (of any form: the caller checks what they are),
/// the activations reshaped per expert to `[0, 0, E, I]` and merged back to `[0, 0, E·I]`
/// (`allowzero` unset or 0), E ≥ 1.
pub(super) fn expert_stacks(
    g: &OnnxGraph,
    x: Id,
    [wg, wu, wd]: [Id; 3],
    [per_expert, per_expert_zero, merged, merged_zero]: [Id; 4],
) -> Option<Stacks> {
    let t = g[x].data.tensor()?;
    let dtype = t.dtype?;
    let dims = t.shape.as_ref()?;
    if !matches!(dtype, DType::F32 | DType::F16) || dims.len() != 3 {
        return None;
    }
    let h = dims[2].known()?;
    let (gate, up, down) = (matrix(g, wg)?, matrix(g, wu)?, matrix(g, wd)?);
    let ei = gate.1;
    if gate.0 != h || up != gate || down != (ei, h) {
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
    Some(Stacks {
        dtype,
        hidden: h,
        experts: e,
        width: i,
    })
}

/// A dense block [`read_block`] reads.
struct Block {
    /// The block's input `[B, S, H]`.
    x: Id,
    /// Experts E.
    experts: i64,
    /// Expert width I.
    width: i64,
    /// The routing matrix's logits, k and renormalisation.
    routing: Routing,
}

/// Reads the dense block `MatMul(Reshape(Reshape(SwiGLU(x · Wg, x · Wu), [0, 0, E, I]) · R,
/// [0, 0, E·I]), Wd)` with the routing matrix `R`: its [`expert_stacks`] and a routing matrix
/// [`routing`] reads whose logits have x's B and S.
fn read_block(
    g: &OnnxGraph,
    [x, wg, wu, wd, per_expert, per_expert_zero, routing_matrix, merged, merged_zero]: [Id; 9],
) -> Option<Block> {
    let stacks = expert_stacks(
        g,
        x,
        [wg, wu, wd],
        [per_expert, per_expert_zero, merged, merged_zero],
    )?;
    let r = routing(g, routing_matrix, stacks.dtype, stacks.experts)?;
    let tokens = |id: Id| Some(g[id].data.tensor()?.shape.as_ref()?.get(..2)?.to_vec());
    if tokens(r.logits)? != tokens(x)? {
        return None;
    }
    Some(Block {
        x,
        experts: stacks.experts,
        width: stacks.width,
        routing: r,
    })
}

/// SwiGLU's parameters as the kernels' attributes (α = 1, β = 0, no limit: written out, as
/// onnxruntime's kernels default them differently), interleaved gate and up rows.
fn swiglu_attrs() -> [(&'static str, AttrValue); 5] {
    [
        ("activation_alpha", AttrValue::Float(1f32.to_bits())),
        ("activation_beta", AttrValue::Float(0f32.to_bits())),
        ("activation_type", AttrValue::Str("swiglu".into())),
        ("swiglu_fusion", AttrValue::Int(1)),
        ("swiglu_limit", AttrValue::Float(f32::INFINITY.to_bits())),
    ]
}

/// The dense block [`read_block`] reads with initializer stacks → `com.microsoft::MoE(x,
/// Reshape(logits, [−1, E]), MoEFc1(Concat(Wg, Wu)), none, MoEFc2(Wd); swiglu, k,
/// normalize)`.
fn dense_moe(g: &mut OnnxGraph, _: Site<'_>, ids: [Id; 9]) -> Option<Id> {
    let [_, wg, wu, wd, ..] = ids;
    let (gate, up) = (stack_parts(g, wg, 1)?, stack_parts(g, wu, 1)?);
    let down = stack_parts(g, wd, 0)?;
    let b = read_block(g, ids)?;
    let e = b.experts;
    let mut em = Emit::new(g);
    let stack = em.concat(&[gate, up].concat(), 1);
    let experts = [("experts", AttrValue::Int(e))];
    let down = match down[..] {
        [one] => one,
        _ => em.concat(&down, 0),
    };
    let fc1 = em.op("ai.mobius::MoEFc1", &[stack], &experts);
    let fc2 = em.op("ai.mobius::MoEFc2", &[down], &experts);
    let router = em.reshape(b.routing.logits, &[-1, e]);
    let none = em.g.add(Onnx::Absent);
    let [alpha, beta, activation, fusion, limit] = swiglu_attrs();
    let normalize = i64::from(b.routing.normalize);
    let attrs = [
        alpha,
        beta,
        activation,
        ("k", AttrValue::Int(b.routing.k)),
        ("normalize_routing_weights", AttrValue::Int(normalize)),
        fusion,
        limit,
    ];
    Some(em.op("com.microsoft::MoE", &[b.x, router, fc1, none, fc2], &attrs))
}

/// The initializers a 2-D stack class `w` is made of: `[w]` for an initializer, the parts
/// of a `Concat` of initializers along `axis` (0 or 1; as `recognize/moe_loop.rules` stacks
/// the experts of an export), else `None`. A Concat of the parts of several stacks along
/// the same axis is the Concat of the stacks.
fn stack_parts(g: &OnnxGraph, w: Id, axis: i64) -> Option<Vec<Id>> {
    if is_init(g, w) {
        return Some(vec![w]);
    }
    crate::opt::query::ops_named(g, w, "Concat")
        .into_iter()
        .find_map(|c| {
            let a = int_attr(g, c.attr_id("axis")?)?;
            let parts = c.input_ids();
            let ok = (a == axis || a == axis - 2)
                && parts
                    .iter()
                    .all(|&p| is_init(g, p) && matrix(g, p).is_some());
            ok.then(|| parts.to_vec())
        })
}

/// `dense-qmoe`.
pub(super) const DENSE_QMOE: Applier<9> = Applier::new(
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
    dense_qmoe,
);

/// The values and scales `(q, scales, block)` of class `id` when it is
/// `DequantizeLinear(q, scales; axis 0, block)` of a signed 4-bit initializer `q` `[K, N]`
/// without zero points (what `--quant int4` gives a weight), scales `[K/block, N]` of
/// `dtype`, K a multiple of the block (a power of two from 16 to 256).
fn dequantized_int4(g: &OnnxGraph, id: Id, dtype: DType) -> Option<(Id, Id, i64)> {
    use super::matmul_nbits::is_weight;
    let dq = find_op(g, id, "DequantizeLinear")?;
    let (q, scales) = match dq.input_ids() {
        [q, s] => (*q, *s),
        [q, s, zp] if g[*zp].nodes.iter().any(|n| matches!(n, Onnx::Absent)) => (*q, *s),
        _ => return None,
    };
    let int = |name: &str, default: i64| match dq.attr_id(name).and_then(|a| g[a].data.attr()) {
        None | Some(AttrValue::Unset) => Some(default),
        Some(AttrValue::Int(v)) => Some(*v),
        _ => None,
    };
    let (axis, block, odt) = (
        int("axis", 1)?,
        int("block_size", 0)?,
        int("output_dtype", 0)?,
    );
    let (k, n) = matrix(g, q)?;
    let ok = matches!(axis, 0 | -2)
        && (16..=256).contains(&block)
        && block.count_ones() == 1
        && k % block == 0
        && (odt == 0 || DType::from_onnx_code(odt as i32) == Some(dtype))
        && g[q].data.tensor()?.dtype? == DType::I4
        && g[scales].data.tensor()?.dtype? == dtype
        && matrix(g, scales)? == (k / block, n)
        && is_weight(g, q)
        && is_weight(g, scales);
    ok.then_some((q, scales, block))
}

/// The dense block [`read_block`] reads with its stacks `--quant int4` weights
/// ([`dequantized_int4`], one block size, dividing H and I: every block within one expert)
/// and renormalised top-k weights → `com.microsoft::QMoE(x, Reshape(logits, [−1, E]),
/// QMoEFc1Weight(Concat(qg, qu)), MoEFc1(Concat(sg, su)), none, QMoEFc2Weight(qd),
/// MoEFc2(sd); swiglu, k, 4 bits, block_size)`: each expert's values packed as MatMulNBits
/// packs them (zero point 8), its scales `[E, N, K/block]`, re-laid out at save time.
/// `accuracy_level` 0 whatever MatMulNBits' is: at 4 onnxruntime's CPU kernel quantizes the
/// activations to int8 too, no longer the dequantized block (the mixtral fixture's
/// worst-position logit cosine against the fake-quantized reference, f16: 0.99902 vs 0.99920
/// at 0). Unnormalised top-k weights stay dense: onnxruntime's CPU QMoE (1.32)
/// renormalises whatever `normalize_routing_weights` says.
fn dense_qmoe(g: &mut OnnxGraph, _: Site<'_>, ids: [Id; 9]) -> Option<Id> {
    let [x, wg, wu, wd, ..] = ids;
    let dtype = g[x].data.tensor()?.dtype?;
    let (qg, sg, block) = dequantized_int4(g, wg, dtype)?;
    let (qu, su, up_block) = dequantized_int4(g, wu, dtype)?;
    let (qd, sd, down_block) = dequantized_int4(g, wd, dtype)?;
    let b = read_block(g, ids)?;
    let (e, i) = (b.experts, b.width);
    let h = matrix(g, qg)?.0;
    if up_block != block || down_block != block || i % block != 0 || !b.routing.normalize {
        return None;
    }
    let mut em = Emit::new(g);
    let experts = ("experts", AttrValue::Int(e));
    let packing = |k: i64, n: i64| qmoe_packing(k, n, block, e);
    let values = em.concat(&[qg, qu], 1);
    let fc1 = em.op("ai.mobius::QMoEFc1Weight", &[values], &packing(h, 2 * i));
    let scales = em.concat(&[sg, su], 1);
    let fc1_scales = em.op(
        "ai.mobius::MoEFc1",
        &[scales],
        std::slice::from_ref(&experts),
    );
    let fc2 = em.op("ai.mobius::QMoEFc2Weight", &[qd], &packing(i, h));
    let fc2_scales = em.op("ai.mobius::MoEFc2", &[sd], &[experts]);
    let router = em.reshape(b.routing.logits, &[-1, e]);
    let none = em.g.add(Onnx::Absent);
    let mut attrs = swiglu_attrs().to_vec();
    attrs.extend([
        ("accuracy_level", AttrValue::Int(0)),
        ("block_size", AttrValue::Int(block)),
        ("expert_weight_bits", AttrValue::Int(4)),
        ("k", AttrValue::Int(b.routing.k)),
        ("normalize_routing_weights", AttrValue::Int(1)),
    ]);
    Some(em.op(
        "com.microsoft::QMoE",
        &[b.x, router, fc1, fc1_scales, none, fc2, fc2_scales],
        &attrs,
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
    let (dtype, h, swiglu) = moe_call_input(g, x, activation)?;
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
    let routing = Routing {
        logits: router,
        k,
        normalize: normalize == 1,
    };
    dense_body(&mut em, x, routing, [wg, wu, wd], (e, i), dtype)
}

/// The dense block [`read_block`] reads, over the stacks `[wg, wu, wd]` of `e` experts of
/// width `i` and the router logits `[B·S, E]` (read as `[B, S, E]`) of `routing`.
fn dense_body(
    em: &mut Emit<'_>,
    x: Id,
    routing: Routing,
    [wg, wu, wd]: [Id; 3],
    (e, i): (i64, i64),
    dtype: DType,
) -> Option<Id> {
    let tokens = em.shape(x, 0, 2);
    let width = em.ints(&[e]);
    let shape = em.concat(&[tokens, width], 0);
    let logits = em.op("Reshape", &[routing.logits, shape], &[]);
    let routing = routing_matrix(em, logits, (e, routing.k), routing.normalize, dtype)?;
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

/// `qmoe-to-dense`.
pub(super) const QMOE_TO_DENSE: Applier<19> = Applier::new(
    [
        "?x",
        "?router",
        "?fc1",
        "?fc1_scales",
        "?fc2",
        "?fc2_scales",
        "?level",
        "?alpha",
        "?beta",
        "?activation",
        "?block",
        "?bits",
        "?k",
        "?normalize",
        "?quant",
        "?fusion",
        "?limit",
        "?sparse_mixer",
        "?prepacked",
    ],
    qmoe_to_dense,
);

/// `com.microsoft::QMoE(x, router, fc1, fc1_scales, none, fc2, fc2_scales)` as
/// [`dense_qmoe`] writes it (interleaved plain SwiGLU experts, 4-bit values without zero
/// points, block-wise scales, renormalised top-k weights, any `accuracy_level`) → the dense
/// block over `DequantizeLinear(values, scales; axis 0, block)` stacks, the values read back
/// from the packed experts (`ai.mobius::QMoEGateValues`, `QMoEUpValues`, `QMoEDownValues`:
/// signed 4-bit, MatMulNBits' zero point 8 taken off) and the scales as the float experts'
/// weights are (`ai.mobius::MoEGateStack`, `MoEUpStack`, `MoEDownStack`). Fires for a 3-D
/// f32 or f16 `x` `[B, S, H]`, u8 initializers fc1 `[E, 2·I, H/2]` and fc2 `[E, H, I/2]`,
/// scales of x's dtype `[E, 2·I, H/block]` and `[E, H, I/block]`.
fn qmoe_to_dense(
    g: &mut OnnxGraph,
    _: Site<'_>,
    [x, router, fc1, fc1_scales, fc2, fc2_scales, _level, alpha, beta, activation, block, bits, k, normalize, quant, fusion, limit, sparse_mixer, prepacked]: [Id;
        19],
) -> Option<Id> {
    let (dtype, h, swiglu) = moe_call_input(g, x, activation)?;
    let int_values = match g[quant].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Str(s)) => s.as_str() == "int",
        _ => false,
    };
    let plain = int_values
        && float_or(g, alpha, 1.0)? == 1.0
        && float_or(g, beta, 0.0)? == 0.0
        && float_or(g, limit, f32::INFINITY)? == f32::INFINITY;
    let int = |id: Id, default: i64| match g[id].data.attr() {
        Some(AttrValue::Unset) => Some(default),
        Some(AttrValue::Int(v)) => Some(*v),
        _ => None,
    };
    let (k, block) = (int(k, 1)?, int(block, 0)?);
    let flags_ok = swiglu
        && plain
        && int(fusion, 0)? == 1
        && int(sparse_mixer, 0)? == 0
        && int(normalize, 0)? == 1
        && int(bits, 4)? == 4
        && int(prepacked, -1)? != 1
        && (16..=256).contains(&block)
        && block.count_ones() == 1;
    if !flags_ok || h % block != 0 {
        return None;
    }
    let [e, rows, packed_h] = init_shape(g, fc1, DType::U8)?[..] else {
        return None;
    };
    let i = rows / 2;
    let fits = packed_h * 2 == h
        && rows == 2 * i
        && i % block == 0
        && (1..=e).contains(&k)
        && init_shape(g, fc1_scales, dtype)? == [e, rows, h / block]
        && init_shape(g, fc2, DType::U8)? == [e, h, i / 2]
        && init_shape(g, fc2_scales, dtype)? == [e, h, i / block];
    let r = g[router].data.tensor()?;
    let router_ok =
        r.dtype? == dtype && matches!(r.shape.as_deref(), Some([_, n]) if n.known() == Some(e));
    if !fits || !router_ok {
        return None;
    }
    let mut em = Emit::new(g);
    let experts = ("experts", AttrValue::Int(e));
    let packing = |k: i64, n: i64| qmoe_packing(k, n, block, e);
    let stack = |em: &mut Emit<'_>, values: Id, scales: Id| {
        em.op(
            "DequantizeLinear",
            &[values, scales],
            &[
                ("axis", AttrValue::Int(0)),
                ("block_size", AttrValue::Int(block)),
            ],
        )
    };
    let qg = em.op("ai.mobius::QMoEGateValues", &[fc1], &packing(h, rows));
    let sg = em.op(
        "ai.mobius::MoEGateStack",
        &[fc1_scales],
        std::slice::from_ref(&experts),
    );
    let wg = stack(&mut em, qg, sg);
    let qu = em.op("ai.mobius::QMoEUpValues", &[fc1], &packing(h, rows));
    let su = em.op(
        "ai.mobius::MoEUpStack",
        &[fc1_scales],
        std::slice::from_ref(&experts),
    );
    let wu = stack(&mut em, qu, su);
    let qd = em.op("ai.mobius::QMoEDownValues", &[fc2], &packing(i, h));
    let sd = em.op("ai.mobius::MoEDownStack", &[fc2_scales], &[experts]);
    let wd = stack(&mut em, qd, sd);
    let routing = Routing {
        logits: router,
        k,
        normalize: true,
    };
    dense_body(&mut em, x, routing, [wg, wu, wd], (e, i), dtype)
}

/// The routing matrix `[B, S, E, 1]` in `dtype` of router `logits` `[B, S, E]` (in `dtype`),
/// as [`crate::models::components::sparse_moe`] builds it (the form [`routing`] reads).
pub(super) fn routing_matrix(
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
    let (weights, picked) = em.top_k(probs, k);
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

/// `(t, w)` when class `id` is `Mul` of the one-hot rows of the picked experts —
/// `Cast(Equal(Unsqueeze(i, −1), [0..experts)) → dtype)` with `i` output 1 of TopK tuple `t` —
/// and the weights column `Unsqueeze(w, −1)`, in either order.
pub(super) fn one_hot_times_weights(
    g: &OnnxGraph,
    id: Id,
    dtype: DType,
    experts: i64,
) -> Option<(Id, Id)> {
    let mul = find_op(g, id, "Mul")?;
    let [a, b] = mul.input_ids() else {
        return None;
    };
    let one_hot = |id: Id| {
        let equal = find_op(g, cast_to(g, id, dtype)?, "Equal")?;
        let [picked, ids] = equal.input_ids() else {
            return None;
        };
        let want: Vec<i64> = (0..experts).collect();
        (const_ints(g, *ids)? == want).then_some(())?;
        projected(g, unsqueezed_last(g, *picked, 3)?, 1)
    };
    match (one_hot(*a), one_hot(*b)) {
        (Some(t), _) => Some((t, unsqueezed_last(g, *b, 3)?)),
        (None, Some(t)) => Some((t, unsqueezed_last(g, *a, 3)?)),
        (None, None) => None,
    }
}

/// `(dtype, hidden, swiglu)` of a MoE-family call on `x`: `x` a 3-D f32 or f16 tensor of a
/// known hidden size, and whether `activation` names SwiGLU. The inline rules expand only
/// such calls.
pub(super) fn moe_call_input(g: &OnnxGraph, x: Id, activation: Id) -> Option<(DType, i64, bool)> {
    let t = g[x].data.tensor()?;
    let dtype = t.dtype?;
    let dims = t.shape.as_ref()?;
    if !matches!(dtype, DType::F32 | DType::F16) || dims.len() != 3 {
        return None;
    }
    let swiglu =
        matches!(g[activation].data.attr(), Some(AttrValue::Str(s)) if s.as_str() == "swiglu");
    Some((dtype, dims[2].known()?, swiglu))
}

/// The attributes of a save-time relayout between a stack of `experts` `[k, n]` matrices of
/// signed 4-bit values in blocks of `block` along k and QMoE's packed experts (MatMulNBits'
/// packing, expert by expert).
fn qmoe_packing(k: i64, n: i64, block: i64, experts: i64) -> [(&'static str, AttrValue); 5] {
    [
        ("K", AttrValue::Int(k)),
        ("N", AttrValue::Int(n)),
        ("bits", AttrValue::Int(4)),
        ("block_size", AttrValue::Int(block)),
        ("experts", AttrValue::Int(experts)),
    ]
}
