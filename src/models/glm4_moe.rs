//! GLM-4.5 mixtures of experts: `glm4_moe`, a Llama-like decoder with partial RoPE (the first
//! `partial_rotary_factor` of each head, 0.5 by default, halves rotated), q/k/v biases with
//! `attention_bias` (never on `o_proj`) and optional per-head q/k RMSNorm (`use_qk_norm`); and
//! `glm4_moe_lite`, DeepSeek-V3's multi-head latent attention ([`super::deepseek`]) with its own
//! defaults and `mlp_layer_types` naming each layer's MLP `dense` or `sparse`. Both have
//! DeepSeek-V3's mixture of experts ([`DeepseekMoe`]: sigmoid router with
//! `e_score_correction_bias`, group-limited top-k, `routed_scaling_factor`, shared experts),
//! from layer `first_k_dense_replace` on (`glm4_moe`).

use super::components::Mla;
use super::decoder::{Family, QkNorm};
use super::deepseek::{
    mla_rope, read_mla_decoder, sigmoid_router, Deepseek, DeepseekExperts, DeepseekMoe, MlaDefaults,
};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "glm4_moe",
    summary: "DeepSeek-V3's mixture of experts (sigmoid router with `e_score_correction_bias`, \
              group-limited top-k, shared experts); glm4_moe: partial RoPE (0.5 by default), \
              q/k/v biases, optional per-head q/k RMSNorm (`use_qk_norm`); glm4_moe_lite: \
              DeepSeek-V3's multi-head latent attention, MoE layers named by `mlp_layer_types`",
    model_types: &[
        ModelType::generative("glm4_moe", "decoder", read_glm4_moe),
        ModelType::generative("glm4_moe_lite", "decoder", read_lite),
    ],
};

/// transformers' Glm4MoeConfig: `attention_bias` on q/k/v (o_proj has none, set after
/// reading), no MLP bias, RoPE theta 1e4 on half of each head by default, untied,
/// `rms_norm_eps` 1e-5.
const GLM4_MOE: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| {
        let raw = HfConfig {
            partial_rotary_factor: raw.partial_rotary_factor.or(Some(0.5)),
            ..raw.clone()
        };
        read_rope(&raw, head_dim, 10_000.0, f)
    },
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read_glm4_moe(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let mut cfg = read_decoder(raw, t, f, &GLM4_MOE, |_| {
        let experts = DeepseekExperts::read(raw, f, (128, Some(8)), 1408, 1, 1)?;
        let router = sigmoid_router(raw, f, experts.experts, (1, 1), (true, 1.0))?;
        Ok(Glm4Moe {
            moe: DeepseekMoe { experts, router },
            qk_norm: raw.use_qk_norm.unwrap_or(false),
        })
    })?;
    cfg.o_bias = false;
    Ok(cfg)
}

/// transformers' Glm4MoeLiteConfig: as DeepSeek-V3's, with `rms_norm_eps` 1e-5.
const LITE: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, _, f| mla_rope(raw, 64, raw.rope_interleave.unwrap_or(true), f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Glm4MoeLiteConfig's MLA: q rank 768, latent 512, 192 + 64 q/k channels, 256 v channels.
const LITE_MLA: MlaDefaults = (Some(768), 512, 192, 64, Some(256));

fn read_lite(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_mla_decoder(raw, t, f, &LITE, LITE_MLA, |mla: Mla| {
        let mut experts = DeepseekExperts::read(raw, f, (64, Some(4)), 1536, 1, 1)?;
        if let Some(types) = &raw.mlp_layer_types {
            experts.moe_layers = mlp_layer_types(types, experts.moe_layers.len(), f)?;
        }
        let router = sigmoid_router(raw, f, experts.experts, (1, 1), (true, 1.8))?;
        Ok(Deepseek {
            mla,
            moe: DeepseekMoe { experts, router },
        })
    })
}

/// Per layer, whether `mlp_layer_types` names it `sparse` (`dense` otherwise); one entry per
/// layer.
pub fn mlp_layer_types(types: &[String], layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "mlp_layer_types";
    if types.len() != layers {
        return Err(f.err(
            field,
            &format!(
                "has {} entries, expected num_hidden_layers = {layers}",
                types.len()
            ),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "sparse" => Ok(true),
            "dense" => Ok(false),
            other => Err(f.err(field, &format!("`{other}` (expected dense or sparse)"))),
        })
        .collect()
}

/// GLM-4.5-MoE's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Glm4Moe {
    /// The mixture of experts.
    pub moe: DeepseekMoe,
    /// `use_qk_norm`: per-head RMSNorm on q and k.
    pub qk_norm: bool,
}

impl Family for Glm4Moe {
    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        match self.qk_norm {
            true => QkNorm::PerHead,
            false => QkNorm::Off,
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
        let dense = |b: &mut GraphBuilder, mlp: &str| self.mlp(b, cfg, x, mlp, dtype);
        self.moe.layer(b, cfg, x, layer, i, dtype, dense)
    }
}

#[cfg(test)]
mod tests {
    use super::Glm4Moe;
    use crate::models::deepseek::Deepseek;

    const BASE: &str = r#""hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 300,
        "max_position_embeddings": 128, "n_routed_experts": 8"#;

    #[test]
    fn glm4_moe_reads_its_defaults() {
        let fields = format!(r#""model_type": "glm4_moe", {BASE}"#);
        let c = crate::models::parse_fields(&fields, r#", "attention_bias": true"#).unwrap();
        let k = c.knobs::<Glm4Moe>().unwrap();
        assert_eq!(
            (c.head_dim, c.rope.rotary_dim, c.rope.interleaved),
            (16, 8, false)
        );
        assert!(c.qkv_bias && !c.o_bias && !k.qk_norm);
        assert_eq!(k.moe.experts.moe_layers, [false, true, true]);
        assert_eq!((k.moe.router.groups, k.moe.router.scale), (1, 1.0));
        assert!(k.moe.router.sigmoid && k.moe.router.normalize);
    }

    #[test]
    fn glm4_moe_lite_reads_mlp_layer_types() {
        let fields = format!(
            r#""model_type": "glm4_moe_lite", {BASE}, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "v_head_dim": 16"#
        );
        let types = r#", "mlp_layer_types": ["sparse", "dense", "sparse"]"#;
        let c = crate::models::parse_fields(&fields, types).unwrap();
        let k = c.knobs::<Deepseek>().unwrap();
        assert_eq!(k.moe.experts.moe_layers, [true, false, true]);
        assert_eq!((k.moe.experts.top_k, k.moe.router.scale), (4, 1.8));
        let err = crate::models::parse_fields(&fields, r#", "mlp_layer_types": ["dense"]"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("mlp_layer_types"), "{err}");
    }
}
