//! Rotary position embeddings: ONNX `RotaryEmbedding` (opset 23) and `com.microsoft`
//! `RotaryEmbedding`, matching onnxruntime's CPU kernels.
//!
//! Both rotate the first `rotary_dim` elements of every head vector: with the default "halves"
//! layout element `i` pairs with `i + rotary_dim/2`, with `interleaved` element `2i` pairs with
//! `2i + 1`. Each pair `(x1, x2)` at angle row `r` becomes
//! `(cos[r]·x1 − sin[r]·x2, sin[r]·x1 + cos[r]·x2)`; the remaining elements pass through.
//!
//! Layouts differ between the two ops:
//! - ONNX: input `[B, S, H·D]` (with `num_heads`) or `[B, H, S, D]`; the caches are
//!   `[B, S, rd/2]` without `position_ids`, or `[max_pos, rd/2]` indexed by `position_ids [B, S]`.
//! - contrib: input `[B, S, H·D]` or `[B, H, S, D]`, `position_ids` either `[B, S]` or a single
//!   offset `[1]` (position = offset + s), caches `[max_pos, rd/2]`. Without `num_heads` the head
//!   size of a 3-D input is `2·cos_cache.shape[1]`. The `scale` attribute is ignored (as the CPU
//!   kernel does) and `is_packed_batching = 1` is not supported.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::attention::head_count;
use super::cost::Cost;
use super::elementwise::first_type;
use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx(
        "RotaryEmbedding",
        &["interleaved", "num_heads", "rotary_embedding_dim"],
    )
    .infer(first_type)
    .cost(Cost::KERNEL.support(|c, _, _| c.supports_rotary_embedding))
    .eval(onnx_rotary)
    .since(23),
    OpDef::ms(
        "RotaryEmbedding",
        &[
            "interleaved",
            "is_packed_batching",
            "num_heads",
            "rotary_embedding_dim",
            "scale",
        ],
    )
    .infer(first_type)
    .cost(Cost::KERNEL.support(|c, _, _| c.supports_fused_rope))
    .eval(contrib_rotary),
];

/// Rotates the first `2·cos.len()` elements of one head vector `x` in place, pairing halves
/// (`i` with `i + cos.len()`) or, when `interleaved`, neighbours (`2i` with `2i + 1`).
pub(crate) fn rotate(x: &mut [f32], cos: &[f32], sin: &[f32], interleaved: bool) {
    let half = cos.len();
    for i in 0..half {
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        let (x1, x2) = (x[a], x[b]);
        x[a] = cos[i] * x1 - sin[i] * x2;
        x[b] = sin[i] * x1 + cos[i] * x2;
    }
}

/// How the input tensor lays out batch, sequence, head and head element.
#[derive(Clone, Copy)]
struct Layout {
    batch: usize,
    seq: usize,
    heads: usize,
    head_size: usize,
    /// `[B, H, S, D]` when true, `[B, S, H·D]` otherwise.
    heads_first: bool,
}

impl Layout {
    /// Offset of the first element of head `h` at batch `b`, position `s`.
    fn offset(&self, b: usize, s: usize, h: usize) -> usize {
        let row = if self.heads_first {
            (b * self.heads + h) * self.seq + s
        } else {
            (b * self.seq + s) * self.heads + h
        };
        row * self.head_size
    }
}

/// The layout of a 3-D `[B, S, W]` or 4-D `[B, H, S, D]` input; `heads` is needed for 3-D
/// inputs (0 when unknown, then `default_head_size` decides).
fn layout(call: &OpCall<'_>, x: &Tensor, heads: usize, default_head_size: usize) -> Result<Layout> {
    match *x.shape.as_slice() {
        [batch, seq, width] => {
            let (heads, head_size) = match (
                width.checked_div(heads),
                width.checked_div(default_head_size),
            ) {
                (Some(head_size), _) => (heads, head_size),
                (None, Some(heads)) => (heads, default_head_size),
                (None, None) => return Err(call.error("a 3-D input needs the num_heads attribute")),
            };
            if heads * head_size != width || head_size == 0 {
                return Err(call.error(format!(
                    "hidden size {width} is not a multiple of {heads} heads"
                )));
            }
            Ok(Layout {
                batch,
                seq,
                heads,
                head_size,
                heads_first: false,
            })
        }
        [batch, heads, seq, head_size] => Ok(Layout {
            batch,
            seq,
            heads,
            head_size,
            heads_first: true,
        }),
        _ => Err(call.error(format!("input must be 3-D or 4-D, got shape {:?}", x.shape))),
    }
}

/// Applies the rotation to every head of `x`; `row(b, s)` gives the cache row for a position.
fn apply(
    call: &OpCall<'_>,
    x: &Tensor,
    lay: Layout,
    rotary_dim: usize,
    interleaved: bool,
    caches: (&Tensor, &Tensor),
    row: impl Fn(usize, usize) -> Result<usize>,
) -> Result<Vec<Tensor>> {
    let (cos, sin) = (caches.0.floats()?, caches.1.floats()?);
    let half = rotary_dim / 2;
    if rotary_dim % 2 != 0 || rotary_dim > lay.head_size {
        return Err(call.error(format!(
            "rotary dimension {rotary_dim} must be even and at most the head size {}",
            lay.head_size
        )));
    }
    if caches.0.shape.last() != Some(&half) || caches.1.shape != caches.0.shape {
        return Err(call.error(format!(
            "cos/sin caches {:?}/{:?} must end in rotary_dim/2 = {half}",
            caches.0.shape, caches.1.shape
        )));
    }
    let rows = cos.len() / half.max(1);
    let mut out = x.floats()?.to_vec();
    // (No element: skip the loops, whose counts may be large.)
    for b in 0..if out.is_empty() { 0 } else { lay.batch } {
        for s in 0..lay.seq {
            let r = row(b, s)?;
            if r >= rows {
                return Err(call.error(format!(
                    "position {r} is outside the cos/sin caches ({rows} rows)"
                )));
            }
            let (c, sn) = (
                &cos[r * half..(r + 1) * half],
                &sin[r * half..(r + 1) * half],
            );
            for h in 0..lay.heads {
                let o = lay.offset(b, s, h);
                rotate(&mut out[o..o + rotary_dim], c, sn, interleaved);
            }
        }
    }
    Ok(vec![Tensor::float(x.dtype, x.shape.clone(), out)])
}

/// The `rotary_embedding_dim` attribute (0 when absent: the head size); a negative value is an
/// error naming the node and the attribute.
fn rotary_dim_attr(call: &OpCall<'_>) -> Result<usize> {
    let d = call.int("rotary_embedding_dim", 0);
    usize::try_from(d).map_err(|_| {
        call.error(format!(
            "attribute `rotary_embedding_dim` = {d} must not be negative"
        ))
    })
}

/// Reads a position id as a cache row (negative ids are errors).
fn position(call: &OpCall<'_>, id: i64) -> Result<usize> {
    usize::try_from(id).map_err(|_| call.error(format!("negative position id {id}")))
}

/// ONNX `RotaryEmbedding`: inputs X, cos_cache, sin_cache, position_ids?.
fn onnx_rotary(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let (cos, sin) = (call.input(1)?, call.input(2)?);
    let lay = layout(call, x, head_count(call, "num_heads")?.unwrap_or(0), 0)?;
    let rotary_dim = match rotary_dim_attr(call)? {
        0 => lay.head_size,
        d => d,
    };
    let interleaved = call.int("interleaved", 0) != 0;
    match call.optional(3) {
        Some(ids) => {
            let ids = ids.ints()?;
            if ids.len() != lay.batch * lay.seq {
                return Err(call.error("position_ids must have shape [batch, sequence]"));
            }
            apply(call, x, lay, rotary_dim, interleaved, (cos, sin), |b, s| {
                position(call, ids[b * lay.seq + s])
            })
        }
        None => {
            if cos.shape.len() != 3 || cos.shape[0] != lay.batch || cos.shape[1] != lay.seq {
                return Err(call.error(format!(
                    "without position_ids the caches must be [batch, sequence, rd/2], got {:?}",
                    cos.shape
                )));
            }
            apply(call, x, lay, rotary_dim, interleaved, (cos, sin), |b, s| {
                Ok(b * lay.seq + s)
            })
        }
    }
}

/// `com.microsoft` `RotaryEmbedding`: inputs input, position_ids, cos_cache, sin_cache.
fn contrib_rotary(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    if call.int("is_packed_batching", 0) != 0 {
        return Err(call.error("is_packed_batching = 1 is not supported"));
    }
    let x = call.input(0)?;
    let ids = call.input(1)?.ints()?;
    let (cos, sin) = (call.input(2)?, call.input(3)?);
    let heads = head_count(call, "num_heads")?.unwrap_or(0);
    let requested = rotary_dim_attr(call)?;
    if requested > 0 && heads == 0 {
        return Err(call.error("num_heads must be provided with rotary_embedding_dim"));
    }
    let cache_width = cos.shape.get(1).copied().unwrap_or(0);
    let lay = layout(call, x, heads, 2 * cache_width)?;
    let rotary_dim = if requested > 0 {
        requested
    } else {
        lay.head_size
    };
    let interleaved = call.int("interleaved", 0) != 0;
    match ids.len() {
        1 => apply(call, x, lay, rotary_dim, interleaved, (cos, sin), |_, s| {
            position(call, ids[0].saturating_add(s as i64))
        }),
        n if n == lay.batch * lay.seq => {
            apply(call, x, lay, rotary_dim, interleaved, (cos, sin), |b, s| {
                position(call, ids[b * lay.seq + s])
            })
        }
        _ => Err(call.error("position_ids must have shape [1] or [batch, sequence]")),
    }
}
