//! Dynamic NTK RoPE (`rope_type` `dynamic`), computed in the graph from each forward pass's
//! length, as transformers computes it.
//!
//! transformers takes a pass's length as `L = max(position_ids) + 1`; when `L` exceeds the
//! original context `n` (its `max_position_embeddings`) it raises the base to
//! `theta · (factor·L/n − (factor − 1))^(d/(d−2))` (`d` the rotary width) for every position of
//! that pass, and keeps `theta` otherwise. Over a KV cache, each step therefore rotates its new
//! queries and keys with the base of that step's length, while cached keys keep the rotation
//! they were given. The graph reproduces both: from the pass's own `position_ids` it computes
//! the inverse frequencies and the cos/sin of those positions, with the same f32 operations,
//! so no stored table bounds the length.
//!
//! Only the pass's `S` positions are rotated (`S · d/2` cos and sin per pass), not a table of
//! `L` rows: a table is what GroupQueryAttention's fused rotation would read, and recomputing
//! `L` rows on every decode step costs far more (about 6 ms at `L` = 8192, `d/2` = 64, one
//! onnxruntime CPU thread) than rotating q and k in front of it. The rotations stay separate
//! `RotaryEmbedding` ops, and the optimizer fuses attention alone (`attention-to-gqa`).
//!
//! transformers' module also keeps the largest length seen since the last pass shorter than
//! `n`, and uses it for a later pass of a length between `n` and that maximum; the graph is
//! stateless (it computes what a freshly loaded model computes). The two agree on any single
//! pass and on generation, whose lengths only grow.

use super::{scalar, RopeTables};
use crate::config::Rope;
use crate::ir::{Attr, DType, GraphBuilder, TensorData};

/// The cos/sin (`[B, S, rotary_dim/2]`, in `dtype`) of dynamic NTK RoPE with `factor` over the
/// original context `original`, for `position_ids`: computed in f32 from the positions and the
/// pass length `L = max(position_ids) + 1`.
pub fn dynamic_rope_tables(
    b: &mut GraphBuilder,
    rope: &Rope,
    factor: f32,
    original: usize,
    position_ids: &str,
    dtype: DType,
) -> RopeTables {
    let dim = rope.rotary_dim;
    let f32_code = Attr::Int(DType::F32.onnx_code() as i64);
    let max_pos = b.op(
        "ReduceMax",
        &[position_ids],
        vec![("keepdims", Attr::Int(0))],
    );
    let one = b.scalar_i64(1);
    let length = b.op("Add", &[&max_pos, &one], vec![]);
    // The base: transformers clamps the length to at least the original context, where the
    // ratio below is exactly 1 and the base `theta`.
    let original_i64 = b.scalar_i64(original as i64);
    let clamped = b.op("Max", &[&length, &original_i64], vec![]);
    let clamped = b.op("Cast", &[&clamped], vec![("to", f32_code.clone())]);
    let factor_c = scalar(b, factor, DType::F32);
    let original_c = scalar(b, original as f32, DType::F32);
    let shift = scalar(b, factor - 1.0, DType::F32);
    let exponent = scalar(b, (dim as f64 / (dim as f64 - 2.0)) as f32, DType::F32);
    let theta = scalar(b, rope.theta, DType::F32);
    let ratio = b.op("Mul", &[&factor_c, &clamped], vec![]);
    let ratio = b.op("Div", &[&ratio, &original_c], vec![]);
    let ratio = b.op("Sub", &[&ratio, &shift], vec![]);
    let stretch = b.op("Pow", &[&ratio, &exponent], vec![]);
    let base = b.op("Mul", &[&theta, &stretch], vec![]);
    // inv_freq_j = 1 / base^(2j/d), the exponents rounded to f32 as transformers' are.
    let exponents: Vec<f32> = (0..dim / 2).map(|j| (2 * j) as f32 / dim as f32).collect();
    let exponents = b.constant(TensorData::from_f32(vec![dim / 2], &exponents));
    let powers = b.op("Pow", &[&base, &exponents], vec![]);
    let inv_freq = b.op("Reciprocal", &[&powers], vec![]);
    // The angles of the pass's own positions, [B, S, 1] · [d/2], as transformers multiplies
    // them (one f32 product each).
    let positions = b.op("Cast", &[position_ids], vec![("to", f32_code)]);
    let axis = b.const_i64(&[2]);
    let positions = b.op("Unsqueeze", &[&positions, &axis], vec![]);
    let angles = b.op("Mul", &[&positions, &inv_freq], vec![]);
    let mut table = |op: &str| {
        let t = b.op(op, &[&angles], vec![]);
        if dtype == DType::F32 {
            t
        } else {
            let to = Attr::Int(dtype.onnx_code() as i64);
            b.op("Cast", &[&t], vec![("to", to)])
        }
    };
    RopeTables {
        cos: table("Cos"),
        sin: table("Sin"),
    }
}
