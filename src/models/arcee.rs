//! Arcee (AFM-4.5B, transformers' ArceeForCausalLM): the Llama decoder whose MLP is ungated
//! squared ReLU, `down_proj(relu(up_proj(x))²)` (Nemotron's), with `attention_bias` and
//! `mlp_bias` honoured.

use super::components::squared_relu_mlp;
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `arcee` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "arcee",
    summary: "Llama with an ungated squared-ReLU MLP",
    model_types: &[ModelType::generative("arcee", "decoder", read)],
};

/// transformers' ArceeConfig: Llama's fields, `rms_norm_eps` 1e-5; the activation is read
/// below.
const FIELDS: DecoderFields = DecoderFields {
    silu_mlp: false,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for arcee (expected \"relu2\")"),
        ));
    }
    // ArceeConfig has no sliding window or layer types: transformers never slides.
    let raw = HfConfig {
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(Arcee))
}

/// Arcee's hooks: the squared-ReLU MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arcee;

impl Family for Arcee {
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
        crate::models::tiny_config("arcee", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(cfg.knobs::<Arcee>().is_some());
        let biased = parse(r#", "attention_bias": true, "mlp_bias": true"#).unwrap();
        assert!(biased.qkv_bias && biased.o_bias && biased.mlp_bias);
        let err = parse(r#", "hidden_act": "silu""#).unwrap_err().to_string();
        assert!(err.contains("hidden_act") && err.contains("relu2"), "{err}");
    }
}
