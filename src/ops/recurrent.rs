//! Ops that carry a recurrent state between calls (ONNX opset 27): `LinearAttention` (linear,
//! gated, delta and gated-delta rules, with grouped KV heads) and `CausalConvWithState` (a
//! causal depthwise 1-D convolution with its carried inputs). Both evaluate step by step in
//! f32, as the recurrence is written; the outputs are rounded to their dtype.
//!
//! onnxruntime's contrib `com.microsoft::LinearAttention` (a CPU kernel in onnxruntime 1.32;
//! the Gated DeltaNet fusion's target) is the same op with one more attribute, `state_window`:
//! only its default 0 (4-D states holding the state after the last token) is evaluated.

use super::cost::Cost;
use super::infer::Infer;
use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The recurrent-state ops.
pub const OPS: &[OpDef] = &[
    OpDef::onnx(
        "LinearAttention",
        &[
            "chunk_size",
            "kv_num_heads",
            "q_num_heads",
            "scale",
            "update_rule",
        ],
    )
    .since(27)
    .infer(infer_linear_attention)
    .eval(eval_linear_attention),
    OpDef::ms(
        "LinearAttention",
        &[
            "chunk_size",
            "kv_num_heads",
            "q_num_heads",
            "scale",
            "state_window",
            "update_rule",
        ],
    )
    .cost(Cost::KERNEL.support(|c, _, _| c.supports_linear_attention))
    .infer(infer_linear_attention)
    .eval(eval_linear_attention),
    OpDef::onnx("CausalConvWithState", &["activation"])
        .since(27)
        .infer(infer_causal_conv)
        .eval(eval_causal_conv),
];

/// `output` `[B, T, q_heads · d_v]` in the query's dtype, `present_state` `[B, kv_heads, d_k,
/// d_v]` in the past state's dtype (the query's without one).
fn infer_linear_attention(call: &Infer<'_>) -> Vec<TensorType> {
    let (q, v) = (call.ty(0), call.ty(2));
    let (Some(hq), Some(hkv)) = (call.int("q_num_heads"), call.int("kv_num_heads")) else {
        return Vec::new();
    };
    let dims = |t: &TensorType| t.shape.clone().filter(|s| s.len() == 3);
    let known = |d: &SymDim| match d {
        SymDim::Known(v) => Some(*v),
        _ => None,
    };
    let (Some(qs), Some(vs)) = (dims(&q), dims(&v)) else {
        return Vec::new();
    };
    let dk = known(&qs[2]).filter(|_| hq > 0).map(|n| n / hq);
    let dv = known(&vs[2]).filter(|_| hkv > 0).map(|n| n / hkv);
    let out = TensorType {
        dtype: q.dtype,
        shape: Some(vec![
            qs[0].clone(),
            qs[1].clone(),
            dv.map_or(SymDim::Unknown, |d| SymDim::Known(d * hq)),
        ]),
    };
    let state_dtype = call
        .inputs
        .get(3)
        .and_then(|i| i.ty)
        .and_then(|t| t.dtype)
        .or(q.dtype);
    let present = TensorType {
        dtype: state_dtype,
        shape: Some(vec![
            qs[0].clone(),
            SymDim::Known(hkv),
            dk.map_or(SymDim::Unknown, SymDim::Known),
            dv.map_or(SymDim::Unknown, SymDim::Known),
        ]),
    };
    vec![out, present]
}

fn eval_linear_attention(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    // Only the contrib op has `state_window`; its default 0 is the opset-27 op.
    let window = call.int("state_window", 0);
    if window != 0 {
        return Err(call.error(format!(
            "state_window {window}: only 0 (4-D states) is evaluated"
        )));
    }
    let (q, k, v) = (call.input(0)?, call.input(1)?, call.input(2)?);
    let (past, decay, beta) = (call.optional(3), call.optional(4), call.optional(5));
    let rule = call.string("update_rule").unwrap_or("gated_delta");
    let (gating, delta) = match rule {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(call.error(format!(
                "update_rule `{other}`: expected linear, gated, delta or gated_delta"
            )))
        }
    };
    let (hq, hkv) = (call.int("q_num_heads", 0), call.int("kv_num_heads", 0));
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(call.error(format!(
            "q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv}); both are required"
        )));
    }
    let (hq, hkv) = (hq as usize, hkv as usize);
    for (name, t) in [("query", q), ("key", k), ("value", v)] {
        if t.shape.len() != 3 {
            return Err(call.error(format!(
                "{name} must be rank 3 [B, T, heads · dim], got {:?}",
                t.shape
            )));
        }
    }
    let (b, t) = (q.shape[0], q.shape[1]);
    if q.shape[2] % hq != 0 || v.shape[2] % hkv != 0 {
        return Err(call.error(format!(
            "query width {} / {hq} heads and value width {} / {hkv} heads must divide",
            q.shape[2], v.shape[2]
        )));
    }
    let (dk, dv) = (q.shape[2] / hq, v.shape[2] / hkv);
    if k.shape != [b, t, hkv * dk] || v.shape[..2] != [b, t] {
        return Err(call.error(format!(
            "key {:?} and value {:?} must be [{b}, {t}, {}] and [{b}, {t}, {hkv} · d_v]",
            k.shape,
            v.shape,
            hkv * dk
        )));
    }
    let need = |present: bool, want: bool, what: &str| -> Result<()> {
        match (present, want) {
            (false, true) => Err(call.error(format!("update_rule `{rule}` requires {what}"))),
            (true, false) => Err(call.error(format!("update_rule `{rule}` forbids {what}"))),
            _ => Ok(()),
        }
    };
    need(decay.is_some(), gating, "the decay input")?;
    need(beta.is_some(), delta, "the beta input")?;
    // Decay: one log-decay per KV head, or one per key dim; beta: per KV head or shared.
    let decay_width = match decay {
        Some(d) if d.shape.len() == 3 && d.shape[..2] == [b, t] => match d.shape[2] {
            w if w == hkv => 1,
            w if w == hkv * dk => dk,
            w => {
                return Err(call.error(format!(
                    "decay's last dim {w} must be kv_num_heads ({hkv}) or kv_num_heads · d_k ({})",
                    hkv * dk
                )))
            }
        },
        Some(d) => {
            return Err(call.error(format!("decay must be [{b}, {t}, …], got {:?}", d.shape)))
        }
        None => 0,
    };
    let beta_heads = match beta {
        Some(x)
            if x.shape.len() == 3
                && x.shape[..2] == [b, t]
                && (x.shape[2] == hkv || x.shape[2] == 1) =>
        {
            x.shape[2]
        }
        Some(x) => {
            return Err(call.error(format!(
                "beta must be [{b}, {t}, {hkv} or 1], got {:?}",
                x.shape
            )))
        }
        None => 0,
    };
    let state_shape = [b, hkv, dk, dv];
    let mut state = match past {
        Some(p) if p.shape == state_shape => p.floats()?.to_vec(),
        Some(p) => {
            return Err(call.error(format!("past_state {:?} must be {state_shape:?}", p.shape)))
        }
        None => vec![0.0f32; b * hkv * dk * dv],
    };
    // 0 (the default) asks for 1/√d_k.
    let scale = match call.float("scale", 0.0) {
        0.0 => 1.0 / (dk as f32).sqrt(),
        s => s,
    };
    call.alloc(&[b, t, hq * dv])?;
    let (qv, kv, vv) = (q.floats()?, k.floats()?, v.floats()?);
    let dvals = decay.map(Tensor::floats).transpose()?;
    let bvals = beta.map(Tensor::floats).transpose()?;
    let group = hq / hkv;
    let mut out = vec![0.0f32; b * t * hq * dv];
    let mut vt = vec![0.0f32; dv];
    for bi in 0..b {
        for h in 0..hkv {
            let s = &mut state[(bi * hkv + h) * dk * dv..][..dk * dv];
            for ti in 0..t {
                let row = bi * t + ti;
                let kt = &kv[row * hkv * dk + h * dk..][..dk];
                vt.copy_from_slice(&vv[row * hkv * dv + h * dv..][..dv]);
                if let Some(g) = dvals {
                    let g = &g[row * hkv * decay_width + h * decay_width..][..decay_width];
                    for d in 0..dk {
                        let f = g[if decay_width == 1 { 0 } else { d }].exp();
                        s[d * dv..(d + 1) * dv].iter_mut().for_each(|x| *x *= f);
                    }
                }
                if let Some(bv) = bvals {
                    let beta = bv[row * beta_heads + if beta_heads == 1 { 0 } else { h }];
                    for (m, x) in vt.iter_mut().enumerate() {
                        let retrieved: f32 = (0..dk).map(|d| s[d * dv + m] * kt[d]).sum();
                        *x = beta * (*x - retrieved);
                    }
                }
                for d in 0..dk {
                    for m in 0..dv {
                        s[d * dv + m] += kt[d] * vt[m];
                    }
                }
                for j in 0..group {
                    let hqi = h * group + j;
                    let qt = &qv[row * hq * dk + hqi * dk..][..dk];
                    let o = &mut out[row * hq * dv + hqi * dv..][..dv];
                    for (m, x) in o.iter_mut().enumerate() {
                        *x = scale * (0..dk).map(|d| qt[d] * s[d * dv + m]).sum::<f32>();
                    }
                }
            }
        }
    }
    let state_dtype = past.map_or(q.dtype, |p| p.dtype);
    Ok(vec![
        Tensor::float(q.dtype, vec![b, t, hq * dv], out),
        Tensor::float(state_dtype, state_shape.to_vec(), state),
    ])
}

/// `output` as the input; `present_state` `[B, C, k − 1]`.
fn infer_causal_conv(call: &Infer<'_>) -> Vec<TensorType> {
    let (x, w) = (call.ty(0), call.ty(1));
    let k = w.shape.as_ref().and_then(|s| match s.get(2) {
        Some(SymDim::Known(k)) => Some(*k),
        _ => None,
    });
    let present = match (&x.shape, k) {
        (Some(s), Some(k)) if s.len() == 3 => TensorType {
            dtype: x.dtype,
            shape: Some(vec![s[0].clone(), s[1].clone(), SymDim::Known(k - 1)]),
        },
        _ => x.with_unknown_shape(),
    };
    vec![x, present]
}

fn eval_causal_conv(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (x, w) = (call.input(0)?, call.input(1)?);
    let (bias, past) = (call.optional(2), call.optional(3));
    let silu = match call.string("activation").unwrap_or("none") {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(call.error(format!(
                "activation `{other}`: expected none, silu or swish"
            )))
        }
    };
    let [b, c, l] = x.shape[..] else {
        return Err(call.error(format!(
            "input must be rank 3 [batch, channels, length], got {:?}",
            x.shape
        )));
    };
    let k = match w.shape[..] {
        [wc, 1, k] if wc == c && k >= 1 => k,
        _ => return Err(call.error(format!("weight must be [{c}, 1, k ≥ 1], got {:?}", w.shape))),
    };
    if let Some(bs) = bias.filter(|t| t.shape != [c]) {
        return Err(call.error(format!("bias must be [{c}], got {:?}", bs.shape)));
    }
    if let Some(p) = past.filter(|t| t.shape != [b, c, k - 1]) {
        return Err(call.error(format!(
            "past_state must be [{b}, {c}, {}], got {:?}",
            k - 1,
            p.shape
        )));
    }
    call.alloc(&[b, c, l + k - 1])?;
    let (xv, wv) = (x.floats()?, w.floats()?);
    let bv = bias.map(Tensor::floats).transpose()?;
    let pv = past.map(Tensor::floats).transpose()?;
    let width = l + k - 1;
    let mut out = vec![0.0f32; b * c * l];
    let mut present = vec![0.0f32; b * c * (k - 1)];
    let mut padded = vec![0.0f32; width];
    for bi in 0..b {
        for ci in 0..c {
            let row = bi * c + ci;
            match pv {
                Some(p) => padded[..k - 1].copy_from_slice(&p[row * (k - 1)..][..k - 1]),
                None => padded[..k - 1].iter_mut().for_each(|v| *v = 0.0),
            }
            padded[k - 1..].copy_from_slice(&xv[row * l..][..l]);
            let wk = &wv[ci * k..][..k];
            let b0 = bv.map_or(0.0, |b| b[ci]);
            for ti in 0..l {
                out[row * l + ti] = b0 + (0..k).map(|j| wk[j] * padded[ti + j]).sum::<f32>();
            }
            present[row * (k - 1)..][..k - 1].copy_from_slice(&padded[l..]);
        }
    }
    // The convolution is rounded to the input's dtype before the activation.
    let mut conv = Tensor::float(x.dtype, vec![b, c, l], out);
    if silu {
        conv = Tensor::float(
            x.dtype,
            conv.shape.clone(),
            conv.floats()?
                .iter()
                .map(|&v| v / (1.0 + (-v).exp()))
                .collect(),
        );
    }
    let state_dtype = past.map_or(x.dtype, |p| p.dtype);
    Ok(vec![
        conv,
        Tensor::float(state_dtype, vec![b, c, k - 1], present),
    ])
}
