//! Optimizer scaling: time and e-graph size against layer count (1 … 80 layers of the
//! Llama-3-70B config, no weights, `--ep cuda --dtype f16`). Optimizer time must grow linearly
//! with layers; the table prints time per layer so that is visible at a glance.
//!
//! `cargo bench --bench optimizer` (plain timing, median of several runs; under `cargo test`
//! each size runs once).

use std::path::Path;
use std::time::{Duration, Instant};

use mobius::ir::DType;
use mobius::models::build_model;
use mobius::opt::{Limits, OptimizeOptions, Role};
use mobius::rulebook::optimize;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let runs = if bench { 7 } else { 1 };
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/configs/llama-3-70b/config.json");
    let base = mobius::models::load_config(&path).expect("the 70B config loads");
    let cuda = mobius::get_ep("cuda").expect("cuda is built in");
    let opts = OptimizeOptions {
        dtype: DType::F16,
        role: Role::Decoder,
        limits: Limits::default(),
        fingerprint_leaves: None,
        accuracy_level: None,
        kv_cache: mobius::opt::KvCache::AsIs,
        trace: false,
    };
    println!("summary: optimizer scaling, Llama-3-70B config, cuda f16");
    println!(
        "summary: {:>6} {:>7} {:>9} {:>10} {:>12} {:>14}",
        "layers", "nodes", "e-nodes", "e-classes", "time (ms)", "ms per layer"
    );
    for layers in [1usize, 2, 4, 8, 16, 32, 64, 80] {
        let mut cfg = base.clone();
        cfg.num_hidden_layers = layers;
        cfg.layer_windows.resize(layers, None);
        let model = build_model(&cfg, DType::F16).expect("graph builds");
        let mut times = Vec::new();
        let mut last = None;
        for _ in 0..runs {
            let start = Instant::now();
            let (_, report) = optimize(&model, &cuda, &opts).expect("optimizes");
            times.push(start.elapsed());
            last = Some(report);
        }
        let report = last.expect("at least one run");
        let stage = report.stages.last().expect("stages ran");
        let t = median(times).as_secs_f64() * 1e3;
        println!(
            "summary: {:>6} {:>7} {:>9} {:>10} {:>12.2} {:>14.3}",
            layers,
            model.graph.nodes.len(),
            stage.enodes,
            stage.eclasses,
            t,
            t / layers as f64
        );
    }
}
