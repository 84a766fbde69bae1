//! Fuzzes ONNX model decoding: [`mobius::onnx::import::decode`] must return `Ok` or `Err` for
//! any bytes, never panic. External data is only referenced, never read, so no file is opened.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mobius::rulebook::contrib_functions::ContribFunctions;

fuzz_target!(|data: &[u8]| {
    let _ = mobius::onnx::import::decode(
        data,
        Path::new("fuzz-model-dir/model.onnx"),
        &ContribFunctions,
    );
});
