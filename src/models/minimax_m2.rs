//! MiniMax-M2: the Llama decoder with an RMSNorm over the whole q (k) projection (`q_norm`,
//! `k_norm`, before RoPE), RoPE on the first `partial_rotary_factor` of each head (released
//! checkpoints spell it `rotary_dim`), and in every layer a sparse mixture of SwiGLU experts
//! (`block_sparse_moe`: router `gate`, experts `experts.{e}.w1/w3/w2`) routed by sigmoid scores
//! with a score-correction bias ([`Router::Corrected`]: the top `num_experts_per_tok` of the
//! scores plus `e_score_correction_bias`, weighted by their scores divided by their sum).

use super::components::{ExpertWeights, MoeSpec, Router, Scores};
use super::decoder::{Family, QkNorm};
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig,
    ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;
use serde_json::Value;

/// The family's registry entry. onnxruntime-genai 0.18 has no `minimax_m2` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "minimax_m2",
    summary: "full-width q/k RMSNorm, partial RoPE (`rotary_dim`), sparse SwiGLU experts in \
              every layer routed by sigmoid scores with a score-correction bias for the pick, \
              renormalised top-k",
    model_types: &[ModelType::generative("minimax_m2", "decoder", read)],
};

/// transformers' MiniMaxM2Config: no biases, head_dim 128, RoPE theta 5e6 (on the
/// `partial_rotary_factor` of each head, or `rotary_dim` of it), `rms_norm_eps` 1e-6, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::None,
    rope: |raw, head_dim, f| {
        let from_dim = raw.rotary_dim.flatten().map(|d| d as f64 / head_dim as f64);
        let raw = HfConfig {
            partial_rotary_factor: raw.partial_rotary_factor.or(from_dim),
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 5_000_000.0, f)
    },
    ..DecoderFields::LLAMA
};

/// Reads a MiniMax-M2 config as transformers does (defaults: `hidden_size` 3072,
/// `intermediate_size` 1536 per expert, 62 layers, 48 heads, 8 key/value heads, `vocab_size`
/// 200064, 196608 positions, 256 experts, 8 per token, bos 200034, eos 200020); errors name the
/// field and what was expected.
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // MiniMaxM2Config has no sliding window, layer types or biases: transformers ignores them.
    let raw = HfConfig {
        vocab_size: raw.vocab_size.or(Some(200_064)),
        hidden_size: raw.hidden_size.or(Some(3072)),
        intermediate_size: raw.intermediate_size.or(Some(1536)),
        num_hidden_layers: raw.num_hidden_layers.or(Some(62)),
        num_attention_heads: raw.num_attention_heads.or(Some(48)),
        num_key_value_heads: raw.num_key_value_heads.or(Some(8)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(196_608)),
        bos_token_id: raw.bos_token_id.clone().or(Some(Value::from(200_034))),
        eos_token_id: raw.eos_token_id.clone().or(Some(Value::from(200_020))),
        attention_bias: None,
        mlp_bias: None,
        ..without_windows(raw)
    };
    read_decoder(&raw, t, f, &FIELDS, |_| {
        let (experts, top_k) = read_routing(&raw, f, (256, 8))?;
        Ok(MiniMaxM2 { experts, top_k })
    })
}

/// MiniMax-M2's knobs: how many experts each layer has and how many a token uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MiniMaxM2 {
    /// `num_local_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
}

/// MiniMax-M2's hooks: the full-width q/k norms and the score-corrected MoE blocks.
impl Family for MiniMaxM2 {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::FullWidth
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let router = Router::Corrected {
            scores: Scores::Sigmoid,
            bias: "e_score_correction_bias",
            min_sum: None,
        };
        let routing = (self.experts, self.top_k);
        let weights = ExpertWeights::MIXTRAL;
        let spec = MoeSpec::new(cfg, cfg.intermediate_size, routing, router, weights);
        spec.build(b, x, &format!("{layer}.block_sparse_moe"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny config with token ids inside its vocabulary (the defaults, 200034 and 200020,
    /// are not).
    fn parse(extra: &str) -> Result<ArchConfig> {
        let ids = format!(r#", "bos_token_id": 1, "eos_token_id": 2{extra}"#);
        crate::models::tiny_config("minimax_m2", &ids)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "attention_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!(
            (cfg.head_dim, cfg.rope.rotary_dim, cfg.rope.theta),
            (128, 128, 5e6)
        );
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [None, None]);
        let k = *cfg.knobs::<MiniMaxM2>().unwrap();
        assert_eq!(
            k,
            MiniMaxM2 {
                experts: 256,
                top_k: 8
            }
        );
        // Released checkpoints: `rotary_dim` of each head rotates.
        let released = parse(
            r#", "head_dim": 16, "rotary_dim": 8, "num_local_experts": 4,
            "num_experts_per_tok": 2"#,
        )
        .unwrap();
        assert_eq!(released.rope.rotary_dim, 8);
        let v5 = parse(
            r#", "head_dim": 16, "rotary_dim": 8, "rope_parameters": {"rope_type": "default",
            "rope_theta": 1e4, "partial_rotary_factor": 0.25}"#,
        )
        .unwrap();
        assert_eq!((v5.rope.rotary_dim, v5.rope.theta), (4, 1e4));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (
                r#", "num_local_experts": 2, "num_experts_per_tok": 3"#,
                "num_experts_per_tok",
            ),
            (
                r#", "head_dim": 16, "rotary_dim": 3"#,
                "partial_rotary_factor",
            ),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
