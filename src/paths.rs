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
}
