//! `com.microsoft::MoE`: a sparse mixture of SwiGLU experts, as onnxruntime's CPU kernel
//! computes it.
//!
//! Per token: the softmax of its router logits over all experts (in f32), the `k` most probable
//! experts (equal probabilities: the higher expert index first), their probabilities divided by
//! their sum when `normalize_routing_weights` is set, and the sum of the picked experts' outputs
//! weighted by them. An expert whose weight is not positive (0 after underflow, or NaN: every
//! probability of a token is NaN when one of its logits is NaN or +inf, or all are -inf) is
//! skipped, so such a token's output is 0.
//!
//! An expert is `fc2 · swiglu(fc1 · x + b1) + b2` with `fc1` `[E, 2·I, H]` holding the gate
//! and up rows interleaved (`swiglu_fusion = 1`: row `2i` gates, row `2i + 1` is linear) and
//! `fc2` `[E, H, I]`; `swiglu(g, l) = G·σ(α·G)·(L + β)` with `G = min(g, limit)` and
//! `L = clamp(l, ±limit)`. In f16 the projections, the bias sums and the activation are rounded
//! to f16, the weighted sum is accumulated in f32 and rounded once.

use half::f16;

use super::{OpCall, OpImpl, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpImpl] = &[OpImpl::ms("MoE", moe)];

/// The sizes of one MoE call.
struct Dims {
    tokens: usize,
    hidden: usize,
    inter: usize,
    experts: usize,
}

/// The SwiGLU parameters: `activation_alpha`, `activation_beta`, `swiglu_limit`.
struct Swiglu {
    alpha: f32,
    beta: f32,
    limit: f32,
}

impl Swiglu {
    /// `min(g, limit)·σ(α·min(g, limit))·(clamp(l, ±limit) + β)` (NaN passes through).
    fn apply(&self, g: f32, l: f32) -> f32 {
        let g = if self.limit < g { self.limit } else { g };
        let l = if l < -self.limit {
            -self.limit
        } else if self.limit < l {
            self.limit
        } else {
            l
        };
        let sigmoid = 1.0 / (1.0 + (-(self.alpha * g)).exp());
        g * sigmoid * (l + self.beta)
    }
}

/// Checks that `t` (input `name`) has shape `want`.
fn expect_shape(call: &OpCall<'_>, name: &str, t: &Tensor, want: &[usize]) -> Result<()> {
    if t.shape == want {
        Ok(())
    } else {
        Err(call.error(format!(
            "{name} must have shape {want:?}, found {:?}",
            t.shape
        )))
    }
}

/// The sizes, from the inputs' shapes (each checked).
fn dims(call: &OpCall<'_>) -> Result<Dims> {
    let (x, router, fc1, fc2) = (
        call.input(0)?,
        call.input(1)?,
        call.input(2)?,
        call.input(4)?,
    );
    let (&hidden, lead) = match x.shape.split_last() {
        Some(split) if matches!(x.shape.len(), 2 | 3) => split,
        _ => {
            return Err(call.error(format!(
                "input must be [tokens, hidden] or [batch, sequence, hidden], found {:?}",
                x.shape
            )))
        }
    };
    let tokens = lead.iter().product();
    let &[rows, experts] = router.shape.as_slice() else {
        return Err(call.error(format!(
            "router_probs must be [tokens, experts], found {:?}",
            router.shape
        )));
    };
    if rows != tokens {
        return Err(call.error(format!(
            "router_probs has {rows} rows, input has {tokens} tokens"
        )));
    }
    let inter = match fc2.shape.as_slice() {
        &[e, h, i] if e == experts && h == hidden => i,
        s => {
            return Err(call.error(format!(
                "fc2_experts_weights must be [{experts}, {hidden}, inter_size], found {s:?}"
            )))
        }
    };
    expect_shape(
        call,
        "fc1_experts_weights",
        fc1,
        &[experts, 2 * inter, hidden],
    )?;
    if let Some(b) = call.optional(3) {
        expect_shape(call, "fc1_experts_bias", b, &[experts, 2 * inter])?;
    }
    if let Some(b) = call.optional(5) {
        expect_shape(call, "fc2_experts_bias", b, &[experts, hidden])?;
    }
    Ok(Dims {
        tokens,
        hidden,
        inter,
        experts,
    })
}

/// Checks the attributes and inputs this implementation (as onnxruntime's CPU kernel) takes.
fn check_supported(call: &OpCall<'_>) -> Result<()> {
    let activation = call.string("activation_type").unwrap_or("relu");
    if activation != "swiglu" {
        return Err(call.error(format!(
            "activation_type `{activation}` is not implemented (only `swiglu`)"
        )));
    }
    let fusion = call.int("swiglu_fusion", 0);
    if fusion != 1 {
        return Err(call.error(format!(
            "swiglu_fusion = {fusion} is not implemented (only 1: gate and up rows interleaved \
             in fc1_experts_weights, as onnxruntime's CPU kernel requires)"
        )));
    }
    if call.int("use_sparse_mixer", 0) != 0 {
        return Err(call.error("use_sparse_mixer = 1 is not implemented"));
    }
    if call.int("swiglu_limit_after_activation", 0) != 0 {
        return Err(call.error("swiglu_limit_after_activation = 1 is not implemented"));
    }
    if call.optional(6).is_some() || call.optional(7).is_some() {
        return Err(call.error(
            "fc3_experts_weights / fc3_experts_bias are not implemented (fuse the up \
             projection into fc1_experts_weights)",
        ));
    }
    let dtype = call.input(0)?.dtype;
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(call.error(format!("input must be float32 or float16, found {dtype}")));
    }
    for (i, name) in [
        (1, "router_probs"),
        (2, "fc1_experts_weights"),
        (3, "fc1_experts_bias"),
        (4, "fc2_experts_weights"),
        (5, "fc2_experts_bias"),
    ] {
        if let Some(t) = call.optional(i) {
            if t.dtype != dtype {
                return Err(call.error(format!(
                    "{name} must have the input's dtype {dtype}, found {}",
                    t.dtype
                )));
            }
        }
    }
    Ok(())
}

/// A token's routing: its experts, best first, with their weights (softmax over all experts,
/// then the top `k`, renormalised when `normalize`).
fn route(logits: &[f32], k: usize, normalize: bool) -> Vec<(usize, f32)> {
    // The running maximum starts at the first logit and takes a later one only when larger.
    let max = logits[1..]
        .iter()
        .fold(logits[0], |m, &l| if m < l { l } else { m });
    let exps: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    let mut ranked: Vec<(usize, f32)> = exps.iter().map(|&e| e / sum).enumerate().collect();
    // Probabilities are all finite or all NaN (one NaN makes the sum NaN), so this order is
    // total where it matters: higher probability first, then higher index.
    ranked.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(b.0.cmp(&a.0))
    });
    ranked.truncate(k);
    if normalize {
        let total: f32 = ranked.iter().map(|r| r.1).sum();
        ranked.iter_mut().for_each(|r| r.1 /= total);
    }
    ranked
}

/// `com.microsoft::MoE` (see the module docs).
fn moe(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    check_supported(call)?;
    let d = dims(call)?;
    let x = call.input(0)?;
    let k = call.int("k", 1);
    let k = usize::try_from(k)
        .ok()
        .filter(|k| (1..=d.experts).contains(k))
        .ok_or_else(|| call.error(format!("k = {k} is outside 1..={}", d.experts)))?;
    let normalize = call.int("normalize_routing_weights", 0) != 0;
    let act = Swiglu {
        alpha: call.float("activation_alpha", 1.0),
        beta: call.float("activation_beta", 0.0),
        limit: call.float("swiglu_limit", f32::INFINITY),
    };
    call.alloc(&x.shape)?;
    let round = |v: f32| match x.dtype {
        DType::F16 => f16::from_f32(v).to_f32(),
        _ => v,
    };
    let floats = |i: usize| -> Result<Option<&[f32]>> {
        call.optional(i)
            .map(|t| t.floats().map_err(|e| call.error(e)))
            .transpose()
    };
    let (xs, logits) = (
        x.floats().map_err(|e| call.error(e))?,
        floats(1)?.unwrap_or(&[]),
    );
    let (fc1, b1) = (floats(2)?.unwrap_or(&[]), floats(3)?);
    let (fc2, b2) = (floats(4)?.unwrap_or(&[]), floats(5)?);
    let Dims {
        tokens,
        hidden: h,
        inter: i,
        experts: e,
    } = d;
    // Row `r` of a `[rows, n]` matrix times `v`, accumulated in f64, rounded to the dtype.
    let dot = |w: &[f32], r: usize, v: &[f32]| {
        let row = &w[r * v.len()..][..v.len()];
        round(
            row.iter()
                .zip(v)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>() as f32,
        )
    };
    let mut out = Vec::with_capacity(tokens * h);
    for t in 0..tokens {
        let xt = &xs[t * h..][..h];
        let mut picks = route(&logits[t * e..][..e], k, normalize);
        picks.retain(|p| p.1 > 0.0);
        picks.sort_by_key(|p| p.0);
        let mut acc = vec![0f64; h];
        for (expert, weight) in picks {
            let w1 = &fc1[expert * 2 * i * h..][..2 * i * h];
            let fc1_row = |r: usize| {
                let v = dot(w1, r, xt);
                b1.map_or(v, |b| round(v + b[expert * 2 * i + r]))
            };
            let a: Vec<f32> = (0..i)
                .map(|j| round(act.apply(fc1_row(2 * j), fc1_row(2 * j + 1))))
                .collect();
            let w2 = &fc2[expert * h * i..][..h * i];
            for (c, slot) in acc.iter_mut().enumerate() {
                let v = dot(w2, c, &a);
                let v = b2.map_or(v, |b| round(v + b[expert * h + c]));
                *slot += (weight * v) as f64;
            }
        }
        out.extend(acc.iter().map(|&v| v as f32));
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::interp::eval_op;
    use crate::ir::Attr;
    use crate::limits::InterpLimits;

    fn attrs(k: i64, normalize: i64) -> BTreeMap<String, Attr> {
        [
            ("k", Attr::Int(k)),
            ("normalize_routing_weights", Attr::Int(normalize)),
            ("activation_type", Attr::String("swiglu".into())),
            ("swiglu_fusion", Attr::Int(1)),
        ]
        .into_iter()
        .map(|(n, a)| (n.to_string(), a))
        .collect()
    }

    /// Two experts of width H = 1, I = 1: expert e's gate weight `g[e]`, up weight 1, down 1.
    fn run(logits: [f32; 2], k: i64, normalize: i64) -> f32 {
        let f = |shape: Vec<usize>, v: Vec<f32>| Tensor::float(DType::F32, shape, v);
        let x = f(vec![1, 1], vec![2.0]);
        let router = f(vec![1, 2], logits.to_vec());
        let fc1 = f(vec![2, 2, 1], vec![1.0, 1.0, -1.0, 1.0]);
        let fc2 = f(vec![2, 1, 1], vec![1.0, 1.0]);
        let inputs = [Some(&x), Some(&router), Some(&fc1), None, Some(&fc2)];
        let y = eval_op(
            "moe",
            ("com.microsoft", "MoE"),
            attrs(k, normalize),
            &inputs,
            &["y"],
            &InterpLimits::default(),
        )
        .unwrap();
        y[0].floats().unwrap()[0]
    }

    fn silu(v: f32) -> f32 {
        v / (1.0 + (-v).exp())
    }

    #[test]
    fn picks_the_most_probable_expert_and_weights_it() {
        // expert 0: silu(2)·2; expert 1: silu(-2)·2
        let p0 = 1.0 / (1.0 + (-1.0f32).exp());
        let y = run([1.0, 0.0], 1, 0);
        assert!((y - p0 * silu(2.0) * 2.0).abs() < 1e-6, "{y}");
        assert!((run([1.0, 0.0], 1, 1) - silu(2.0) * 2.0).abs() < 1e-6);
        let both = p0 * silu(2.0) * 2.0 + (1.0 - p0) * silu(-2.0) * 2.0;
        assert!((run([1.0, 0.0], 2, 0) - both).abs() < 1e-6);
    }

    #[test]
    fn equal_probabilities_pick_the_higher_expert() {
        assert!((run([0.5, 0.5], 1, 1) - silu(-2.0) * 2.0).abs() < 1e-6);
    }

    #[test]
    fn a_token_with_a_nan_or_infinite_logit_gets_zero() {
        assert_eq!(run([f32::NAN, 0.0], 2, 1), 0.0);
        assert_eq!(run([0.0, f32::INFINITY], 1, 0), 0.0);
        assert_eq!(run([f32::NEG_INFINITY; 2], 2, 0), 0.0);
    }

    #[test]
    fn a_layout_other_than_interleaved_swiglu_is_one_clear_error() {
        let x = Tensor::float(DType::F32, vec![1, 1], vec![1.0]);
        let mut a = attrs(1, 0);
        a.insert("swiglu_fusion".into(), Attr::Int(2));
        let inputs = [Some(&x), Some(&x), Some(&x), None, Some(&x)];
        let err = eval_op(
            "moe",
            ("com.microsoft", "MoE"),
            a,
            &inputs,
            &["y"],
            &InterpLimits::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("swiglu_fusion = 2"), "{err}");
    }
}
