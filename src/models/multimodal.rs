//! The text decoder of an image-text checkpoint (`gemma3`: Gemma3ForConditionalGeneration,
//! `mistral3`: Mistral3ForConditionalGeneration, `qwen3_5` / `qwen3_5_moe`:
//! Qwen3_5(Moe)ForConditionalGeneration). mobius builds its language model alone, as the
//! registered text family of `text_config.model_type` builds it: the config read from
//! `text_config` (with the outer fields transformers reads from there: dtype, token ids, tied
//! embeddings), the tensors from the checkpoint's `language_model` prefixes. The vision tower and
//! the projector are not exported; onnxruntime-genai runs the result as a text model.

use serde_json::{Map, Value};

use crate::config::{
    ArchConfig, CheckpointRenaming, FamilyKnobs, Fields, HfConfig, Knobs, ModelType, ReadConfig,
};
use crate::ir::{DType, Graph};
use crate::role::Role;
use crate::{Error, Result};

/// How an image-text model type holds its text decoder.
#[derive(Debug)]
pub struct TextPart {
    /// The text model type when `text_config` names none (transformers' default sub-config).
    pub default_type: &'static str,
    /// The registered text model types `text_config` may be.
    pub text_types: &'static [TextType],
    /// What the image-text class changes in the text family's knobs (e.g. Gemma 3's head does
    /// not soft-cap the logits).
    pub decoder: fn(&Knobs) -> Knobs,
}

/// A text model type of a [`TextPart`].
#[derive(Debug)]
pub struct TextType {
    /// Its registered `model_type`.
    pub name: &'static str,
    /// transformers' config-class defaults of the fields a saved `text_config` may leave out
    /// (a JSON object): transformers writes a nested config as its difference from them.
    pub defaults: &'static str,
    /// How its config reads: as its registered `model_type` reads.
    pub read: ReadConfig,
}

/// Fields transformers reads from the outer config (generation takes token ids from there
/// first; dtype and the head's tying are the whole model's) over `text_config`'s.
const OUTER_FIELDS: [&str; 6] = [
    "dtype",
    "torch_dtype",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
];

/// Reads the text decoder of image-text model type `outer` (`raw` is its config.json) as
/// `part` says. Errors name `text_config.<field>`, or the outer field where the value came from
/// there.
pub fn read_text_part(
    raw: &HfConfig,
    outer: &'static ModelType,
    f: &Fields<'_>,
    part: &TextPart,
) -> Result<ArchConfig> {
    let text = match &raw.text_config {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => {
            return Err(f.err(
                "text_config",
                "missing (expected an object: the config of the text decoder)",
            ))
        }
        Some(other) => return Err(f.err("text_config", &format!("{other} (expected an object)"))),
    };
    let text_type = match text.get("model_type") {
        None | Some(Value::Null) => part.default_type,
        Some(Value::String(name)) => name.as_str(),
        Some(other) => {
            return Err(f.err(
                "text_config.model_type",
                &format!("{other} (expected a string)"),
            ))
        }
    };
    let known: Vec<&str> = part.text_types.iter().map(|t| t.name).collect();
    let entry = part
        .text_types
        .iter()
        .find(|t| t.name == text_type)
        .ok_or_else(|| {
            f.err(
                "text_config.model_type",
                &format!(
                    "`{text_type}` is not a text model mobius builds for {} (expected {})",
                    outer.name,
                    known.join(" or ")
                ),
            )
        })?;
    let (merged, from_outer) = merge(raw, text, entry)?;
    let text_raw = HfConfig::parse(&merged, f.path).map_err(|e| match e {
        Error::Json { message, .. } => f.err("text_config", &message),
        other => other,
    })?;
    let cfg = (entry.read)(&text_raw, outer, f).map_err(|e| match e {
        Error::ConfigField {
            path,
            field,
            message,
        } => {
            let key = field.split('.').next().unwrap_or_default();
            let field = if from_outer.contains(&key) {
                field
            } else {
                format!("text_config.{field}")
            };
            Error::ConfigField {
                path,
                field,
                message,
            }
        }
        other => other,
    })?;
    tracing::info!(
        "{}: {} is an image-text model; its text decoder is built, the vision part is not \
         exported",
        f.path.display(),
        outer.name
    );
    Ok(ArchConfig {
        family: Knobs::new(TextDecoder {
            decoder: (part.decoder)(&cfg.family),
        }),
        ..cfg
    })
}

/// The text config as transformers reads it: the text class's defaults, `text_config` over
/// them, then the outer fields it reads from the whole config; with the outer fields used.
fn merge(
    raw: &HfConfig,
    text: &Map<String, Value>,
    entry: &TextType,
) -> Result<(Vec<u8>, Vec<&'static str>)> {
    let mut merged: Map<String, Value> = serde_json::from_str(entry.defaults).map_err(|e| {
        Error::Graph(format!(
            "the built-in text_config defaults of {} are not a JSON object: {e}",
            entry.name
        ))
    })?;
    merged.extend(text.iter().map(|(k, v)| (k.clone(), v.clone())));
    let outer = [
        raw.dtype.clone().map(Value::from),
        raw.torch_dtype.clone().map(Value::from),
        raw.tie_word_embeddings.map(Value::from),
        raw.bos_token_id.clone(),
        raw.eos_token_id.clone(),
        raw.pad_token_id.clone(),
    ];
    let mut from_outer = Vec::new();
    for (key, value) in OUTER_FIELDS.into_iter().zip(outer) {
        if let Some(value) = value.filter(|v| !v.is_null()) {
            merged.insert(key.to_string(), value);
            from_outer.push(key);
        }
    }
    let bytes = serde_json::to_vec(&Value::Object(merged))
        .map_err(|e| Error::Graph(format!("text_config does not serialise: {e}")))?;
    Ok((bytes, from_outer))
}

/// The knobs of a text decoder read out of an image-text checkpoint: its text family's, with
/// the checkpoint's tensors renamed to the text family's names.
#[derive(Debug, Clone, PartialEq)]
pub struct TextDecoder {
    /// The text family's knobs (they build the graph).
    pub decoder: Knobs,
}

impl FamilyKnobs for TextDecoder {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        self.decoder.build(cfg, dtype)
    }

    fn role(&self) -> Role {
        self.decoder.role()
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(text_tensor)
    }
}

/// Where image-text checkpoints keep their text decoder, and the names its text family reads:
/// saved checkpoints write `language_model.model.*` and `language_model.lm_head.*`,
/// transformers 5 in memory `model.language_model.*`.
const TEXT_PREFIXES: [(&str, &str); 3] = [
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("model.language_model.", "model."),
];

/// The vision tower and the projector (not exported); Qwen3.5's (`model.visual.*`) with its
/// merger inside.
const VISION_PREFIXES: [&str; 5] = [
    "vision_tower.",
    "multi_modal_projector.",
    "model.vision_tower.",
    "model.multi_modal_projector.",
    "model.visual.",
];

/// A checkpoint tensor's name as the text family reads it; `None` for the vision part's.
fn text_tensor(name: &str) -> Option<String> {
    for (from, to) in TEXT_PREFIXES {
        if let Some(rest) = name.strip_prefix(from) {
            return Some(format!("{to}{rest}"));
        }
    }
    if VISION_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return None;
    }
    Some(name.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::RopeScaling;
    use crate::models::decoder::Llama;
    use crate::models::gemma::GemmaConfig;

    fn parse(json: &str) -> Result<ArchConfig> {
        crate::models::parse_config(json.as_bytes(), Path::new("config.json"))
    }

    /// The text family's knobs under the image-text wrapper.
    fn decoder<T: 'static>(cfg: &ArchConfig) -> &T {
        let text = cfg.knobs::<TextDecoder>().expect("image-text knobs");
        text.decoder
            .as_any()
            .downcast_ref()
            .expect("the text family's knobs")
    }

    /// google/gemma-3-4b-it's config.json (vision_config shortened): transformers wrote the
    /// text config as its difference from Gemma3TextConfig's defaults.
    const GEMMA3_4B: &str = r#"{
        "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
        "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
        "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
            "model_type": "gemma3_text", "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}}"#;

    #[test]
    fn a_sparse_gemma3_text_config_takes_transformers_defaults() {
        let cfg = parse(GEMMA3_4B).unwrap();
        assert_eq!(cfg.model_type.name, "gemma3");
        assert_eq!(cfg.model_type.genai_type, Some("gemma3_text"));
        assert_eq!(
            (
                cfg.hidden_size,
                cfg.intermediate_size,
                cfg.num_hidden_layers
            ),
            (2560, 10240, 34)
        );
        assert_eq!(
            (
                cfg.num_attention_heads,
                cfg.num_key_value_heads,
                cfg.head_dim
            ),
            (8, 4, 256)
        );
        assert_eq!(
            (cfg.vocab_size, cfg.max_position_embeddings),
            (262208, 131072)
        );
        assert_eq!(cfg.dtype, Some(DType::BF16));
        assert_eq!(cfg.eos_token_ids, [1, 106]);
        assert_eq!((cfg.bos_token_id, cfg.pad_token_id), (Some(2), Some(0)));
        assert!(cfg.tie_word_embeddings);
        let sliding = cfg
            .layer_windows
            .iter()
            .filter(|w| **w == Some(1024))
            .count();
        assert_eq!((sliding, cfg.layer_windows[5]), (29, None));
        assert_eq!(cfg.rope.theta, 1e6);
        assert_eq!(cfg.rope.scaling, RopeScaling::Linear { factor: 8.0 });
        let gemma: &GemmaConfig = decoder(&cfg);
        assert_eq!(gemma.local_rope.as_ref().map(|r| r.theta), Some(1e4));
        assert_eq!(gemma.attn_scale, 256f32.powf(-0.5));
        assert_eq!(
            cfg.family
                .checkpoint_renaming()
                .map(|r| r("lm_head.weight")),
            Some(Some("lm_head.weight".into()))
        );
    }

    #[test]
    fn gemma3_image_text_logits_are_never_soft_capped() {
        let json = GEMMA3_4B.replace(
            r#""sliding_window": 1024"#,
            r#""sliding_window": 1024, "final_logit_softcapping": 30.0"#,
        );
        let cfg = parse(&json).unwrap();
        let gemma: &GemmaConfig = decoder(&cfg);
        assert_eq!(gemma.final_softcap, None);
        let text = r#"{"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128, "final_logit_softcapping": 30.0}"#;
        let alone = parse(text).unwrap();
        assert_eq!(
            alone.knobs::<GemmaConfig>().unwrap().final_softcap,
            Some(30.0)
        );
    }

    /// mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json (vision_config shortened).
    const MISTRAL_SMALL_31: &str = r#"{
        "architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10,
        "model_type": "mistral3", "multimodal_projector_bias": false,
        "projector_hidden_act": "gelu", "spatial_merge_size": 2,
        "text_config": {"attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 32768,
            "max_position_embeddings": 131072, "model_type": "mistral",
            "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-05, "rope_theta": 1000000000.0, "sliding_window": null,
            "use_cache": true, "vocab_size": 131072},
        "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
        "vision_config": {"model_type": "pixtral"}, "vision_feature_layer": -1}"#;

    #[test]
    fn mistral_small_reads_its_text_config() {
        let cfg = parse(MISTRAL_SMALL_31).unwrap();
        assert_eq!(cfg.model_type.genai_type, Some("mistral"));
        assert_eq!(
            (
                cfg.hidden_size,
                cfg.num_hidden_layers,
                cfg.head_dim,
                cfg.vocab_size
            ),
            (5120, 40, 128, 131072)
        );
        assert_eq!((cfg.rope.theta, cfg.rms_norm_eps), (1e9, 1e-5));
        assert!(cfg.layer_windows.iter().all(Option::is_none));
        assert!(!cfg.tie_word_embeddings && !cfg.qkv_bias);
        assert_eq!(
            (cfg.bos_token_id, cfg.eos_token_ids.as_slice()),
            (Some(1), &[2][..])
        );
        let _: &Llama = decoder(&cfg);
        // An explicit outer tie_word_embeddings is the one transformers 5 reads.
        let tied = MISTRAL_SMALL_31.replace(
            r#""image_token_index": 10"#,
            r#""tie_word_embeddings": true"#,
        );
        assert!(parse(&tied).unwrap().tie_word_embeddings);
    }

    #[test]
    fn a_ministral_text_config_slides_as_ministral_does() {
        let json = MISTRAL_SMALL_31
            .replace(
                r#""model_type": "mistral","#,
                r#""model_type": "ministral","#,
            )
            .replace(r#""sliding_window": null,"#, "");
        let cfg = parse(&json).unwrap();
        assert!(cfg.layer_windows.iter().all(|w| *w == Some(4096)));
        let _: &Llama = decoder(&cfg);
    }

    #[test]
    fn errors_name_the_text_config_field() {
        let cases = [
            (
                MISTRAL_SMALL_31.replace(r#""hidden_size": 5120"#, r#""hidden_size": -1"#),
                "field `text_config.hidden_size`: must be a positive integer, found -1",
            ),
            (
                MISTRAL_SMALL_31
                    .replace(r#""model_type": "mistral","#, r#""model_type": "llama","#),
                "field `text_config.model_type`: `llama` is not a text model mobius builds for \
                 mistral3 (expected mistral or ministral)",
            ),
            (
                MISTRAL_SMALL_31.replace(r#""hidden_act": "silu""#, r#""hidden_act": 3"#),
                "field `text_config`: ",
            ),
            (
                GEMMA3_4B.replace(r#""eos_token_id": [1, 106]"#, r#""eos_token_id": [1, -5]"#),
                "config.json: field `eos_token_id`: -5 is not a token id",
            ),
            (
                r#"{"model_type": "gemma3"}"#.to_string(),
                "field `text_config`: missing (expected an object",
            ),
            (
                r#"{"model_type": "gemma3", "text_config": [1]}"#.to_string(),
                "field `text_config`: [1] (expected an object)",
            ),
        ];
        for (json, expected) in cases {
            let err = parse(&json).unwrap_err().to_string();
            assert!(err.contains(expected), "{err}\nexpected: {expected}");
        }
    }

    #[test]
    fn the_text_families_read_the_checkpoint_names_they_are_given() {
        // The image-text renaming replaces the text family's: those have none.
        for json in [GEMMA3_4B, MISTRAL_SMALL_31] {
            let cfg = parse(json).unwrap();
            let text = cfg.knobs::<TextDecoder>().unwrap();
            assert!(text.decoder.checkpoint_renaming().is_none());
        }
    }

    #[test]
    fn text_tensors_are_renamed_and_the_vision_part_dropped() {
        for (name, expected) in [
            (
                "language_model.model.layers.0.mlp.up_proj.weight",
                Some("model.layers.0.mlp.up_proj.weight"),
            ),
            (
                "model.language_model.norm.weight",
                Some("model.norm.weight"),
            ),
            ("language_model.lm_head.weight", Some("lm_head.weight")),
            ("lm_head.weight", Some("lm_head.weight")),
            ("vision_tower.vision_model.post_layernorm.weight", None),
            (
                "model.multi_modal_projector.mm_input_projection_weight",
                None,
            ),
        ] {
            assert_eq!(text_tensor(name).as_deref(), expected, "{name}");
        }
    }
}
