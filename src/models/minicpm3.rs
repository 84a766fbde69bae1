//! MiniCPM3: a dense decoder attending with DeepSeek's multi-head latent attention ([`Mla`],
//! its KV cache per head; RoPE on the `qk_rope_head_dim` channels, halves rotated, not
//! interleaved pairs), with MiniCPM's scalings: token embeddings times `scale_emb`, every
//! residual branch times `scale_depth / √num_hidden_layers`, and the final hidden states
//! divided by `hidden_size / dim_model_base` before the LM head.

use serde_json::Value;

use super::components::{scalar, AttentionSpec, DecoderInputs, Mla, RopeTables};
use super::decoder::Family;
use super::deepseek::{mla_rope, read_mla_decoder, MlaDefaults};
use super::family::FamilySpec;
use crate::config::{ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "minicpm3",
    summary: "multi-head latent attention as DeepSeek's (RoPE halves not interleaved) in a dense \
              decoder, embeddings times `scale_emb`, residual branches times `scale_depth / \
              √layers`, hidden states divided by `hidden_size / dim_model_base` before the head",
    model_types: &[ModelType::generative("minicpm3", "decoder", read)],
};

/// transformers' MiniCPM3Config: `attention_bias` on the attention's projections, `mlp_bias`
/// on the MLP's, RoPE theta 1e4 on 32 channels, tied, `rms_norm_eps` 1e-5.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: true },
    rope: |raw, _, f| mla_rope(raw, 32, false, f),
    tie_word_embeddings: true,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// MiniCPM3's MLA defaults: q rank 768, latent 256, 64 + 32 q/k channels, v channels
/// `hidden_size / num_attention_heads`.
const MLA: MlaDefaults = (Some(768), 256, 64, 32, None);

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_mla_decoder(raw, t, f, &FIELDS, MLA, |mla| {
        let layers = raw.num_hidden_layers.unwrap_or(1).max(1) as f64;
        let embedding = f.number("scale_emb", raw.scale_emb, 12.0, Sign::Positive)?;
        let depth = optional_number(f, "scale_depth", raw.scale_depth.as_ref(), 1.4)?;
        let residual = match depth {
            Some(d) => (d / layers.sqrt()) as f32,
            None => 1.0,
        };
        let base = optional_number(f, "dim_model_base", raw.dim_model_base.as_ref(), 256.0)?;
        let logits = match base {
            Some(b) => (mla.hidden as f64 / b) as f32,
            None => 1.0,
        };
        Ok(MiniCpm3 {
            mla,
            embedding,
            residual,
            logits,
        })
    })
}

/// A positive number field: `default` when absent, `None` when `null` (transformers then
/// scales by 1).
fn optional_number(
    f: &Fields<'_>,
    field: &str,
    value: Option<&Value>,
    default: f64,
) -> Result<Option<f64>> {
    match value {
        None => Ok(Some(default)),
        Some(Value::Null) => Ok(None),
        Some(v) => {
            let x = f.json_number(field, Some(v))?.unwrap_or(default);
            f.number(field, Some(x), x, Sign::Positive)?;
            Ok(Some(x))
        }
    }
}

/// MiniCPM3's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniCpm3 {
    /// The attention's shape.
    pub mla: Mla,
    /// `scale_emb`: the token embeddings' multiplier.
    pub embedding: f32,
    /// `scale_depth / √num_hidden_layers`: the residual branches' multiplier.
    pub residual: f32,
    /// `hidden_size / dim_model_base`: the final hidden states' divisor.
    pub logits: f32,
}

/// `x · value` in `dtype`, or `x` when `value` is 1.
fn times(b: &mut GraphBuilder, x: String, value: f32, dtype: DType) -> String {
    if value == 1.0 {
        return x;
    }
    let c = scalar(b, value, dtype);
    b.op("Mul", &[&x, &c], vec![])
}

impl Family for MiniCpm3 {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        times(b, x, self.embedding, dtype)
    }

    fn attention_qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        _i: usize,
        rotary: &[RopeTables],
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> [String; 3] {
        self.mla.qkv(b, x, attn, &rotary[0], &cfg.rope, dtype)
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.mla.scale
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        self.mla.output(b, y, attn, dtype)
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        times(b, y, self.residual, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let x = match self.logits {
            1.0 => x.to_string(),
            s => {
                let c = scalar(b, s, dtype);
                b.op("Div", &[x, &c], vec![])
            }
        };
        b.op_into("MatMul", &[&x, head], vec![], "logits");
    }
}

#[cfg(test)]
mod tests {
    use super::MiniCpm3;

    #[test]
    fn scalings_follow_transformers_defaults_and_nulls() {
        let base = r#""model_type": "minicpm3", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "kv_lora_rank": 32, "q_lora_rank": 24"#;
        let c = crate::models::parse_fields(base, "").unwrap();
        let k = c.knobs::<MiniCpm3>().unwrap();
        assert_eq!((k.embedding, k.residual, k.logits), (12.0, 0.7, 0.25));
        assert_eq!(
            (k.mla.v_head, c.head_dim, c.rope.interleaved),
            (16, 24, false)
        );
        assert!(c.tie_word_embeddings);
        let nulls = r#", "scale_depth": null, "dim_model_base": null, "v_head_dim": null"#;
        let c = crate::models::parse_fields(base, nulls).unwrap();
        let k = c.knobs::<MiniCpm3>().unwrap();
        assert_eq!((k.residual, k.logits), (1.0, 1.0));
        let err = crate::models::parse_fields(base, r#", "scale_emb": 0"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("scale_emb"), "{err}");
    }
}
