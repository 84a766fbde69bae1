//! StarCoder2: the Llama decoder with LayerNorm (weight and bias, `norm_epsilon`), a GELU MLP
//! `c_proj(gelu(c_fc(x)))`, biases on every projection (`use_bias`), a sliding window on
//! every layer when `sliding_window` is set, and tied embeddings by default.

use super::components::{ungated_mlp, Activation, Norm, NormKind};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, ArchConfig, Biases, DecoderFields, Fields, Gelu, HfConfig, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `starcoder2` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "starcoder2",
    summary: "LayerNorm with bias, GELU MLP (`c_fc`/`c_proj`), biases everywhere, sliding window",
    model_types: &[ModelType::generative("starcoder2", "decoder", read)],
};

/// transformers' Starcoder2Config: tied embeddings, GELU read by the knobs, biases from
/// `use_bias` (set below), every layer sliding when a window is set.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut cfg = read_decoder(raw, t, f, &FIELDS, |_| {
        let act = raw.hidden_act.as_deref().unwrap_or("gelu_pytorch_tanh");
        let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
            f.err(
                "hidden_act",
                &format!(
                    "`{act}` is not supported for starcoder2 (expected {})",
                    Gelu::NAMES
                ),
            )
        })?;
        let eps = f.number("norm_epsilon", raw.norm_epsilon, 1e-5, Sign::NonNegative)?;
        Ok(Starcoder2 {
            norm_eps: eps,
            gelu,
        })
    })?;
    let bias = raw.use_bias.unwrap_or(true);
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (bias, bias, bias);
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// StarCoder2's knobs: its LayerNorm epsilon and GELU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Starcoder2 {
    /// Epsilon of every LayerNorm (`norm_epsilon`).
    pub norm_eps: f32,
    /// The MLP activation (`hidden_act`).
    pub gelu: Gelu,
}

impl Family for Starcoder2 {
    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.norm_eps,
        }
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
            Activation::Gelu(self.gelu),
            dtype,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("starcoder2", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 8"#).unwrap();
        assert!(cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias && cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [Some(8), Some(8)]);
        let knobs = cfg.knobs::<Starcoder2>().unwrap();
        assert_eq!(knobs.norm_eps, 1e-5);
        assert_eq!(knobs.gelu, Gelu::from_hf_name("gelu_pytorch_tanh").unwrap());
        let plain = parse(r#", "use_bias": false, "norm_epsilon": 1e-6"#).unwrap();
        assert!(!plain.qkv_bias && !plain.o_bias && !plain.mlp_bias);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "hidden_act": "relu""#, "hidden_act"),
            (r#", "norm_epsilon": -1"#, "norm_epsilon"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }
}
