//! Lookups in the Hugging Face hub cache layout, shared with the Python tools:
//!
//! ```text
//! <cache>/models--org--name/refs/<revision>            commit hash the revision points to
//! <cache>/models--org--name/snapshots/<commit>/<file>  the file at that commit
//! <cache>/models--org--name/.no_exist/<commit>/<file>  marker: the hub has no such file
//! ```

use std::path::{Path, PathBuf};

/// The cache folder of one model repo.
pub(super) struct RepoCache {
    root: PathBuf,
}

/// The cached files of one commit.
#[derive(Debug, Clone)]
pub(super) struct Snapshot {
    /// `snapshots/<commit>`.
    pub dir: PathBuf,
    /// The commit hash.
    pub commit: String,
}

/// What the cache knows about one file of a snapshot.
pub(super) enum Cached {
    /// The file is cached here.
    Present(PathBuf),
    /// An earlier download found that the hub has no such file.
    Absent,
    /// Not cached either way.
    Unknown,
}

impl Snapshot {
    /// The snapshot holding `file`, a path `<repo>/snapshots/<commit>/<top-level file>` the
    /// downloader returned.
    pub fn containing(file: &Path) -> Option<Snapshot> {
        let dir = file.parent()?;
        let commit = dir.file_name()?.to_str()?;
        is_commit_hash(commit).then(|| Snapshot {
            dir: dir.to_path_buf(),
            commit: commit.to_string(),
        })
    }
}

impl RepoCache {
    /// The cache of model repo `id` (`org/name`) under `cache_dir`.
    pub fn new(cache_dir: &Path, id: &str) -> RepoCache {
        RepoCache {
            root: cache_dir.join(format!("models--{}", id.replace('/', "--"))),
        }
    }

    /// The repo's cache folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The cached snapshot `revision` names: through `refs/<revision>`, or directly when
    /// `revision` is a commit hash.
    pub fn snapshot(&self, revision: &str) -> Option<Snapshot> {
        let commit = match std::fs::read_to_string(self.root.join("refs").join(revision)) {
            Ok(text) => text.trim().to_string(),
            Err(_) => revision.to_string(),
        };
        if !is_commit_hash(&commit) {
            return None;
        }
        let dir = self.root.join("snapshots").join(&commit);
        dir.is_dir().then_some(Snapshot { dir, commit })
    }

    /// What the cache knows about `file` at `snapshot`.
    pub fn lookup(&self, snapshot: &Snapshot, file: &str) -> Cached {
        let path = snapshot.dir.join(file);
        if path.is_file() {
            Cached::Present(path)
        } else if self.absent_marker(snapshot, file).is_file() {
            Cached::Absent
        } else {
            Cached::Unknown
        }
    }

    /// Remembers that the hub has no `file` at `snapshot`, so later runs do not ask again.
    pub fn record_absent(&self, snapshot: &Snapshot, file: &str) -> std::io::Result<()> {
        let marker = self.absent_marker(snapshot, file);
        if let Some(parent) = marker.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::File::create(marker).map(drop)
    }

    fn absent_marker(&self, snapshot: &Snapshot, file: &str) -> PathBuf {
        self.root
            .join(".no_exist")
            .join(&snapshot.commit)
            .join(file)
    }
}

/// Whether `s` is a full git commit hash (40 lowercase hex digits).
fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn finds_files_through_refs_and_records_absence() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = RepoCache::new(tmp.path(), "org/name");
        assert_eq!(cache.root(), tmp.path().join("models--org--name"));
        assert!(cache.snapshot("main").is_none());
        std::fs::create_dir_all(cache.root().join("refs")).unwrap();
        std::fs::write(cache.root().join("refs/main"), format!("{COMMIT}\n")).unwrap();
        assert!(cache.snapshot("main").is_none(), "no snapshot folder yet");
        let dir = cache.root().join("snapshots").join(COMMIT);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), "{}").unwrap();

        let snapshot = cache.snapshot("main").unwrap();
        assert_eq!(snapshot.commit, COMMIT);
        assert!(
            matches!(cache.lookup(&snapshot, "config.json"), Cached::Present(p) if p == dir.join("config.json"))
        );
        assert!(matches!(
            cache.lookup(&snapshot, "vocab.json"),
            Cached::Unknown
        ));
        cache.record_absent(&snapshot, "vocab.json").unwrap();
        assert!(matches!(
            cache.lookup(&snapshot, "vocab.json"),
            Cached::Absent
        ));
        // A commit hash works without a ref; anything else needs one.
        assert_eq!(cache.snapshot(COMMIT).unwrap().dir, dir);
        assert!(cache.snapshot("v1").is_none());
    }

    #[test]
    fn snapshot_of_downloaded_file() {
        let file = Path::new("/c/models--a--b/snapshots")
            .join(COMMIT)
            .join("config.json");
        assert_eq!(Snapshot::containing(&file).unwrap().commit, COMMIT);
        assert!(Snapshot::containing(Path::new("/c/x/config.json")).is_none());
    }
}
