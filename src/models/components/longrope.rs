//! LongRoPE tables with transformers' per-pass switch: every position of a forward pass uses
//! the long factors once `max(position_ids) + 1 > original_max_position_embeddings`, the short
//! factors otherwise; cos/sin are scaled by the attention factor.
//!
//! A pass is therefore exact whatever its length. A KV-cache decode that crosses the boundary
//! cannot be: transformers then recomputes the whole sequence with the long factors (its
//! `generate` drops the cache), while the cache holds keys and values computed under the short
//! factors; the new tokens use the long factors.

use super::{scaled, RopeTables};
use crate::config::longrope::LongRope;
use crate::config::Rope;
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};

/// Builds the LongRoPE cos/sin (`[B, S, rotary_dim/2]`) for `position_ids`, from tables of
/// `positions` rows computed at save time.
pub fn longrope_tables(
    b: &mut GraphBuilder,
    rope: &Rope,
    l: &LongRope,
    positions: usize,
    position_ids: &str,
    dtype: DType,
) -> RopeTables {
    let short = l.inv_freq(rope.theta, rope.rotary_dim, false);
    let long = l.inv_freq(rope.theta, rope.rotary_dim, true);
    let orig = l.original_max_position_embeddings;
    let mut table = |name: &str, inv_freq: &[f32], sine: bool| {
        b.initializer(Initializer {
            name: format!("model.rotary_emb.{name}"),
            dtype,
            shape: vec![positions, inv_freq.len()],
            source: Some(TensorSource::RotaryTable {
                inv_freq: inv_freq.to_vec(),
                positions,
                sine,
            }),
        })
    };
    let short_cos = table("cos_cache", &short, false);
    let short_sin = table("sin_cache", &short, true);
    if positions <= orig {
        let tables = RopeTables {
            cos: gather(b, &short_cos, position_ids),
            sin: gather(b, &short_sin, position_ids),
        };
        return scaled(b, tables, l.attention_factor, dtype);
    }
    let long_cos = table("long_cos_cache", &long, false);
    let long_sin = table("long_sin_cache", &long, true);
    // long: max(position_ids) + 1 > orig, for the whole pass.
    let max_pos = b.op(
        "ReduceMax",
        &[position_ids],
        vec![("keepdims", Attr::Int(0))],
    );
    let last_short = b.scalar_i64(orig as i64 - 1);
    let long_now = b.op("Greater", &[&max_pos, &last_short], vec![]);
    let mut pick = |long: &str, short: &str| {
        let l = gather(b, long, position_ids);
        let s = gather(b, short, position_ids);
        b.op("Where", &[&long_now, &l, &s], vec![])
    };
    let cos = pick(&long_cos, &short_cos);
    let sin = pick(&long_sin, &short_sin);
    scaled(b, RopeTables { cos, sin }, l.attention_factor, dtype)
}

fn gather(b: &mut GraphBuilder, table: &str, positions: &str) -> String {
    b.op("Gather", &[table, positions], vec![("axis", Attr::Int(0))])
}
