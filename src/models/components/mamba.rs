//! Mamba's (Mamba-1's) selective state-space mixer with its conv and SSM states carried between
//! calls, the prompt-length recurrence as an ONNX `Scan` over time.
//!
//! `in_proj` gives the channels `x` and the gate `z` (`intermediate` each); `x` goes through the
//! depthwise causal convolution of [`causal_conv_with_state`] (conv state `[B, intermediate,
//! K−1]`) and SiLU; `x_proj` gives the low-rank time steps (`time_step_rank`), `B` and `C`
//! (`state` each, shared by every channel), FalconMamba RMS-norms each of the three (no weight;
//! Jamba with a weight each);
//! `dt_proj` (its weight only) widens the time steps to one per channel. Per channel `c` and
//! state index `n`, with `dt = softplus(dt + dt_proj.bias)` and `A = −exp(A_log)` (`[intermediate,
//! state]`: a decay per channel *and* state index), the recurrence is `h_t = exp(dt_t·A)·h_{t−1} +
//! (dt_t·x_t) ⊗ B_t`, `y_t = h_t·C_t + D·x_t`. Unlike Mamba2's (one decay per head, the closed
//! "SSD" form of [`super::ssm`]), its closed form would need an `S × S × intermediate × state`
//! tensor, so the call's `S` steps run as a `Scan` over the time axis instead: the decays
//! `exp(dt·A)` and inputs `(dt·x) ⊗ B` (`[B, S, intermediate, state]`) and `C` are computed for
//! the whole call first, then the body (a subgraph attribute, reading only its own inputs) does
//! `h = decay_t·h + input_t`, `y_t = h·C_t` with the state `h` `[B, intermediate, state]` carried
//! from step to step. It is exact for every `S` (a prompt, or one token per decode step: a
//! one-step Scan), costs `O(S·intermediate·state)` multiply-adds per call in `S` sequential body
//! steps of three nodes, and memory `O(S·intermediate·state)` for the precomputed decays and
//! inputs; per decode step it is constant, whatever the context length. The state-space part
//! runs in f32 whatever the model dtype (as transformers' torch path); then `(y + D·x)·silu(z)`
//! is projected back (`out_proj`).

use super::gated_delta::GatedDeltaMixer;
use super::linear;
use super::mixer_ops::{from_f32, silu, split, to_f32};
use super::norm::{Norm, NormKind};
use super::short_conv::{causal_conv_with_state, ShortConv};
use super::ssm::{Mamba2Mixer, SsmState};
use crate::ir::{Attr, DType, Dim, GraphBuilder, Initializer, Shape, TensorData, TensorSource};

/// The recurrent mixer that is a layer's token mixer: Mamba2's, Mamba's or Gated DeltaNet's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SsmMixer {
    /// Mamba2's ([`super::ssm::mamba2_mixer`]): SSM state `[B, heads, head_dim, state]`.
    Mamba2(Mamba2Mixer),
    /// Mamba's ([`mamba_mixer`]): SSM state `[B, intermediate, state]`.
    Mamba(MambaMixer),
    /// Gated DeltaNet's ([`super::gated_delta::gated_delta_mixer`]): recurrent state
    /// `[B, value_heads, key_dim, value_dim]`.
    GatedDelta(GatedDeltaMixer),
}

impl SsmMixer {
    /// The convolution whose state the layer carries.
    pub fn conv(&self) -> ShortConv {
        match self {
            SsmMixer::Mamba2(m) => m.conv(),
            SsmMixer::Mamba(m) => m.conv(),
            SsmMixer::GatedDelta(m) => m.conv(),
        }
    }

    /// The state's name between `past.{i}.` / `present.{i}.`: `ssm` (Mamba2, Mamba), or
    /// `recurrent` (Gated DeltaNet: onnxruntime-genai 0.18's name for Qwen3.5's state).
    pub fn state_name(&self) -> &'static str {
        match self {
            SsmMixer::Mamba2(_) | SsmMixer::Mamba(_) => "ssm",
            SsmMixer::GatedDelta(_) => "recurrent",
        }
    }

    /// The SSM state's dims after the batch.
    pub fn state_dims(&self) -> Vec<usize> {
        match self {
            SsmMixer::Mamba2(m) => vec![m.heads, m.head_dim, m.state],
            SsmMixer::Mamba(m) => vec![m.intermediate, m.state],
            SsmMixer::GatedDelta(m) => vec![m.value_heads, m.key_dim, m.value_dim],
        }
    }
}

/// The shape of a Mamba mixer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MambaMixer {
    /// The residual stream's width.
    pub hidden: usize,
    /// The mixer's channels (`expand · hidden`).
    pub intermediate: usize,
    /// State size per channel (`d_state`).
    pub state: usize,
    /// The time-step projection's rank (`x_proj`'s first outputs, `dt_proj`'s inputs).
    pub rank: usize,
    /// Kernel width of the convolution (at least 2).
    pub kernel: usize,
    /// Whether `in_proj` and `out_proj` have biases.
    pub bias: bool,
    /// Whether the convolution has a bias.
    pub conv_bias: bool,
    /// FalconMamba: the epsilon of the weightless RMS norms on the time steps, `B` and `C`
    /// (`None`: Mamba, no such norms).
    pub bcdt_norm_eps: Option<f32>,
    /// Jamba: those norms have weights, modules `{module}.dt_layernorm`, `b_layernorm` and
    /// `c_layernorm` (RMS norms as the decoder's, with `bcdt_norm_eps`).
    pub bcdt_norm_weights: bool,
}

impl MambaMixer {
    /// The convolution whose state the layer carries.
    pub fn conv(&self) -> ShortConv {
        ShortConv {
            channels: self.intermediate,
            kernel: self.kernel,
            bias: self.conv_bias,
        }
    }
}

/// Mamba's mixer of module `module` over the normed input `x` `[B, S, hidden]`, continuing from
/// `state` (its SSM state `[B, intermediate, state]`); `token_mask` (the current tokens'
/// `attention_mask` columns `[B, S, 1]` in `dtype`) zeroes padded positions before `in_proj`
/// and after the convolution, as transformers does. Returns the output `[B, S, hidden]`.
pub fn mamba_mixer(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    m: MambaMixer,
    state: SsmState<'_>,
    token_mask: &str,
    dtype: DType,
) -> String {
    let (inner, n, r) = (m.intermediate, m.state, m.rank);
    let masked = b.op("Mul", &[x, token_mask], vec![]);
    let proj = linear(
        b,
        &masked,
        &format!("{module}.in_proj"),
        m.hidden,
        2 * inner,
        m.bias,
        dtype,
    );
    let sizes = b.const_i64(&[inner as i64, inner as i64]);
    let [xs, gate] = <[String; 2]>::try_from(split(b, &proj, &sizes, 2)).expect("two parts");
    let conv = causal_conv_with_state(
        b,
        &xs,
        &format!("{module}.conv1d"),
        m.conv(),
        state.conv,
        dtype,
    );
    let conv = silu(b, &conv);
    let xs = b.op("Mul", &[&conv, token_mask], vec![]);
    let selected = linear(
        b,
        &xs,
        &format!("{module}.x_proj"),
        inner,
        r + 2 * n,
        false,
        dtype,
    );
    let sizes = b.const_i64(&[r as i64, n as i64, n as i64]);
    let [dt, bm, cm] =
        <[String; 3]>::try_from(split(b, &selected, &sizes, 3)).expect("three parts");
    let [dt, bm, cm] = match (m.bcdt_norm_eps, m.bcdt_norm_weights) {
        (Some(eps), false) => [dt, bm, cm].map(|t| weightless_rms_norm(b, &t, eps, dtype)),
        (Some(eps), true) => {
            let norm = Norm {
                kind: NormKind::Rms,
                eps,
            };
            let parts = [
                (dt, "dt_layernorm", r),
                (bm, "b_layernorm", n),
                (cm, "c_layernorm", n),
            ];
            parts.map(|(t, name, width)| {
                norm.apply(b, &t, &format!("{module}.{name}"), width, dtype)
            })
        }
        (None, _) => [dt, bm, cm],
    };
    let dt = linear(b, &dt, &format!("{module}.dt_proj"), r, inner, false, dtype);
    let [xs, gate, dt, bm, cm] = [xs, gate, dt, bm, cm].map(|t| to_f32(b, &t, dtype));
    let param = |b: &mut GraphBuilder, name: &str, shape: Vec<usize>| {
        b.initializer(Initializer {
            name: format!("{module}.{name}"),
            dtype: DType::F32,
            shape,
            source: Some(TensorSource::Checkpoint(format!("{module}.{name}"))),
        })
    };
    let a_log = param(b, "A_log", vec![inner, n]);
    let d_skip = param(b, "D", vec![inner]);
    let dt_bias = param(b, "dt_proj.bias", vec![inner]);

    // Per step, channel and state index: decay exp(dt·A) and input (dt·x) ⊗ B, [B, S, I, N].
    let dt = b.op("Add", &[&dt, &dt_bias], vec![]);
    let dt = b.op("Softplus", &[&dt], vec![]);
    let a = b.op("Exp", &[&a_log], vec![]);
    let a = b.op("Neg", &[&a], vec![]);
    let (last, minus2) = (b.const_i64(&[-1]), b.const_i64(&[-2]));
    let dt_col = b.op("Unsqueeze", &[&dt, &last], vec![]);
    let decay = b.op("Mul", &[&dt_col, &a], vec![]);
    let decay = b.op("Exp", &[&decay], vec![]);
    let x_dt = b.op("Mul", &[&xs, &dt], vec![]);
    let x_dt = b.op("Unsqueeze", &[&x_dt, &last], vec![]);
    let b_row = b.op("Unsqueeze", &[&bm, &minus2], vec![]);
    let input = b.op("Mul", &[&x_dt, &b_row], vec![]);
    let c_col = b.op("Unsqueeze", &[&cm, &last], vec![]);

    let past = to_f32(b, state.past, dtype);
    let body = scan_body(module, inner, n);
    let (final_state, ys) = (b.fresh_name("Scan"), b.fresh_name("Scan"));
    b.node(
        "",
        "Scan",
        &[&past, &decay, &input, &c_col],
        vec![
            ("body", Attr::Graph(Box::new(body))),
            ("num_scan_inputs", Attr::Int(3)),
            ("scan_input_axes", Attr::Ints(vec![1, 1, 1])),
            ("scan_output_axes", Attr::Ints(vec![1])),
        ],
        vec![final_state.clone(), ys.clone()],
    );
    let out_dtype = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
    b.op_into("Cast", &[&final_state], out_dtype, state.present);

    // y [B, S, I, 1] → [B, S, I]; the skip D·x, the gate, out_proj.
    let flat = b.const_i64(&[0, 0, inner as i64]);
    let y = b.op("Reshape", &[&ys, &flat], vec![]);
    let skip = b.op("Mul", &[&xs, &d_skip], vec![]);
    let y = b.op("Add", &[&y, &skip], vec![]);
    let gate = silu(b, &gate);
    let y = b.op("Mul", &[&y, &gate], vec![]);
    let y = from_f32(b, &y, dtype);
    linear(
        b,
        &y,
        &format!("{module}.out_proj"),
        inner,
        m.hidden,
        m.bias,
        dtype,
    )
}

/// The `Scan` body of one time step (all f32): inputs the state `h` `[B, I, N]`, then the
/// step's decay and input `[B, I, N]` and `C` `[B, N, 1]`; outputs the new state
/// `decay·h + input` and `y = h·C` `[B, I, 1]`. It reads nothing from the enclosing graph and
/// holds no constants; its values are named under `{module}/scan` (unique in the model).
fn scan_body(module: &str, inner: usize, n: usize) -> crate::ir::Graph {
    let mut body = GraphBuilder::new(&format!("{module}.scan_body"));
    let scope = format!("{module}/scan");
    body.set_scope(&scope);
    let batch = || Dim::sym("batch");
    let square = || Shape(vec![batch(), inner.into(), n.into()]);
    let named = |part: &str| format!("{scope}/{part}");
    let h = body.input(&named("h"), DType::F32, square());
    let decay = body.input(&named("decay"), DType::F32, square());
    let input = body.input(&named("input"), DType::F32, square());
    let c = body.input(
        &named("c"),
        DType::F32,
        Shape(vec![batch(), n.into(), 1usize.into()]),
    );
    let kept = body.op("Mul", &[&decay, &h], vec![]);
    let next = named("h_next");
    body.op_into("Add", &[&kept, &input], vec![], &next);
    let y = named("y");
    body.op_into("MatMul", &[&next, &c], vec![], &y);
    body.output(&next, DType::F32, square());
    body.output(
        &y,
        DType::F32,
        Shape(vec![batch(), inner.into(), 1usize.into()]),
    );
    body.finish()
}

/// FalconMamba's weightless RMS norm over the last axis of `t`, computed in f32 and returned in
/// `dtype` (as transformers rounds it back to the input's dtype).
fn weightless_rms_norm(b: &mut GraphBuilder, t: &str, eps: f32, dtype: DType) -> String {
    let t32 = to_f32(b, t, dtype);
    let square = b.op("Mul", &[&t32, &t32], vec![]);
    let last = b.const_i64(&[-1]);
    let mean = b.op("ReduceMean", &[&square, &last], vec![]);
    let eps = b.constant(TensorData::from_f32(vec![], &[eps]));
    let shifted = b.op("Add", &[&mean, &eps], vec![]);
    let root = b.op("Sqrt", &[&shifted], vec![]);
    let normed = b.op("Div", &[&t32, &root], vec![]);
    from_f32(b, &normed, dtype)
}
