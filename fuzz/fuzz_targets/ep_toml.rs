//! Fuzzes EP capability files (`mobius build --ep-file`, `mobius list eps --ep-file`):
//! [`mobius::ep::load_ep_file`] must return `Ok` or `Err` for any file contents, never panic.
//! A file that loads is also shown as `mobius list eps` shows it (table, JSON, genai options).
//!
//! `load_ep_file` reads a path, so each input is written to a file of this process in the
//! temporary folder first (and removed after). Non-UTF-8 inputs are skipped: the loader
//! rejects them when it reads the file, before any parsing.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mobius::ep::{ep_json, ep_table, genai_provider_options, load_ep_file};

/// This process's scratch file (libFuzzer's -fork/-jobs workers each get their own).
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("mobius-fuzz-ep-{}.toml", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    if std::str::from_utf8(data).is_err() {
        return;
    }
    let path = scratch();
    std::fs::write(path, data).expect("the temporary folder is writable");
    let loaded = load_ep_file(path);
    std::fs::remove_file(path).expect("the scratch file was just written");
    if let Ok(caps) = loaded {
        let eps = [caps];
        let _ = ep_table(&eps);
        let _ = ep_json(&eps);
        let _ = genai_provider_options(&eps[0]);
    }
});
