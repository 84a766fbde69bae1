//! Benchmarks of `mobius build`'s two costs: building the graph (no weights) and streaming
//! weights into the external data file.
//!
//! Run with `cargo bench --bench build` (or `scripts/bench.sh`). Criterion measures:
//!
//! - `graph/llama-3.2-1b`, `graph/llama-3-70b`: `models::load_config` + `build_model` in f16, from
//!   the configs in `tests/data/configs/`;
//! - `build_no_weights/llama-3.2-1b`: `mobius::build` without weights for `--ep cuda --dtype
//!   f16` (config, graph, optimizer) plus `ModelPackage::save` into a fresh temporary folder;
//! - `stream/mobius_save_bf16_to_f16`, `stream/fs_copy`: `onnx::export::save` of a generated
//!   bf16 safetensors checkpoint (~256 MB, `MOBIUS_BENCH_STREAM_MB` to change) converted to f16,
//!   against `std::fs::copy` of the same file.
//!
//! Criterion does not compare two benchmarks, so after it the bench times a few alternating
//! runs of both streaming paths itself and prints `mobius/copy` as a ratio. Every summary line
//! starts with `summary:`.
//!
//! Under `cargo test` (no `--bench` argument) every benchmark runs once, on a 4 MB checkpoint.

use std::collections::BTreeMap;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput};
use mobius::ir::{DType, Graph, Initializer, Model, TensorSource};
use mobius::models::build_model;
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::source::{HubSettings, ModelSource, WeightFiles};
use mobius::weights::eval::Evaluator;
use mobius::weights::store::TensorStore;
use mobius::BuildOptions;

/// The configs whose graphs are benchmarked, by folder name under `tests/data/configs/`.
const GRAPH_CONFIGS: &[&str] = &["llama-3.2-1b", "llama-3-70b"];
/// Default size of the generated checkpoint, in MiB.
const DEFAULT_STREAM_MB: usize = 256;
/// Checkpoint size under `cargo test`, in MiB.
const TEST_STREAM_MB: usize = 4;
/// Rows and columns of each generated tensor (bf16: 16 MiB each).
const TENSOR_DIMS: [usize; 2] = [2048, 4096];
/// Manual timed runs behind each summary line (alternating, for the two streaming paths).
const SUMMARY_RUNS: usize = 5;

fn config_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/configs/{name}/config.json"))
}

/// Median of `samples` (sorted in place).
fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median wall time of `runs` calls of `f`.
fn time_median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut samples: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    median(&mut samples)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `models::load_config` + `build_model` in f16 for each of [`GRAPH_CONFIGS`].
fn bench_graphs(c: &mut Criterion, runs: usize) -> Vec<(String, Duration, usize)> {
    let mut group = c.benchmark_group("graph");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    let mut summary = Vec::new();
    for name in GRAPH_CONFIGS {
        let path = config_path(name);
        group.bench_function(*name, |b| {
            b.iter(|| {
                let cfg = mobius::models::load_config(black_box(&path)).expect("config loads");
                build_model(&cfg, DType::F16).expect("graph builds")
            })
        });
        // Timed runs for the summary (criterion's own estimate is printed above it).
        let mut nodes = 0;
        let time = time_median(runs, || {
            let cfg = mobius::models::load_config(&path).expect("config loads");
            nodes = build_model(&cfg, DType::F16)
                .expect("graph builds")
                .graph
                .nodes
                .len();
        });
        summary.push((name.to_string(), time, nodes));
    }
    group.finish();
    summary
}

/// `mobius::build` of Llama-3.2-1B without weights, into a fresh temporary folder each time.
fn bench_full_build(c: &mut Criterion, runs: usize) -> Duration {
    let opts = BuildOptions {
        source: ModelSource::LocalDir(config_path("llama-3.2-1b").parent().unwrap().into()),
        dtype: Some(DType::F16),
        load_weights: false,
        hub: HubSettings::from_env(),
        execution_provider: mobius::get_ep("cuda").expect("cuda is built in"),
        limits: mobius::opt::Limits::default(),
        verify_rewrites: false,
        quant: None,
        accuracy_level: None,
        assume_llama: false,
        prune_lm_head: false,
        fp8_kv_cache: None,
        static_cache: None,
        trace: false,
        cancel: None,
    };
    let build_and_save = |out: PathBuf| {
        let package = mobius::build(&opts).expect("build succeeds");
        let save = mobius::SaveOptions {
            out,
            overwrite: false,
            progress: false,
            cancel: None,
        };
        package.save(&save).expect("save succeeds");
    };
    let mut group = c.benchmark_group("build_no_weights");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("llama-3.2-1b", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp dir"),
            |dir| {
                build_and_save(dir.path().join("out"));
                dir
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut run = 0;
    time_median(runs, || {
        run += 1;
        let out = dir.path().join(format!("out{run}"));
        build_and_save(out);
    })
}

/// Writes a bf16 safetensors file of `tensors` `[TENSOR_DIMS]` tensors named
/// `model.layers.N.mlp.up_proj.weight`, filled with pseudo-random values in [-4, 4).
fn write_checkpoint(path: &Path, tensors: usize) -> Vec<String> {
    let [rows, cols] = TENSOR_DIMS;
    let tensor_bytes = rows * cols * 2;
    let names: Vec<String> = (0..tensors)
        .map(|i| format!("model.layers.{i}.mlp.up_proj.weight"))
        .collect();
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    for (i, name) in names.iter().enumerate() {
        let (begin, end) = (i * tensor_bytes, (i + 1) * tensor_bytes);
        header.push_str(&format!(
            ",\"{name}\":{{\"dtype\":\"BF16\",\"shape\":[{rows},{cols}],\"data_offsets\":[{begin},{end}]}}"
        ));
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = BufWriter::new(File::create(path).expect("create checkpoint"));
    out.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    out.write_all(header.as_bytes()).unwrap();
    // One tensor's worth of values, reused for every tensor (contents do not change the cost).
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut data = Vec::with_capacity(tensor_bytes);
    for _ in 0..rows * cols {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let v = ((state >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
        data.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes());
    }
    for _ in 0..tensors {
        out.write_all(&data).unwrap();
    }
    out.into_inner().unwrap().sync_all().unwrap();
    names
}

/// A model whose only content is `names` as f16 initializers read from the checkpoint.
fn weights_model(names: &[String]) -> Model {
    let graph = Graph {
        name: "stream_bench".into(),
        initializers: names
            .iter()
            .map(|name| Initializer {
                name: name.clone(),
                dtype: DType::F16,
                shape: TENSOR_DIMS.to_vec(),
                source: Some(TensorSource::Checkpoint(name.clone())),
            })
            .collect(),
        ..Graph::default()
    };
    Model {
        graph,
        opsets: BTreeMap::from([(String::new(), mobius::models::OPSET)]),
        ir_version: mobius::models::IR_VERSION,
        producer_name: "mobius-bench".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// The generated checkpoint and the two ways of writing it out.
struct StreamFixture {
    _dir: tempfile::TempDir,
    src: PathBuf,
    out_dir: PathBuf,
    copy_dst: PathBuf,
    bytes: u64,
    model: Model,
    store: TensorStore,
}

impl StreamFixture {
    fn new(megabytes: usize) -> StreamFixture {
        let dir = tempfile::tempdir().expect("temp dir");
        let src = dir.path().join("model.safetensors");
        let tensor_mb = (TENSOR_DIMS[0] * TENSOR_DIMS[1] * 2) >> 20;
        let names = write_checkpoint(&src, megabytes.div_ceil(tensor_mb).max(1));
        let out_dir = dir.path().join("out");
        std::fs::create_dir(&out_dir).unwrap();
        let copy_dst = dir.path().join("copy.safetensors");
        let bytes = std::fs::metadata(&src).unwrap().len();
        let store = TensorStore::open(&WeightFiles::Single(src.clone())).expect("store opens");
        StreamFixture {
            src,
            out_dir,
            copy_dst,
            bytes,
            model: weights_model(&names),
            store,
            _dir: dir,
        }
    }

    /// The `mobius build` weight path: check, convert bf16 → f16 and write
    /// `model.onnx` + `model.onnx.data`.
    fn save(&self) {
        let mut evaluator = Evaluator::new(Some(&self.store));
        let report = mobius::onnx::export::save(
            &self.model,
            &self.out_dir,
            &mut evaluator,
            &indicatif::ProgressBar::hidden(),
            &ContribFunctions,
        )
        .expect("save succeeds");
        black_box(report);
    }

    fn copy(&self) {
        black_box(std::fs::copy(&self.src, &self.copy_dst).expect("copy succeeds"));
    }
}

/// Criterion runs of both streaming paths, then `manual_runs` alternating manual runs.
fn bench_stream(
    c: &mut Criterion,
    megabytes: usize,
    manual_runs: usize,
) -> (Duration, Duration, u64) {
    let fx = StreamFixture::new(megabytes);
    let mut group = c.benchmark_group("stream");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(6));
    group.throughput(Throughput::Bytes(fx.bytes));
    group.bench_function("mobius_save_bf16_to_f16", |b| b.iter(|| fx.save()));
    group.bench_function("fs_copy", |b| b.iter(|| fx.copy()));
    group.finish();

    let (mut save, mut copy) = (Vec::new(), Vec::new());
    for _ in 0..manual_runs {
        let start = Instant::now();
        fx.save();
        save.push(start.elapsed());
        let start = Instant::now();
        fx.copy();
        copy.push(start.elapsed());
    }
    (median(&mut save), median(&mut copy), fx.bytes)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench_mode = args.iter().any(|a| a == "--bench");
    let listing = args.iter().any(|a| a == "--list");
    let mut c = Criterion::default().configure_from_args();

    let runs = if bench_mode { SUMMARY_RUNS } else { 1 };
    let graphs = bench_graphs(&mut c, runs);
    let full = bench_full_build(&mut c, runs);
    let megabytes = if bench_mode {
        std::env::var("MOBIUS_BENCH_STREAM_MB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_STREAM_MB)
    } else {
        TEST_STREAM_MB
    };
    let stream = (!listing).then(|| bench_stream(&mut c, megabytes, runs));
    c.final_summary();
    if listing {
        return;
    }

    println!();
    for (name, time, nodes) in &graphs {
        println!(
            "summary: graph build (load + build_model, f16) {name}: {:.2} ms, {nodes} nodes \
             (median of {runs})",
            ms(*time)
        );
    }
    println!(
        "summary: mobius build --no-weights --ep cuda --dtype f16 llama-3.2-1b: {:.2} ms (median of {runs})",
        ms(full)
    );
    if let Some((save, copy, bytes)) = stream {
        let mb = bytes as f64 / (1u64 << 20) as f64;
        println!(
            "summary: stream {mb:.0} MiB bf16->f16 via onnx::export::save: {:.1} ms ({:.0} MiB/s, \
             median of {runs})",
            ms(save),
            mb / save.as_secs_f64()
        );
        println!(
            "summary: std::fs::copy of the same file: {:.1} ms ({:.0} MiB/s, median of {runs})",
            ms(copy),
            mb / copy.as_secs_f64()
        );
        println!(
            "summary: streaming ratio mobius/copy = {:.2}",
            save.as_secs_f64() / copy.as_secs_f64()
        );
    }
}
