//! The decoder graph contract (docs/usage.md, "The graph contract"): inputs `input_ids`, `attention_mask`,
//! `position_ids`, `past_key_values.{i}.{key,value}`; outputs `logits`,
//! `present.{i}.{key,value}`, with the symbolic dims spelled as onnxruntime-genai expects.
//! Hybrid decoders carry, for a layer whose [`LayerCache`] is a short convolution, its conv
//! state `past.{i}.conv` → `present.{i}.conv` (`[batch, channels, kernel − 1]`, the model
//! dtype) instead of that layer's key/value cache: onnxruntime-genai 0.18's names for its
//! `lfm2` packages (docs/recurrent.md). A Mamba2 layer ([`LayerCache::Ssm`]) carries the conv
//! state of its convolution under the same name and its SSM state `past.{i}.ssm` →
//! `present.{i}.ssm` (`[batch, heads, head_dim, state]`, the model dtype); a Mamba layer the
//! same, its SSM state `[batch, intermediate, state]`; a Gated DeltaNet layer its conv state and
//! its recurrent state `past.{i}.recurrent` → `present.{i}.recurrent` (`[batch, value_heads,
//! key_dim, value_dim]`, onnxruntime-genai 0.18's names for its `qwen3_5` packages). A layer
//! without a token mixer ([`LayerCache::Stateless`], Nemotron-H's MLP and MoE blocks) carries
//! nothing. A layer whose attention and Mamba2 mixer run side by side
//! ([`LayerCache::KvAndSsm`], Falcon-H1) carries its key/value cache, then its conv and SSM
//! states. A layer whose KV cache has a shape of its own ([`LayerCache::KvOf`]: its key/value
//! heads and head size) declares it with that shape; a layer that reads another layer's keys
//! and values ([`LayerCache::Borrowed`], Gemma 4's KV sharing) carries no cache at all. A layer
//! that runs a learned indexer ([`LayerCache::Indexed`], DeepSeek Sparse Attention) carries its
//! key/value cache and, after them, the indexer's keys `past_key_values.{i}.index_key` →
//! `present.{i}.index_key` (`[batch, past_sequence_len, index_head_dim]`, the model dtype).
//! The one place those names are spelled (the encoders reuse [`BATCH`] and [`SEQ`]).

use super::indexer::{past_index_key_name, present_index_key_name};
use super::mamba::SsmMixer;
use super::short_conv::ShortConv;
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
    /// `position_ids` `[batch, sequence_len]` (`[r, batch, sequence_len]` where
    /// [`DecoderDims::position_rows`] says so).
    pub position_ids: String,
    /// Each layer's carried cache, in layer order.
    pub past: Vec<LayerPast>,
}

impl DecoderInputs {
    /// `past_key_values.{i}.key` / `.value` of layer `i`, a layer with a key/value cache.
    ///
    /// # Panics
    /// When layer `i` carries another state: the builder asked for the cache of a layer it
    /// declared otherwise (a builder bug, not an input error).
    pub fn kv(&self, i: usize) -> (&str, &str) {
        match &self.past[i] {
            LayerPast::Kv { key, value }
            | LayerPast::Indexed { key, value, .. }
            | LayerPast::KvAndSsm { key, value, .. } => (key, value),
            LayerPast::Conv { .. }
            | LayerPast::Ssm { .. }
            | LayerPast::Stateless
            | LayerPast::Borrowed { .. } => {
                panic!("layer {i} carries a recurrent state or no cache of its own, not a KV cache")
            }
        }
    }
}

/// What a decoder layer carries from one call to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LayerCache {
    /// The key/value cache of an attention layer.
    Kv,
    /// The key/value cache of an attention layer whose heads differ from the decoder's
    /// (`[batch, kv_heads, len, head_dim]`).
    KvOf {
        /// Its key/value heads.
        kv_heads: usize,
        /// Its channels per head.
        head_dim: usize,
    },
    /// The key/value cache of an attention layer that runs its own learned indexer
    /// (DeepSeek Sparse Attention) and the indexer's key cache beside it
    /// (`[batch, len, index_dim]`).
    Indexed {
        /// The indexer's channels per head (`index_head_dim`).
        index_dim: usize,
    },
    /// No cache: the layer attends to the keys and values of layer `.0` (an earlier layer
    /// with a cache of its own), read from that layer's cache inputs.
    Borrowed(usize),
    /// The conv state of a short causal convolution: its last `kernel − 1` inputs per channel.
    Conv(ShortConv),
    /// The conv and SSM states of a Mamba2 or Mamba mixer.
    Ssm(SsmMixer),
    /// The key/value cache of an attention layer, then the conv and SSM states of the mixer
    /// beside it (Falcon-H1's layers).
    KvAndSsm(SsmMixer),
    /// Nothing: a layer whose block mixes no tokens (an MLP or MoE block alone).
    Stateless,
}

/// A layer's cache graph inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerPast {
    /// `past_key_values.{i}.key` and `.value`.
    Kv {
        /// The key cache input.
        key: String,
        /// The value cache input.
        value: String,
    },
    /// `past_key_values.{i}.key`, `.value` and `.index_key`.
    Indexed {
        /// The key cache input.
        key: String,
        /// The value cache input.
        value: String,
        /// The indexer's key cache input.
        index_key: String,
    },
    /// `past.{i}.conv`.
    Conv {
        /// The conv state input.
        state: String,
        /// The convolution whose state it is.
        conv: ShortConv,
    },
    /// No input of its own: the cache inputs of the layer whose keys and values it reads.
    Borrowed {
        /// That layer's key cache input.
        key: String,
        /// That layer's value cache input.
        value: String,
    },
    /// `past_key_values.{i}.key`, `.value`, `past.{i}.conv` and `past.{i}.ssm`.
    KvAndSsm {
        /// The key cache input.
        key: String,
        /// The value cache input.
        value: String,
        /// The conv state input.
        conv: String,
        /// The SSM state input.
        ssm: String,
        /// The mixer whose states they are.
        mixer: SsmMixer,
    },
    /// `past.{i}.conv` and `past.{i}.ssm`.
    Ssm {
        /// The conv state input.
        conv: String,
        /// The SSM state input.
        ssm: String,
        /// The mixer whose states they are.
        mixer: SsmMixer,
    },
    /// No graph input: the layer carries nothing.
    Stateless,
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
    /// The rows of `position_ids`: `None` for `[batch, sequence_len]`, `Some(r)` for `[r,
    /// batch, sequence_len]` (Qwen3.5's multimodal RoPE positions, as onnxruntime-genai 0.18
    /// feeds its `qwen3_5_text` packages).
    pub position_rows: Option<usize>,
}

impl DecoderDims {
    /// The dims of `cfg`'s decoder.
    pub fn of(cfg: &ArchConfig) -> DecoderDims {
        DecoderDims {
            layers: cfg.num_hidden_layers,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab: cfg.vocab_size,
            position_rows: None,
        }
    }
}

/// Declares the decoder inputs and outputs (in the contract's order) on `b`, every layer with a
/// key/value cache.
pub fn decoder_io(b: &mut GraphBuilder, dims: DecoderDims, dtype: DType) -> DecoderInputs {
    hybrid_decoder_io(b, dims, dtype, &vec![LayerCache::Kv; dims.layers])
}

/// The name of layer `i`'s conv state input.
pub fn past_conv_name(i: usize) -> String {
    format!("past.{i}.conv")
}

/// The name of layer `i`'s conv state output.
pub fn present_conv_name(i: usize) -> String {
    format!("present.{i}.conv")
}

/// The name of layer `i`'s SSM or recurrent state input (`past.{i}.ssm`, or
/// `past.{i}.recurrent` for Gated DeltaNet: [`SsmMixer::state_name`]).
pub fn past_ssm_name(i: usize, mixer: SsmMixer) -> String {
    format!("past.{i}.{}", mixer.state_name())
}

/// The name of layer `i`'s SSM or recurrent state output.
pub fn present_ssm_name(i: usize, mixer: SsmMixer) -> String {
    format!("present.{i}.{}", mixer.state_name())
}

/// Declares the decoder inputs and outputs on `b` with layer `i` carrying `caches[i]`
/// (`caches` holds one entry per layer): per layer, in layer order, its key and value (or its
/// conv state, or its conv and SSM states, or its key, value, conv and SSM states, or nothing) after `position_ids`, and the same after
/// `logits`; a [`LayerCache::Borrowed`] layer declares nothing.
///
/// # Panics
/// When a layer borrows the cache of a later layer or of one without a KV cache (a builder
/// bug, not an input error).
pub fn hybrid_decoder_io(
    b: &mut GraphBuilder,
    dims: DecoderDims,
    dtype: DType,
    caches: &[LayerCache],
) -> DecoderInputs {
    let input_ids = b.input("input_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let attention_mask = b.input("attention_mask", DType::I64, Shape::new([BATCH, MASK_LEN]));
    let position_shape = match dims.position_rows {
        None => Shape::new([BATCH, SEQ]),
        Some(rows) => Shape(vec![rows.into(), Dim::sym(BATCH), Dim::sym(SEQ)]),
    };
    let position_ids = b.input("position_ids", DType::I64, position_shape);
    let kv_shape_of = |heads: usize, head_dim: usize, len: &str| {
        Shape(vec![
            Dim::sym(BATCH),
            heads.into(),
            Dim::sym(len),
            head_dim.into(),
        ])
    };
    let kv_shape = |len: &str| kv_shape_of(dims.kv_heads, dims.head_dim, len);
    let index_shape =
        |index_dim: usize, len: &str| Shape(vec![Dim::sym(BATCH), Dim::sym(len), index_dim.into()]);
    let conv_shape = |conv: ShortConv| {
        Shape(vec![
            Dim::sym(BATCH),
            conv.channels.into(),
            (conv.kernel - 1).into(),
        ])
    };
    let ssm_shape = |m: SsmMixer| {
        let dims = m.state_dims().into_iter().map(Dim::from);
        Shape(std::iter::once(Dim::sym(BATCH)).chain(dims).collect())
    };
    let mut past: Vec<LayerPast> = Vec::with_capacity(caches.len());
    for (i, cache) in caches.iter().enumerate() {
        let layer = match *cache {
            LayerCache::Kv => LayerPast::Kv {
                key: b.input(&format!("past_key_values.{i}.key"), dtype, kv_shape(PAST)),
                value: b.input(&format!("past_key_values.{i}.value"), dtype, kv_shape(PAST)),
            },
            LayerCache::KvOf { kv_heads, head_dim } => {
                let shape = kv_shape_of(kv_heads, head_dim, PAST);
                LayerPast::Kv {
                    key: b.input(&format!("past_key_values.{i}.key"), dtype, shape.clone()),
                    value: b.input(&format!("past_key_values.{i}.value"), dtype, shape),
                }
            }
            LayerCache::Indexed { index_dim } => LayerPast::Indexed {
                key: b.input(&format!("past_key_values.{i}.key"), dtype, kv_shape(PAST)),
                value: b.input(&format!("past_key_values.{i}.value"), dtype, kv_shape(PAST)),
                index_key: b.input(&past_index_key_name(i), dtype, index_shape(index_dim, PAST)),
            },
            LayerCache::Borrowed(lender) => match past.get(lender) {
                Some(LayerPast::Kv { key, value }) => LayerPast::Borrowed {
                    key: key.clone(),
                    value: value.clone(),
                },
                _ => panic!("layer {i} borrows the cache of layer {lender}, which has none"),
            },
            LayerCache::Conv(conv) => LayerPast::Conv {
                state: b.input(&past_conv_name(i), dtype, conv_shape(conv)),
                conv,
            },
            LayerCache::Ssm(mixer) => LayerPast::Ssm {
                conv: b.input(&past_conv_name(i), dtype, conv_shape(mixer.conv())),
                ssm: b.input(&past_ssm_name(i, mixer), dtype, ssm_shape(mixer)),
                mixer,
            },
            LayerCache::KvAndSsm(mixer) => LayerPast::KvAndSsm {
                key: b.input(&format!("past_key_values.{i}.key"), dtype, kv_shape(PAST)),
                value: b.input(&format!("past_key_values.{i}.value"), dtype, kv_shape(PAST)),
                conv: b.input(&past_conv_name(i), dtype, conv_shape(mixer.conv())),
                ssm: b.input(&past_ssm_name(i, mixer), dtype, ssm_shape(mixer)),
                mixer,
            },
            LayerCache::Stateless => LayerPast::Stateless,
        };
        past.push(layer);
    }
    b.output(
        "logits",
        dtype,
        Shape(vec![Dim::sym(BATCH), Dim::sym(SEQ), dims.vocab.into()]),
    );
    for (i, cache) in caches.iter().enumerate() {
        match *cache {
            LayerCache::Kv => {
                b.output(&format!("present.{i}.key"), dtype, kv_shape(TOTAL));
                b.output(&format!("present.{i}.value"), dtype, kv_shape(TOTAL));
            }
            LayerCache::KvOf { kv_heads, head_dim } => {
                let shape = kv_shape_of(kv_heads, head_dim, TOTAL);
                b.output(&format!("present.{i}.key"), dtype, shape.clone());
                b.output(&format!("present.{i}.value"), dtype, shape);
            }
            LayerCache::Indexed { index_dim } => {
                b.output(&format!("present.{i}.key"), dtype, kv_shape(TOTAL));
                b.output(&format!("present.{i}.value"), dtype, kv_shape(TOTAL));
                let shape = index_shape(index_dim, TOTAL);
                b.output(&present_index_key_name(i), dtype, shape);
            }
            LayerCache::Borrowed(_) => {}
            LayerCache::Conv(conv) => {
                b.output(&present_conv_name(i), dtype, conv_shape(conv));
            }
            LayerCache::Ssm(mixer) => {
                b.output(&present_conv_name(i), dtype, conv_shape(mixer.conv()));
                b.output(&present_ssm_name(i, mixer), dtype, ssm_shape(mixer));
            }
            LayerCache::KvAndSsm(mixer) => {
                b.output(&format!("present.{i}.key"), dtype, kv_shape(TOTAL));
                b.output(&format!("present.{i}.value"), dtype, kv_shape(TOTAL));
                b.output(&present_conv_name(i), dtype, conv_shape(mixer.conv()));
                b.output(&present_ssm_name(i, mixer), dtype, ssm_shape(mixer));
            }
            LayerCache::Stateless => {}
        }
    }
    DecoderInputs {
        input_ids,
        attention_mask,
        position_ids,
        past,
    }
}
