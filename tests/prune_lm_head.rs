//! `mobius build --features prune-lm-head`: the flag's parsing and the pruned graph's shape
//! on every attention form (onnxruntime checks the values: tests/ort/test_prune_lm_head.py).

mod common;

use std::path::Path;

use common::*;
use mobius::ir::{Dim, Model};
use mobius::onnx::import;
use mobius::rulebook::contrib_functions::ContribFunctions;
use predicates::prelude::*;
use predicates::str::contains;

fn build(out: &Path, extra: &[&str]) -> Model {
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("llama"))
        .arg(out)
        .args(extra)
        .assert()
        .success();
    import::load(&out.join("model.onnx"), &ContribFunctions).unwrap()
}

fn logits_dims(m: &Model) -> Vec<String> {
    let v = m.graph.outputs.iter().find(|v| v.name == "logits").unwrap();
    v.shape.0.iter().map(Dim::to_string).collect()
}

fn has_op(m: &Model, op: &str) -> bool {
    m.graph.nodes.iter().any(|n| n.op_type == op)
}

#[test]
fn pruned_logits_are_one_position_on_every_attention_form() {
    let t = tempfile::tempdir().unwrap();
    // (ep, dtype, the attention op that EP's build runs)
    let builds = [
        ("cpu", "f32", "GroupQueryAttention"),
        ("cuda", "f16", "GroupQueryAttention"),
        ("cuda", "f32", "Attention"),
        ("onnx-standard", "f32", "Attention"),
        ("qnn", "f32", "Softmax"),
    ];
    for (ep, dtype, attention) in builds {
        let out = t.path().join(format!("{ep}-{dtype}"));
        let flags = ["--ep", ep, "--dtype", dtype, "--features", "prune-lm-head"];
        let m = build(&out, &flags);
        assert_eq!(logits_dims(&m), ["batch", "1", "300"], "--ep {ep} {dtype}");
        assert!(has_op(&m, attention), "--ep {ep} {dtype}: no {attention}");
        let last = m.graph.nodes.iter().any(|n| {
            n.op_type == "Gather" && n.attrs.get("axis") == Some(&mobius::ir::Attr::Int(1))
        });
        assert!(last, "--ep {ep} {dtype}: no Gather on the sequence axis");
        let full = build(&t.path().join(format!("{ep}-{dtype}-full")), &flags[..4]);
        assert_eq!(
            logits_dims(&full),
            ["batch", "sequence_len", "300"],
            "--ep {ep} {dtype} without the flag"
        );
    }
}

#[test]
fn unknown_features_are_a_usage_error_naming_the_accepted_ones() {
    let t = tempfile::tempdir().unwrap();
    for value in ["text-only", "prune-lm-head,nope", "prune_lm_head"] {
        mobius()
            .args(["build", "--config"])
            .arg(fixture("llama"))
            .arg(t.path().join("out"))
            .args(["--features", value])
            .assert()
            .code(2)
            .stderr(contains("invalid value"))
            .stderr(contains("prune-lm-head"));
    }
    assert!(!t.path().join("out").exists());
}

#[test]
fn help_lists_only_the_finished_features() {
    mobius()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(contains("--features"))
        .stdout(contains("prune-lm-head"))
        .stdout(contains("left-padded"))
        .stdout(contains("text-only").not());
}

#[test]
fn encoders_have_no_lm_head_to_prune() {
    let t = tempfile::tempdir().unwrap();
    mobius()
        .args(["build", "--config"])
        .arg(fixture("bert"))
        .arg(t.path().join("out"))
        .args(["--features", "prune-lm-head"])
        .assert()
        .failure()
        .stderr(contains("prune-lm-head"))
        .stderr(contains("no `logits` output"));
}
