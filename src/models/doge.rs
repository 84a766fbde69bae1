//! Doge (SmallDoge): the pre-norm RMSNorm decoder with per-head q/k RMSNorm, a learned
//! vector that scales the residual stream before each block's output joins it
//! (`input_residual ⊙ x + attn`, `post_attention_residual ⊙ x + mlp`), and dynamic mask
//! attention: every key adds to its scores a per-kv-head bias computed from its value,
//!
//! ```text
//! dt[b, h, j] = exp(A[h] · softplus(dt_proj(v[b, j, :])[h]))        (v of every key, cache included)
//! bias[b, hq, i, j] = causal ∧ mask ? dt[b, hq / groups, j] : lowest
//! ```
//!
//! and where the keys outnumber `keep_window_size` only each query's `keep_window_size`
//! largest entries stay (the others become `lowest`). The bias is the opset-24 `Attention`'s
//! float mask, so the GroupQueryAttention fusion declines it; computing it reads the past
//! values, so the static cache refuses it. The cross-domain mixture of experts (`is_moe`) is
//! refused.

use super::components::{causal_mask, linear, AttentionSpec, DecoderInputs};
use super::decoder::{Block, Family, QkNorm};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig};
use crate::ir::{Attr, DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::MAX_POSITIONS;
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "doge",
    summary: "dynamic mask attention (a per-key bias from its value, top-`keep_window_size` \
              keys per query), per-head q/k RMSNorm, learned residual scales",
    model_types: &[ModelType::generative("doge", "decoder", read)],
};

/// transformers' DogeConfig: untied, `rms_norm_eps` 1e-6, RoPE theta 1e4, `attention_bias` and
/// `mlp_bias` honoured; windows only with `sliding_window`.
const FIELDS: DecoderFields = DecoderFields::LLAMA;

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    if raw.is_moe == Some(true) {
        return Err(f.err(
            "is_moe",
            "true: Doge's cross-domain mixture of experts is not built (dense Doge only)",
        ));
    }
    let keep_window = f.optional_count(
        "keep_window_size",
        raw.keep_window_size,
        2048,
        MAX_POSITIONS,
    )?;
    read_decoder(raw, t, f, &FIELDS, |_| Ok(Doge { keep_window }))
}

/// Doge's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doge {
    /// `keep_window_size`: the keys each query keeps (by largest bias) once they outnumber it.
    pub keep_window: usize,
}

impl Family for Doge {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        [q, k, v]: [&str; 3],
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        let bias = self.dynamic_mask(b, cfg, io, v, spec, attn, dtype);
        let spec = AttentionSpec {
            mask: &bias,
            ..spec.clone()
        };
        super::components::attention(b, q, k, v, &spec)
    }

    fn residual_add(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        y: &str,
        (layer, _i): (&str, usize),
        block: Block,
        dtype: DType,
    ) -> String {
        let name = match block {
            Block::Attention => format!("{layer}.input_residual"),
            Block::Mlp => format!("{layer}.post_attention_residual"),
        };
        let scale = b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![cfg.hidden_size],
            source: Some(TensorSource::Checkpoint(name)),
        });
        let scaled = b.op("Mul", &[&scale, x], vec![]);
        b.op("Add", &[&scaled, y], vec![])
    }
}

impl Doge {
    /// The float mask `[B, Hq, S, T]` of [the module docs](self) for attention module `attn`,
    /// from the current values `v` (3-D) and the past values of `spec`.
    #[allow(clippy::too_many_arguments)]
    fn dynamic_mask(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        v: &str,
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (hq, hkv, d) = (spec.q_heads, spec.kv_heads, cfg.head_dim);
        // Every key's value, [B, T, Hkv·D], as transformers reads it after the cache update.
        let split = b.const_i64(&[0, 0, hkv as i64, d as i64]);
        let heads = b.op("Reshape", &[v, &split], vec![]);
        let perm = ("perm", Attr::Ints(vec![0, 2, 1, 3]));
        let heads = b.op("Transpose", &[&heads], vec![perm.clone()]);
        let all = b.op(
            "Concat",
            &[spec.past.1, &heads],
            vec![("axis", Attr::Int(2))],
        );
        let all = b.op("Transpose", &[&all], vec![perm]);
        let merged = b.const_i64(&[0, 0, (hkv * d) as i64]);
        let all = b.op("Reshape", &[&all, &merged], vec![]);
        let dt_proj = format!("{attn}.dt_proj");
        let dt = linear(b, &all, &dt_proj, hkv * d, hkv, cfg.qkv_bias, dtype);
        let a_name = format!("{attn}.A");
        let a = b.initializer(Initializer {
            name: a_name.clone(),
            dtype,
            shape: vec![hkv],
            source: Some(TensorSource::Checkpoint(a_name)),
        });
        let dt = b.op("Softplus", &[&dt], vec![]);
        let dt = b.op("Mul", &[&a, &dt], vec![]);
        let dt = b.op("Exp", &[&dt], vec![]);
        // [B, T, Hkv] → [B, Hkv, 1, T] → one row per query head (kv head h / groups).
        let dt = b.op(
            "Transpose",
            &[&dt],
            vec![("perm", Attr::Ints(vec![0, 2, 1]))],
        );
        let axes = b.const_i64(&[2]);
        let dt = b.op("Unsqueeze", &[&dt, &axes], vec![]);
        let groups = hq / hkv;
        let kv_of_q: Vec<i64> = (0..hq).map(|h| (h / groups) as i64).collect();
        let kv_of_q = b.const_i64(&kv_of_q);
        let dt = b.op("Gather", &[&dt, &kv_of_q], vec![("axis", Attr::Int(1))]);
        let visible = causal_mask(b, spec.mask, io);
        let lowest = super::components::scalar(b, super::components::alibi::lowest(dtype), dtype);
        let bias = b.op("Where", &[&visible, &dt, &lowest], vec![]);
        if self.keep_window >= cfg.max_position_embeddings {
            return bias;
        }
        // Each row's keep_window-th largest entry (all of them while T ≤ keep_window) is the
        // threshold below which keys become `lowest`.
        let keys = b.op(
            "Shape",
            &[&bias],
            vec![("start", Attr::Int(3)), ("end", Attr::Int(4))],
        );
        let keep = b.const_i64(&[self.keep_window as i64]);
        let k = b.op("Min", &[&keys, &keep], vec![]);
        let (top, indices) = (b.fresh_name("TopK"), b.fresh_name("TopK_indices"));
        b.node(
            "",
            "TopK",
            &[&bias, &k],
            vec![("axis", Attr::Int(-1)), ("largest", Attr::Int(1))],
            vec![top.clone(), indices],
        );
        let (start, end) = (b.const_i64(&[-1]), b.const_i64(&[i64::MAX]));
        let axis = b.const_i64(&[3]);
        let threshold = b.op("Slice", &[&top, &start, &end, &axis], vec![]);
        let kept = b.op("GreaterOrEqual", &[&bias, &threshold], vec![]);
        b.op("Where", &[&kept, &bias, &lowest], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::Doge;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "doge", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 4096"#,
            extra,
        )
    }

    #[test]
    fn keep_window_defaults_and_moe_is_refused() {
        let cfg = parse("").unwrap();
        assert_eq!(cfg.knobs::<Doge>().unwrap().keep_window, 2048);
        let cfg = parse(r#", "keep_window_size": 16"#).unwrap();
        assert_eq!(cfg.knobs::<Doge>().unwrap().keep_window, 16);
        let err = parse(r#", "is_moe": true"#).unwrap_err().to_string();
        assert!(err.contains("is_moe"), "{err}");
        assert!(parse(r#", "keep_window_size": 0"#).is_err());
    }
}
