//! Appliers of the lowering rules (`rewrites/lowering/`, registered in [`super::appliers`]):
//! standard-ONNX decompositions of ops an EP cannot run (RotaryEmbedding, Attention, rank-4
//! RMSNormalization, TensorScatter), added to the e-graph as equivalent forms the cost model may
//! pick; and `Range` as a running sum.

pub(crate) mod attention;
pub(crate) mod range;
pub(crate) mod rms_norm;
pub(crate) mod rotary;
pub(crate) mod scatter;
