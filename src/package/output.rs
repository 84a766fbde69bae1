//! The output folder: built in a temporary sibling and renamed into place at the end, so a
//! failed build leaves nothing behind.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A temporary folder next to the final output; removed on drop unless committed.
#[derive(Debug)]
pub struct StagedOutput {
    staging: PathBuf,
    target: PathBuf,
    committed: bool,
}

/// Refuses an output folder that exists and is not empty, unless `overwrite`; refuses a path
/// that exists and is not a folder.
pub fn check_target(target: &Path, overwrite: bool) -> Result<()> {
    if !target.exists() {
        return Ok(());
    }
    if !target.is_dir() {
        return Err(Error::Output {
            path: target.to_path_buf(),
            message: "exists and is not a folder".into(),
        });
    }
    let mut entries = std::fs::read_dir(target).map_err(|e| Error::io(target, e))?;
    if entries.next().is_some() && !overwrite {
        return Err(Error::Output {
            path: target.to_path_buf(),
            message: "exists and is not empty (pass --overwrite to replace it)".into(),
        });
    }
    Ok(())
}

impl StagedOutput {
    /// Creates the staging folder `.<name>.mobius-tmp-<pid>` next to `target`.
    pub fn create(target: &Path) -> Result<StagedOutput> {
        let name = target
            .file_name()
            .ok_or_else(|| Error::Output {
                path: target.to_path_buf(),
                message: "the output path has no folder name".into(),
            })?
            .to_string_lossy()
            .into_owned();
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| Error::Output {
            path: target.to_path_buf(),
            message: format!("cannot create the parent folder: {e}"),
        })?;
        let staging = parent.join(format!(".{name}.mobius-tmp-{}", std::process::id()));
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(|e| Error::io(&staging, e))?;
        }
        std::fs::create_dir(&staging).map_err(|e| Error::Output {
            path: target.to_path_buf(),
            message: format!("cannot write here: {e}"),
        })?;
        Ok(StagedOutput {
            staging,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    /// The folder to write into.
    pub fn dir(&self) -> &Path {
        &self.staging
    }

    /// Replaces the target with the staged folder.
    pub fn commit(mut self) -> Result<()> {
        if self.target.exists() {
            std::fs::remove_dir_all(&self.target).map_err(|e| Error::io(&self.target, e))?;
        }
        std::fs::rename(&self.staging, &self.target).map_err(|e| Error::io(&self.target, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for StagedOutput {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}
