//! Building blocks shared by the model builders; each emits standard ONNX (opset 24) ops.

pub mod attention;
pub mod linear;
pub mod longrope;
pub mod mask;
pub mod mlp;
pub mod norm;
pub mod rope;

pub use attention::{attention, AttentionSpec};
pub use linear::linear;
pub use mask::{padding_mask, sliding_window_mask};
pub use mlp::swiglu_mlp;
pub use norm::rms_norm;
pub use rope::{rope_tables, rotary_embedding, RopeTables};
