//! Build the bundled tiny Llama for an execution provider and save the package.
//!
//! `cargo run --example build_for_ep -- cuda f16 out/tiny-llama-cuda`

use std::path::PathBuf;

use mobius::ir::DType;
use mobius::opt::Limits;
use mobius::source::{HubSettings, ModelSource};
use mobius::{build, get_ep, BuildOptions, SaveOptions};

fn main() -> mobius::Result<()> {
    let mut args = std::env::args().skip(1);
    let ep = args.next().unwrap_or_else(|| "cuda".into());
    let dtype = args.next().unwrap_or_else(|| "f16".into());
    let out = PathBuf::from(args.next().unwrap_or_else(|| "out/tiny-llama".into()));

    let options = BuildOptions {
        source: ModelSource::LocalDir(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama"),
        ),
        dtype: DType::parse_model_dtype(&dtype),
        load_weights: true,
        hub: HubSettings::from_env(),
        execution_provider: get_ep(&ep)?,
        limits: Limits::default(),
        verify_rewrites: false,
        quant: None,
        accuracy_level: None,
        assume_llama: false,
        prune_lm_head: false,
        fp8_kv_cache: None,
        static_cache: None,
        trace: true,
        cancel: None,
    };
    let package = build(&options)?;
    print!("{}", package.optimization);
    let saved = package.save(&SaveOptions {
        out: out.clone(),
        overwrite: true,
        progress: false,
        cancel: None,
    })?;
    println!(
        "saved {} ({} bytes of weights)",
        out.display(),
        saved.data_bytes
    );
    Ok(())
}
