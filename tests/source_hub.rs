//! `source::resolve` against local folders, a hand-built Hugging Face cache, and a mock hub
//! served on 127.0.0.1.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mobius::source::{resolve, HubSettings, ModelFiles, ModelSource, WeightFiles};
use mobius::weights::store::TensorStore;
use mobius::Error;
use serde_json::json;

/// The commit the mock hub reports for every file.
const COMMIT: &str = "3f1c0ffee0ddba11ab5e0123456789abcdef0123";
const CONFIG: &str = r#"{"model_type": "llama", "hidden_size": 4}"#;

/// A tiny Hugging Face hub serving the files of one folder as repo `id`, at revision `main`
/// and at [`COMMIT`], the way hf-hub 0.4 expects: a ranged GET answered with 206,
/// `Content-Range`, `ETag` and `X-Repo-Commit`; 404 for files the folder lacks.
struct MockHub {
    endpoint: String,
    /// `<revision>/<file>` of every request, in order.
    log: Arc<Mutex<Vec<String>>>,
}

impl MockHub {
    /// Serves `root` as repo `id`; requests for a file in `fail` get a 500.
    fn start(root: &Path, id: &str, fail: &[&str]) -> MockHub {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let server = Server {
            root: root.to_path_buf(),
            prefix: format!("/{id}/resolve/"),
            fail: fail.iter().map(|f| f.to_string()).collect(),
            log: Arc::clone(&log),
        };
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                server.handle(stream);
            }
        });
        MockHub { endpoint, log }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

struct Server {
    root: PathBuf,
    prefix: String,
    fail: Vec<String>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn handle(&self, stream: TcpStream) {
        let Ok(read_half) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(read_half);
        let mut request_line = String::new();
        let mut headers = HashMap::new();
        let mut line = String::new();
        if reader.read_line(&mut request_line).is_err() {
            return;
        }
        while matches!(reader.read_line(&mut line), Ok(n) if n > 0) && !line.trim().is_empty() {
            if let Some((name, value)) = line.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
            }
            line.clear();
        }
        let target = request_line.split_whitespace().nth(1).unwrap_or("");
        let response = self.respond(target, headers.get("range").map(String::as_str));
        // A client that hung up is the client's problem; keep serving.
        let _ = (&stream).write_all(&response);
    }

    fn respond(&self, target: &str, range: Option<&str>) -> Vec<u8> {
        let Some(rest) = target.strip_prefix(&self.prefix) else {
            return reply("404 Not Found", &[], b"");
        };
        let (revision, file) = rest.split_once('/').unwrap_or((rest, ""));
        self.log.lock().unwrap().push(format!("{revision}/{file}"));
        if self.fail.iter().any(|f| f == file) {
            return reply("500 Internal Server Error", &[], b"boom");
        }
        let path = self.root.join(file);
        if !(revision == "main" || revision == COMMIT) || file.is_empty() || !path.is_file() {
            return reply(
                "404 Not Found",
                &[("X-Error-Code", "EntryNotFound".into())],
                b"",
            );
        }
        let body = std::fs::read(&path).unwrap();
        let etag = format!("\"{:016x}-{}\"", fnv1a(&body), body.len());
        let mut headers = vec![("ETag", etag), ("X-Repo-Commit", COMMIT.to_string())];
        let Some(spec) = range.and_then(|r| r.strip_prefix("bytes=")) else {
            return reply("200 OK", &headers, &body);
        };
        let last = body.len() - 1;
        let parsed = spec.split_once('-').and_then(|(start, end)| {
            let start: usize = start.parse().ok()?;
            let end = if end.is_empty() {
                last
            } else {
                end.parse::<usize>().ok()?.min(last)
            };
            (start <= end).then_some((start, end))
        });
        let Some((start, end)) = parsed else {
            return reply("416 Range Not Satisfiable", &[], b"");
        };
        let content_range = format!("bytes {start}-{end}/{}", body.len());
        headers.push(("Content-Range", content_range));
        reply("206 Partial Content", &headers, &body[start..=end])
    }
}

fn reply(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A safetensors file with one U8 tensor `name` holding `values`.
fn safetensors(name: &str, values: &[u8]) -> Vec<u8> {
    let header = json!({ name: {"dtype": "U8", "shape": [values.len()], "data_offsets": [0, values.len()]} })
        .to_string();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(values);
    out
}

/// Writes `files` (name, contents) into `dir`.
fn populate(dir: &Path, files: &[(&str, Vec<u8>)]) {
    for (name, contents) in files {
        std::fs::write(dir.join(name), contents).unwrap();
    }
}

/// config.json, two tokenizer files and a single model.safetensors.
fn single_repo(dir: &Path) {
    populate(
        dir,
        &[
            ("config.json", CONFIG.into()),
            ("tokenizer.json", b"{\"model\": {}}".to_vec()),
            ("tokenizer_config.json", b"{}".to_vec()),
            ("model.safetensors", safetensors("w", &[1, 2, 3])),
        ],
    );
}

/// config.json, an index and two shards.
fn sharded_repo(dir: &Path) {
    let index = json!({"metadata": {}, "weight_map": {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors"}});
    populate(
        dir,
        &[
            ("config.json", CONFIG.into()),
            ("model.safetensors.index.json", index.to_string().into()),
            ("model-00001-of-00002.safetensors", safetensors("a", &[1])),
            (
                "model-00002-of-00002.safetensors",
                safetensors("b", &[2, 2]),
            ),
        ],
    );
}

fn settings(endpoint: &str, cache: &Path, offline: bool) -> HubSettings {
    HubSettings {
        endpoint: endpoint.to_string(),
        cache_dir: cache.to_path_buf(),
        offline,
        token: None,
    }
}

fn hub(id: &str, revision: Option<&str>) -> ModelSource {
    ModelSource::Hub {
        id: id.to_string(),
        revision: revision.map(str::to_string),
    }
}

fn file_names(files: &ModelFiles) -> Vec<String> {
    files
        .tokenizer_files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn download_fills_the_cache_and_a_second_resolve_makes_no_request() {
    let repo = tempfile::tempdir().unwrap();
    single_repo(repo.path());
    let server = MockHub::start(repo.path(), "org/tiny", &[]);
    let cache = tempfile::tempdir().unwrap();
    let settings = settings(&server.endpoint, cache.path(), false);

    let files = resolve(&hub("org/tiny", None), &settings, true).unwrap();
    let snapshot = cache
        .path()
        .join("models--org--tiny/snapshots")
        .join(COMMIT);
    assert_eq!(files.config, snapshot.join("config.json"));
    assert_eq!(std::fs::read_to_string(&files.config).unwrap(), CONFIG);
    let ref_main = cache.path().join("models--org--tiny/refs/main");
    assert_eq!(std::fs::read_to_string(ref_main).unwrap(), COMMIT);
    assert_eq!(
        files.weights,
        Some(WeightFiles::Single(snapshot.join("model.safetensors")))
    );
    assert_eq!(
        file_names(&files),
        ["tokenizer.json", "tokenizer_config.json"]
    );
    assert!(files
        .tokenizer_files
        .iter()
        .all(|p| p.starts_with(&snapshot)));
    assert!(
        files.origin.contains("org/tiny") && files.origin.contains(COMMIT),
        "{}",
        files.origin
    );
    let store = TensorStore::open(files.weights.as_ref().unwrap()).unwrap();
    assert_eq!(store.get("w").unwrap().data, &[1, 2, 3]);

    let first = server.requests();
    // config.json at the requested revision; everything after it pinned to the commit.
    let (config, rest) = first.split_at(2);
    assert_eq!(
        config,
        ["main/config.json", "main/config.json"],
        "metadata, then body"
    );
    assert!(rest.iter().all(|r| r.starts_with(COMMIT)), "{first:?}");
    // Present files take a metadata request and a download, absent ones a single 404.
    let asked = |file: &str| {
        first
            .iter()
            .filter(|r| r.ends_with(&format!("/{file}")))
            .count()
    };
    assert_eq!(
        asked("model.safetensors.index.json"),
        1,
        "a 404, then the single file"
    );
    assert_eq!(asked("model.safetensors"), 2);
    assert_eq!(asked("tokenizer.json"), 2);
    assert_eq!(asked("merges.txt"), 1);
    assert_eq!(first.len(), 2 * 4 + 1 + 7);

    let again = resolve(&hub("org/tiny", None), &settings, true).unwrap();
    assert_eq!(again, files);
    assert_eq!(
        server.requests().len(),
        first.len(),
        "the second resolve used only the cache"
    );
}

#[test]
fn sharded_download_fetches_the_index_and_every_shard() {
    let repo = tempfile::tempdir().unwrap();
    sharded_repo(repo.path());
    let server = MockHub::start(repo.path(), "org/big", &[]);
    let cache = tempfile::tempdir().unwrap();

    let files = resolve(
        &hub("org/big", None),
        &settings(&server.endpoint, cache.path(), false),
        true,
    )
    .unwrap();
    let snapshot = cache.path().join("models--org--big/snapshots").join(COMMIT);
    let index = snapshot.join("model.safetensors.index.json");
    assert_eq!(
        files.weights,
        Some(WeightFiles::Sharded {
            index: index.clone(),
            root: cache.path().join("models--org--big"),
        })
    );
    for shard in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        assert!(snapshot.join(shard).is_file(), "{shard} next to the index");
        assert!(
            server.requests().iter().any(|r| r.ends_with(shard)),
            "{shard} requested"
        );
    }
    assert!(!server
        .requests()
        .iter()
        .any(|r| r.ends_with("/model.safetensors")));
    let store = TensorStore::open(files.weights.as_ref().unwrap()).unwrap();
    assert_eq!(store.names().collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn no_weights_means_no_safetensors_request() {
    let repo = tempfile::tempdir().unwrap();
    sharded_repo(repo.path());
    let server = MockHub::start(repo.path(), "org/big", &[]);
    let cache = tempfile::tempdir().unwrap();
    let settings = settings(&server.endpoint, cache.path(), false);

    let files = resolve(&hub("org/big", None), &settings, false).unwrap();
    assert_eq!(files.weights, None);
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.ends_with("config.json")));
    assert!(
        !requests.iter().any(|r| r.contains("safetensors")),
        "{requests:?}"
    );

    // Asking for weights later still works from the partly filled cache.
    let files = resolve(&hub("org/big", None), &settings, true).unwrap();
    assert!(matches!(files.weights, Some(WeightFiles::Sharded { .. })));
}

/// Builds `models--org--name` by hand: `refs/<rev>` → `commit`, snapshot holding `files`.
fn prepare_cache(
    cache: &Path,
    id: &str,
    refs: &[(&str, &str)],
    commit: &str,
    files: &[(&str, Vec<u8>)],
) -> PathBuf {
    let root = cache.join(format!("models--{}", id.replace('/', "--")));
    for (rev, target) in refs {
        let ref_file = root.join("refs").join(rev);
        std::fs::create_dir_all(ref_file.parent().unwrap()).unwrap();
        std::fs::write(ref_file, target).unwrap();
    }
    let snapshot = root.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    populate(&snapshot, files);
    snapshot
}

#[test]
fn offline_uses_a_hand_built_cache_without_requests() {
    let empty_repo = tempfile::tempdir().unwrap();
    let server = MockHub::start(empty_repo.path(), "org/cached", &[]);
    let cache = tempfile::tempdir().unwrap();
    let main = "1111111111111111111111111111111111111111";
    let v2 = "2222222222222222222222222222222222222222";
    let files = [
        ("config.json", CONFIG.into()),
        ("model.safetensors", safetensors("w", &[7])),
        ("vocab.json", b"{}".to_vec()),
    ];
    let main_dir = prepare_cache(cache.path(), "org/cached", &[("main", main)], main, &files);
    let v2_dir = prepare_cache(cache.path(), "org/cached", &[("v2", v2)], v2, &files[..1]);
    let settings = settings(&server.endpoint, cache.path(), true);

    let got = resolve(&hub("org/cached", None), &settings, true).unwrap();
    assert_eq!(got.config, main_dir.join("config.json"));
    assert_eq!(
        got.weights,
        Some(WeightFiles::Single(main_dir.join("model.safetensors")))
    );
    assert_eq!(file_names(&got), ["vocab.json"]);

    // A tag through its ref, a commit hash directly.
    let got = resolve(&hub("org/cached", Some("v2")), &settings, false).unwrap();
    assert_eq!(got.config, v2_dir.join("config.json"));
    let got = resolve(&hub("org/cached", Some(v2)), &settings, false).unwrap();
    assert_eq!(got.config, v2_dir.join("config.json"));

    // Offline, weights the cache lacks are an error naming them.
    let err = resolve(&hub("org/cached", Some("v2")), &settings, true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
    assert!(server.requests().is_empty(), "{:?}", server.requests());
}

#[test]
fn offline_sharded_cache_missing_a_shard_names_it() {
    let cache = tempfile::tempdir().unwrap();
    let commit = "4444444444444444444444444444444444444444";
    let index = json!({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}});
    let files = [
        ("config.json", CONFIG.into()),
        ("model.safetensors.index.json", index.to_string().into()),
        ("s1.safetensors", safetensors("a", &[1])),
    ];
    prepare_cache(cache.path(), "org/sh", &[("main", commit)], commit, &files);
    let settings = settings("http://127.0.0.1:9", cache.path(), true);
    let err = resolve(&hub("org/sh", None), &settings, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("shard s2.safetensors"), "{err}");
    assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
}

#[test]
fn offline_with_an_empty_cache_names_the_missing_file() {
    let cache = tempfile::tempdir().unwrap();
    let settings = settings("http://127.0.0.1:9", cache.path(), true);
    let err = resolve(&hub("org/absent", None), &settings, false).unwrap_err();
    assert!(matches!(err, Error::Source(_)));
    let err = err.to_string();
    assert!(err.contains("config.json"), "{err}");
    assert!(err.contains("HF_HUB_OFFLINE"), "{err}");
    assert!(
        err.contains(
            &cache
                .path()
                .join("models--org--absent")
                .display()
                .to_string()
        ),
        "{err}"
    );
}

#[test]
fn invalid_ids_are_rejected_before_any_request() {
    let repo = tempfile::tempdir().unwrap();
    let server = MockHub::start(repo.path(), "org/x", &[]);
    let cache = tempfile::tempdir().unwrap();
    let settings = settings(&server.endpoint, cache.path(), false);
    for id in ["gpt2", "a/b/c", "org/", "../etc", "org/na me", "org/x--y"] {
        let err = resolve(&hub(id, None), &settings, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("invalid Hugging Face repo id `{id}`")),
            "{err}"
        );
    }
    let err = resolve(&hub("org/x", Some("../../etc")), &settings, true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid revision `../../etc`"), "{err}");
    assert!(server.requests().is_empty());
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}

#[test]
fn server_errors_on_optional_files_are_not_swallowed() {
    let repo = tempfile::tempdir().unwrap();
    single_repo(repo.path());
    let server = MockHub::start(repo.path(), "org/tiny", &["special_tokens_map.json"]);
    let cache = tempfile::tempdir().unwrap();
    let err = resolve(
        &hub("org/tiny", None),
        &settings(&server.endpoint, cache.path(), false),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("special_tokens_map.json") && err.contains("500"),
        "{err}"
    );
}

#[test]
fn unreachable_hub_is_an_error_naming_the_file() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cache = tempfile::tempdir().unwrap();
    let settings = settings(&format!("http://127.0.0.1:{port}"), cache.path(), false);
    let err = resolve(&hub("org/tiny", None), &settings, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("config.json"), "{err}");
}

#[test]
fn repo_without_config_or_weights() {
    let repo = tempfile::tempdir().unwrap();
    populate(repo.path(), &[("config.json", CONFIG.into())]);
    let server = MockHub::start(repo.path(), "org/bare", &[]);
    let cache = tempfile::tempdir().unwrap();
    let settings = settings(&server.endpoint, cache.path(), false);
    let err = resolve(&hub("org/bare", None), &settings, true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.safetensors.index.json or model.safetensors"),
        "{err}"
    );
    let err = resolve(&hub("org/other", None), &settings, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("has no config.json"), "{err}");
}

mod local {
    use super::*;

    fn local(dir: &Path, want_weights: bool) -> mobius::Result<ModelFiles> {
        resolve(
            &ModelSource::LocalDir(dir.to_path_buf()),
            &settings("http://127.0.0.1:9", Path::new("/nonexistent"), true),
            want_weights,
        )
    }

    #[test]
    fn single_file_folder() {
        let dir = tempfile::tempdir().unwrap();
        single_repo(dir.path());
        let files = local(dir.path(), true).unwrap();
        assert_eq!(files.config, dir.path().join("config.json"));
        assert_eq!(
            files.weights,
            Some(WeightFiles::Single(dir.path().join("model.safetensors")))
        );
        assert_eq!(
            file_names(&files),
            ["tokenizer.json", "tokenizer_config.json"]
        );
        assert!(files.origin.starts_with("local folder"), "{}", files.origin);
    }

    #[test]
    fn index_wins_over_single_file() {
        let dir = tempfile::tempdir().unwrap();
        sharded_repo(dir.path());
        populate(dir.path(), &[("model.safetensors", safetensors("w", &[1]))]);
        let files = local(dir.path(), true).unwrap();
        let index = dir.path().join("model.safetensors.index.json");
        let root = dir.path().to_path_buf();
        assert_eq!(files.weights, Some(WeightFiles::Sharded { index, root }));
    }

    #[test]
    fn lone_safetensors_file_with_another_name() {
        let dir = tempfile::tempdir().unwrap();
        populate(
            dir.path(),
            &[
                ("config.json", CONFIG.into()),
                ("weights.safetensors", safetensors("w", &[1])),
            ],
        );
        let files = local(dir.path(), true).unwrap();
        assert_eq!(
            files.weights,
            Some(WeightFiles::Single(dir.path().join("weights.safetensors")))
        );
    }

    #[test]
    fn weights_missing_or_ambiguous() {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path(), &[("config.json", CONFIG.into())]);
        assert_eq!(local(dir.path(), false).unwrap().weights, None);
        let err = local(dir.path(), true).unwrap_err().to_string();
        assert!(
            err.contains("no .safetensors file") && err.contains("model.safetensors.index.json"),
            "{err}"
        );
        populate(
            dir.path(),
            &[("a.safetensors", vec![]), ("b.safetensors", vec![])],
        );
        let err = local(dir.path(), true).unwrap_err().to_string();
        assert!(
            err.contains("2 .safetensors files without an index (a.safetensors, b.safetensors)"),
            "{err}"
        );
    }

    #[test]
    fn folder_or_config_missing() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("nope");
        let err = local(&gone, true).unwrap_err().to_string();
        assert!(
            err.contains(&gone.display().to_string()) && err.contains("does not exist"),
            "{err}"
        );
        let err = local(dir.path(), true).unwrap_err().to_string();
        assert!(err.contains("has no config.json"), "{err}");
    }
}
