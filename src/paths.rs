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

/// Why `relative`, a path read from a file, cannot name a location inside a folder, if it
/// cannot: it must be non-empty and made of plain names joined by `/` — no absolute path or
/// drive, no `..`, no `.` or empty component, no backslash, no NUL. This is the lexical half of
/// [`resolve_inside`]; the other half follows links.
pub fn relative_path_problem(relative: &str) -> Option<&'static str> {
    if relative.is_empty() {
        return Some("the path is empty");
    }
    if relative.contains('\0') {
        return Some("the path contains a NUL byte");
    }
    if relative.contains('\\') {
        return Some("the path contains a backslash");
    }
    if relative.starts_with('/') || Path::new(relative).is_absolute() {
        return Some("the path is absolute");
    }
    for part in relative.split('/') {
        match part {
            "" => return Some("the path has an empty component"),
            "." => return Some("the path has a `.` component"),
            ".." => return Some("the path contains `..`"),
            _ => {}
        }
    }
    if Path::new(relative)
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Some("the path is absolute");
    }
    None
}

/// Resolves `relative` (read from a file) inside `root`: it must pass
/// [`relative_path_problem`] and its resolved location, links included, must be inside
/// `root`'s resolved location. Returns the resolved path. `what` names where the path came
/// from.
pub fn resolve_inside(root: &Path, relative: &str, what: &str) -> Result<PathBuf> {
    if let Some(problem) = relative_path_problem(relative) {
        return Err(Error::UnsafePath(format!(
            "{what} `{}` must be a relative path inside {} ({problem})",
            relative.escape_debug(),
            root.display()
        )));
    }
    let root_real = root.canonicalize().map_err(|e| Error::io(root, e))?;
    let joined = root.join(relative);
    // A path that does not resolve is judged by where it would lead: one whose existing part
    // leaves the folder is refused as such, so its error does not tell whether a file exists
    // outside.
    let real = match joined.canonicalize() {
        Ok(real) => real,
        Err(e) => match canonical_target(&joined) {
            Ok(target) if !target.starts_with(&root_real) => target,
            _ => return Err(Error::io(&joined, e)),
        },
    };
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

/// Resolves `relative` (read from a file) inside `root` with [`resolve_inside`] and checks
/// that it is a regular file. Returns the resolved path: read that one, not `root/relative`.
pub fn file_inside(root: &Path, relative: &str, what: &str) -> Result<PathBuf> {
    let real = resolve_inside(root, relative, what)?;
    if !real.is_file() {
        return Err(Error::UnsafePath(format!(
            "{what} `{}` is {}, not a regular file",
            relative.escape_debug(),
            real.display()
        )));
    }
    Ok(real)
}

/// Checks that `file`, a path under `root` (`root` joined with a relative path), resolves,
/// links followed, to a regular file inside `root` (see [`file_inside`]). Returns the resolved
/// path. `what` names the file for the error.
pub fn check_file_inside(root: &Path, file: &Path, what: &str) -> Result<PathBuf> {
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
    file_inside(root, relative, what)
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
            match file_component(bad, "output") {
                Err(Error::UnsafePath(m)) => {
                    assert!(m.starts_with("output `"), "{bad:?}: {m}");
                    assert!(m.contains("cannot be used as a file name"), "{bad:?}: {m}");
                }
                other => panic!("{bad:?}: expected Error::UnsafePath, got {other:?}"),
            }
        }
    }

    #[test]
    fn inside_and_outside() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("model");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/w.bin"), b"x").unwrap();
        std::fs::write(t.path().join("secret"), b"x").unwrap();
        let inside = resolve_inside(&root, "sub/w.bin", "location").unwrap();
        assert_eq!(inside, root.join("sub/w.bin").canonicalize().unwrap());
        for (bad, problem) in [
            ("../secret", "contains `..`"),
            ("sub/../../secret", "contains `..`"),
            ("/etc/passwd", "is absolute"),
            ("./sub/w.bin", "`.` component"),
            ("sub//w.bin", "empty component"),
            ("sub\\w.bin", "backslash"),
            ("", "is empty"),
            ("a\0b", "NUL"),
        ] {
            match resolve_inside(&root, bad, "location") {
                Err(Error::UnsafePath(m)) => {
                    assert!(m.starts_with("location `"), "{bad:?}: {m}");
                    assert!(m.contains("must be a relative path inside"), "{bad:?}: {m}");
                    assert!(m.contains(problem), "{bad:?}: {m}");
                }
                other => panic!("{bad:?}: expected Error::UnsafePath, got {other:?}"),
            }
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(t.path().join("secret"), root.join("link.bin")).unwrap();
            match resolve_inside(&root, "link.bin", "location") {
                Err(Error::UnsafePath(m)) => assert!(m.contains("outside"), "{m}"),
                other => panic!("expected Error::UnsafePath, got {other:?}"),
            }
        }
    }

    #[test]
    fn files_inside_resolve_to_the_checked_path() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("model");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/w.bin"), b"x").unwrap();
        let real = root.join("sub/w.bin").canonicalize().unwrap();
        assert_eq!(file_inside(&root, "sub/w.bin", "shard").unwrap(), real);
        assert_eq!(
            check_file_inside(&root, &root.join("sub/w.bin"), "shard").unwrap(),
            real
        );
        match file_inside(&root, "sub", "shard") {
            Err(Error::UnsafePath(m)) => assert!(m.contains("not a regular file"), "{m}"),
            other => panic!("expected Error::UnsafePath, got {other:?}"),
        }
        // An absolute name is refused before the file system is asked, whether or not it exists.
        for name in ["/etc/passwd", "/no/such/file"] {
            match check_file_inside(&root, &root.join(name), "shard") {
                Err(Error::UnsafePath(m)) => assert!(m.contains("not inside"), "{m}"),
                other => panic!("{name}: expected Error::UnsafePath, got {other:?}"),
            }
            match file_inside(&root, name, "shard") {
                Err(Error::UnsafePath(m)) => assert!(m.contains("is absolute"), "{m}"),
                other => panic!("{name}: expected Error::UnsafePath, got {other:?}"),
            }
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
