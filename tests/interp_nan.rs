//! NaN and infinity in the reference interpreter, as onnxruntime 1.32 (CPU) treats them: a NaN
//! is never mistaken for a masked score, a fully masked attention row is decided by its mask,
//! and `probs · V` reads every key (`0 · NaN = NaN`). Each expectation was observed in
//! onnxruntime on the same one-node model (tests/ort/interp_cases.py cross-checks them too).

use std::collections::BTreeMap;

use mobius::interp::{eval_node, OpCall, Tensor};
use mobius::ir::{Attr, DType, Node};

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

fn floats(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::float(DType::F32, shape.to_vec(), values.to_vec())
}

/// Evaluates one node (inputs `i0, i1, …`, absent ones `None`) and returns its outputs.
fn eval(
    domain: &str,
    op: &str,
    attrs: &[(&str, Attr)],
    inputs: Vec<Option<Tensor>>,
) -> Vec<Tensor> {
    let node = Node {
        name: "n".into(),
        domain: domain.into(),
        op_type: op.into(),
        inputs: (0..inputs.len()).map(|i| format!("i{i}")).collect(),
        outputs: vec!["y".into()],
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    };
    let call = OpCall {
        node: &node,
        inputs: inputs.iter().map(Option::as_ref).collect(),
        limits: &mobius::limits::InterpLimits::default(),
    };
    eval_node(&call).unwrap()
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
