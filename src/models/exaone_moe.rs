//! EXAONE MoE (LG AI Research, transformers' ExaoneMoeForCausalLM, K-EXAONE): EXAONE 4's
//! attention (per-head q/k RMSNorm, sliding layers with RoPE, global layers without position
//! embedding) in pre-norm blocks, with, from layer `first_k_dense_replace` on (or where
//! `mlp_layer_types` says `sparse`), DeepSeek-V3's mixture of experts: `num_experts` SwiGLU
//! experts of `moe_intermediate_size` (router `mlp.gate`, experts `mlp.experts.{e}.*_proj`)
//! chosen by the grouped sigmoid router ([`super::components::GroupedRouter`]) with its
//! correction bias (`mlp.e_score_correction_bias` in checkpoints), plus a shared SwiGLU expert
//! `num_shared_experts` experts wide; the other layers keep a dense MLP of `intermediate_size`.

use super::decoder::{Family, LayerRope, QkNorm};
use super::deepseek::{sigmoid_router, DeepseekExperts, DeepseekMoe};
use super::exaone4::read_exaone4;
use super::family::FamilySpec;
use super::glm4_moe::mlp_layer_types;
use crate::config::{ArchConfig, CheckpointRenaming, Fields, HfConfig, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `exaone_moe` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "exaone_moe",
    summary: "EXAONE 4's hybrid attention in pre-norm blocks with DeepSeek-V3's experts \
              (grouped sigmoid router with a correction bias, a shared expert) after \
              `first_k_dense_replace` dense layers",
    model_types: &[ModelType::generative("exaone_moe", "decoder", read)],
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // ExaoneMoeConfig spells the expert counts `num_experts` and `num_shared_experts`; it has
    // no `n_routed_experts` or `n_shared_experts` (transformers ignores them).
    let raw = HfConfig {
        n_routed_experts: raw.num_experts,
        n_shared_experts: raw.num_shared_experts,
        ..raw.clone()
    };
    read_exaone4(&raw, t, f, |rope_layers| {
        // transformers' defaults: 64 experts, top-8, width 1024, one shared expert, one
        // leading dense layer; one group, sigmoid scores renormalised, times 2.5.
        let mut experts = DeepseekExperts::read(&raw, f, (64, Some(8)), 1024, 1, 1)?;
        if let Some(types) = &raw.mlp_layer_types {
            experts.moe_layers = mlp_layer_types(types, experts.moe_layers.len(), f)?;
        }
        let router = sigmoid_router(&raw, f, experts.experts, (1, 1), (true, 2.5))?;
        Ok(ExaoneMoe {
            rope_layers,
            moe: DeepseekMoe { experts, router },
        })
    })
}

/// Checkpoints keep the correction bias beside the router (`….mlp.e_score_correction_bias`);
/// the grouped router reads it inside (`….mlp.gate.e_score_correction_bias`).
fn checkpoint_name(name: &str) -> Option<String> {
    let bias = ".mlp.e_score_correction_bias";
    Some(match name.strip_suffix(bias) {
        Some(layer) => format!("{layer}.mlp.gate.e_score_correction_bias"),
        None => name.to_string(),
    })
}

/// EXAONE MoE's knobs: which layers rotate, and the mixture of experts.
#[derive(Debug, Clone, PartialEq)]
pub struct ExaoneMoe {
    /// Per layer, whether it applies RoPE (every sliding layer; every layer without a window).
    pub rope_layers: Vec<bool>,
    /// The experts, the layers that have them, and the router.
    pub moe: DeepseekMoe,
}

impl Family for ExaoneMoe {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers[i])
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
        let dense = |b: &mut GraphBuilder, mlp: &str| self.mlp(b, cfg, x, mlp, dtype);
        self.moe.layer(b, cfg, x, layer, i, dtype, dense)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::components::{GroupScore, GroupedRouter};

    /// The router EXAONE MoE's defaults give.
    const DEFAULT_ROUTER: GroupedRouter = GroupedRouter {
        sigmoid: true,
        correction_bias: true,
        groups: 1,
        top_groups: 1,
        group_score: GroupScore::TopTwoSum,
        normalize: true,
        scale: 2.5,
    };

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "exaone_moe", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 8192"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "n_routed_experts": 8, "n_shared_experts": 0"#).unwrap();
        let w = Some(4096);
        assert_eq!(cfg.layer_windows, [w, w, w, None]);
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (1e4, 1e-5));
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let k = cfg.knobs::<ExaoneMoe>().unwrap();
        assert_eq!(k.rope_layers, [true, true, true, false]);
        let e = &k.moe.experts;
        // num_experts / num_shared_experts are read, DeepSeek's spellings ignored.
        assert_eq!((e.experts, e.top_k, e.width, e.shared), (64, 8, 1024, 1));
        assert_eq!(e.moe_layers, [false, true, true, true]);
        assert_eq!(k.moe.router, DEFAULT_ROUTER);
        let typed = parse(
            r#", "num_experts": 4, "num_experts_per_tok": 2,
            "mlp_layer_types": ["sparse", "dense", "sparse", "dense"]"#,
        )
        .unwrap();
        let e = &typed.knobs::<ExaoneMoe>().unwrap().moe.experts;
        assert_eq!(e.moe_layers, [true, false, true, false]);
    }

    #[test]
    fn renames_the_correction_bias() {
        let bias = "model.layers.3.mlp.e_score_correction_bias";
        let want = "model.layers.3.mlp.gate.e_score_correction_bias";
        assert_eq!(checkpoint_name(bias).as_deref(), Some(want));
        let gate = "model.layers.3.mlp.gate.weight";
        assert_eq!(checkpoint_name(gate).as_deref(), Some(gate));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (
                r#", "num_experts": 4, "num_experts_per_tok": 5"#,
                "num_experts_per_tok",
            ),
            (
                r#", "num_experts": 6, "num_experts_per_tok": 2, "n_group": 4"#,
                "n_group",
            ),
            (r#", "mlp_layer_types": ["dense"]"#, "mlp_layer_types"),
            (r#", "sliding_window": null"#, "layer_types"),
            (r#", "partial_rotary_factor": 0.5"#, "partial_rotary_factor"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{extra}: {err}");
        }
    }
}
