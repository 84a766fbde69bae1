//! Fuzzes `.npy` parsing (the inputs of `mobius run`): [`mobius::interp::npy::from_npy`] must
//! return `Ok` or `Err` for any bytes, never panic. What it accepts must survive a round trip:
//! written back with [`mobius::interp::npy::to_npy`], it parses to the same dtype, shape and
//! bytes.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mobius::interp::npy::{from_npy, to_npy};
use mobius::limits::InterpLimits;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("input.npy");
    // Tight budgets: a header may declare any shape, and must be refused before allocating.
    let limits = InterpLimits {
        max_tensor_elements: 1 << 20,
        max_run_bytes: 64 << 20,
        max_loop_iterations: 1,
    };
    let Ok(tensor) = from_npy(data, path, &limits) else {
        return;
    };
    // The first write normalises (bool bytes to 0/1, f16 through f32); from then on the bytes
    // must be stable.
    let written = to_npy(&tensor);
    let again = from_npy(&written, path, &limits).expect("mobius reads back the .npy it writes");
    assert_eq!((again.dtype, &again.shape), (tensor.dtype, &tensor.shape));
    assert!(
        to_npy(&again) == written,
        "a second round trip changed the bytes"
    );
});
