//! The output folder: built in a temporary sibling and renamed into place at the end, so a
//! failed or interrupted build leaves nothing behind.

use std::path::{Path, PathBuf};

use super::interrupt::{aside_name, remove_folder, remove_stale, staging, staging_name};
use crate::paths::{canonical_target, overlap};
use crate::{Error, Result};

/// A temporary folder next to the final output; removed on drop unless committed, and by the
/// interrupt handler ([`super::interrupt`]) on SIGINT/SIGTERM.
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

/// Refuses (as a usage error) an output folder that is the input folder `input`, contains it,
/// or lies inside it: replacing the output would delete the input, or writing it would change
/// the input. Paths are compared after links are resolved; the output need not exist yet.
/// `what` names the input (`checkpoint folder`).
pub fn check_apart(target: &Path, input: &Path, what: &str) -> Result<()> {
    match relation(target, input)? {
        Some(relation) => Err(overlap_error(target, input, what, relation)),
        None => Ok(()),
    }
}

/// Refuses (as a usage error) an output folder that is the input folder `input` or contains
/// it: replacing the output would delete the input. An output inside `input` is allowed.
/// `what` names the input (`model folder`).
pub fn check_not_over(target: &Path, input: &Path, what: &str) -> Result<()> {
    match relation(target, input)? {
        Some(relation) if relation != Relation::Inside => {
            Err(overlap_error(target, input, what, relation))
        }
        _ => Ok(()),
    }
}

/// How an output folder overlaps an input folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relation {
    Same,
    Contains,
    Inside,
}

/// How `target` overlaps `input`, links resolved; `None` when they are apart.
fn relation(target: &Path, input: &Path) -> Result<Option<Relation>> {
    let out = canonical_target(target)?;
    let input = input.canonicalize().map_err(|e| Error::io(input, e))?;
    Ok(if !overlap(&out, &input) {
        None
    } else if out == input {
        Some(Relation::Same)
    } else if input.starts_with(&out) {
        Some(Relation::Contains)
    } else {
        Some(Relation::Inside)
    })
}

fn overlap_error(target: &Path, input: &Path, what: &str, relation: Relation) -> Error {
    let relation = match relation {
        Relation::Same => "is",
        Relation::Contains => "contains",
        Relation::Inside => "is inside",
    };
    Error::Usage(format!(
        "output folder {} {relation} the {what} {}; choose an output folder apart from it",
        target.display(),
        input.display()
    ))
}

impl StagedOutput {
    /// Creates the staging folder `.<name>.mobius-tmp-<pid>` next to `target`, first removing
    /// staging folders of the same target whose process no longer exists.
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
        remove_stale(&parent, &name);
        let staging_dir = parent.join(staging_name(&name, std::process::id()));
        let mut registry = staging();
        if staging_dir.exists() {
            std::fs::remove_dir_all(&staging_dir).map_err(|e| Error::io(&staging_dir, e))?;
        }
        std::fs::create_dir(&staging_dir).map_err(|e| Error::Output {
            path: target.to_path_buf(),
            message: format!("cannot write here: {e}"),
        })?;
        registry.push(staging_dir.clone());
        Ok(StagedOutput {
            staging: staging_dir,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    /// The folder to write into.
    pub fn dir(&self) -> &Path {
        &self.staging
    }

    /// Replaces the target with the staged folder. An existing target is first renamed aside
    /// (`.<name>.mobius-old-<pid>`), removed only once the staged folder is in its place, and
    /// renamed back when that fails: a failed commit never loses the old output.
    pub fn commit(mut self) -> Result<()> {
        let mut registry = staging();
        let aside = self.staging.with_file_name(aside_name(
            &self
                .target
                .file_name()
                .unwrap_or_default()
                .to_string_lossy(),
            std::process::id(),
        ));
        let replacing = std::fs::symlink_metadata(&self.target).is_ok();
        if replacing {
            remove_folder(&aside);
            std::fs::rename(&self.target, &aside).map_err(|e| Error::Output {
                path: self.target.to_path_buf(),
                message: format!("cannot move the old output aside to replace it: {e}"),
            })?;
        }
        if let Err(e) = std::fs::rename(&self.staging, &self.target) {
            let restored = !replacing || std::fs::rename(&aside, &self.target).is_ok();
            let message = if restored {
                format!("cannot move the new output into place: {e}")
            } else {
                format!(
                    "cannot move the new output into place: {e}; the old output is in {}",
                    aside.display()
                )
            };
            return Err(Error::Output {
                path: self.target.to_path_buf(),
                message,
            });
        }
        registry.retain(|d| d != &self.staging);
        self.committed = true;
        drop(registry);
        if replacing {
            remove_folder(&aside);
        }
        Ok(())
    }
}

impl Drop for StagedOutput {
    fn drop(&mut self) {
        if !self.committed {
            let mut registry = staging();
            remove_folder(&self.staging);
            registry.retain(|d| d != &self.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_replaces_the_old_output_and_leaves_nothing_aside() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("out");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("old.txt"), b"old").unwrap();
        let staged = StagedOutput::create(&target).unwrap();
        std::fs::write(staged.dir().join("new.txt"), b"new").unwrap();
        staged.commit().unwrap();
        assert!(target.join("new.txt").is_file() && !target.join("old.txt").exists());
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_failed_commit_keeps_the_old_output() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("out");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("old.txt"), b"old").unwrap();
        let staged = StagedOutput::create(&target).unwrap();
        // The staged folder vanishes: moving it into place fails.
        std::fs::remove_dir_all(staged.dir()).unwrap();
        let err = staged.commit().unwrap_err().to_string();
        assert!(
            err.contains("cannot move the new output into place"),
            "{err}"
        );
        assert_eq!(std::fs::read(target.join("old.txt")).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(t.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
