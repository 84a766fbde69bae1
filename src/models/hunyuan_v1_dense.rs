//! Hunyuan dense (Tencent, transformers' HunYuanDenseV1ForCausalLM): the Llama decoder without
//! MLP biases whose queries and keys are RMS-normalised per head *after* RoPE
//! (`self_attn.query_layernorm`, `self_attn.key_layernorm`, one `[head_dim]` weight each), and
//! whose `dynamic` RoPE with an `alpha` is a fixed NTK stretch of the base, `theta ·
//! alpha^(d / (d − 2))` over the head dim `d`, independent of the sequence length.

use serde_json::Value;

use super::components::{per_head_norm, soft_capped_attention, AttentionSpec, DecoderInputs};
use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Rope,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `hunyuan_v1_dense` type: its
/// generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "hunyuan_v1_dense",
    summary: "per-head q/k RMSNorm after RoPE, NTK-alpha RoPE (`dynamic` with `alpha`)",
    model_types: &[ModelType::generative("hunyuan_v1_dense", "decoder", read)],
};

/// transformers' HunYuanDenseV1Config: `attention_bias` on q, k, v and o, no MLP bias,
/// `rms_norm_eps` 1e-5, RoPE theta 1e4, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: read_ntk_alpha_rope,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // HunYuanDenseV1Config has no sliding window or layer types: transformers never slides.
    let raw = HfConfig {
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(HunYuanDense))
}

/// The RoPE config: a `dynamic` one with a non-zero `alpha` is plain RoPE on the stretched base
/// `theta · alpha^(d / (d − 2))` over whole heads; any other reads as every family's.
fn read_ntk_alpha_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ Value::Object(_)), _) => ("rope_parameters", p),
        (_, Some(p @ Value::Object(_))) => ("rope_scaling", p),
        _ => return read_rope(raw, head_dim, 10_000.0, f),
    };
    let kind = params.get("rope_type").or_else(|| params.get("type"));
    let alpha = f.json_number(&format!("{field}.alpha"), params.get("alpha"))?;
    let alpha = match (kind.and_then(Value::as_str), alpha) {
        (Some("dynamic"), Some(a)) if a != 0.0 => a,
        _ => return read_rope(raw, head_dim, 10_000.0, f),
    };
    if alpha < 0.0 || head_dim <= 2 {
        return Err(f.err(
            &format!("{field}.alpha"),
            &format!("{alpha} with head_dim {head_dim} (expected a positive alpha, head_dim > 2)"),
        ));
    }
    let mut plain = params.clone();
    if let Value::Object(map) = &mut plain {
        map.remove("type");
        map.insert("rope_type".into(), Value::from("default"));
    }
    let raw = HfConfig {
        rope_parameters: Some(plain),
        rope_scaling: None,
        ..raw.clone()
    };
    let mut rope = read_rope(&raw, head_dim, 10_000.0, f)?;
    if rope.rotary_dim != head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            "set with an NTK alpha (transformers' alpha RoPE rotates whole heads)",
        ));
    }
    let d = head_dim as f64;
    rope.theta = (f64::from(rope.theta) * alpha.powf(d / (d - 2.0))) as f32;
    Ok(rope)
}

/// Hunyuan dense's hooks: q/k norms after RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HunYuanDense;

impl Family for HunYuanDense {
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
        let q_norm = format!("{attn}.query_layernorm");
        let k_norm = format!("{attn}.key_layernorm");
        let q = per_head_norm(b, norm, q, &q_norm, -1, d, dtype);
        let k = per_head_norm(b, norm, k, &k_norm, -1, d, dtype);
        soft_capped_attention(b, &q, &k, v, spec, 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("hunyuan_v1_dense", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg =
            parse(r#", "attention_bias": true, "mlp_bias": true, "sliding_window": 4"#).unwrap();
        assert!(cfg.qkv_bias && cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!((cfg.rms_norm_eps, cfg.rope.theta), (1e-5, 1e4));
        assert_eq!(cfg.layer_windows, [None, None]);
    }

    #[test]
    fn ntk_alpha_stretches_the_base() {
        // v4 spelling, as the hub's Hunyuan-7B writes it; head_dim 16: 1e4 · 50^(16/14).
        let cfg = parse(
            r#", "rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "alpha": 50.0,
            "factor": 1.0}"#,
        )
        .unwrap();
        let want = 1e4 * 50f64.powf(16.0 / 14.0);
        assert!((f64::from(cfg.rope.theta) / want - 1.0).abs() < 1e-6);
        assert_eq!(cfg.rope.scaling, crate::config::RopeScaling::Default);
        // Without alpha, `dynamic` is dynamic NTK.
        let dynamic =
            parse(r#", "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}"#).unwrap();
        assert_ne!(dynamic.rope.scaling, crate::config::RopeScaling::Default);
        for (extra, want) in [
            (
                r#", "rope_parameters": {"rope_type": "dynamic", "alpha": "x"}"#,
                "rope_parameters.alpha",
            ),
            (
                r#", "rope_parameters": {"rope_type": "dynamic", "alpha": -2}"#,
                "rope_parameters.alpha",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }
}
