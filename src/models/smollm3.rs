//! SmolLM3: the Llama decoder where the layers marked 0 in `no_rope_layers` use no position
//! embedding at all (NoPE): their q and k go to attention unrotated.

use super::decoder::{self, Family};
use crate::config::{ArchConfig, Rope};
use crate::ir::{DType, Graph};

/// SmolLM3's hooks: RoPE only in some layers.
pub struct SmolLm3;

impl Family for SmolLm3 {
    fn layer_rope<'c>(&self, cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        cfg.family.layer_uses_rope(i).then_some((&cfg.rope, 0))
    }
}

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    decoder::build(cfg, dtype, &SmolLm3)
}
