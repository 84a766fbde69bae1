//! The `build` pipeline: source → config → portable graph → optimizer → [`ModelPackage`], which
//! [`ModelPackage::save`] writes (weights streamed from the checkpoint at that point).

use std::path::{Path, PathBuf};

use crate::cancel::{self, Cancel};
use crate::config::{ArchConfig, CheckpointQuant};
use crate::ep::EpCapabilities;
use crate::ir::{DType, Graph, Model, TensorSource};
use crate::models::assume_llama::{check_tensors, ASSUMED_LLAMA};
use crate::models::{build_model, checkpoint_renaming, load_config_with, Unregistered};
use crate::onnx::export::SaveReport;
use crate::opt::fingerprint::leaf_values;
use crate::opt::{Limits, OptimizeOptions, OptimizeReport};
use crate::package::{check_apart, check_target, write_package, StagedOutput};
use crate::passes::fp8_kv_cache::{fp8_kv_cache, Fp8KvCacheRequest, KvCacheScales};
use crate::passes::narrow_tables;
use crate::passes::prequantized::apply_checkpoint_quantization;
use crate::passes::prune_lm_head::prune_lm_head;
use crate::passes::quantize::{
    quantize_graph, runs_gather_block_quantized, QuantRequest, QuantSummary,
};
use crate::passes::static_cache::static_cache;
use crate::rulebook::contrib_functions::ContribFunctions;
use crate::rulebook::optimize;
use crate::source::{resolve, HubSettings, ModelSource};
use crate::weights::eval::Evaluator;
use crate::weights::store::TensorStore;
use crate::Result;

/// What to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Where the checkpoint comes from.
    pub source: ModelSource,
    /// Model dtype; `None` = the EP's [`EpCapabilities::default_dtype`]. One the EP's runtime
    /// does not execute is refused before any work ([`EpCapabilities::model_dtype`]).
    pub dtype: Option<DType>,
    /// Whether to read weights (`false` = `--no-weights`: initializers declared, no data).
    pub load_weights: bool,
    /// Hugging Face endpoint, cache and offline settings.
    pub hub: HubSettings,
    /// The execution provider the graph is optimized for.
    pub execution_provider: EpCapabilities,
    /// Saturation limits of the optimizer.
    pub limits: Limits,
    /// Check every rewrite on concrete values while optimizing (slow on large models: every
    /// weight is read).
    pub verify_rewrites: bool,
    /// Quantize the MatMul weights (`--quant`).
    pub quant: Option<QuantRequest>,
    /// `accuracy_level` of fused `MatMulNBits` (`None`: the EP's default).
    pub accuracy_level: Option<u8>,
    /// Build an unregistered `*ForCausalLM` as llama (`--assume-llama`), once its config.json
    /// and every checkpoint tensor match the Llama layout.
    pub assume_llama: bool,
    /// Compute the logits of the last position only (`--features prune-lm-head`):
    /// `logits` is `[batch, 1, vocab]`, see [`crate::passes::prune_lm_head`].
    pub prune_lm_head: bool,
    /// A KV cache of this many slots (`--features static-cache --max-seq-len N`): the I/O
    /// contract of [`crate::passes::static_cache`]; `None` for the growing cache.
    pub static_cache: Option<usize>,
    /// Store the KV cache as float8 e4m3fn (`--features fp8-kv-cache`): applied to
    /// GroupQueryAttention decoders on EPs with `supports_fp8_kv_cache` for f16/bf16 builds,
    /// a warning and a plain build elsewhere; see [`crate::passes::fp8_kv_cache`].
    pub fp8_kv_cache: Option<Fp8KvCacheRequest>,
    /// Measure what each rule group changed, for printing the report (`--trace`; see
    /// [`OptimizeOptions::trace`]).
    pub trace: bool,
    /// Stops the build between its stages once set ([`crate::Error::Interrupted`]).
    pub cancel: Option<Cancel>,
}

/// The build features (`--features`, `--max-seq-len`, `--kv-cache-scale-file`), checked
/// together: what [`BuildOptions`] takes from them. The CLI and the Python package both read
/// their requests through [`Features::parse`].
#[derive(Debug, Clone, Default)]
pub struct Features {
    /// `prune-lm-head`: see [`BuildOptions::prune_lm_head`].
    pub prune_lm_head: bool,
    /// `static-cache` with its slots: see [`BuildOptions::static_cache`].
    pub static_cache: Option<usize>,
    /// `fp8-kv-cache` with its scales: see [`BuildOptions::fp8_kv_cache`].
    pub fp8_kv_cache: Option<Fp8KvCacheRequest>,
}

/// The feature names [`Features::parse`] accepts.
pub const FEATURE_NAMES: [&str; 3] = ["prune-lm-head", "static-cache", "fp8-kv-cache"];

impl Features {
    /// Checks a feature request: `names` from [`FEATURE_NAMES`]; `max_seq_len` (the static
    /// cache's slots) exactly with `static-cache`; `kv_cache_scale_file` (read and checked
    /// here, before anything is built) only with `fp8-kv-cache`. Fails with
    /// [`crate::Error::Usage`] naming the flag.
    pub fn parse(
        names: &[&str],
        max_seq_len: Option<u64>,
        kv_cache_scale_file: Option<&Path>,
    ) -> Result<Features> {
        if let Some(unknown) = names.iter().find(|n| !FEATURE_NAMES.contains(n)) {
            return Err(crate::Error::Usage(format!(
                "unknown feature `{unknown}`; expected one of {}",
                FEATURE_NAMES.join(", ")
            )));
        }
        let wants = |name: &str| names.contains(&name);
        let static_cache =
            match (wants("static-cache"), max_seq_len) {
                (true, Some(n)) => Some(usize::try_from(n).map_err(|_| {
                    crate::Error::Usage(format!("--max-seq-len {n} does not fit this platform"))
                })?),
                (true, None) => {
                    return Err(crate::Error::Usage(
                        "--features static-cache needs --max-seq-len N (the cache slots)".into(),
                    ))
                }
                (false, Some(_)) => return Err(crate::Error::Usage(
                    "--max-seq-len sets the slots of a static cache: add --features static-cache"
                        .into(),
                )),
                (false, None) => None,
            };
        let fp8_kv_cache =
            match (wants("fp8-kv-cache"), kv_cache_scale_file) {
                (false, Some(_)) => return Err(crate::Error::Usage(
                    "--kv-cache-scale-file sets the scales of a float8 KV cache: add --features \
                     fp8-kv-cache"
                        .into(),
                )),
                (false, None) => None,
                (true, file) => Some(Fp8KvCacheRequest {
                    scales: file.map(KvCacheScales::read).transpose()?,
                }),
            };
        Ok(Features {
            prune_lm_head: wants("prune-lm-head"),
            static_cache,
            fp8_kv_cache,
        })
    }
}

/// A built model, ready to be saved.
pub struct ModelPackage {
    /// The optimized model.
    pub model: Model,
    /// The normalised architecture.
    pub config: ArchConfig,
    /// The model dtype.
    pub dtype: DType,
    /// The execution provider it was optimized for.
    pub execution_provider: EpCapabilities,
    /// What the optimizer did (print it for `--trace`).
    pub optimization: OptimizeReport,
    /// What the quantization request did, if there was one.
    pub quantization: Option<QuantSummary>,
    tokenizer_files: Vec<PathBuf>,
    source_root: PathBuf,
    store: Option<TensorStore>,
}

/// Where and how [`ModelPackage::save`] writes.
#[derive(Debug, Clone)]
pub struct SaveOptions {
    /// The output folder.
    pub out: PathBuf,
    /// Replace a non-empty output folder.
    pub overwrite: bool,
    /// Show a progress bar on stderr (it hides itself when stderr is not a terminal).
    pub progress: bool,
    /// Stops the save before the next initializer once set ([`crate::Error::Interrupted`]);
    /// nothing is left in the output folder.
    pub cancel: Option<Cancel>,
}

/// Resolves the checkpoint, builds the portable graph and optimizes it for the EP. Weights
/// are located and checked (names, shapes, dtypes) but not read until [`ModelPackage::save`].
pub fn build(opts: &BuildOptions) -> Result<ModelPackage> {
    let dtype = opts.execution_provider.model_dtype(opts.dtype)?;
    let cancel = opts.cancel.as_ref();
    let files = resolve(&opts.source, &opts.hub, opts.load_weights)?;
    cancel::check(cancel)?;
    tracing::info!("model files from {}", files.origin);
    let unregistered = match opts.assume_llama {
        true => Unregistered::AssumeLlama,
        false => Unregistered::Refuse,
    };
    let mut config = load_config_with(&files.config, unregistered)?;
    let assumed = *config.model_type == ASSUMED_LLAMA;
    let checkpoint_quant = CheckpointQuant::load(&files.config)?;
    let generation = files
        .tokenizer_files
        .iter()
        .find(|f| f.ends_with("generation_config.json"));
    if let Some(path) = generation {
        config.fill_tokens_from_generation_config(path)?;
    }
    let mut portable = build_model(&config, dtype)?;
    cancel::check(cancel)?;
    if opts.prune_lm_head {
        prune_lm_head(&mut portable.graph)?;
    }
    if let Some(max_seq_len) = opts.static_cache {
        static_cache(&mut portable.graph, &config, max_seq_len)?;
    }
    let store = match &files.weights {
        Some(w) if opts.load_weights => {
            let store = TensorStore::open(w)?;
            Some(match checkpoint_renaming(&config) {
                Some(rename) => store.renamed(rename)?,
                None => store,
            })
        }
        _ => None,
    };
    if assumed {
        let store = store.as_ref().ok_or_else(|| {
            crate::Error::Usage(
                "--assume-llama checks every checkpoint tensor against the Llama layout and \
                 needs the weights (drop --no-weights)"
                    .into(),
            )
        })?;
        check_tensors(&portable.graph, store)?;
    }
    if let Some(quant) = &checkpoint_quant {
        let summary = apply_checkpoint_quantization(&mut portable.graph, quant, store.as_ref())?;
        tracing::info!("{summary}");
    }
    let quantization = match &opts.quant {
        Some(request) => {
            let mut summary = quantize_graph(
                &mut portable.graph,
                request,
                runs_gather_block_quantized(&opts.execution_provider, dtype),
            )?;
            if narrow_tables::gathers_narrow_floats(&opts.execution_provider) {
                let stored = narrow_tables::stored_dtype(store.as_ref(), config.dtype);
                summary.narrowed =
                    narrow_tables::narrow_gathered_tables(&mut portable.graph, &stored);
            }
            Some(summary)
        }
        None => None,
    };
    let fingerprint_leaves =
        match (opts.verify_rewrites, &store) {
            (true, Some(store)) => Some(leaf_values(
                &portable.graph,
                &mut Evaluator::new(Some(store)),
            )?),
            (true, None) => return Err(crate::Error::Source(
                "--verify-rewrites evaluates the model and needs its weights (drop --no-weights)"
                    .into(),
            )),
            (false, _) => None,
        };
    let options = OptimizeOptions {
        dtype,
        role: config.role(),
        limits: opts.limits,
        fingerprint_leaves,
        accuracy_level: opts.accuracy_level,
        kv_cache: match opts.static_cache {
            Some(_) => crate::opt::KvCache::Static,
            None => crate::opt::KvCache::AsIs,
        },
        trace: opts.trace,
    };
    cancel::check(cancel)?;
    let (mut model, optimization) = optimize(&portable, &opts.execution_provider, &options)?;
    cancel::check(cancel)?;
    if opts.static_cache.is_some() && options.role == crate::Role::Decoder {
        static_cache_notice(&opts.execution_provider, dtype);
    }
    if let Some(request) = &opts.fp8_kv_cache {
        float8_cache(&mut model.graph, request, opts, options.role, dtype)?;
    }
    if store.is_none() {
        strip_weight_data(&mut model.graph);
    }
    crate::weights::check_sources(&model.graph, &Evaluator::new(store.as_ref()))?;
    drop(portable);
    release_freed_heap();
    Ok(ModelPackage {
        model,
        config,
        dtype,
        execution_provider: opts.execution_provider.clone(),
        optimization,
        quantization,
        tokenizer_files: files.tokenizer_files,
        source_root: files.root,
        store,
    })
}

impl ModelPackage {
    /// Writes model.onnx, model.onnx.data, genai_config.json (decoders only) and the tokenizer
    /// files into `opts.out`, atomically: on error nothing is left there. An output folder that
    /// is, contains or lies inside the checkpoint's folder (for a hub repo, its cache folder)
    /// is refused.
    pub fn save(&self, opts: &SaveOptions) -> Result<SaveReport> {
        check_target(&opts.out, opts.overwrite)?;
        check_apart(&opts.out, &self.source_root, "checkpoint folder")?;
        let staged = StagedOutput::create(&opts.out)?;
        let progress = progress_bar(opts.progress);
        let mut evaluator = Evaluator::new(self.store.as_ref());
        if let Some(flag) = &opts.cancel {
            evaluator.cancel_on(flag.clone());
        }
        let report = write_package(
            &self.model,
            &self.config,
            &self.execution_provider,
            &self.tokenizer_files,
            staged.dir(),
            &mut evaluator,
            &progress,
        )?;
        progress.finish_and_clear();
        cancel::check(opts.cancel.as_ref())?;
        staged.commit()?;
        Ok(report)
    }

    /// The `ModelProto` that [`ModelPackage::save`] writes as model.onnx, encoded: the
    /// initializers placed in model.onnx.data as save places them (their data is not read),
    /// small inline constants evaluated. Nothing is written.
    pub fn model_bytes(&self) -> Result<Vec<u8>> {
        let (placements, _) = crate::onnx::export::plan_layout(&self.model.graph);
        let mut evaluator = Evaluator::new(self.store.as_ref());
        Ok(crate::onnx::export::encode_model(
            &self.model,
            &placements,
            &mut evaluator,
            &ContribFunctions,
        )?
        .to_vec())
    }

    /// Writes genai_config.json for `ep` into the existing folder `dir` (replacing one there),
    /// as [`ModelPackage::save`] writes it for the package's own EP, and copies the tokenizer
    /// files of `tokenizer_source` (resolved without weights; `None`: none are copied).
    /// Returns each file written with its key: `genai_config` for genai_config.json, the file
    /// name for a tokenizer file. A model onnxruntime-genai does not run (no genai model type,
    /// a static cache, or an SSM state) gets no genai_config.json.
    pub fn write_genai_files(
        &self,
        dir: &Path,
        ep: &EpCapabilities,
        tokenizer_source: Option<(&ModelSource, &HubSettings)>,
    ) -> Result<Vec<(String, PathBuf)>> {
        let mut written = Vec::new();
        let graph = &self.model.graph;
        let static_cache = crate::passes::static_cache::is_static_cache(graph);
        let ssm = crate::package::genai_config::carries_ssm_state(graph);
        if let Some(genai_type) =
            (self.config.model_type.genai_type).filter(|_| !static_cache && !ssm)
        {
            let genai = crate::package::genai_config::genai_config(
                &self.config,
                genai_type,
                ep,
                &self.model.graph,
                crate::onnx::export::MODEL_FILE,
            );
            let path = dir.join(crate::package::GENAI_CONFIG_FILE);
            std::fs::write(&path, crate::package::genai_config::to_pretty_json(&genai))
                .map_err(|e| crate::Error::io(&path, e))?;
            written.push(("genai_config".to_string(), path));
        }
        if let Some((source, hub)) = tokenizer_source {
            let files = resolve(source, hub, false)?;
            for file in &files.tokenizer_files {
                let Some(name) = file.file_name() else {
                    continue;
                };
                let dest = dir.join(name);
                crate::package::copy_aux_file(file, &dest)?;
                written.push((name.to_string_lossy().into_owned(), dest));
            }
        }
        Ok(written)
    }

    /// The output folder's check, for callers that want to fail before building.
    pub fn check_output(out: &Path, overwrite: bool) -> Result<()> {
        check_target(out, overwrite)
    }
}

/// Says what a static-cache build runs on an EP that would run GroupQueryAttention for
/// `dtype`: GroupQueryAttention has no write-index input and keeps its cache as
/// `[batch, kv_heads, slots, head_dim]`, so the static cache's `[batch, slots, kv_heads·head_dim]`
/// caches keep the opset-24 Attention. Silent elsewhere (their attention is Attention anyway).
/// The one notice of it: the optimizer, told [`crate::opt::KvCache::Static`], does not also
/// warn that the GroupQueryAttention fusion is missing.
fn static_cache_notice(ep: &EpCapabilities, dtype: DType) {
    if ep.gqa_dtypes.contains(&dtype) {
        tracing::warn!(
            "static-cache: the attention runs as opset-24 Attention over the fixed caches, not \
             as com.microsoft::GroupQueryAttention, which {} otherwise runs for {dtype} \
             decoders (GroupQueryAttention takes no write indices and keeps its cache as \
             [batch, kv_heads, slots, head_dim]); for GroupQueryAttention over a fixed buffer, \
             build without static-cache: onnxruntime-genai then shares one past/present buffer \
             of max_length slots (past_present_share_buffer)",
            ep.name
        );
    }
}

/// Applies `--features fp8-kv-cache` to the optimized graph where onnxruntime has a kernel for
/// it (CUDA GroupQueryAttention of an f16/bf16 model with a growing cache); elsewhere, and
/// when no GroupQueryAttention reads a cache input, one warning says why the cache stays in
/// the model dtype.
fn float8_cache(
    graph: &mut Graph,
    request: &Fp8KvCacheRequest,
    opts: &BuildOptions,
    role: crate::Role,
    dtype: DType,
) -> Result<()> {
    let ep = &opts.execution_provider;
    let why_not = if role != crate::Role::Decoder {
        Some("the model is not a decoder".to_string())
    } else if opts.static_cache.is_some() {
        Some("a static-cache build runs opset-24 Attention, not GroupQueryAttention".into())
    } else if !ep.supports_fp8_kv_cache {
        Some(format!(
            "execution provider {} has no float8 KV cache (supports_fp8_kv_cache; cuda has)",
            ep.name
        ))
    } else if !matches!(dtype, DType::F16 | DType::BF16) || !ep.gqa_dtypes.contains(&dtype) {
        Some(format!(
            "the float8 cache of {}'s GroupQueryAttention takes f16/bf16 models, this one is \
             {dtype}",
            ep.name
        ))
    } else {
        None
    };
    let summary = match why_not {
        Some(why) => {
            tracing::warn!("fp8-kv-cache ignored: {why}; the KV cache stays {dtype}");
            return Ok(());
        }
        None => fp8_kv_cache(graph, request.scales.as_ref())?,
    };
    let skipped = summary.skipped.join("; ");
    if summary.layers.is_empty() {
        tracing::warn!(
            "fp8-kv-cache ignored: no GroupQueryAttention of this model can read a float8 \
             cache ({}); the KV cache stays {dtype}",
            if skipped.is_empty() {
                "there is none"
            } else {
                &skipped
            }
        );
    } else {
        let scales = match &request.scales {
            Some(s) => format!("scales from {}", s.file.display()),
            None => "scales 1.0 (no --kv-cache-scale-file)".into(),
        };
        tracing::info!(
            "fp8-kv-cache: the KV cache of {} layers is float8 e4m3fn, {scales}",
            summary.layers.len()
        );
        if !skipped.is_empty() {
            tracing::warn!("fp8-kv-cache: these caches stay {dtype}: {skipped}");
        }
    }
    Ok(())
}

/// Hands the heap memory the graph phase freed (the portable graph, the optimizer's e-graphs)
/// back to the system before the weights are streamed. glibc keeps freed heap pages mapped for
/// reuse, but the weight writer's blocks are fresh mappings, and the freed pages lie between the
/// few allocations that stay (the optimized graph, interned names): kept, they would add to the
/// peak, by more for a larger e-graph (a `--quant` build's).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_freed_heap() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::os::raw::c_int;
    }
    // SAFETY: malloc_trim takes no pointer; it only returns free pages of glibc's own heaps.
    unsafe {
        malloc_trim(0);
    }
}

/// Elsewhere the allocator keeps its own policy.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_heap() {}

fn progress_bar(visible: bool) -> indicatif::ProgressBar {
    if !visible {
        return indicatif::ProgressBar::hidden();
    }
    let style = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    )
    .expect("the progress template is valid")
    .progress_chars("=> ");
    indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr())
        .with_style(style)
        .with_message("writing weights")
}

/// Declares every weight-like initializer without data (`--no-weights`): checkpoint tensors
/// and RoPE tables; small constants keep theirs.
fn strip_weight_data(graph: &mut Graph) {
    for init in &mut graph.initializers {
        if init.source.as_ref().is_some_and(is_weight_data) {
            init.source = None;
        }
    }
}

fn is_weight_data(src: &TensorSource) -> bool {
    match src {
        TensorSource::Checkpoint(_)
        | TensorSource::RotaryTable { .. }
        | TensorSource::Packed4 { .. }
        | TensorSource::Fp8Blocks { .. } => true,
        TensorSource::Inline(_) | TensorSource::External { .. } => false,
        TensorSource::Transpose(inner) => is_weight_data(inner),
        TensorSource::AddScalar { source, .. } => is_weight_data(source),
        TensorSource::Concat { parts, .. } => parts.iter().any(is_weight_data),
        TensorSource::Slice { source, .. }
        | TensorSource::Quantize { source, .. }
        | TensorSource::NBits { source, .. }
        | TensorSource::FromNBits { source, .. }
        | TensorSource::MoeExperts { source, .. }
        | TensorSource::Reshape { source, .. } => is_weight_data(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama_options(cancel: Option<Cancel>) -> BuildOptions {
        BuildOptions {
            source: ModelSource::LocalDir(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama"),
            ),
            dtype: None,
            load_weights: true,
            hub: HubSettings::from_env(),
            execution_provider: crate::get_ep("cpu").unwrap(),
            limits: Limits::default(),
            verify_rewrites: false,
            quant: None,
            accuracy_level: None,
            assume_llama: false,
            prune_lm_head: false,
            static_cache: None,
            fp8_kv_cache: None,
            trace: false,
            cancel,
        }
    }

    #[test]
    fn a_cancelled_build_or_save_stops_and_writes_nothing() {
        let cancel = Cancel::new();
        cancel.cancel();
        let stopped = build(&llama_options(Some(cancel.clone())));
        assert!(matches!(stopped, Err(crate::Error::Interrupted)));
        let package = build(&llama_options(None)).unwrap();
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        let save = |cancel| SaveOptions {
            out: out.clone(),
            overwrite: false,
            progress: false,
            cancel,
        };
        let stopped = package.save(&save(Some(cancel)));
        assert!(matches!(stopped, Err(crate::Error::Interrupted)));
        let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert!(left.is_empty(), "an interrupted save left {left:?}");
        package.save(&save(Some(Cancel::new()))).unwrap();
        assert!(out.join("model.onnx").is_file());
    }

    #[test]
    fn features_are_checked_together() {
        let parsed = Features::parse(&["prune-lm-head", "static-cache"], Some(8), None).unwrap();
        assert!(parsed.prune_lm_head && parsed.static_cache == Some(8));
        let err = |names: &[&str], n| Features::parse(names, n, None).unwrap_err().to_string();
        assert!(
            err(&["warp"], None).contains("unknown feature `warp`; expected one of prune-lm-head")
        );
        assert!(err(&["static-cache"], None).contains("needs --max-seq-len"));
        assert!(err(&[], Some(4)).contains("add --features static-cache"));
        let scales = Features::parse(&[], None, Some(Path::new("s.json"))).unwrap_err();
        assert!(scales.to_string().contains("add --features fp8-kv-cache"));
    }
}
