//! Phi-3.5-MoE: a decoder with LayerNorm (with bias, epsilon `rms_norm_eps`), q/k/v/o biases
//! per `attention_bias`, an LM head bias per `lm_head_bias`, LongRoPE as Phi-3 (see
//! [`super::components::longrope`]) with cos/sin scaled by the config's `short_mscale` /
//! `long_mscale`, and in every layer a sparse mixture of SwiGLU experts stored as Mixtral's
//! (`block_sparse_moe`: router `gate`, experts `experts.{e}.w1/w3/w2`), each token routed to 2
//! of `num_local_experts` by the sparsemixer ([`Router::SparseMixer`], jitter epsilon
//! `router_jitter_noise`). The block is [`MoeSpec::build`].
//!
//! onnxruntime's fused `com.microsoft::MoE` is not emitted: its `use_sparse_mixer` attribute
//! is ignored by the CPU kernel of onnxruntime 1.32 (the output is the softmax → top-2
//! routing's), so the block stays in standard ops on every EP.

use super::components::{
    DecoderInputs, ExpertWeights, MoeSpec, Norm, NormKind, RopeTables, Router,
};
use super::decoder::{self, Family};
use super::family::FamilySpec;
use super::phi3::Phi3;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_routing, ArchConfig, Biases, DecoderFields, Fields, HfConfig, RopeScaling,
    Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "phimoe",
    summary: "LayerNorm, attention and LM head biases, LongRoPE scaled by its mscale, sparse \
              SwiGLU experts routed to 2 by the sparsemixer (`router_jitter_noise`)",
    model_types: &[ModelType::generative("phimoe", "phimoe", read).building_longrope()],
};

/// transformers' PhimoeConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 1e6, `rms_norm_eps` 1e-5 (the LayerNorm epsilon), untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| crate::config::read_rope(raw, head_dim, 1_000_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut mscale = None;
    let cfg = read_decoder(raw, t, f, &FIELDS, |_| {
        let (experts, top_k) = read_routing(raw, f, (16, 2))?;
        if top_k != 2 {
            return Err(f.err(
                "num_experts_per_tok",
                &format!("{top_k} (the sparsemixer routes every token to exactly 2 experts)"),
            ));
        }
        let jitter = f.number(
            "router_jitter_noise",
            raw.router_jitter_noise,
            0.01,
            Sign::NonNegative,
        )?;
        mscale = rope_mscale(raw, f)?;
        Ok(Phimoe {
            experts,
            jitter_eps: jitter,
            lm_head_bias: raw.lm_head_bias.unwrap_or(false),
        })
    })?;
    match (&cfg.rope.scaling, mscale) {
        (RopeScaling::Default, _) => Ok(cfg),
        (RopeScaling::LongRope(l), Some((short, long))) => {
            if short != long && cfg.max_position_embeddings > l.original_max_position_embeddings {
                return Err(f.err(
                    "rope_parameters.long_mscale",
                    &format!(
                        "{long} differs from short_mscale ({short}): a per-pass mscale switch \
                         is not built (Phi-3.5-MoE's are equal)"
                    ),
                ));
            }
            let mut cfg = cfg;
            if let RopeScaling::LongRope(l) = &mut cfg.rope.scaling {
                l.attention_factor = short;
            }
            Ok(cfg)
        }
        (RopeScaling::LongRope(_), None) => Err(f.err(
            "rope_parameters.short_mscale",
            "missing (a LongRoPE phimoe config needs short_mscale and long_mscale)",
        )),
        _ => Err(f.err(
            "rope_parameters.rope_type",
            "phimoe is built with plain RoPE or LongRoPE only",
        )),
    }
}

/// `short_mscale` and `long_mscale` of the RoPE parameters (v5 `rope_parameters`, v4
/// `rope_scaling`), when both are there; an error when only one is, or one is not a positive
/// number.
fn rope_mscale(raw: &HfConfig, f: &Fields<'_>) -> Result<Option<(f32, f32)>> {
    let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
        (Some(p @ serde_json::Value::Object(_)), _) => ("rope_parameters", p),
        (_, Some(p @ serde_json::Value::Object(_))) => ("rope_scaling", p),
        _ => return Ok(None),
    };
    let read = |key: &str| -> Result<Option<f32>> {
        let name = format!("{field}.{key}");
        match f.json_number(&name, params.get(key))? {
            Some(v) => Ok(Some(f.number(&name, Some(v), v, Sign::Positive)?)),
            None => Ok(None),
        }
    };
    match (read("short_mscale")?, read("long_mscale")?) {
        (Some(s), Some(l)) => Ok(Some((s, l))),
        (None, None) => Ok(None),
        (s, _) => {
            let missing = if s.is_none() {
                "short_mscale"
            } else {
                "long_mscale"
            };
            Err(f.err(
                &format!("{field}.{missing}"),
                "missing (short_mscale and long_mscale go together)",
            ))
        }
    }
}

/// Phi-3.5-MoE's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phimoe {
    /// `num_local_experts`.
    pub experts: usize,
    /// `router_jitter_noise`: the sparsemixer's epsilon.
    pub jitter_eps: f32,
    /// `lm_head_bias`.
    pub lm_head_bias: bool,
}

impl Family for Phimoe {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: cfg.rms_norm_eps,
        }
    }

    /// Phi-3's: the LongRoPE tables where the config scales RoPE so.
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        Phi3.rotary(b, cfg, io, dtype)
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
        let router = Router::SparseMixer {
            jitter_eps: self.jitter_eps,
        };
        let routing = (self.experts, 2);
        let spec = MoeSpec::new(
            cfg,
            cfg.intermediate_size,
            routing,
            router,
            ExpertWeights::MIXTRAL,
        );
        spec.build(b, x, &format!("{layer}.block_sparse_moe"), dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        match self.lm_head_bias {
            true => decoder::biased_logits(b, cfg, x, head, dtype),
            false => b.op_into("MatMul", &[x, head], vec![], "logits"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Phimoe;
    use crate::config::RopeScaling;

    fn parse(extra: &str) -> crate::Result<crate::config::ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "phimoe", "hidden_size": 64, "intermediate_size": 32,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    const LONGROPE: &str = r#", "rope_parameters": {"rope_type": "longrope",
        "rope_theta": 10000.0, "original_max_position_embeddings": 64,
        "short_factor": [1,1,1,1,1,1,1,1], "long_factor": [2,2,2,2,2,2,2,2]"#;

    #[test]
    fn reads_transformers_defaults_and_the_sparsemixer_knobs() {
        let cfg = parse("").unwrap();
        let k = *cfg.knobs::<Phimoe>().unwrap();
        assert_eq!(
            k,
            Phimoe {
                experts: 16,
                jitter_eps: 0.01,
                lm_head_bias: false
            }
        );
        assert_eq!(cfg.rope.theta, 1e6);
        assert!(!cfg.qkv_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let c = parse(r#", "num_local_experts": 4, "router_jitter_noise": 0.2, "lm_head_bias": true, "attention_bias": true"#)
            .unwrap();
        let k = *c.knobs::<Phimoe>().unwrap();
        assert_eq!((k.experts, k.jitter_eps, k.lm_head_bias), (4, 0.2, true));
        assert!(c.qkv_bias && c.o_bias);
    }

    #[test]
    fn longrope_cos_sin_are_scaled_by_the_mscale() {
        let cfg = parse(&format!(
            r#"{LONGROPE}, "short_mscale": 1.25, "long_mscale": 1.25}}"#
        ))
        .unwrap();
        let RopeScaling::LongRope(l) = &cfg.rope.scaling else {
            panic!("{:?}", cfg.rope.scaling)
        };
        assert_eq!(l.attention_factor, 1.25);
    }

    #[test]
    fn refuses_what_it_does_not_build() {
        for (bad, field) in [
            (
                r#", "num_experts_per_tok": 3"#.to_string(),
                "num_experts_per_tok",
            ),
            (
                r#", "router_jitter_noise": -1"#.to_string(),
                "router_jitter_noise",
            ),
            (format!("{LONGROPE}}}"), "short_mscale"),
            (
                format!(r#"{LONGROPE}, "short_mscale": 1.2}}"#),
                "long_mscale",
            ),
            (
                format!(r#"{LONGROPE}, "short_mscale": 1.2, "long_mscale": 1.3}}"#),
                "long_mscale",
            ),
            (
                r#", "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}"#
                    .to_string(),
                "rope_type",
            ),
        ] {
            let err = parse(&bad).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }
}
