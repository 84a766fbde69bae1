//! Short causal depthwise convolutions with their conv state carried between calls (LFM2's
//! `conv` layers), in standard ONNX ops.
//!
//! A call reads the conv state `past` `[B, C, K−1]` (the last `K−1` inputs of the calls
//! before it, zeros before the first) and the new inputs `x` `[B, S, C]`, time-major as the
//! residual stream is. The prompt-length recurrence has a closed form, so no `Conv`, `Scan` or
//! `Loop` is needed: the state, transposed to `[B, K−1, C]`, is concatenated in front of `x`
//! (`X`, `[B, S+K−1, C]`); output step `t` is `bias + Σ_k w[:, k] · X[t+k]`, i.e. `K` slices
//! `X[k : k+S]` of static bounds (the end counted from the back, so any `S` works), each
//! times its `[C]` weight column, summed; the new state is the last `K−1` rows of `X`,
//! transposed back. The result is exact for every `S` (a prompt, or one token per decode
//! step) and costs `O(S·C·K)` multiply-adds in `3K + 3` elementwise and data-movement nodes
//! (`3K + 4` with a bias), constant per token whatever the context length.

use super::linear;
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// The conv state a layer reads and the output it writes.
#[derive(Debug, Clone, Copy)]
pub struct ConvState<'a> {
    /// The state graph input `[B, C, K−1]`.
    pub past: &'a str,
    /// The name of the new state's graph output `[B, C, K−1]`.
    pub present: &'a str,
}

/// The shape of a depthwise convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortConv {
    /// Channels `C`.
    pub channels: usize,
    /// Kernel width `K` (at least 2: the state holds `K − 1` steps).
    pub kernel: usize,
    /// Whether the convolution (and, in [`gated_short_conv`], its projections) has a bias.
    pub bias: bool,
}

/// The depthwise causal convolution of module `module` (checkpoint `{module}.weight`
/// `[C, 1, K]`, `{module}.bias` `[C]` when biased) over `x` `[B, S, C]`, continuing from
/// `state.past`; writes the new state to the graph output `state.present` and returns the
/// output `[B, S, C]`.
pub fn causal_conv_with_state(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    conv: ShortConv,
    state: ConvState<'_>,
    dtype: DType,
) -> String {
    let (c, k) = (conv.channels, conv.kernel);
    let perm = || vec![("perm", Attr::Ints(vec![0, 2, 1]))];
    let past = b.op("Transpose", &[state.past], perm());
    let full = b.op("Concat", &[&past, x], vec![("axis", Attr::Int(1))]);
    let axis1 = b.const_i64(&[1]);
    let tail = |b: &mut GraphBuilder, start: i64, end: i64| {
        let (start, end) = (b.const_i64(&[start]), b.const_i64(&[end]));
        b.op("Slice", &[&full, &start, &end, &axis1], vec![])
    };
    let last = tail(b, 1 - k as i64, i64::MAX);
    b.op_into("Transpose", &[&last], perm(), state.present);

    let checkpoint = || TensorSource::Checkpoint(format!("{module}.weight"));
    let columns = TensorSource::Transpose(Box::new(TensorSource::Reshape {
        source: Box::new(checkpoint()),
        shape: vec![c, k],
    }));
    let tap = |b: &mut GraphBuilder, j: usize| {
        let end = if j + 1 == k {
            i64::MAX
        } else {
            j as i64 + 1 - k as i64
        };
        let step = tail(b, j as i64, end);
        let w = b.initializer(Initializer {
            name: format!("{module}.weight.tap{j}"),
            dtype,
            shape: vec![1, c],
            source: Some(TensorSource::Slice {
                source: Box::new(columns.clone()),
                axis: 0,
                start: j,
                len: 1,
                total: k,
            }),
        });
        b.op("Mul", &[&step, &w], vec![])
    };
    let mut y = tap(b, 0);
    for j in 1..k {
        let term = tap(b, j);
        y = b.op("Add", &[&y, &term], vec![]);
    }
    if !conv.bias {
        return y;
    }
    let bias = b.initializer(Initializer {
        name: format!("{module}.bias"),
        dtype,
        shape: vec![c],
        source: Some(TensorSource::Checkpoint(format!("{module}.bias"))),
    });
    b.op("Add", &[&y, &bias], vec![])
}

/// LFM2's gated short convolution of module `module` over `x` `[B, S, C]`:
/// `{module}.in_proj` to `3C` channels split into `B`, `C`, `x`; the depthwise causal
/// convolution `{module}.conv` ([`causal_conv_with_state`]) of `B · x`; `C` times its output;
/// `{module}.out_proj`. The projections are biased when `conv.bias` is set.
pub fn gated_short_conv(
    b: &mut GraphBuilder,
    x: &str,
    module: &str,
    conv: ShortConv,
    state: ConvState<'_>,
    dtype: DType,
) -> String {
    let h = conv.channels;
    let bcx = linear(
        b,
        x,
        &format!("{module}.in_proj"),
        h,
        3 * h,
        conv.bias,
        dtype,
    );
    let split = b.const_i64(&[h as i64; 3]);
    let parts: Vec<String> = (0..3).map(|_| b.fresh_name("Split")).collect();
    b.node(
        "",
        "Split",
        &[&bcx, &split],
        vec![("axis", Attr::Int(-1))],
        parts.clone(),
    );
    let gated_in = b.op("Mul", &[&parts[0], &parts[2]], vec![]);
    let conv_module = format!("{module}.conv");
    let y = causal_conv_with_state(b, &gated_in, &conv_module, conv, state, dtype);
    let gated_out = b.op("Mul", &[&parts[1], &y], vec![]);
    linear(
        b,
        &gated_out,
        &format!("{module}.out_proj"),
        h,
        h,
        conv.bias,
        dtype,
    )
}
