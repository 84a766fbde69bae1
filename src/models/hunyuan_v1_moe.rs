//! Hunyuan MoE (Tencent, transformers' HunYuanMoEV1ForCausalLM): the Llama decoder with a
//! per-head RMSNorm on q and k after RoPE (`query_layernorm`, `key_layernorm`), `attention_bias`
//! on q, k, v and o, and in every layer a sparse mixture of SwiGLU experts (router `gate.wg`,
//! experts `experts.{e}.*_proj`, `intermediate_size` wide) routed by softmax → top-k →
//! renormalised weights (`moe_topk`, one count or one per layer), plus a shared SwiGLU expert
//! (`shared_mlp`, as wide) added to the block output. Hunyuan's "dynamic" RoPE with an `alpha`
//! is static NTK scaling: theta · alpha^(d / (d − 2)).

use super::components::{
    gated_mlp, per_head_norm, soft_capped_attention, AttentionSpec, DecoderInputs, ExpertNames,
    ExpertWeights, GateActivation, MoeSpec, Router,
};
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_EXPERTS;
use crate::Result;
use serde_json::Value;

/// The family's registry entry. onnxruntime-genai 0.18 has no `hunyuan_v1_moe` type: its
/// generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "hunyuan_v1_moe",
    summary: "per-head q/k RMSNorm after RoPE, sparse SwiGLU experts in every layer (softmax → \
              top-k (`moe_topk`, per layer) → renormalised routing) plus a shared expert, NTK \
              RoPE by `alpha`",
    model_types: &[ModelType::generative("hunyuan_v1_moe", "decoder", read)],
};

/// The router and expert names of a Hunyuan MoE block.
const EXPERTS: ExpertWeights = ExpertWeights::PerExpert(ExpertNames {
    router: "gate.wg",
    ..ExpertNames::PROJ
});

/// transformers' HunYuanMoEV1Config: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta
/// 1e4 (an `alpha` in a "dynamic" `rope_parameters`/`rope_scaling` scales it), `rms_norm_eps`
/// 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| {
        let (field, params) = match (&raw.rope_parameters, &raw.rope_scaling) {
            (Some(p @ Value::Object(_)), _) => ("rope_parameters", p),
            (_, Some(p @ Value::Object(_))) => ("rope_scaling", p),
            _ => return read_rope(raw, head_dim, 10_000.0, f),
        };
        let kind = params.get("rope_type").or_else(|| params.get("type"));
        let alpha_field = format!("{field}.alpha");
        let alpha = match (kind.and_then(Value::as_str), params.get("alpha")) {
            (Some("dynamic"), Some(a)) => f.json_number(&alpha_field, Some(a))?,
            _ => None,
        };
        let Some(alpha) = alpha else {
            return read_rope(raw, head_dim, 10_000.0, f);
        };
        if !(alpha > 1.0 && alpha.is_finite()) || head_dim <= 2 {
            return Err(f.err(
                &alpha_field,
                &format!("{alpha} (expected a number above 1, with head_dim above 2)"),
            ));
        }
        // The NTK alpha's other fields are unused: the rotation is the default one with theta
        // scaled.
        let theta_field = format!("{field}.rope_theta");
        let theta = match f.json_number(&theta_field, params.get("rope_theta"))? {
            Some(t) => t,
            None => raw.rope_theta.unwrap_or(10_000.0),
        };
        let d = head_dim as f64;
        let scaled = theta * alpha.powf(d / (d - 2.0));
        let plain = HfConfig {
            rope_parameters: Some(
                serde_json::json!({"rope_type": "default", "rope_theta": scaled}),
            ),
            rope_scaling: None,
            ..raw.clone()
        };
        read_rope(&plain, head_dim, 10_000.0, f)
    },
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Reads a Hunyuan MoE config as transformers does (defaults: `hidden_size` 4096,
/// `intermediate_size` 11008, 32 layers, 32 heads, `vocab_size` 290943, 2048 positions, one
/// expert, `moe_topk` 1, bos 1, eos 2, pad 0); errors name the field and what was expected.
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // HunYuanMoEV1Config has no sliding window or layer types: transformers ignores them.
    let raw = HfConfig {
        vocab_size: raw.vocab_size.or(Some(290_943)),
        hidden_size: raw.hidden_size.or(Some(4096)),
        intermediate_size: raw.intermediate_size.or(Some(11_008)),
        num_hidden_layers: raw.num_hidden_layers.or(Some(32)),
        num_attention_heads: raw.num_attention_heads.or(Some(32)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(2048)),
        bos_token_id: raw.bos_token_id.clone().or(Some(Value::from(1))),
        eos_token_id: raw.eos_token_id.clone().or(Some(Value::from(2))),
        pad_token_id: raw.pad_token_id.clone().or(Some(Value::from(0))),
        mlp_bias: None,
        ..without_windows(raw)
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let layers = dims.num_hidden_layers;
        let experts = match (raw.num_experts, raw.num_local_experts) {
            (Some(n), _) => f.count("num_experts", n, MAX_EXPERTS)?,
            (None, Some(n)) => f.count("num_local_experts", n, MAX_EXPERTS)?,
            (None, None) => 1,
        };
        let field = "moe_topk";
        let top_k = match (&raw.moe_topk, raw.num_experts_per_tok) {
            (Some(Value::Array(ks)), _) if ks.len() == layers => ks
                .iter()
                .map(|k| match k.as_i64() {
                    Some(k) => f.count(field, k, experts),
                    None => Err(f.err(field, &format!("{k} (expected an integer)"))),
                })
                .collect::<Result<Vec<_>>>()?,
            (Some(Value::Array(ks)), _) => {
                return Err(f.err(
                    field,
                    &format!("lists {} counts for {layers} layers", ks.len()),
                ))
            }
            (Some(k), _) => match k.as_i64() {
                Some(k) => vec![f.count(field, k, experts)?; layers],
                None => return Err(f.err(field, &format!("{k} (expected an integer or a list)"))),
            },
            (None, Some(k)) => vec![f.count("num_experts_per_tok", k, experts)?; layers],
            (None, None) => vec![1; layers],
        };
        Ok(HunyuanMoe { experts, top_k })
    })
}

/// Hunyuan MoE's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct HunyuanMoe {
    /// `num_experts` per layer.
    pub experts: usize,
    /// `moe_topk` of each layer.
    pub top_k: Vec<usize>,
}

/// Hunyuan MoE's hooks: q/k norms on the rotated heads, the MoE blocks with their shared expert.
impl Family for HunyuanMoe {
    /// Each rotated head of q (k) through `{attn}.query_layernorm` (`key_layernorm`), then the
    /// default attention.
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
        let norm = self.norm(cfg);
        let d = cfg.head_dim;
        let q = per_head_norm(b, norm, q, &format!("{attn}.query_layernorm"), -1, d, dtype);
        let k = per_head_norm(b, norm, k, &format!("{attn}.key_layernorm"), -1, d, dtype);
        soft_capped_attention(b, &q, &k, v, spec, self.attention_softcap(cfg))
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let mlp = format!("{layer}.mlp");
        let routing = (self.experts, self.top_k[i]);
        let router = Router::Softmax { normalize: true };
        let spec = MoeSpec::new(cfg, cfg.intermediate_size, routing, router, EXPERTS);
        let routed = spec.build(b, x, &mlp, dtype);
        let shared = format!("{mlp}.shared_mlp");
        let sizes = (cfg.hidden_size, cfg.intermediate_size);
        let y = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
        b.op("Add", &[&routed, &y], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        crate::models::tiny_config("hunyuan_v1_moe", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4, "mlp_bias": true"#).unwrap();
        assert_eq!(
            (cfg.head_dim, cfg.rope.theta, cfg.rms_norm_eps),
            (16, 1e4, 1e-5)
        );
        assert!(!cfg.qkv_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [None, None]);
        let k = cfg.knobs::<HunyuanMoe>().unwrap();
        assert_eq!((k.experts, k.top_k.as_slice()), (1, &[1, 1][..]));
        let moe =
            parse(r#", "num_experts": 4, "moe_topk": [1, 2], "attention_bias": true"#).unwrap();
        assert!(moe.qkv_bias && moe.o_bias);
        let k = moe.knobs::<HunyuanMoe>().unwrap();
        assert_eq!((k.experts, k.top_k.as_slice()), (4, &[1, 2][..]));
    }

    #[test]
    fn alpha_scales_theta() {
        // Hunyuan-A13B's spelling: theta 1e4 · 1000^(16/14).
        let cfg = parse(
            r#", "rope_theta": 10000.0, "rope_scaling": {"type": "dynamic", "alpha": 1000.0,
            "factor": 1.0, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
            "mscale_all_dim": 1.0}"#,
        )
        .unwrap();
        let want = 1e4 * 1000f64.powf(16.0 / 14.0);
        assert!(
            (f64::from(cfg.rope.theta) / want - 1.0).abs() < 1e-6,
            "{}",
            cfg.rope.theta
        );
        assert_eq!(cfg.rope.rotary_dim, 16);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "num_experts": 2, "moe_topk": 3"#, "moe_topk"),
            (r#", "num_experts": 2, "moe_topk": [1]"#, "moe_topk"),
            (r#", "num_experts": 2, "moe_topk": "2""#, "moe_topk"),
            (
                r#", "rope_scaling": {"type": "dynamic", "alpha": 0.5}"#,
                "rope_scaling.alpha",
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
