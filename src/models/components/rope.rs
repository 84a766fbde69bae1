//! Rotary position embedding: cos/sin caches gathered by position, and the opset-23
//! `RotaryEmbedding` op on 3-D `[B, S, heads·D]` inputs.

use super::dynamic_rope::dynamic_rope_tables;
use super::scalar;
use crate::config::{Rope, RopeScaling};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorData, TensorSource};

/// The per-token cos/sin values, `[B, S, rotary_dim/2]` each.
#[derive(Debug, Clone)]
pub struct RopeTables {
    /// Gathered cosines.
    pub cos: String,
    /// Gathered sines.
    pub sin: String,
}

/// Declares `model.rotary_emb.{cos,sin}_cache` (`[positions, rotary_dim/2]`, computed in f32
/// and stored in `dtype`) and gathers them by `position_ids`; the gathered values are scaled
/// by the RoPE's cos/sin factor when it is not 1 (YaRN). Dynamic NTK RoPE has no stored
/// tables: its cos/sin are computed in the graph from each pass's positions and length
/// ([`super::dynamic_rope::dynamic_rope_tables`]), and `positions` does not bound them.
pub fn rope_tables(
    b: &mut GraphBuilder,
    rope: &Rope,
    positions: usize,
    position_ids: &str,
    dtype: DType,
) -> RopeTables {
    named_rope_tables(b, "model.rotary_emb", rope, positions, position_ids, dtype)
}

/// [`rope_tables`] under another prefix: `{prefix}.{cos,sin}_cache` (models with a second
/// RoPE, e.g. Gemma 3's sliding-window layers).
pub fn named_rope_tables(
    b: &mut GraphBuilder,
    prefix: &str,
    rope: &Rope,
    positions: usize,
    position_ids: &str,
    dtype: DType,
) -> RopeTables {
    if let RopeScaling::Dynamic { factor, original } = rope.scaling {
        return dynamic_rope_tables(b, rope, factor, original, position_ids, dtype);
    }
    let inv_freq = rope.inv_freq();
    let half = inv_freq.len();
    let mut cache = |name: &str, sine: bool| {
        let init = b.initializer(Initializer {
            name: name.to_string(),
            dtype,
            shape: vec![positions, half],
            source: Some(TensorSource::RotaryTable {
                inv_freq: inv_freq.clone(),
                positions,
                sine,
            }),
        });
        b.op(
            "Gather",
            &[&init, position_ids],
            vec![("axis", Attr::Int(0))],
        )
    };
    let tables = RopeTables {
        cos: cache(&format!("{prefix}.cos_cache"), false),
        sin: cache(&format!("{prefix}.sin_cache"), true),
    };
    scaled(b, tables, rope.cos_sin_scale(), dtype)
}

/// Qwen3.5's interleaved multimodal RoPE: `position_ids` `[3, B, S]` holds each token's
/// temporal, height and width positions, and frequency pair `j` of the `rotary_dim/2` turns by
/// the height position where `j mod 3 = 1` and `j < 3·sections[1]`, by the width position
/// where `j mod 3 = 2` and `j < 3·sections[2]`, else by the temporal one. The tables of
/// [`named_rope_tables`] are gathered for all three rows (`[3, B, S, rotary_dim/2]`) and each
/// pair's row is picked by `Where` on constant masks: exact, whatever the rows hold (text
/// tokens give three equal rows, and plain RoPE).
pub fn interleaved_mrope_tables(
    b: &mut GraphBuilder,
    rope: &Rope,
    positions: usize,
    position_ids: &str,
    sections: [usize; 3],
    dtype: DType,
) -> RopeTables {
    let rows = named_rope_tables(b, "model.rotary_emb", rope, positions, position_ids, dtype);
    let half = rope.inv_freq().len();
    let mask = |b: &mut GraphBuilder, row: usize| {
        let bytes = (0..half)
            .map(|j| u8::from(j % 3 == row && j < 3 * sections[row]))
            .collect();
        b.constant(TensorData {
            dtype: DType::Bool,
            shape: vec![half],
            bytes,
        })
    };
    let (height, width) = (mask(b, 1), mask(b, 2));
    let pick = |b: &mut GraphBuilder, table: &str| {
        let row = |b: &mut GraphBuilder, r: i64| {
            let r = b.scalar_i64(r);
            b.op("Gather", &[table, &r], vec![("axis", Attr::Int(0))])
        };
        let (t, h, w) = (row(b, 0), row(b, 1), row(b, 2));
        let tw = b.op("Where", &[&width, &w, &t], vec![]);
        b.op("Where", &[&height, &h, &tw], vec![])
    };
    RopeTables {
        cos: pick(b, &rows.cos),
        sin: pick(b, &rows.sin),
    }
}

/// cos/sin times `factor` (no op when it is 1), as transformers scales them after the table
/// lookup.
pub fn scaled(b: &mut GraphBuilder, t: RopeTables, factor: f32, dtype: DType) -> RopeTables {
    if factor == 1.0 {
        return t;
    }
    let factor = scalar(b, factor, dtype);
    RopeTables {
        cos: b.op("Mul", &[&t.cos, &factor], vec![]),
        sin: b.op("Mul", &[&t.sin, &factor], vec![]),
    }
}

/// `RotaryEmbedding(x, cos, sin; num_heads, rotary_embedding_dim, interleaved)`.
pub fn rotary_embedding(
    b: &mut GraphBuilder,
    x: &str,
    tables: &RopeTables,
    rope: &Rope,
    num_heads: usize,
    head_dim: usize,
) -> String {
    let partial = if rope.rotary_dim == head_dim {
        0
    } else {
        rope.rotary_dim as i64
    };
    b.op(
        "RotaryEmbedding",
        &[x, &tables.cos, &tables.sin],
        vec![
            ("interleaved", Attr::Int(rope.interleaved as i64)),
            ("num_heads", Attr::Int(num_heads as i64)),
            ("rotary_embedding_dim", Attr::Int(partial)),
        ],
    )
}
