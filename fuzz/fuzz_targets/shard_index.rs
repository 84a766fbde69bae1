//! Fuzzes `model.safetensors.index.json` parsing: [`mobius::source::index::ShardIndex::parse`]
//! must return `Ok` or `Err` for any bytes, never panic.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mobius::source::index::ShardIndex;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = ShardIndex::parse(data, Path::new("model.safetensors.index.json")) {
        let _ = index.shard_files();
    }
});
