//! Where a checkpoint's files come from: a local folder, the Hugging Face cache, or a download
//! from the hub (into that cache).
//!
//! [`resolve`] turns a [`ModelSource`] into [`ModelFiles`]: local paths of config.json, the
//! safetensors weights and whichever tokenizer files exist.

mod cache;
mod hub;
pub mod index;
mod local;
mod repo_id;
mod settings;
pub mod unique_keys;

use std::path::PathBuf;

pub use settings::HubSettings;

use crate::Result;

/// Tokenizer/generation files copied into the output package when present.
pub const TOKENIZER_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "added_tokens.json",
    "merges.txt",
    "vocab.json",
    "chat_template.jinja",
    "generation_config.json",
];

/// The model configuration every checkpoint has.
const CONFIG_FILE: &str = "config.json";
/// The weights of a checkpoint stored as one file.
const SINGLE_WEIGHTS_FILE: &str = "model.safetensors";
/// The index of a checkpoint whose weights are split into shards.
const SHARD_INDEX_FILE: &str = "model.safetensors.index.json";

/// Where to take a checkpoint from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A folder holding config.json and safetensors files.
    LocalDir(PathBuf),
    /// A model repo on the Hugging Face hub (looked up in the cache first).
    Hub {
        /// The repo id, `org/name`.
        id: String,
        /// A branch, tag or commit hash; `main` when `None`.
        revision: Option<String>,
    },
}

/// The safetensors weights of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightFiles {
    /// All tensors in one `.safetensors` file.
    Single(PathBuf),
    /// Tensors split over shards; the shards live next to the index file.
    Sharded {
        /// The `model.safetensors.index.json` file.
        index: PathBuf,
        /// The folder every shard must resolve inside, links followed: the checkpoint folder,
        /// or for a hub repo its cache folder (snapshot files link into its `blobs`).
        root: PathBuf,
    },
}

/// Local paths of a checkpoint's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The config.json file.
    pub config: PathBuf,
    /// The weights; `None` when they were not asked for.
    pub weights: Option<WeightFiles>,
    /// Those of [`TOKENIZER_FILES`] the checkpoint has, in that order.
    pub tokenizer_files: Vec<PathBuf>,
    /// Where the files came from, for people (`local folder X`, `hub repo org/name …`).
    pub origin: String,
    /// The folder all these files resolve inside (the local checkpoint folder, or the hub
    /// repo's cache folder); an output folder must stay apart from it.
    pub root: PathBuf,
}

/// Finds (and for hub repos, downloads when not cached) the files of `source`.
///
/// Weights are only located — and only downloaded — when `want_weights` is true. Missing
/// tokenizer files are skipped; a missing config.json or (when wanted) weights is an error.
pub fn resolve(source: &ModelSource, hub: &HubSettings, want_weights: bool) -> Result<ModelFiles> {
    match source {
        ModelSource::LocalDir(dir) => local::resolve(dir, want_weights),
        ModelSource::Hub { id, revision } => {
            hub::resolve(id, revision.as_deref(), hub, want_weights)
        }
    }
}
