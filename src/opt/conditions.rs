//! Side conditions and custom appliers that rule files name, registered here by name.

use egg::{Id, Subst, Var};

use super::analysis::OnnxGraph;
use super::emit::Emit;
use super::fingerprint::check_union;
use super::infer::literal_ints;
use super::lang::{AttrValue, Onnx};
use super::schema::schema;
use crate::ir::DType;

/// A side condition over the match's variables (given in the order the rule lists them).
pub type ConditionFn = fn(&OnnxGraph, &Subst, &[Var]) -> bool;

/// A custom replacement: the class to union with the match, or `None` to leave it. It reads
/// the variables named in its registration; further unions it makes itself (other outputs of
/// a fused op) go through [`check_union`] under the rule's name (the last argument).
pub type ApplierFn = fn(&mut OnnxGraph, Id, &Subst, &str) -> Option<Id>;

const CONDITIONS: &[(&str, ConditionFn)] = &[
    ("attr-is-set", attr_is_set),
    (
        "centered-variance-plus-eps",
        super::recognize::centered_variance_plus_eps,
    ),
    ("f32-round-trip", super::recognize::f32_round_trip),
    ("is-one", super::recognize::is_one),
    ("mean-over-last-axis", super::recognize::mean_over_last_axis),
    (
        "mean-square-plus-eps",
        super::recognize::mean_square_plus_eps,
    ),
    ("scale-on-last-axis", super::recognize::scale_on_last_axis),
    ("unit-scale", super::recognize::unit_scale),
    ("bias-on-last-axis", bias_on_last_axis),
    ("bias-of-width", bias_of_width),
    ("gelu-is-exact", gelu_is_exact),
    ("cast-to-own-dtype", cast_to_own_dtype),
    ("erf-gelu-constants", erf_gelu_constants),
    ("normalizes-last-axis", normalizes_last_axis),
    ("rank-2-or-3", rank_2_or_3),
    ("reshape-keeps-shape", reshape_keeps_shape),
    ("same-rank", same_rank),
    ("stash-is-float", stash_is_float),
    ("tanh-gelu-constants", tanh_gelu_constants),
];

/// Appliers with the pattern variables each reads.
const APPLIERS: &[(&str, &[&str], ApplierFn)] = &[
    (
        "rms-norm-unit",
        &["?x", "?v"],
        super::recognize::rms_norm_unit,
    ),
    (
        "layer-norm-unit",
        &["?x", "?m", "?v"],
        super::recognize::layer_norm_unit,
    ),
    (
        "rms-norm-without-casts",
        &["?x", "?eps"],
        super::recognize::rms_norm_without_casts,
    ),
    (
        "skip-layer-norm",
        &["?a", "?b", "?w", "?eps"],
        skip_layer_norm,
    ),
    (
        "attention-to-gqa",
        &[
            "?q", "?k", "?v", "?mask", "?pk", "?pv", "?causal", "?kvh", "?qnh", "?scale",
            "?softcap",
        ],
        attention_to_gqa,
    ),
    ("pack-qkv", &["?h", "?wq", "?wk", "?wv"], pack_qkv),
    (
        "matmul-nbits",
        &["?x", "?q", "?s", "?zp", "?axis", "?block", "?odt"],
        super::nbits::matmul_nbits,
    ),
    (
        "matmul-nbits-without-zero-points",
        &["?x", "?q", "?s", "?axis", "?block", "?odt"],
        super::nbits::matmul_nbits,
    ),
    (
        "matmul-nbits-to-dequantize",
        &["?x", "?b", "?s", "?k", "?n", "?bits", "?block"],
        super::from_nbits::matmul_nbits_to_dequantize,
    ),
    (
        "matmul-nbits-with-zero-points-to-dequantize",
        &["?x", "?b", "?s", "?zp", "?k", "?n", "?bits", "?block"],
        super::from_nbits::matmul_nbits_to_dequantize,
    ),
    (
        "matmul-nbits-with-bias-to-dequantize",
        &[
            "?x", "?b", "?s", "?zp", "?bias", "?k", "?n", "?bits", "?block",
        ],
        super::from_nbits::matmul_nbits_to_dequantize,
    ),
    (
        "pack-qkv-with-bias",
        &["?h", "?wq", "?wk", "?wv", "?bq", "?bk", "?bv"],
        pack_qkv_with_bias,
    ),
    (
        "rotary-attention-to-gqa",
        &[
            "?q", "?k", "?v", "?mask", "?pk", "?pv", "?cos", "?sin", "?qi", "?ki", "?qh", "?kh",
            "?qrd", "?causal", "?kvh", "?qnh", "?scale", "?softcap",
        ],
        rotary_attention_to_gqa,
    ),
    (
        "skip-simplified-layer-norm",
        &["?a", "?b", "?w", "?eps"],
        skip_simplified_layer_norm,
    ),
    (
        "compose-transposes",
        &["?x", "?p", "?q"],
        compose_transposes,
    ),
    (
        "decompose-rotary",
        &["?x", "?cos", "?sin", "?inter", "?heads", "?rd"],
        super::lowering::rotary::decompose_rotary,
    ),
    (
        "attention-output",
        &[
            "?q", "?k", "?v", "?mask", "?causal", "?kvh", "?qnh", "?mode", "?scale", "?softcap",
        ],
        super::lowering::attention::attention_output,
    ),
    (
        "attention-present-key",
        &["?q", "?k", "?v", "?kvh", "?qnh", "?mode"],
        super::lowering::attention::attention_present_key,
    ),
    (
        "attention-present-value",
        &["?q", "?k", "?v", "?kvh", "?qnh", "?mode"],
        super::lowering::attention::attention_present_value,
    ),
    (
        "rank4-rms-norm-via-rank3",
        &["?x", "?w", "?eps", "?stash"],
        super::lowering::rms_norm::rank4_rms_norm_via_rank3,
    ),
    (
        "range-to-cumsum",
        &["?start", "?limit", "?delta"],
        super::lowering::range::range_to_cumsum,
    ),
];

/// The condition registered under `name`.
pub fn condition(name: &str) -> Option<ConditionFn> {
    CONDITIONS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The applier registered under `name`, with the variables it reads.
pub fn applier(name: &str) -> Option<(ApplierFn, &'static [&'static str])> {
    APPLIERS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, vars, f)| (*f, *vars))
}

fn var(name: &str) -> Var {
    name.parse().expect("static variable names are valid")
}

/// `?x ?to`: casting `?x` to type code `?to` does not change its dtype.
fn cast_to_own_dtype(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x, to] = vars else { return false };
    let dtype = g[s[*x]].data.tensor().and_then(|t| t.dtype);
    let target = g[s[*to]]
        .data
        .attr()
        .and_then(AttrValue::int)
        .and_then(|c| DType::from_onnx_code(c as i32));
    dtype.is_some() && dtype == target
}

/// `?x ?shape`: `?shape` is a constant equal to `?x`'s fully known static shape.
fn reshape_keeps_shape(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x, shape] = vars else { return false };
    let current = g[s[*x]].data.tensor().and_then(|t| t.static_shape());
    let target = g[s[*shape]].data.konst.as_ref().and_then(literal_ints);
    matches!((current, target), (Some(c), Some(t)) if c == t)
}

/// The permutation of a Transpose's `perm` attribute class (reversed axes when unset).
fn perm_of(g: &OnnxGraph, attr: Id, rank: usize) -> Option<Vec<i64>> {
    match g[attr].data.attr()? {
        AttrValue::Ints(p) if p.len() == rank => Some(p.clone()),
        AttrValue::Unset => Some((0..rank as i64).rev().collect()),
        _ => None,
    }
}

/// Reads `?x ?p ?q` of `(Transpose (Transpose ?x ?p) ?q)`: one Transpose with the composed
/// permutation, or `?x` itself when the two cancel.
fn compose_transposes(g: &mut OnnxGraph, _matched: Id, s: &Subst, _rule: &str) -> Option<Id> {
    let (x, p, q) = (s[var("?x")], s[var("?p")], s[var("?q")]);
    let rank = g[x].data.tensor()?.rank()?;
    let (p, q) = (perm_of(g, p, rank)?, perm_of(g, q, rank)?);
    let composed: Vec<i64> = q
        .iter()
        .map(|&i| p.get(i as usize).copied())
        .collect::<Option<_>>()?;
    if composed.iter().enumerate().all(|(i, &v)| v == i as i64) {
        return Some(x);
    }
    Some(Emit::new(g).transpose(x, &composed))
}

/// `?attr`: the attribute is set on the node.
fn attr_is_set(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [a] = vars else { return false };
    g[s[*a]].data.attr().is_some_and(|v| *v != AttrValue::Unset)
}

/// `?a ?b`: both ranks are known and equal (no broadcasting between them).
fn same_rank(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [a, b] = vars else { return false };
    let rank = |v: &Var| g[s[*v]].data.tensor().and_then(|t| t.rank());
    matches!((rank(a), rank(b)), (Some(x), Some(y)) if x == y)
}

/// `?axis ?x`: a normalization `axis` (unset = −1) that names the last axis of `?x`.
fn normalizes_last_axis(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [axis, x] = vars else { return false };
    let rank = g[s[*x]].data.tensor().and_then(|t| t.rank());
    match (g[s[*axis]].data.attr(), rank) {
        (Some(AttrValue::Unset), _) => true,
        (Some(AttrValue::Int(-1)), _) => true,
        (Some(AttrValue::Int(a)), Some(r)) => *a == r as i64 - 1,
        _ => false,
    }
}

/// `?stash`: statistics are computed in f32 (`stash_type` unset or 1), as the fused kernel does.
fn stash_is_float(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [stash] = vars else { return false };
    matches!(
        g[s[*stash]].data.attr(),
        Some(AttrValue::Unset) | Some(AttrValue::Int(1))
    )
}

/// Reads `?a ?b ?w ?eps` of `(RMSNormalization (Add ?a ?b) ?w ?axis ?eps ?stash)`: one
/// `com.microsoft::SkipSimplifiedLayerNormalization(a, b, w)` whose output 0 is the norm and
/// whose output 3 (the sum) is united with the Add, so the Add's other consumers read it.
fn skip_simplified_layer_norm(
    g: &mut OnnxGraph,
    _matched: Id,
    s: &Subst,
    rule: &str,
) -> Option<Id> {
    let norm = "com.microsoft::SkipSimplifiedLayerNormalization";
    fuse_skip_norm(g, s, rule, norm, None)
}

/// The shared part of the Skip*Normalization fusions: reads `?a ?b ?w ?eps` of a norm over
/// `Add(?a, ?b)`, adds `norm_op(a, b, w[, beta]; epsilon)` with 4 outputs, unites output 3
/// (the sum) with the Add and returns output 0 (the norm). An unset epsilon is the standard
/// norms' default 1e-5 (the contrib ops' own default differs, so it is always written).
fn fuse_skip_norm(
    g: &mut OnnxGraph,
    s: &Subst,
    rule: &str,
    norm_op: &str,
    beta: Option<Id>,
) -> Option<Id> {
    let (a, b, w, eps) = (s[var("?a")], s[var("?b")], s[var("?w")], s[var("?eps")]);
    let epsilon = match g[eps].data.attr()? {
        AttrValue::Float(bits) => *bits,
        AttrValue::Unset => 1e-5f32.to_bits(),
        _ => return None,
    };
    let add = g.lookup(Onnx::op("Add", &[], 2, 1, vec![a, b]))?;
    let eps = g.add(Onnx::Attr(AttrValue::Float(epsilon)));
    let mut children = vec![a, b, w];
    children.extend(beta);
    let inputs = children.len();
    children.push(eps);
    let fused = g.add(Onnx::op(norm_op, &["epsilon"], inputs, 4, children));
    let norm = g.add(Onnx::Get {
        index: 0,
        tuple: [fused],
    });
    let sum = g.add(Onnx::Get {
        index: 3,
        tuple: [fused],
    });
    if check_union(g, add, sum, rule) {
        g.union(add, sum);
    }
    Some(norm)
}

/// The first e-node of class `id` that is an op named `op`.
fn find_op(g: &OnnxGraph, id: Id, op: &str) -> Option<super::lang::OpNode> {
    g[id]
        .nodes
        .iter()
        .find_map(|n| n.as_op().filter(|o| o.op.as_str() == op).cloned())
}

/// Whether class `id` holds the graph input `name`.
fn is_input(g: &OnnxGraph, id: Id, name: Option<&str>) -> bool {
    g[id]
        .nodes
        .iter()
        .any(|n| matches!(n, Onnx::Input(s) if name.is_none_or(|w| s.as_str() == w)))
}

/// Whether `mask` is exactly the boolean padding mask built from the `attention_mask` input:
/// `Unsqueeze(Expand(Unsqueeze(Cast(attention_mask → bool), [1]), [B, S, T]), [1])`.
fn is_padding_mask(g: &OnnxGraph, mask: Id) -> bool {
    let step = |id: Id, op: &str| find_op(g, id, op).map(|o| o.input_ids()[0]);
    let to_bool = |id: Id| {
        find_op(g, id, "Cast").and_then(|c| {
            let to = int_attr(g, c.attr_id("to")?)?;
            (to == DType::Bool.onnx_code() as i64).then(|| c.input_ids()[0])
        })
    };
    let chain = unsqueezed(g, mask, 1)
        .and_then(|x| step(x, "Expand"))
        .and_then(|x| unsqueezed(g, x, 1))
        .and_then(to_bool);
    chain.is_some_and(|x| is_input(g, x, Some("attention_mask")))
}

/// The table and position classes of `Gather(table, position_ids; axis 0)` in class `id`.
fn gathered_table(g: &OnnxGraph, id: Id) -> Option<Id> {
    let gather = find_op(g, id, "Gather")?;
    let axis = g[gather.attr_id("axis")?].data.attr()?;
    let axis_ok = matches!(axis, AttrValue::Unset | AttrValue::Int(0));
    let [table, positions] = gather.input_ids() else {
        return None;
    };
    (axis_ok && is_input(g, *positions, Some("position_ids"))).then_some(*table)
}

fn int_attr(g: &OnnxGraph, id: Id) -> Option<i64> {
    g[id].data.attr().and_then(AttrValue::int)
}

/// `seqlens_k` (last valid key index per batch, int32 `[B]`) and `total_sequence_length`
/// (int32 scalar), computed once from the `attention_mask` input (hash-consing shares them).
fn gqa_lengths(g: &mut OnnxGraph, mask: Id) -> (Id, Id) {
    let mut e = Emit::new(g);
    let to_i32 = ("to", AttrValue::Int(DType::I32.onnx_code() as i64));
    let axes = e.ints(&[1]);
    let one = e.int(1);
    let sum = e.op(
        "ReduceSum",
        &[mask, axes],
        &[("keepdims", AttrValue::Int(0))],
    );
    let last = e.bin("Sub", sum, one);
    let seqlens = e.op("Cast", &[last], std::slice::from_ref(&to_i32));
    let shape = e.op("Shape", &[mask], &[]);
    let total = e.op("Gather", &[shape, one], &[("axis", AttrValue::Int(0))]);
    let total = e.op("Cast", &[total], &[to_i32]);
    (seqlens, total)
}

/// What the matched Attention carries into GroupQueryAttention besides its inputs.
struct GqaExtras {
    /// Channels per head.
    head_dim: i64,
    /// `local_window_size`: keys a query sees, counting itself (`None` = all).
    window: Option<i64>,
    /// The `softcap` attribute class when it is set and non-zero.
    softcap: Option<Id>,
}

/// What both attention → GroupQueryAttention rules require of the matched Attention: causal,
/// the padding mask of `attention_mask` (or it restricted to a sliding window), caches that
/// are graph inputs, a head size ORT accepts (a multiple of 16). Soft-capping and the window
/// are carried over.
fn gqa_preconditions(g: &OnnxGraph, s: &Subst) -> Option<GqaExtras> {
    let v = |name: &str| s[var(name)];
    let (mask, pk, pv) = (v("?mask"), v("?pk"), v("?pv"));
    if int_attr(g, v("?causal")) != Some(1) {
        return None;
    }
    let window = attention_window(g, mask)?;
    if !is_input(g, pk, None) || !is_input(g, pv, None) {
        return None;
    }
    int_attr(g, v("?qnh"))?;
    int_attr(g, v("?kvh"))?;
    let softcap = match g[v("?softcap")].data.attr()? {
        AttrValue::Unset => None,
        AttrValue::Float(bits) if f32::from_bits(*bits) == 0.0 => None,
        AttrValue::Float(bits) if f32::from_bits(*bits) > 0.0 => Some(v("?softcap")),
        _ => return None,
    };
    let head_dim = g[pk].data.tensor()?.shape.as_ref()?.last()?.known()?;
    (head_dim % 16 == 0).then_some(GqaExtras {
        head_dim,
        window,
        softcap,
    })
}

/// The window an attention mask encodes: `Some(None)` for the padding mask of
/// `attention_mask`, `Some(Some(w))` for it restricted by
/// [`crate::models::components::sliding_window_mask`] to keys less than `w` valid tokens
/// behind the query, `None` for any other mask.
fn attention_window(g: &OnnxGraph, mask: Id) -> Option<Option<i64>> {
    if is_padding_mask(g, mask) {
        return Some(None);
    }
    let and = find_op(g, mask, "And")?;
    let [a, b] = and.input_ids() else {
        return None;
    };
    let inside = match (is_padding_mask(g, *a), is_padding_mask(g, *b)) {
        (true, _) => *b,
        (_, true) => *a,
        _ => return None,
    };
    let less = find_op(g, unsqueezed(g, inside, 1)?, "Less")?;
    let [distance, limit] = less.input_ids() else {
        return None;
    };
    let window = match const_ints(g, *limit)?.as_slice() {
        [w] if *w > 0 => *w,
        _ => return None,
    };
    let sub = find_op(g, *distance, "Sub")?;
    let [query_col, key_row] = sub.input_ids() else {
        return None;
    };
    let ordinal = unsqueezed(g, *key_row, 1)?;
    let slice = find_op(g, unsqueezed(g, *query_col, 2)?, "Slice")?;
    let [sliced, start, end, axes] = slice.input_ids() else {
        return None;
    };
    let cumsum = find_op(g, ordinal, "CumSum")?;
    let [summed, cumsum_axis] = cumsum.input_ids() else {
        return None;
    };
    let seq = find_op(g, *start, "Neg").and_then(|n| find_op(g, n.input_ids()[0], "Shape"));
    let seq_ok = seq.is_some_and(|shape| {
        let attr = |name: &str| shape.attr_id(name).and_then(|a| int_attr(g, a));
        is_input(g, shape.input_ids()[0], Some("input_ids"))
            && attr("start") == Some(1)
            && attr("end") == Some(2)
    });
    let cumsum_plain = ["exclusive", "reverse"].iter().all(|name| {
        cumsum
            .attr_id(name)
            .is_none_or(|a| matches!(g[a].data.attr(), Some(AttrValue::Unset | AttrValue::Int(0))))
    });
    let ok = g.find(*sliced) == g.find(ordinal)
        && is_input(g, *summed, Some("attention_mask"))
        && const_ints(g, *cumsum_axis) == Some(vec![1])
        && cumsum_plain
        && seq_ok
        && const_ints(g, *end) == Some(vec![i64::MAX])
        && const_ints(g, *axes) == Some(vec![1]);
    ok.then_some(Some(window))
}

/// The input of class `id` when it is `Unsqueeze(x, [axis])`.
fn unsqueezed(g: &OnnxGraph, id: Id, axis: i64) -> Option<Id> {
    find_op(g, id, "Unsqueeze").and_then(|u| match u.input_ids() {
        [x, axes] if const_ints(g, *axes) == Some(vec![axis]) => Some(*x),
        _ => None,
    })
}

/// The values of an integer constant class.
fn const_ints(g: &OnnxGraph, id: Id) -> Option<Vec<i64>> {
    g[id].data.konst.as_ref().and_then(literal_ints)
}

/// `com.microsoft::GroupQueryAttention(q, k, v, past k/v, seqlens_k, total, cos, sin)` with the
/// matched Attention's head counts and scale, `seqlens_k`/`total_sequence_length` from the
/// `attention_mask` input; `rotary` is `(interleaved attr, cos, sin)` for do_rotary=1.
fn gqa_op(
    g: &mut OnnxGraph,
    s: &Subst,
    q: Id,
    k: Id,
    extras: &GqaExtras,
    rotary: Option<(AttrValue, Id, Id)>,
) -> Option<Id> {
    let attention_mask = g.lookup(Onnx::Input(egg::Symbol::from("attention_mask")))?;
    let (seqlens, total) = gqa_lengths(g, attention_mask);
    let unset = g.add(Onnx::Attr(AttrValue::Unset));
    let absent = g.add(Onnx::Absent);
    let (do_rotary, interleaved, cos, sin) = match rotary {
        Some((interleaved, cos, sin)) => {
            let interleaved = match interleaved {
                AttrValue::Unset => AttrValue::Int(0),
                other => other,
            };
            (1, g.add(Onnx::Attr(interleaved)), cos, sin)
        }
        None => (0, unset, absent, absent),
    };
    let do_rotary = g.add(Onnx::Attr(AttrValue::Int(do_rotary)));
    let v = |name: &str| s[var(name)];
    let (val, pk, pv) = (v("?v"), v("?pk"), v("?pv"));
    let attrs = schema("com.microsoft::GroupQueryAttention")?;
    // Attribute children in schema order: do_rotary, kv_num_heads, local_window_size,
    // num_heads, qk_output, rotary_interleaved, scale, smooth_softmax, softcap.
    let window = match extras.window {
        Some(w) => g.add(Onnx::Attr(AttrValue::Int(w))),
        None => unset,
    };
    let attr_children = [
        do_rotary,
        v("?kvh"),
        window,
        v("?qnh"),
        unset,
        interleaved,
        v("?scale"),
        unset,
        extras.softcap.unwrap_or(unset),
    ];
    let mut children = vec![q, k, val, pk, pv, seqlens, total, cos, sin];
    children.extend(attr_children);
    Some(g.add(Onnx::op(
        "com.microsoft::GroupQueryAttention",
        attrs,
        9,
        3,
        children,
    )))
}

/// Reads the variables of the `rotary-attention-to-gqa` pattern: RotaryEmbedding(q) and
/// RotaryEmbedding(k) over tables gathered by `position_ids` feeding an Attention that meets
/// [`gqa_preconditions`] → GroupQueryAttention(do_rotary=1) over the full tables. Declines
/// unless both rotations agree (heads, interleaving) and the rotary width is one ORT derives
/// from the tables.
fn rotary_attention_to_gqa(g: &mut OnnxGraph, _matched: Id, s: &Subst, _rule: &str) -> Option<Id> {
    let extras = gqa_preconditions(g, s)?;
    let head_dim = extras.head_dim;
    let v = |name: &str| s[var(name)];
    let (heads, kv_heads) = (int_attr(g, v("?qnh"))?, int_attr(g, v("?kvh"))?);
    if int_attr(g, v("?qh")) != Some(heads) || int_attr(g, v("?kh")) != Some(kv_heads) {
        return None;
    }
    let interleaved = g[v("?qi")].data.attr().cloned()?;
    if g[v("?ki")].data.attr() != Some(&interleaved) {
        return None;
    }
    let (cos, sin) = (gathered_table(g, v("?cos"))?, gathered_table(g, v("?sin"))?);
    let width = g[cos].data.tensor()?.static_shape()?.get(1).copied()?;
    let rotary = match int_attr(g, v("?qrd")) {
        None | Some(0) => head_dim,
        Some(r) => r,
    };
    if 2 * width != rotary || rotary > head_dim || rotary % 16 != 0 {
        return None;
    }
    gqa_op(
        g,
        s,
        v("?q"),
        v("?k"),
        &extras,
        Some((interleaved, cos, sin)),
    )
}

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

/// Three `[K, N_i]` projection weights joined along N: initializers concatenated, or weights
/// block-quantized along K (`DequantizeLinear(q, scales[, zp]; axis 0)` of initializers, the
/// same attributes and zero-point presence) as the dequantization of the concatenated values,
/// scales and zero points — quantizing a column never looks at another column, so the two
/// are equal.
fn concat_weights(g: &mut OnnxGraph, parts: [Id; 3]) -> Option<Id> {
    if parts.iter().all(|&p| init_name(g, p).is_some()) {
        return concat_inits(g, parts, 1);
    }
    let nodes: Vec<super::lang::OpNode> = parts
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

/// The GroupQueryAttention e-node of class `id` (children: 9 inputs, then its attributes).
fn gqa_node(g: &OnnxGraph, id: Id) -> Option<super::lang::OpNode> {
    find_op(g, id, "com.microsoft::GroupQueryAttention").filter(|o| o.inputs == 9)
}

/// The same GroupQueryAttention reading one packed q|k|v input (key and value absent).
fn packed_gqa(g: &mut OnnxGraph, gqa: &super::lang::OpNode, packed: Id) -> Id {
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
fn pack_qkv(g: &mut OnnxGraph, matched: Id, s: &Subst, _rule: &str) -> Option<Id> {
    let gqa = gqa_node(g, matched)?;
    let h = s[var("?h")];
    let weights = concat_weights(g, [s[var("?wq")], s[var("?wk")], s[var("?wv")]])?;
    let packed = Emit::new(g).bin("MatMul", h, weights);
    Some(packed_gqa(g, &gqa, packed))
}

/// [`pack_qkv`] with `Add(MatMul(?h, W), b)` projections: the biases are concatenated too.
fn pack_qkv_with_bias(g: &mut OnnxGraph, matched: Id, s: &Subst, _rule: &str) -> Option<Id> {
    let gqa = gqa_node(g, matched)?;
    let h = s[var("?h")];
    let weights = concat_weights(g, [s[var("?wq")], s[var("?wk")], s[var("?wv")]])?;
    let biases = concat_inits(g, [s[var("?bq")], s[var("?bk")], s[var("?bv")]], 0)?;
    let mut e = Emit::new(g);
    let product = e.bin("MatMul", h, weights);
    let packed = e.bin("Add", product, biases);
    Some(packed_gqa(g, &gqa, packed))
}

/// Reads the variables of `attention-to-gqa`: an Attention that meets [`gqa_preconditions`]
/// on 3-D q/k/v → GroupQueryAttention(do_rotary=0) on the same inputs (RoPE, if any, stays in
/// front of it).
fn attention_to_gqa(g: &mut OnnxGraph, _matched: Id, s: &Subst, _rule: &str) -> Option<Id> {
    let extras = gqa_preconditions(g, s)?;
    let (q, k) = (s[var("?q")], s[var("?k")]);
    if g[q].data.tensor()?.rank()? != 3 {
        return None;
    }
    gqa_op(g, s, q, k, &extras, None)
}

/// `?x`: rank 2 or 3 (what SkipLayerNormalization accepts).
fn rank_2_or_3(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x] = vars else { return false };
    matches!(g[s[*x]].data.tensor().and_then(|t| t.rank()), Some(2 | 3))
}

/// Reads `?a ?b ?w ?eps` (and `?beta` when the pattern binds it) of
/// `(LayerNormalization (Add ?a ?b) ?w [?beta] ?axis ?eps ?stash)`: one
/// `com.microsoft::SkipLayerNormalization(a, b, w[, beta])` whose output 0 is the norm and
/// whose output 3 (the sum) is united with the Add.
fn skip_layer_norm(g: &mut OnnxGraph, _matched: Id, s: &Subst, rule: &str) -> Option<Id> {
    let beta = s.get(var("?beta")).copied();
    fuse_skip_norm(g, s, rule, "com.microsoft::SkipLayerNormalization", beta)
}

/// `?x ?n ?bias`: `?bias` is a 1-D initializer expression of `?x`'s dtype and length `?n` (an
/// integer attribute), e.g. the output width of a MatMulNBits over `?x`.
fn bias_of_width(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x, n, bias] = vars else { return false };
    let (Some(xt), Some(bt)) = (g[s[*x]].data.tensor(), g[s[*bias]].data.tensor()) else {
        return false;
    };
    let width = g[s[*n]].data.attr().and_then(AttrValue::int);
    g[s[*bias]].data.init_only
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
fn erf_gelu_constants(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [c1, c2, c3] = vars else { return false };
    near(g, s[*c1], std::f64::consts::SQRT_2) && near(g, s[*c2], 1.0) && near(g, s[*c3], 0.5)
}

/// `?c2 ?c3 ?c4 ?c5 ?c6`: the constants of the tanh GELU
/// `x · (tanh(√(2/π) · (x + 0.044715 · x³)) + 1) · ½`.
fn tanh_gelu_constants(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [c2, c3, c4, c5, c6] = vars else {
        return false;
    };
    near(g, s[*c2], 1.0)
        && near(g, s[*c3], 0.5)
        && near(g, s[*c4], (2.0 / std::f64::consts::PI).sqrt())
        && near(g, s[*c5], 0.044715)
        && near(g, s[*c6], 3.0)
}

/// `?approximate`: a `Gelu`'s `approximate` attribute selects the exact (erf) form.
fn gelu_is_exact(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [a] = vars else { return false };
    match g[s[*a]].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Str(mode)) => mode.as_str() == "none",
        _ => false,
    }
}

/// `?x ?bias`: `?bias` is a 1-D initializer of `?x`'s dtype whose length is `?x`'s known last
/// dimension (what BiasGelu and FastGelu accept as a bias).
fn bias_on_last_axis(g: &OnnxGraph, s: &Subst, vars: &[Var]) -> bool {
    let [x, bias] = vars else { return false };
    let (xd, bd) = (&g[s[*x]].data, &g[s[*bias]].data);
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
