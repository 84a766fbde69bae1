//! Solar Open (Upstage, transformers' SolarOpenForCausalLM): Llama's attention (q, k and v
//! biased by `attention_bias`, o never) with, in every layer, GLM-4.5's mixture of experts:
//! `n_routed_experts` SwiGLU experts of `moe_intermediate_size` (router `mlp.gate`, experts
//! `mlp.experts.{e}.*_proj`) chosen by DeepSeek-V3's grouped sigmoid router
//! ([`GroupedRouter`]: `e_score_correction_bias`, `n_group`, `topk_group`,
//! `norm_topk_prob`, `routed_scaling_factor`), plus a shared SwiGLU expert of
//! `n_shared_experts · moe_intermediate_size` (`mlp.shared_experts`).

use super::components::{
    gated_mlp, ExpertWeights, GateActivation, GroupScore, GroupedRouter, MoeSpec, Router,
};
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `solar_open` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "solar_open",
    summary: "Llama attention with GLM-4.5's experts in every layer: grouped sigmoid router \
              with a correction bias, a shared expert",
    model_types: &[ModelType::generative("solar_open", "decoder", read)],
};

/// transformers' SolarOpenConfig: head dim 128, no MLP bias, RoPE theta 1e6, `rms_norm_eps`
/// 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 1_000_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // SolarOpenConfig has no sliding window or layer types, and no dense `intermediate_size`
    // (its MLPs are all experts): the expert width stands in for it.
    let width = f.optional_count(
        "moe_intermediate_size",
        raw.moe_intermediate_size,
        1280,
        MAX_WIDTH,
    )?;
    let raw = HfConfig {
        intermediate_size: Some(width as i64),
        ..without_windows(raw)
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| knobs(&raw, f))?;
    cfg.o_bias = false;
    Ok(cfg)
}

/// The routing and shared-expert fields, checked as transformers' router needs them.
fn knobs(raw: &HfConfig, f: &Fields<'_>) -> Result<SolarOpen> {
    let experts = f.optional_count("n_routed_experts", raw.n_routed_experts, 128, MAX_EXPERTS)?;
    let top_k = f.optional_count(
        "num_experts_per_tok",
        raw.num_experts_per_tok,
        8,
        MAX_EXPERTS,
    )?;
    let groups = f.optional_count("n_group", raw.n_group.flatten(), 1, MAX_EXPERTS)?;
    let topk_group = f.optional_count("topk_group", raw.topk_group.flatten(), 1, MAX_EXPERTS)?;
    if experts % groups != 0 || (topk_group < groups && experts / groups < 2) {
        return Err(f.err(
            "n_group",
            &format!("{groups} groups of {experts} experts (expected equal groups of 2 or more)"),
        ));
    }
    if topk_group > groups {
        return Err(f.err(
            "topk_group",
            &format!("{topk_group} is more than the {groups} groups (n_group)"),
        ));
    }
    if top_k > topk_group * (experts / groups) {
        return Err(f.err(
            "num_experts_per_tok",
            &format!("{top_k} is more than the experts of the {topk_group} groups that compete"),
        ));
    }
    let shared = match raw.n_shared_experts {
        None => 1,
        Some(n) => f.index("n_shared_experts", n, MAX_EXPERTS)?,
    };
    let scaling = f.number(
        "routed_scaling_factor",
        raw.routed_scaling_factor,
        1.0,
        Sign::Positive,
    )?;
    Ok(SolarOpen {
        experts,
        top_k,
        router: Router::Grouped(GroupedRouter {
            sigmoid: true,
            correction_bias: true,
            groups,
            top_groups: topk_group,
            group_score: GroupScore::TopTwoSum,
            normalize: raw.norm_topk_prob.unwrap_or(true),
            scale: scaling,
        }),
        shared,
    })
}

/// Solar Open's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SolarOpen {
    /// `n_routed_experts`.
    pub experts: usize,
    /// `num_experts_per_tok`.
    pub top_k: usize,
    /// The grouped sigmoid router.
    pub router: Router,
    /// `n_shared_experts` (0: no shared expert).
    pub shared: usize,
}

impl Family for SolarOpen {
    /// The routed experts plus the shared expert.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let (mlp, width) = (format!("{layer}.mlp"), cfg.intermediate_size);
        let routing = (self.experts, self.top_k);
        let spec = MoeSpec::new(cfg, width, routing, self.router, ExpertWeights::PROJ);
        let routed = spec.build(b, x, &mlp, dtype);
        if self.shared == 0 {
            return routed;
        }
        let sizes = (cfg.hidden_size, self.shared * width);
        let shared = format!("{mlp}.shared_experts");
        let shared = gated_mlp(b, x, &shared, sizes, false, GateActivation::Silu, dtype);
        b.op("Add", &[&routed, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "solar_open", "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "attention_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!((cfg.head_dim, cfg.intermediate_size), (128, 1280));
        assert!(cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (1e6, 1e-5));
        assert_eq!(cfg.layer_windows, [None, None]);
        let k = *cfg.knobs::<SolarOpen>().unwrap();
        assert_eq!((k.experts, k.top_k, k.shared), (128, 8, 1));
        let grouped = Router::Grouped(GroupedRouter {
            sigmoid: true,
            correction_bias: true,
            groups: 1,
            top_groups: 1,
            group_score: GroupScore::TopTwoSum,
            normalize: true,
            scale: 1.0,
        });
        assert_eq!(k.router, grouped);
    }

    #[test]
    fn routing_fields_are_checked() {
        for (extra, field) in [
            (r#", "n_routed_experts": 6, "n_group": 4"#, "n_group"),
            (r#", "n_group": 2, "topk_group": 3"#, "topk_group"),
            (
                r#", "n_routed_experts": 8, "n_group": 4, "topk_group": 1"#,
                "num_experts_per_tok",
            ),
            (r#", "routed_scaling_factor": 0"#, "routed_scaling_factor"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }
}
