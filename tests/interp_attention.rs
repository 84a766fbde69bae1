//! The reference interpreter's normalization, rotary-embedding and attention ops against
//! expected values produced by onnxruntime 1.32 (CPU) on the same one-node models.
//!
//! Inputs come from `gen`, a deterministic pattern of multiples of 1/8 (exact in f32), so each
//! case only pastes onnxruntime's outputs.

use mobius::interp::eval_op;

use mobius::ir::{Attr, DType};
use mobius::limits::InterpLimits;
use mobius::ops::Tensor;

/// `((i² · 3 + 7i + 5 · seed) mod 19 − 9) / 8` for each flat index `i` of `shape`.
fn gen(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let values = (0..n)
        .map(|i| ((i * i * 3 + i * 7 + seed * 5) % 19) as f32 / 8.0 - 9.0 / 8.0)
        .collect();
    Tensor::float(DType::F32, shape.to_vec(), values)
}

/// The same values as an f16 tensor (they are exact in f16).
fn half(t: Tensor) -> Tensor {
    Tensor::float(DType::F16, t.shape.clone(), t.floats().unwrap().to_vec())
}

fn floats(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::float(DType::F32, shape.to_vec(), values.to_vec())
}

fn ints(dtype: DType, shape: &[usize], values: &[i64]) -> Tensor {
    Tensor::int(dtype, shape.to_vec(), values.to_vec())
}

fn bools(shape: &[usize], values: &[bool]) -> Tensor {
    Tensor::bool(shape.to_vec(), values.to_vec())
}

/// Evaluates one node; `outputs` names its outputs (`""` for unused ones).
fn try_eval(
    domain: &str,
    op: &str,
    attrs: &[(&str, Attr)],
    inputs: Vec<Option<Tensor>>,
    outputs: &[&str],
) -> mobius::Result<Vec<Tensor>> {
    let attrs = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    eval_op(
        "n",
        (domain, op),
        attrs,
        &inputs,
        outputs,
        &InterpLimits::default(),
    )
}

fn eval(
    domain: &str,
    op: &str,
    attrs: &[(&str, Attr)],
    inputs: Vec<Option<Tensor>>,
    outputs: &[&str],
) -> Vec<Tensor> {
    try_eval(domain, op, attrs, inputs, outputs).unwrap()
}

/// Checks shape and values (absolute + relative tolerance 2e-5).
fn check(actual: &Tensor, shape: &[usize], expected: &[f32]) {
    assert_eq!(actual.shape, shape, "shape");
    let got = actual.floats().unwrap();
    assert_eq!(got.len(), expected.len());
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= 2e-5 * (1.0 + e.abs()),
            "element {i}: got {g}, expected {e}\nall: {got:?}"
        );
    }
}

fn error_of(domain: &str, op: &str, attrs: &[(&str, Attr)], inputs: Vec<Option<Tensor>>) -> String {
    try_eval(domain, op, attrs, inputs, &["o0"])
        .unwrap_err()
        .to_string()
}

#[test]
fn unsupported_modes_are_errors() {
    let qkv = || {
        vec![
            Some(gen(&[1, 1, 2, 4], 1)),
            Some(gen(&[1, 1, 2, 4], 2)),
            Some(gen(&[1, 1, 2, 4], 3)),
        ]
    };
    // Modes 0 to 3 exist; a window is -1 (none) or nonnegative.
    let err = try_eval(
        "",
        "Attention",
        &[("qk_matmul_output_mode", Attr::Int(4))],
        qkv(),
        &["o0", "", "", "o3"],
    );
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("qk_matmul_output_mode 4"));
    assert!(error_of(
        "",
        "Attention",
        &[("left_window_size", Attr::Int(-2))],
        qkv()
    )
    .contains("left_window_size (-2)"));
    let packed = ("is_packed_batching", Attr::Int(1));
    let rope = vec![
        Some(gen(&[1, 2, 8], 1)),
        Some(ints(DType::I64, &[1], &[0])),
        Some(gen(&[4, 4], 2)),
        Some(gen(&[4, 4], 3)),
    ];
    assert!(
        error_of("com.microsoft", "RotaryEmbedding", &[packed], rope)
            .contains("is_packed_batching")
    );
    let gqa_inputs = vec![
        Some(gen(&[1, 1, 16], 1)),
        Some(gen(&[1, 1, 8], 2)),
        Some(gen(&[1, 1, 8], 3)),
        None,
        None,
        Some(ints(DType::I32, &[1], &[0])),
        Some(ints(DType::I32, &[], &[1])),
    ];
    let heads = [
        ("num_heads", Attr::Int(2)),
        ("kv_num_heads", Attr::Int(1)),
        ("causal", Attr::Int(0)),
    ];
    assert!(
        error_of("com.microsoft", "GroupQueryAttention", &heads, gqa_inputs).contains("causal")
    );
    assert!(error_of(
        "",
        "RotaryEmbedding",
        &[],
        vec![
            Some(gen(&[1, 2, 8], 1)),
            Some(gen(&[1, 2, 4], 2)),
            Some(gen(&[1, 2, 4], 3))
        ]
    )
    .contains("num_heads"));
}

// LayerNormalization over the last axis: Mean/InvStdDev keep rank with the normalized axis set to 1.
#[test]
fn layer_norm_last_axis() {
    let out = eval(
        "",
        "LayerNormalization",
        &[("epsilon", Attr::Float(1e-05))],
        vec![
            Some(gen(&[2, 3], 1)),
            Some(gen(&[3], 2)),
            Some(gen(&[3], 3)),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.58094716, -1.4092056, -0.4317829, 0.91984, -0.035320044, -1.7690399,
    ];
    check(&out[0], &[2, 3], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        0.20833334, -0.25,
    ];
    check(&out[1], &[2, 1], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        1.9093026, 1.3587198,
    ];
    check(&out[2], &[2, 1], &expected_2);
}

// LayerNormalization from axis 1 of a 3-D input: statistics of shape [2, 1, 1].
#[test]
fn layer_norm_axis_1_no_bias() {
    let out = eval(
        "",
        "LayerNormalization",
        &[("axis", Attr::Int(1)), ("epsilon", Attr::Float(0.001))],
        vec![Some(gen(&[2, 2, 3], 4)), Some(gen(&[2, 3], 5))],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.47874686, 0.4787469, -1.087068e-08, 0.4787469, 0.47874686, -1.2766583, -0.73087096, -0.053292654,
        -0.48724723, -0.6928047, -0.18271774, 0.5329267,
    ];
    check(&out[0], &[2, 2, 3], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        -0.124999985, -0.20833334,
    ];
    check(&out[1], &[2, 1, 1], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        1.459038, 1.4617418,
    ];
    check(&out[2], &[2, 1, 1], &expected_2);
}

// RMSNormalization (opset 23): x / sqrt(mean(x²) + eps) · scale, one output.
#[test]
fn rms_norm() {
    let out = eval(
        "",
        "RMSNormalization",
        &[],
        vec![Some(gen(&[2, 4], 6)), Some(gen(&[4], 7))],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.2587256, 0.2587256, -0.8316181, 0.2587256, 0.4124716, 0.11784903, -0.0, -0.47139612,
    ];
    check(&out[0], &[2, 4], &expected_0);
}

// SkipLayerNormalization with a broadcast [S, H] skip, beta and bias: stats are [B, S, 1], the 4th output is input + skip + bias.
#[test]
fn skip_layer_norm_all_outputs() {
    let out = eval(
        "com.microsoft",
        "SkipLayerNormalization",
        &[("epsilon", Attr::Float(1e-05))],
        vec![
            Some(gen(&[1, 2, 4], 8)),
            Some(gen(&[2, 4], 9)),
            Some(gen(&[4], 10)),
            Some(gen(&[4], 11)),
            Some(gen(&[4], 12)),
        ],
        &["o0", "o1", "o2", "o3"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.38036138, -0.72168905, -0.5688487, -0.72168905, 0.5714217, -0.8330859, 0.4503259, -0.90762126,
    ];
    check(&out[0], &[1, 2, 4], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        0.65625, -0.4375,
    ];
    check(&out[1], &[1, 2, 1], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        0.65278804, 0.7950439,
    ];
    check(&out[2], &[1, 2, 1], &expected_2);
    #[rustfmt::skip]
    let expected_3 = [
        -1.875, 1.875, 0.75, 1.875, -1.875, 0.75, -1.5, 0.875,
    ];
    check(&out[3], &[1, 2, 4], &expected_3);
}

// SkipSimplifiedLayerNormalization with bias: mean is written as zeros.
#[test]
fn skip_simplified_layer_norm() {
    let out = eval(
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        &[("epsilon", Attr::Float(1e-05))],
        vec![
            Some(gen(&[2, 4], 13)),
            Some(gen(&[2, 4], 14)),
            Some(gen(&[4], 15)),
            Some(gen(&[4], 16)),
        ],
        &["o0", "o1", "o2", "o3"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.34926504, 0.0, -0.0, 0.0, -1.8367255, 0.0, -0.30612093, 0.0,
    ];
    check(&out[0], &[2, 4], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        0.0, 0.0,
    ];
    check(&out[1], &[2, 1], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        1.2418313, 6.5305796,
    ];
    check(&out[2], &[2, 1], &expected_2);
    #[rustfmt::skip]
    let expected_3 = [
        -0.25, 1.125, 0.0, 1.125, -0.25, 0.0, 0.125, 0.125,
    ];
    check(&out[3], &[2, 4], &expected_3);
}

// ONNX RotaryEmbedding, 4-D [B, H, S, D] input with [B, S, D/2] caches (no position_ids).
#[test]
fn rotary_onnx_4d_batch_caches() {
    let out = eval(
        "",
        "RotaryEmbedding",
        &[],
        vec![
            Some(gen(&[1, 2, 2, 4], 17)),
            Some(gen(&[1, 2, 2], 18)),
            Some(gen(&[1, 2, 2], 19)),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.984375, 0.703125, 0.546875, 0.421875, -0.0625, 0.15625, 0.21875, -0.4375,
        1.34375, -0.171875, 0.5625, -0.15625, -0.265625, -0.578125, -0.3125, 0.078125,
    ];
    check(&out[0], &[1, 2, 2, 4], &expected_0);
}

// ONNX RotaryEmbedding, 3-D input with num_heads, position_ids, partial (rd = 4 of 8) interleaved rotation.
#[test]
fn rotary_onnx_3d_partial_interleaved() {
    let out = eval(
        "",
        "RotaryEmbedding",
        &[
            ("num_heads", Attr::Int(2)),
            ("rotary_embedding_dim", Attr::Int(4)),
            ("interleaved", Attr::Int(1)),
        ],
        vec![
            Some(gen(&[1, 2, 16], 20)),
            Some(gen(&[5, 2], 21)),
            Some(gen(&[5, 2], 22)),
            Some(ints(DType::I64, &[1, 2], &[3, 1])),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.3125, -0.34375, 0.984375, 0.328125, -0.5, -1.0, -0.75, 0.25,
        0.171875, -0.15625, 0.4375, -0.65625, -0.125, 0.625, -0.25, -0.375,
        -0.3125, -0.9375, 0.8125, 0.875, 0.75, 0.375, 0.75, -0.5,
        -1.5625, 0.0, -0.390625, 0.28125, -0.25, 0.625, -0.125, -0.125,
    ];
    check(&out[0], &[1, 2, 16], &expected_0);
}

// com.microsoft RotaryEmbedding, 3-D input, scalar position offset [1] (positions 2, 3), head size from the cache.
#[test]
fn rotary_contrib_offset_position() {
    let out = eval(
        "com.microsoft",
        "RotaryEmbedding",
        &[],
        vec![
            Some(gen(&[1, 2, 8], 23)),
            Some(ints(DType::I64, &[1], &[2])),
            Some(gen(&[6, 2], 24)),
            Some(gen(&[6, 2], 25)),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.40625, -0.15625, -0.203125, -0.28125, 0.09375, -0.828125, -0.671875, 0.0,
        0.546875, 0.34375, -0.078125, -0.984375, 0.390625, 0.921875, 0.46875, -0.203125,
    ];
    check(&out[0], &[1, 2, 8], &expected_0);
}

// com.microsoft RotaryEmbedding, 4-D [B, H, S, D] input, [B, S] positions, partial rotation rd = 4 of 8.
#[test]
fn rotary_contrib_4d_partial() {
    let out = eval(
        "com.microsoft",
        "RotaryEmbedding",
        &[
            ("num_heads", Attr::Int(2)),
            ("rotary_embedding_dim", Attr::Int(4)),
        ],
        vec![
            Some(gen(&[1, 2, 2, 8], 26)),
            Some(ints(DType::I64, &[1, 2], &[4, 0])),
            Some(gen(&[6, 2], 27)),
            Some(gen(&[6, 2], 28)),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.734375, 0.15625, 0.359375, 0.15625, 0.875, 0.375, 0.625, -0.75,
        -0.96875, 1.546875, 0.078125, 0.703125, -1.125, -0.375, 1.125, 1.0,
        0.609375, -0.390625, -0.1875, -0.546875, -0.25, -0.625, -0.25, 0.875,
        -0.515625, -0.765625, 0.5625, 1.0, 1.125, -0.375, -1.125, -1.125,
    ];
    check(&out[0], &[1, 2, 2, 8], &expected_0);
}

// Attention 4-D, 2 query heads sharing 1 kv head, no mask.
#[test]
fn attention_4d_gqa() {
    let out = eval(
        "",
        "Attention",
        &[],
        vec![
            Some(gen(&[1, 2, 2, 4], 30)),
            Some(gen(&[1, 1, 3, 4], 31)),
            Some(gen(&[1, 1, 3, 4], 32)),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.084130794, 0.12911296, 0.4017099, 0.64779174, -0.07663468, 0.23094219, 0.5207151, 0.641547,
        -0.052395895, 0.17023331, 0.65482223, 0.50993305, -0.1004608, 0.1299113, 0.28558016, 0.72500414,
    ];
    check(&out[0], &[1, 2, 2, 4], &expected_0);
}

// Attention 3-D with q/kv head counts, a bool [S, T] mask (true = attend), V head size 2.
#[test]
fn attention_3d_bool_mask_gqa() {
    let out = eval(
        "",
        "Attention",
        &[
            ("q_num_heads", Attr::Int(2)),
            ("kv_num_heads", Attr::Int(1)),
        ],
        vec![
            Some(gen(&[1, 2, 8], 33)),
            Some(gen(&[1, 3, 4], 34)),
            Some(gen(&[1, 3, 2], 35)),
            Some(bools(&[2, 3], &[true, false, true, false, true, true])),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.625, -0.2056046, -0.625, -0.2329123, 0.031733654, 0.1884673, -0.008859884, 0.10728024,
    ];
    check(&out[0], &[1, 2, 4], &expected_0);
}

// Attention with a float [B, 1, S, T] additive mask, explicit scale and softcap (applied before the mask).
#[test]
fn attention_float_mask_scale_softcap() {
    let out = eval(
        "",
        "Attention",
        &[("scale", Attr::Float(0.7)), ("softcap", Attr::Float(1.5))],
        vec![
            Some(gen(&[2, 1, 2, 4], 36)),
            Some(gen(&[2, 1, 2, 4], 37)),
            Some(gen(&[2, 1, 2, 4], 38)),
            Some(gen(&[2, 1, 2, 2], 39)),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -1.125, 0.66282356, 0.8256471, -0.30525884, -1.125, 0.3925544, 0.2851088, -0.08904353,
        -0.8569635, -0.37437248, -0.5006275, -0.89303637, -0.86196077, -0.39186278, -0.4831372, -0.8880392,
    ];
    check(&out[0], &[2, 1, 2, 4], &expected_0);
}

// Attention with a 2-token past and 2 new tokens, is_causal: query i sees keys j ≤ i + 2 (bottom-right); present = past ++ new.
#[test]
fn attention_decode_past_causal() {
    let out = eval(
        "",
        "Attention",
        &[("is_causal", Attr::Int(1))],
        vec![
            Some(gen(&[1, 2, 2, 4], 40)),
            Some(gen(&[1, 1, 2, 4], 41)),
            Some(gen(&[1, 1, 2, 4], 42)),
            None,
            Some(gen(&[1, 1, 2, 4], 43)),
            Some(gen(&[1, 1, 2, 4], 44)),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.27641603, -0.17075294, 0.18373322, 0.29019234, -0.23857805, -0.13065593, 0.4575046, 0.109186254,
        -0.22482383, -0.2365, 0.27009082, 0.18581703, -0.4032858, 0.06172534, 0.40894365, 0.19424956,
    ];
    check(&out[0], &[1, 2, 2, 4], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        -0.375, 0.875, 0.5, 0.875, -0.375, -0.875, -0.625, 0.375,
        0.75, -0.375, -0.75, -0.375, 0.75, 0.25, 0.5, -0.875,
    ];
    check(&out[1], &[1, 1, 4, 4], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        0.25, -0.875, 1.125, -0.875, 0.25, -0.25, 0.0, 1.0,
        -1.0, 0.25, -0.125, 0.25, -1.0, 0.875, 1.125, -0.25,
    ];
    check(&out[2], &[1, 1, 4, 4], &expected_2);
}

// Attention, is_causal with S = 2 < T = 3 and no past: onnxruntime anchors the mask top-left (offset = past length = 0).
#[test]
fn attention_causal_no_past_short_query() {
    let out = eval(
        "",
        "Attention",
        &[("is_causal", Attr::Int(1))],
        vec![
            Some(gen(&[1, 1, 2, 4], 45)),
            Some(gen(&[1, 1, 3, 4], 46)),
            Some(gen(&[1, 1, 3, 4], 47)),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.25, 1.0, 0.625, 1.0, -0.25, 0.14550406, 0.07568118, 0.7558583,
    ];
    check(&out[0], &[1, 1, 2, 4], &expected_0);
}

// Attention: a query row whose bool mask is all false outputs zeros.
#[test]
fn attention_fully_masked_row() {
    let out = eval(
        "",
        "Attention",
        &[],
        vec![
            Some(gen(&[1, 1, 2, 4], 48)),
            Some(gen(&[1, 1, 2, 4], 49)),
            Some(gen(&[1, 1, 2, 4], 50)),
            Some(bools(&[2, 2], &[true, true, false, false])),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.75, 0.70051336, -0.23592398, 0.33958936, 0.0, 0.0, 0.0, 0.0,
    ];
    check(&out[0], &[1, 1, 2, 4], &expected_0);
}

// Attention: a float mask row of f32::MIN counts as fully masked (zeros), like -inf.
#[test]
fn attention_lowest_float_mask_row() {
    let out = eval(
        "",
        "Attention",
        &[],
        vec![
            Some(gen(&[1, 1, 2, 4], 51)),
            Some(gen(&[1, 1, 2, 4], 52)),
            Some(gen(&[1, 1, 2, 4], 53)),
            Some(floats(
                &[2, 2],
                &[0.0, -1.0, -3.4028235e+38, -3.4028235e+38],
            )),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        1.125, 0.24172716, 0.1084543, -0.19338173, 0.0, 0.0, 0.0, 0.0,
    ];
    check(&out[0], &[1, 1, 2, 4], &expected_0);
}

// Attention opset 24: nonpad_kv_seqlen masks keys ≥ n[b] and moves the causal offset to n[b] − S; n = 0 gives zeros.
#[test]
fn attention_nonpad_kv_seqlen_causal() {
    let out = eval(
        "",
        "Attention",
        &[("is_causal", Attr::Int(1))],
        vec![
            Some(gen(&[2, 1, 2, 4], 54)),
            Some(gen(&[2, 1, 4, 4], 55)),
            Some(gen(&[2, 1, 4, 4], 56)),
            None,
            None,
            None,
            Some(ints(DType::I64, &[2], &[3, 0])),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.625, -0.09069081, -0.056381628, -0.82744735, 0.64499605, 0.016119296, -0.24268217, -0.4969778,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    check(&out[0], &[2, 1, 2, 4], &expected_0);
}

// Attention 4th output (mode 0): scale · QKᵀ before softcap and mask.
#[test]
fn attention_qk_matmul_output() {
    let out = eval(
        "",
        "Attention",
        &[("softcap", Attr::Float(2.0))],
        vec![
            Some(gen(&[1, 2, 2, 4], 57)),
            Some(gen(&[1, 1, 2, 4], 58)),
            Some(gen(&[1, 1, 2, 4], 59)),
            Some(bools(&[2, 2], &[true, false, true, true])),
        ],
        &["o0", "", "", "o3"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.125, -1.0, 1.0, -1.0, 0.125, -0.8434072, 0.71813303, -0.53022176,
        0.125, -1.0, 1.0, -1.0, 0.125, -0.57773703, 0.23992671, 0.26678878,
    ];
    check(&out[0], &[1, 2, 2, 4], &expected_0);
    #[rustfmt::skip]
    let expected_3 = [
        0.328125, 0.328125, 0.609375, -0.515625, -0.359375, 0.59375, -0.3515625, 0.390625,
    ];
    check(&out[3], &[1, 2, 2, 2], &expected_3);
}

// Attention in f16: scores (scale · QK + mask) and softmax probabilities are rounded to f16, as onnxruntime does.
#[test]
fn attention_f16_rounding() {
    let out = eval(
        "",
        "Attention",
        &[("scale", Attr::Float(1.3))],
        vec![
            Some(half(gen(&[1, 1, 2, 8], 86))),
            Some(half(gen(&[1, 1, 3, 8], 87))),
            Some(half(gen(&[1, 1, 3, 8], 88))),
            Some(half(gen(&[2, 3], 89))),
        ],
        &["o0"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.6245117, -0.48657227, 0.3737793, -0.3630371, -0.37768555, 0.38549805, -0.50390625, -0.61621094,
        -0.6386719, 0.27148438, 0.27392578, 0.30908203, -0.56347656, 0.9716797, -0.7753906, -0.115356445,
    ];
    check(&out[0], &[1, 1, 2, 8], &expected_0);
}

// GQA first prompt (empty past), batch 1 right-padded (seqlens_k = 1): all S keys go to present; the padded query row sees only the valid keys.
#[test]
fn gqa_prompt_padded_batch() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[("num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(1))],
        vec![
            Some(gen(&[2, 3, 16], 60)),
            Some(gen(&[2, 3, 8], 61)),
            Some(gen(&[2, 3, 8], 62)),
            Some(floats(&[2, 1, 0, 8], &[])),
            Some(floats(&[2, 1, 0, 8], &[])),
            Some(ints(DType::I32, &[2], &[2, 1])),
            Some(ints(DType::I32, &[], &[3])),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.375, 0.875, 0.5, 0.875, -0.375, -0.875, -0.625, 0.375,
        -0.375, 0.875, 0.5, 0.875, -0.375, -0.875, -0.625, 0.375,
        -0.31852344, 0.42318738, 0.6129532, 0.47966397, -0.20557027, -0.14080445, -0.3990937, 0.0926171,
        -0.3470099, 0.65107906, 0.55598027, 0.67906916, -0.29102963, -0.5111284, -0.5130395, 0.2350494,
        0.08966634, -0.17376621, -0.2755835, -0.005607036, 0.42598465, 0.19916736, 0.3441438, -0.16928868,
        -0.08870127, 0.10480328, 0.10136297, 0.22219168, 0.1460755, 0.017635182, 0.013463866, -0.04303157,
        -0.875, -0.625, 0.375, -0.25, -0.125, 0.75, 0.0, 0.0,
        -0.875, -0.625, 0.375, -0.25, -0.125, 0.75, 0.0, 0.0,
        0.22520792, -0.28647447, -0.0481569, 0.17315689, -0.4635255, -0.3502079, -0.25389412, 0.5924196,
        0.20138302, -0.2938052, -0.038993474, 0.16399348, -0.4561948, -0.32638305, -0.2483961, 0.57959086,
        0.17087735, -0.30319157, -0.027260525, 0.15226051, -0.4468084, -0.29587734, -0.2413563, 0.5631647,
        -0.16076306, -0.40523478, 0.10029348, 0.02470652, -0.34476522, 0.035763048, -0.1648239, 0.3845891,
    ];
    check(&out[0], &[2, 3, 16], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        -1.0, 0.25, -0.125, 0.25, -1.0, 0.875, 1.125, -0.25,
        -0.875, -0.75, 0.125, -0.625, -0.625, 0.125, -0.75, -0.875,
        -0.25, 1.125, 0.875, -1.0, 0.25, -0.125, 0.25, -1.0,
        0.875, 1.125, -0.25, -0.875, -0.75, 0.125, -0.625, -0.625,
        0.125, -0.75, -0.875, -0.25, 1.125, 0.875, -1.0, 0.25,
        -0.125, 0.25, -1.0, 0.875, 1.125, -0.25, -0.875, -0.75,
    ];
    check(&out[1], &[2, 1, 3, 8], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        -0.375, 0.875, 0.5, 0.875, -0.375, -0.875, -0.625, 0.375,
        -0.25, -0.125, 0.75, 0.0, 0.0, 0.75, -0.125, -0.25,
        0.375, -0.625, -0.875, -0.375, 0.875, 0.5, 0.875, -0.375,
        -0.875, -0.625, 0.375, -0.25, -0.125, 0.75, 0.0, 0.0,
        0.75, -0.125, -0.25, 0.375, -0.625, -0.875, -0.375, 0.875,
        0.5, 0.875, -0.375, -0.875, -0.625, 0.375, -0.25, -0.125,
    ];
    check(&out[2], &[2, 1, 3, 8], &expected_2);
}

// GQA decode (S = 1) with a 2-token past buffer; batch 1 has one real past token: its new key lands at row 1 and row 2 of present stays zero.
#[test]
fn gqa_decode_ragged_past() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[("num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(1))],
        vec![
            Some(gen(&[2, 1, 16], 63)),
            Some(gen(&[2, 1, 8], 64)),
            Some(gen(&[2, 1, 8], 65)),
            Some(gen(&[2, 1, 2, 8], 66)),
            Some(gen(&[2, 1, 2, 8], 67)),
            Some(ints(DType::I32, &[2], &[2, 1])),
            Some(ints(DType::I32, &[], &[3])),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.080801316, 0.14725994, -0.7060871, 0.2004096, 0.18710066, -0.13128455, -0.009749635, 0.5119033,
        -0.11932827, -0.05735301, -0.61972815, -0.036533546, -0.07768934, 0.2137162, -0.30686992, 0.50575495,
        0.0034755648, -0.32360977, 0.09930489, -0.14837807, -0.60046345, -0.30254877, -0.6752317, -0.29791465,
        0.06901978, -0.2973921, 0.08619605, -0.117790766, -0.6092026, -0.3506145, -0.6796013, -0.25858814,
    ];
    check(&out[0], &[2, 1, 16], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        -0.25, 1.0, 0.625, 1.0, -0.25, -0.75, -0.5, 0.5,
        -0.125, 0.0, 0.875, 0.125, 0.125, 0.875, 0.0, -0.125,
        0.875, -0.25, -0.625, -0.25, 0.875, 0.375, 0.625, -0.75,
        0.5, -0.5, -0.75, -0.25, 1.0, 0.625, 1.0, -0.25,
        1.0, 1.125, -0.375, -1.125, -1.125, -0.375, 1.125, 1.0,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    check(&out[1], &[2, 1, 3, 8], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        0.375, -0.75, -1.125, -0.75, 0.375, -0.125, 0.125, 1.125,
        0.5, 0.625, -0.875, 0.75, 0.75, -0.875, 0.625, 0.5,
        -0.875, 0.375, 0.0, 0.375, -0.875, 1.0, -1.125, -0.125,
        1.125, 0.125, -0.125, 0.375, -0.75, -1.125, -0.75, 0.375,
        -0.75, -0.625, 0.25, -0.5, -0.5, 0.25, -0.625, -0.75,
        0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    check(&out[2], &[2, 1, 3, 8], &expected_2);
}

// GQA decode from packed QKV with do_rotary: q and k rotate at position past_len = 2.
#[test]
fn gqa_packed_rotary_decode() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[
            ("num_heads", Attr::Int(2)),
            ("kv_num_heads", Attr::Int(1)),
            ("do_rotary", Attr::Int(1)),
        ],
        vec![
            Some(gen(&[1, 1, 64], 68)),
            None,
            None,
            Some(gen(&[1, 1, 2, 16], 69)),
            Some(gen(&[1, 1, 2, 16], 70)),
            Some(ints(DType::I32, &[1], &[2])),
            Some(ints(DType::I32, &[], &[3])),
            Some(gen(&[4, 8], 71)),
            Some(gen(&[4, 8], 72)),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.010495765, 0.55082864, 0.25243983, 0.704051, -0.0492139, -0.12743984, -0.14599153, 0.5104958,
        -0.037893053, 0.16371813, 0.77016646, 0.096777625, 0.17338882, 1.0, 0.20161119, 0.15322237,
        0.026372274, -0.25259298, -0.42322287, 0.15614729, -0.2309957, 0.5482229, -0.072255455, 0.47362778,
        0.052997846, 0.38236797, 0.38688967, -0.15874024, 0.04562989, 1.0, 0.32937014, 0.40874025,
    ];
    check(&out[0], &[1, 1, 32], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        -0.75, 0.5, 0.125, 0.5, -0.75, 1.125, -1.0, 0.0,
        -0.625, -0.5, 0.375, -0.375, -0.375, 0.375, -0.5, -0.625,
        0.0, -1.0, 1.125, -0.75, 0.5, 0.125, 0.5, -0.75,
        1.125, -1.0, 0.0, -0.625, -0.5, 0.375, -0.375, -0.375,
        0.03125, -0.171875, -0.625, -0.875, -0.46875, -0.734375, -0.625, 1.203125,
        0.6875, -1.015625, 0.703125, -0.453125, -0.46875, 0.4375, -0.703125, -0.703125,
    ];
    check(&out[1], &[1, 1, 3, 16], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        -0.125, 1.125, 0.75, 1.125, -0.125, -0.625, -0.375, 0.625,
        0.0, 0.125, 1.0, 0.25, 0.25, 1.0, 0.125, 0.0,
        0.625, -0.375, -0.625, -0.125, 1.125, 0.75, 1.125, -0.125,
        -0.625, -0.375, 0.625, 0.0, 0.125, 1.0, 0.25, 0.25,
        -0.25, -1.0, -1.0, -0.25, -1.125, 1.125, -0.625, 0.75,
        0.5, 1.0, -0.125, -0.5, -0.125, 1.0, 0.5, 0.75,
    ];
    check(&out[2], &[1, 1, 3, 16], &expected_2);
}

// GQA prompt without past inputs, partial (16 of 32) interleaved rotary.
#[test]
fn gqa_prompt_partial_interleaved_rotary() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[
            ("num_heads", Attr::Int(1)),
            ("kv_num_heads", Attr::Int(1)),
            ("do_rotary", Attr::Int(1)),
            ("rotary_interleaved", Attr::Int(1)),
        ],
        vec![
            Some(gen(&[1, 2, 32], 73)),
            Some(gen(&[1, 2, 32], 74)),
            Some(gen(&[1, 2, 32], 75)),
            None,
            None,
            Some(ints(DType::I32, &[1], &[1])),
            Some(ints(DType::I32, &[], &[2])),
            Some(gen(&[4, 8], 76)),
            Some(gen(&[4, 8], 77)),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.625, -0.5, -0.875, -0.5, 0.625, 0.125, 0.375, -1.0,
        0.75, 0.875, -0.625, 1.0, 1.0, -0.625, 0.875, 0.75,
        -1.0, 0.375, 0.125, 0.625, -0.5, -0.875, -0.5, 0.625,
        0.125, 0.375, -1.0, 0.75, 0.875, -0.625, 1.0, 1.0,
        0.0993584, 0.078205764, -0.19166592, -0.71025664, 0.5198717, 0.125, 0.48012832, -0.78974336,
        0.06666592, 0.29679424, -0.0993584, 0.6320509, 0.7371792, -0.7826925, 0.82243586, 0.8025642,
        -0.8423075, 0.63782084, 0.49294913, 0.0993584, 0.078205764, -0.19166592, -0.71025664, 0.5198717,
        0.125, 0.48012832, -0.78974336, 0.06666592, 0.29679424, -0.0993584, 0.6320509, 0.7371792,
    ];
    check(&out[0], &[1, 2, 32], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        -0.5625, 1.265625, 0.953125, 0.515625, 0.1875, 0.125, -0.59375, -0.09375,
        -0.015625, -0.34375, 1.21875, -0.84375, 1.21875, 0.84375, -0.125, 0.015625,
        0.75, -0.25, -0.5, 0.0, -1.125, 0.875, -1.125, 0.0,
        -0.5, -0.25, 0.75, 0.125, 0.25, 1.125, 0.375, 0.375,
        -1.03125, -0.671875, 0.078125, -0.6875, 0.3125, -0.15625, -0.140625, 0.84375,
        -0.796875, 0.734375, 0.3125, 0.0, 0.40625, -0.59375, -0.03125, -0.296875,
        1.125, 0.375, 0.375, 1.125, 0.25, 0.125, 0.75, -0.25,
        -0.5, 0.0, -1.125, 0.875, -1.125, 0.0, -0.5, -0.25,
    ];
    check(&out[1], &[1, 1, 2, 32], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        0.625, -0.5, -0.875, -0.5, 0.625, 0.125, 0.375, -1.0,
        0.75, 0.875, -0.625, 1.0, 1.0, -0.625, 0.875, 0.75,
        -1.0, 0.375, 0.125, 0.625, -0.5, -0.875, -0.5, 0.625,
        0.125, 0.375, -1.0, 0.75, 0.875, -0.625, 1.0, 1.0,
        -0.625, 0.875, 0.75, -1.0, 0.375, 0.125, 0.625, -0.5,
        -0.875, -0.5, 0.625, 0.125, 0.375, -1.0, 0.75, 0.875,
        -0.625, 1.0, 1.0, -0.625, 0.875, 0.75, -1.0, 0.375,
        0.125, 0.625, -0.5, -0.875, -0.5, 0.625, 0.125, 0.375,
    ];
    check(&out[2], &[1, 1, 2, 32], &expected_2);
}

// GQA decode with local_window_size = 2: the window counts the current token (keys 2..3 of 4).
#[test]
fn gqa_local_window_decode() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[
            ("num_heads", Attr::Int(2)),
            ("kv_num_heads", Attr::Int(1)),
            ("local_window_size", Attr::Int(2)),
        ],
        vec![
            Some(gen(&[1, 1, 16], 78)),
            Some(gen(&[1, 1, 8], 79)),
            Some(gen(&[1, 1, 8], 80)),
            Some(gen(&[1, 1, 3, 8], 81)),
            Some(gen(&[1, 1, 3, 8], 82)),
            Some(ints(DType::I32, &[1], &[3])),
            Some(ints(DType::I32, &[], &[4])),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        0.06894386, 0.11638202, -0.19180898, 0.25, -0.933191, 1.008618, 0.056056134, 0.017235965,
        0.0, 0.125, -0.1875, 0.25, -0.9375, 1.0, 0.125, 0.0,
    ];
    check(&out[0], &[1, 1, 16], &expected_0);
}

// GQA with softcap, smooth_softmax (extra zero logit) and an explicit scale.
#[test]
fn gqa_softcap_smooth_softmax_scale() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[
            ("num_heads", Attr::Int(2)),
            ("kv_num_heads", Attr::Int(2)),
            ("softcap", Attr::Float(1.0)),
            ("smooth_softmax", Attr::Int(1)),
            ("scale", Attr::Float(0.5)),
        ],
        vec![
            Some(gen(&[1, 2, 16], 83)),
            Some(gen(&[1, 2, 16], 84)),
            Some(gen(&[1, 2, 16], 85)),
            None,
            None,
            Some(ints(DType::I32, &[1], &[1])),
            Some(ints(DType::I32, &[], &[2])),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.08011961, 0.32047844, 0.20029902, 0.32047844, -0.08011961, -0.24035883, -0.16023922, 0.16023922,
        -0.03996786, 0.0, 0.27977502, 0.03996786, 0.03996786, 0.27977502, 0.0, -0.03996786,
        -0.05201409, 0.44005594, 0.2073684, 0.4787225, 0.0253191, -0.29137537, -0.10402818, 0.22002797,
        -0.25591642, -0.14437093, 0.41989112, 0.0032672994, 0.03936003, 0.52816933, 0.036092732, -0.0032672994,
    ];
    check(&out[0], &[1, 2, 16], &expected_0);
}

// GQA in f16 with rotary: the rotated q/k are rounded to f16, scores stay f32.
#[test]
fn gqa_f16_rotary_prompt() {
    let out = eval(
        "com.microsoft",
        "GroupQueryAttention",
        &[
            ("num_heads", Attr::Int(1)),
            ("kv_num_heads", Attr::Int(1)),
            ("do_rotary", Attr::Int(1)),
        ],
        vec![
            Some(half(gen(&[1, 2, 16], 90))),
            Some(half(gen(&[1, 2, 16], 91))),
            Some(half(gen(&[1, 2, 16], 92))),
            None,
            None,
            Some(ints(DType::I32, &[1], &[1])),
            Some(ints(DType::I32, &[], &[2])),
            Some(half(gen(&[4, 8], 93))),
            Some(half(gen(&[4, 8], 94))),
        ],
        &["o0", "o1", "o2"],
    );
    #[rustfmt::skip]
    let expected_0 = [
        -0.625, 0.625, 0.25, 0.625, -0.625, -1.125, -0.875, 0.125,
        -0.5, -0.375, 0.5, -0.25, -0.25, 0.5, -0.375, -0.5,
        -0.25341797, -0.1182251, -0.43139648, 0.0056266785, -0.0056266785, -0.44360352, -0.13171387, -0.24658203,
        -0.8095703, -0.6225586, 0.31420898, -0.3737793, -0.31201172, 0.5, -0.31298828, -0.3762207,
    ];
    check(&out[0], &[1, 2, 16], &expected_0);
    #[rustfmt::skip]
    let expected_1 = [
        0.703125, -0.5, -0.4375, -0.4375, 0.546875, -0.296875, 0.15625, -1.5,
        0.703125, 1.125, 0.21875, 0.984375, 0.703125, 0.140625, 0.578125, -0.34375,
        -0.53125, -0.546875, 0.390625, 1.546875, 1.0, -0.5, 0.765625, 0.796875,
        -0.296875, 0.984375, -0.953125, 0.703125, -0.375, 0.09375, -0.21875, 0.734375,
    ];
    check(&out[1], &[1, 1, 2, 16], &expected_1);
    #[rustfmt::skip]
    let expected_2 = [
        -0.625, 0.625, 0.25, 0.625, -0.625, -1.125, -0.875, 0.125,
        -0.5, -0.375, 0.5, -0.25, -0.25, 0.5, -0.375, -0.5,
        0.125, -0.875, -1.125, -0.625, 0.625, 0.25, 0.625, -0.625,
        -1.125, -0.875, 0.125, -0.5, -0.375, 0.5, -0.25, -0.25,
    ];
    check(&out[2], &[1, 1, 2, 16], &expected_2);
}
