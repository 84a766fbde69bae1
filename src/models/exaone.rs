//! EXAONE 3 / 3.5 (LG AI Research): transformers builds it as Llama (LlamaForCausalLM). Its
//! config.json may name fields its own way (`num_layers`, `layer_norm_epsilon`,
//! `activation_function`), RoPE theta is 5e5 by default, and the hub's checkpoints use
//! GPT-2-like module names (`transformer.h.{i}.attn.attention.q_proj`, `ln_1`, `c_fc_0` …),
//! read here under Llama's as transformers renames them on loading.

use super::decoder::Family;
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, CheckpointRenaming, DecoderFields, Fields, HfConfig,
};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `exaone` type; its `llama`
/// type is the same decoder.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "exaone",
    summary: "Llama read from EXAONE 3's config and `transformer.h.*` checkpoint names",
    model_types: &[ModelType::generative("exaone", "llama", read)],
};

/// transformers' ExaoneConfig: Llama's fields, RoPE theta 5e5, `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 500_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // ExaoneConfig's own names for three Llama fields; it has no sliding window or layer
    // types (transformers never slides).
    let raw = HfConfig {
        num_hidden_layers: raw.num_hidden_layers.or(raw.num_layers),
        rms_norm_eps: raw.rms_norm_eps.or(raw.layer_norm_epsilon),
        hidden_act: raw.hidden_act.clone().or(raw.activation_function.clone()),
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |_| Ok(Exaone))
}

/// EXAONE's hooks: its checkpoint names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exaone;

impl Family for Exaone {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }
}

/// The hub's EXAONE module names and Llama's, in the order they are replaced (prefixes of the
/// whole name, then names inside a layer).
const PREFIXES: [(&str, &str); 3] = [
    ("transformer.wte.", "model.embed_tokens."),
    ("transformer.h.", "model.layers."),
    ("transformer.ln_f.", "model.norm."),
];
const INNER: [(&str, &str); 7] = [
    (".attn.attention.", ".self_attn."),
    (".self_attn.out_proj.", ".self_attn.o_proj."),
    (".ln_1.", ".input_layernorm."),
    (".ln_2.", ".post_attention_layernorm."),
    (".mlp.c_fc_0.", ".mlp.gate_proj."),
    (".mlp.c_fc_1.", ".mlp.up_proj."),
    (".mlp.c_proj.", ".mlp.down_proj."),
];

/// A checkpoint tensor's name as the builder reads it: the hub's EXAONE names in Llama's
/// spelling; Llama's names (transformers 5's own saves) unchanged.
pub fn checkpoint_name(name: &str) -> Option<String> {
    let mut out = name.to_string();
    for (old, new) in PREFIXES {
        if let Some(rest) = out.strip_prefix(old) {
            out = format!("{new}{rest}");
        }
    }
    for (old, new) in INNER {
        out = out.replace(old, new);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "exaone", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 128"#,
            extra,
        )
    }

    #[test]
    fn reads_exaone_names_and_defaults() {
        let cfg = parse(
            r#", "num_layers": 3, "layer_norm_epsilon": 1e-6,
            "activation_function": "silu", "sliding_window": 4"#,
        )
        .unwrap();
        assert_eq!((cfg.num_hidden_layers, cfg.rms_norm_eps), (3, 1e-6));
        assert_eq!((cfg.rope.theta, cfg.layer_windows.len()), (500_000.0, 3));
        assert!(cfg.layer_windows.iter().all(Option::is_none));
        assert!(!cfg.qkv_bias && !cfg.tie_word_embeddings);
        let llama_names = parse(r#", "num_hidden_layers": 2"#).unwrap();
        assert_eq!(
            (llama_names.num_hidden_layers, llama_names.rms_norm_eps),
            (2, 1e-5)
        );
        let err = parse(r#", "num_layers": 2, "activation_function": "gelu""#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("hidden_act"), "{err}");
        assert!(parse("")
            .unwrap_err()
            .to_string()
            .contains("num_hidden_layers"));
    }

    #[test]
    fn hub_checkpoint_names_read_as_llama() {
        for (hub, llama) in [
            ("transformer.wte.weight", "model.embed_tokens.weight"),
            ("transformer.ln_f.weight", "model.norm.weight"),
            (
                "transformer.h.3.attn.attention.q_proj.weight",
                "model.layers.3.self_attn.q_proj.weight",
            ),
            (
                "transformer.h.0.attn.attention.out_proj.weight",
                "model.layers.0.self_attn.o_proj.weight",
            ),
            (
                "transformer.h.1.ln_1.weight",
                "model.layers.1.input_layernorm.weight",
            ),
            (
                "transformer.h.1.ln_2.weight",
                "model.layers.1.post_attention_layernorm.weight",
            ),
            (
                "transformer.h.2.mlp.c_fc_0.weight",
                "model.layers.2.mlp.gate_proj.weight",
            ),
            (
                "transformer.h.2.mlp.c_fc_1.weight",
                "model.layers.2.mlp.up_proj.weight",
            ),
            (
                "transformer.h.2.mlp.c_proj.weight",
                "model.layers.2.mlp.down_proj.weight",
            ),
            ("lm_head.weight", "lm_head.weight"),
            (
                "model.layers.0.mlp.up_proj.weight",
                "model.layers.0.mlp.up_proj.weight",
            ),
        ] {
            assert_eq!(checkpoint_name(hub).as_deref(), Some(llama), "{hub}");
        }
    }
}
