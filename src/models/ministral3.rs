//! Ministral 3 (`ministral3`, Mistral AI's Ministral-3 text decoder): the Mistral decoder (no
//! biases, one `sliding_window` for every layer when set) whose rotated queries are scaled by
//! a temperature growing with the position, `1 + β · ln(1 + ⌊p / n⌋)` (Llama 4's attention
//! scaling; β `llama_4_scaling_beta` and `n` `original_max_position_embeddings`, both from the
//! RoPE parameters), with head dim 128 and YaRN RoPE (factor 16 over 16384 positions) by
//! default.

use serde_json::{json, Value};

use super::components::{scalar, soft_capped_attention, AttentionSpec, DecoderInputs};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::{
    read_decoder, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, Sign,
};
use crate::ir::{Attr, DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `ministral3` type; its
/// `mistral` type is the same plain decoder loop (the query scaling lives in the graph).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "ministral3",
    summary: "Mistral whose queries are scaled by `1 + β·ln(1 + ⌊position / n⌋)` (Llama 4's \
              attention scaling), YaRN by default",
    model_types: &[ModelType::generative("ministral3", "mistral", read)],
};

/// transformers' Ministral3Config: head dim 128, no biases, `rms_norm_eps` 1e-5, untied, no
/// window unless `sliding_window` sets one (for every layer).
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::None,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Ministral3Config's RoPE parameters when config.json has none.
fn default_rope_parameters() -> Value {
    json!({
        "type": "yarn",
        "rope_theta": 1_000_000.0,
        "factor": 16.0,
        "original_max_position_embeddings": 16384,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale_all_dim": 1.0,
        "mscale": 1.0,
        "llama_4_scaling_beta": 0.1,
    })
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // The model slides every layer by `sliding_window` alone: it reads no `layer_types` or
    // `use_sliding_window`.
    let mut raw = HfConfig {
        layer_types: None,
        use_sliding_window: None,
        ..raw.clone()
    };
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ Value::Object(_)), _) => ("rope_parameters", p.clone()),
        (_, Some(p @ Value::Object(_))) => ("rope_scaling", p.clone()),
        _ => {
            raw.rope_parameters = Some(default_rope_parameters());
            ("rope_parameters", default_rope_parameters())
        }
    };
    let number = |key: &str| {
        let name = format!("{field}.{key}");
        let value = f.json_number(&name, params.get(key))?;
        f.required_number(&name, value, Sign::NonNegative)
    };
    let scaling = QueryScaling {
        beta: number("llama_4_scaling_beta")?,
        original: number("original_max_position_embeddings")?,
    };
    if scaling.original == 0.0 {
        return Err(f.err(
            &format!("{field}.original_max_position_embeddings"),
            "0 (expected a positive number of positions)",
        ));
    }
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(scaling))
}

/// Ministral 3's knobs: the position-dependent query scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueryScaling {
    /// `llama_4_scaling_beta`.
    pub beta: f32,
    /// `original_max_position_embeddings`: the positions per step of the temperature.
    pub original: f32,
}

impl QueryScaling {
    /// `q · (1 + β · ln(1 + ⌊position_ids / n⌋))`, the factor computed in f32 per token
    /// (`[B, S, 1]`) and cast to `dtype`, as transformers computes it.
    fn apply(&self, b: &mut GraphBuilder, q: &str, position_ids: &str, dtype: DType) -> String {
        let to_f32 = vec![("to", Attr::Int(DType::F32.onnx_code() as i64))];
        let p = b.op("Cast", &[position_ids], to_f32);
        let n = scalar(b, self.original, DType::F32);
        let steps = b.op("Div", &[&p, &n], vec![]);
        let steps = b.op("Floor", &[&steps], vec![]);
        let one = scalar(b, 1.0, DType::F32);
        let steps = b.op("Add", &[&one, &steps], vec![]);
        let log = b.op("Log", &[&steps], vec![]);
        let beta = scalar(b, self.beta, DType::F32);
        let scaled = b.op("Mul", &[&beta, &log], vec![]);
        let factor = b.op("Add", &[&one, &scaled], vec![]);
        let last = b.const_i64(&[-1]);
        let mut factor = b.op("Unsqueeze", &[&factor, &last], vec![]);
        if dtype != DType::F32 {
            let to = vec![("to", Attr::Int(dtype.onnx_code() as i64))];
            factor = b.op("Cast", &[&factor], to);
        }
        b.op("Mul", &[q, &factor], vec![])
    }
}

impl Family for QueryScaling {
    /// Attention of the rotated queries scaled by the position's temperature.
    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        io: &DecoderInputs,
        [q, k, v]: [&str; 3],
        spec: &AttentionSpec<'_>,
        _attn: &str,
        dtype: DType,
    ) -> String {
        let q = self.apply(b, q, &io.position_ids, dtype);
        soft_capped_attention(b, &q, k, v, spec, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeScaling;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "ministral3", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 262144"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "layer_types": ["sliding_attention", "full_attention"]"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.rms_norm_eps), (128, 1e-5));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.rope.theta, 1e6);
        assert!(matches!(cfg.rope.scaling, RopeScaling::Yarn(ref y) if y.factor == 16.0));
        let s = *cfg.knobs::<QueryScaling>().unwrap();
        assert_eq!((s.beta, s.original), (0.1, 16384.0));
        let windowed = parse(r#", "sliding_window": 64"#).unwrap();
        assert_eq!(windowed.layer_windows, [Some(64), Some(64)]);
    }

    #[test]
    fn scaling_parameters_are_required() {
        for (extra, field) in [
            (
                r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                "original_max_position_embeddings": 8}"#,
                "rope_parameters.llama_4_scaling_beta",
            ),
            (
                r#", "rope_scaling": {"type": "default", "llama_4_scaling_beta": 0.1,
                "original_max_position_embeddings": 0}"#,
                "rope_scaling.original_max_position_embeddings",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
