//! DecomposeAttention: ONNX `Attention` (opset 23/24) on 3-D Q/K/V → standard ops, as
//! onnxruntime's CPU kernel computes it (see `ops::attention::standard`):
//!
//! - Q/K/V to `[B, heads, L, D]` (Reshape + Transpose); the present key/value are
//!   `Concat(past, new; axis 2)` (just the new ones without a past);
//! - key/value heads repeated for grouped queries with Unsqueeze + Expand + Reshape;
//! - `scores = MatMul(Q, Kᵀ) · scale`, soft-capped as `c · tanh(scores / c)` when `softcap > 0`,
//!   plus a float mask;
//! - a boolean mask and `is_causal` (query `i` sees key `j ≤ i + T − S`, from CumSum positions:
//!   no `Range`) select `scores` or the lowest finite value; with `nonpad_kv_seqlen` (opset 24,
//!   no past: a static cache) keys at or beyond `nonpad_kv_seqlen[b]` are hidden too and the
//!   causal limit is `j ≤ i + nonpad_kv_seqlen[b] − S`;
//! - `Softmax`, rows with no visible key set to zero, `MatMul` with V, back to `[B, S, heads·Dv]`.

use egg::Id;

use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;

/// `attention-output`.
pub(crate) const ATTENTION_OUTPUT: Applier<12> = Applier::new(
    [
        "?q", "?k", "?v", "?pk", "?pv", "?kvh", "?qnh", "?mode", "?mask", "?causal", "?scale",
        "?softcap",
    ],
    attention_output,
);

/// `attention-output-without-cache`.
pub(crate) const ATTENTION_OUTPUT_WITHOUT_CACHE: Applier<10> = Applier::new(
    [
        "?q", "?k", "?v", "?kvh", "?qnh", "?mode", "?mask", "?causal", "?scale", "?softcap",
    ],
    attention_output_without_cache,
);

/// `attention-output-nonpad`.
pub(crate) const ATTENTION_OUTPUT_NONPAD: Applier<13> = Applier::new(
    [
        "?q", "?k", "?v", "?pk", "?pv", "?kvh", "?qnh", "?mode", "?nonpad", "?mask", "?causal",
        "?scale", "?softcap",
    ],
    attention_output_nonpad,
);

/// `attention-present-key`.
pub(crate) const ATTENTION_PRESENT_KEY: Applier<8> = Applier::new(
    ["?q", "?k", "?v", "?pk", "?pv", "?kvh", "?qnh", "?mode"],
    attention_present_key,
);

/// `attention-present-value`.
pub(crate) const ATTENTION_PRESENT_VALUE: Applier<8> = Applier::new(
    ["?q", "?k", "?v", "?pk", "?pv", "?kvh", "?qnh", "?mode"],
    attention_present_value,
);

/// The matched Attention's classes every lowering reads.
struct Matched {
    q: Id,
    k: Id,
    v: Id,
    /// The past key and value inputs, when the pattern has them (either may be absent).
    past: Option<(Id, Id)>,
    kv_heads: Id,
    q_heads: Id,
    mode: Id,
}

impl Matched {
    /// From the variables `?q ?k ?v ?pk ?pv ?kvh ?qnh ?mode`.
    fn with_cache([q, k, v, pk, pv, kv_heads, q_heads, mode]: [Id; 8]) -> Matched {
        Matched {
            q,
            k,
            v,
            past: Some((pk, pv)),
            kv_heads,
            q_heads,
            mode,
        }
    }
}

/// What every Attention lowering reads of the matched node.
struct Parts {
    q: Id,
    k: Id,
    v: Id,
    past: Option<(Id, Id)>,
    q_heads: i64,
    kv_heads: i64,
    head_size: i64,
    value_size: i64,
    dtype: DType,
}

/// The matched Attention's inputs and sizes: 3-D Q/K/V of one float dtype with known widths,
/// head counts set with `q_num_heads % kv_num_heads == 0`, `qk_matmul_output_mode` 0, both
/// caches or none.
fn parts(e: &Emit<'_>, m: &Matched) -> Option<Parts> {
    let (q, k, v) = (m.q, m.k, m.v);
    let q_heads = e.int_or(m.q_heads, 0)?;
    let kv_heads = e.int_or(m.kv_heads, 0)?;
    if q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads != 0 {
        return None;
    }
    if e.int_or(m.mode, 0)? != 0 {
        return None;
    }
    let width = |id: Id| -> Option<(DType, i64)> {
        let t = e.tensor(id)?;
        let shape = t.shape.as_ref().filter(|s| s.len() == 3)?;
        Some((t.dtype?, shape[2].known()?))
    };
    let ((dtype, qw), (kd, kw), (vd, vw)) = (width(q)?, width(k)?, width(v)?);
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
    if !float || kd != dtype || vd != dtype || qw % q_heads != 0 || kw % kv_heads != 0 {
        return None;
    }
    let (head_size, value_size) = (kw / kv_heads, vw / kv_heads);
    if qw / q_heads != head_size || vw % kv_heads != 0 {
        return None;
    }
    let past = match m.past {
        Some((pk, pv)) => match (e.is_absent(pk), e.is_absent(pv)) {
            (true, true) => None,
            (false, false) => Some((pk, pv)),
            _ => return None,
        },
        None => None,
    };
    Some(Parts {
        q,
        k,
        v,
        past,
        q_heads,
        kv_heads,
        head_size,
        value_size,
        dtype,
    })
}

/// `[B, L, heads·D]` → `[B, heads, L, D]`.
fn to_heads(e: &mut Emit<'_>, x: Id, heads: i64, size: i64) -> Id {
    let split = e.reshape(x, &[0, 0, heads, size]);
    e.transpose(split, &[0, 2, 1, 3])
}

/// The present key (`value` false) or value: the cache followed by the new heads.
fn present(e: &mut Emit<'_>, p: &Parts, value: bool) -> Id {
    let (x, size, past) = if value {
        (p.v, p.value_size, p.past.map(|c| c.1))
    } else {
        (p.k, p.head_size, p.past.map(|c| c.0))
    };
    let new = to_heads(e, x, p.kv_heads, size);
    match past {
        Some(cache) => e.concat(&[cache, new], 2),
        None => new,
    }
}

/// Reads `?q ?k ?v ?pk ?pv ?kvh ?qnh ?mode` of the Attention: its present key (`get1`).
fn attention_present_key(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 8]) -> Option<Id> {
    let mut e = Emit::new(g);
    let p = parts(&e, &Matched::with_cache(vars))?;
    Some(present(&mut e, &p, false))
}

/// Reads `?q ?k ?v ?pk ?pv ?kvh ?qnh ?mode` of the Attention: its present value (`get2`).
fn attention_present_value(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 8]) -> Option<Id> {
    let mut e = Emit::new(g);
    let p = parts(&e, &Matched::with_cache(vars))?;
    Some(present(&mut e, &p, true))
}

/// `[B, Hkv, T, D]` → `[B, Hkv·group, T, D]`, each kv head repeated `group` times in place.
fn repeat_heads(e: &mut Emit<'_>, x: Id, group: i64, heads: i64, size: i64) -> Id {
    if group == 1 {
        return x;
    }
    let wide = e.unsqueeze(x, &[2]);
    let times = e.ints(&[1, 1, group, 1, 1]);
    let expanded = e.bin("Expand", wide, times);
    e.reshape(expanded, &[0, heads, -1, size])
}

/// The boolean `[S, T]` causal mask: query `i` sees key `j` iff `j ≤ i + T − S`, with positions
/// from a CumSum over `T` ones (no `Range`).
fn causal(e: &mut Emit<'_>, q: Id, keys: Id) -> Id {
    let total = e.shape(keys, 2, 3);
    let queries = e.shape(q, 1, 2);
    let one = e.ints(&[1]);
    let ones = e.bin("Expand", one, total);
    let axis = e.ints(&[0]);
    let counts = e.op("CumSum", &[ones, axis], &[]); // j + 1
    let key_pos = e.bin("Sub", counts, one); // j
    let first = e.bin("Sub", total, queries);
    let limit = e.op("Slice", &[counts, first, total, axis], &[]); // T − S + i + 1
    let row = e.unsqueeze(key_pos, &[0]);
    let col = e.unsqueeze(limit, &[1]);
    e.bin("Less", row, col)
}

/// `0, 1, …, n − 1` for the 1-D int64 count `n` (`[1]`).
fn counting(e: &mut Emit<'_>, n: Id) -> Id {
    let one = e.ints(&[1]);
    let ones = e.bin("Expand", one, n);
    let axis = e.ints(&[0]);
    let counts = e.op("CumSum", &[ones, axis], &[]);
    e.bin("Sub", counts, one)
}

/// The boolean `[B, 1, S, T]` masks of `nonpad_kv_seqlen` (`[B]`): keys before
/// `nonpad[b]`, and (`causal`) query `i` seeing key `j ≤ i + nonpad[b] − S`.
fn nonpad_masks(e: &mut Emit<'_>, q: Id, keys: Id, nonpad: Id, causal: bool) -> (Id, Option<Id>) {
    let total = e.shape(keys, 2, 3);
    let key_pos = counting(e, total); // [T]
    let limit = e.reshape(nonpad, &[-1, 1, 1, 1]); // [B, 1, 1, 1]
    let valid = e.bin("Less", key_pos, limit);
    if !causal {
        return (valid, None);
    }
    let queries = e.shape(q, 1, 2);
    let query_pos = counting(e, queries); // [S]
    let one = e.ints(&[1]);
    let next = e.bin("Add", query_pos, one);
    let shifted = e.bin("Sub", next, queries); // i + 1 − S
    let column = e.unsqueeze(shifted, &[1]); // [S, 1]
    let bound = e.bin("Add", column, limit); // [B, 1, S, 1]: i + 1 + nonpad − S
    (valid, Some(e.bin("Less", key_pos, bound)))
}

/// The lowest finite value of `dtype`.
fn lowest(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => half::f16::MIN.to_f32(),
        DType::BF16 => half::bf16::MIN.to_f32(),
        _ => f32::MIN,
    }
}

/// Reads `?q ?k ?v ?pk ?pv ?kvh ?qnh ?mode ?mask ?causal ?scale ?softcap` of the Attention
/// with caches: its output Y (`get0`), see [`output`].
fn attention_output(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 12]) -> Option<Id> {
    let [q, k, v, pk, pv, kvh, qnh, mode, rest @ ..] = vars;
    output(
        g,
        &Matched::with_cache([q, k, v, pk, pv, kvh, qnh, mode]),
        None,
        rest,
    )
}

/// Reads `?q ?k ?v ?pk ?pv ?kvh ?qnh ?mode ?nonpad ?mask ?causal ?scale ?softcap` of the
/// one-output Attention with `nonpad_kv_seqlen` and no caches (a static cache's attention):
/// its output Y, see [`output`]. Declines unless the past inputs are absent and
/// `nonpad_kv_seqlen` is int64 `[B]`.
fn attention_output_nonpad(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 13]) -> Option<Id> {
    let [q, k, v, pk, pv, kvh, qnh, mode, nonpad, rest @ ..] = vars;
    let e = Emit::new(g);
    if !e.is_absent(pk) || !e.is_absent(pv) || e.is_absent(nonpad) {
        return None;
    }
    let t = e.tensor(nonpad)?;
    if t.dtype? != DType::I64 || t.rank()? != 1 {
        return None;
    }
    let m = Matched {
        q,
        k,
        v,
        past: None,
        kv_heads: kvh,
        q_heads: qnh,
        mode,
    };
    output(g, &m, Some(nonpad), rest)
}

/// Reads `?q ?k ?v ?kvh ?qnh ?mode ?mask ?causal ?scale ?softcap` of the Attention without
/// caches and with one output: its output Y, see [`output`].
fn attention_output_without_cache(g: &mut OnnxGraph, _: Site<'_>, vars: [Id; 10]) -> Option<Id> {
    let [q, k, v, kv_heads, q_heads, mode, rest @ ..] = vars;
    let m = Matched {
        q,
        k,
        v,
        past: None,
        kv_heads,
        q_heads,
        mode,
    };
    output(g, &m, None, rest)
}

/// The Attention's output Y in standard ops, given its `nonpad_kv_seqlen` input (if any), its
/// mask input and the classes of its `is_causal`, `scale` and `softcap` attributes. Declines
/// for float masks of another dtype and, with `is_causal` and no `nonpad_kv_seqlen`, unless Q
/// and K have the same (known) sequence length.
fn output(
    g: &mut OnnxGraph,
    m: &Matched,
    nonpad: Option<Id>,
    [mask, is_causal, scale, softcap]: [Id; 4],
) -> Option<Id> {
    let mut e = Emit::new(g);
    let p = parts(&e, m)?;
    let is_causal = e.int_or(is_causal, 0)? != 0;
    let scale = match e.attr(scale)? {
        AttrValue::Unset => (p.head_size as f32).powf(-0.5),
        AttrValue::Float(bits) => f32::from_bits(*bits),
        _ => return None,
    };
    let softcap = match e.attr(softcap)? {
        AttrValue::Unset => 0.0,
        AttrValue::Float(bits) => f32::from_bits(*bits),
        _ => return None,
    };
    let mask_dtype = if e.is_absent(mask) {
        None
    } else {
        Some(e.tensor(mask)?.dtype?)
    };
    if mask_dtype.is_some_and(|d| d != DType::Bool && d != p.dtype) {
        return None;
    }
    if is_causal && nonpad.is_none() {
        let seq = |id: Id| e.tensor(id)?.shape.as_ref()?.get(1).cloned();
        let (sq, sk) = (seq(p.q)?, seq(p.k)?);
        if sq == SymDim::Unknown || sq != sk {
            return None;
        }
    }

    let group = p.q_heads / p.kv_heads;
    let q = to_heads(&mut e, p.q, p.q_heads, p.head_size);
    let keys = present(&mut e, &p, false);
    let values = present(&mut e, &p, true);
    let k = repeat_heads(&mut e, keys, group, p.q_heads, p.head_size);
    let v = repeat_heads(&mut e, values, group, p.q_heads, p.value_size);
    let kt = e.transpose(k, &[0, 1, 3, 2]);
    let product = e.bin("MatMul", q, kt);
    let scale = e.float(p.dtype, scale)?;
    let mut scores = e.bin("Mul", product, scale);
    if softcap > 0.0 {
        let cap = e.float(p.dtype, softcap)?;
        let scaled = e.bin("Div", scores, cap);
        let squashed = e.op("Tanh", &[scaled], &[]);
        scores = e.bin("Mul", squashed, cap);
    }
    let float_mask = mask_dtype == Some(p.dtype);
    if float_mask {
        scores = e.bin("Add", scores, mask);
    }
    let (valid, causal_mask) = match nonpad {
        Some(n) => {
            let (valid, c) = nonpad_masks(&mut e, p.q, keys, n, is_causal);
            (Some(valid), c)
        }
        None if is_causal => (None, Some(causal(&mut e, p.q, keys))),
        None => (None, None),
    };
    let bool_mask = (mask_dtype == Some(DType::Bool)).then_some(mask);
    let visible = [bool_mask, causal_mask, valid]
        .into_iter()
        .flatten()
        .reduce(|a, b| e.bin("And", a, b));
    let floor = e.float(p.dtype, lowest(p.dtype))?;
    let zero = e.float(p.dtype, 0.0)?;
    if let Some(visible) = visible {
        scores = e.op("Where", &[visible, scores, floor], &[]);
    }
    let mut probs = e.op("Softmax", &[scores], &[("axis", AttrValue::Int(-1))]);
    // onnxruntime outputs zeros for a row whose every key is masked.
    let any_visible = match (float_mask, visible) {
        (true, _) => {
            let last = e.ints(&[-1]);
            let keep = [("keepdims", AttrValue::Int(1))];
            let best = e.op("ReduceMax", &[scores, last], &keep);
            Some(e.bin("Greater", best, floor))
        }
        (false, visible) => visible,
    };
    if let Some(rows) = any_visible {
        probs = e.op("Where", &[rows, probs, zero], &[]);
    }
    let out = e.bin("MatMul", probs, v);
    let seq_first = e.transpose(out, &[0, 2, 1, 3]);
    Some(e.reshape(seq_first, &[0, 0, -1]))
}
