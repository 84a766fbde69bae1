//! The hostile-input corpus: bad checkpoints, models, arrays and command lines against `build`,
//! `optimize`, `verify` and `run`. Every case asserts the exit code, a message that names the
//! cause, and that nothing was written (no output, no staging folder, nothing outside the
//! folders the user named). One module per area; shared assertions in `check`.

#[path = "../common/mod.rs"]
mod common;

mod check;
mod config;
mod eps;
mod files;
mod interp;
mod optimize;
mod quant;
mod run;
mod verify;
