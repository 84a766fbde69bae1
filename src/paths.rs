//! Path safety, in one place: every path that comes from a file (external data locations, shard
//! index entries, graph value names used as output file names) is checked here against the
//! folder it must stay in, after links are resolved.

use std::path::{Component, Path, PathBuf};

use crate::{Error, Result};

/// Checks that `name` can be used as one file name inside a folder: not empty, not `.` or `..`,
/// no path separator, no NUL. `what` names where the name came from (for the error).
pub fn file_component<'a>(name: &'a str, what: &str) -> Result<&'a str> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.contains(['/', '\\', '\0'])
        || Path::new(name)
            .components()
            .any(|c| !matches!(c, Component::Normal(_)));
    if bad {
        Err(Error::UnsafePath(format!(
            "{what} `{}` cannot be used as a file name (it must be one plain name, without `/`, \
             `\\`, `..` or a drive)",
            name.escape_debug()
        )))
    } else {
        Ok(name)
    }
}

/// Resolves `relative` (read from a file) inside `root`: it must be a relative path whose
/// resolved location, links included, is inside `root`'s resolved location. Returns the
/// resolved path. `what` names where the path came from.
pub fn resolve_inside(root: &Path, relative: &str, what: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if relative.is_empty()
        || relative.contains('\0')
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(Error::UnsafePath(format!(
            "{what} `{}` must be a relative path inside {} (no `..`, no absolute path)",
            relative.escape_debug(),
            root.display()
        )));
    }
    let root_real = root.canonicalize().map_err(|e| Error::io(root, e))?;
    let joined = root.join(rel);
    let real = joined.canonicalize().map_err(|e| Error::io(&joined, e))?;
    if !real.starts_with(&root_real) {
        return Err(Error::UnsafePath(format!(
            "{what} `{}` resolves to {}, outside {} (links that leave the folder are refused)",
            relative.escape_debug(),
            real.display(),
            root_real.display()
        )));
    }
    Ok(real)
}

/// Checks that `file`, a path under `root` (`root` joined with a relative path), resolves,
/// links followed, to a regular file inside `root`. `what` names the file for the error.
pub fn check_file_inside(root: &Path, file: &Path, what: &str) -> Result<()> {
    let relative = file
        .strip_prefix(root)
        .ok()
        .and_then(Path::to_str)
        .ok_or_else(|| {
            Error::UnsafePath(format!(
                "{what} {} is not inside {}",
                file.display(),
                root.display()
            ))
        })?;
    let real = resolve_inside(root, relative, what)?;
    if !real.is_file() {
        return Err(Error::UnsafePath(format!(
            "{what} {} is not a regular file",
            file.display()
        )));
    }
    Ok(())
}

/// The canonical form of `path`, which need not exist yet: its nearest existing ancestor is
/// canonicalized (links resolved) and the missing components are appended (`.` dropped, `..`
/// taking off the last one, as the OS will when they are created).
pub fn canonical_target(path: &Path) -> Result<PathBuf> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io(path, e))?
            .join(path)
    };
    let mut existing = absolute.as_path();
    let mut missing = Vec::new();
    let base = loop {
        match existing.canonicalize() {
            Ok(real) => break real,
            Err(e) => match existing.parent() {
                Some(parent) => {
                    missing.push(existing.components().next_back());
                    existing = parent;
                }
                None => return Err(Error::io(existing, e)),
            },
        }
    };
    let mut out = base;
    for component in missing.into_iter().rev().flatten() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

/// Whether one of the two canonical paths is the other or lies inside it.
pub fn overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_components() {
        assert!(file_component("logits", "output").is_ok());
        assert!(file_component("present.0.key", "output").is_ok());
        for bad in ["", ".", "..", "../x", "/abs", "a/b", "a\\b", "a\0b"] {
            assert!(file_component(bad, "output").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn inside_and_outside() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("model");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/w.bin"), b"x").unwrap();
        std::fs::write(t.path().join("secret"), b"x").unwrap();
        assert!(resolve_inside(&root, "sub/w.bin", "location").is_ok());
        assert!(resolve_inside(&root, "./sub/w.bin", "location").is_ok());
        assert!(resolve_inside(&root, "../secret", "location").is_err());
        assert!(resolve_inside(&root, "/etc/passwd", "location").is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(t.path().join("secret"), root.join("link.bin")).unwrap();
            let e = resolve_inside(&root, "link.bin", "location").unwrap_err();
            assert!(e.to_string().contains("outside"), "{e}");
        }
    }

    #[test]
    fn canonical_targets_of_missing_paths() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        assert_eq!(canonical_target(&real.join("a")).unwrap(), real.join("a"));
        assert_eq!(
            canonical_target(&real.join("a/new/deeper")).unwrap(),
            real.join("a/new/deeper")
        );
        assert_eq!(
            canonical_target(&real.join("a/new/../other/./x")).unwrap(),
            real.join("a/other/x")
        );
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
            assert_eq!(
                canonical_target(&real.join("link/new")).unwrap(),
                real.join("a/new")
            );
        }
        assert!(overlap(&real.join("a"), &real.join("a/b")));
        assert!(overlap(&real.join("a/b"), &real.join("a")));
        assert!(overlap(&real.join("a"), &real.join("a")));
        assert!(!overlap(&real.join("a"), &real.join("ab")));
    }
}
