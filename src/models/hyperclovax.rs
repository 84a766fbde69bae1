//! HyperCLOVA X (NAVER, transformers' HyperCLOVAXForCausalLM): Granite's multipliers — token
//! embeddings times `embedding_multiplier`, block outputs times `residual_multiplier`,
//! `attention_multiplier` as the softmax scale (`head_dim^-0.5` by default) — with the
//! logits *multiplied* by `logits_scaling`, and with `use_post_norm` (on by default) an
//! RMSNorm on each block's output before its residual add (`post_norm1`, `post_norm2`:
//! Peri-LN).

use super::components::{scalar, DecoderInputs};
use super::decoder::{Family, LayerNorms};
use super::family::{without_windows, FamilySpec};
use super::granite::{multipliers, Multipliers};
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `hyperclovax` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "hyperclovax",
    summary: "Granite's multipliers with logits multiplied, norms on block outputs (Peri-LN, \
              `use_post_norm`)",
    model_types: &[ModelType::generative("hyperclovax", "decoder", read)],
};

/// Peri-LN layers: Llama's input norms and a norm on each block's output.
const PERI_NORMS: LayerNorms = LayerNorms {
    post_attention: Some("post_norm1"),
    post_mlp: Some("post_norm2"),
    ..LayerNorms::PRE
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // HyperCLOVAXConfig (GraniteConfig's fields) has no sliding window or layer types.
    let raw = without_windows(raw);
    read_decoder(&raw, t, f, &DecoderFields::LLAMA, |dims| {
        let attention = raw
            .attention_multiplier
            .unwrap_or((dims.head_dim as f64).powf(-0.5));
        let raw = HfConfig {
            attention_multiplier: Some(attention),
            ..raw.clone()
        };
        Ok(HyperClovaX {
            multipliers: multipliers(&raw, f)?,
            post_norm: raw.use_post_norm.unwrap_or(true),
        })
    })
}

/// HyperCLOVA X's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HyperClovaX {
    /// Granite's multipliers; `logits` multiplies the logits here.
    pub multipliers: Multipliers,
    /// `use_post_norm`: each block's output is normalised.
    pub post_norm: bool,
}

impl Family for HyperClovaX {
    fn layer_norms(&self) -> LayerNorms {
        match self.post_norm {
            true => PERI_NORMS,
            false => LayerNorms::PRE,
        }
    }

    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.multipliers.embed(b, cfg, io, x, dtype)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.multipliers.attention_scale(cfg)
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        self.multipliers.residual_branch(b, cfg, y, dtype)
    }

    /// `(x @ head) · logits_scaling` (no op when it is 1).
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let s = self.multipliers.logits;
        if s == 1.0 {
            b.op_into("MatMul", &[x, head], vec![], "logits");
            return;
        }
        let product = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, s, dtype);
        b.op_into("Mul", &[&product, &c], vec![], "logits");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("hyperclovax", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4"#).unwrap();
        let k = *cfg.knobs::<HyperClovaX>().unwrap();
        assert!(k.post_norm);
        assert_eq!(k.layer_norms(), PERI_NORMS);
        assert_eq!(k.multipliers.attention, 0.25); // head_dim 16
        assert_eq!(cfg.layer_windows, [None, None]);
        let plain = parse(r#", "use_post_norm": false, "attention_multiplier": 0.5"#).unwrap();
        let k = *plain.knobs::<HyperClovaX>().unwrap();
        assert_eq!((k.post_norm, k.multipliers.attention), (false, 0.5));
        assert_eq!(k.layer_norms(), LayerNorms::PRE);
    }
}
