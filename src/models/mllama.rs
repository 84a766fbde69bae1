//! Mllama text (Llama 3.2 Vision's language model, transformers' MllamaForCausalLM,
//! `mllama_text_model`) on text alone: a Llama decoder whose `cross_attention_layers` attend to
//! the vision encoder's states. Without image inputs transformers skips those layers entirely,
//! so mobius builds the self-attention layers only, each reading its weights at its own
//! checkpoint index (`model.layers.{index}`; the cross-attention layers' weights are never
//! read), with one KV cache per built layer numbered `0..n` (`past_key_values.{j}`): the graph
//! is a plain n-layer decoder that onnxruntime-genai's generic `decoder` runs. The token
//! embedding has `vocab_size + 8` rows (the image token's among them), the LM head
//! `vocab_size`. Image inputs (`cross_attention_states`, the vision tower) are out of scope.

use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::limits::config::{MAX_LAYERS, MAX_VOCAB};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `mllama` text type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mllama",
    summary: "Llama 3.2 Vision's text decoder on text alone: the self-attention layers only \
              (the `cross_attention_layers` are skipped, as transformers skips them without \
              image inputs), one KV cache per built layer; embedding of vocab_size + 8 rows",
    model_types: &[ModelType::generative("mllama_text_model", "decoder", read)],
};

/// The rows the token embedding has beyond `vocab_size` (MllamaTextModel's `vocab_size + 8`).
const EXTRA_EMBEDDING_ROWS: usize = 8;

/// MllamaTextConfig's `cross_attention_layers` when absent or null.
const DEFAULT_CROSS_ATTENTION_LAYERS: [i64; 8] = [3, 8, 13, 18, 23, 28, 33, 38];

/// transformers' MllamaTextConfig: no biases, RoPE theta 5e5, `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 500_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// Mllama's text decoder knobs: the checkpoint indices of the layers built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mllama {
    /// The self-attention layers' checkpoint indices, in order; built layer `j` reads
    /// `model.layers.{self_layers[j]}`.
    pub self_layers: Vec<usize>,
    /// The LM head's width (`vocab_size`; the embedding has [`EXTRA_EMBEDDING_ROWS`] more).
    pub vocab_size: usize,
}

impl Family for Mllama {
    fn checkpoint_layer(&self, i: usize) -> usize {
        self.self_layers[i]
    }

    fn logits_width(&self, _cfg: &ArchConfig) -> usize {
        self.vocab_size
    }
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let total = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let cross = raw
        .cross_attention_layers
        .as_deref()
        .unwrap_or(&DEFAULT_CROSS_ATTENTION_LAYERS);
    let self_layers: Vec<usize> = (0..total)
        .filter(|&i| !cross.contains(&(i as i64)))
        .collect();
    if self_layers.is_empty() {
        return Err(f.err(
            "cross_attention_layers",
            &format!(
                "names every one of the {total} layers: on text alone transformers skips them \
                 all, there is no self-attention layer to build"
            ),
        ));
    }
    if raw.tie_word_embeddings == Some(true) {
        return Err(f.err(
            "tie_word_embeddings",
            "true: Mllama's embedding has vocab_size + 8 rows and its head vocab_size, mobius \
             builds the untied head only",
        ));
    }
    // MllamaTextConfig has no sliding window or layer types: transformers never slides.
    let built = HfConfig {
        num_hidden_layers: Some(self_layers.len() as i64),
        ..without_windows(raw)
    };
    let vocab_size = f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?;
    let mut cfg = read_decoder(&built, t, f, &FIELDS, |_| {
        Ok(Mllama {
            self_layers,
            vocab_size,
        })
    })?;
    // The attention's heads are hidden_size / num_attention_heads wide whatever `head_dim`
    // says; RoPE would read `head_dim`: the two must agree.
    if cfg.q_size() != cfg.hidden_size {
        return Err(f.err(
            "head_dim",
            &format!(
                "{} (Mllama's heads are hidden_size / num_attention_heads = {} wide)",
                cfg.head_dim,
                cfg.hidden_size / cfg.num_attention_heads
            ),
        ));
    }
    cfg.vocab_size += EXTRA_EMBEDDING_ROWS;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "mllama_text_model", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 5,
            "vocab_size": 300, "max_position_embeddings": 128"#,
            extra,
        )
    }

    fn knobs(cfg: &ArchConfig) -> &Mllama {
        cfg.knobs::<Mllama>().expect("Mllama knobs")
    }

    #[test]
    fn builds_the_self_attention_layers_at_their_checkpoint_indices() {
        let cfg = parse(r#", "cross_attention_layers": [1, 3, 9]"#).unwrap();
        assert_eq!(cfg.num_hidden_layers, 3);
        assert_eq!(knobs(&cfg).self_layers, [0, 2, 4]);
        assert_eq!(
            (0..3)
                .map(|i| knobs(&cfg).checkpoint_layer(i))
                .collect::<Vec<_>>(),
            [0, 2, 4]
        );
        assert_eq!((cfg.vocab_size, knobs(&cfg).logits_width(&cfg)), (308, 300));
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "sliding_window": 4, "attention_bias": true"#).unwrap();
        // The default cross-attention layers [3, 8, …]: layer 3 of 5 is skipped.
        assert_eq!(knobs(&cfg).self_layers, [0, 1, 2, 4]);
        assert_eq!(cfg.rope.theta, 5e5);
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        assert_eq!(cfg.layer_windows, [None; 4]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
    }

    #[test]
    fn refuses_what_it_cannot_build() {
        let err = |extra| parse(extra).unwrap_err().to_string();
        let all = err(r#", "cross_attention_layers": [0, 1, 2, 3, 4]"#);
        assert!(all.contains("cross_attention_layers"), "{all}");
        let tied = err(r#", "tie_word_embeddings": true"#);
        assert!(tied.contains("tie_word_embeddings"), "{tied}");
        let wide = err(r#", "head_dim": 32"#);
        assert!(wide.contains("head_dim"), "{wide}");
    }
}
