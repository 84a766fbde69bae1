//! BERT-family encoders (bert, roberta) for feature extraction: embeddings (word + token type +
//! position, then LayerNorm), then post-norm layers of bidirectional attention → dense →
//! residual + LayerNorm → dense → exact GELU → dense → residual + LayerNorm. Biases everywhere.
//!
//! Graph contract (docs/families.md, "Encoders"): inputs `input_ids`, `attention_mask` and, when the config has
//! more than one token type, `token_type_ids` (all INT64 `[batch, sequence_len]`); output
//! `last_hidden_state` `[batch, sequence_len, H]`. With `type_vocab_size` 1 (RoBERTa) the only
//! valid token type is 0, so the graph takes no `token_type_ids` (as RoBERTa tokenizers return
//! none) and adds the single token-type row to every token, which is what transformers does.
//!
//! Initializer names are the checkpoint's without the model-class prefix (see
//! [`checkpoint_name`]); linear weights are stored transposed as `….weight_t`. Fields a
//! config.json omits take transformers' `BertConfig` / `RobertaConfig` class defaults. A config
//! with `is_decoder` true is a causal LM: [`super::bert_lm`] reads and builds it.

use super::bert_lm;
use super::components::decoder_io::{BATCH, SEQ};
use super::components::{layer_norm, padding_mask, EncoderLayer, EncoderNorms, LayerNames};
use super::family::FamilySpec;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, CheckpointRenaming, FamilyKnobs, Fields,
    Gelu, HfConfig, Knobs, ModelType, Rope, RopeScaling, Sign,
};
use crate::ir::{Attr, DType, Dim, Graph, GraphBuilder, Initializer, Shape, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::role::Role;
use crate::Result;

/// The family's registry entry. onnxruntime-genai runs generative models only: encoder
/// packages have no genai_config.json.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bert",
    summary: "encoders for feature extraction: bidirectional attention, post-norm LayerNorm \
              layers, learned positions (RoBERTa: after the padding token); `is_decoder` \
              configs build the causal LM (bert_lm)",
    model_types: &[
        ModelType {
            name: "bert",
            genai_type: None,
            read: read_bert,
            builds_longrope: false,
        },
        ModelType {
            name: "roberta",
            genai_type: None,
            read: read_roberta,
            builds_longrope: false,
        },
    ],
};

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
fn read_bert(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    if raw.is_decoder == Some(true) {
        return bert_lm::read_bert(raw, model_type, f);
    }
    read(raw, model_type, false, f)
}

/// Normalises a `roberta` config ([`Positions::PaddingOffset`]); errors name the field and
/// what was expected.
fn read_roberta(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
) -> Result<ArchConfig> {
    if raw.is_decoder == Some(true) {
        return bert_lm::read_roberta(raw, model_type, f);
    }
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

impl FamilyKnobs for EncoderConfig {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        build(cfg, self, dtype)
    }

    fn role(&self) -> Role {
        Role::Encoder
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }
}

/// Model-class prefixes of task checkpoints (`BertForMaskedLM` saves `bert.embeddings…`).
const PREFIXES: &[&str] = &["bert.", "roberta."];
/// Task heads and the pooler: never read by the encoder.
const DROPPED: &[&str] = &["pooler.", "cls.", "lm_head."];

/// The name the builder reads for the checkpoint tensor `name`, or `None` for tensors it never
/// reads (pooler and task heads): the model-class prefix is stripped and the LayerNorm
/// `gamma`/`beta` of old checkpoints become `weight`/`bias`.
pub fn checkpoint_name(name: &str) -> Option<String> {
    let name = PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    if DROPPED.iter().any(|d| name.starts_with(d)) {
        return None;
    }
    Some(if let Some(base) = name.strip_suffix(".gamma") {
        format!("{base}.weight")
    } else if let Some(base) = name.strip_suffix(".beta") {
        format!("{base}.bias")
    } else {
        name.to_string()
    })
}

/// Builds the encoder graph of `cfg`, whose knobs are `enc`.
fn build(cfg: &ArchConfig, enc: &EncoderConfig, dtype: DType) -> Graph {
    let eps = enc.layer_norm_eps;
    let mut b = GraphBuilder::new("main_graph");
    let h = cfg.hidden_size;
    let token_shape = || Shape::new([BATCH, SEQ]);
    let input_ids = b.input("input_ids", DType::I64, token_shape());
    let attention_mask = b.input("attention_mask", DType::I64, token_shape());
    let token_type_ids =
        (enc.type_vocab_size > 1).then(|| b.input("token_type_ids", DType::I64, token_shape()));
    b.output(
        "last_hidden_state",
        dtype,
        Shape(vec![Dim::sym(BATCH), Dim::sym(SEQ), h.into()]),
    );

    b.set_scope("embeddings");
    let mut x = embeddings(
        &mut b,
        cfg,
        enc,
        &input_ids,
        token_type_ids.as_deref(),
        (eps, dtype),
    );

    b.set_scope("mask");
    // Bidirectional: every query sees every real key; [B, 1, S, S] as onnxruntime requires.
    let mask = padding_mask(&mut b, &input_ids, &attention_mask);

    for i in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        b.set_scope(&p);
        let layer = EncoderLayer {
            prefix: &p,
            names: LayerNames::BERT,
            hidden: h,
            intermediate: cfg.intermediate_size,
            eps,
            gelu: Gelu::Exact,
            norms: EncoderNorms::BERT,
            dtype,
        };
        let attend = |b: &mut GraphBuilder, [q, k, v]: [&str; 3]| {
            b.op(
                "Attention",
                &[q, k, v, &mask],
                vec![
                    ("kv_num_heads", Attr::Int(cfg.num_attention_heads as i64)),
                    ("q_num_heads", Attr::Int(cfg.num_attention_heads as i64)),
                    ("scale", Attr::Float((cfg.head_dim as f32).powf(-0.5))),
                ],
            )
        };
        let last = i + 1 == cfg.num_hidden_layers;
        x = layer.build(&mut b, &x, attend, last.then_some("last_hidden_state"));
    }
    b.finish()
}

/// `LayerNorm(word[ids] + token_type[types] + position[positions])`, in transformers' order.
fn embeddings(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    enc: &EncoderConfig,
    input_ids: &str,
    token_type_ids: Option<&str>,
    (eps, dtype): (f32, DType),
) -> String {
    let h = cfg.hidden_size;
    let mut table = |name: &str, rows: usize| {
        let name = format!("embeddings.{name}.weight");
        b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![rows, h],
            source: Some(TensorSource::Checkpoint(name)),
        })
    };
    let word = table("word_embeddings", cfg.vocab_size);
    let types = table("token_type_embeddings", enc.type_vocab_size);
    let positions = table("position_embeddings", cfg.max_position_embeddings);
    let gather = |b: &mut GraphBuilder, table: &str, ids: &str| {
        b.op("Gather", &[table, ids], vec![("axis", Attr::Int(0))])
    };
    let words = gather(b, &word, input_ids);
    // Without token_type_ids the table has one row ([1, H]), which broadcasts over tokens.
    let types = match token_type_ids {
        Some(ids) => gather(b, &types, ids),
        None => types,
    };
    let x = b.op("Add", &[&words, &types], vec![]);
    let ids = position_ids(b, enc.positions, input_ids);
    let pos = gather(b, &positions, &ids);
    let x = b.op("Add", &[&x, &pos], vec![]);
    layer_norm(b, &x, "embeddings.LayerNorm", h, eps, dtype)
}

/// The position of every token, `[B, S]`, from running counts along the sequence (no `Range`,
/// which not every EP runs): `count(tokens up to here) - 1` (absolute), or RoBERTa's
/// `padding_idx + count(non-padding tokens up to here)` on non-padding tokens.
fn position_ids(b: &mut GraphBuilder, positions: Positions, input_ids: &str) -> String {
    let axis1 = b.scalar_i64(1);
    match positions {
        Positions::Absolute => {
            let shape = b.op("Shape", &[input_ids], vec![]);
            let one = b.scalar_i64(1);
            let ones = b.op("Expand", &[&one, &shape], vec![]);
            let count = b.op("CumSum", &[&ones, &axis1], vec![]);
            b.op("Sub", &[&count, &one], vec![])
        }
        Positions::PaddingOffset { padding_idx } => {
            let pad = b.scalar_i64(padding_idx);
            let is_pad = b.op("Equal", &[input_ids, &pad], vec![]);
            let real = b.op("Not", &[&is_pad], vec![]);
            let real = b.op(
                "Cast",
                &[&real],
                vec![("to", Attr::Int(DType::I64.onnx_code() as i64))],
            );
            let count = b.op("CumSum", &[&real, &axis1], vec![]);
            let counted = b.op("Mul", &[&count, &real], vec![]);
            b.op("Add", &[&counted, &pad], vec![])
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{json, Value};

    use super::*;
    use crate::Error;

    #[test]
    fn checkpoint_names_lose_prefixes_heads_and_gamma_beta() {
        for (from, to) in [
            (
                "bert.embeddings.LayerNorm.gamma",
                Some("embeddings.LayerNorm.weight"),
            ),
            (
                "bert.encoder.layer.0.output.LayerNorm.beta",
                Some("encoder.layer.0.output.LayerNorm.bias"),
            ),
            (
                "roberta.encoder.layer.3.attention.self.query.weight",
                Some("encoder.layer.3.attention.self.query.weight"),
            ),
            (
                "embeddings.word_embeddings.weight",
                Some("embeddings.word_embeddings.weight"),
            ),
            ("bert.pooler.dense.weight", None),
            ("pooler.dense.bias", None),
            ("cls.predictions.bias", None),
            ("lm_head.dense.weight", None),
        ] {
            assert_eq!(checkpoint_name(from).as_deref(), to, "{from}");
        }
    }

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
    fn is_decoder_builds_the_causal_lm() {
        for model_type in ["bert", "roberta"] {
            let cfg = config(json!({"model_type": model_type, "is_decoder": true})).unwrap();
            assert_eq!(cfg.role(), Role::Decoder, "{model_type}");
            assert_eq!(cfg.model_type.genai_type, Some("decoder"), "{model_type}");
            assert!(cfg.knobs::<EncoderConfig>().is_none());
            assert!(cfg.knobs::<bert_lm::BertLmConfig>().is_some());
        }
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
