//! Youtu-LLM: a Llama-style dense decoder (SwiGLU MLP, no MLP bias, tied embeddings by
//! default) attending with DeepSeek-V3's multi-head latent attention ([`Mla`], its KV cache per
//! head; RoPE on the `qk_rope_head_dim` channels, pairs interleaved with `rope_interleave`,
//! its default).

use super::components::{AttentionSpec, Mla, RopeTables};
use super::decoder::Family;
use super::deepseek::{mla_rope, read_mla_decoder, MlaDefaults};
use super::family::FamilySpec;
use crate::config::{ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "youtu",
    summary: "multi-head latent attention as DeepSeek-V3's (RoPE pairs interleaved with \
              `rope_interleave`) in a dense Llama-style decoder, tied embeddings by default",
    model_types: &[ModelType::generative("youtu", "decoder", read)],
};

/// transformers' YoutuConfig: `attention_bias` on the attention's projections, no MLP bias,
/// RoPE theta 1e4 on 64 channels, interleaved by default, tied, `rms_norm_eps` 1e-6.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, _, f| mla_rope(raw, 64, raw.rope_interleave.unwrap_or(true), f),
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

/// Youtu's MLA defaults (DeepSeek-V3's): q rank 1536, latent 512, 128 + 64 q/k channels, 128
/// v channels.
const MLA: MlaDefaults = (Some(1536), 512, 128, 64, Some(128));

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_mla_decoder(raw, t, f, &FIELDS, MLA, |mla| Ok(Youtu { mla }))
}

/// Youtu's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Youtu {
    /// The attention's shape.
    pub mla: Mla,
}

impl Family for Youtu {
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
}

#[cfg(test)]
mod tests {
    use super::Youtu;

    #[test]
    fn defaults_follow_transformers() {
        let base = r#""model_type": "youtu", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "kv_lora_rank": 32, "q_lora_rank": 24, "v_head_dim": 16"#;
        let c = crate::models::parse_fields(base, "").unwrap();
        let k = c.knobs::<Youtu>().unwrap();
        assert_eq!((k.mla.v_head, c.head_dim, c.rope.rotary_dim), (16, 24, 8));
        assert!(c.rope.interleaved && c.tie_word_embeddings);
        assert_eq!(k.mla.scale, (24f64.powf(-0.5)) as f32);
        let c = crate::models::parse_fields(base, r#", "rope_interleave": false"#).unwrap();
        assert!(!c.rope.interleaved);
        let err = crate::models::parse_fields(base, r#", "num_key_value_heads": 2"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("num_key_value_heads"), "{err}");
    }
}
