//! The `build` pipeline: source → config → graph → weights → package.

use std::path::PathBuf;
use std::time::Instant;

use crate::config::ArchConfig;
use crate::ir::DType;
use crate::models::build_model;
use crate::package::{check_target, write_package, StagedOutput};
use crate::source::{resolve, HubSettings, ModelSource};
use crate::weights::eval::Evaluator;
use crate::weights::store::TensorStore;
use crate::Result;

/// Everything `mobius build` needs.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Where the checkpoint comes from.
    pub source: ModelSource,
    /// The output folder.
    pub out: PathBuf,
    /// Model dtype; `None` = the checkpoint's (f32 when the config does not say).
    pub dtype: Option<DType>,
    /// Whether to load and write weights (`false` = `--no-weights`).
    pub weights: bool,
    /// Replace a non-empty output folder.
    pub overwrite: bool,
    /// Hugging Face endpoint, cache and offline settings.
    pub hub: HubSettings,
    /// Show a progress bar on stderr (it hides itself when stderr is not a terminal).
    pub progress: bool,
}

/// What a build produced.
#[derive(Debug, Clone)]
pub struct BuildReport {
    /// The model dtype used.
    pub dtype: DType,
    /// Number of graph nodes.
    pub nodes: usize,
    /// Number of initializers.
    pub initializers: usize,
    /// Bytes of weights written.
    pub data_bytes: u64,
    /// Values clamped into the f16 range.
    pub clamped_f16: usize,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Builds an ONNX package from a checkpoint. On error nothing is left in `opts.out`.
pub fn build(opts: &BuildOptions) -> Result<BuildReport> {
    let start = Instant::now();
    check_target(&opts.out, opts.overwrite)?;
    let files = resolve(&opts.source, &opts.hub, opts.weights)?;
    tracing::info!("model files from {}", files.origin);
    let mut cfg = ArchConfig::load(&files.config)?;
    let generation = files
        .tokenizer_files
        .iter()
        .find(|f| f.ends_with("generation_config.json"));
    if let Some(path) = generation {
        cfg.fill_tokens_from_generation_config(path)?;
    }
    let dtype = opts.dtype.or(cfg.dtype).unwrap_or(DType::F32);
    let mut model = build_model(&cfg, dtype)?;
    let store = match &files.weights {
        Some(w) if opts.weights => Some(TensorStore::open(w)?),
        _ => None,
    };
    if store.is_none() {
        strip_checkpoint_data(&mut model.graph);
    }
    let mut evaluator = Evaluator::new(store.as_ref());
    crate::weights::check_sources(&model.graph, &evaluator)?;

    let staged = StagedOutput::create(&opts.out)?;
    let progress = if opts.progress {
        let style = indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
        )
        .expect("the progress template is valid")
        .progress_chars("=> ");
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr())
            .with_style(style)
            .with_message("writing weights")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let report = write_package(
        &model,
        &cfg,
        &files.tokenizer_files,
        staged.dir(),
        &mut evaluator,
        &progress,
    )?;
    progress.finish_and_clear();
    staged.commit()?;
    Ok(BuildReport {
        dtype,
        nodes: model.graph.nodes.len(),
        initializers: model.graph.initializers.len(),
        data_bytes: report.data_bytes,
        clamped_f16: report.clamped_f16,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Declares every checkpoint-derived initializer without data (`--no-weights`); computed
/// tensors (RoPE tables, constants) keep theirs.
fn strip_checkpoint_data(graph: &mut crate::ir::Graph) {
    for init in &mut graph.initializers {
        if init.source.as_ref().is_some_and(reads_checkpoint) {
            init.source = None;
        }
    }
}

fn reads_checkpoint(src: &crate::ir::TensorSource) -> bool {
    use crate::ir::TensorSource as S;
    match src {
        S::Checkpoint(_) => true,
        S::Inline(_) | S::External { .. } => false,
        S::Transpose(inner) => reads_checkpoint(inner),
        S::Concat { parts, .. } => parts.iter().any(reads_checkpoint),
    }
}
