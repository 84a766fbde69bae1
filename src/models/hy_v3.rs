//! Tencent's HY-V3 (`hy_v3`, Hy3): Llama's attention (biases on q, k, v and o with
//! `attention_bias`) with a per-head RMSNorm on q and k before RoPE (theta 11158840 by
//! default, head dim 128), and after the dense layers `mlp_layer_types` names (by default the
//! first) a mixture of experts: `num_experts` SwiGLU experts of `moe_intermediate_size`
//! chosen by their sigmoid scores plus a per-expert correction (`e_score_correction_bias`),
//! weighted by the scores renormalised, times `router_scaling_factor` (DeepSeek-V3's router
//! with one group: [`DeepseekMoe`]), plus a shared SwiGLU MLP `num_shared_experts` expert
//! widths wide (with `mlp_bias` as the dense MLP). Checkpoints keep the original names
//! (`mlp.router.gate`, `mlp.expert_bias`, `mlp.shared_mlp`), which transformers converts on
//! loading and writes back on saving ([`checkpoint_name`]).

use super::components::{gated_mlp, GateActivation, GroupScore, GroupedRouter};
use super::decoder::{Family, QkNorm};
use super::deepseek::{DeepseekExperts, DeepseekMoe};
use super::family::{without_windows, FamilySpec};
use super::glm4_moe::mlp_layer_types;
use crate::config::{
    read_decoder, read_rope, ArchConfig, CheckpointRenaming, DecoderFields, Fields, HfConfig,
    ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_EXPERTS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `hy_v3` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "hy_v3",
    summary: "per-head q/k RMSNorm; experts after the dense layers `mlp_layer_types` names, \
              sigmoid router with a correction bias, renormalised, times \
              `router_scaling_factor`, a shared expert; original checkpoint names",
    model_types: &[ModelType::generative("hy_v3", "decoder", read)],
};

/// transformers' HYV3Config: head dim 128, `attention_bias` and `mlp_bias` honoured, RoPE
/// theta 11158840, untied, `rms_norm_eps` 1e-5.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 11_158_840.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // HYV3Config has no sliding window or layer types: transformers ignores them.
    let raw = without_windows(raw);
    read_decoder(&raw, t, f, &FIELDS, |cfg| {
        let experts = f.optional_count("num_experts", raw.num_experts, 192, MAX_EXPERTS)?;
        let k_field = "num_experts_per_tok";
        let top_k = f.optional_count(k_field, raw.num_experts_per_tok, 8, MAX_EXPERTS)?;
        if top_k > experts {
            return Err(f.err(
                k_field,
                &format!("{top_k} is more than the {experts} experts of a layer"),
            ));
        }
        let width = f.optional_count(
            "moe_intermediate_size",
            raw.moe_intermediate_size,
            1536,
            MAX_WIDTH,
        )?;
        let shared = match raw.num_shared_experts {
            Some(n) => f.index("num_shared_experts", n, MAX_EXPERTS)?,
            None => 1,
        };
        let layers = cfg.num_hidden_layers;
        let moe_layers = match &raw.mlp_layer_types {
            Some(types) => mlp_layer_types(types, layers, f)?,
            None => (0..layers).map(|i| i >= 1).collect(),
        };
        let scale = f.number(
            "router_scaling_factor",
            raw.router_scaling_factor,
            2.826,
            Sign::Positive,
        )?;
        let router = GroupedRouter {
            sigmoid: true,
            correction_bias: true,
            groups: 1,
            top_groups: 1,
            group_score: GroupScore::TopTwoSum,
            normalize: true,
            scale,
        };
        // The shared MLP is built here (it has `mlp_bias`), not by DeepseekMoe.
        let experts = DeepseekExperts {
            experts,
            top_k,
            width,
            shared: 0,
            moe_layers,
        };
        Ok(HyV3 {
            moe: DeepseekMoe { experts, router },
            shared_width: width * shared,
        })
    })
}

/// The name transformers gives tensor `name` of an original HY-V3 checkpoint: the router
/// `mlp.router.gate` is `mlp.gate`, the shared MLP `mlp.shared_mlp` is `mlp.shared_experts`,
/// and the correction bias (`mlp.expert_bias`, transformers' `mlp.e_score_correction_bias`)
/// is read as the router's, where [`GroupedRouter`] reads it.
pub fn checkpoint_name(name: &str) -> Option<String> {
    let mut out = name.to_string();
    for (old, new) in [
        (".mlp.router.gate.", ".mlp.gate."),
        (".mlp.shared_mlp.", ".mlp.shared_experts."),
        (".mlp.expert_bias", ".mlp.gate.e_score_correction_bias"),
        (
            ".mlp.e_score_correction_bias",
            ".mlp.gate.e_score_correction_bias",
        ),
    ] {
        out = out.replace(old, new);
    }
    Some(out)
}

/// HY-V3's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct HyV3 {
    /// The routed experts, the layers that have them and their router.
    pub moe: DeepseekMoe,
    /// The shared MLP's width (`num_shared_experts · moe_intermediate_size`; 0: none).
    pub shared_width: usize,
}

impl Family for HyV3 {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
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
        let y = self.moe.layer(b, cfg, x, layer, i, dtype, dense);
        if !self.moe.experts.moe_layers[i] || self.shared_width == 0 {
            return y;
        }
        let shared = format!("{layer}.mlp.shared_experts");
        let sizes = (cfg.hidden_size, self.shared_width);
        let silu = GateActivation::Silu;
        let shared = gated_mlp(b, x, &shared, sizes, cfg.mlp_bias, silu, dtype);
        b.op("Add", &[&y, &shared], vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#""model_type": "hy_v3", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 3,
        "vocab_size": 300, "max_position_embeddings": 128"#;

    #[test]
    fn hy_v3_reads_its_defaults() {
        let c = crate::models::parse_fields(BASE, r#", "sliding_window": 4"#).unwrap();
        let k = c.knobs::<HyV3>().unwrap();
        assert_eq!(
            (c.head_dim, c.rope.rotary_dim, c.rope.theta),
            (128, 128, 11_158_840.0)
        );
        assert!(!c.qkv_bias && !c.o_bias && !c.mlp_bias && !c.tie_word_embeddings);
        assert_eq!(c.layer_windows, [None, None, None]);
        let e = &k.moe.experts;
        assert_eq!(
            (e.experts, e.top_k, e.width, k.shared_width),
            (192, 8, 1536, 1536)
        );
        assert_eq!(e.moe_layers, [false, true, true]);
        assert_eq!((k.moe.router.scale, k.moe.router.groups), (2.826, 1));
        assert!(k.moe.router.sigmoid && k.moe.router.correction_bias && k.moe.router.normalize);
    }

    #[test]
    fn hy_v3_reads_its_fields() {
        let fields = r#", "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 2,
            "moe_intermediate_size": 32, "router_scaling_factor": 1.5, "mlp_bias": true,
            "mlp_layer_types": ["sparse", "dense", "sparse"]"#;
        let c = crate::models::parse_fields(BASE, fields).unwrap();
        let k = c.knobs::<HyV3>().unwrap();
        assert_eq!((k.moe.experts.experts, k.shared_width), (8, 64));
        assert_eq!(k.moe.experts.moe_layers, [true, false, true]);
        assert_eq!(k.moe.router.scale, 1.5);
        assert!(c.mlp_bias);
        for (extra, field) in [
            (r#", "num_experts": 2"#, "num_experts_per_tok"),
            (r#", "router_scaling_factor": -1"#, "router_scaling_factor"),
            (r#", "mlp_layer_types": ["dense"]"#, "mlp_layer_types"),
        ] {
            let err = crate::models::parse_fields(BASE, extra)
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{extra}: {err}");
        }
    }

    #[test]
    fn original_names_are_transformers_names() {
        for (original, ours) in [
            ("router.gate.weight", "gate.weight"),
            ("expert_bias", "gate.e_score_correction_bias"),
            ("e_score_correction_bias", "gate.e_score_correction_bias"),
            ("shared_mlp.up_proj.weight", "shared_experts.up_proj.weight"),
            ("experts.3.down_proj.weight", "experts.3.down_proj.weight"),
        ] {
            let name = format!("model.layers.1.mlp.{original}");
            let want = format!("model.layers.1.mlp.{ours}");
            assert_eq!(checkpoint_name(&name), Some(want));
        }
    }
}
