//! Building blocks shared by the model builders; each emits standard ONNX (opset 24) ops.

pub mod attention;
pub mod conv1d;
pub mod decoder_io;
pub mod gelu;
pub mod gelu_mlp;
pub mod linear;
pub mod longrope;
pub mod mask;
pub mod mlp;
pub mod norm;
pub mod offset_norm;
pub mod rope;

pub use attention::{attention, soft_capped_attention, AttentionSpec};
pub use conv1d::{conv1d, Conv1dParams};
pub use decoder_io::{decoder_io, DecoderDims, DecoderInputs};
pub use gelu::gelu;
pub use gelu_mlp::gelu_mlp;
pub use linear::linear;
pub use mask::{padding_mask, sliding_window_mask};
pub use mlp::swiglu_mlp;
pub use norm::{layer_norm, layer_norm_into, rms_norm};
pub use offset_norm::offset_rms_norm;
pub use rope::{named_rope_tables, rope_tables, rotary_embedding, RopeTables};
