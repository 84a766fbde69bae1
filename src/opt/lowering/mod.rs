//! Appliers of the lowering rules (`rewrites/lowering/`): standard-ONNX decompositions of ops
//! an EP cannot run (RotaryEmbedding, Attention, rank-4 RMSNormalization), added to the
//! e-graph as equivalent forms the cost model may pick; and `Range` as a running sum.

pub mod attention;
pub mod range;
pub mod rms_norm;
pub mod rotary;

pub(crate) use super::emit::{Emit, TO_END};
