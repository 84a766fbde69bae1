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
    if !present(dir, CONFIG_FILE)? {
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
    let mut tokenizer_files = Vec::new();
    for name in TOKENIZER_FILES {
        if present(dir, name)? {
            let file = dir.join(name);
            check_file_inside(dir, &file, "tokenizer file")?;
            tokenizer_files.push(file);
        }
    }
    Ok(ModelFiles {
        config,
        weights,
        tokenizer_files,
        origin: format!("local folder {}", dir.display()),
        root: dir.to_path_buf(),
    })
}

/// Whether the checkpoint file `name` is in `dir`: `false` when nothing has that name, an
/// error naming it when something does but is not a regular file, links followed (a folder,
/// FIFO, device, or a link to one or to nothing). A file mobius knows is never skipped
/// silently.
fn present(dir: &Path, name: &str) -> Result<bool> {
    let path = dir.join(name);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&path, e)),
        Ok(own) => {
            let link = if own.file_type().is_symlink() {
                "a link to "
            } else {
                ""
            };
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => Ok(true),
                Ok(m) => Err(not_regular(
                    &path,
                    &format!("it is {link}{}", kind(m.file_type())),
                )),
                Err(e) => Err(not_regular(&path, &format!("it is a broken link: {e}"))),
            }
        }
    }
}

/// What a file type that is not a regular file is, for people.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

fn not_regular(path: &Path, why: &str) -> Error {
    Error::Source(format!(
        "{} exists but is not a regular file ({why}); remove it or replace it with the file",
        path.display()
    ))
}

/// The index if present, else `model.safetensors`, else the folder's only `.safetensors` file.
fn find_weights(dir: &Path) -> Result<WeightFiles> {
    let index = dir.join(SHARD_INDEX_FILE);
    if present(dir, SHARD_INDEX_FILE)? {
        return Ok(WeightFiles::Sharded {
            index,
            root: dir.to_path_buf(),
        });
    }
    let single = dir.join(SINGLE_WEIGHTS_FILE);
    if present(dir, SINGLE_WEIGHTS_FILE)? {
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
