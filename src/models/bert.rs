//! BERT-family encoders (bert, roberta) for feature extraction: embeddings (word + token type +
//! position, then LayerNorm), then post-norm layers of bidirectional attention → dense →
//! residual + LayerNorm → dense → exact GELU → dense → residual + LayerNorm. Biases everywhere.
//!
//! Graph contract (spec §1.10): inputs `input_ids`, `attention_mask` and, when the config has
//! more than one token type, `token_type_ids` (all INT64 `[batch, sequence_len]`); output
//! `last_hidden_state` `[batch, sequence_len, H]`. With `type_vocab_size` 1 (RoBERTa) the only
//! valid token type is 0, so the graph takes no `token_type_ids` (as RoBERTa tokenizers return
//! none) and adds the single token-type row to every token, which is what transformers does.
//!
//! Initializer names are the checkpoint's without the model-class prefix (see
//! [`checkpoint_name`]); linear weights are stored transposed as `….weight_t`.

use super::components::decoder_io::{BATCH, SEQ};
use super::components::{layer_norm, layer_norm_into, linear, padding_mask};
use super::registry::{FamilySpec, ModelType};
use crate::config::encoder::{read_bert, read_roberta};
use crate::config::{ArchConfig, CheckpointRenaming, EncoderConfig, FamilyKnobs, Positions};
use crate::ir::{Attr, DType, Dim, Graph, GraphBuilder, Initializer, Shape, TensorSource};
use crate::role::Role;

/// The family's registry entry. onnxruntime-genai runs generative models only: encoder
/// packages have no genai_config.json.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bert",
    summary: "encoders for feature extraction: bidirectional attention, post-norm LayerNorm \
              layers, learned positions (RoBERTa: after the padding token)",
    model_types: &[
        ModelType {
            name: "bert",
            genai_type: None,
            read: read_bert,
        },
        ModelType {
            name: "roberta",
            genai_type: None,
            read: read_roberta,
        },
    ],
};

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
        let lin = |b: &mut GraphBuilder, x: &str, name: &str, inp: usize, out: usize| {
            linear(b, x, &format!("{p}.{name}"), inp, out, true, dtype)
        };
        let q = lin(&mut b, &x, "attention.self.query", h, h);
        let k = lin(&mut b, &x, "attention.self.key", h, h);
        let v = lin(&mut b, &x, "attention.self.value", h, h);
        let y = b.op(
            "Attention",
            &[&q, &k, &v, &mask],
            vec![
                ("kv_num_heads", Attr::Int(cfg.num_attention_heads as i64)),
                ("q_num_heads", Attr::Int(cfg.num_attention_heads as i64)),
                ("scale", Attr::Float((cfg.head_dim as f32).powf(-0.5))),
            ],
        );
        let o = lin(&mut b, &y, "attention.output.dense", h, h);
        let sum = b.op("Add", &[&o, &x], vec![]);
        let ln = format!("{p}.attention.output.LayerNorm");
        x = layer_norm(&mut b, &sum, &ln, h, eps, dtype);
        let up = lin(&mut b, &x, "intermediate.dense", h, cfg.intermediate_size);
        let act = b.op("Gelu", &[&up], vec![]);
        let down = lin(&mut b, &act, "output.dense", cfg.intermediate_size, h);
        let sum = b.op("Add", &[&down, &x], vec![]);
        let ln = format!("{p}.output.LayerNorm");
        if i + 1 == cfg.num_hidden_layers {
            layer_norm_into(&mut b, &sum, &ln, h, eps, dtype, "last_hidden_state");
        } else {
            x = layer_norm(&mut b, &sum, &ln, h, eps, dtype);
        }
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
    use super::*;

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
}
