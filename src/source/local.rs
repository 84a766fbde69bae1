//! Checkpoints in a local folder.

use std::path::{Path, PathBuf};

use super::{
    ModelFiles, WeightFiles, CONFIG_FILE, SHARD_INDEX_FILE, SINGLE_WEIGHTS_FILE, TOKENIZER_FILES,
};
use crate::paths::check_file_inside;
use crate::{Error, Result};

/// Finds the files of the checkpoint in `dir`.
pub(super) fn resolve(dir: &Path, want_weights: bool) -> Result<ModelFiles> {
    if !dir.is_dir() {
        return Err(Error::Source(format!(
            "model folder {} does not exist or is not a folder",
            dir.display()
        )));
    }
    let config = dir.join(CONFIG_FILE);
    if !config.is_file() {
        return Err(Error::Source(format!(
            "{} has no {CONFIG_FILE}; expected a Hugging Face model folder",
            dir.display()
        )));
    }
    let weights = if want_weights {
        Some(find_weights(dir)?)
    } else {
        None
    };
    let tokenizer_files = TOKENIZER_FILES
        .iter()
        .map(|name| dir.join(name))
        .filter(|path| path.is_file())
        .collect::<Vec<_>>();
    for file in &tokenizer_files {
        check_file_inside(dir, file, "tokenizer file")?;
    }
    Ok(ModelFiles {
        config,
        weights,
        tokenizer_files,
        origin: format!("local folder {}", dir.display()),
        root: dir.to_path_buf(),
    })
}

/// The index if present, else `model.safetensors`, else the folder's only `.safetensors` file.
fn find_weights(dir: &Path) -> Result<WeightFiles> {
    let index = dir.join(SHARD_INDEX_FILE);
    if index.is_file() {
        return Ok(WeightFiles::Sharded {
            index,
            root: dir.to_path_buf(),
        });
    }
    let single = dir.join(SINGLE_WEIGHTS_FILE);
    if single.is_file() {
        return Ok(WeightFiles::Single(single));
    }
    let mut others = safetensors_files(dir)?;
    if others.len() == 1 {
        return Ok(WeightFiles::Single(others.remove(0)));
    }
    let found = if others.is_empty() {
        "no .safetensors file".to_string()
    } else {
        let names: Vec<String> = others
            .iter()
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        format!(
            "{} .safetensors files without an index ({})",
            names.len(),
            names.join(", ")
        )
    };
    Err(Error::Source(format!(
        "{}: found {found}; expected {SHARD_INDEX_FILE}, {SINGLE_WEIGHTS_FILE} or a single \
         .safetensors file",
        dir.display()
    )))
}

/// The `.safetensors` files directly in `dir`, sorted.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.extension().is_some_and(|ext| ext == "safetensors") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
