//! BharatGen's `param2moe` (Param2-17B-A2.4B): transformers has no model of its own for it and
//! runs GLM-4.5-MoE's ([`super::glm4_moe`]) with Param2MoeConfig's defaults: RoPE over the
//! whole head (`partial_rotary_factor` 1.0, theta 5e5), `head_dim` 64, per-head q/k RMSNorm
//! (`use_qk_norm`), 64 experts of width 2048, top-6, two shared, routed weights times 2.5,
//! tied embeddings, and the original config's and checkpoint's names read as Sarvam's are
//! ([`super::sarvam_moe::original_names`], [`super::glm4_moe::original_name`]).

use super::family::FamilySpec;
use super::glm4_moe::{read_glm4_moe_as, Glm4MoeDefaults};
use super::sarvam_moe::original_names;
use crate::config::{read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `param2moe` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "param2moe",
    summary: "GLM-4.5-MoE's model with Param2's defaults: RoPE over the whole 64-channel head \
              (theta 5e5), per-head q/k RMSNorm, two shared experts, tied embeddings; Sarvam's \
              original names",
    model_types: &[ModelType::generative("param2moe", "decoder", read)],
};

/// transformers' Param2MoeConfig: head dim 64, `attention_bias` on q/k/v, RoPE theta 5e5 on
/// the whole head, tied, `rms_norm_eps` 1e-6; 64 experts of width 2048, top-6, two shared,
/// weights times 2.5, q/k RMSNorm.
const DEFAULTS: Glm4MoeDefaults = Glm4MoeDefaults {
    fields: DecoderFields {
        head_dim: Some(64),
        biases: Biases::Configured { mlp_bias: false },
        rope: |raw, head_dim, f| read_rope(raw, head_dim, 500_000.0, f),
        tie_word_embeddings: true,
        rms_norm_eps: 1e-6,
        ..DecoderFields::LLAMA
    },
    experts: (64, 6),
    width: 2048,
    shared: 2,
    scale: 2.5,
    qk_norm: true,
    original_names: true,
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_glm4_moe_as(&original_names(raw), t, f, &DEFAULTS)
}

#[cfg(test)]
mod tests {
    use crate::models::glm4_moe::Glm4Moe;

    #[test]
    fn param2moe_reads_its_defaults() {
        let fields = r#""model_type": "param2moe", "hidden_size": 64,
            "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 128"#;
        let c = crate::models::parse_fields(fields, "").unwrap();
        let k = c.knobs::<Glm4Moe>().unwrap();
        assert_eq!((c.head_dim, c.rope.rotary_dim), (64, 64));
        assert_eq!(c.rope.theta, 500_000.0);
        assert!(c.tie_word_embeddings && k.qk_norm);
        let e = &k.moe.experts;
        assert_eq!((e.experts, e.top_k, e.width, e.shared), (64, 6, 2048, 2));
        assert_eq!(k.moe.router.scale, 2.5);
    }
}
