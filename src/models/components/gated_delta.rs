//! The Gated DeltaNet linear-attention mixer (Qwen3-Next's and Qwen3.5's `linear_attention`
//! layers) with its conv and recurrent states carried between calls, the prompt-length
//! recurrence as an ONNX `Scan` over time.
//!
//! The projections give `q`, `k` (`key_heads × key_dim` each), `v` (`value_heads × value_dim`),
//! the output gate `z` (as `v`) and per value head `b` and `a`: Qwen3-Next's fused
//! `in_proj_qkvz` / `in_proj_ba` lay them out key head by key head (each key head's `q`, `k`,
//! then the `v` and `z` of its `value_heads / key_heads` value heads; `b` then `a` the same),
//! Qwen3.5's `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a` one after the other.
//! `q k v` go through the depthwise causal convolution of [`causal_conv_with_state`] (no bias;
//! conv state `[B, 2·key_heads·key_dim + value_heads·value_dim, K−1]`) and SiLU. In f32, `q`
//! and `k` are repeated over the value heads of their key head, L2-normalised per head
//! (`x / √(Σx² + 1e-6)`), `q` divided by `√key_dim`; the decay is `g = −exp(A_log) ·
//! softplus(a + dt_bias)` and `beta = sigmoid(b)`. Per value head, the state `S` `[key_dim,
//! value_dim]` follows the delta rule `S ← exp(g_t)·S`, `S ← S + k_t ⊗ beta_t·(v_t − Sᵀk_t)`, and
//! the output is `o_t = Sᵀq_t` (transformers' `torch_recurrent_gated_delta_rule`; its chunked
//! form computes the same sums in another order). The call's `S` steps run as a `Scan` over
//! the time axis whose body (a subgraph attribute of eight nodes reading only its own inputs)
//! carries `S` `[B, value_heads, key_dim, value_dim]`; its final state is the layer's
//! `present.{i}.recurrent`. Exact for every `S` (a prompt, or one token per decode step: a
//! one-step Scan). Cost per call: `O(S·value_heads·key_dim·value_dim)` multiply-adds in `S`
//! sequential body steps, memory `O(S·value_heads·(key_dim + value_dim))` for the step inputs;
//! constant per decode step, whatever the context length. The recurrence runs in f32 whatever
//! the model dtype (as transformers' torch path); the states are carried in the model dtype.
//! The output is RMS-normed per value head (`norm.weight`, plain gain), times `silu(z)`, and
//! projected by `out_proj`; every projection is a plain MatMul (`--quant int4` quantizes
//! them).

use super::linear;
use super::mixer_ops::{from_f32, silu, split, to_f32};
use super::short_conv::{causal_conv_with_state, ConvState, ShortConv};
use super::ssm::SsmState;
use crate::ir::{Attr, DType, Dim, GraphBuilder, Initializer, Shape, TensorData, TensorSource};

/// The shape of a Gated DeltaNet mixer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatedDeltaMixer {
    /// The residual stream's width.
    pub hidden: usize,
    /// Query/key heads (`linear_num_key_heads`).
    pub key_heads: usize,
    /// Value heads (`linear_num_value_heads`, a multiple of `key_heads`).
    pub value_heads: usize,
    /// Channels per key head (`linear_key_head_dim`).
    pub key_dim: usize,
    /// Channels per value head (`linear_value_head_dim`).
    pub value_dim: usize,
    /// Kernel width of the convolution (at least 2).
    pub kernel: usize,
    /// The gated RMS norm's epsilon.
    pub eps: f32,
    /// Qwen3-Next's fused, key-head-interleaved `in_proj_qkvz` / `in_proj_ba` (else Qwen3.5's
    /// `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`).
    pub fused: bool,
}

impl GatedDeltaMixer {
    /// The width of `q` or `k`, `key_heads · key_dim`.
    pub fn key_width(&self) -> usize {
        self.key_heads * self.key_dim
    }

    /// The width of `v` or `z`, `value_heads · value_dim`.
    pub fn value_width(&self) -> usize {
        self.value_heads * self.value_dim
    }

    /// The convolution whose state the layer carries (over `q`, `k`, `v`; no bias).
    pub fn conv(&self) -> ShortConv {
        ShortConv {
            channels: 2 * self.key_width() + self.value_width(),
            kernel: self.kernel,
            bias: false,
        }
    }
}

/// The Gated DeltaNet mixer of module `module` over the normed input `x` `[B, S, hidden]`,
/// continuing from `state` (its recurrent state `[B, value_heads, key_dim, value_dim]`);
/// `token_mask` (the current tokens' `attention_mask` columns `[B, S, 1]` in `dtype`) zeroes
/// padded positions before the projections, as transformers does. Returns `[B, S, hidden]`.
pub fn gated_delta_mixer(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    m: GatedDeltaMixer,
    state: SsmState<'_>,
    token_mask: &str,
    dtype: DType,
) -> String {
    let (hk, hv, dk, dv) = (m.key_heads, m.value_heads, m.key_dim, m.value_dim);
    let (kw, vw) = (m.key_width(), m.value_width());
    let x = b.op("Mul", &[x, token_mask], vec![]);
    let proj = |b: &mut GraphBuilder, name: &str, width: usize| {
        linear(
            b,
            &x,
            &format!("{module}.{name}"),
            m.hidden,
            width,
            false,
            dtype,
        )
    };
    let (qkv, z, beta_in, a) = if m.fused {
        // Per key head: q, k, then its r value heads' v and z; b and a the same.
        let r = hv / hk;
        let qkvz = proj(b, "in_proj_qkvz", 2 * kw + 2 * vw);
        let shape = b.const_i64(&[0, 0, hk as i64, (2 * dk + 2 * r * dv) as i64]);
        let qkvz = b.op("Reshape", &[&qkvz, &shape], vec![]);
        let sizes = [dk, dk, r * dv, r * dv].map(|s| s as i64);
        let sizes = b.const_i64(&sizes);
        let [q, k, v, z] = <[String; 4]>::try_from(split(b, &qkvz, &sizes, 4)).expect("four");
        let flat = |b: &mut GraphBuilder, t: &str, w: usize| {
            let shape = b.const_i64(&[0, 0, w as i64]);
            b.op("Reshape", &[t, &shape], vec![])
        };
        let (q, k, v, z) = (
            flat(b, &q, kw),
            flat(b, &k, kw),
            flat(b, &v, vw),
            flat(b, &z, vw),
        );
        let qkv = b.op("Concat", &[&q, &k, &v], vec![("axis", Attr::Int(-1))]);
        let ba = proj(b, "in_proj_ba", 2 * hv);
        let shape = b.const_i64(&[0, 0, hk as i64, 2 * r as i64]);
        let ba = b.op("Reshape", &[&ba, &shape], vec![]);
        let sizes = b.const_i64(&[r as i64, r as i64]);
        let [beta_in, a] = <[String; 2]>::try_from(split(b, &ba, &sizes, 2)).expect("two");
        (qkv, z, flat(b, &beta_in, hv), flat(b, &a, hv))
    } else {
        let qkv = proj(b, "in_proj_qkv", 2 * kw + vw);
        let z = proj(b, "in_proj_z", vw);
        (qkv, z, proj(b, "in_proj_b", hv), proj(b, "in_proj_a", hv))
    };

    // The convolution in f32 (its taps too): its state holds projections of the model dtype,
    // so it round-trips exactly; the f16 rounding of the convolved q, k, v is what a
    // Gated DeltaNet layer amplifies most (its output norm rescales small differences).
    let qkv = to_f32(b, &qkv, dtype);
    let past_conv = to_f32(b, state.conv.past, dtype);
    let present_conv = match dtype {
        DType::F32 => state.conv.present.to_string(),
        _ => b.fresh_name("conv_state"),
    };
    let conv_state = ConvState {
        past: &past_conv,
        present: &present_conv,
    };
    let module_conv = format!("{module}.conv1d");
    let conv = causal_conv_with_state(b, &qkv, &module_conv, m.conv(), conv_state, DType::F32);
    if dtype != DType::F32 {
        let to = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
        b.op_into("Cast", &[&present_conv], to, state.conv.present);
    }
    let conv = silu(b, &conv);
    let sizes = b.const_i64(&[kw as i64, kw as i64, vw as i64]);
    let [q, k, v] = <[String; 3]>::try_from(split(b, &conv, &sizes, 3)).expect("three");
    let [beta_in, a] = [beta_in, a].map(|t| to_f32(b, &t, dtype));

    // q and k per value head, L2-normalised; q over √key_dim. [B, S, Hv, 1, Dk].
    let heads = |b: &mut GraphBuilder, t: &str, n: usize, d: usize| {
        let shape = b.const_i64(&[0, 0, n as i64, 1, d as i64]);
        b.op("Reshape", &[t, &shape], vec![])
    };
    let per_value_head = |b: &mut GraphBuilder, t: &str| {
        let t = heads(b, t, hk, dk);
        if hk == hv {
            return t;
        }
        let shape = b.const_i64(&[1, 1, 1, (hv / hk) as i64, 1]);
        let t = b.op("Expand", &[&t, &shape], vec![]);
        let shape = b.const_i64(&[0, 0, hv as i64, 1, dk as i64]);
        b.op("Reshape", &[&t, &shape], vec![])
    };
    let q = per_value_head(b, &q);
    let k = per_value_head(b, &k);
    let q = l2_normalize(b, &q);
    let k = l2_normalize(b, &k);
    let root = b.constant(TensorData::from_f32(vec![], &[(dk as f32).sqrt()]));
    let q = b.op("Div", &[&q, &root], vec![]);
    let v = heads(b, &v, hv, dv);

    // Decay exp(g), g = −exp(A_log)·softplus(a + dt_bias), and beta = sigmoid(b): [B, S, Hv, 1, 1].
    let param = |b: &mut GraphBuilder, name: &str| {
        b.initializer(Initializer {
            name: format!("{module}.{name}"),
            dtype: DType::F32,
            shape: vec![hv],
            source: Some(TensorSource::Checkpoint(format!("{module}.{name}"))),
        })
    };
    let (a_log, dt_bias) = (param(b, "A_log"), param(b, "dt_bias"));
    let dt = b.op("Add", &[&a, &dt_bias], vec![]);
    let dt = b.op("Softplus", &[&dt], vec![]);
    let rate = b.op("Exp", &[&a_log], vec![]);
    let g = b.op("Mul", &[&dt, &rate], vec![]);
    let g = b.op("Neg", &[&g], vec![]);
    let decay = b.op("Exp", &[&g], vec![]);
    let beta = b.op("Sigmoid", &[&beta_in], vec![]);
    let (final_state, ys) = delta_rule_scan(
        b,
        module,
        m,
        (state.past, dtype),
        [&decay, &beta, &q, &k, &v],
    );
    let out_dtype = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
    b.op_into("Cast", &[&final_state], out_dtype, state.present);

    // o [B, S, Hv, 1, Dv] → [B, S, Hv, Dv]; the gated RMS norm per value head, its gain and
    // the gate all in f32 (transformers rounds o and the scaled norm to the model dtype first:
    // the same in f32, closer to its f32 result in f16); out_proj.
    let shape = b.const_i64(&[0, 0, hv as i64, dv as i64]);
    let o = b.op("Reshape", &[&ys, &shape], vec![]);
    let weight = b.initializer(Initializer {
        name: format!("{module}.norm.weight"),
        dtype: DType::F32,
        shape: vec![dv],
        source: Some(TensorSource::Checkpoint(format!("{module}.norm.weight"))),
    });
    let normed = b.op(
        "RMSNormalization",
        &[&o, &weight],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(m.eps))],
    );
    let z = to_f32(b, &z, dtype);
    let z = b.op("Reshape", &[&z, &shape], vec![]);
    let gate = silu(b, &z);
    let gated = b.op("Mul", &[&normed, &gate], vec![]);
    let gated = from_f32(b, &gated, dtype);
    let shape = b.const_i64(&[0, 0, vw as i64]);
    let gated = b.op("Reshape", &[&gated, &shape], vec![]);
    linear(
        b,
        &gated,
        &format!("{module}.out_proj"),
        vw,
        m.hidden,
        false,
        dtype,
    )
}

/// The gated delta rule over a call's tokens as a `Scan` (all f32): from `past` (the
/// recurrent state `[B, value_heads, key_dim, value_dim]` in its dtype, cast to f32), with
/// `[decay, beta, q, k, v]`: the per-token decay `exp(g)` and update rate `[B, S, value_heads]`,
/// the normalised, scaled queries and keys `[B, S, value_heads, 1, key_dim]` and the values
/// `[B, S, value_heads, 1, value_dim]`. Returns the final state (f32) and the outputs
/// `o_t = q_t·S_t` `[B, S, value_heads, 1, value_dim]`. This is the form the
/// `gated-delta-scan-to-linear-attention` fusion (`rewrites/fusion/linear_attention.rules`)
/// reads as `com.microsoft::LinearAttention` where the EP runs it.
pub fn delta_rule_scan(
    b: &mut GraphBuilder,
    module: &str,
    m: GatedDeltaMixer,
    (past, dtype): (&str, DType),
    [decay, beta, q, k, v]: [&str; 5],
) -> (String, String) {
    let columns = b.const_i64(&[-1, -2]);
    let decay = b.op("Unsqueeze", &[decay, &columns], vec![]);
    let beta = b.op("Unsqueeze", &[beta, &columns], vec![]);

    let past = to_f32(b, past, dtype);
    let body = delta_rule_step(module, m.value_heads, m.key_dim, m.value_dim);
    let (final_state, ys) = (b.fresh_name("Scan"), b.fresh_name("Scan"));
    b.node(
        "",
        "Scan",
        &[&past, &decay, &beta, q, k, v],
        vec![
            ("body", Attr::Graph(Box::new(body))),
            ("num_scan_inputs", Attr::Int(5)),
            ("scan_input_axes", Attr::Ints(vec![1; 5])),
            ("scan_output_axes", Attr::Ints(vec![1])),
        ],
        vec![final_state.clone(), ys.clone()],
    );
    (final_state, ys)
}

/// The `Scan` body of one time step (all f32) for `hv` value heads of `dk` key and `dv` value
/// channels: inputs the state `S` `[B, Hv, Dk, Dv]`, then the step's decay and beta
/// `[B, Hv, 1, 1]`, `q` and `k` `[B, Hv, 1, Dk]` and `v` `[B, Hv, 1, Dv]`; outputs the new
/// state `S' = decay·S + kᵀ·beta·(v − k·(decay·S))` and `o = q·S'` `[B, Hv, 1, Dv]`. It reads
/// nothing from the enclosing graph and holds no constants; its values are named under
/// `{module}/scan` (unique in the model).
pub fn delta_rule_step(module: &str, hv: usize, dk: usize, dv: usize) -> crate::ir::Graph {
    let mut body = GraphBuilder::new(&format!("{module}.scan_body"));
    let scope = format!("{module}/scan");
    body.set_scope(&scope);
    let shape = |a: usize, c: usize| Shape(vec![Dim::sym("batch"), hv.into(), a.into(), c.into()]);
    let named = |part: &str| format!("{scope}/{part}");
    let s = body.input(&named("state"), DType::F32, shape(dk, dv));
    let decay = body.input(&named("decay"), DType::F32, shape(1, 1));
    let beta = body.input(&named("beta"), DType::F32, shape(1, 1));
    let q = body.input(&named("q"), DType::F32, shape(1, dk));
    let k = body.input(&named("k"), DType::F32, shape(1, dk));
    let v = body.input(&named("v"), DType::F32, shape(1, dv));
    let kept = body.op("Mul", &[&s, &decay], vec![]);
    let recalled = body.op("MatMul", &[&k, &kept], vec![]);
    let error = body.op("Sub", &[&v, &recalled], vec![]);
    let delta = body.op("Mul", &[&error, &beta], vec![]);
    let perm = vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))];
    let k_col = body.op("Transpose", &[&k], perm);
    let update = body.op("MatMul", &[&k_col, &delta], vec![]);
    let next = named("state_next");
    body.op_into("Add", &[&kept, &update], vec![], &next);
    let o = named("o");
    body.op_into("MatMul", &[&q, &next], vec![], &o);
    body.output(&next, DType::F32, shape(dk, dv));
    body.output(&o, DType::F32, shape(1, dv));
    body.finish()
}

/// `t` divided by `√(Σ t² + 1e-6)` over its last axis (transformers' `l2norm`, f32).
fn l2_normalize(b: &mut GraphBuilder, t: &str) -> String {
    let square = b.op("Mul", &[t, t], vec![]);
    let last = b.const_i64(&[-1]);
    let sum = b.op("ReduceSum", &[&square, &last], vec![]);
    let eps = b.constant(TensorData::from_f32(vec![], &[1e-6]));
    let shifted = b.op("Add", &[&sum, &eps], vec![]);
    let root = b.op("Sqrt", &[&shifted], vec![]);
    b.op("Div", &[t, &root], vec![])
}
