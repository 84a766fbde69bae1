//! Validation of hub repo ids and revisions before they become URLs and cache paths.

use crate::{Error, Result};

/// The longest repo or organisation name the hub allows.
const MAX_NAME_LEN: usize = 96;

/// Checks that `id` is `org/name` with hub-legal names.
pub(super) fn validate_id(id: &str) -> Result<()> {
    let problem = match id.split_once('/') {
        None => Some("it has no `/`".to_string()),
        Some((_, name)) if name.contains('/') => Some("it has more than one `/`".to_string()),
        Some((org, name)) => {
            name_problem(org, "organisation").or_else(|| name_problem(name, "name"))
        }
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(Error::Source(format!(
            "invalid Hugging Face repo id `{id}`: {problem}; expected `org/name` with letters, \
             digits, `-`, `_` and `.`"
        ))),
    }
}

/// What is wrong with one half of a repo id, if anything.
fn name_problem(part: &str, what: &str) -> Option<String> {
    if part.is_empty() {
        return Some(format!("the {what} is empty"));
    }
    if part.len() > MAX_NAME_LEN {
        return Some(format!(
            "the {what} is longer than {MAX_NAME_LEN} characters"
        ));
    }
    if let Some(c) = part
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!("the {what} contains {c:?}"));
    }
    if part.starts_with(['-', '.']) || part.ends_with(['-', '.']) {
        return Some(format!("the {what} starts or ends with `-` or `.`"));
    }
    if part.contains("--") || part.contains("..") {
        return Some(format!("the {what} contains `--` or `..`"));
    }
    None
}

/// Checks that `revision` (a branch, tag or commit) is safe to use in a URL and a cache path.
pub(super) fn validate_revision(revision: &str) -> Result<()> {
    let bad = revision.is_empty()
        || revision
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
        || revision
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(Error::Source(format!(
            "invalid revision `{revision}`: expected a branch, tag or commit hash (no spaces, \
             backslashes, empty, `.` or `..` path parts)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_hub_ids() {
        for id in ["org/name", "Qwen/Qwen2.5-0.5B-Instruct", "a_b/c.d_e-1"] {
            validate_id(id).unwrap();
        }
    }

    #[test]
    fn rejects_malformed_ids() {
        for (id, problem) in [
            ("gpt2", "no `/`"),
            ("a/b/c", "more than one"),
            ("/name", "organisation is empty"),
            ("org/", "name is empty"),
            ("org/na me", "contains ' '"),
            ("../x", "starts or ends"),
            ("org/..", "starts or ends"),
            ("org/a..b", "`--` or `..`"),
            ("or--g/x", "`--` or `..`"),
        ] {
            let err = validate_id(id).unwrap_err().to_string();
            assert!(err.contains(&format!("`{id}`")), "{err}");
            assert!(err.contains(problem), "{id}: {err}");
        }
        let long = format!("org/{}", "x".repeat(97));
        assert!(validate_id(&long)
            .unwrap_err()
            .to_string()
            .contains("longer"));
    }

    #[test]
    fn revisions() {
        for ok in [
            "main",
            "v1.0",
            "refs/pr/1",
            "0123456789abcdef0123456789abcdef01234567",
        ] {
            validate_revision(ok).unwrap();
        }
        for bad in ["", "../main", "a//b", "/main", "a b", "a\\b", "x/."] {
            let err = validate_revision(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }
}
