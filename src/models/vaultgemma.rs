//! VaultGemma (Google, transformers' VaultGemmaForCausalLM): Gemma 2 — scaled embeddings,
//! `1 + w` RMSNorms, GELU-gated MLP, `query_pre_attn_scalar`, attention and final-logit
//! soft-capping, sliding windows on every other layer — with pre-norm layers only: each layer
//! keeps Gemma 2's `input_layernorm` and `pre_feedforward_layernorm` and has no norm on a
//! block's output.

use super::decoder::LayerNorms;
use super::family::FamilySpec;
use super::gemma::{self, GemmaConfig, GemmaVersion};
use crate::config::{ArchConfig, Fields, HfConfig, Knobs, ModelType};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `vaultgemma` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "vaultgemma",
    summary: "Gemma 2 with pre-norm layers only (`input_layernorm`, `pre_feedforward_layernorm`)",
    model_types: &[ModelType::generative("vaultgemma", "decoder", read)],
};

/// VaultGemma's layer norms: Gemma 2's norms on the block inputs, none on their outputs.
const NORMS: LayerNorms = LayerNorms {
    pre_attention: Some("input_layernorm"),
    post_attention: None,
    pre_mlp: Some("pre_feedforward_layernorm"),
    post_mlp: None,
};

/// transformers' VaultGemmaConfig is Gemma2Config's (same fields and defaults).
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut cfg = gemma::read(raw, t, f, GemmaVersion::Gemma2, &gemma::GEMMA2)?;
    if let Some(knobs) = cfg.knobs::<GemmaConfig>() {
        cfg.family = Knobs::new(GemmaConfig {
            layer_norms: NORMS,
            ..knobs.clone()
        });
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gemma2_defaults_with_pre_norms() {
        let cfg = crate::models::tiny_config("vaultgemma", r#", "head_dim": 16"#).unwrap();
        let knobs = cfg.knobs::<GemmaConfig>().unwrap();
        assert_eq!(knobs.layer_norms, NORMS);
        assert_eq!(
            (knobs.attn_softcap, knobs.final_softcap),
            (Some(50.0), Some(30.0))
        );
        assert!(cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [None, None]); // 4096 ≥ the 128 positions
    }
}
