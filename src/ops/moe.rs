//! `com.microsoft::MoE`: a sparse mixture of SwiGLU experts, as onnxruntime's CPU kernel
//! computes it, and `com.microsoft::QMoE`, the same with integer-quantized experts.
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
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use half::f16;

use super::cost::{Cost, Work};
use super::elementwise::first_type;
use super::quant::{contrib_block_size, packed_value};
use super::{OpCall, OpDef, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::ms(
        "MoE",
        &[
            "activation_alpha",
            "activation_beta",
            "activation_type",
            "k",
            "normalize_routing_weights",
            "swiglu_fusion",
            "swiglu_limit",
            "use_sparse_mixer",
        ],
    )
    .infer(first_type)
    .cost(FUSED.work(Work::Experts))
    .eval(moe),
    OpDef::ms(
        "QMoE",
        &[
            "accuracy_level",
            "activation_alpha",
            "activation_beta",
            "activation_type",
            "block_size",
            "expert_weight_bits",
            "k",
            "normalize_routing_weights",
            "quant_type",
            "swiglu_fusion",
            "swiglu_limit",
            "use_sparse_mixer",
            "weights_prepacked",
        ],
    )
    .infer(first_type)
    .cost(FUSED.work(Work::PackedExperts))
    .eval(qmoe),
];

/// Where the fused MoE kernels run: onnxruntime's CPU kernel takes f32 and f16 only (the CUDA
/// one bf16 too, unverified).
const FUSED: Cost = Cost::KERNEL
    .support(|c, dtype, _| c.supports_fused_moe && matches!(dtype, Some(DType::F32 | DType::F16)));

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

/// The experts' float weights: `fc1` `[E, 2·I, H]`, `fc2` `[E, H, I]`, optional biases
/// `[E, 2·I]` and `[E, H]`.
struct Experts<'a> {
    fc1: &'a [f32],
    b1: Option<&'a [f32]>,
    fc2: &'a [f32],
    b2: Option<&'a [f32]>,
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

/// The tokens, hidden size and experts, from `input` and `router_probs` (checked).
fn token_dims(call: &OpCall<'_>) -> Result<(usize, usize, usize)> {
    let (x, router) = (call.input(0)?, call.input(1)?);
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
    Ok((tokens, hidden, experts))
}

/// The sizes of a MoE call, from the inputs' shapes (each checked).
fn dims(call: &OpCall<'_>) -> Result<Dims> {
    let (tokens, hidden, experts) = token_dims(call)?;
    let (fc1, fc2) = (call.input(2)?, call.input(4)?);
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

/// Checks the activation attributes and the input's dtype, which MoE and QMoE share (as
/// onnxruntime's CPU kernels take them).
fn check_activation(call: &OpCall<'_>) -> Result<DType> {
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
    let dtype = call.input(0)?.dtype;
    if !matches!(dtype, DType::F32 | DType::F16) {
        return Err(call.error(format!("input must be float32 or float16, found {dtype}")));
    }
    Ok(dtype)
}

/// Checks that each present input of `inputs` (index, name) has the dtype `dtype`.
fn check_dtypes(call: &OpCall<'_>, dtype: DType, inputs: &[(usize, &str)]) -> Result<()> {
    for &(i, name) in inputs {
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

/// Checks the attributes and inputs MoE takes (as onnxruntime's CPU kernel).
fn check_supported(call: &OpCall<'_>) -> Result<()> {
    let dtype = check_activation(call)?;
    if call.optional(6).is_some() || call.optional(7).is_some() {
        return Err(call.error(
            "fc3_experts_weights / fc3_experts_bias are not implemented (fuse the up \
             projection into fc1_experts_weights)",
        ));
    }
    check_dtypes(
        call,
        dtype,
        &[
            (1, "router_probs"),
            (2, "fc1_experts_weights"),
            (3, "fc1_experts_bias"),
            (4, "fc2_experts_weights"),
            (5, "fc2_experts_bias"),
        ],
    )
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

/// Input `i` as floats, if present.
fn floats<'a>(call: &OpCall<'a>, i: usize) -> Result<Option<&'a [f32]>> {
    call.optional(i)
        .map(|t| t.floats().map_err(|e| call.error(e)))
        .transpose()
}

/// `com.microsoft::MoE` (see the module docs).
fn moe(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    check_supported(call)?;
    let d = dims(call)?;
    let experts = Experts {
        fc1: floats(call, 2)?.unwrap_or(&[]),
        b1: floats(call, 3)?,
        fc2: floats(call, 4)?.unwrap_or(&[]),
        b2: floats(call, 5)?,
    };
    forward(call, &d, &experts)
}

/// The routed experts' weighted sum for every token (the routing and activation attributes
/// read from `call`, the weights given as floats).
fn forward(call: &OpCall<'_>, d: &Dims, w: &Experts<'_>) -> Result<Vec<Tensor>> {
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
    let (xs, logits) = (
        x.floats().map_err(|e| call.error(e))?,
        floats(call, 1)?.unwrap_or(&[]),
    );
    let Experts { fc1, b1, fc2, b2 } = *w;
    let &Dims {
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

/// One quantized projection of QMoE: `[E, N, K]` weights quantized along K.
struct Projection {
    /// Input indices of the weights, scales and zero points, and the projection's name.
    weights: usize,
    scales: usize,
    zero_points: usize,
    name: &'static str,
    /// Its attribute overriding `expert_weight_bits`.
    bits_attr: &'static str,
}

/// The QMoE projections: fc1 (gate and up, interleaved) and fc2 (down).
const FC1: Projection = Projection {
    weights: 2,
    scales: 3,
    zero_points: 11,
    name: "fc1",
    bits_attr: "fc1_expert_weight_bits",
};
const FC2: Projection = Projection {
    weights: 5,
    scales: 6,
    zero_points: 12,
    name: "fc2",
    bits_attr: "fc2_expert_weight_bits",
};

/// Dequantizes projection `p` of `experts` experts, `[E, n, k]`, to floats:
/// `(q - zero_point)·scale` in f32, with one scale per row (no `block`) or per `block` values
/// of a row, and zero points `2^(bits-1)` when absent.
fn dequantize(
    call: &OpCall<'_>,
    p: &Projection,
    dtype: DType,
    [experts, n, k]: [usize; 3],
    block: Option<usize>,
) -> Result<Vec<f32>> {
    let bits = match call.int(p.bits_attr, call.int("expert_weight_bits", 4)) {
        b @ (4 | 8) => b as usize,
        b => {
            return Err(call.error(format!(
                "{} weights of {b} bits are not implemented (4 or 8)",
                p.name
            )))
        }
    };
    if bits == 8 && block.is_some() {
        return Err(call.error(format!(
            "block-wise 8-bit {} weights are not implemented: onnxruntime's CPU QMoE (1.32) \
             quantizes the activations to int8 for them at every accuracy_level",
            p.name
        )));
    }
    let (q, scales) = (call.input(p.weights)?, call.input(p.scales)?);
    let row_bytes = k * bits / 8;
    if q.dtype != DType::U8 || q.shape != [experts, n, row_bytes] {
        return Err(call.error(format!(
            "{}_experts_weights must be uint8 [{experts}, {n}, {row_bytes}], found {} {:?}",
            p.name, q.dtype, q.shape
        )));
    }
    let groups = block.map_or(1, |b| k / b);
    let group = k / groups;
    let scale_shape: Vec<usize> = match block {
        Some(_) => vec![experts, n, groups],
        None => vec![experts, n],
    };
    if scales.dtype != dtype || scales.shape != scale_shape {
        return Err(call.error(format!(
            "{}_scales must be {dtype} {scale_shape:?}, found {} {:?}",
            p.name, scales.dtype, scales.shape
        )));
    }
    // Zero points: per expert, `n·groups` values packed row by row (block-wise: each row
    // padded to whole bytes; column-wise: the expert's `n` values packed together).
    let (zp_shape, zp_row) = match block {
        Some(_) => {
            let row = (groups * bits).div_ceil(8);
            (vec![experts, n, row], row)
        }
        None => (vec![experts, (n * bits).div_ceil(8)], 0),
    };
    let zero_points = match call.optional(p.zero_points) {
        None => None,
        Some(z) if z.dtype == DType::U8 && z.shape == zp_shape => {
            Some(z.ints().map_err(|e| call.error(e))?)
        }
        Some(z) => {
            return Err(call.error(format!(
                "{}_zero_points must be uint8 {zp_shape:?}, found {} {:?}",
                p.name, z.dtype, z.shape
            )))
        }
    };
    call.alloc(&[experts, n, k])?;
    let (q, s) = (
        q.ints().map_err(|e| call.error(e))?,
        scales.floats().map_err(|e| call.error(e))?,
    );
    let zp_expert = zp_shape[1..].iter().product::<usize>();
    let mut w = Vec::with_capacity(experts * n * k);
    for e in 0..experts {
        for r in 0..n {
            let bytes = &q[(e * n + r) * row_bytes..][..row_bytes];
            for g in 0..groups {
                let zp = zero_points.map_or(1 << (bits - 1), |z| match block {
                    Some(_) => packed_value(&z[(e * n + r) * zp_row..][..zp_row], g, bits),
                    None => packed_value(&z[e * zp_expert..][..zp_expert], r, bits),
                });
                let scale = s[(e * n + r) * groups + g];
                w.extend(
                    (g * group..(g + 1) * group)
                        .map(|j| (packed_value(bytes, j, bits) - zp) as f32 * scale),
                );
            }
        }
    }
    Ok(w)
}

/// `com.microsoft::QMoE` with integer experts (`quant_type` `int`): MoE whose fc1 and fc2
/// weights are uint8 `[E, N, K·bits/8]` (each row's values packed lowest bits first, the
/// layout of MatMulNBits' `B` rows), 4 or 8 bits (`expert_weight_bits`, overridden per
/// projection by `fc1_expert_weight_bits` / `fc2_expert_weight_bits`; 8 bits column-wise
/// only: block-wise, onnxruntime's kernel always quantizes the activations), dequantized as
/// `(q - zero_point)·scale` with scales `[E, N]` (one per row) or, with `block_size`,
/// `[E, N, K/block_size]`, and optional packed uint8 zero points (absent: `2^(bits-1)`, the
/// symmetric form). The rest is MoE's computation on the dequantized weights, with the top-k
/// weights renormalised: `normalize_routing_weights = 0` is an error, since onnxruntime's CPU
/// kernel (1.32) renormalises whatever it says (measured: top-1 and top-2 of 4 experts give
/// MoE's normalised result, not its unnormalised one).
///
/// `accuracy_level` is ignored: this is onnxruntime's result at level 0 (measured with
/// onnxruntime 1.32: the dequantized MoE within 1e-6 in f32). At level 4 onnxruntime's CPU
/// kernel quantizes the activations of block-wise 4-bit experts to int8 and differs by more
/// (about 1% of the largest output on standard normal inputs). fc3, router_weights and the
/// floating-point and FP4/FP8 forms are not implemented (errors).
fn qmoe(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let dtype = check_activation(call)?;
    let quant = call.string("quant_type").unwrap_or("int");
    if quant != "int" {
        return Err(call.error(format!(
            "quant_type `{quant}` is not implemented (only `int`)"
        )));
    }
    if call.int("normalize_routing_weights", 0) == 0 {
        return Err(call.error(
            "normalize_routing_weights = 0 is not implemented: onnxruntime's CPU QMoE \
             (1.32) divides the top-k weights by their sum whatever the attribute says",
        ));
    }
    let prepacked = call.int("weights_prepacked", -1);
    if prepacked == 1 {
        return Err(call.error(
            "weights_prepacked = 1 (an execution provider's own layout) is not implemented",
        ));
    }
    for (i, name) in [
        (8, "fc3_experts_weights"),
        (9, "fc3_scales"),
        (10, "fc3_experts_bias"),
        (13, "fc3_zero_points"),
        (14, "router_weights"),
    ] {
        if call.optional(i).is_some() {
            return Err(call.error(format!("input {name} is not implemented")));
        }
    }
    if (15..call.inputs.len()).any(|i| call.optional(i).is_some()) {
        return Err(
            call.error("global and activation scales (inputs 15 and later) are not implemented")
        );
    }
    check_dtypes(
        call,
        dtype,
        &[
            (1, "router_probs"),
            (4, "fc1_experts_bias"),
            (7, "fc2_experts_bias"),
        ],
    )?;
    let (tokens, hidden, experts) = token_dims(call)?;
    let fc1 = call.input(FC1.weights)?;
    let inter = match fc1.shape.as_slice() {
        &[e, rows, _] if e == experts && rows % 2 == 0 && rows > 0 => rows / 2,
        s => {
            return Err(call.error(format!(
                "fc1_experts_weights must be [{experts}, 2*inter_size, packed hidden], found \
                 {s:?}"
            )))
        }
    };
    let block = match call.attrs().get("block_size") {
        None => None,
        Some(crate::ir::Attr::Int(v)) => {
            let b = contrib_block_size(call, *v)?;
            if hidden % b != 0 || inter % b != 0 {
                return Err(call.error(format!(
                    "block_size {b} must divide hidden_size {hidden} and inter_size {inter}"
                )));
            }
            Some(b)
        }
        Some(_) => return Err(call.error("attribute block_size must be an integer")),
    };
    let d = Dims {
        tokens,
        hidden,
        inter,
        experts,
    };
    if let Some(b) = call.optional(4) {
        expect_shape(call, "fc1_experts_bias", b, &[experts, 2 * inter])?;
    }
    if let Some(b) = call.optional(7) {
        expect_shape(call, "fc2_experts_bias", b, &[experts, hidden])?;
    }
    let w1 = dequantize(call, &FC1, dtype, [experts, 2 * inter, hidden], block)?;
    let w2 = dequantize(call, &FC2, dtype, [experts, hidden, inter], block)?;
    let experts = Experts {
        fc1: &w1,
        b1: floats(call, 4)?,
        fc2: &w2,
        b2: floats(call, 7)?,
    };
    forward(call, &d, &experts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::eval_op;
    use crate::ir::{Attr, Attrs};
    use crate::limits::InterpLimits;

    fn attrs(k: i64, normalize: i64) -> Attrs {
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

    /// A QMoE call of E = 2 experts, H = 16, I = 16 (4-bit values all 9, scales 1/8: every
    /// weight 1/8), with `extra` attributes over top-1 renormalised block-16 defaults.
    fn qmoe_call(extra: &[(&str, Attr)]) -> Result<Vec<Tensor>> {
        let (e, h, i) = (2, 16, 16);
        let x = Tensor::float(DType::F32, vec![1, h], vec![1.0; h]);
        let router = Tensor::float(DType::F32, vec![1, e], vec![0.0, 1.0]);
        let w1 = Tensor::int(
            DType::U8,
            vec![e, 2 * i, h / 2],
            vec![0x99; e * 2 * i * h / 2],
        );
        let s1 = Tensor::float(DType::F32, vec![e, 2 * i, 1], vec![0.125; e * 2 * i]);
        let w2 = Tensor::int(DType::U8, vec![e, h, i / 2], vec![0x99; e * h * i / 2]);
        let s2 = Tensor::float(DType::F32, vec![e, h, 1], vec![0.125; e * h]);
        let mut a = attrs(1, 1);
        a.insert("block_size".into(), Attr::Int(16));
        for (n, v) in extra {
            a.insert(n.to_string(), v.clone());
        }
        let inputs = [
            Some(&x),
            Some(&router),
            Some(&w1),
            Some(&s1),
            None,
            Some(&w2),
            Some(&s2),
        ];
        eval_op(
            "qmoe",
            ("com.microsoft", "QMoE"),
            a,
            &inputs,
            &["y"],
            &InterpLimits::default(),
        )
    }

    #[test]
    fn qmoe_dequantizes_then_runs_the_experts() {
        // gate = up = 16 · 1/8 = 2 per row; down: 16 · silu(2)·2 / 8, expert 1 with weight 1
        let y = qmoe_call(&[]).unwrap();
        let want = 16.0 * silu(2.0) * 2.0 / 8.0;
        for v in y[0].floats().unwrap() {
            assert!((v - want).abs() < 1e-5, "{v} vs {want}");
        }
    }

    #[test]
    fn qmoe_refuses_what_onnxruntime_computes_otherwise() {
        let err = qmoe_call(&[("normalize_routing_weights", Attr::Int(0))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("normalize_routing_weights = 0"), "{err}");
        let err = qmoe_call(&[("expert_weight_bits", Attr::Int(8))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("block-wise 8-bit"), "{err}");
        let err = qmoe_call(&[("quant_type", Attr::String("fp8".into()))])
            .unwrap_err()
            .to_string();
        assert!(err.contains("quant_type `fp8`"), "{err}");
    }
}
