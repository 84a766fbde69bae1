//! `mobius optimize` on hostile models: function calls that multiply into billions of nodes,
//! graphs whose declared outputs contradict what they compute, and `--verify-rewrites` on
//! inputs too large to evaluate.

use std::path::{Path, PathBuf};

use mobius::onnx::proto::{self, attribute_type};
use prost::Message;

use crate::check::{fails_with, listing, unchanged, value};
use crate::common::mobius;

fn node(op: &str, domain: &str, input: &str, output: &str) -> proto::NodeProto {
    proto::NodeProto {
        input: vec![input.into()],
        output: vec![output.into()],
        name: output.into(),
        op_type: op.into(),
        domain: domain.into(),
        ..Default::default()
    }
}

/// Writes a model of `nodes` (`x` → … → `y`, both declared with `dims`) and `functions` into
/// `root/model/model.onnx`.
fn write(
    root: &Path,
    dims: (&[i64], &[i64]),
    nodes: Vec<proto::NodeProto>,
    functions: Vec<proto::FunctionProto>,
) -> PathBuf {
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let m = proto::ModelProto {
        ir_version: 8,
        opset_import: vec![
            proto::OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            },
            proto::OperatorSetIdProto {
                domain: "local".into(),
                version: 1,
            },
        ],
        graph: Some(proto::GraphProto {
            node: nodes,
            name: "g".into(),
            input: vec![value("x", dims.0)],
            output: vec![value("y", dims.1)],
            ..Default::default()
        }),
        functions,
        ..Default::default()
    };
    let path = dir.join("model.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

/// `optimize model root/opt [extra]` fails with exit 1 and every needle; nothing written.
fn optimize_refused(root: &Path, model: &Path, extra: &[&str], needles: &[&str]) -> String {
    let before = listing(root);
    let model_files = listing(model.parent().unwrap());
    let mut cmd = mobius();
    cmd.arg("optimize")
        .arg(model)
        .arg(root.join("opt"))
        .args(extra);
    let stderr = fails_with(cmd, 1, needles);
    unchanged(root, &before);
    unchanged(model.parent().unwrap(), &model_files);
    stderr
}

#[test]
fn nested_function_calls_that_multiply_are_refused_before_expanding() {
    let t = tempfile::tempdir().unwrap();
    // f0 … f5: 2,000 Identity nodes each, and 10 calls of the next: 2.2·10^9 nodes expanded.
    let functions = (0..6)
        .map(|i| {
            let mut body: Vec<proto::NodeProto> = (0..2000)
                .map(|j| node("Identity", "", "a", &format!("i{j}")))
                .collect();
            body.push(node("Identity", "", "a", "b"));
            if i < 5 {
                body.extend(
                    (0..10).map(|j| node(&format!("f{}", i + 1), "local", "a", &format!("c{j}"))),
                );
            }
            proto::FunctionProto {
                name: format!("f{i}"),
                domain: "local".into(),
                input: vec!["a".into()],
                output: vec!["b".into()],
                node: body,
                opset_import: vec![proto::OperatorSetIdProto {
                    domain: String::new(),
                    version: 17,
                }],
                ..Default::default()
            }
        })
        .collect();
    let model = write(
        t.path(),
        (&[2], &[2]),
        vec![node("f0", "local", "x", "y")],
        functions,
    );
    optimize_refused(
        t.path(),
        &model,
        &[],
        &[
            "model.onnx",
            "function `f1` expands to more than 10000000 nodes",
        ],
    );
}

#[test]
fn an_input_graph_that_contradicts_its_outputs_is_reported_as_the_input_s_problem() {
    let t = tempfile::tempdir().unwrap();
    let mut transpose = node("Transpose", "", "x", "y");
    transpose.attribute.push(proto::AttributeProto {
        name: "perm".into(),
        r#type: attribute_type::INTS,
        ints: vec![1, 0],
        ..Default::default()
    });
    let model = write(t.path(), (&[2, 3], &[2, 3]), vec![transpose], vec![]);
    let stderr = optimize_refused(
        t.path(),
        &model,
        &[],
        &[
            "model.onnx",
            "output `y` is declared",
            "but the input graph computes",
        ],
    );
    assert!(!stderr.contains("optimized graph"), "{stderr}");
}

#[test]
fn verify_rewrites_limit_errors_do_not_suggest_flags_optimize_lacks() {
    let t = tempfile::tempdir().unwrap();
    let big = [1 << 20, 1 << 20];
    let model = write(
        t.path(),
        (&big, &big),
        vec![node("Neg", "", "x", "y")],
        vec![],
    );
    let stderr = optimize_refused(
        t.path(),
        &model,
        &["--verify-rewrites"],
        &["--verify-rewrites cannot evaluate", "input `x`"],
    );
    assert!(
        !stderr.contains("--max-tensor-elements") && !stderr.contains("--dims"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_kv_cache_contract_is_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let model = write(
        t.path(),
        (&[2, 3], &[2, 3]),
        vec![node("Neg", "", "x", "y")],
        vec![],
    );
    let before = listing(t.path());
    let mut cmd = mobius();
    cmd.arg("optimize")
        .arg(&model)
        .arg(t.path().join("opt"))
        .args(["--kv-cache", "hf"]);
    fails_with(cmd, 2, &["--kv-cache", "hf", "as-is", "genai"]);
    unchanged(t.path(), &before);
}
