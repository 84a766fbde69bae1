//! GLM-4.5 mixtures of experts: `glm4_moe`, a Llama-like decoder with partial RoPE (the first
//! `partial_rotary_factor` of each head, 0.5 by default, halves rotated), q/k/v biases with
//! `attention_bias` (never on `o_proj`) and optional per-head q/k RMSNorm (`use_qk_norm`); and
//! `glm4_moe_lite`, DeepSeek-V3's multi-head latent attention ([`super::deepseek`]) with its own
//! defaults and `mlp_layer_types` naming each layer's MLP `dense` or `sparse`. Both have
//! DeepSeek-V3's mixture of experts ([`DeepseekMoe`]: sigmoid router with
//! `e_score_correction_bias`, group-limited top-k, `routed_scaling_factor`, shared experts),
//! from layer `first_k_dense_replace` on (`glm4_moe`). transformers runs `sarvam_moe` and
//! `param2moe` with `glm4_moe`'s model: their families read their own defaults into it
//! ([`read_glm4_moe_as`]).

use super::components::{fused_qkv, FusedQkv, Mla};
use super::decoder::{plain_qkv, Family, QkNorm};
use super::deepseek::{
    mla_rope, read_mla_decoder, sigmoid_router, Deepseek, DeepseekExperts, DeepseekMoe, MlaDefaults,
};
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields,
    HfConfig, ModelType,
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

/// What a config class that transformers runs with Glm4MoeForCausalLM sets apart
/// (Glm4MoeConfig's own, Sarvam's `sarvam_moe`, BharatGen's `param2moe`): its Llama-like
/// fields and its expert defaults. The first layer is dense in every one of them
/// (`first_k_dense_replace` 1), the router sigmoid with one group, renormalised.
#[derive(Debug, Clone, Copy)]
pub struct Glm4MoeDefaults {
    /// Head dim, biases, RoPE (theta and the rotated fraction of each head), tying, epsilon.
    pub fields: DecoderFields,
    /// `n_routed_experts` and `num_experts_per_tok`.
    pub experts: (usize, usize),
    /// `moe_intermediate_size`: each routed expert's width.
    pub width: usize,
    /// `n_shared_experts`.
    pub shared: usize,
    /// `routed_scaling_factor`.
    pub scale: f64,
    /// `use_qk_norm`.
    pub qk_norm: bool,
    /// Whether checkpoints carry the original Sarvam and BharatGen names (see
    /// [`Glm4Moe::original_names`]).
    pub original_names: bool,
}

/// transformers' Glm4MoeConfig: `attention_bias` on q/k/v (o_proj has none, set after
/// reading), no MLP bias, RoPE theta 1e4 on half of each head by default, untied,
/// `rms_norm_eps` 1e-5; 128 experts of width 1408, top-8, one shared, weights unscaled.
const GLM4_MOE: Glm4MoeDefaults = Glm4MoeDefaults {
    fields: DecoderFields {
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
    },
    experts: (128, 8),
    width: 1408,
    shared: 1,
    scale: 1.0,
    qk_norm: false,
    original_names: false,
};

fn read_glm4_moe(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_glm4_moe_as(raw, t, f, &GLM4_MOE)
}

/// Reads a config.json that transformers runs with Glm4MoeForCausalLM, `defaults` standing
/// in for the fields it lacks.
pub fn read_glm4_moe_as(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    defaults: &Glm4MoeDefaults,
) -> Result<ArchConfig> {
    let (experts, top_k) = defaults.experts;
    let mut cfg = read_decoder(raw, t, f, &defaults.fields, |_| {
        let experts = DeepseekExperts::read(
            raw,
            f,
            (experts, Some(top_k)),
            defaults.width,
            defaults.shared,
            1,
        )?;
        let router = sigmoid_router(raw, f, experts.experts, (1, 1), (true, defaults.scale))?;
        Ok(Glm4Moe {
            moe: DeepseekMoe { experts, router },
            qk_norm: raw.use_qk_norm.unwrap_or(defaults.qk_norm),
            original_names: defaults.original_names,
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
    /// The checkpoint names of Sarvam's and BharatGen's originals, which transformers converts
    /// on loading and writes back on saving: `model.word_embeddings`, a layer's `attention`
    /// with one `query_key_value` (q, k and v rows as three blocks), `dense`,
    /// `query_layernorm`, `key_layernorm`, and the router's `expert_bias`
    /// ([`original_name`]).
    pub original_names: bool,
}

/// The name transformers gives tensor `name` of a Sarvam or BharatGen original checkpoint
/// (the fused `query_key_value` keeps its name: [`Glm4Moe`] cuts q, k and v from it).
pub fn original_name(name: &str) -> Option<String> {
    let mut out = match name.strip_prefix("model.word_embeddings.") {
        Some(rest) => format!("model.embed_tokens.{rest}"),
        None => name.to_string(),
    };
    for (old, new) in [
        (".attention.", ".self_attn."),
        (".self_attn.dense.", ".self_attn.o_proj."),
        (".self_attn.query_layernorm.", ".self_attn.q_norm."),
        (".self_attn.key_layernorm.", ".self_attn.k_norm."),
        (".mlp.gate.expert_bias", ".mlp.gate.e_score_correction_bias"),
    ] {
        out = out.replace(old, new);
    }
    Some(out)
}

impl Family for Glm4Moe {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        self.original_names
            .then_some(original_name as CheckpointRenaming)
    }

    /// q, k and v: three projections, or with the original names three blocks of rows of the
    /// fused `query_key_value`, cut when the model is saved.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        if !self.original_names {
            return plain_qkv(b, cfg, x, attn, dtype);
        }
        let layout = FusedQkv::blocks(cfg.q_size(), cfg.kv_size());
        let fused = format!("{attn}.query_key_value");
        let (h, bias) = (cfg.hidden_size, cfg.qkv_bias);
        fused_qkv(b, x, attn, &fused, &layout, h, bias, dtype)
    }

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
    use super::{original_name, Glm4Moe};
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

    #[test]
    fn original_names_are_transformers_names() {
        let layer = "model.layers.3";
        for (original, ours) in [
            ("model.word_embeddings.weight", "model.embed_tokens.weight"),
            ("model.embed_tokens.weight", "model.embed_tokens.weight"),
            ("attention.dense.weight", "self_attn.o_proj.weight"),
            (
                "attention.query_layernorm.weight",
                "self_attn.q_norm.weight",
            ),
            ("attention.key_layernorm.weight", "self_attn.k_norm.weight"),
            (
                "attention.query_key_value.bias",
                "self_attn.query_key_value.bias",
            ),
            ("mlp.gate.expert_bias", "mlp.gate.e_score_correction_bias"),
            (
                "mlp.experts.2.up_proj.weight",
                "mlp.experts.2.up_proj.weight",
            ),
        ] {
            let (original, ours) = match original.starts_with("model.") {
                true => (original.to_string(), ours.to_string()),
                false => (format!("{layer}.{original}"), format!("{layer}.{ours}")),
            };
            assert_eq!(original_name(&original), Some(ours));
        }
    }
}
