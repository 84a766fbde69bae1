//! EP files (`--ep-file`): names too long to tabulate, files that are not regular files or are
//! too large to be a capability table, cost parameters that would overflow the cost model,
//! and names taken by a built-in EP. Each case fails with one error naming the file and the
//! field, and writes nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::check::{fails_with, listing, unchanged};
use crate::common::{fixture, mobius};

/// Writes `text` as `dir/ep.toml` and returns its path.
fn ep_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("ep.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `mobius list eps --ep-file FILE`, stopped after 30 s (a read that never ends fails, not
/// hangs).
fn list_eps(file: &Path) -> assert_cmd::Command {
    let mut cmd = mobius();
    cmd.args(["list", "eps", "--ep-file"])
        .arg(file)
        .timeout(Duration::from_secs(30));
    cmd
}

/// Expects `list eps --ep-file FILE` to fail with code 1 and `needles`, writing nothing in
/// `dir`.
fn refused(dir: &Path, file: &Path, needles: &[&str]) {
    let before = listing(dir);
    fails_with(list_eps(file), 1, needles);
    unchanged(dir, &before);
}

#[test]
fn a_name_too_long_to_list_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let file = ep_file(t.path(), &format!("name = \"{}\"\n", "a".repeat(65_536)));
    refused(
        t.path(),
        &file,
        &["ep.toml", "`name`", "65536 characters", "at most 64"],
    );
}

#[test]
fn a_name_of_the_longest_length_is_listed() {
    let t = tempfile::tempdir().unwrap();
    let name = "b".repeat(64);
    let file = ep_file(t.path(), &format!("name = \"{name}\"\n"));
    let out = list_eps(&file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&name));
}

#[cfg(unix)]
#[test]
fn ep_files_that_are_not_regular_files_are_refused_before_reading() {
    let t = tempfile::tempdir().unwrap();
    let pipe = t.path().join("pipe.toml");
    crate::run::fifo(&pipe);
    std::fs::create_dir(t.path().join("folder.toml")).unwrap();
    for file in [
        PathBuf::from("/dev/zero"),
        pipe,
        t.path().join("folder.toml"),
    ] {
        refused(t.path(), &file, &["not a regular file"]);
    }
}

#[test]
fn an_ep_file_over_one_mib_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("big.toml");
    // A sparse file: no disk space taken.
    std::fs::File::create(&file)
        .unwrap()
        .set_len((1 << 20) + 1)
        .unwrap();
    refused(t.path(), &file, &["big.toml", "1048576 bytes (1 MiB)"]);
}

#[test]
fn cost_parameters_outside_their_range_are_refused() {
    let t = tempfile::tempdir().unwrap();
    for (cost, field, range) in [
        (
            "memory_bandwidth_gbps = 1e-320",
            "cost.memory_bandwidth_gbps",
            "between 0.001 and 1000000 GB/s, got 1e-320",
        ),
        (
            "launch_overhead_us = 1e308\npeak_tflops_f32 = 1e-308",
            "cost.launch_overhead_us",
            "got 1e308",
        ),
        (
            "peak_tflops_f16 = 1e-308",
            "cost.peak_tflops_f16",
            "got 1e-308",
        ),
        (
            "prefill_tokens = 4000000000",
            "cost.prefill_tokens",
            "between 1 and 1048576",
        ),
    ] {
        let file = ep_file(t.path(), &format!("name = \"odd\"\n[cost]\n{cost}\n"));
        refused(t.path(), &file, &["ep.toml", field, range]);
    }
}

#[test]
fn a_built_in_name_is_refused_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let file = ep_file(t.path(), "name = \"cpu\"\n");
    let needles = [
        "ep.toml:1:1",
        "`cpu` is taken by a built-in execution provider",
    ];
    refused(t.path(), &file, &needles);
    let stderr = fails_with(list_eps(&file), 1, &needles);
    assert!(!stderr.contains("pass overwrite"), "{stderr}");

    let out = t.path().join("out");
    let mut build = mobius();
    build
        .args(["build", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .arg("--ep-file")
        .arg(&file);
    fails_with(build, 1, &needles);
    assert!(!out.exists());
}
