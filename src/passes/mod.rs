//! Graph passes that run around the optimizer, each a rewrite of the graph for one request:
//! before it, on the portable graph, pre-quantized checkpoints (GPTQ, AWQ, FP8) read as quantized
//! weights ([`prequantized`]), embedding tables kept in the checkpoint's narrow float type
//! ([`narrow_tables`]), `--quant` ([`quantize`]), `prune-lm-head` ([`prune_lm_head`]) and
//! `static-cache` ([`static_cache`]); after it, on the optimized graph, `fp8-kv-cache`
//! ([`fp8_kv_cache`]). The quantization kernels they rest on are in [`crate::quant`].

pub mod fp8_kv_cache;
pub mod narrow_tables;
pub mod prequantized;
pub mod prune_lm_head;
pub mod quantize;
pub mod static_cache;

use std::collections::HashSet;

/// A fresh value name from `stem`, recorded in `used`.
fn fresh(used: &mut HashSet<String>, stem: String) -> String {
    let mut name = stem.clone();
    let mut i = 1;
    while used.contains(&name) {
        name = format!("{stem}_{i}");
        i += 1;
    }
    used.insert(name.clone());
    name
}
