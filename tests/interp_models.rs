//! The reference interpreter on whole models: every fixture's logits match transformers'
//! (f32 ≤ 1e-4), and for every fixture × built-in EP the optimized graph computes what the
//! portable graph computes, on a prefill and on a step with a non-empty cache.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::compare::{assert_close, assert_tensors_close, atol};
use common::*;
use mobius::ep::{builtin_eps, get_ep};
use mobius::interp::inputs::random_inputs;
use mobius::interp::run_graph;
use mobius::interp::Rng;
use mobius::ir::{DType, Dim};
use mobius::models::build_model;
use mobius::ops::Tensor;
use mobius::opt::Role;
use mobius::rulebook::optimize;
use mobius::weights::eval::Evaluator;

#[test]
fn fixture_logits_match_transformers_through_the_interpreter() {
    for name in &decoder_fixtures() {
        let reference: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(name).join("reference.json")).unwrap())
                .unwrap();
        let ids: Vec<i64> = reference["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let cfg = fixture_config(name);
        let model = build_model(&cfg, DType::F32).unwrap();
        let store = fixture_store(name);
        let s = ids.len();
        let mut inputs = HashMap::from([
            (
                "input_ids".to_string(),
                Tensor::int(DType::I64, vec![1, s], ids.clone()),
            ),
            (
                "attention_mask".to_string(),
                Tensor::int(DType::I64, vec![1, s], vec![1; s]),
            ),
            (
                "position_ids".to_string(),
                Tensor::int(DType::I64, vec![1, s], (0..s as i64).collect()),
            ),
        ]);
        // Each cache input as the graph declares it (Gemma 4's differ per layer, and its
        // KV-sharing layers have none).
        for input in &model.graph.inputs {
            if !input.name.starts_with("past_key_values.") {
                continue;
            }
            let fixed = |j: usize| match &input.shape.0[j] {
                Dim::Fixed(n) => *n as usize,
                Dim::Sym(s) => panic!("{name}: {} dim {j} is symbolic ({s})", input.name),
            };
            let shape = vec![1, fixed(1), 0, fixed(3)];
            inputs.insert(input.name.clone(), Tensor::float(DType::F32, shape, vec![]));
        }
        let out = run_graph(&model.graph, &inputs, &mut Evaluator::new(Some(&store))).unwrap();
        let logits = out["logits"].floats().unwrap();
        let want: Vec<f32> = reference["logits"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
            })
            .collect();
        assert_close(name, &want, logits, atol(1e-4));
    }
}

#[test]
fn optimized_graphs_compute_what_the_portable_graph_computes() {
    for name in &decoder_fixtures() {
        let cfg = fixture_config(name);
        let store = fixture_store(name);
        for ep in builtin_eps() {
            let dtype = ep_dtype(&ep.name);
            let portable = build_model(&cfg, dtype).unwrap();
            let opts = optimize_options(dtype, Role::Decoder);
            let (optimized, _) = optimize(&portable, &get_ep(&ep.name).unwrap(), &opts).unwrap();
            for past in [0usize, 3] {
                let mut dims = BTreeMap::from([
                    ("batch".to_string(), 2),
                    ("sequence_len".to_string(), 4),
                    ("past_sequence_len".to_string(), past),
                ]);
                // GroupQueryAttention reads padding from seqlens_k and expects it on the right
                // (the runtime contract); the Attention graphs are also checked left-padded.
                let gqa = optimized
                    .graph
                    .nodes
                    .iter()
                    .any(|n| n.op_type == "GroupQueryAttention");
                let inputs =
                    random_inputs(&portable.graph, &mut dims, &mut Rng::new(past as u64), !gqa)
                        .unwrap();
                let a =
                    run_graph(&portable.graph, &inputs, &mut Evaluator::new(Some(&store))).unwrap();
                let b = run_graph(&optimized.graph, &inputs, &mut Evaluator::new(Some(&store)))
                    .unwrap();
                for (out, x) in &a {
                    let y = &b[out];
                    // Fused kernels round once where the unfused graph rounds per op: in f16
                    // that is a few ulps (the f16 parity bar is 2e-2); in f32 they agree to 1e-5.
                    let scale = x.as_f64().iter().fold(1f64, |m, v| m.max(v.abs()));
                    let tol = if dtype == DType::F16 { 1e-2 } else { 1e-5 } * scale;
                    assert_tensors_close(
                        &format!("{name} {} past={past} {out}", ep.name),
                        x,
                        y,
                        atol(tol),
                    );
                }
            }
        }
    }
}

/// qnn: the lowered graph of a sliding-window model (windows shorter than the keys) computes
/// what the portable one does, without `Range`.
#[test]
fn qnn_sliding_window_graph_computes_what_the_portable_graph_computes() {
    let mut cfg = fixture_config("mistral");
    cfg.layer_windows = vec![Some(3); cfg.num_hidden_layers];
    let store = fixture_store("mistral");
    let portable = build_model(&cfg, DType::F32).unwrap();
    let opts = optimize_options(DType::F32, Role::Decoder);
    let (qnn, _) = optimize(&portable, &get_ep("qnn").unwrap(), &opts).unwrap();
    assert!(qnn.graph.nodes.iter().all(|n| n.op_type != "Range"));
    for past in [0usize, 3] {
        let mut dims = BTreeMap::from([
            ("batch".to_string(), 2),
            ("sequence_len".to_string(), 4),
            ("past_sequence_len".to_string(), past),
        ]);
        let inputs = random_inputs(&portable.graph, &mut dims, &mut Rng::new(7), true).unwrap();
        let a = run_graph(&portable.graph, &inputs, &mut Evaluator::new(Some(&store))).unwrap();
        let b = run_graph(&qnn.graph, &inputs, &mut Evaluator::new(Some(&store))).unwrap();
        for (out, x) in &a {
            assert_tensors_close(&format!("past={past} {out}"), x, &b[out], atol(1e-5));
        }
    }
}

#[test]
fn verify_detects_a_single_perturbed_weight() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("qwen2"))
        .arg(&a)
        .assert()
        .success();
    let b = t.path().join("b");
    copy_dir(&a, &b);
    let same = mobius()
        .arg("verify")
        .arg(a.join("model.onnx"))
        .arg(b.join("model.onnx"))
        .assert()
        .success();
    let text = String::from_utf8(same.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("equivalent within tolerance") && text.contains("logits"),
        "{text}"
    );

    // Perturb one f32 in the middle of the data file (a weight).
    let data = b.join("model.onnx.data");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = (bytes.len() / 2) & !3;
    let v = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) + 0.5;
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    std::fs::write(&data, bytes).unwrap();
    let diff = mobius()
        .arg("verify")
        .arg(a.join("model.onnx"))
        .arg(b.join("model.onnx"))
        .assert()
        .code(1);
    let text = String::from_utf8(diff.get_output().stdout.clone()).unwrap();
    assert!(
        text.contains("DIFFERENT") && text.contains("NOT equivalent"),
        "{text}"
    );

    mobius()
        .arg("verify")
        .arg(a.join("model.onnx"))
        .arg(t.path().join("missing.onnx"))
        .assert()
        .code(2);
}
