//! LFM2-MoE (Liquid AI): LFM2's hybrid decoder ([`super::lfm2`]: gated short-convolution
//! layers carrying their conv state, GQA layers with per-head q/k RMSNorm) whose first
//! `num_dense_layers` layers keep a SwiGLU MLP of width `intermediate_size` (not derived as
//! LFM2's) and whose other layers are a sparse mixture of SwiGLU experts
//! (`feed_forward.experts.{e}.w1/w3/w2`, width `moe_intermediate_size`): sigmoid scores, the
//! top-k picked on the scores plus `feed_forward.expert_bias` (with `use_expert_bias`),
//! weighted by their scores, renormalised with `norm_topk_prob`, times
//! `routed_scaling_factor` — DeepSeek-V3's router with one group ([`GroupedRouter`]).
//!
//! transformers divides by the sum plus 1e-6 where the grouped router adds 1e-20: the weights
//! differ by under 1e-6 of themselves relative to the sum of the k sigmoid scores.

use super::components::{ExpertWeights, GroupScore, GroupedRouter, MoeSpec, Router, ShortConv};
use super::decoder::{Family, LayerNorms, Names, QkNorm};
use super::family::FamilySpec;
use super::lfm2::{self, Lfm2};
use crate::config::{
    read_decoder, read_routing, ArchConfig, CheckpointRenaming, Fields, HfConfig, ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry: onnxruntime-genai 0.18 runs it as `lfm2_moe` (LFM2's cache
/// layout).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "lfm2_moe",
    summary: "LFM2's short-conv and GQA layers; after `num_dense_layers` dense layers, sparse \
              SwiGLU experts (sigmoid router with `expert_bias`, renormalised, \
              `routed_scaling_factor`)",
    model_types: &[ModelType::generative("lfm2_moe", "lfm2_moe", read)],
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let plain = HfConfig {
        intermediate_size: raw.intermediate_size.or(Some(7168)),
        ..lfm2::plain_config(raw)
    };
    read_decoder(&plain, t, f, &lfm2::FIELDS, |dims| {
        let dense = match raw.num_dense_layers {
            Some(n) => f.index("num_dense_layers", n, MAX_LAYERS)?,
            None => 2,
        };
        let field = "moe_intermediate_size";
        let expert_width = f.optional_count(field, raw.moe_intermediate_size, 1792, MAX_WIDTH)?;
        let field = "routed_scaling_factor";
        let scale = f.number(field, raw.routed_scaling_factor, 1.0, Sign::Positive)?;
        Ok(Lfm2Moe {
            lfm2: lfm2::read_layout(raw, layers, dims.hidden_size, f)?,
            moe_layers: (0..layers).map(|i| i >= dense).collect(),
            routing: read_routing(raw, f, (32, 4))?,
            expert_width,
            router: GroupedRouter {
                sigmoid: true,
                correction_bias: raw.use_expert_bias.unwrap_or(true),
                groups: 1,
                top_groups: 1,
                group_score: GroupScore::TopTwoSum,
                normalize: raw.norm_topk_prob.unwrap_or(true),
                scale,
            },
        })
    })
}

/// LFM2-MoE's knobs: LFM2's layout and the experts.
#[derive(Debug, Clone, PartialEq)]
pub struct Lfm2Moe {
    /// The short-convolution layers and their shape.
    pub lfm2: Lfm2,
    /// Per layer, whether its MLP is a mixture of experts (every layer from
    /// `num_dense_layers` on).
    pub moe_layers: Vec<bool>,
    /// `(num_experts, num_experts_per_tok)`.
    pub routing: (usize, usize),
    /// `moe_intermediate_size`: each expert's width.
    pub expert_width: usize,
    /// The router (one group: no group limit).
    pub router: GroupedRouter,
}

/// The builder's names for LFM2-MoE's tensors: LFM2's, every other `feed_forward` module as
/// `mlp`, and the router's `expert_bias` as the grouped router's
/// `gate.e_score_correction_bias`.
fn checkpoint_name(name: &str) -> Option<String> {
    let name = lfm2::checkpoint_name(name)?;
    if name.contains(".feed_forward.expert_bias") {
        return Some(name.replacen(
            ".feed_forward.expert_bias",
            ".mlp.gate.e_score_correction_bias",
            1,
        ));
    }
    Some(name.replacen(".feed_forward.", ".mlp.", 1))
}

impl Family for Lfm2Moe {
    fn names(&self) -> Names {
        self.lfm2.names()
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn layer_norms(&self) -> LayerNorms {
        self.lfm2.layer_norms()
    }

    fn short_conv(&self, cfg: &ArchConfig, i: usize) -> Option<ShortConv> {
        self.lfm2.short_conv(cfg, i)
    }

    fn qk_norm_kind(&self, cfg: &ArchConfig) -> QkNorm {
        self.lfm2.qk_norm_kind(cfg)
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
        if !self.moe_layers[i] {
            return self.mlp(b, cfg, x, &mlp, dtype);
        }
        let router = Router::Grouped(self.router);
        let spec = MoeSpec::new(
            cfg,
            self.expert_width,
            self.routing,
            router,
            ExpertWeights::MIXTRAL,
        );
        spec.build(b, x, &mlp, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::Lfm2Moe;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "lfm2_moe", "hidden_size": 64, "intermediate_size": 96,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
            "vocab_size": 300, "max_position_embeddings": 128,
            "layer_types": ["conv", "full_attention", "conv"]"#,
            extra,
        )
    }

    #[test]
    fn dense_layers_then_experts_with_transformers_defaults() {
        let c = parse("").unwrap();
        // intermediate_size as given (LFM2 would derive 256 from it).
        assert_eq!(c.intermediate_size, 96);
        let k = c.knobs::<Lfm2Moe>().unwrap();
        assert_eq!(k.moe_layers, [false, false, true]);
        assert_eq!(k.lfm2.conv_layers, [true, false, true]);
        assert_eq!((k.routing, k.expert_width), ((32, 4), 1792));
        assert!(k.router.correction_bias && k.router.normalize);
        assert_eq!(k.router.scale, 1.0);
        let c = parse(
            r#", "num_dense_layers": 0, "use_expert_bias": false, "norm_topk_prob": false,
            "routed_scaling_factor": 2.5, "num_experts": 8, "num_experts_per_tok": 2"#,
        )
        .unwrap();
        let k = c.knobs::<Lfm2Moe>().unwrap();
        assert_eq!(k.moe_layers, [true; 3]);
        assert_eq!(k.routing, (8, 2));
        assert!(!k.router.correction_bias && !k.router.normalize);
        assert_eq!(k.router.scale, 2.5);
    }

    #[test]
    fn hostile_fields_are_refused_by_name() {
        for (field, bad) in [
            ("num_dense_layers", "-1"),
            ("routed_scaling_factor", "-2"),
            ("moe_intermediate_size", "0"),
            ("conv_L_cache", "1"),
            ("num_experts_per_tok", "64"),
        ] {
            let err = parse(&format!(r#", "{field}": {bad}"#)).unwrap_err();
            assert!(err.to_string().contains(field), "{field}: {err}");
        }
    }

    #[test]
    fn genai_config_gives_lfm2s_cache_layout() {
        let ep = crate::ep::get_ep("default").unwrap();
        let cfg = parse("").unwrap();
        let graph = crate::models::build_model(&cfg, crate::ir::DType::F32)
            .unwrap()
            .graph;
        let genai =
            crate::package::genai_config::genai_config(&cfg, "lfm2_moe", &ep, &graph, "model.onnx");
        let decoder = &genai["model"]["decoder"];
        let types = ["conv", "full_attention", "conv"];
        assert_eq!(decoder["layer_types"], serde_json::json!(types));
        assert_eq!(decoder["conv_cache_size"], 2);
        assert_eq!(decoder["inputs"]["past_conv_names"], "past.%d.conv");
    }
}
