//! q, k and v cut out of one fused `Linear` (`[rows, in]`) at save time: the rows of each part
//! are gathered lazily from the checkpoint tensor, so the graph holds three plain projections
//! (what the packing and attention fusions expect) whatever the checkpoint's row order.

use crate::config::ArchConfig;
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};

/// Where q, k and v rows sit in a fused projection: the rows are `chunks` equal chunks, each
/// holding a `1/chunks` share of q, k and v one after the other in `order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FusedQkv {
    /// Total rows of q, k and v (`[q_size, kv_size, kv_size]`).
    pub widths: [usize; 3],
    /// Number of chunks the rows fall into (1: q, k, v as three blocks; the head count: each
    /// head's q, k and v rows together, GPT-NeoX).
    pub chunks: usize,
    /// The slot of q, k and v inside a chunk (`[0, 1, 2]`: q, k, v; CodeGen's `[0, 2, 1]`: q, v,
    /// k).
    pub order: [usize; 3],
}

impl FusedQkv {
    /// q rows, then k rows, then v rows (GPT-BigCode's multi-query `c_attn`).
    pub fn blocks(q: usize, kv: usize) -> FusedQkv {
        FusedQkv {
            widths: [q, kv, kv],
            chunks: 1,
            order: [0, 1, 2],
        }
    }

    /// `heads` chunks of `[q, k, v]` rows, one per head (GPT-NeoX's `query_key_value`).
    pub fn per_head(heads: usize, head_dim: usize) -> FusedQkv {
        FusedQkv {
            widths: [heads * head_dim; 3],
            chunks: heads,
            order: [0, 1, 2],
        }
    }

    /// The rows of part `part` (0 q, 1 k, 2 v) of checkpoint tensor `name` (a weight's rows
    /// or a bias's entries), in order: a strided gather, evaluated when the model is saved.
    pub fn rows(&self, name: &str, part: usize) -> TensorSource {
        let share = self.widths.map(|w| w / self.chunks);
        let chunk: usize = share.iter().sum();
        let before: usize = (0..3)
            .filter(|&p| self.order[p] < self.order[part])
            .map(|p| share[p])
            .sum();
        let slice = |c: usize| TensorSource::Slice {
            source: Box::new(TensorSource::Checkpoint(name.to_string())),
            axis: 0,
            start: c * chunk + before,
            len: share[part],
            total: self.chunks * chunk,
        };
        if self.chunks == 1 {
            return slice(0);
        }
        TensorSource::Concat {
            parts: (0..self.chunks).map(slice).collect(),
            axis: 0,
        }
    }
}

/// The q, k and v projections of `x` (`in_features` wide) as `{attn}.{q,k,v}_proj` (weights
/// `weight_t`, `[in, width]`, and with `bias` the biases), their rows cut out of the fused
/// `{fused}.weight` (`{fused}.bias`) laid out as `layout` says.
#[allow(clippy::too_many_arguments)]
pub fn fused_qkv(
    b: &mut GraphBuilder,
    x: &str,
    attn: &str,
    fused: &str,
    layout: &FusedQkv,
    in_features: usize,
    bias: bool,
    dtype: DType,
) -> [String; 3] {
    let mut part = |index: usize, name: &str| {
        let (prefix, width) = (format!("{attn}.{name}"), layout.widths[index]);
        let w = b.initializer(Initializer {
            name: format!("{prefix}.weight_t"),
            dtype,
            shape: vec![in_features, width],
            source: Some(TensorSource::Transpose(Box::new(
                layout.rows(&format!("{fused}.weight"), index),
            ))),
        });
        let y = b.op("MatMul", &[x, &w], vec![]);
        if !bias {
            return y;
        }
        let bias = b.initializer(Initializer {
            name: format!("{prefix}.bias"),
            dtype,
            shape: vec![width],
            source: Some(layout.rows(&format!("{fused}.bias"), index)),
        });
        b.op("Add", &[&y, &bias], vec![])
    };
    [part(0, "q_proj"), part(1, "k_proj"), part(2, "v_proj")]
}

/// q, k and v of attention module `attn` cut from its fused `{attn}.query_key_value` whose rows
/// are grouped by head (`[heads, 3, head_dim]`: GPT-NeoX, BLOOM, Persimmon), biased per
/// `cfg.qkv_bias`.
pub fn head_interleaved_qkv(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    attn: &str,
    dtype: DType,
) -> [String; 3] {
    let layout = FusedQkv::per_head(cfg.num_attention_heads, cfg.head_dim);
    let fused = format!("{attn}.query_key_value");
    fused_qkv(
        b,
        x,
        attn,
        &fused,
        &layout,
        cfg.hidden_size,
        cfg.qkv_bias,
        dtype,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(start, len, total)` of every slice of `source`.
    fn slices(source: &TensorSource) -> Vec<(usize, usize, usize)> {
        match source {
            TensorSource::Slice {
                start, len, total, ..
            } => vec![(*start, *len, *total)],
            TensorSource::Concat { parts, axis: 0 } => parts.iter().flat_map(slices).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn per_head_rows_gather_each_heads_block() {
        // [head 0: q 0..3, k 3..6, v 6..9; head 1: q 9..12, k 12..15, v 15..18]
        let rows = FusedQkv::per_head(2, 3);
        assert_eq!(slices(&rows.rows("w", 1)), [(3, 3, 18), (12, 3, 18)]);
    }

    #[test]
    fn blocks_and_reordered_chunks() {
        // q 0..8, k 8..10, v 10..12
        let mqa = FusedQkv::blocks(8, 2);
        assert_eq!(slices(&mqa.rows("w", 2)), [(10, 2, 12)]);
        // 2 chunks of [q 4, v 4, k 4]
        let qvk = FusedQkv {
            widths: [8; 3],
            chunks: 2,
            order: [0, 2, 1],
        };
        assert_eq!(slices(&qvk.rows("w", 1)), [(8, 4, 24), (20, 4, 24)]);
        assert_eq!(slices(&qvk.rows("w", 2)), [(4, 4, 24), (16, 4, 24)]);
    }
}
