//! The saved package: `model.onnx`, `model.onnx.data`, `genai_config.json` and the
//! checkpoint's tokenizer files, written atomically into the output folder. Models without an
//! onnxruntime-genai type (encoders) get no `genai_config.json`: onnxruntime-genai runs
//! generative models only.

mod copy;
pub mod genai_config;
pub mod interrupt;
pub mod output;

use std::path::{Path, PathBuf};

use crate::config::ArchConfig;
use crate::ep::EpCapabilities;
use crate::ir::Model;
use crate::onnx::export::{self, SaveReport, MODEL_FILE};
use crate::rulebook::contrib_functions::ContribFunctions;
use crate::weights::eval::Evaluator;
use crate::{Error, Result};
pub use copy::{copy_aux_file, MAX_AUX_FILE_BYTES};
pub use output::{check_apart, check_not_over, check_target, StagedOutput};

/// File name of the onnxruntime-genai configuration.
pub const GENAI_CONFIG_FILE: &str = "genai_config.json";

/// Saves `model` with its genai_config.json (when its model type has an onnxruntime-genai
/// type and the graph has the growing-cache contract onnxruntime-genai feeds) and
/// `tokenizer_files` into `dir`.
pub fn write_package(
    model: &Model,
    cfg: &ArchConfig,
    ep: &EpCapabilities,
    tokenizer_files: &[PathBuf],
    dir: &Path,
    evaluator: &mut Evaluator<'_>,
    progress: &indicatif::ProgressBar,
) -> Result<SaveReport> {
    let report = export::save(model, dir, evaluator, progress, &ContribFunctions)?;
    let static_cache = crate::passes::static_cache::is_static_cache(&model.graph);
    if static_cache && cfg.model_type.genai_type.is_some() {
        tracing::info!(
            "no {GENAI_CONFIG_FILE}: onnxruntime-genai 0.18 cannot run a static-cache model (it \
             allocates 4-D [batch, kv_heads, length, head_dim] caches and feeds no write_indices \
             or nonpad_kv_seqlen)"
        );
    }
    let ssm = genai_config::carries_ssm_state(&model.graph);
    if ssm && cfg.model_type.genai_type.is_some() {
        tracing::info!(
            "no {GENAI_CONFIG_FILE}: onnxruntime-genai 0.18 has no model type with an SSM \
             state (past.{{i}}.ssm); run the model with onnxruntime"
        );
    }
    if let Some(genai_type) = cfg.model_type.genai_type.filter(|_| !static_cache && !ssm) {
        let genai = genai_config::genai_config(cfg, genai_type, ep, &model.graph, MODEL_FILE);
        let path = dir.join(GENAI_CONFIG_FILE);
        std::fs::write(&path, genai_config::to_pretty_json(&genai))
            .map_err(|e| Error::io(&path, e))?;
    }
    for file in tokenizer_files {
        let name = file
            .file_name()
            .ok_or_else(|| Error::Source(format!("{} is not a file", file.display())))?;
        let dest = dir.join(name);
        copy_aux_file(file, &dest)?;
    }
    Ok(report)
}
