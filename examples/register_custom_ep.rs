//! Register a custom execution provider, from code and from a TOML file, and list the registry.
//!
//! `cargo run --example register_custom_ep`

use std::collections::BTreeSet;
use std::path::Path;

use mobius::ep::{ep_table, load_ep_file};
use mobius::ir::DType;
use mobius::{ep_registry, get_ep, register_ep, EpCapabilities};

fn main() -> mobius::Result<()> {
    // From code: start from the spec defaults and say what the EP can do.
    let mine = EpCapabilities {
        gqa_dtypes: BTreeSet::from([DType::F16]),
        qkv_pack_dtypes: BTreeSet::from([DType::F16]),
        ..EpCapabilities::new("my-ep")
    };
    register_ep(mine, false)?;

    // From a file: the same fields, plus optional cost-model parameters.
    let from_file =
        load_ep_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/custom_ep.toml"))?;
    register_ep(from_file, false)?;

    let eps = ep_registry()
        .iter()
        .map(|n| get_ep(n))
        .collect::<mobius::Result<Vec<_>>>()?;
    print!("{}", ep_table(&eps));
    Ok(())
}
