//! Fuzzes `config.json` parsing: [`mobius::models::parse_config`] must return `Ok` or
//! `Err` for any bytes, never panic. Configs that parse and describe a small model are also
//! built into a graph, which must not panic either.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mobius::config::ArchConfig;
use mobius::ir::DType;

/// Upper bound on the weights (in elements) of a config that is also built into a graph, so a
/// fuzzed config cannot make one iteration allocate gigabytes of RoPE tables or shapes.
const MAX_BUILD_ELEMS: u128 = 1 << 22;

/// Whether `cfg` is small enough to build quickly: few layers, small matrices and tables.
fn small_enough(cfg: &ArchConfig) -> bool {
    let h = cfg.hidden_size as u128;
    let i = cfg.intermediate_size as u128;
    let v = cfg.vocab_size as u128;
    let heads = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) as u128;
    let attn = heads * cfg.head_dim as u128 * h;
    let rope = cfg.max_position_embeddings as u128 * cfg.head_dim as u128;
    let per_layer = attn + 3 * h * i;
    cfg.num_hidden_layers <= 4
        && per_layer <= MAX_BUILD_ELEMS
        && 2 * v * h <= MAX_BUILD_ELEMS
        && rope <= MAX_BUILD_ELEMS
}

fuzz_target!(|data: &[u8]| {
    let Ok(cfg) = mobius::models::parse_config(data, Path::new("config.json")) else {
        return;
    };
    if small_enough(&cfg) {
        for dtype in [DType::F32, DType::F16] {
            let _ = mobius::models::build_model(&cfg, dtype);
        }
    }
});
