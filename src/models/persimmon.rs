//! Persimmon (Adept): pre-norm layers of LayerNorm with bias (`layer_norm_eps`), one fused
//! `query_key_value` projection whose rows are grouped by head (`[heads, 3, head_dim]`, as
//! GPT-NeoX's), a LayerNorm with bias over each head of q and k shared by the heads
//! (`qk_layernorm`, on by default), RoPE on the first `partial_rotary_factor` (0.5 by default)
//! of each head, an ungated squared-ReLU MLP (`dense_h_to_4h`, `dense_4h_to_h`), biases on every
//! projection, and an untied LM head.

use super::components::head_interleaved_qkv;
use super::components::{per_head_norm, squared_relu_mlp, Norm, NormKind};
use super::decoder::{Family, Names};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;
use serde_json::Value;

/// The family's registry entry. onnxruntime-genai 0.18 has no `persimmon` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "persimmon",
    summary: "fused head-interleaved `query_key_value` (split at save time), per-head q/k \
              LayerNorm with bias (`qk_layernorm`), partial RoPE (0.5 by default), squared-ReLU \
              MLP without a gate, biases everywhere",
    model_types: &[ModelType::generative("persimmon", "decoder", read)],
};

/// transformers' PersimmonConfig: biases everywhere (set below), RoPE theta 1e4 on half of
/// each head by default, untied; the activation is read below.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    rope: |raw, head_dim, f| {
        let partial = raw.partial_rotary_factor.or(Some(0.5));
        let raw = HfConfig {
            partial_rotary_factor: partial,
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    ..DecoderFields::LLAMA
};

/// Reads a Persimmon config as transformers' PersimmonConfig does (defaults: `hidden_size`
/// 4096, `intermediate_size` 16384, 36 layers, 64 heads, `vocab_size` 262144, 16384 positions,
/// `relu2`, bos 1, eos 2); errors name the field and what was expected.
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for persimmon (expected \"relu2\")"),
        ));
    }
    // PersimmonConfig has no key/value head count, head width, sliding window or layer types:
    // transformers runs every head on hidden_size / num_attention_heads channels, whatever else
    // config.json holds.
    let raw = HfConfig {
        vocab_size: raw.vocab_size.or(Some(262_144)),
        hidden_size: raw.hidden_size.or(Some(4096)),
        intermediate_size: raw.intermediate_size.or(Some(16_384)),
        num_hidden_layers: raw.num_hidden_layers.or(Some(36)),
        num_attention_heads: raw.num_attention_heads.or(Some(64)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(16_384)),
        bos_token_id: raw.bos_token_id.clone().or(Some(Value::from(1))),
        eos_token_id: raw.eos_token_id.clone().or(Some(Value::from(2))),
        num_key_value_heads: None,
        head_dim: None,
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| {
        Ok(Persimmon {
            layer_norm_eps: f.number(
                "layer_norm_eps",
                raw.layer_norm_eps,
                1e-5,
                Sign::NonNegative,
            )?,
            qk_layernorm: raw.qk_layernorm.unwrap_or(true),
        })
    })?;
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (true, true, true);
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// Persimmon's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Persimmon {
    /// Epsilon of every LayerNorm (`layer_norm_eps`), the q/k ones included.
    pub layer_norm_eps: f32,
    /// A LayerNorm with bias over each head of q and k, one `[head_dim]` weight and bias for
    /// all heads (`qk_layernorm`).
    pub qk_layernorm: bool,
}

/// Persimmon's hooks: LayerNorm, the head-interleaved fused q/k/v, the q/k LayerNorms, the
/// squared-ReLU MLP.
impl Family for Persimmon {
    fn names(&self) -> Names {
        Names {
            o_proj: "dense",
            final_norm: "final_layernorm",
            ..Names::LLAMA
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }

    /// q, k and v as three projections, their rows gathered from the fused
    /// `query_key_value` when the model is saved.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        head_interleaved_qkv(b, cfg, x, attn, dtype)
    }

    /// With `qk_layernorm`, every head of q (k) through `{attn}.q_layernorm` (`k_layernorm`).
    fn qk_norm(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        q: String,
        k: String,
        attn: &str,
        dtype: DType,
    ) -> (String, String) {
        if !self.qk_layernorm {
            return (q, k);
        }
        let norm = self.norm(cfg);
        let mut per_head = |x: &str, module: &str| {
            let module = format!("{attn}.{module}");
            per_head_norm(b, norm, x, &module, -1, cfg.head_dim, dtype)
        };
        (per_head(&q, "q_layernorm"), per_head(&k, "k_layernorm"))
    }

    /// `dense_4h_to_h(relu(dense_h_to_4h(x))²)`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        squared_relu_mlp(b, cfg, x, (mlp, "dense_h_to_4h", "dense_4h_to_h"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        crate::models::tiny_config("persimmon", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse("").unwrap();
        // num_key_value_heads is not Persimmon's: every head has its key and value.
        assert_eq!((cfg.num_key_value_heads, cfg.head_dim), (4, 16));
        assert_eq!((cfg.rope.rotary_dim, cfg.rope.theta), (8, 1e4));
        assert!(cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(
            (cfg.bos_token_id, cfg.eos_token_ids.as_slice()),
            (Some(1), &[2][..])
        );
        let knobs = cfg.knobs::<Persimmon>().unwrap();
        assert!(knobs.qk_layernorm);
        assert_eq!(knobs.layer_norm_eps, 1e-5);
        let v4 = parse(
            r#", "qk_layernorm": false, "partial_rotary_factor": 0.25, "rope_theta": 25000,
            "layer_norm_eps": 1e-6, "bos_token_id": 7"#,
        )
        .unwrap();
        assert_eq!((v4.rope.rotary_dim, v4.rope.theta), (4, 25000.0));
        assert_eq!(v4.bos_token_id, Some(7));
        let knobs = v4.knobs::<Persimmon>().unwrap();
        assert!(!knobs.qk_layernorm);
        assert_eq!(knobs.layer_norm_eps, 1e-6);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "hidden_act": "gelu""#, "hidden_act"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#", "num_attention_heads": 5"#, "num_attention_heads"),
            (
                r#", "partial_rotary_factor": 0.01"#,
                "partial_rotary_factor",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
