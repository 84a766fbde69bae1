//! The decoder graph contract (docs/usage.md, "The graph contract"): inputs `input_ids`, `attention_mask`,
//! `position_ids`, `past_key_values.{i}.{key,value}`; outputs `logits`,
//! `present.{i}.{key,value}`, with the symbolic dims spelled as onnxruntime-genai expects.
//! The one place those names are spelled (the encoders reuse [`BATCH`] and [`SEQ`]).

use crate::config::ArchConfig;
use crate::ir::{DType, Dim, GraphBuilder, Shape};

/// Symbolic batch dim (also the encoders' batch dim).
pub const BATCH: &str = "batch";
/// Symbolic dim of the current tokens (also the encoders' sequence dim).
pub const SEQ: &str = "sequence_len";
/// Symbolic dim of `attention_mask`: past and current tokens.
pub const MASK_LEN: &str = "past_seq_len + seq_len";
/// Symbolic dim of the past KV cache.
pub const PAST: &str = "past_sequence_len";
/// Symbolic dim of the present KV cache.
pub const TOTAL: &str = "past_sequence_len + sequence_len";

/// The declared graph inputs of a decoder.
#[derive(Debug, Clone)]
pub struct DecoderInputs {
    /// `input_ids` `[batch, sequence_len]`.
    pub input_ids: String,
    /// `attention_mask` `[batch, past_seq_len + seq_len]`.
    pub attention_mask: String,
    /// `position_ids` `[batch, sequence_len]`.
    pub position_ids: String,
    /// `past_key_values.{i}.key` / `.value` per layer.
    pub past: Vec<(String, String)>,
}

/// The sizes the contract's shapes depend on.
#[derive(Debug, Clone, Copy)]
pub struct DecoderDims {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

impl DecoderDims {
    /// The dims of `cfg`'s decoder.
    pub fn of(cfg: &ArchConfig) -> DecoderDims {
        DecoderDims {
            layers: cfg.num_hidden_layers,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab: cfg.vocab_size,
        }
    }
}

/// Declares the decoder inputs and outputs (in the contract's order) on `b`.
pub fn decoder_io(b: &mut GraphBuilder, dims: DecoderDims, dtype: DType) -> DecoderInputs {
    let input_ids = b.input("input_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let attention_mask = b.input("attention_mask", DType::I64, Shape::new([BATCH, MASK_LEN]));
    let position_ids = b.input("position_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let kv_shape = |len: &str| {
        Shape(vec![
            Dim::sym(BATCH),
            dims.kv_heads.into(),
            Dim::sym(len),
            dims.head_dim.into(),
        ])
    };
    let past = (0..dims.layers)
        .map(|i| {
            (
                b.input(&format!("past_key_values.{i}.key"), dtype, kv_shape(PAST)),
                b.input(&format!("past_key_values.{i}.value"), dtype, kv_shape(PAST)),
            )
        })
        .collect();
    b.output(
        "logits",
        dtype,
        Shape(vec![Dim::sym(BATCH), Dim::sym(SEQ), dims.vocab.into()]),
    );
    for i in 0..dims.layers {
        b.output(&format!("present.{i}.key"), dtype, kv_shape(TOTAL));
        b.output(&format!("present.{i}.value"), dtype, kv_shape(TOTAL));
    }
    DecoderInputs {
        input_ids,
        attention_mask,
        position_ids,
        past,
    }
}
