//! The index of a sharded safetensors checkpoint (`model.safetensors.index.json`): which shard
//! file holds each tensor.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::unique_keys::UniqueKeys;
use crate::limits::MAX_SHARDS;
use crate::paths::relative_path_problem;
use crate::{Error, Result};

/// A parsed `model.safetensors.index.json`.
///
/// Shard file names are checked to be plain relative paths, so joining them onto the index's
/// folder never leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    /// Tensor name → shard file name (relative to the folder holding the index).
    pub weight_map: BTreeMap<String, String>,
}

/// The on-disk layout; `metadata` and any other field are ignored. A tensor listed twice in
/// `weight_map` is refused.
#[derive(Deserialize)]
struct RawIndex {
    weight_map: UniqueKeys<String>,
}

impl ShardIndex {
    /// Reads and parses the index file at `path`.
    pub fn load(path: &Path) -> Result<ShardIndex> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Self::parse(&bytes, path)
    }

    /// Parses index JSON; `path` only names the file in errors. Refuses a tensor listed twice
    /// and more than [`MAX_SHARDS`] shard files. Never panics.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<ShardIndex> {
        let raw: RawIndex = serde_json::from_slice(bytes).map_err(|e| {
            let mut e = Error::json(path, &e);
            if let Error::Json { message, .. } = &mut e {
                if message.contains("is listed twice") {
                    *message = format!("weight_map: tensor {message}");
                }
            }
            e
        })?;
        let weight_map: BTreeMap<String, String> = raw.weight_map.0.into_iter().collect();
        if weight_map.is_empty() {
            return Err(field_error(
                path,
                "`weight_map` is empty; expected tensor name → shard file entries".to_string(),
            ));
        }
        for (tensor, shard) in &weight_map {
            if let Some(problem) = relative_path_problem(shard) {
                return Err(field_error(
                    path,
                    format!(
                        "weight_map entry `{tensor}` → `{shard}`: {problem}; expected a file \
                         name relative to the index's folder"
                    ),
                ));
            }
        }
        let index = ShardIndex { weight_map };
        let shards = index.shard_files().len();
        if shards > MAX_SHARDS {
            return Err(field_error(
                path,
                format!(
                    "`weight_map` names {shards} shard files, more than the limit of \
                     {MAX_SHARDS} (the largest published checkpoints have about 200)"
                ),
            ));
        }
        Ok(index)
    }

    /// The shard file names, sorted and without duplicates.
    pub fn shard_files(&self) -> Vec<String> {
        let mut files: Vec<String> = self.weight_map.values().cloned().collect();
        files.sort();
        files.dedup();
        files
    }
}

/// A JSON error about a field's value (no line/column to point at).
fn field_error(path: &Path, message: String) -> Error {
    Error::Json {
        path: path.to_path_buf(),
        line: 0,
        column: 0,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ShardIndex> {
        ShardIndex::parse(json.as_bytes(), Path::new("idx.json"))
    }

    #[test]
    fn shard_files_are_sorted_and_unique() {
        let index = parse(
            r#"{"metadata": {"total_size": 12},
                "weight_map": {"a": "b.safetensors", "c": "a.safetensors", "d": "b.safetensors"}}"#,
        )
        .unwrap();
        assert_eq!(index.shard_files(), ["a.safetensors", "b.safetensors"]);
        assert_eq!(index.weight_map["c"], "a.safetensors");
    }

    #[test]
    fn a_tensor_listed_twice_is_refused() {
        let err = parse(r#"{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("idx.json") && err.contains("tensor `w` is listed twice"),
            "{err}"
        );
    }

    #[test]
    fn too_many_shards_are_refused() {
        let entries: Vec<String> = (0..=MAX_SHARDS)
            .map(|i| format!(r#""t{i}": "s{i}.safetensors""#))
            .collect();
        let err = parse(&format!(r#"{{"weight_map": {{{}}}}}"#, entries.join(", ")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("4097 shard files") && err.contains("limit of 4096"),
            "{err}"
        );
    }

    #[test]
    fn metadata_is_optional_and_subfolders_are_allowed() {
        let index = parse(r#"{"weight_map": {"w": "shards/x.safetensors"}}"#).unwrap();
        assert_eq!(index.shard_files(), ["shards/x.safetensors"]);
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = parse("{\n  \"weight_map\": {\"a\": }\n}").unwrap_err();
        match err {
            Error::Json { line, column, .. } => assert_eq!((line, column), (2, 23)),
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn missing_or_empty_weight_map_is_rejected() {
        let err = parse(r#"{"metadata": {}}"#).unwrap_err().to_string();
        assert!(err.contains("weight_map"), "{err}");
        let err = parse(r#"{"weight_map": {}}"#).unwrap_err().to_string();
        assert!(err.contains("`weight_map` is empty"), "{err}");
    }

    #[test]
    fn unsafe_shard_names_are_rejected() {
        for (name, problem) in [
            ("../x.safetensors", "`..`"),
            ("a/../../x.safetensors", "`..`"),
            ("/etc/x.safetensors", "absolute"),
            ("./x.safetensors", "`.`"),
            ("a//x.safetensors", "empty component"),
            ("a/./x.safetensors", "`.` component"),
            ("a\\x.safetensors", "backslash"),
            ("", "empty"),
        ] {
            let json = format!(
                r#"{{"weight_map": {{"layer.w": {}}}}}"#,
                serde_json::json!(name)
            );
            let err = parse(&json).unwrap_err().to_string();
            assert!(err.contains("idx.json"), "{err}");
            assert!(err.contains("`layer.w`"), "{err}");
            assert!(err.contains(problem), "{name}: {err}");
        }
    }
}
