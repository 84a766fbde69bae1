//! NanoChat (Karpathy's nanochat, transformers' NanoChatForCausalLM): a pre-norm decoder
//! whose RMSNorms have no weight — one more normalises the embeddings before the first layer —
//! rotating with the opposite sign (`rotate_half` is `(x₂, −x₁)`: RoPE with the sines negated),
//! queries and keys RMS-normalised per head after RoPE, an ungated squared-ReLU MLP
//! (`mlp.fc1`, `mlp.fc2`, no biases) and final logits soft-capped, `c · tanh(logits / c)`
//! (`final_logit_softcapping`, 15 by default).

use serde_json::Value;

use super::components::{
    linear, per_head_norm, soft_capped_attention, AttentionSpec, DecoderInputs, Norm, NormKind,
    RopeTables,
};
use super::decoder::{plain_rotary, Family};
use super::family::{without_windows, FamilySpec};
use crate::config::{read_decoder, ArchConfig, DecoderFields, Fields, HfConfig, ModelType, Sign};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `nanochat` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "nanochat",
    summary: "weightless RMSNorms (one on the embeddings), RoPE of the opposite sign, per-head \
              q/k norms after RoPE, ungated squared-ReLU MLP, soft-capped logits",
    model_types: &[ModelType::generative("nanochat", "decoder", read)],
};

/// transformers' NanoChatConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 1e4, `rms_norm_eps` 1e-6, untied; the activation is read below.
const FIELDS: DecoderFields = DecoderFields {
    silu_mlp: false,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for nanochat (expected \"relu2\")"),
        ));
    }
    let field = "final_logit_softcapping";
    let softcap = match &raw.final_logit_softcapping {
        None => Some(15.0),
        Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(c) => Some(f.number(field, Some(c), c, Sign::Positive)?),
            None => return Err(f.err(field, &format!("{v} (expected a positive number or null)"))),
        },
    };
    // NanoChatConfig has no sliding window or layer types, and no `mlp_bias`.
    let raw = HfConfig {
        mlp_bias: None,
        ..without_windows(raw)
    };
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(NanoChat { softcap }))
}

/// NanoChat's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NanoChat {
    /// `final_logit_softcapping` (`None`: the logits are not capped).
    pub softcap: Option<f32>,
}

impl Family for NanoChat {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::PlainRms,
            eps: cfg.rms_norm_eps,
        }
    }

    /// The embeddings, normalised.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.norm(cfg)
            .apply(b, &x, "model.norm", cfg.hidden_size, dtype)
    }

    /// The plain tables with the sines negated: `RotaryEmbedding` then rotates as
    /// `x·cos + (x₂, −x₁)·sin`.
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let tables = plain_rotary(b, cfg, io, dtype);
        let sin = b.op("Neg", &[&tables.sin], vec![]);
        vec![RopeTables { sin, ..tables }]
    }

    /// Attention of the rotated q and k, each RMS-normalised per head first.
    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _io: &DecoderInputs,
        [q, k, v]: [&str; 3],
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (norm, d) = (self.norm(cfg), cfg.head_dim);
        let q = per_head_norm(b, norm, q, &format!("{attn}.q_norm"), -1, d, dtype);
        let k = per_head_norm(b, norm, k, &format!("{attn}.k_norm"), -1, d, dtype);
        soft_capped_attention(b, &q, &k, v, spec, 0.0)
    }

    /// `fc2(relu(fc1(x))²)`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let up = linear(b, x, &format!("{mlp}.fc1"), h, inner, false, dtype);
        let relu = b.op("Relu", &[&up], vec![]);
        let squared = b.op("Mul", &[&relu, &relu], vec![]);
        linear(b, &squared, &format!("{mlp}.fc2"), inner, h, false, dtype)
    }

    /// `cap · tanh(x @ head / cap)` when the logits are soft-capped.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        super::decoder::soft_capped_logits(b, x, head, self.softcap, dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("nanochat", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "mlp_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.knobs::<NanoChat>().unwrap().softcap, Some(15.0));
        assert!(!cfg.mlp_bias && !cfg.qkv_bias && !cfg.tie_word_embeddings);
        assert_eq!((cfg.rms_norm_eps, cfg.rope.theta), (1e-6, 1e4));
        assert_eq!(cfg.layer_windows, [None, None]);
        let uncapped =
            parse(r#", "final_logit_softcapping": null, "attention_bias": true"#).unwrap();
        assert_eq!(uncapped.knobs::<NanoChat>().unwrap().softcap, None);
        assert!(uncapped.qkv_bias && uncapped.o_bias);
        for (extra, field) in [
            (
                r#", "final_logit_softcapping": 0"#,
                "final_logit_softcapping",
            ),
            (r#", "hidden_act": "gelu""#, "hidden_act"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
