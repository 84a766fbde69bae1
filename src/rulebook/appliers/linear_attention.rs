//! The applier of `fusion/linear_attention.rules`: the gated delta rule as the Gated DeltaNet
//! layers write it ([`crate::models::components::gated_delta::delta_rule_scan`], a `Scan`
//! over the call's tokens whose body is the one-step update of
//! [`crate::models::components::gated_delta::delta_rule_step`]) → onnxruntime's
//! `com.microsoft::LinearAttention` (`update_rule` gated_delta, `scale` 1: the queries come
//! scaled), with as many query as KV heads (the queries and keys are already repeated over the
//! value heads). The step `S ← e^g·S + k ⊗ β·(v − (e^g·S)ᵀk)`, `o = Sᵀq` is the kernel's
//! gated-delta rule term for term; the kernel reads the decay in log space, so the rule reads
//! `g` under the `Exp` that builds the Scan's decay.
//!
//! And the appliers of `inline/linear_attention.rules`, the inverse: a `LinearAttention` call
//! of that kind (gated delta rule, as many query as KV heads, per-head gates) as the same
//! `Scan`, for EPs without the kernel.

use egg::Id;

use crate::ir::{DType, Graph};
use crate::models::components::gated_delta::delta_rule_step;
use crate::ops::schema;
use crate::ops::value::{AttrValue, Subgraph};
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::checked_union::check_union;
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::opt::query::const_ints;

/// The contrib op the rule emits.
const LINEAR_ATTENTION: &str = "com.microsoft::LinearAttention";

/// `gated-delta-linear-attention`.
pub(super) const GATED_DELTA_LINEAR_ATTENTION: Applier<13> = Applier::new(
    [
        "?past",
        "?g",
        "?beta",
        "?q",
        "?k",
        "?v",
        "?body",
        "?n",
        "?in_axes",
        "?in_dirs",
        "?out_axes",
        "?out_dirs",
        "?cols",
    ],
    gated_delta_linear_attention,
);

/// Reads the variables of `(get1 (Scan/2 ?past (Unsqueeze (Exp ?g) ?cols) (Unsqueeze ?beta
/// ?cols) ?q ?k ?v ?body ?n ?in_axes ?in_dirs ?out_axes ?out_dirs))`: for a body equal (names
/// aside) to the gated delta step of its state's `[B, Hv, Dk, Dv]`, five scan inputs over axis
/// 1 forward, the output over axis 1 forward, `?cols` = `[-1, -2]`, f32 `g` and `beta`
/// `[B, S, Hv]`: `LinearAttention(q, k, v as [B, S, Hv·D], past, g, beta; q_num_heads =
/// kv_num_heads = Hv, scale 1, gated_delta)`, its present state united with the Scan's final
/// state, its output read back as `[B, S, Hv, 1, Dv]`.
fn gated_delta_linear_attention(
    g: &mut OnnxGraph,
    site: Site<'_>,
    [past, log_decay, beta, q, k, v, body, n, in_axes, in_dirs, out_axes, out_dirs, cols]: [Id; 13],
) -> Option<Id> {
    let mut e = Emit::new(g);
    let AttrValue::Graph(step) = e.attr(body)? else {
        return None;
    };
    let step = step.graph();
    let dims: Vec<i64> = step.inputs.first()?.shape.0[1..]
        .iter()
        .map(|d| match d {
            crate::ir::Dim::Fixed(v) => Some(*v),
            crate::ir::Dim::Sym(_) => None,
        })
        .collect::<Option<_>>()?;
    let [hv, dk, dv] = dims[..] else {
        return None;
    };
    let (h, kd, vd) = (
        usize::try_from(hv).ok()?,
        usize::try_from(dk).ok()?,
        usize::try_from(dv).ok()?,
    );
    if !same_up_to_names(step, &delta_rule_step("step", h, kd, vd)) {
        return None;
    }
    let forward = |id: Id, count: usize| match e.attr(id) {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Ints(v)) => v.len() == count && v.iter().all(|&d| d == 0),
        _ => false,
    };
    let axes_one = |id: Id, count: usize| matches!(e.attr(id), Some(AttrValue::Ints(v)) if v.len() == count && v.iter().all(|&a| a == 1));
    if e.int_or(n, -1)? != 5
        || !axes_one(in_axes, 5)
        || !axes_one(out_axes, 1)
        || !forward(in_dirs, 5)
        || !forward(out_dirs, 1)
        || const_ints(e.g, cols)? != [-1, -2]
    {
        return None;
    }
    // The per-token gates [B, S, Hv], the state [B, Hv, Dk, Dv], q, k, v [B, S, Hv, 1, D]; f32.
    let fits = |e: &Emit<'_>, id: Id, rank: usize, tail: &[i64]| {
        e.tensor(id).is_some_and(|t| {
            t.dtype == Some(DType::F32)
                && t.shape.as_ref().is_some_and(|s| {
                    s.len() == rank
                        && s[rank - tail.len()..]
                            .iter()
                            .zip(tail)
                            .all(|(d, &w)| d.known() == Some(w))
                })
        })
    };
    if !fits(&e, log_decay, 3, &[hv])
        || !fits(&e, beta, 3, &[hv])
        || !fits(&e, past, 4, &[hv, dk, dv])
        || !fits(&e, q, 5, &[hv, 1, dk])
        || !fits(&e, k, 5, &[hv, 1, dk])
        || !fits(&e, v, 5, &[hv, 1, dv])
    {
        return None;
    }
    // The Scan itself (every part is in the e-graph already), for its final state.
    let decay = e.op("Exp", &[log_decay], &[]);
    let decay = e.op("Unsqueeze", &[decay, cols], &[]);
    let rate = e.op("Unsqueeze", &[beta, cols], &[]);
    let scan_attrs = schema("Scan")?;
    let mut children = vec![past, decay, rate, q, k, v];
    children.extend([body, n, in_axes, in_dirs, out_axes, out_dirs]);
    let scan = e.g.add(Onnx::op("Scan", scan_attrs, 6, 2, children));
    let final_state = e.g.add(Onnx::Get {
        index: 0,
        tuple: [scan],
    });

    let q3 = e.reshape(q, &[0, 0, hv * dk]);
    let k3 = e.reshape(k, &[0, 0, hv * dk]);
    let v3 = e.reshape(v, &[0, 0, hv * dv]);
    let names = schema(LINEAR_ATTENTION)?;
    let mut children = vec![q3, k3, v3, past, log_decay, beta];
    for name in names {
        let value = match *name {
            "kv_num_heads" | "q_num_heads" => AttrValue::Int(hv),
            "scale" => AttrValue::Float(1f32.to_bits()),
            "update_rule" => AttrValue::Str("gated_delta".into()),
            _ => AttrValue::Unset,
        };
        children.push(e.g.add(Onnx::Attr(value)));
    }
    let fused = e.g.add(Onnx::op(LINEAR_ATTENTION, names, 6, 2, children));
    let out = e.g.add(Onnx::Get {
        index: 0,
        tuple: [fused],
    });
    let present = e.g.add(Onnx::Get {
        index: 1,
        tuple: [fused],
    });
    if check_union(e.g, final_state, present, site.rule) {
        e.g.union(final_state, present);
    }
    Some(e.reshape(out, &[0, 0, hv, 1, dv]))
}

/// Whether `a` and `b` compute the same function, names aside: the same inputs and outputs
/// (dtype and shape, in order), the same nodes in the same order (domain, op, attributes) and
/// the same wiring; neither holds initializers or reads a value it does not define.
fn same_up_to_names(a: &Graph, b: &Graph) -> bool {
    use std::collections::HashMap;
    /// Each value's position: graph input `i` → `i`, node `j`'s output `o` → after them.
    fn positions(g: &Graph) -> HashMap<&str, usize> {
        let mut at: HashMap<&str, usize> = g
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), i))
            .collect();
        for node in &g.nodes {
            for o in &node.outputs {
                let next = at.len();
                at.insert(o.as_str(), next);
            }
        }
        at
    }
    let (pa, pb) = (positions(a), positions(b));
    let same_types = |x: &[crate::ir::ValueInfo], y: &[crate::ir::ValueInfo]| {
        x.len() == y.len()
            && x.iter()
                .zip(y)
                .all(|(x, y)| x.dtype == y.dtype && x.shape == y.shape)
    };
    let wired = |x: &[String], y: &[String]| {
        x.len() == y.len()
            && x.iter().zip(y).all(|(x, y)| {
                matches!((pa.get(x.as_str()), pb.get(y.as_str())), (Some(i), Some(j)) if i == j)
            })
    };
    a.initializers.is_empty()
        && b.initializers.is_empty()
        && same_types(&a.inputs, &b.inputs)
        && same_types(&a.outputs, &b.outputs)
        && a.nodes.len() == b.nodes.len()
        && a.nodes.iter().zip(&b.nodes).all(|(x, y)| {
            x.domain == y.domain
                && x.op_type == y.op_type
                && x.attrs == y.attrs
                && wired(&x.inputs, &y.inputs)
                && x.outputs.len() == y.outputs.len()
        })
        && wired(
            &a.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>(),
            &b.outputs.iter().map(|o| o.name.clone()).collect::<Vec<_>>(),
        )
}

/// `linear-attention-output-as-scan`.
pub(super) const LINEAR_ATTENTION_OUTPUT_AS_SCAN: Applier<11> =
    Applier::new(INLINE_VARS, output_as_scan);

/// `linear-attention-state-as-scan`.
pub(super) const LINEAR_ATTENTION_STATE_AS_SCAN: Applier<11> =
    Applier::new(INLINE_VARS, state_as_scan);

/// Output 0 of a `LinearAttention` call as the Scan's outputs read back ([`inline`]).
fn output_as_scan(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 11]) -> Option<Id> {
    inline(g, vars).map(|(_, output)| output)
}

/// Output 1 (the present state) of a `LinearAttention` call as the Scan's final state
/// ([`inline`]).
fn state_as_scan(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 11]) -> Option<Id> {
    inline(g, vars).map(|(state, _)| state)
}

/// The variables of `(get<i> (com.microsoft::LinearAttention/2 ?q ?k ?v ?past ?g ?beta ?chunk
/// ?kv_heads ?q_heads ?scale ?window ?rule))` the inline appliers read.
const INLINE_VARS: [&str; 11] = [
    "?q",
    "?k",
    "?v",
    "?past",
    "?g",
    "?beta",
    "?kv_heads",
    "?q_heads",
    "?scale",
    "?window",
    "?rule",
];

/// The standard form of a `LinearAttention` call the fusion could have made: the gated delta
/// rule (`update_rule` gated_delta, set or unset), as many query as KV heads `H`, `state_window`
/// 0, f32 q, k `[B, T, H·Dk]`, v `[B, T, H·Dv]`, a past state `[B, H, Dk, Dv]`, per-head decay
/// and beta `[B, T, H]`, any scale (unset or 0: `1/√Dk`). Returns (present state, output):
/// the [`delta_rule_step`] `Scan` over `q·scale`, `k`, `v` read as `[B, T, H, 1, D]`, decay
/// `Exp(g)` and beta unsqueezed to `[B, T, H, 1, 1]`, its outputs read back as `[B, T, H·Dv]`.
fn inline(
    g: &mut OnnxGraph,
    [q, k, v, past, log_decay, beta, kv_heads, q_heads, scale, window, rule]: [Id; 11],
) -> Option<(Id, Id)> {
    let mut e = Emit::new(g);
    let heads = e.int_or(kv_heads, 0)?;
    if heads <= 0 || e.int_or(q_heads, 0)? != heads || e.int_or(window, 0)? != 0 {
        return None;
    }
    match e.attr(rule)? {
        AttrValue::Unset => {}
        AttrValue::Str(s) if s.as_str() == "gated_delta" => {}
        _ => return None,
    }
    let last = |e: &Emit<'_>, id: Id, rank: usize| -> Option<i64> {
        let t = e.tensor(id)?;
        let s = t.shape.as_ref()?;
        (t.dtype == Some(DType::F32) && s.len() == rank).then_some(())?;
        s.last()?.known()
    };
    let (qw, kw, vw) = (last(&e, q, 3)?, last(&e, k, 3)?, last(&e, v, 3)?);
    if qw != kw || qw % heads != 0 || vw % heads != 0 {
        return None;
    }
    let (dk, dv) = (qw / heads, vw / heads);
    if last(&e, log_decay, 3)? != heads || last(&e, beta, 3)? != heads {
        return None;
    }
    let state = e.tensor(past)?;
    let state_dims = state.shape.as_ref()?;
    if state.dtype != Some(DType::F32)
        || state_dims.len() != 4
        || state_dims[1..]
            .iter()
            .map(|d| d.known())
            .collect::<Vec<_>>()
            != [Some(heads), Some(dk), Some(dv)]
    {
        return None;
    }
    let factor = match e.attr(scale)? {
        AttrValue::Unset => 1.0 / (dk as f32).sqrt(),
        AttrValue::Float(bits) if f32::from_bits(*bits) == 0.0 => 1.0 / (dk as f32).sqrt(),
        AttrValue::Float(bits) => f32::from_bits(*bits),
        _ => return None,
    };
    let (h, kd, vd) = (
        usize::try_from(heads).ok()?,
        usize::try_from(dk).ok()?,
        usize::try_from(dv).ok()?,
    );
    let q5 = e.reshape(q, &[0, 0, heads, 1, dk]);
    let factor = e.float(DType::F32, factor)?;
    let q5 = e.bin("Mul", q5, factor);
    let k5 = e.reshape(k, &[0, 0, heads, 1, dk]);
    let v5 = e.reshape(v, &[0, 0, heads, 1, dv]);
    let cols = e.ints(&[-1, -2]);
    let decay = e.op("Exp", &[log_decay], &[]);
    let decay = e.op("Unsqueeze", &[decay, cols], &[]);
    let rate = e.op("Unsqueeze", &[beta, cols], &[]);
    let body = delta_rule_step("linear_attention", h, kd, vd);
    let attrs = [
        ("body", AttrValue::Graph(Subgraph::new(&body))),
        ("num_scan_inputs", AttrValue::Int(5)),
        ("scan_input_axes", AttrValue::Ints(vec![1; 5])),
        ("scan_output_axes", AttrValue::Ints(vec![1])),
    ];
    let names = schema("Scan")?;
    let mut children = vec![past, decay, rate, q5, k5, v5];
    for name in names {
        let value = attrs
            .iter()
            .find(|(n, _)| n == name)
            .map_or(AttrValue::Unset, |(_, v)| v.clone());
        children.push(e.g.add(Onnx::Attr(value)));
    }
    let scan = e.g.add(Onnx::op("Scan", names, 6, 2, children));
    let final_state = e.g.add(Onnx::Get {
        index: 0,
        tuple: [scan],
    });
    let ys = e.g.add(Onnx::Get {
        index: 1,
        tuple: [scan],
    });
    Some((final_state, e.reshape(ys, &[0, 0, heads * dv])))
}
