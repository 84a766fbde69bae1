//! ERNIE 4.5 MoE (Baidu, transformers' Ernie4_5_MoeForCausalLM): the ERNIE 4.5 decoder
//! (interleaved RoPE over whole heads, `use_bias` on q, k, v, o, the dense MLPs and the LM head,
//! tied head weights) whose MLPs are sparse mixtures of SwiGLU experts in every `moe_layer_interval`-th layer from
//! `moe_layer_start_index` to `moe_layer_end_index`. The router is score-corrected
//! ([`Router::Corrected`]): softmax scores, the top `moe_k` picked on the scores plus
//! `moe_statics.e_score_correction_bias`, weighted by their scores divided by their sum (at
//! least `moe_norm_min`). A shared SwiGLU expert `moe_num_shared_experts` experts wide
//! (`shared_experts`, with the `use_bias` biases) adds to every MoE block's output.

use super::components::{gated_mlp, ExpertWeights, GateActivation, MoeSpec, Router, Scores};
use super::decoder::{biased_logits, Family};
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Dims, Fields, HfConfig, ModelType,
    Rope, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_WIDTH};
use crate::Result;
use serde_json::Value;

/// The family's registry entry. onnxruntime-genai 0.18 has no `ernie4_5_moe` type: its
/// generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "ernie4_5_moe",
    summary: "ERNIE 4.5 with sparse SwiGLU experts every `moe_layer_interval` layers from \
              `moe_layer_start_index`, softmax router with a score-correction bias for the \
              pick, renormalised top-k, shared expert",
    model_types: &[ModelType::generative("ernie4_5_moe", "decoder", read)],
};

/// transformers' Ernie4_5_MoeConfig: head_dim hidden_size / heads unless given, interleaved
/// RoPE with theta 5e5, biases set below, `rms_norm_eps` 1e-5, tied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    rope: |raw, head_dim, f| {
        let rope = read_rope(raw, head_dim, 500_000.0, f)?;
        Ok(Rope {
            interleaved: true,
            ..rope
        })
    },
    tie_word_embeddings: true,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Reads an ERNIE 4.5 MoE config as transformers does (defaults: `hidden_size` 2560,
/// `intermediate_size` 12288, 28 layers, 20 heads, 4 key/value heads, `vocab_size` 103424,
/// 131072 positions, 64 experts, `moe_k` 6, `moe_intermediate_size` 1536, 2 shared experts,
/// MoE layers from 1 to the last); errors name the field and what was expected.
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // Ernie4_5_MoeConfig has no sliding window, layer types or per-kind biases: transformers
    // ignores them.
    let raw = HfConfig {
        vocab_size: raw.vocab_size.or(Some(103_424)),
        hidden_size: raw.hidden_size.or(Some(2560)),
        intermediate_size: raw.intermediate_size.or(Some(12_288)),
        num_hidden_layers: raw.num_hidden_layers.or(Some(28)),
        num_attention_heads: raw.num_attention_heads.or(Some(20)),
        num_key_value_heads: raw.num_key_value_heads.or(Some(4)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(131_072)),
        bos_token_id: raw.bos_token_id.clone().or(Some(Value::from(1))),
        eos_token_id: raw.eos_token_id.clone().or(Some(Value::from(2))),
        pad_token_id: raw.pad_token_id.clone().or(Some(Value::from(0))),
        attention_bias: None,
        mlp_bias: None,
        ..without_windows(raw)
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |dims| knobs(&raw, f, dims))?;
    if cfg.rope.rotary_dim != cfg.head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            &format!(
                "rotates {} of {} channels per head (ERNIE 4.5 rotates whole heads)",
                cfg.rope.rotary_dim, cfg.head_dim
            ),
        ));
    }
    let bias = raw.use_bias.unwrap_or(false);
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (bias, bias, bias);
    Ok(cfg)
}

/// The MoE knobs of `raw`.
fn knobs(raw: &HfConfig, f: &Fields<'_>, dims: Dims) -> Result<Ernie45Moe> {
    let experts = f.optional_count("moe_num_experts", raw.moe_num_experts, 64, MAX_EXPERTS)?;
    let top_k = f.optional_count("moe_k", raw.moe_k, 6, MAX_EXPERTS)?;
    if top_k > experts {
        return Err(f.err(
            "moe_k",
            &format!("{top_k} is more than the {experts} experts of a layer"),
        ));
    }
    let width = "moe_intermediate_size";
    let expert_width = f.optional_count(width, raw.moe_intermediate_size, 1536, MAX_WIDTH)?;
    let shared = match raw.moe_num_shared_experts {
        None => 2,
        Some(n) => f.index("moe_num_shared_experts", n, MAX_EXPERTS)?,
    };
    let interval = "moe_layer_interval";
    let interval = f.optional_count(interval, raw.moe_layer_interval, 1, dims.num_hidden_layers)?;
    let layers = dims.num_hidden_layers as i64;
    let start = raw.moe_layer_start_index.unwrap_or(1);
    let end = match raw.moe_layer_end_index.unwrap_or(-1) {
        -1 => layers - 1,
        end => end,
    };
    Ok(Ernie45Moe {
        experts,
        top_k,
        expert_width,
        shared_width: (shared > 0).then_some(shared * expert_width),
        moe_layers: (0..layers)
            .map(|i| (i + 1) % interval as i64 == 0 && start <= i && i <= end)
            .collect(),
        norm_min: f.number("moe_norm_min", raw.moe_norm_min, 1e-12, Sign::NonNegative)?,
        lm_head_bias: raw.use_bias.unwrap_or(false),
    })
}

/// ERNIE 4.5 MoE's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Ernie45Moe {
    /// `moe_num_experts`.
    pub experts: usize,
    /// `moe_k`.
    pub top_k: usize,
    /// `moe_intermediate_size`: each routed expert's width.
    pub expert_width: usize,
    /// The shared expert's width (`moe_num_shared_experts` · `moe_intermediate_size`), `None`
    /// without one.
    pub shared_width: Option<usize>,
    /// Per layer, whether its MLP is a MoE block.
    pub moe_layers: Vec<bool>,
    /// `moe_norm_min`.
    pub norm_min: f32,
    /// A bias on the LM head (`use_bias`).
    pub lm_head_bias: bool,
}

/// ERNIE 4.5 MoE's hooks: Llama's, but the MoE blocks and the LM head's `use_bias` bias.
impl Family for Ernie45Moe {
    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        match self.lm_head_bias {
            true => biased_logits(b, cfg, x, head, dtype),
            false => b.op_into("MatMul", &[x, head], vec![], "logits"),
        }
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
        if !self.moe_layers.get(i).copied().unwrap_or(false) {
            return self.mlp(b, cfg, x, &mlp, dtype);
        }
        let router = Router::Corrected {
            scores: Scores::Softmax,
            bias: "moe_statics.e_score_correction_bias",
            min_sum: Some(self.norm_min),
        };
        let routing = (self.experts, self.top_k);
        let spec = MoeSpec::new(cfg, self.expert_width, routing, router, ExpertWeights::PROJ);
        let routed = spec.build(b, x, &mlp, dtype);
        match self.shared_width {
            None => routed,
            Some(width) => {
                let shared = format!("{mlp}.shared_experts");
                let sizes = (cfg.hidden_size, width);
                let act = GateActivation::Silu;
                let y = gated_mlp(b, x, &shared, sizes, cfg.mlp_bias, act, dtype);
                b.op("Add", &[&routed, &y], vec![])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "ernie4_5_moe", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "vocab_size": 300, "max_position_embeddings": 128"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "attention_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!(
            (cfg.head_dim, cfg.rope.rotary_dim, cfg.rope.theta),
            (16, 16, 5e5)
        );
        assert!(cfg.rope.interleaved && cfg.tie_word_embeddings);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        assert_eq!(cfg.layer_windows, [None; 4]);
        let k = cfg.knobs::<Ernie45Moe>().unwrap();
        assert_eq!((k.experts, k.top_k, k.expert_width), (64, 6, 1536));
        assert_eq!((k.shared_width, k.norm_min), (Some(3072), 1e-12));
        assert!(!k.lm_head_bias);
        assert_eq!(k.moe_layers, [false, true, true, true]);
    }

    #[test]
    fn moe_layers_follow_start_end_and_interval() {
        let cfg = parse(
            r#", "moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 32,
            "moe_num_shared_experts": 0, "moe_layer_start_index": 0, "moe_layer_end_index": 2,
            "moe_layer_interval": 2, "use_bias": true"#,
        )
        .unwrap();
        assert!(cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        let k = cfg.knobs::<Ernie45Moe>().unwrap();
        assert!(k.lm_head_bias);
        assert_eq!((k.experts, k.top_k, k.shared_width), (4, 2, None));
        assert_eq!(k.moe_layers, [false, true, false, false]);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "moe_num_experts": 2, "moe_k": 3"#, "moe_k"),
            (r#", "moe_layer_interval": 0"#, "moe_layer_interval"),
            (
                r#", "moe_num_shared_experts": -1"#,
                "moe_num_shared_experts",
            ),
            (r#", "moe_norm_min": -1"#, "moe_norm_min"),
            (r#", "partial_rotary_factor": 0.5"#, "partial_rotary_factor"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
