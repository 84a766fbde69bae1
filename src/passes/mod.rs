//! Graph passes that read the checkpoint's tensors while preparing the portable graph for the
//! optimizer: pre-quantized checkpoints (GPTQ, AWQ, FP8) as quantized weights, and embedding
//! tables kept in the narrow float type the checkpoint stores them in. The quantization kernels
//! they rest on are in [`crate::quant`].

pub mod narrow_tables;
pub mod prequantized;
