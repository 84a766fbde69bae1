//! Model-level helpers: configs, optimized graphs, op counts and fixture weights.

use std::collections::HashMap;
use std::path::Path;

use mobius::config::ArchConfig;
use mobius::ep::get_ep;
use mobius::ir::{DType, Graph};
use mobius::models::build_model;
use mobius::opt::{Limits, OptimizeOptions, Role};
use mobius::rulebook::optimize;
use mobius::source::WeightFiles;
use mobius::weights::store::TensorStore;

use super::{fixture, real_config};
use mobius::ops::Tensor;

/// The built-in EPs whose models the tests build in f16.
pub const F16_EPS: &[&str] = &["cuda", "dml", "webgpu", "trt-rtx"];

/// The dtype the tests build for EP `ep`: f16 for [`F16_EPS`], f32 otherwise.
pub fn ep_dtype(ep: &str) -> DType {
    if F16_EPS.contains(&ep) {
        DType::F16
    } else {
        DType::F32
    }
}

/// The config of checkpoint folder `dir`.
pub fn load_config(dir: &Path) -> ArchConfig {
    mobius::models::load_config(&dir.join("config.json")).unwrap()
}

/// The config of a published model (`tests/data/configs/{name}`).
pub fn published(name: &str) -> ArchConfig {
    load_config(&real_config(name))
}

/// The config of a bundled fixture.
pub fn fixture_config(name: &str) -> ArchConfig {
    load_config(&fixture(name))
}

/// Every bundled float decoder fixture (a folder of tests/fixtures with a reference.json
/// without a `task`, or `task` "text-generation"), sorted. Pre-quantized checkpoints (`task`
/// "prequantized-text-generation") are left to tests/prequantized.rs.
pub fn decoder_fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture(""))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|dir| {
            fixture_task(dir)
                .as_deref()
                .is_none_or(|t| t == "text-generation")
        })
        .filter(|dir| load_config(dir).role() == Role::Decoder)
        .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "no decoder fixtures under tests/fixtures"
    );
    names
}

/// The `task` of a fixture folder's reference.json (`None` without one or without the key);
/// fixtures without a reference.json are no fixtures: `Some("")`.
pub fn fixture_task(dir: &Path) -> Option<String> {
    let Ok(bytes) = std::fs::read(dir.join("reference.json")) else {
        return Some(String::new());
    };
    let reference: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    reference["task"].as_str().map(str::to_string)
}

/// Parses config.json text.
pub fn parse_config(json: &str) -> mobius::Result<ArchConfig> {
    mobius::models::parse_config(json.as_bytes(), Path::new("config.json"))
}

/// Optimizer options for a `role` model in `dtype`, default limits.
pub fn optimize_options(dtype: DType, role: Role) -> OptimizeOptions {
    OptimizeOptions {
        dtype,
        role,
        limits: Limits::default(),
        fingerprint_leaves: None,
        accuracy_level: None,
        kv_cache: mobius::opt::KvCache::AsIs,
        trace: false,
    }
}

/// The decoder graph of `cfg` in `dtype`, optimized for EP `ep`.
pub fn optimized(cfg: &ArchConfig, ep: &str, dtype: DType) -> Graph {
    let portable = build_model(cfg, dtype).unwrap();
    let opts = optimize_options(dtype, Role::Decoder);
    optimize(&portable, &get_ep(ep).unwrap(), &opts)
        .unwrap()
        .0
        .graph
}

/// How many nodes of `g` run `op` (`domain::Op` for non-default domains).
pub fn count(g: &Graph, op: &str) -> usize {
    g.op_counts().get(op).copied().unwrap_or(0)
}

/// The weights of a bundled fixture (single file or sharded), renamed as its family reads them
/// (as `mobius build` does).
pub fn fixture_store(name: &str) -> TensorStore {
    let dir = fixture(name);
    let files = if dir.join("model.safetensors.index.json").exists() {
        WeightFiles::Sharded {
            index: dir.join("model.safetensors.index.json"),
            root: dir.clone(),
        }
    } else {
        WeightFiles::Single(dir.join("model.safetensors"))
    };
    let store = TensorStore::open(&files).unwrap();
    match mobius::models::checkpoint_renaming(&fixture_config(name)) {
        Some(rename) => store.renamed(rename).unwrap(),
        None => store,
    }
}

/// The feed of one decoder pass over `ids` (one row) after `past` cached tokens: `input_ids`,
/// an all-ones `attention_mask` over the past and new tokens, `position_ids` `past..past + S`,
/// and the tensors of `cache` (the past keys and values, or a static cache) as they are.
pub fn decoder_feed(
    ids: &[i64],
    past: usize,
    cache: &HashMap<String, Tensor>,
) -> HashMap<String, Tensor> {
    let (s, total) = (ids.len(), past + ids.len());
    let mut feed = cache.clone();
    feed.insert(
        "input_ids".into(),
        Tensor::int(DType::I64, vec![1, s], ids.to_vec()),
    );
    feed.insert(
        "attention_mask".into(),
        Tensor::int(DType::I64, vec![1, total], vec![1; total]),
    );
    feed.insert(
        "position_ids".into(),
        Tensor::int(
            DType::I64,
            vec![1, s],
            (past as i64..total as i64).collect(),
        ),
    );
    feed
}
