//! Checkpoints from the Hugging Face hub: the cache first, then a download into it.
//!
//! The revision is resolved to a commit once (through the cache or the config.json download);
//! every later file is looked up and downloaded at that commit, so all files come from the
//! same snapshot folder. Files the hub answers 404 for are recorded in the cache (`.no_exist`),
//! so a second run makes no request at all.

use std::cell::OnceCell;
use std::path::PathBuf;

use hf_hub::api::sync::{Api, ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};

use super::cache::{Cached, RepoCache, Snapshot};
use super::index::ShardIndex;
use super::repo_id::{validate_id, validate_revision};
use super::{
    HubSettings, ModelFiles, WeightFiles, CONFIG_FILE, SHARD_INDEX_FILE, SINGLE_WEIGHTS_FILE,
    TOKENIZER_FILES,
};
use crate::paths::check_file_inside;
use crate::{Error, Result};

/// The revision used when none is given.
const DEFAULT_REVISION: &str = "main";

/// Finds, downloading when needed, the files of hub repo `id` at `revision`.
pub(super) fn resolve(
    id: &str,
    revision: Option<&str>,
    settings: &HubSettings,
    want_weights: bool,
) -> Result<ModelFiles> {
    validate_id(id)?;
    let revision = revision.unwrap_or(DEFAULT_REVISION);
    validate_revision(revision)?;
    let repo = HubRepo {
        id,
        revision,
        settings,
        cache: RepoCache::new(&settings.cache_dir, id),
        api: OnceCell::new(),
    };
    let (snapshot, config) = repo.config()?;
    let weights = if want_weights {
        Some(repo.weights(&snapshot)?)
    } else {
        None
    };
    let mut tokenizer_files = Vec::new();
    for file in TOKENIZER_FILES {
        if let Some(path) = repo.fetch(&snapshot, file)? {
            check_file_inside(repo.cache.root(), &path, "tokenizer file")?;
            tokenizer_files.push(path);
        }
    }
    Ok(ModelFiles {
        config,
        weights,
        tokenizer_files,
        origin: format!(
            "hub repo {id} (revision {revision}, commit {})",
            snapshot.commit
        ),
        root: repo.cache.root().to_path_buf(),
    })
}

/// One repo being resolved.
struct HubRepo<'a> {
    id: &'a str,
    revision: &'a str,
    settings: &'a HubSettings,
    cache: RepoCache,
    /// Built on the first download, so fully cached repos need no HTTP client.
    api: OnceCell<Api>,
}

impl HubRepo<'_> {
    /// config.json and the snapshot it belongs to.
    fn config(&self) -> Result<(Snapshot, PathBuf)> {
        if let Some(snapshot) = self.cache.snapshot(self.revision) {
            if let Cached::Present(path) = self.cache.lookup(&snapshot, CONFIG_FILE) {
                return Ok((snapshot, path));
            }
        }
        if self.settings.offline {
            return Err(Error::Source(format!(
                "{CONFIG_FILE} of hub repo {} (revision {}) is not in the Hugging Face cache at \
                 {} and HF_HUB_OFFLINE is set",
                self.id,
                self.revision,
                self.cache.root().display()
            )));
        }
        let path = self.download(self.revision, CONFIG_FILE)?.ok_or_else(|| {
            Error::Source(format!(
                "hub repo {} (revision {}) has no {CONFIG_FILE} (HTTP 404)",
                self.id, self.revision
            ))
        })?;
        let snapshot = Snapshot::containing(&path).ok_or_else(|| {
            Error::Source(format!(
                "the hub download of {CONFIG_FILE} landed at {}, outside a snapshot folder",
                path.display()
            ))
        })?;
        Ok((snapshot, path))
    }

    /// The weights: the shard index and every shard, else `model.safetensors`.
    fn weights(&self, snapshot: &Snapshot) -> Result<WeightFiles> {
        // Look in the cache for both layouts before asking the hub about either.
        if let Cached::Present(index) = self.cache.lookup(snapshot, SHARD_INDEX_FILE) {
            return self.shards(snapshot, index);
        }
        if let Cached::Present(single) = self.cache.lookup(snapshot, SINGLE_WEIGHTS_FILE) {
            return Ok(WeightFiles::Single(single));
        }
        if let Some(index) = self.fetch(snapshot, SHARD_INDEX_FILE)? {
            return self.shards(snapshot, index);
        }
        match self.fetch(snapshot, SINGLE_WEIGHTS_FILE)? {
            Some(single) => Ok(WeightFiles::Single(single)),
            None => Err(self.missing(
                snapshot,
                &format!("weights ({SHARD_INDEX_FILE} or {SINGLE_WEIGHTS_FILE})"),
            )),
        }
    }

    /// Fetches every shard `index` lists.
    fn shards(&self, snapshot: &Snapshot, index: PathBuf) -> Result<WeightFiles> {
        for shard in ShardIndex::load(&index)?.shard_files() {
            if self.fetch(snapshot, &shard)?.is_none() {
                let what = format!("shard {shard} (listed in {})", index.display());
                return Err(self.missing(snapshot, &what));
            }
        }
        Ok(WeightFiles::Sharded {
            index,
            root: self.cache.root().to_path_buf(),
        })
    }

    /// `file` at `snapshot`: from the cache, else downloaded; `None` when the repo has no such
    /// file (or, offline, when the cache does not have it).
    fn fetch(&self, snapshot: &Snapshot, file: &str) -> Result<Option<PathBuf>> {
        match self.cache.lookup(snapshot, file) {
            Cached::Present(path) => return Ok(Some(path)),
            Cached::Absent => return Ok(None),
            Cached::Unknown if self.settings.offline => return Ok(None),
            Cached::Unknown => {}
        }
        let found = self.download(&snapshot.commit, file)?;
        if found.is_none() {
            if let Err(e) = self.cache.record_absent(snapshot, file) {
                tracing::debug!("cannot record that {file} is absent in the cache: {e}");
            }
        }
        Ok(found)
    }

    /// Downloads `file` at `revision` into the cache; `None` on HTTP 404.
    fn download(&self, revision: &str, file: &str) -> Result<Option<PathBuf>> {
        let repo = Repo::with_revision(self.id.to_string(), RepoType::Model, revision.to_string());
        let repo = self.api()?.repo(repo);
        let url = repo.url(file);
        tracing::info!("downloading {url}");
        match repo.download(file) {
            Ok(path) => Ok(Some(path)),
            Err(e) => match http_status(&e) {
                Some(404) => Ok(None),
                Some(401 | 403) => Err(Error::Source(format!(
                    "downloading {url}: {e} (the repo may be private, gated or nonexistent; set \
                     HF_TOKEN to a token that can read it)"
                ))),
                _ => Err(Error::Source(format!("downloading {url}: {e}"))),
            },
        }
    }

    /// The hub client, built on first use.
    fn api(&self) -> Result<&Api> {
        if let Some(api) = self.api.get() {
            return Ok(api);
        }
        let settings = self.settings;
        let api = ApiBuilder::from_cache(Cache::new(settings.cache_dir.clone()))
            .with_endpoint(settings.endpoint.clone())
            .with_token(settings.token.clone())
            .with_progress(false)
            .build()
            .map_err(|e| Error::Source(format!("cannot set up the Hugging Face client: {e}")))?;
        Ok(self.api.get_or_init(|| api))
    }

    /// The error for a required file (`what`) that [`HubRepo::fetch`] did not find.
    fn missing(&self, snapshot: &Snapshot, what: &str) -> Error {
        if self.settings.offline {
            Error::Source(format!(
                "{what} of hub repo {} is not in the Hugging Face cache at {} and HF_HUB_OFFLINE \
                 is set",
                self.id,
                snapshot.dir.display()
            ))
        } else {
            Error::Source(format!(
                "hub repo {} (commit {}) has no {what}; only safetensors checkpoints are supported",
                self.id, snapshot.commit
            ))
        }
    }
}

/// The HTTP status of a failed request.
///
/// hf-hub 0.4 wraps ureq 2 errors, whose text ends in `<url>: status code <N>` (ureq is not a
/// direct dependency, so its error type cannot be matched here); the hub tests pin this down.
fn http_status(error: &ApiError) -> Option<u16> {
    let ApiError::RequestError(inner) = error else {
        return None;
    };
    let text = inner.to_string();
    let (_, after) = text.rsplit_once(": status code ")?;
    after.get(..3)?.parse().ok()
}
