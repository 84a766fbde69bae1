//! NaN and infinity in the reference interpreter, as onnxruntime 1.32 (CPU) treats them: a NaN
//! is never mistaken for a masked score, a fully masked attention row is decided by its mask,
//! and `probs · V` reads every key (`0 · NaN = NaN`). Each expectation was observed in
//! onnxruntime on the same one-node model (tests/ort/interp_cases.py cross-checks them too).

use mobius::interp::eval_op;

use mobius::ir::{Attr, DType};
use mobius::limits::InterpLimits;
use mobius::ops::Tensor;

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

fn floats(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::float(DType::F32, shape.to_vec(), values.to_vec())
}

/// Evaluates one node (inputs `i0, i1, …`, absent ones `None`) under `limits`.
fn try_eval(
    domain: &str,
    op: &str,
    attrs: &[(&str, Attr)],
    inputs: Vec<Option<Tensor>>,
    limits: &InterpLimits,
) -> mobius::Result<Vec<Tensor>> {
    let attrs = attrs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    eval_op("n", (domain, op), attrs, &inputs, &["y"], limits)
}

/// Evaluates one node (default budgets) and returns its outputs.
fn eval(
    domain: &str,
    op: &str,
    attrs: &[(&str, Attr)],
    inputs: Vec<Option<Tensor>>,
) -> Vec<Tensor> {
    try_eval(domain, op, attrs, inputs, &InterpLimits::default()).unwrap()
}

/// `'N'` for NaN, `'0'` for zero, `'I'` for an infinity, else `'1'`: one character per value.
fn pattern(t: &Tensor) -> String {
    t.floats()
        .unwrap()
        .iter()
        .map(|&v| match v {
            v if v.is_nan() => 'N',
            0.0 => '0',
            v if v.is_infinite() => 'I',
            _ => '1',
        })
        .collect()
}

#[test]
fn softmax_any_nan_or_inf_makes_the_slice_nan() {
    let x = floats(
        &[6, 4],
        &[
            NAN, NAN, NAN, NAN, // all NaN
            1.0, NAN, 2.0, 3.0, // one NaN among numbers
            -INF, -INF, -INF, -INF, // all -inf: NaN too (0 / 0)
            1.0, INF, 2.0, 3.0, // +inf
            -INF, -INF, NAN, -INF, // NaN among -inf
            0.0, 0.0, 0.0, 0.0, // plain
        ],
    );
    let y = &eval("", "Softmax", &[], vec![Some(x)])[0];
    assert_eq!(pattern(y), "NNNNNNNNNNNNNNNNNNNN1111");
}

#[test]
fn reduce_max_propagates_a_leading_nan_only() {
    let x = floats(
        &[4, 3],
        &[
            NAN, 1.0, 2.0, 1.0, 2.0, NAN, NAN, NAN, NAN, -INF, -INF, -INF,
        ],
    );
    let axes = Tensor::int(DType::I64, vec![1], vec![1]);
    let y = &eval("", "ReduceMax", &[], vec![Some(x), Some(axes)])[0];
    let v = y.floats().unwrap();
    assert!(v[0].is_nan() && v[2].is_nan(), "{v:?}");
    assert_eq!((v[1], v[3]), (2.0, -INF));
}

#[test]
fn relu_keeps_nan() {
    let y = &eval("", "Relu", &[], vec![Some(floats(&[3], &[NAN, -1.0, INF]))])[0];
    assert_eq!(pattern(y), "N0I");
}

/// ONNX Attention, 4-D, one head: `q` is `[S, 4]`, `k`/`v` are `[T, 4]`, `mask` `[S, T]`.
fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<Tensor>,
    attrs: &[(&str, Attr)],
) -> Tensor {
    let (s, t) = (q.len() / 4, k.len() / 4);
    let inputs = vec![
        Some(floats(&[1, 1, s, 4], q)),
        Some(floats(&[1, 1, t, 4], k)),
        Some(floats(&[1, 1, t, 4], v)),
        mask,
    ];
    eval("", "Attention", attrs, inputs).remove(0)
}

#[test]
fn attention_nan_score_is_not_a_masked_score() {
    // Row 1 of q is NaN: its scores are all NaN; before, that row looked fully masked (zeros).
    let mut q = vec![1.0; 12];
    q[4..8].fill(NAN);
    let y = attention(&q, &[0.0; 16], &[1.0; 16], None, &[]);
    assert_eq!(pattern(&y), "1111NNNN1111");
}

#[test]
fn attention_causal_mask_is_added_so_nan_stays() {
    // Key 2 holds a NaN: rows 0 and 1 do not see it (causal), but the causal mask is added to
    // the score, so every row is NaN.
    let mut k = vec![0.0; 16];
    k[8] = NAN;
    let causal = [("is_causal", Attr::Int(1))];
    let y = attention(&[1.0; 12], &k, &[1.0; 16], None, &causal);
    assert_eq!(pattern(&y), "NNNNNNNNNNNN");
}

#[test]
fn attention_nan_value_under_a_masked_key_reaches_the_output() {
    // V row 3, element 1 is NaN; key 3 is masked for rows 0..2 (causal) but 0 · NaN = NaN.
    let mut v = vec![1.0; 16];
    v[13] = NAN;
    let causal = [("is_causal", Attr::Int(1))];
    let y = attention(&[1.0; 12], &[0.0; 16], &v, None, &causal);
    assert_eq!(pattern(&y), "1N111N111N11");
}

#[test]
fn attention_fully_masked_rows_are_decided_by_the_mask() {
    // Row 0 open on keys 0, 1; row 1 all -inf; row 2 all the lowest f32. Key 2 has a NaN, so
    // row 0 is NaN while rows 1 and 2 are zeros whatever their (NaN) scores.
    let mut mask = vec![f32::NEG_INFINITY; 12];
    mask[0..2].fill(0.0);
    mask[8..12].fill(f32::MIN);
    let mut k = vec![0.0; 16];
    k[8] = NAN;
    let y = attention(
        &[1.0; 12],
        &k,
        &[1.0; 16],
        Some(floats(&[3, 4], &mask)),
        &[],
    );
    assert_eq!(pattern(&y), "NNNN00000000");
    // A large score added to the lowest mask value does not unmask the row.
    let y = attention(
        &[1e18; 4],
        &[1e18; 16],
        &[1.0; 16],
        Some(floats(&[1, 4], &[f32::MIN; 4])),
        &[],
    );
    assert_eq!(pattern(&y), "0000");
    // A NaN in the mask is not a masked key: the row is NaN.
    let y = attention(
        &[1.0; 4],
        &[0.0; 16],
        &[1.0; 16],
        Some(floats(&[1, 4], &[-INF, -INF, NAN, -INF])),
        &[],
    );
    assert_eq!(pattern(&y), "NNNN");
}

#[test]
fn attention_fully_masked_row_still_multiplies_values() {
    let mask = Tensor::bool(vec![1, 4], vec![false; 4]);
    let mut v = vec![1.0; 16];
    v[6] = NAN;
    let y = attention(&[1.0; 4], &[0.0; 16], &v, Some(mask), &[]);
    assert_eq!(pattern(&y), "00N0");
}

/// com.microsoft GroupQueryAttention, one head of size 8, decoding one token after `past`
/// cached ones: key `t` scores `q · k_t`.
fn gqa_decode(q: &[f32; 8], keys: &[f32], values: &[f32], attrs: &[(&str, Attr)]) -> Tensor {
    let t = keys.len() / 8;
    let past = t - 1;
    let mut all = vec![("num_heads", Attr::Int(1)), ("kv_num_heads", Attr::Int(1))];
    all.extend(attrs.iter().cloned());
    let inputs = vec![
        Some(floats(&[1, 1, 8], q)),
        Some(floats(&[1, 1, 8], &keys[past * 8..])),
        Some(floats(&[1, 1, 8], &values[past * 8..])),
        Some(floats(&[1, 1, past, 8], &keys[..past * 8])),
        Some(floats(&[1, 1, past, 8], &values[..past * 8])),
        Some(Tensor::int(DType::I32, vec![1], vec![past as i64])),
        Some(Tensor::int(DType::I32, vec![], vec![t as i64])),
    ];
    eval("com.microsoft", "GroupQueryAttention", &all, inputs).remove(0)
}

#[test]
fn gqa_nan_query_or_key_makes_the_row_nan() {
    let one = [1.0; 8];
    let y = gqa_decode(&[NAN; 8], &[0.5; 32], &[1.0; 32], &[]);
    assert_eq!(pattern(&y), "NNNNNNNN");
    let mut keys = vec![0.5; 32];
    keys[9] = NAN;
    assert_eq!(
        pattern(&gqa_decode(&one, &keys, &[1.0; 32], &[])),
        "NNNNNNNN"
    );
    // Outside the local window the NaN key is not read.
    let window = [("local_window_size", Attr::Int(2))];
    assert_eq!(
        pattern(&gqa_decode(&one, &keys, &[1.0; 32], &window)),
        "11111111"
    );
    // But a NaN value outside the window still is (0 · NaN).
    let mut values = vec![1.0; 32];
    values[10] = NAN;
    assert_eq!(
        pattern(&gqa_decode(&one, &[0.5; 32], &values, &window)),
        "11N11111"
    );
    // Scores all -inf: zero probabilities.
    let y = gqa_decode(&one, &[f32::NEG_INFINITY; 32], &[1.0; 32], &[]);
    assert_eq!(pattern(&y), "00000000");
}

/// Evaluates one standard-domain node without attributes, expecting an error; its message.
fn eval_err(op: &str, inputs: Vec<Option<Tensor>>) -> String {
    try_eval("", op, &[], inputs, &InterpLimits::default())
        .unwrap_err()
        .to_string()
}

/// `v` with NaN written as the string "NaN", so that values compare with `assert_eq!`.
fn show(t: &Tensor) -> Vec<String> {
    t.floats().unwrap().iter().map(|v| format!("{v}")).collect()
}

fn strs(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

#[test]
fn max_and_min_propagate_a_nan_from_any_input() {
    let a = floats(&[6], &[NAN, 1.0, NAN, 2.0, -INF, INF]);
    let b = floats(&[6], &[1.0, NAN, NAN, INF, 3.0, -INF]);
    for (x, y) in [(&a, &b), (&b, &a)] {
        let max = &eval("", "Max", &[], vec![Some(x.clone()), Some(y.clone())])[0];
        assert_eq!(show(max), strs(&["NaN", "NaN", "NaN", "inf", "3", "inf"]));
        let min = &eval("", "Min", &[], vec![Some(x.clone()), Some(y.clone())])[0];
        assert_eq!(show(min), strs(&["NaN", "NaN", "NaN", "2", "-inf", "-inf"]));
    }
}

#[test]
fn max_and_min_broadcast_one_to_many_inputs() {
    // One input: itself, NaN included.
    let x = floats(&[3], &[NAN, -1.0, 4.0]);
    let y = &eval("", "Max", &[], vec![Some(x.clone())])[0];
    assert_eq!(show(y), strs(&["NaN", "-1", "4"]));
    // Three inputs, [1, 3] with [3, 1] with a scalar: a NaN in the column input fills its row.
    let row = floats(&[1, 3], &[0.0, 5.0, -2.0]);
    let col = floats(&[3, 1], &[NAN, 1.0, 10.0]);
    let scalar = floats(&[], &[2.0]);
    let inputs = vec![Some(row), Some(col), Some(scalar)];
    let max = &eval("", "Max", &[], inputs.clone())[0];
    assert_eq!(max.shape, vec![3, 3]);
    assert_eq!(
        show(max),
        strs(&["NaN", "NaN", "NaN", "2", "5", "2", "10", "10", "10"])
    );
    let min = &eval("", "Min", &[], inputs)[0];
    assert_eq!(
        show(min),
        strs(&["NaN", "NaN", "NaN", "0", "1", "-2", "0", "2", "-2"])
    );
}

#[test]
fn max_and_min_of_integers_and_f16() {
    let a = Tensor::int(DType::I64, vec![3], vec![1, -5, 1 << 62]);
    let b = Tensor::int(DType::I64, vec![2, 1], vec![3, -9]);
    let max = &eval("", "Max", &[], vec![Some(a.clone()), Some(b.clone())])[0];
    assert_eq!(max.ints().unwrap(), &[3, 3, 1 << 62, 1, -5, 1 << 62]);
    let min = &eval("", "Min", &[], vec![Some(a), Some(b)])[0];
    assert_eq!(min.ints().unwrap(), &[1, -5, 3, -9, -9, -9]);
    let h = |v: &[f32]| Tensor::float(DType::F16, vec![v.len()], v.to_vec());
    let y = &eval(
        "",
        "Min",
        &[],
        vec![Some(h(&[1.0, NAN, 70000.0])), Some(h(&[NAN, 2.0, 3.0]))],
    )[0];
    assert_eq!(y.dtype, DType::F16);
    assert_eq!(show(y), strs(&["NaN", "NaN", "3"]));
}

#[test]
fn max_and_min_refuse_bad_inputs() {
    let msg = eval_err("Max", vec![]);
    assert!(
        msg.contains("Max `n`") && msg.contains("at least one input"),
        "{msg}"
    );
    let f = floats(&[2], &[1.0, 2.0]);
    let i = Tensor::int(DType::I64, vec![2], vec![1, 2]);
    let msg = eval_err("Min", vec![Some(f.clone()), Some(i)]);
    assert!(msg.contains("dtypes differ: f32 and i64"), "{msg}");
    let msg = eval_err("Max", vec![Some(f), Some(floats(&[3], &[0.0; 3]))]);
    assert!(
        msg.contains("Max `n`") && msg.contains("broadcast"),
        "{msg}"
    );
    let b = Tensor::bool(vec![1], vec![true]);
    let msg = eval_err("Min", vec![Some(b)]);
    assert!(msg.contains("unsupported dtype bool"), "{msg}");
}

#[test]
fn max_budget_is_checked_before_allocating_the_broadcast() {
    let (a, b) = (
        floats(&[100, 1], &[0.0; 100]),
        floats(&[1, 100], &[0.0; 100]),
    );
    let limits = InterpLimits {
        max_tensor_elements: 1000,
        ..Default::default()
    };
    let msg = try_eval("", "Max", &[], vec![Some(a), Some(b)], &limits)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("Max `n` output") && msg.contains("--max-tensor-elements"),
        "{msg}"
    );
}

#[test]
fn reduce_min_propagates_a_leading_nan_only() {
    let x = floats(
        &[5, 3],
        &[
            NAN, 1.0, 2.0, // leading NaN
            2.0, NAN, -1.0, // NaN later: skipped
            NAN, NAN, NAN, // all NaN
            INF, INF, INF, // all +inf
            1.0, NAN, -INF, // -inf after a NaN
        ],
    );
    let axes = Tensor::int(DType::I64, vec![1], vec![-1]);
    let y = &eval("", "ReduceMin", &[], vec![Some(x.clone()), Some(axes)])[0];
    assert_eq!(y.shape, vec![5, 1]);
    assert_eq!(show(y), strs(&["NaN", "-1", "NaN", "inf", "-inf"]));
    // Along axis 0 without keepdims: columns [NaN, 2, NaN, inf, 1], [1, NaN, ...], [2, -1, ...].
    let axes = Tensor::int(DType::I64, vec![1], vec![0]);
    let keep0 = [("keepdims", Attr::Int(0))];
    let y = &eval("", "ReduceMin", &keep0, vec![Some(x.clone()), Some(axes)])[0];
    assert_eq!(y.shape, vec![3]);
    assert_eq!(show(y), strs(&["NaN", "1", "-inf"]));
    // No axes: every axis (the first element is NaN), or the identity with noop_with_empty_axes.
    let y = &eval("", "ReduceMin", &[], vec![Some(x.clone())])[0];
    assert_eq!((y.shape.clone(), show(y)), (vec![1, 1], strs(&["NaN"])));
    let noop = [("noop_with_empty_axes", Attr::Int(1))];
    let y = &eval("", "ReduceMin", &noop, vec![Some(x.clone())])[0];
    assert_eq!((&y.shape, show(y)), (&x.shape, show(&x)));
}

#[test]
fn reduce_min_of_empty_groups_and_integers() {
    let axes = || Some(Tensor::int(DType::I64, vec![1], vec![1]));
    let y = &eval(
        "",
        "ReduceMin",
        &[],
        vec![Some(floats(&[2, 0], &[])), axes()],
    )[0];
    assert_eq!(show(y), strs(&["inf", "inf"]));
    for (dtype, highest) in [
        (DType::I64, i64::MAX),
        (DType::I32, i32::MAX as i64),
        (DType::I8, 127),
        (DType::U8, 255),
    ] {
        let x = Tensor::int(dtype, vec![1, 0], vec![]);
        let y = &eval("", "ReduceMin", &[], vec![Some(x), axes()])[0];
        assert_eq!(y.ints().unwrap(), &[highest], "{dtype}");
    }
    let x = Tensor::int(DType::I32, vec![2, 3], vec![4, -7, 9, 0, 3, 1]);
    let y = &eval("", "ReduceMin", &[], vec![Some(x), axes()])[0];
    assert_eq!(y.ints().unwrap(), &[-7, 0]);
    let b = Tensor::bool(vec![2, 2], vec![true, false, true, true]);
    let y = &eval("", "ReduceMin", &[], vec![Some(b.clone()), axes()])[0];
    assert_eq!(y.bools().unwrap(), &[false, true]);
    let y = &eval("", "ReduceMax", &[], vec![Some(b), axes()])[0];
    assert_eq!(y.bools().unwrap(), &[true, true]);
}

#[test]
fn reduce_max_and_min_of_an_empty_bool_axis_give_the_least_and_greatest_bool() {
    // The spec's empty-set results (ONNX's conformance case test_reduce_max_empty_set_bool):
    // the maximum of nothing is false, the minimum true.
    for (op, want) in [("ReduceMax", false), ("ReduceMin", true)] {
        let x = Tensor::bool(vec![2, 0], vec![]);
        let axes = Tensor::int(DType::I64, vec![1], vec![1]);
        let y = eval("", op, &[], vec![Some(x), Some(axes)]);
        assert_eq!(y[0].shape, [2, 1], "{op}");
        assert_eq!(y[0].bools().unwrap(), [want, want], "{op}");
    }
}
