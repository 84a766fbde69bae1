//! Jais 2 (Inception, transformers' Jais2ForCausalLM): the Llama decoder normalised with
//! LayerNorm (weight and bias, `layer_norm_eps`) instead of RMSNorm, whose MLP is ungated
//! squared ReLU, `down_proj(relu(up_proj(x))²)` (Nemotron's), with biases on q, k, v, o and
//! the MLP by default.

use super::components::{squared_relu_mlp, Norm, NormKind};
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `jais2` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "jais2",
    summary: "Llama with LayerNorm and an ungated squared-ReLU MLP, biased projections",
    model_types: &[ModelType::generative("jais2", "decoder", read)],
};

/// transformers' Jais2Config: Llama's fields (RoPE theta 1e4, untied); its activation and
/// norm epsilon are read below.
const FIELDS: DecoderFields = DecoderFields {
    silu_mlp: false,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for jais2 (expected \"relu2\")"),
        ));
    }
    let eps = f.number(
        "layer_norm_eps",
        raw.layer_norm_eps,
        1e-5,
        Sign::NonNegative,
    )?;
    // Jais2Config: biases on by default, no sliding window or layer types.
    let raw = HfConfig {
        attention_bias: Some(raw.attention_bias.unwrap_or(true)),
        mlp_bias: Some(raw.mlp_bias.unwrap_or(true)),
        ..without_windows(raw)
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| Ok(Jais2 { eps }))?;
    // Jais2Config has no `rms_norm_eps`: every norm is a LayerNorm with `layer_norm_eps`.
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// Jais 2's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jais2 {
    /// `layer_norm_eps`.
    pub eps: f32,
}

impl Family for Jais2 {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.eps,
        }
    }

    /// `down_proj(relu(up_proj(x))²)`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        squared_relu_mlp(b, cfg, x, (mlp, "up_proj", "down_proj"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("jais2", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4, "rms_norm_eps": 0.5"#).unwrap();
        assert!(cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.knobs::<Jais2>().unwrap().eps, 1e-5);
        assert_eq!(cfg.layer_windows, [None, None]);
        let plain = parse(
            r#", "attention_bias": false, "mlp_bias": false,
            "layer_norm_eps": 1e-6"#,
        )
        .unwrap();
        assert!(!plain.qkv_bias && !plain.mlp_bias);
        assert_eq!(plain.knobs::<Jais2>().unwrap().eps, 1e-6);
        let err = parse(r#", "hidden_act": "silu""#).unwrap_err().to_string();
        assert!(err.contains("hidden_act") && err.contains("relu2"), "{err}");
    }
}
