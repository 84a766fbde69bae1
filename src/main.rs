//! The `mobius` command line.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mobius::cost_file::{cost_file, CostOptions};
use mobius::ep::{
    ep_json, ep_registry, ep_table, get_ep, register_ep_file, target_ep, EpCapabilities,
};
use mobius::ir::DType;
use mobius::ir::QuantParams;
use mobius::limits::InterpLimits;
use mobius::models::registry;
use mobius::opt::Limits;
use mobius::optimize_file::{optimize_file, OptimizeFileOptions};
use mobius::passes::quantize::QuantRequest;
use mobius::run_file::{parse_input_spec, run_file, RunOptions};
use mobius::source::{HubSettings, ModelSource};
use mobius::verify::{check_tolerance, verify, VerifyOptions};
use mobius::{build, BuildOptions, Features, ModelPackage, SaveOptions};
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system allocator: the optimizer makes and frees millions of small
/// e-nodes, sets and vectors, and glibc's malloc spent about a fifth of a large build's
/// instructions on them (see docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Hands the memory the graph phase freed (the portable graph, the optimizer's e-graphs) back
/// to the system before the weights are streamed: mimalloc otherwise keeps freed pages for a
/// while before it purges them, and the weight writer's blocks are fresh mappings, so the pages
/// kept would add to the build's peak (more for a larger e-graph, a `--quant` build's). The
/// library's own release (`malloc_trim`) only reaches glibc's heap.
fn release_freed_memory() {
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: mi_collect takes no pointer; it frees and purges mimalloc's own unused pages.
    unsafe { mi_collect(true) }
}

/// Where [`emit`] writes.
#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Writes `text` to stdout or stderr. A reader that went away (`mobius list eps | head`) ends
/// the process as a broken pipe ends any command-line tool: quietly, by SIGPIPE (status 141 in
/// a shell; exit code 1 where there are no signals), never with a panic. Other write errors are
/// ignored, as `print!` would have panicked on them with nothing left to report to.
fn emit(stream: Stream, text: &str) {
    use std::io::Write;
    let written = match stream {
        Stream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush())
        }
        Stream::Stderr => std::io::stderr().lock().write_all(text.as_bytes()),
    };
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            #[cfg(unix)]
            {
                // Rust ignores SIGPIPE at start; its default action ends the process.
                let _ =
                    signal_hook::low_level::emulate_default_handler(signal_hook::consts::SIGPIPE);
            }
            std::process::exit(1);
        }
    }
}

/// Turn Hugging Face checkpoints into ONNX packages for ONNX Runtime and onnxruntime-genai.
#[derive(Parser)]
#[command(name = "mobius", version, about, long_about = None)]
struct Cli {
    /// More log output (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    verbose: u8,
    /// Only print errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build an ONNX package (model.onnx, model.onnx.data, genai_config.json for decoders,
    /// tokenizer files) from a checkpoint, optimized for an execution provider.
    Build(BuildArgs),
    /// Optimize an existing .onnx model (with its external data) for an execution provider.
    Optimize(OptimizeArgs),
    /// Check that two models compute the same thing: both run through mobius' reference
    /// interpreter on the same random inputs; exit code 0 within tolerance, 1 beyond, 2 on
    /// error.
    Verify(VerifyArgs),
    /// Run a model with mobius' reference interpreter on .npy inputs, writing .npy outputs.
    Run(RunArgs),
    /// Estimate a model with an EP's cost model (the one extraction minimizes).
    ///
    /// Per node and per op type, the predicted time of a prefill (`prefill_tokens` of the EP's cost
    /// parameters, batch 1, empty cache) and of one decoding step after it, bytes moved,
    /// FLOPs, and the roofline term that decides (launch, memory, compute; host: small shape
    /// arithmetic; folded: constants). The graph is costed as written: no rewrite runs.
    Cost(CostArgs),
    /// List what mobius supports.
    List {
        #[command(subcommand)]
        what: ListWhat,
    },
}

#[derive(Args)]
struct VerifyArgs {
    /// The reference model.
    reference: PathBuf,
    /// The model to check against it.
    candidate: PathBuf,
    /// Sizes of symbolic dims, e.g. `batch=1,sequence_len=7,past_sequence_len=3` (others:
    /// names with "past" → 3, "seq" → 7, anything else → 1). 0 is allowed (past_sequence_len=0:
    /// no cache), but an output left with no elements is an error: nothing would be compared.
    #[arg(long, value_name = "NAME=N,...", value_parser = parse_dims)]
    dims: Option<BTreeMap<String, usize>>,
    /// Number of random input sets (at least 1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    samples: u32,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Random padded attention masks instead of all ones (left padding; right padding when
    /// either model runs GroupQueryAttention).
    #[arg(long)]
    random_mask: bool,
    /// Absolute tolerance (default by output dtype: f32 1e-4, f16 2e-2, bf16 1e-1).
    #[arg(long, value_parser = parse_tolerance)]
    atol: Option<f64>,
    /// Relative tolerance, times the reference output's largest finite magnitude (default by
    /// dtype: f32 1e-5, f16 1e-2, bf16 5e-2).
    #[arg(long, value_parser = parse_tolerance)]
    rtol: Option<f64>,
    #[command(flatten)]
    limits: InterpLimitArgs,
}

/// Budgets of the reference interpreter, shared by `verify` and `run`.
#[derive(Args)]
struct InterpLimitArgs {
    /// Largest element count of any one tensor (input, weight or computed value).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = InterpLimits::default().max_tensor_elements)]
    max_tensor_elements: u64,
    /// Largest memory, in MiB, the values of one run may hold together.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=(1 << 40)),
          default_value_t = InterpLimits::default().max_run_bytes >> 20)]
    max_memory_mib: u64,
    /// Most iterations one `Loop` node may run.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          default_value_t = InterpLimits::default().max_loop_iterations)]
    max_loop_iterations: u64,
}

impl InterpLimitArgs {
    fn limits(&self) -> InterpLimits {
        InterpLimits {
            max_tensor_elements: self.max_tensor_elements,
            max_run_bytes: self.max_memory_mib << 20,
            max_loop_iterations: self.max_loop_iterations,
        }
    }
}

fn parse_tolerance(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number"))?;
    check_tolerance("the tolerance", v)
        .map_err(|_| format!("`{text}`: a tolerance must be a finite number ≥ 0"))
}

fn parse_dims(text: &str) -> Result<BTreeMap<String, usize>, String> {
    let mut dims = BTreeMap::new();
    for pair in text.split(',') {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}`: expected NAME=N"))?;
        let name = k.trim();
        if name.is_empty() {
            return Err(format!("`{pair}`: the dim name is empty"));
        }
        let n = v
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("`{pair}`: `{v}` is not a size (a whole number ≥ 0)"))?;
        if dims.insert(name.to_string(), n).is_some() {
            return Err(format!("`{name}` is given twice"));
        }
    }
    Ok(dims)
}

fn parse_input(text: &str) -> Result<(String, PathBuf), String> {
    parse_input_spec(text).map_err(|e| e.to_string())
}

#[derive(Args)]
struct RunArgs {
    /// The model (external data is read next to it).
    model: PathBuf,
    /// An input as NAME=FILE.npy (repeatable; every graph input is needed, each once).
    #[arg(long = "input", value_name = "NAME=FILE", value_parser = parse_input)]
    inputs: Vec<(String, PathBuf)>,
    /// Folder for the outputs, one OUTPUT_NAME.npy each (created if missing). A file of the
    /// same name already there is an error unless --overwrite is given; an --input file, the
    /// model and the files of its folder are never replaced. Outputs appear all together or
    /// not at all (a failed or interrupted run leaves no output and no temporary file).
    #[arg(long, value_name = "DIR")]
    output_dir: PathBuf,
    /// Replace existing OUTPUT_NAME.npy files in --output-dir (once every output is written).
    #[arg(long)]
    overwrite: bool,
    #[command(flatten)]
    limits: InterpLimitArgs,
}

#[derive(Args)]
struct CostArgs {
    /// The model (its external data is not read).
    model: PathBuf,
    /// The execution provider whose cost model estimates it (`mobius list eps`); default: the
    /// EP of --ep-file, else `default`.
    #[arg(long, visible_alias = "execution-provider", value_name = "EP")]
    ep: Option<String>,
    /// Register a custom EP from a TOML file (its `[cost]` table sets the parameters, e.g. one
    /// written by scripts/calibrate.py); it is the one used unless --ep names another.
    #[arg(long, value_name = "FILE")]
    ep_file: Option<PathBuf>,
    /// Sizes of symbolic dims in both workloads, e.g. `past_sequence_len=1024,batch=4` (a name
    /// is a whole dim or one term of a sum such as `past_sequence_len + sequence_len`; others
    /// follow the workload: names with "past" → cache length, "batch" → 1, "seq" → tokens).
    #[arg(long, value_name = "NAME=N,...", value_parser = parse_dims)]
    dims: Option<BTreeMap<String, usize>>,
    /// Print JSON (nodes, op types, totals; infinite times as null) instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum ListWhat {
    /// Registered execution providers and their capabilities.
    Eps {
        /// Print JSON (every capability field) instead of a table.
        #[arg(long)]
        json: bool,
        /// Also register the EP described by this TOML file.
        #[arg(long, value_name = "FILE")]
        ep_file: Option<PathBuf>,
    },
    /// The model families mobius builds: the Hugging Face `model_type`s each answers to and
    /// the onnxruntime-genai `model.type` of each.
    Models {
        /// Print the Markdown table of docs/families.md instead (family, model types, what sets
        /// it apart).
        #[arg(long)]
        markdown: bool,
        /// With --markdown: the README's short list instead (each family with its model types).
        #[arg(long, requires = "markdown")]
        short: bool,
    },
}

/// Execution provider selection, shared by `build` and `optimize`.
#[derive(Args)]
struct EpArgs {
    /// Target execution provider: default, cpu, cuda, dml, webgpu, trt-rtx, onnx-standard, mlx,
    /// openvino, qnn, or a custom EP from --ep-file. `mobius list eps` shows them.
    #[arg(long, visible_alias = "execution-provider", value_name = "EP")]
    ep: Option<String>,
    /// Register a custom EP from a TOML file (see examples/custom_ep.toml); it becomes the
    /// target unless --ep names another.
    #[arg(long, value_name = "FILE")]
    ep_file: Option<PathBuf>,
    /// Print what each optimizer stage and rule group changed (`[EP Trace]` lines on stderr).
    #[arg(long)]
    trace: bool,
    /// Check every rewrite on concrete values while optimizing (the model is evaluated on
    /// random inputs with mobius' reference interpreter; slow on large models). A rewrite that
    /// changes a value stops the build naming the rule.
    #[arg(long)]
    verify_rewrites: bool,
}

impl EpArgs {
    /// The target EP's capabilities; fails before any model is read.
    fn resolve(&self) -> mobius::Result<EpCapabilities> {
        target_ep(self.ep.as_deref(), self.ep_file.as_deref())
    }
}

#[derive(Args)]
struct OptimizeArgs {
    /// The model to optimize (external data is read from its folder).
    input: PathBuf,
    /// Output folder for model.onnx + model.onnx.data. It must not exist or be empty, unless
    /// --overwrite.
    out: PathBuf,
    #[command(flatten)]
    ep: EpArgs,
    /// Model dtype for dtype-gated rules. Default: the dtype of the first floating-point graph
    /// output.
    #[arg(long, value_enum)]
    dtype: Option<DTypeArg>,
    /// What the model is (gates role-specific rules such as attention fusion).
    #[arg(long, default_value = "decoder", value_parser = ["decoder", "encoder", "vision"])]
    role: String,
    /// Replace an existing, non-empty output folder.
    #[arg(long)]
    overwrite: bool,
    /// How the model will be run with its KV cache. as-is: no promise, every rewrite keeps
    /// the graph's outputs for every input it accepts. genai: you declare onnxruntime-genai's
    /// contract (padding on the right; each row's valid keys contiguous from cache index 0, the
    /// mask 0/1 over past + new tokens; position_ids each row's valid length so far plus the
    /// token's offset; cache entries at and beyond a row's length never read), under which an
    /// exported causal/padding (and sliding-window) attention mask becomes GroupQueryAttention
    /// with packed QKV, as `mobius build` emits. Inputs outside the contract (left padding, a
    /// cache written by the export itself after a padded prompt) then give other results.
    #[arg(long, value_name = "CONTRACT", default_value = "as-is", value_parser = ["as-is", "genai"])]
    kv_cache: String,
    #[command(flatten)]
    quant: QuantArgs,
}

#[derive(Args)]
#[command(group = clap::ArgGroup::new("from").required(true).args(["model", "config"]))]
struct BuildArgs {
    /// Hugging Face repo id (ORG/NAME). Looked up in the Hugging Face cache first
    /// (HF_HUB_CACHE, HF_HOME), downloaded from HF_ENDPOINT otherwise; HF_HUB_OFFLINE=1
    /// forbids downloads.
    #[arg(long, value_name = "ORG/NAME")]
    model: Option<String>,
    /// Hub revision (branch, tag or commit) for --model.
    #[arg(long, requires = "model")]
    revision: Option<String>,
    /// Local checkpoint folder: config.json plus model.safetensors or a sharded
    /// model.safetensors.index.json.
    #[arg(long, value_name = "DIR")]
    config: Option<PathBuf>,
    /// Output folder. It must not exist or be empty, unless --overwrite.
    out: PathBuf,
    /// Model dtype. Default: the EP's (f32 for default, cpu, onnx-standard, openvino and qnn;
    /// f16 for cuda, dml, webgpu, mlx and trt-rtx); a checkpoint stored in another dtype is
    /// converted while its weights stream. A dtype the EP's runtime does not execute (bf16 on
    /// cpu) is refused. `mobius list eps` shows each EP's dtypes and default.
    #[arg(long, value_enum)]
    dtype: Option<DTypeArg>,
    /// Write the graph with declared initializer shapes but no weight data (the data file is
    /// a sparse, zero-filled placeholder). Weights are not downloaded.
    #[arg(long)]
    no_weights: bool,
    /// Replace an existing, non-empty output folder.
    #[arg(long)]
    overwrite: bool,
    /// Build a model whose model_type mobius does not know, but whose config.json names
    /// `*ForCausalLM` architectures, as llama. Refused unless config.json holds no field another
    /// family computes with (soft-caps, multipliers, LayerNorm epsilons, parallel blocks,
    /// experts…) and the checkpoint holds exactly the tensors, of exactly the shapes, a llama
    /// of that config reads (checked tensor by tensor before anything is written). Needs the
    /// weights (not with --no-weights).
    #[arg(long)]
    assume_llama: bool,
    /// Build features, comma-separated. `prune-lm-head`: the LM head computes the logits of
    /// the last position only (`logits` is `[batch, 1, vocab]`, not `[batch, sequence_len,
    /// vocab]`; the final norm still runs on every position). A batch's rows must then be
    /// left-padded: with right padding the last position of a shorter row is a pad and its
    /// logits are not that row's next-token logits. `static-cache` (with --max-seq-len): a KV
    /// cache of N slots, written in place: inputs `key_cache.{i}`/`value_cache.{i}`
    /// `[batch, N, kv_heads·head_dim]`, `write_indices` and `nonpad_kv_seqlen` (int64 `[batch]`:
    /// the first slot written, and that plus sequence_len), no attention_mask; outputs
    /// `updated_key_cache.{i}`/`updated_value_cache.{i}`. The attention is opset-24 Attention
    /// on every EP (no GroupQueryAttention); no genai_config.json is written. `fp8-kv-cache`:
    /// past_key_values.*/present.* as FLOAT8E4M3FN with per-layer, per-tensor scales, for
    /// GroupQueryAttention on EPs with a float8 cache (cuda) and f16/bf16 models; elsewhere a
    /// warning and a plain build.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "FEATURE,...")]
    features: Vec<FeatureArg>,
    /// The per-layer scales of an fp8-kv-cache build: JSON `{"scales": {"k_scales": [...],
    /// "v_scales": [...]}}` with optional `layer_ids` and `qmax`, as onnxruntime-genai's
    /// KV-cache calibration writes it (per-tensor scales). Default: 1.0 for every layer.
    #[arg(long, value_name = "FILE")]
    kv_cache_scale_file: Option<PathBuf>,
    /// Cache slots of a static-cache build (required with `--features static-cache`, at most
    /// the model's max_position_embeddings).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_seq_len: Option<u64>,
    #[command(flatten)]
    ep: EpArgs,
    #[command(flatten)]
    quant: QuantArgs,
}

/// Weight quantization flags of `build` and `optimize`.
#[derive(Args)]
struct QuantArgs {
    /// Quantize the float weights of every MatMul (2-D initializers) in blocks along the
    /// input dimension, round to nearest (bit for bit as onnxruntime's MatMulNBits quantizer).
    /// On EPs with com.microsoft::MatMulNBits the MatMuls run as MatMulNBits; elsewhere as
    /// DequantizeLinear (int4/int8, opset 21 blocks) + MatMul.
    #[arg(long, value_enum, value_name = "BITS")]
    quant: Option<QuantArg>,
    /// Rows of the input dimension per quantization block.
    #[arg(long, value_name = "N", default_value = "32", requires = "quant",
          value_parser = ["16", "32", "64", "128", "256"])]
    quant_block_size: String,
    /// Asymmetric quantization: unsigned values with a zero point per block (default:
    /// symmetric, signed values and no zero points).
    #[arg(long, requires = "quant")]
    quant_asymmetric: bool,
    /// Keep in float the weights whose initializer or MatMul node name matches PATTERN (`*`
    /// matches anything; without `*` the pattern matches anywhere in the name), e.g.
    /// `--quant-exclude lm_head`. Repeatable.
    #[arg(long, value_name = "PATTERN", requires = "quant")]
    quant_exclude: Vec<String>,
    /// Quantize the token-embedding tables too (rows in blocks along the hidden size); on EPs
    /// with the contrib kernels the lookup runs as com.microsoft::GatherBlockQuantized.
    #[arg(long, requires = "quant")]
    quant_embeddings: bool,
    /// `accuracy_level` of the MatMulNBits ops: 0 (unset: the EP decides), 1 (f32), 2 (f16),
    /// 3 (bf16) or 4 (int8: the activations are quantized too, fastest on CPU). Default: the
    /// EP's `default_int4_accuracy_level` (`mobius list eps` shows it).
    #[arg(long, value_name = "LEVEL", value_parser = clap::value_parser!(u8).range(0..=4))]
    accuracy_level: Option<u8>,
}

/// `--features` values.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FeatureArg {
    /// Logits of the last position only.
    PruneLmHead,
    /// A KV cache of --max-seq-len slots updated with TensorScatter.
    StaticCache,
    /// A float8 (e4m3) KV cache for GroupQueryAttention on cuda.
    Fp8KvCache,
}

/// `--quant` values.
#[derive(Clone, Copy, ValueEnum)]
enum QuantArg {
    /// 4-bit weights.
    Int4,
    /// 8-bit weights.
    Int8,
}

impl QuantArgs {
    /// The quantization request, if `--quant` was given.
    fn request(&self) -> Option<QuantRequest> {
        let bits = match self.quant? {
            QuantArg::Int4 => 4,
            QuantArg::Int8 => 8,
        };
        Some(QuantRequest {
            params: QuantParams {
                bits,
                block_size: self.quant_block_size.parse().expect("clap lists numbers"),
                symmetric: !self.quant_asymmetric,
            },
            exclude: self.quant_exclude.clone(),
            embeddings: self.quant_embeddings,
        })
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum DTypeArg {
    #[value(name = "f32", alias = "float32")]
    F32,
    #[value(name = "f16", alias = "float16")]
    F16,
    #[value(name = "bf16", alias = "bfloat16")]
    Bf16,
}

impl From<DTypeArg> for DType {
    fn from(d: DTypeArg) -> DType {
        match d {
            DTypeArg::F32 => DType::F32,
            DTypeArg::F16 => DType::F16,
            DTypeArg::Bf16 => DType::BF16,
        }
    }
}

fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    // Dependencies (egg's per-iteration logs) only speak up for warnings unless RUST_LOG says so.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,mobius={default}")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_target(false)
        .init();
}

/// The checked feature request of `build` ([`Features::parse`], shared with the Python package).
fn build_features(args: &BuildArgs) -> mobius::Result<Features> {
    let names: Vec<&str> = args
        .features
        .iter()
        .map(|f| match f {
            FeatureArg::PruneLmHead => "prune-lm-head",
            FeatureArg::StaticCache => "static-cache",
            FeatureArg::Fp8KvCache => "fp8-kv-cache",
        })
        .collect();
    Features::parse(
        &names,
        args.max_seq_len,
        args.kv_cache_scale_file.as_deref(),
    )
}

fn run_build(args: BuildArgs, quiet: bool) -> mobius::Result<()> {
    let features = build_features(&args)?;
    let ep = args.ep.resolve()?;
    let dtype = ep.model_dtype(args.dtype.map(Into::into))?;
    let source = match (args.model, args.config) {
        (Some(id), _) => ModelSource::Hub {
            id,
            revision: args.revision,
        },
        (None, Some(dir)) => ModelSource::LocalDir(dir),
        (None, None) => unreachable!("clap requires --model or --config"),
    };
    let started = std::time::Instant::now();
    ModelPackage::check_output(&args.out, args.overwrite)?;
    // Refuse an output over a local checkpoint before anything is built (save checks again,
    // for hub sources once the cache folder is known).
    if let ModelSource::LocalDir(dir) = &source {
        if dir.is_dir() {
            mobius::package::check_apart(&args.out, dir, "checkpoint folder")?;
        }
    }
    let opts = BuildOptions {
        source,
        dtype: Some(dtype),
        load_weights: !args.no_weights,
        hub: HubSettings::from_env(),
        execution_provider: ep,
        limits: Limits::default(),
        verify_rewrites: args.ep.verify_rewrites,
        quant: args.quant.request(),
        accuracy_level: args.quant.accuracy_level,
        assume_llama: args.assume_llama,
        prune_lm_head: features.prune_lm_head,
        static_cache: features.static_cache,
        fp8_kv_cache: features.fp8_kv_cache,
        trace: args.ep.trace,
        cancel: None,
    };
    let package = build(&opts)?;
    release_freed_memory();
    if let Some(summary) = &package.quantization {
        tracing::info!("{summary}");
    }
    if args.ep.trace {
        emit(Stream::Stderr, &package.optimization.to_string());
    }
    let saved = package.save(&SaveOptions {
        out: args.out.clone(),
        overwrite: args.overwrite,
        progress: !quiet,
        cancel: None,
    })?;
    tracing::info!(
        "wrote {} ({}, {}, {} nodes, {} initializers, {:.1} MB of weights) in {:.2}s",
        args.out.display(),
        package.execution_provider.name,
        package.dtype,
        package.model.graph.nodes.len(),
        package.model.graph.initializers.len(),
        saved.data_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    // The process exits next and the OS reclaims its memory at once: freeing the model's
    // hundreds of thousands of allocations one by one first, each a likely cache miss, costs
    // a few percent of a 1,000-layer build (the library itself frees everything it allocates).
    std::mem::forget(package);
    Ok(())
}

fn run_optimize(args: OptimizeArgs) -> mobius::Result<()> {
    let ep = args.ep.resolve()?;
    let opts = OptimizeFileOptions {
        input: args.input,
        out: args.out,
        ep,
        dtype: args.dtype.map(Into::into),
        role: args.role.parse().map_err(mobius::Error::Graph)?,
        overwrite: args.overwrite,
        limits: Limits::default(),
        verify_rewrites: args.ep.verify_rewrites,
        quant: args.quant.request(),
        accuracy_level: args.quant.accuracy_level,
        kv_cache: args.kv_cache.parse().map_err(mobius::Error::Graph)?,
        trace: args.ep.trace,
    };
    let (report, quantization) = optimize_file(&opts)?;
    if let Some(summary) = &quantization {
        tracing::info!("{summary}");
    }
    if args.ep.trace {
        emit(Stream::Stderr, &report.to_string());
    }
    tracing::info!(
        "wrote {} ({} → {} nodes for {}) in {:.2}s",
        opts.out.display(),
        report.nodes_before,
        report.nodes_after,
        report.ep,
        report.seconds
    );
    if !args.ep.trace && !report.leftovers.is_empty() {
        let kinds: Vec<String> = report
            .leftovers
            .iter()
            .map(|l| format!("{} × {}", l.count, l.shape))
            .collect();
        tracing::info!(
            "left as the input wrote them: {} (--trace shows where)",
            kinds.join(", ")
        );
    }
    Ok(())
}

fn run_verify(args: VerifyArgs) -> mobius::Result<bool> {
    let opts = VerifyOptions {
        reference: args.reference,
        candidate: args.candidate,
        dims: args.dims.unwrap_or_default(),
        samples: args.samples as usize,
        seed: args.seed,
        random_mask: args.random_mask,
        atol: args.atol,
        rtol: args.rtol,
        limits: args.limits.limits(),
    };
    let report = verify(&opts)?;
    emit(Stream::Stdout, &report.to_string());
    Ok(report.passed())
}

fn run_model(args: RunArgs) -> mobius::Result<()> {
    let report = run_file(&RunOptions {
        model: args.model,
        inputs: args.inputs,
        output_dir: args.output_dir,
        overwrite: args.overwrite,
        limits: args.limits.limits(),
    })?;
    for path in &report.written {
        tracing::info!("wrote {}", path.display());
    }
    Ok(())
}

fn run_cost(args: CostArgs) -> mobius::Result<()> {
    let ep = EpArgs {
        ep: args.ep,
        ep_file: args.ep_file,
        trace: false,
        verify_rewrites: false,
    }
    .resolve()?;
    let report = cost_file(&CostOptions {
        model: args.model,
        ep,
        dims: args.dims.unwrap_or_default(),
    })?;
    if args.json {
        let json = serde_json::to_string_pretty(&report.to_json()).expect("JSON values serialise");
        emit(Stream::Stdout, &format!("{json}\n"));
    } else {
        emit(Stream::Stdout, &report.to_string());
    }
    Ok(())
}

fn run_list(what: ListWhat) -> mobius::Result<()> {
    match what {
        ListWhat::Eps { json, ep_file } => {
            if let Some(path) = ep_file {
                register_ep_file(&path)?;
            }
            let eps = ep_registry()
                .iter()
                .map(|name| get_ep(name))
                .collect::<mobius::Result<Vec<_>>>()?;
            if json {
                let json =
                    serde_json::to_string_pretty(&ep_json(&eps)).expect("JSON values serialise");
                emit(Stream::Stdout, &format!("{json}\n"));
            } else {
                emit(Stream::Stdout, &ep_table(&eps));
            }
        }
        ListWhat::Models { markdown, short } => {
            if short {
                emit(Stream::Stdout, &registry::markdown_short_list());
            } else if markdown {
                emit(Stream::Stdout, &registry::markdown_table());
            } else {
                emit(Stream::Stdout, &registry::text_table());
            }
        }
    }
    Ok(())
}

/// Exit code of a failed command: 2 for bad usage, 1 for bad input or a failed step.
fn exit_code(e: &mobius::Error) -> ExitCode {
    match e {
        mobius::Error::Usage(_) => ExitCode::from(2),
        _ => ExitCode::FAILURE,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    mobius::package::interrupt::install();
    let result = match cli.command {
        Command::Build(args) => run_build(args, cli.quiet),
        Command::Optimize(args) => run_optimize(args),
        Command::List { what } => run_list(what),
        Command::Verify(args) => {
            return match run_verify(args) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    emit(Stream::Stderr, &format!("error: {e}\n"));
                    ExitCode::from(2)
                }
            };
        }
        Command::Run(args) => run_model(args),
        Command::Cost(args) => run_cost(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(Stream::Stderr, &format!("error: {e}\n"));
            exit_code(&e)
        }
    }
}
