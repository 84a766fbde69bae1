//! `mobius cost`: the cost model's estimate of a built fixture, its parameters from an EP
//! file, `--dims`, and its errors.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mobius::rulebook::contrib_functions::ContribFunctions;
use predicates::str::contains;
use serde_json::Value;

/// The llama fixture built for `ep` (no weights: only shapes are costed) into `dir`.
fn build(dir: &Path, ep: &str) -> PathBuf {
    let out = dir.join(ep);
    mobius()
        .args(["build", "-q", "--no-weights", "--dtype", "f32", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .args(["--ep", ep])
        .assert()
        .success();
    out.join("model.onnx")
}

fn cost_json(model: &Path, extra: &[&str]) -> Value {
    let out = mobius()
        .arg("cost")
        .arg(model)
        .arg("--json")
        .args(extra)
        .assert()
        .success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

fn time(v: &Value) -> f64 {
    v["time_us"].as_f64().unwrap()
}

#[test]
fn report_sums_its_nodes_and_follows_the_workloads() {
    let t = tempfile::tempdir().unwrap();
    let model = build(t.path(), "cpu");
    let r = cost_json(&model, &["--ep", "cpu"]);
    let nodes = r["nodes"].as_array().unwrap();
    let saved = mobius::onnx::import::load(&model, &ContribFunctions).unwrap();
    assert_eq!(nodes.len(), saved.graph.nodes.len(), "one row per node");
    for w in ["prefill", "decode"] {
        let sum: f64 = nodes.iter().map(|n| time(&n[w])).sum();
        let total = time(&r[format!("total_{w}")]);
        assert!((sum - total).abs() < 1e-9 * total, "{w}: {sum} vs {total}");
        let by_op: f64 = r["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| time(&o[w]))
            .sum();
        assert!((by_op - total).abs() < 1e-9 * total, "{w} per op: {by_op}");
    }
    let count: u64 = r["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["count"].as_u64().unwrap())
        .sum();
    assert_eq!(count as usize, nodes.len());
    // A decoding step moves less than a 128-token prefill.
    assert!(time(&r["total_decode"]) < time(&r["total_prefill"]));
    let gqa = nodes
        .iter()
        .find(|n| n["op"] == "com.microsoft::GroupQueryAttention")
        .expect("the cpu build runs GroupQueryAttention");
    assert!(gqa["prefill"]["flops"].as_f64().unwrap() > 0.0);
    // A longer cache makes decoding attention dearer and leaves the MatMuls alone.
    let long = cost_json(
        &model,
        &["--ep", "cpu", "--dims", "past_sequence_len=100000"],
    );
    let find = |r: &Value, name: &Value| -> Value {
        r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == *name)
            .unwrap()
            .clone()
    };
    let gqa_long = find(&long, &gqa["name"]);
    assert!(time(&gqa_long["decode"]) > 10.0 * time(&gqa["decode"]));
    let matmul = nodes.iter().find(|n| n["op"] == "MatMul").unwrap();
    assert_eq!(find(&long, &matmul["name"])["decode"], matmul["decode"]);
}

#[test]
fn ep_file_parameters_drive_the_estimate() {
    // With bandwidth and throughput at their ceiling every kernel costs its launch overhead
    // (plus at most 1e-3 µs of traffic), host shape arithmetic a tenth of it.
    let t = tempfile::tempdir().unwrap();
    let model = build(t.path(), "cpu");
    let file = t.path().join("fast.toml");
    std::fs::write(
        &file,
        "name = \"fast\"\nbase = \"cpu\"\n[cost]\nlaunch_overhead_us = 10.0\n\
         memory_bandwidth_gbps = 1e6\npeak_tflops_f32 = 1e6\npeak_tflops_f16 = 1e6\n",
    )
    .unwrap();
    let r = cost_json(&model, &["--ep-file", file.to_str().unwrap()]);
    assert_eq!(r["ep"], "fast");
    for n in r["nodes"].as_array().unwrap() {
        let p = &n["prefill"];
        let expected = match p["bound"].as_str().unwrap() {
            "launch" => 10.0,
            "host" => 1.0,
            other => panic!("{}: bound {other}", n["name"]),
        };
        assert!((time(p) - expected).abs() < 1e-3, "{n}");
    }
}

#[test]
fn text_report_has_nodes_op_types_and_total() {
    let t = tempfile::tempdir().unwrap();
    let model = build(t.path(), "cuda");
    mobius()
        .arg("cost")
        .arg(&model)
        .args(["--ep", "cuda"])
        .assert()
        .success()
        .stdout(contains("EP cuda: launch 5 µs"))
        .stdout(contains("RotaryEmbedding"))
        .stdout(contains("op type"))
        .stdout(contains("\ntotal "));
}

#[test]
fn bad_input_is_refused_clearly() {
    let t = tempfile::tempdir().unwrap();
    let model = build(t.path(), "cpu");
    mobius()
        .arg("cost")
        .arg(&model)
        .args(["--ep", "onnx-standard"])
        .assert()
        .code(1)
        .stderr(contains(
            "`onnx-standard` cannot run com.microsoft::GroupQueryAttention",
        ));
    mobius()
        .arg("cost")
        .arg(&model)
        .args(["--ep", "cpu", "--dims", "past_len=3"])
        .assert()
        .code(2)
        .stderr(contains("--dims past_len"))
        .stderr(contains("past_sequence_len"));
    mobius()
        .arg("cost")
        .arg(&model)
        .args(["--ep", "cpu", "--dims", "batch"])
        .assert()
        .code(2);
    for huge in ["9223372036854775807", "18446744073709551615"] {
        mobius()
            .arg("cost")
            .arg(&model)
            .args([
                "--ep",
                "cpu",
                "--dims",
                &format!("past_sequence_len={huge}"),
            ])
            .assert()
            .code(2)
            .stderr(contains("at most 1099511627776"));
    }
    mobius()
        .arg("cost")
        .arg(&model)
        .args(["--ep", "no-such-ep"])
        .assert()
        .code(1)
        .stderr(contains("unknown execution provider `no-such-ep`"));
    let junk = t.path().join("junk.onnx");
    std::fs::write(&junk, b"not a model").unwrap();
    mobius()
        .arg("cost")
        .arg(&junk)
        .assert()
        .code(1)
        .stderr(contains("junk.onnx"));
}

#[test]
fn ep_file_op_corrections_load_and_apply() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("cal.toml");
    std::fs::write(
        &file,
        "name = \"cal\"\nbase = \"cpu\"\n[cost]\nlaunch_overhead_us = 10.0\n\
         memory_bandwidth_gbps = 1e6\npeak_tflops_f32 = 1e6\n\
         [cost.ops.\"com.microsoft::GroupQueryAttention\"]\noverhead_us = 7.0\n\
         [cost.ops.MatMul]\nscale = 2.0\n",
    )
    .unwrap();
    let caps = mobius::ep::load_ep_file(&file).unwrap();
    let gqa = caps.cost_ops["com.microsoft::GroupQueryAttention"];
    assert_eq!((gqa.overhead_us, gqa.scale), (7.0, 1.0));
    assert_eq!(caps.cost_ops["MatMul"].scale, 2.0);
    let model = build(t.path(), "cpu");
    let r = cost_json(&model, &["--ep-file", file.to_str().unwrap()]);
    let node = |op: &str| {
        r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["op"] == op)
            .unwrap()
            .clone()
    };
    // Launch-bound at this bandwidth: the GQA overhead adds to the launch, the MatMul scale
    // only doubles a roofline time far below it.
    assert!((time(&node("com.microsoft::GroupQueryAttention")["prefill"]) - 17.0).abs() < 1e-2);
    assert!((time(&node("MatMul")["prefill"]) - 10.0).abs() < 1e-2);
}

#[test]
fn ep_file_bad_op_corrections_name_the_field() {
    let t = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[cost.ops.MatMul]\nscale = 0.0\n",
            "`cost.ops.\"MatMul\".scale`",
        ),
        (
            "[cost.ops.MatMul]\noverhead_us = -1.0\n",
            "`cost.ops.\"MatMul\".overhead_us`",
        ),
        ("[cost.ops.MatMul]\nscale = nan\n", "got NaN"),
        ("[cost.ops.MatMul]\nfixed = 1.0\n", "unknown field `fixed`"),
        (
            "[cost.ops.\"Mat Mul\"]\nscale = 1.0\n",
            "`Mat Mul` is not an op key",
        ),
        ("[cost.ops]\nMatMul = 1.0\n", "field `cost.ops.MatMul`"),
    ];
    for (i, (body, expected)) in cases.into_iter().enumerate() {
        let file = t.path().join(format!("bad{i}.toml"));
        std::fs::write(&file, format!("name = \"bad\"\nbase = \"cpu\"\n{body}")).unwrap();
        mobius()
            .args(["list", "eps", "--ep-file"])
            .arg(&file)
            .assert()
            .code(1)
            .stderr(contains(format!("bad{i}.toml:")))
            .stderr(contains(expected));
    }
}

#[test]
fn the_calibrated_example_loads() {
    // examples/cpu-calibrated.toml: what scripts/calibrate.py wrote on the development machine.
    let caps = mobius::ep::load_ep_file(&root().join("examples/cpu-calibrated.toml")).unwrap();
    assert_eq!(caps.name, "cpu-calibrated");
    assert!(!caps.cost_ops.is_empty());
    assert_ne!(caps.cost, mobius::get_ep("cpu").unwrap().cost);
}

/// Every command that prints ends quietly when its reader has gone away (`mobius cost MODEL |
/// head`): by SIGPIPE, as a command-line tool does, with no panic and no backtrace.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_every_printing_command_quietly() {
    use std::os::fd::FromRawFd;
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), "default");
    let model = model.to_str().unwrap();
    let commands: [&[&str]; 7] = [
        &["list", "eps"],
        &["list", "eps", "--json"],
        &["list", "models"],
        &["list", "models", "--markdown"],
        &["cost", model],
        &["cost", model, "--json"],
        &["verify", model, model, "--samples", "1"],
    ];
    for args in commands {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fds[0] is the read end just opened and used nowhere else; fds[1] is owned
        // by the Stdio from here on.
        let write_end = unsafe {
            libc::close(fds[0]);
            std::process::Stdio::from_raw_fd(fds[1])
        };
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("mobius"))
            .args(args)
            .stdout(write_end)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "mobius {args:?} with its reader gone: {:?}, stderr: {stderr}",
            out.status
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "mobius {args:?}: {stderr}"
        );
    }
}
