//! The applier of `fusion/linear_attention.rules`: the gated delta rule as the Gated DeltaNet
//! layers write it ([`crate::models::components::gated_delta::delta_rule_scan`], a `Scan`
//! over the call's tokens whose body is the one-step update of
//! [`crate::models::components::gated_delta::delta_rule_step`]) → onnxruntime's
//! `com.microsoft::LinearAttention` (`update_rule` gated_delta, `scale` 1: the queries come
//! scaled), with as many query as KV heads (the queries and keys are already repeated over the
//! value heads). The step `S ← e^g·S + k ⊗ β·(v − (e^g·S)ᵀk)`, `o = Sᵀq` is the kernel's
//! gated-delta rule term for term; the kernel reads the decay in log space, so the rule reads
//! `g` under the `Exp` that builds the Scan's decay.

use egg::Id;

use crate::ir::{DType, Graph};
use crate::models::components::gated_delta::delta_rule_step;
use crate::ops::schema;
use crate::ops::value::AttrValue;
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
