//! Attention: ONNX `Attention` (opsets 23/24, in [`standard`]) and `com.microsoft`
//! `GroupQueryAttention` (in [`gqa`]), matching onnxruntime's CPU kernels. Scores, softmax and
//! the weighted sum are computed in f32 with f64 dot products; outputs are rounded to their
//! dtype, and f16/bf16 intermediates are rounded where onnxruntime stores them in that dtype.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

pub mod gqa;
pub mod standard;

use half::{bf16, f16};

use super::cost::{Cost, Reads, Work};
use super::infer::{input_type, shape_dims, Attrs, InputView};
use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef};
use crate::ir::DType;
use crate::limits::config::MAX_HEADS;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx(
        "Attention",
        &[
            "is_causal",
            "kv_num_heads",
            "q_num_heads",
            "qk_matmul_output_mode",
            "scale",
            "softcap",
            "softmax_precision",
        ],
    )
    .infer(|c| attention_types(c.inputs, c.attrs))
    .cost(
        Cost::KERNEL
            .support(|c, _, _| c.supports_attention)
            .work(Work::Attention),
    )
    .eval(standard::attention)
    .since(23),
    OpDef::ms(
        "GroupQueryAttention",
        &[
            "do_rotary",
            "kv_num_heads",
            "local_window_size",
            "num_heads",
            "qk_output",
            "rotary_interleaved",
            "scale",
            "smooth_softmax",
            "softcap",
        ],
    )
    .infer(|c| group_query_attention_types(c.inputs, c.attrs))
    // It reads one cos/sin row per new token, not the whole tables (inputs 7 and 8).
    .cost(
        Cost::KERNEL
            .support(|c, dtype, _| dtype.is_some_and(|d| c.gqa_dtypes.contains(&d)))
            .reads(Reads::Leading(7))
            .work(Work::Attention),
    )
    .eval(gqa::group_query_attention),
];

/// Head-count attribute `name` (`num_heads`, `kv_num_heads`, …): `None` when absent or 0, else
/// a count in `1..=MAX_HEADS`; a negative or larger value is an error naming the node and the
/// attribute, so sums and products of head counts and head sizes cannot overflow.
pub(crate) fn head_count(call: &OpCall<'_>, name: &str) -> Result<Option<usize>> {
    let v = call.int(name, 0);
    match usize::try_from(v) {
        Ok(0) => Ok(None),
        Ok(n) if n <= MAX_HEADS => Ok(Some(n)),
        _ => Err(call.error(format!(
            "attribute `{name}` = {v} is not a head count (expected 0 to {MAX_HEADS})"
        ))),
    }
}

/// Dot product with f64 accumulation, returned in f32.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as f64 * y as f64)
        .sum::<f64>() as f32
}

/// `softcap · tanh(x / softcap)` when `softcap > 0`, else `x`.
fn soft_cap(x: f32, softcap: f32) -> f32 {
    if softcap > 0.0 {
        softcap * (x / softcap).tanh()
    } else {
        x
    }
}

/// `x` rounded to the precision of `dtype` (f16, bf16; unchanged for other dtypes).
fn round_to(dtype: DType, x: f32) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(x).to_f32(),
        DType::BF16 => bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// The lowest finite value of `dtype` (f32's for dtypes other than f16 and bf16): the value
/// onnxruntime fills masked attention scores with.
fn lowest(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => f16::MIN.to_f32(),
        DType::BF16 => bf16::MIN.to_f32(),
        _ => f32::MIN,
    }
}

/// Turns a row of scores held in `dtype` precision into softmax probabilities (rounded to
/// `dtype`) in place, as onnxruntime does: a row holding a NaN becomes all NaN (a NaN is never
/// taken for a masked score); otherwise a row whose maximum is at or below the lowest finite
/// value of `dtype` (every key masked, by `-inf` or by that lowest value) becomes all zeros, and
/// a `+inf` score makes the row NaN (`inf - inf`). `smooth` adds a virtual zero logit to the
/// denominator (`smooth_softmax`).
fn softmax(row: &mut [f32], smooth: bool, dtype: DType) {
    if row.iter().any(|p| p.is_nan()) {
        row.fill(f32::NAN);
        return;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max <= lowest(dtype) {
        row.iter_mut().for_each(|p| *p = 0.0);
        return;
    }
    let mut sum = 0f64;
    for p in row.iter_mut() {
        *p = (*p - max).exp();
        sum += *p as f64;
    }
    if smooth {
        sum += (-max as f64).exp();
    }
    row.iter_mut()
        .for_each(|p| *p = round_to(dtype, (*p as f64 / sum) as f32));
}

/// [`softmax`] in f32 of a row joined by one more logit, `sink`, whose probability is dropped
/// (GroupQueryAttention's `head_sink`), as onnxruntime computes it: the maximum is taken over
/// the row and the sink, so a row holding a NaN, a NaN sink or a `+inf` sink (`inf − inf`)
/// becomes all NaN, and a row of `-inf` scores gets zeros (the sink takes the weight).
fn softmax_with_sink(row: &mut [f32], sink: f32) {
    if sink.is_nan() || row.iter().any(|p| p.is_nan()) {
        row.fill(f32::NAN);
        return;
    }
    let max = row.iter().copied().fold(sink, f32::max);
    let mut sum = ((sink - max).exp()) as f64;
    for p in row.iter_mut() {
        *p = (*p - max).exp();
        sum += *p as f64;
    }
    row.iter_mut().for_each(|p| *p = (*p as f64 / sum) as f32);
}

/// Writes `Σ_t probs[t] · values[t]` to `out` (`values` rows of `out.len()` elements). Every
/// row takes part, zero probabilities included: as in onnxruntime's matrix product, a NaN or
/// infinite value under a masked key still makes that output element NaN (`0 · inf`).
fn weighted_sum(probs: &[f32], values: &[f32], out: &mut [f32]) {
    let dim = out.len();
    let mut acc = vec![0f64; dim];
    for (t, &p) in probs.iter().enumerate() {
        for (a, &v) in acc.iter_mut().zip(&values[t * dim..(t + 1) * dim]) {
            *a += p as f64 * v as f64;
        }
    }
    out.iter_mut().zip(acc).for_each(|(o, a)| *o = a as f32);
}

/// Opset-23/24 Attention: `Y`, `present_key`, `present_value` (3-D or 4-D inputs).
fn attention_types(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> Vec<TensorType> {
    let ty = |i: usize| input_type(inputs, i);
    let (q, k, v, past_k, past_v) = (ty(0), ty(1), ty(2), ty(4), ty(5));
    let int = |name: &str| attr.int(name);
    let (Some(qd), Some(kd), Some(vd)) = (shape_dims(&q), shape_dims(&k), shape_dims(&v)) else {
        return vec![q.clone(), past_k, past_v];
    };
    let present = |new: &[SymDim], past: &TensorType, heads: Option<i64>| -> TensorType {
        let shape = if new.len() == 4 {
            let mut s = new.to_vec();
            if let Some(p) = shape_dims(past).filter(|p| p.len() == 4) {
                s[2] = p[2].add(&new[2]);
            }
            Some(s)
        } else if new.len() == 3 {
            let head_dim = match (&new[2], heads) {
                (SymDim::Known(w), Some(h)) if h > 0 => SymDim::Known(w / h),
                _ => SymDim::Unknown,
            };
            let total = match shape_dims(past).filter(|p| p.len() == 4) {
                Some(p) => p[2].add(&new[1]),
                None => new[1].clone(),
            };
            Some(vec![
                new[0].clone(),
                heads.map_or(SymDim::Unknown, SymDim::Known),
                total,
                head_dim,
            ])
        } else {
            None
        };
        TensorType {
            dtype: q.dtype,
            shape,
        }
    };
    let kv_heads = int("kv_num_heads");
    let q_heads = int("q_num_heads");
    let y = if qd.len() == 3 && vd.len() == 3 {
        let width = match (&vd[2], kv_heads, q_heads) {
            (SymDim::Known(w), Some(kv), Some(qh)) if kv > 0 => SymDim::Known(w / kv * qh),
            _ => SymDim::Unknown,
        };
        TensorType::new(
            q.dtype.unwrap_or(DType::F32),
            vec![qd[0].clone(), qd[1].clone(), width],
        )
    } else if qd.len() == 4 && vd.len() == 4 {
        TensorType::new(
            q.dtype.unwrap_or(DType::F32),
            vec![qd[0].clone(), qd[1].clone(), qd[2].clone(), vd[3].clone()],
        )
    } else {
        TensorType::default()
    };
    vec![
        y,
        present(kd, &past_k, kv_heads),
        present(vd, &past_v, kv_heads),
    ]
}

/// com.microsoft GroupQueryAttention: `output`, `present_key`, `present_value` (packed or not).
fn group_query_attention_types(inputs: &[InputView<'_>], attr: &Attrs<'_>) -> Vec<TensorType> {
    let ty = |i: usize| input_type(inputs, i);
    let int = |name: &str| attr.int(name);
    let (q, past_k, past_v) = (ty(0), ty(3), ty(4));
    let (heads, kv) = (int("num_heads"), int("kv_num_heads"));
    let head_dim = shape_dims(&past_k)
        .and_then(|p| p.get(3).cloned())
        .unwrap_or(SymDim::Unknown);
    let y = match (shape_dims(&q), &head_dim, heads) {
        (Some(d), SymDim::Known(hd), Some(h)) if d.len() == 3 => TensorType::new(
            q.dtype.unwrap_or(DType::F32),
            vec![d[0].clone(), d[1].clone(), SymDim::Known(hd * h)],
        ),
        _ => q.clone(),
    };
    let present = |past: &TensorType| TensorType {
        dtype: past.dtype,
        shape: match (shape_dims(past), shape_dims(&q)) {
            (Some(p), Some(d)) if p.len() == 4 && d.len() == 3 => Some(vec![
                p[0].clone(),
                kv.map_or(p[1].clone(), SymDim::Known),
                p[2].add(&d[1]),
                p[3].clone(),
            ]),
            _ => None,
        },
    };
    vec![y, present(&past_k), present(&past_v)]
}
