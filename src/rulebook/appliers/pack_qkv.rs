//! The appliers of `fusion/pack_qkv.rules` (PackQKV): the q/k/v projections of a
//! GroupQueryAttention, `MatMul(h, W)` (+ bias) over initializers (or their transposes), → one
//! MatMul (+ Add) over the weights (and biases) concatenated along the output axis, read as packed q|k|v; and
//! q/k/v that are the parts of one Split → the tensor split, read as packed q|k|v.

use egg::Id;

use crate::ops::schema;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{vars, Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::{Onnx, OpNode};
use crate::opt::query::{const_ints, find_op, int_attr};

/// `pack-qkv`.
pub(super) const PACK_QKV: Applier<4> = Applier::new(["?h", "?wq", "?wk", "?wv"], pack_qkv);

/// The variables of the q/k/v packings after those of q, k and v's producers: the
/// GroupQueryAttention's inputs from past_key on, then its attributes.
pub(super) const GQA_REST: [&str; 15] = [
    "?pk",
    "?pv",
    "?seqlens",
    "?total",
    "?cos",
    "?sin",
    "?rotary",
    "?kvh",
    "?window",
    "?heads",
    "?qk",
    "?interleaved",
    "?scale",
    "?smooth",
    "?softcap",
];

/// `split-qkv`.
pub(super) const SPLIT_QKV: Applier<18> =
    Applier::new(vars(["?x", "?axis", "?n"], GQA_REST), split_qkv);

/// `split-qkv-with-sizes`.
pub(super) const SPLIT_QKV_WITH_SIZES: Applier<19> = Applier::new(
    vars(["?x", "?sizes", "?axis", "?n"], GQA_REST),
    split_qkv_with_sizes,
);

/// `pack-qkv-with-bias`.
pub(super) const PACK_QKV_WITH_BIAS: Applier<7> = Applier::new(
    ["?h", "?wq", "?wk", "?wv", "?bq", "?bk", "?bv"],
    pack_qkv_with_bias,
);

/// The initializer name held by class `id`, if any.
fn init_name(g: &OnnxGraph, id: Id) -> Option<egg::Symbol> {
    g[id].nodes.iter().find_map(|n| match n {
        Onnx::Init(s) => Some(*s),
        _ => None,
    })
}

/// `Concat(parts; axis)` of initializers (folded into one initializer when saved).
fn concat_inits(g: &mut OnnxGraph, parts: [Id; 3], axis: i64) -> Option<Id> {
    if parts.iter().any(|&p| init_name(g, p).is_none()) {
        return None;
    }
    Some(Emit::new(g).concat(&parts, axis))
}

/// Three `[K, N_i]` projection weights joined along N: initializers concatenated, the
/// transposes of `[N_i, K]` initializers as the transpose of those concatenated along N, or weights
/// block-quantized along K (`DequantizeLinear(q, scales[, zp]; axis 0)` of initializers, the
/// same attributes and zero-point presence) as the dequantization of the concatenated values,
/// scales and zero points — quantizing a column never looks at another column, so the two
/// are equal.
fn concat_weights(g: &mut OnnxGraph, parts: [Id; 3]) -> Option<Id> {
    if parts.iter().all(|&p| init_name(g, p).is_some()) {
        return concat_inits(g, parts, 1);
    }
    if let Some(stored) = transposed_inits(g, parts) {
        // Wᵢ = Transpose(Sᵢ): Concat(W₁, W₂, W₃; axis 1) = Transpose(Concat(S₁, S₂, S₃; axis 0)).
        let joined = concat_inits(g, stored, 0)?;
        let mut e = Emit::new(g);
        return Some(e.op(
            "Transpose",
            &[joined],
            &[("perm", AttrValue::Ints(vec![1, 0]))],
        ));
    }
    let nodes: Vec<OpNode> = parts
        .iter()
        .map(|&p| find_op(g, p, "DequantizeLinear"))
        .collect::<Option<_>>()?;
    let first = &nodes[0];
    let same = nodes.iter().all(|n| {
        n.inputs == first.inputs
            && n.attr_ids() == first.attr_ids()
            && n.input_ids().iter().all(|&i| init_name(g, i).is_some())
    });
    let axis = g[first.attr_id("axis")?].data.attr()?.int();
    if !same || !matches!(axis, Some(0 | -2)) {
        return None;
    }
    let joined: Vec<Id> = (0..first.inputs)
        .map(|i| concat_inits(g, [0, 1, 2].map(|p| nodes[p].input_ids()[i]), 1))
        .collect::<Option<_>>()?;
    let mut node = first.clone();
    node.children[..first.inputs].copy_from_slice(&joined);
    Some(g.add(Onnx::Op(node)))
}

/// The initializers `[S₁, S₂, S₃]` when each part is `Transpose(Sᵢ)` (perm `[1, 0]` or unset)
/// of a 2-D initializer: the `[out, in]` Linear weights an export transposes in the graph
/// (torch.onnx dynamo with `optimize=False`).
fn transposed_inits(g: &OnnxGraph, parts: [Id; 3]) -> Option<[Id; 3]> {
    let mut stored = parts;
    for (slot, &part) in stored.iter_mut().zip(&parts) {
        let node = find_op(g, part, "Transpose")?;
        let &[w] = node.input_ids() else {
            return None;
        };
        let swaps = match node.attr_id("perm").and_then(|a| g[a].data.attr()) {
            Some(AttrValue::Ints(p)) => p[..] == [1, 0],
            Some(AttrValue::Unset) | None => true,
            _ => false,
        };
        let rank2 = g[w].data.tensor().and_then(|t| t.rank()) == Some(2);
        if !swaps || !rank2 || init_name(g, w).is_none() {
            return None;
        }
        *slot = w;
    }
    Some(stored)
}

/// The GroupQueryAttention e-node of class `id` (children: 9 inputs, then its attributes).
fn gqa_node(g: &OnnxGraph, id: Id) -> Option<OpNode> {
    find_op(g, id, "com.microsoft::GroupQueryAttention").filter(|o| o.inputs == 9)
}

/// The same GroupQueryAttention reading one packed q|k|v input (key and value absent).
fn packed_gqa(g: &mut OnnxGraph, gqa: &OpNode, packed: Id) -> Id {
    let absent = g.add(Onnx::Absent);
    let mut children = gqa.children.clone();
    children[0] = packed;
    children[1] = absent;
    children[2] = absent;
    let mut node = gqa.clone();
    node.children = children;
    g.add(Onnx::Op(node))
}

/// Reads `?h ?wq ?wk ?wv` of a GroupQueryAttention over `MatMul(?h, W)` projections of
/// initializers: one MatMul with the weights concatenated along the output axis.
fn pack_qkv(g: &mut OnnxGraph, site: Site<'_>, [h, wq, wk, wv]: [Id; 4]) -> Option<Id> {
    let gqa = gqa_node(g, site.class)?;
    let weights = concat_weights(g, [wq, wk, wv])?;
    let packed = Emit::new(g).bin("MatMul", h, weights);
    Some(packed_gqa(g, &gqa, packed))
}

/// [`pack_qkv`] with `Add(MatMul(?h, W), b)` projections: the biases are concatenated too.
fn pack_qkv_with_bias(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [h, wq, wk, wv, bq, bk, bv]: [Id; 7],
) -> Option<Id> {
    let gqa = gqa_node(g, site.class)?;
    let weights = concat_weights(g, [wq, wk, wv])?;
    let biases = concat_inits(g, [bq, bk, bv], 0)?;
    let mut e = Emit::new(g);
    let product = e.bin("MatMul", h, weights);
    let packed = e.bin("Add", product, biases);
    Some(packed_gqa(g, &gqa, packed))
}

/// The GroupQueryAttention of `rest` (its inputs from past_key on and attributes, as
/// [`GQA_REST`] lists them) over packed q|k|v `x`, when `x` `[B, S, (Hq + 2·Hkv)·D]` is split
/// on its last axis (`axis`) into the widths `sizes` (`None`: equal parts, `num_outputs` `n`
/// 3 or unset) that are exactly Hq·D, Hkv·D, Hkv·D.
fn split_packed(
    g: &mut OnnxGraph,
    x: Id,
    sizes: Option<Id>,
    axis: Id,
    n: Id,
    rest: &[Id],
) -> Option<Id> {
    let [pk, _, _, _, _, _, _, kvh, _, heads, ..] = rest else {
        return None;
    };
    let d = g[*pk].data.tensor()?.shape.as_ref()?.get(3)?.known()?;
    let (hq, hkv) = (int_attr(g, *heads)?, int_attr(g, *kvh)?);
    let dims = g[x].data.tensor()?.shape.clone()?;
    let width = match dims.as_slice() {
        [_, _, w] => w.known()?,
        _ => return None,
    };
    let last = matches!(g[axis].data.attr(), Some(AttrValue::Int(2 | -1)));
    let parts = match sizes {
        Some(sizes) => const_ints(g, sizes)?,
        None => {
            let three = matches!(g[n].data.attr(), Some(AttrValue::Unset | AttrValue::Int(3)));
            if !three || width % 3 != 0 {
                return None;
            }
            vec![width / 3; 3]
        }
    };
    if !last || parts != [hq * d, hkv * d, hkv * d] || width != (hq + 2 * hkv) * d {
        return None;
    }
    let absent = g.add(Onnx::Absent);
    let mut children = vec![x, absent, absent];
    children.extend_from_slice(rest);
    let attrs = schema("com.microsoft::GroupQueryAttention")?;
    Some(g.add(Onnx::op(
        "com.microsoft::GroupQueryAttention",
        attrs,
        9,
        3,
        children,
    )))
}

/// Reads `split-qkv`: q, k, v the equal parts of `Split(x; axis, num_outputs)`.
fn split_qkv(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 18]) -> Option<Id> {
    let [x, axis, n, rest @ ..] = vars;
    split_packed(g, x, None, axis, n, &rest)
}

/// Reads `split-qkv-with-sizes`: q, k, v the parts of `Split(x, sizes; axis)`.
fn split_qkv_with_sizes(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 19]) -> Option<Id> {
    let [x, sizes, axis, n, rest @ ..] = vars;
    split_packed(g, x, Some(sizes), axis, n, &rest)
}
