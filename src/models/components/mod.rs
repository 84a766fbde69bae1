//! Building blocks shared by the model builders; each emits standard ONNX (opset 24) ops.

pub mod activation;
pub mod alibi;
pub mod altup;
pub mod attention;
pub mod clamped_moe;
pub mod conv1d;
pub mod decoder_io;
pub mod dynamic_rope;
pub mod encoder_layer;
pub mod fused_qkv;
pub mod gated_delta;
pub mod gelu;
pub mod indexer;
pub mod linear;
pub mod longrope;
pub mod mamba;
pub mod mask;
mod mixer_ops;
pub mod mla;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod per_layer;
pub mod positions;
pub mod rglru;
pub mod rope;
pub mod scalar;
pub mod short_conv;
pub mod sink_attention;
pub mod ssm;
pub mod ssm_config;

pub use activation::Activation;
pub use alibi::{alibi_bias, alibi_slopes, ALIBI_BIAS};
pub use altup::AltUp;
pub use attention::{attention, soft_capped_attention, AttentionSpec};
pub use clamped_moe::{clamped_moe, ClampedMoe};
pub use conv1d::{conv1d, conv1d_mlp, Conv1dParams};
pub use decoder_io::{
    decoder_io, hybrid_decoder_io, past_conv_name, past_ssm_name, present_conv_name,
    present_ssm_name, DecoderDims, DecoderInputs, LayerCache, LayerPast,
};
pub use encoder_layer::{EncoderLayer, EncoderNorms, LayerNames};
pub use fused_qkv::{fused_qkv, head_interleaved_qkv, FusedQkv};
pub use gated_delta::{gated_delta_mixer, GatedDeltaMixer};
pub use gelu::gelu;
pub use indexer::{
    index_mask_name, past_index_key_name, present_index_key_name, IndexIo, IndexedLayer, Indexer,
    INDEX_MASK,
};
pub use linear::linear;
pub use mamba::{mamba_mixer, MambaMixer, SsmMixer};
pub use mask::{chunked_mask, padding_mask, sliding_window_mask, CHUNKED_MASK};
pub use mla::Mla;
pub use mlp::{
    gated_mlp, gaussian_top_k, normal_quantile, squared_relu_mlp, ungated_mlp, GateActivation,
};
pub use moe::{
    gated_shared_expert, sparse_moe, ExpertNames, ExpertWeights, GroupScore, GroupedRouter,
    MoeSpec, Router, Scores,
};
pub use norm::{
    layer_norm, layer_norm_into, offset_rms_norm, per_head_norm, rms_norm, Norm, NormKind,
};
pub use per_layer::{PerLayer, PER_LAYER_INPUTS};
pub use positions::{learned_positions, sinusoidal_positions};
pub use rope::{
    interleaved_mrope_tables, named_rope_tables, rope_tables, rotary_embedding, scaled, RopeTables,
};
pub use scalar::scalar;
pub use short_conv::{causal_conv_with_state, gated_short_conv, ConvState, ShortConv};
pub use sink_attention::{causal_mask, sink_attention, sink_logits};
pub use ssm::{mamba2_mixer, GateNorm, Mamba2Mixer, Mamba2Scales, SsmState};
