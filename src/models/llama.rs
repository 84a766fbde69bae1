//! The Llama family (llama, mistral, qwen2): the plain pre-norm decoder of
//! [`super::decoder`] with no family hooks (q/k/v biases, sliding windows and RoPE scaling
//! come from the shared config fields).

use super::decoder::{self, Family};
use crate::config::ArchConfig;
use crate::ir::{DType, Graph};

/// The plain Llama decoder: every [`Family`] default.
pub struct Llama;

impl Family for Llama {}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &Llama)
}
