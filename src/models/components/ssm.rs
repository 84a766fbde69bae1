//! Mamba2's selective state-space mixer with its conv and SSM states carried between calls, in
//! standard ONNX ops (no `Scan` or `Loop`).
//!
//! `in_proj` gives the gate `z`, the convolved channels `xBC` and the time steps `dt`; `xBC`
//! goes through the depthwise causal convolution of [`causal_conv_with_state`] (conv state
//! `[B, conv_dim, K−1]`) and SiLU, then splits into `x` (`heads × head_dim`), `B` and `C`
//! (`groups × state`, each group shared by `heads / groups` heads). Per head, with
//! `dt = softplus(dt + dt_bias)` and `A = −exp(A_log)`, the recurrence over the call's `S`
//! steps is `h_t = exp(dt_t·A)·h_{t−1} + dt_t·x_t ⊗ B_t`, `y_t = C_t·h_t + D·x_t`. Its
//! closed ("SSD", quadratic) form: with `cum` the cumulative sum of the log-decays `dt·A`
//! over the call, `L[t, s] = exp(cum_t − cum_s)` for `s ≤ t` (0 above the diagonal), so
//! `y = (L ∘ C Bᵀ)(dt·x) + exp(cum) ∘ (C h₀ᵀ) + D·x` and the new state is
//! `Σ_s exp(cum_S − cum_s)·(dt_s x_s) ⊗ B_s + exp(cum_S)·h₀`: a few batched MatMuls per layer,
//! exact for every `S` (a prompt, or one token per decode step: then it is the recurrence
//! itself). Cost per call: `O(S²·heads·(state + head_dim))` for the `S × S` terms (the prompt)
//! plus `O(S·heads·head_dim·state)`; per decode step constant, whatever the context length.
//! The state-space part runs in f32 whatever the model dtype (transformers' torch path
//! computes it in f32 as well). The output is gated and normed (`x · silu(z)`, RMS-normed per
//! group of `intermediate / groups` channels, times `norm.weight`) and projected (`out_proj`).

use super::linear;
use super::mixer_ops::silu;
use super::scalar;
use super::short_conv::{causal_conv_with_state, ConvState, ShortConv};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorData, TensorSource};

/// The shape of a Mamba2 mixer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mamba2Mixer {
    /// The residual stream's width.
    pub hidden: usize,
    /// SSM heads.
    pub heads: usize,
    /// Channels per SSM head (`heads · head_dim` is the mixer's intermediate width).
    pub head_dim: usize,
    /// State size per head and channel (`d_state`).
    pub state: usize,
    /// Groups sharing `B` and `C` (`heads` is a multiple of it).
    pub groups: usize,
    /// Kernel width of the convolution (at least 2).
    pub kernel: usize,
    /// Whether `in_proj` has a bias.
    pub bias: bool,
    /// Whether `out_proj` has a bias (`bias` in Mamba2 and the hybrids built on it; Falcon-H1's
    /// `projectors_bias`).
    pub out_bias: bool,
    /// Whether the convolution has a bias.
    pub conv_bias: bool,
    /// The gated RMS norm's epsilon.
    pub eps: f32,
    /// How the scan output is gated by `silu(z)` and normed.
    pub gate_norm: GateNorm,
    /// Multipliers on the mixer's input, `in_proj`'s output and the mixer's output (Falcon-H1's
    /// µP multipliers); `None`: none.
    pub scales: Option<Mamba2Scales>,
    /// The lower clamp of the time steps after softplus (Zamba2's `time_step_min`); `None`:
    /// none.
    pub dt_min: Option<f32>,
}

/// How a Mamba2 mixer gates its scan output `y` by `silu(z)` and norms it (module `norm`, an
/// RMS norm per group of `intermediate / groups` channels times `norm.weight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateNorm {
    /// `norm(y · silu(z))` (Mamba2, Bamba, Granite-4, Nemotron-H; Falcon-H1 with
    /// `mamba_norm_before_gate` false).
    GateThenNorm,
    /// `norm(y) · silu(z)` (Falcon-H1's default, `mamba_norm_before_gate` true).
    NormThenGate,
    /// `y · silu(z)`, no norm (Falcon-H1 with `mamba_rms_norm` false).
    GateOnly,
}

/// Falcon-H1's multipliers of a Mamba2 mixer, each applied where it is not 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mamba2Scales {
    /// The (masked) input before `in_proj` (`ssm_in_multiplier`).
    pub input: f32,
    /// `in_proj`'s output, per part: `z`, `x`, `B`, `C`, `dt` (`ssm_multipliers`, the µP
    /// vector).
    pub projection: [f32; 5],
    /// The mixer's output after `out_proj` (`ssm_out_multiplier`).
    pub output: f32,
}

impl Mamba2Mixer {
    /// The mixer's intermediate width, `heads · head_dim`.
    pub fn intermediate(&self) -> usize {
        self.heads * self.head_dim
    }

    /// The convolved channels: `x`, `B` and `C`.
    pub fn conv_dim(&self) -> usize {
        self.intermediate() + 2 * self.groups * self.state
    }

    /// The convolution whose state the layer carries.
    pub fn conv(&self) -> ShortConv {
        ShortConv {
            channels: self.conv_dim(),
            kernel: self.kernel,
            bias: self.conv_bias,
        }
    }
}

/// The graph inputs a Mamba or Mamba2 layer reads and the outputs it writes.
#[derive(Debug, Clone, Copy)]
pub struct SsmState<'a> {
    /// The conv state in and out, `[B, conv_dim, K−1]`.
    pub conv: ConvState<'a>,
    /// The SSM state input (`[B, heads, head_dim, state]` for Mamba2).
    pub past: &'a str,
    /// The name of the new SSM state's graph output.
    pub present: &'a str,
}

/// Mamba2's mixer of module `module` over the normed input `x` `[B, S, hidden]`, continuing
/// from `state`; `token_mask` (the current tokens' `attention_mask` columns `[B, S, 1]` in
/// `dtype`) zeroes padded positions before `in_proj` and after the convolution, as
/// transformers does. Returns the output `[B, S, hidden]`.
pub fn mamba2_mixer(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    m: Mamba2Mixer,
    state: SsmState<'_>,
    token_mask: &str,
    dtype: DType,
) -> String {
    let (i_w, h, p, n, g) = (m.intermediate(), m.heads, m.head_dim, m.state, m.groups);
    let masked = b.op("Mul", &[x, token_mask], vec![]);
    let masked = match m.scales {
        Some(s) if s.input != 1.0 => {
            let c = scalar(b, s.input, dtype);
            b.op("Mul", &[&masked, &c], vec![])
        }
        _ => masked,
    };
    let proj_width = i_w + m.conv_dim() + h;
    let proj = linear(
        b,
        &masked,
        &format!("{module}.in_proj"),
        m.hidden,
        proj_width,
        m.bias,
        dtype,
    );
    let proj = match m.scales {
        Some(s) if s.projection != [1.0; 5] => {
            let widths = [i_w, i_w, g * n, g * n, h];
            let vector: Vec<f32> = widths
                .iter()
                .zip(s.projection)
                .flat_map(|(&w, v)| std::iter::repeat_n(v, w))
                .collect();
            let vector = b.constant(TensorData::from_f32(vec![proj_width], &vector));
            let vector = match dtype {
                DType::F32 => vector,
                _ => b.op(
                    "Cast",
                    &[&vector],
                    vec![("to", Attr::Int(dtype.onnx_code() as i64))],
                ),
            };
            b.op("Mul", &[&proj, &vector], vec![])
        }
        _ => proj,
    };
    let sizes = b.const_i64(&[i_w as i64, m.conv_dim() as i64, h as i64]);
    let [z, xbc, dt] = split3(b, &proj, &sizes);
    let conv = causal_conv_with_state(
        b,
        &xbc,
        &format!("{module}.conv1d"),
        m.conv(),
        state.conv,
        dtype,
    );
    let conv = silu(b, &conv);
    let conv = b.op("Mul", &[&conv, token_mask], vec![]);
    let sizes = b.const_i64(&[i_w as i64, (g * n) as i64, (g * n) as i64]);
    let [xs, bm, cm] = split3(b, &conv, &sizes);
    let f32_of = |b: &mut GraphBuilder, t: &str| match dtype {
        DType::F32 => t.to_string(),
        _ => b.op(
            "Cast",
            &[t],
            vec![("to", Attr::Int(DType::F32.onnx_code() as i64))],
        ),
    };
    let (xs, bm, cm, dt) = (
        f32_of(b, &xs),
        f32_of(b, &bm),
        f32_of(b, &cm),
        f32_of(b, &dt),
    );
    let past = f32_of(b, state.past);
    let param = |b: &mut GraphBuilder, name: &str| {
        b.initializer(Initializer {
            name: format!("{module}.{name}"),
            dtype: DType::F32,
            shape: vec![h],
            source: Some(TensorSource::Checkpoint(format!("{module}.{name}"))),
        })
    };
    let (a_log, d_skip, dt_bias) = (param(b, "A_log"), param(b, "D"), param(b, "dt_bias"));

    // Time steps and log-decays, head-major: [B, H, S].
    let dt = b.op("Add", &[&dt, &dt_bias], vec![]);
    let dt = b.op("Softplus", &[&dt], vec![]);
    let dt = match m.dt_min {
        Some(low) => {
            let low = b.constant(TensorData::from_f32(vec![], &[low]));
            b.op("Max", &[&dt, &low], vec![])
        }
        None => dt,
    };
    let a = b.op("Exp", &[&a_log], vec![]);
    let a = b.op("Neg", &[&a], vec![]);
    let log_decay = b.op("Mul", &[&dt, &a], vec![]);
    let to_heads = |b: &mut GraphBuilder, t: &str| {
        b.op("Transpose", &[t], vec![("perm", Attr::Ints(vec![0, 2, 1]))])
    };
    let dt_h = to_heads(b, &dt);
    let log_decay = to_heads(b, &log_decay);
    let last_axis = b.scalar_i64(-1);
    let cum = b.op("CumSum", &[&log_decay, &last_axis], vec![]);

    // x per head [B, H, S, P]; B and C repeated over the heads of their group [B, H, S, N].
    let x_h = per_head(b, &xs, &[0, 0, h as i64, p as i64]);
    let per_group = |b: &mut GraphBuilder, t: &str| {
        let grouped = b.const_i64(&[0, 0, g as i64, 1, n as i64]);
        let grouped = b.op("Reshape", &[t, &grouped], vec![]);
        let shape = b.const_i64(&[1, 1, g as i64, (h / g) as i64, n as i64]);
        let repeated = b.op("Expand", &[&grouped, &shape], vec![]);
        per_head(b, &repeated, &[0, 0, h as i64, n as i64])
    };
    let b_h = per_group(b, &bm);
    let c_h = per_group(b, &cm);
    let last = b.const_i64(&[-1]);
    let dt_col = b.op("Unsqueeze", &[&dt_h, &last], vec![]);
    let x_dt = b.op("Mul", &[&x_h, &dt_col], vec![]);

    // L[t, s] = exp(cum_t − cum_s) for s ≤ t, else 0: [B, H, S, S].
    let rows = b.op("Unsqueeze", &[&cum, &last], vec![]);
    let minus2 = b.const_i64(&[-2]);
    let cols = b.op("Unsqueeze", &[&cum, &minus2], vec![]);
    let segment = b.op("Sub", &[&rows, &cols], vec![]);
    let causal = causal_mask(b, &cum);
    let neg_inf = b.constant(TensorData::from_f32(vec![], &[f32::NEG_INFINITY]));
    let segment = b.op("Where", &[&causal, &segment, &neg_inf], vec![]);
    let decay = b.op("Exp", &[&segment], vec![]);

    // Within the call: (L ∘ C Bᵀ)(dt·x).
    let b_t = transpose_last(b, &b_h);
    let scores = b.op("MatMul", &[&c_h, &b_t], vec![]);
    let scores = b.op("Mul", &[&scores, &decay], vec![]);
    let y = b.op("MatMul", &[&scores, &x_dt], vec![]);
    // From the carried state h₀ [B, H, P, N]: exp(cum_t)·C_t h₀ᵀ.
    let past_t = transpose_last(b, &past);
    let carried = b.op("MatMul", &[&c_h, &past_t], vec![]);
    let grow = b.op("Exp", &[&rows], vec![]);
    let carried = b.op("Mul", &[&carried, &grow], vec![]);
    let y = b.op("Add", &[&y, &carried], vec![]);
    let d_col = b.const_i64(&[h as i64, 1, 1]);
    let d_col = b.op("Reshape", &[&d_skip, &d_col], vec![]);
    let skip = b.op("Mul", &[&x_h, &d_col], vec![]);
    let y = b.op("Add", &[&y, &skip], vec![]);

    // New state: Σ_s exp(cum_S − cum_s)·(dt_s x_s) ⊗ B_s + exp(cum_S)·h₀.
    let (start, end) = (b.const_i64(&[-1]), b.const_i64(&[i64::MAX]));
    let cum_end = b.op("Slice", &[&cum, &start, &end, &last], vec![]);
    let to_end = b.op("Sub", &[&cum_end, &cum], vec![]);
    let to_end = b.op("Exp", &[&to_end], vec![]);
    let to_end = b.op("Unsqueeze", &[&to_end, &last], vec![]);
    let weighted = b.op("Mul", &[&x_dt, &to_end], vec![]);
    let weighted = transpose_last(b, &weighted);
    let fresh = b.op("MatMul", &[&weighted, &b_h], vec![]);
    let whole = b.op("Exp", &[&cum_end], vec![]);
    let whole = b.op("Unsqueeze", &[&whole, &last], vec![]);
    let kept = b.op("Mul", &[&past, &whole], vec![]);
    let new_state = b.op("Add", &[&fresh, &kept], vec![]);
    let out_dtype = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
    b.op_into("Cast", &[&new_state], out_dtype, state.present);

    // Back to time-major [B, S, I]; gate, norm per group, out_proj.
    let y = b.op(
        "Transpose",
        &[&y],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let flat = b.const_i64(&[0, 0, i_w as i64]);
    let y = b.op("Reshape", &[&y, &flat], vec![]);
    let z = f32_of(b, &z);
    let gate = silu(b, &z);
    let normed = match m.gate_norm {
        GateNorm::GateThenNorm => {
            let gated = b.op("Mul", &[&y, &gate], vec![]);
            let normed = group_rms_norm(b, &gated, &flat, m);
            let normed = to_dtype(b, normed, dtype);
            norm_weight(b, &normed, module, m, dtype)
        }
        GateNorm::NormThenGate => {
            let normed = group_rms_norm(b, &y, &flat, m);
            let gated = b.op("Mul", &[&normed, &gate], vec![]);
            let gated = to_dtype(b, gated, dtype);
            norm_weight(b, &gated, module, m, dtype)
        }
        GateNorm::GateOnly => {
            let gated = b.op("Mul", &[&y, &gate], vec![]);
            to_dtype(b, gated, dtype)
        }
    };
    let out = linear(
        b,
        &normed,
        &format!("{module}.out_proj"),
        i_w,
        m.hidden,
        m.out_bias,
        dtype,
    );
    match m.scales {
        Some(s) if s.output != 1.0 => {
            let c = scalar(b, s.output, dtype);
            b.op("Mul", &[&out, &c], vec![])
        }
        _ => out,
    }
}

/// `y` (f32, `[B, S, intermediate]`) RMS-normed per group of `intermediate / groups` channels,
/// without a weight, and flattened back by the shape `flat` (`[0, 0, intermediate]`).
fn group_rms_norm(b: &mut GraphBuilder, y: &str, flat: &str, m: Mamba2Mixer) -> String {
    let (i_w, g) = (m.intermediate(), m.groups);
    let grouped = b.const_i64(&[0, 0, g as i64, (i_w / g) as i64]);
    let grouped = b.op("Reshape", &[y, &grouped], vec![]);
    let ones = b.constant(TensorData::from_f32(vec![i_w / g], &vec![1.0; i_w / g]));
    let normed = b.op(
        "RMSNormalization",
        &[&grouped, &ones],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(m.eps))],
    );
    b.op("Reshape", &[&normed, flat], vec![])
}

/// An f32 `t` cast to `dtype` (as it is for f32).
fn to_dtype(b: &mut GraphBuilder, t: String, dtype: DType) -> String {
    match dtype {
        DType::F32 => t,
        _ => b.op(
            "Cast",
            &[&t],
            vec![("to", Attr::Int(dtype.onnx_code() as i64))],
        ),
    }
}

/// `t` times the gated norm's weight `{module}.norm.weight`.
fn norm_weight(
    b: &mut GraphBuilder,
    t: &str,
    module: &str,
    m: Mamba2Mixer,
    dtype: DType,
) -> String {
    let weight = b.initializer(Initializer {
        name: format!("{module}.norm.weight"),
        dtype,
        shape: vec![m.intermediate()],
        source: Some(TensorSource::Checkpoint(format!("{module}.norm.weight"))),
    });
    b.op("Mul", &[t, &weight], vec![])
}

/// `x` split on its last axis into three by `sizes`.
fn split3(b: &mut GraphBuilder, x: &str, sizes: &str) -> [String; 3] {
    let parts: [String; 3] = std::array::from_fn(|_| b.fresh_name("Split"));
    b.node(
        "",
        "Split",
        &[x, sizes],
        vec![("axis", Attr::Int(-1))],
        parts.to_vec(),
    );
    parts
}

/// `t` `[B, S, …]` reshaped to `shape` `[B, S, H, D]` and made head-major `[B, H, S, D]`.
fn per_head(b: &mut GraphBuilder, t: &str, shape: &[i64]) -> String {
    let shape = b.const_i64(shape);
    let t = b.op("Reshape", &[t, &shape], vec![]);
    b.op(
        "Transpose",
        &[&t],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    )
}

/// The last two axes of a 4-D `t` swapped.
fn transpose_last(b: &mut GraphBuilder, t: &str) -> String {
    b.op(
        "Transpose",
        &[t],
        vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))],
    )
}

/// `[S, S]` booleans, true where column `s ≤` row `t`, `S` the last dim of `cum`.
fn causal_mask(b: &mut GraphBuilder, cum: &str) -> String {
    let seq = b.op(
        "Shape",
        &[cum],
        vec![("start", Attr::Int(-1)), ("end", Attr::Int(i64::MAX))],
    );
    let zero = b.const_i64(&[0]);
    let seq = b.op("Squeeze", &[&seq, &zero], vec![]);
    let (start, step) = (b.scalar_i64(0), b.scalar_i64(1));
    let steps = b.op("Range", &[&start, &seq, &step], vec![]);
    let (last, first) = (b.const_i64(&[-1]), b.const_i64(&[0]));
    let rows = b.op("Unsqueeze", &[&steps, &last], vec![]);
    let cols = b.op("Unsqueeze", &[&steps, &first], vec![]);
    b.op("GreaterOrEqual", &[&rows, &cols], vec![])
}
