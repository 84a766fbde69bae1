//! GPT-BigCode (SantaCoder, StarCoder 1): GPT-2's layout (learned positions, pre-norm
//! LayerNorm blocks, GELU MLP, final LayerNorm, tied head) with `nn.Linear` weights and, by
//! default, multi-query attention: one key/value head shared by every query head.
//!
//! The fused `c_attn` holds the q rows, then the one head's k and v rows (`multi_query`), or
//! each head's q, k and v rows together (`multi_query` false, GPT-NeoX's layout); the three
//! projections are cut out of it when the model is saved.

use super::components::{
    fused_qkv, learned_positions, linear, ungated_mlp, Activation, DecoderInputs, FusedQkv, Norm,
};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use super::gpt2::{self, read_gpt2_layout, Gpt2Config};
use crate::config::{ArchConfig, CheckpointRenaming, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `gpt_bigcode` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt_bigcode",
    summary: "GPT-2's layout with `nn.Linear` weights and multi-query attention (one key/value \
              head cut out of the fused `c_attn`)",
    model_types: &[ModelType::generative("gpt_bigcode", "decoder", read)],
};

/// GPT-BigCode's knobs: GPT-2's, and whether scores are scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptBigCode {
    /// The LayerNorm epsilon and the MLP's GELU.
    pub gpt2: Gpt2Config,
    /// Scores scaled by `head_dim^-0.5` (`scale_attn_weights`; false: unscaled).
    pub scale_attn_weights: bool,
    /// One key/value head (`multi_query`).
    pub multi_query: bool,
}

/// Reads a GPT-BigCode config as transformers' GPTBigCodeConfig does: GPT-2's fields,
/// `activation_function` `gelu_pytorch_tanh`, `multi_query` and `scale_attn_weights` true.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    if raw.add_cross_attention == Some(true) {
        return Err(f.err(
            "add_cross_attention",
            "is not supported (expected a decoder without cross-attention)",
        ));
    }
    let multi_query = raw.multi_query.unwrap_or(true);
    let kv_heads = |heads| if multi_query { 1 } else { heads };
    let (mut cfg, gpt2) = read_gpt2_layout(raw, model_type, f, "gelu_pytorch_tanh", kv_heads)?;
    cfg.family = Knobs::new(GptBigCode {
        gpt2,
        scale_attn_weights: raw.scale_attn_weights.unwrap_or(true),
        multi_query,
    });
    Ok(cfg)
}

/// GPT-2's hooks with linear projections and the fused `c_attn` cut by its layout.
impl Family for GptBigCode {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        self.gpt2.names()
    }

    fn norm(&self, cfg: &ArchConfig) -> Norm {
        self.gpt2.norm(cfg)
    }

    fn layer_norms(&self) -> LayerNorms {
        self.gpt2.layer_norms()
    }

    /// Token embeddings plus the `transformer.wpe` rows of `position_ids`.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let table = [cfg.max_position_embeddings, cfg.hidden_size];
        let positions = learned_positions(b, "transformer.wpe", table, &io.position_ids, 0, dtype);
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    /// q, k and v cut out of the fused `c_attn`.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let layout = if self.multi_query {
            FusedQkv::blocks(cfg.q_size(), cfg.kv_size())
        } else {
            FusedQkv::per_head(cfg.num_attention_heads, cfg.head_dim)
        };
        let (fused, h) = (format!("{attn}.c_attn"), cfg.hidden_size);
        fused_qkv(b, x, attn, &fused, &layout, h, true, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        if self.scale_attn_weights {
            (cfg.head_dim as f32).powf(-0.5)
        } else {
            1.0
        }
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let h = cfg.hidden_size;
        linear(b, y, &format!("{attn}.c_proj"), h, h, true, dtype)
    }

    /// `c_proj(gelu(c_fc(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        ungated_mlp(
            b,
            cfg,
            x,
            (mlp, "c_fc", "c_proj"),
            Activation::Gelu(self.gpt2.gelu),
            dtype,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "gpt_bigcode", "n_embd": 64, "n_head": 4, "n_layer": 2,
            "n_positions": 128, "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!((cfg.num_key_value_heads, cfg.intermediate_size), (1, 256));
        let knobs = cfg.knobs::<GptBigCode>().unwrap();
        assert!(knobs.multi_query && knobs.scale_attn_weights);
        assert_eq!(knobs.gpt2.gelu, crate::config::Gelu::Tanh);
        let mha = parse(r#", "multi_query": false, "scale_attn_weights": false"#).unwrap();
        assert_eq!(mha.num_key_value_heads, 4);
        let knobs = mha.knobs::<GptBigCode>().unwrap();
        assert!(!knobs.multi_query && !knobs.scale_attn_weights);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (r#", "add_cross_attention": true"#, "add_cross_attention"),
            (r#", "activation_function": "relu""#, "activation_function"),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
        // n_head does not divide the width
        let heads = r#""model_type": "gpt_bigcode", "n_embd": 64, "n_head": 5"#;
        let msg = crate::models::parse_fields(heads, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `n_head`"), "{msg}");
    }
}
