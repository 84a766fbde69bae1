//! Sarvam's `sarvam_moe` (Sarvam-30B): transformers has no model of its own for it and runs
//! GLM-4.5-MoE's ([`super::glm4_moe`]) with SarvamMoEConfig's defaults: RoPE over the whole
//! head (`partial_rotary_factor` 1.0, theta 8e6), `head_dim` 64, per-head q/k RMSNorm
//! (`use_qk_norm`), 128 experts of width 1024, top-6, one shared, routed weights times 2.5,
//! and the original config's names for three fields (`num_experts`, `num_shared_experts`,
//! `use_qkv_bias`), read as its `attribute_map` reads them. Its checkpoints keep the
//! original tensor names, a fused `query_key_value` among them
//! ([`super::glm4_moe::original_name`]).

use super::family::FamilySpec;
use super::glm4_moe::{read_glm4_moe_as, Glm4MoeDefaults};
use crate::config::{read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `sarvam_moe` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "sarvam_moe",
    summary: "GLM-4.5-MoE's model with Sarvam's defaults: RoPE over the whole 64-channel head \
              (theta 8e6), per-head q/k RMSNorm, routed weights times 2.5; the original \
              config's names `num_experts`, `num_shared_experts`, `use_qkv_bias`; the \
              original checkpoint names (fused `query_key_value`)",
    model_types: &[ModelType::generative("sarvam_moe", "decoder", read)],
};

/// transformers' SarvamMoEConfig: head dim 64, `attention_bias` on q/k/v, RoPE theta 8e6 on
/// the whole head, untied, `rms_norm_eps` 1e-6; 128 experts of width 1024, top-6, one
/// shared, weights times 2.5, q/k RMSNorm.
const DEFAULTS: Glm4MoeDefaults = Glm4MoeDefaults {
    fields: DecoderFields {
        head_dim: Some(64),
        biases: Biases::Configured { mlp_bias: false },
        rope: |raw, head_dim, f| read_rope(raw, head_dim, 8_000_000.0, f),
        rms_norm_eps: 1e-6,
        ..DecoderFields::LLAMA
    },
    experts: (128, 6),
    width: 1024,
    shared: 1,
    scale: 2.5,
    qk_norm: true,
    original_names: true,
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_glm4_moe_as(&original_names(raw), t, f, &DEFAULTS)
}

/// `raw` with the original Sarvam and BharatGen configs' names read as transformers'
/// `attribute_map` reads them: `num_experts` is `n_routed_experts`, `num_shared_experts` is
/// `n_shared_experts`, `use_qkv_bias` is `attention_bias`.
pub fn original_names(raw: &HfConfig) -> HfConfig {
    HfConfig {
        n_routed_experts: raw.n_routed_experts.or(raw.num_experts),
        n_shared_experts: raw.n_shared_experts.or(raw.num_shared_experts),
        attention_bias: raw.attention_bias.or(raw.use_qkv_bias),
        ..raw.clone()
    }
}

#[cfg(test)]
mod tests {
    use crate::models::glm4_moe::Glm4Moe;

    const BASE: &str = r#""model_type": "sarvam_moe", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 3,
        "vocab_size": 300, "max_position_embeddings": 128"#;

    #[test]
    fn sarvam_moe_reads_its_defaults() {
        let c = crate::models::parse_fields(BASE, "").unwrap();
        let k = c.knobs::<Glm4Moe>().unwrap();
        assert_eq!((c.head_dim, c.rope.rotary_dim), (64, 64));
        assert_eq!(c.rope.theta, 8_000_000.0);
        assert!(!c.qkv_bias && !c.o_bias && !c.tie_word_embeddings && k.qk_norm);
        let e = &k.moe.experts;
        assert_eq!((e.experts, e.top_k, e.width, e.shared), (128, 6, 1024, 1));
        assert_eq!(e.moe_layers, [false, true, true]);
        assert_eq!((k.moe.router.groups, k.moe.router.scale), (1, 2.5));
    }

    #[test]
    fn sarvam_moe_reads_the_original_names() {
        let names = r#", "num_experts": 8, "num_shared_experts": 2, "use_qkv_bias": true"#;
        let c = crate::models::parse_fields(BASE, names).unwrap();
        let k = c.knobs::<Glm4Moe>().unwrap();
        assert_eq!((k.moe.experts.experts, k.moe.experts.shared), (8, 2));
        assert!(c.qkv_bias && !c.o_bias);
    }
}
