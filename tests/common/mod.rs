//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub mod compare;
pub mod models;
#[allow(unused_imports)]
pub use models::*;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A bundled fixture folder.
pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A published config folder (config.json only).
pub fn real_config(name: &str) -> PathBuf {
    root().join("tests/data/configs").join(name)
}

/// Copies a fixture into `dest` (a fresh folder) and returns `dest`.
pub fn copy_fixture(name: &str, dest: &Path) -> PathBuf {
    copy_dir(&fixture(name), dest)
}

/// Copies the files of folder `from` into `to` (created if needed) and returns `to`.
pub fn copy_dir(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    to.to_path_buf()
}

/// The `mobius` binary.
pub fn mobius() -> Command {
    Command::cargo_bin("mobius").unwrap()
}

/// One tensor of a safetensors file.
#[derive(Debug, Clone)]
pub struct RawTensor {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Reads a safetensors file into name → tensor (test-side reader, independent of mobius).
pub fn read_safetensors(path: &Path) -> BTreeMap<String, RawTensor> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = BTreeMap::new();
    for (name, info) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let offs: Vec<usize> = info["data_offsets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        out.insert(
            name.clone(),
            RawTensor {
                dtype: info["dtype"].as_str().unwrap().to_string(),
                shape: info["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect(),
                data: data[offs[0]..offs[1]].to_vec(),
            },
        );
    }
    out
}

/// Writes name → tensor as a safetensors file.
pub fn write_safetensors(path: &Path, tensors: &BTreeMap<String, RawTensor>) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, t) in tensors {
        let start = data.len();
        data.extend_from_slice(&t.data);
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).unwrap();
}

/// Names of the entries of a folder (sorted), or empty if it does not exist.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
