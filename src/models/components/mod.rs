//! Building blocks shared by the model builders; each emits standard ONNX (opset 24) ops.

pub mod attention;
pub mod conv1d;
pub mod decoder_io;
pub mod gelu;
pub mod layer_norm;
pub mod linear;
pub mod mask;
pub mod mlp;
pub mod norm;
pub mod rope;

pub use attention::{attention, AttentionSpec};
pub use conv1d::{conv1d, Conv1dParams};
pub use decoder_io::{decoder_io, DecoderDims, DecoderInputs};
pub use gelu::gelu;
pub use layer_norm::layer_norm;
pub use linear::linear;
pub use mask::{padding_mask, sliding_window_mask};
pub use mlp::swiglu_mlp;
pub use norm::rms_norm;
pub use rope::{rope_tables, rotary_embedding, RopeTables};
