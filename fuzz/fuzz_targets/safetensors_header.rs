//! Fuzzes safetensors header parsing: [`mobius::weights::store::parse_header`] must return
//! `Ok` or `Err` for any file contents, never panic, and every entry it accepts must point
//! inside the file.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mobius::weights::store::parse_header;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = parse_header(data, Path::new("model.safetensors")) {
        for entry in &entries {
            // The documented contract: accepted byte ranges lie inside the file.
            assert!(entry.data.start <= entry.data.end && entry.data.end <= data.len());
        }
    }
});
