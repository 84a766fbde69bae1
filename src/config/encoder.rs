//! BERT-family encoders (`bert`, `roberta`): their `config.json` → [`ArchConfig`] with an
//! [`EncoderConfig`]. Fields transformers defaults when a config omits them take the same
//! defaults here (the `BertConfig` / `RobertaConfig` class defaults).

use super::ModelType;
use super::{
    first_token, parse_dtype, token_list, ArchConfig, Fields, HfConfig, Knobs, Rope, RopeScaling,
    Sign,
};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// How an encoder numbers the positions it looks up in its position embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions {
    /// `0, 1, …, S−1` for every row (BERT).
    Absolute,
    /// RoBERTa (transformers' `create_position_ids_from_input_ids`): a token that is not
    /// `padding_idx` gets `padding_idx + (number of such tokens up to and including it)`, a
    /// `padding_idx` token gets `padding_idx`. Positions come from the ids, not the mask.
    PaddingOffset {
        /// The padding token id (`pad_token_id`).
        padding_idx: i64,
    },
}

/// What a BERT-family encoder adds to [`ArchConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderConfig {
    /// Rows of the token-type embedding; above 1 the graph takes a `token_type_ids` input,
    /// with 1 (RoBERTa) the single row is added to every token, as transformers does for the
    /// only valid token type 0.
    pub type_vocab_size: usize,
    /// Position numbering.
    pub positions: Positions,
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
}

/// Normalises a `bert` config ([`Positions::Absolute`]); errors name the field and what was
/// expected.
pub fn read_bert(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
) -> Result<ArchConfig> {
    read(raw, model_type, false, f)
}

/// Normalises a `roberta` config ([`Positions::PaddingOffset`]); errors name the field and
/// what was expected.
pub fn read_roberta(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
) -> Result<ArchConfig> {
    read(raw, model_type, true, f)
}

fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    roberta: bool,
    f: &Fields<'_>,
) -> Result<ArchConfig> {
    let name = model_type.name;
    let hidden_size = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "num_attention_heads",
            &format!("{heads} must divide hidden_size ({hidden_size})"),
        ));
    }
    let head_dim = hidden_size / heads;
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let vocab_size = f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?;
    let max_positions = f.positive(
        "max_position_embeddings",
        raw.max_position_embeddings,
        MAX_POSITIONS,
    )?;
    let act = raw.hidden_act.as_deref().unwrap_or("gelu");
    if act != "gelu" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for {name} (expected \"gelu\")"),
        ));
    }
    if let Some(kind) = raw.position_embedding_type.as_deref() {
        if kind != "absolute" {
            return Err(f.err(
                "position_embedding_type",
                &format!("`{kind}` is not supported (expected \"absolute\")"),
            ));
        }
    }
    if raw.is_decoder == Some(true) {
        return Err(f.err(
            "is_decoder",
            &format!("true is not supported: mobius builds {name} as an encoder"),
        ));
    }
    let type_vocab_size = match raw.type_vocab_size {
        None => 2,
        some => f.positive("type_vocab_size", some, MAX_VOCAB)?,
    };
    let layer_norm_eps = f.number(
        "layer_norm_eps",
        raw.layer_norm_eps,
        1e-12,
        Sign::NonNegative,
    )?;
    let pad_token_id = match raw.pad_token_id.as_ref() {
        None => Some(if roberta { 1 } else { 0 }),
        Some(v) => first_token(f, "pad_token_id", Some(v))?,
    };
    let positions = if roberta {
        let padding_idx = pad_token_id.ok_or_else(|| {
            f.err(
                "pad_token_id",
                "missing (roberta numbers positions after it)",
            )
        })?;
        // The longest sequence reads position padding_idx + S; at least one must fit.
        if padding_idx < 0 || padding_idx as usize + 1 >= max_positions {
            return Err(f.err(
                "pad_token_id",
                &format!(
                    "{padding_idx} leaves no position below max_position_embeddings \
                     ({max_positions}) (roberta positions start at pad_token_id + 1)"
                ),
            ));
        }
        Positions::PaddingOffset { padding_idx }
    } else {
        Positions::Absolute
    };
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: f.positive("intermediate_size", raw.intermediate_size, MAX_WIDTH)?,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size,
        max_position_embeddings: max_positions,
        // No RMSNorm: the LayerNorm epsilon is `layer_norm_eps`.
        rms_norm_eps: 0.0,
        tie_word_embeddings: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        rope: Rope {
            theta: 10000.0,
            scaling: RopeScaling::Default,
            rotary_dim: head_dim,
            interleaved: false,
        },
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id,
        family: Knobs::new(EncoderConfig {
            type_vocab_size,
            positions,
            layer_norm_eps,
        }),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{json, Value};

    use super::*;
    use crate::role::Role;
    use crate::Error;

    /// A tiny BERT config with `changes` applied (null removes a field).
    fn config(changes: Value) -> Result<ArchConfig> {
        let mut cfg = json!({"model_type": "bert", "hidden_size": 64, "num_attention_heads": 4,
            "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 300,
            "max_position_embeddings": 128});
        for (k, v) in changes.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        crate::models::parse_config(cfg.to_string().as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn bert_takes_transformers_defaults() {
        let cfg = config(json!({})).unwrap();
        assert_eq!(cfg.role(), Role::Encoder);
        assert_eq!((cfg.head_dim, cfg.num_key_value_heads), (16, 4));
        assert_eq!(cfg.pad_token_id, Some(0));
        let enc = cfg.knobs::<EncoderConfig>().unwrap();
        assert_eq!(enc.layer_norm_eps, 1e-12);
        assert_eq!(enc.type_vocab_size, 2);
        assert_eq!(enc.positions, Positions::Absolute);
    }

    #[test]
    fn roberta_numbers_positions_after_its_pad_token() {
        let roberta =
            json!({"model_type": "roberta", "layer_norm_eps": 1e-5, "type_vocab_size": 1});
        let cfg = config(roberta.clone()).unwrap();
        let enc = cfg.knobs::<EncoderConfig>().unwrap();
        assert_eq!(enc.layer_norm_eps, 1e-5);
        assert_eq!(enc.positions, Positions::PaddingOffset { padding_idx: 1 });
        assert_eq!(enc.type_vocab_size, 1);
        let mut explicit = roberta;
        explicit["pad_token_id"] = 5.into();
        assert_eq!(
            config(explicit)
                .unwrap()
                .knobs::<EncoderConfig>()
                .unwrap()
                .positions,
            Positions::PaddingOffset { padding_idx: 5 }
        );
    }

    #[test]
    fn decoders_keep_the_decoder_role() {
        let cfg = config(json!({"model_type": "llama"})).unwrap();
        assert_eq!(cfg.role(), Role::Decoder);
        assert!(cfg.knobs::<EncoderConfig>().is_none());
    }

    #[test]
    fn bad_encoder_fields_are_named() {
        for (change, field, says) in [
            (
                json!({"hidden_act": "relu"}),
                "hidden_act",
                "expected \"gelu\"",
            ),
            (
                json!({"position_embedding_type": "relative_key"}),
                "position_embedding_type",
                "expected \"absolute\"",
            ),
            (json!({"is_decoder": true}), "is_decoder", "as an encoder"),
            (json!({"type_vocab_size": 0}), "type_vocab_size", "positive"),
            (
                json!({"num_hidden_layers": 100000}),
                "num_hidden_layers",
                "at most 2048",
            ),
            (json!({"layer_norm_eps": -1.0}), "layer_norm_eps", ">= 0"),
            (
                json!({"num_attention_heads": 5}),
                "num_attention_heads",
                "divide",
            ),
            (
                json!({"intermediate_size": null}),
                "intermediate_size",
                "missing",
            ),
            (
                json!({"model_type": "roberta", "pad_token_id": 127}),
                "pad_token_id",
                "max_position_embeddings",
            ),
        ] {
            match config(change).unwrap_err() {
                Error::ConfigField {
                    field: got,
                    message,
                    ..
                } => {
                    assert_eq!(got, field, "{message}");
                    assert!(message.contains(says), "{field}: {message}");
                }
                other => panic!("{field}: expected a field error, got {other}"),
            }
        }
    }
}
