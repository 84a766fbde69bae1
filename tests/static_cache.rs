//! `mobius build --features static-cache --max-seq-len N`: the flags, the graph contract on every
//! EP form, and, through the reference interpreter, every decoder fixture's static-cache graph
//! (portable and qnn-lowered) computing the dynamic graph's logits over a prefill and decode
//! steps (onnxruntime runs the loop too: tests/ort/test_static_cache.py).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::compare::{assert_tensors_close, atol};
use common::*;
use mobius::ep::get_ep;
use mobius::interp::run_graph;
use mobius::ir::{DType, Dim, Model};
use mobius::models::build_model;
use mobius::onnx::import;
use mobius::ops::Tensor;
use mobius::opt::Role;
use mobius::passes::static_cache::{cache_input, cache_output, static_cache};
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::rulebook::optimize;
use mobius::weights::eval::Evaluator;
use predicates::prelude::*;
use predicates::str::contains;

fn build_args(out: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    mobius()
        .args(["build", "--config"])
        .arg(fixture("llama"))
        .arg(out)
        .args(extra)
        .assert()
}

fn dims(m: &Model, name: &str) -> Vec<String> {
    let v = m
        .graph
        .inputs
        .iter()
        .chain(&m.graph.outputs)
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no {name}"));
    v.shape.0.iter().map(Dim::to_string).collect()
}

#[test]
fn usage_errors_write_nothing() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let cases: [(&[&str], &str); 5] = [
        (&["--features", "static-cache"], "needs --max-seq-len"),
        (&["--max-seq-len", "16"], "add --features static-cache"),
        (
            &["--features", "static-cache", "--max-seq-len", "0"],
            "--max-seq-len",
        ),
        (
            &["--features", "static-cache", "--max-seq-len", "129"],
            "max_position_embeddings (128)",
        ),
        (
            &["--features", "static-cache", "--max-seq-len", "-4"],
            "'-4'",
        ),
    ];
    for (flags, message) in cases {
        build_args(&out, flags)
            .code(2)
            .stderr(contains(message))
            .stderr(contains("panicked").not());
        assert!(!out.exists(), "{flags:?} wrote {}", out.display());
    }
}

#[test]
fn encoders_have_no_cache_to_fix() {
    let t = tempfile::tempdir().unwrap();
    mobius()
        .args(["build", "--config"])
        .arg(fixture("bert"))
        .arg(t.path().join("out"))
        .args(["--features", "static-cache", "--max-seq-len", "16"])
        .assert()
        .code(2)
        .stderr(contains("applies to decoders with a KV cache"));
    assert!(!t.path().join("out").exists());
}

#[test]
fn hybrid_decoders_carrying_a_conv_state_are_refused() {
    let t = tempfile::tempdir().unwrap();
    mobius()
        .args(["build", "--config"])
        .arg(fixture("lfm2"))
        .arg(t.path().join("out"))
        .args(["--features", "static-cache", "--max-seq-len", "16"])
        .assert()
        .code(2)
        .stderr(contains(
            "model_type `lfm2` carries a conv state (`past.0.conv`)",
        ));
    assert!(!t.path().join("out").exists());
}

#[test]
fn help_lists_static_cache() {
    mobius()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(contains("static-cache"))
        .stdout(contains("--max-seq-len"))
        .stdout(contains("write_indices"));
}

/// Every EP form: the §1.3 contract, TensorScatter + Attention (ScatterND and decomposed
/// attention on qnn), never GroupQueryAttention, a notice where GroupQueryAttention would run,
/// no genai_config.json; with prune-lm-head, one position of logits.
#[test]
fn every_ep_builds_the_static_contract() {
    let t = tempfile::tempdir().unwrap();
    // (ep, dtype, whether its dynamic build runs GroupQueryAttention)
    let builds = [
        ("default", "f32", false),
        ("cpu", "f32", true),
        ("cuda", "f16", true),
        ("webgpu", "f16", true),
        ("onnx-standard", "f32", false),
        ("qnn", "f32", false),
    ];
    for (ep, dtype, gqa) in builds {
        let out = t.path().join(format!("{ep}-{dtype}"));
        let flags = [
            "--ep",
            ep,
            "--dtype",
            dtype,
            "--features",
            "static-cache,prune-lm-head",
            "--max-seq-len",
            "32",
        ];
        let notice = "static-cache: the attention runs as opset-24 Attention";
        let assert = build_args(&out, &flags).success();
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert_eq!(stderr.contains(notice), gqa, "--ep {ep}: {stderr}");
        // The notice is the only word on it: no second warning about a missing fusion.
        assert!(
            !stderr.contains("GQA fusion expected"),
            "--ep {ep}: {stderr}"
        );
        let m = import::load(&out.join("model.onnx"), &ContribFunctions).unwrap();
        let names: Vec<&str> = m.graph.inputs.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "input_ids",
                "position_ids",
                "key_cache.0",
                "value_cache.0",
                "key_cache.1",
                "value_cache.1",
                "write_indices",
                "nonpad_kv_seqlen"
            ],
            "--ep {ep}"
        );
        for i in 0..2 {
            for value in [false, true] {
                assert_eq!(dims(&m, &cache_input(i, value)), ["batch", "32", "32"]);
                assert_eq!(dims(&m, &cache_output(i, value)), ["batch", "32", "32"]);
            }
        }
        assert_eq!(dims(&m, "logits"), ["batch", "1", "300"]);
        let counts = m.graph.op_counts();
        assert!(!counts.contains_key("com.microsoft::GroupQueryAttention"));
        let (scatter, attention) = match ep {
            "qnn" => ("ScatterND", "Softmax"),
            _ => ("TensorScatter", "Attention"),
        };
        assert_eq!(counts.get(scatter), Some(&4), "--ep {ep}: {counts:?}");
        assert_eq!(counts.get(attention), Some(&2), "--ep {ep}: {counts:?}");
        assert!(!out.join("genai_config.json").exists(), "--ep {ep}");
        assert!(out.join("tokenizer.json").exists(), "--ep {ep}");
    }
}

/// Input tensors of one static-cache call.
fn static_feed(
    ids: &[i64],
    caches: &HashMap<String, Tensor>,
    written: i64,
) -> HashMap<String, Tensor> {
    let s = ids.len() as i64;
    let mut feed = caches.clone();
    feed.insert(
        "input_ids".into(),
        Tensor::int(DType::I64, vec![1, ids.len()], ids.to_vec()),
    );
    feed.insert(
        "position_ids".into(),
        Tensor::int(
            DType::I64,
            vec![1, ids.len()],
            (written..written + s).collect(),
        ),
    );
    feed.insert(
        "write_indices".into(),
        Tensor::int(DType::I64, vec![1], vec![written]),
    );
    feed.insert(
        "nonpad_kv_seqlen".into(),
        Tensor::int(DType::I64, vec![1], vec![written + s]),
    );
    feed
}

/// Every decoder fixture: the static graph (portable, and lowered for qnn) gives the dynamic
/// graph's logits on a 5-token prefill and two decode steps, through the interpreter.
#[test]
fn static_graphs_compute_the_dynamic_logits_for_every_decoder_fixture() {
    const SLOTS: usize = 12;
    let steps: [&[i64]; 3] = [&[3, 17, 5, 11, 2], &[7], &[13]];
    for name in decoder_fixtures() {
        let cfg = fixture_config(&name);
        let store = fixture_store(&name);
        let dynamic = build_model(&cfg, DType::F32).unwrap();
        let mut portable = build_model(&cfg, DType::F32).unwrap();
        if [
            "gpt_oss",
            "granite_swa",
            "granitemoe_swa",
            "flint",
            "mimo_v2_flash",
            "diffllama",
        ]
        .contains(&name.as_str())
        {
            // Attention with sinks (mimo_v2_flash: in its sliding layers), and differential
            // attention, are built in standard ops, not opset-24 Attention: refused.
            let err = static_cache(&mut portable.graph, &cfg, SLOTS).unwrap_err();
            assert!(err.to_string().contains("opset-24 Attention"), "{err}");
            continue;
        }
        if ["bloom", "mpt", "falcon-alibi"].contains(&name.as_str()) {
            // The ALiBi bias is built from attention_mask's positions: refused, by name.
            let err = static_cache(&mut portable.graph, &cfg, SLOTS).unwrap_err();
            assert!(err.to_string().contains("ALiBi"), "{name}: {err}");
            continue;
        }
        if ["doge", "gemma4_text", "gemma4_unified_text", "gemma3n_text"].contains(&name.as_str()) {
            // The dynamic mask reads the past values besides the attention (doge), a layer's
            // cache is read by the later layers reusing its keys and values too (Gemma 4's and
            // Gemma 3n's KV sharing): refused.
            let err = static_cache(&mut portable.graph, &cfg, SLOTS).unwrap_err();
            assert!(err.to_string().contains("more than one node"), "{err}");
            continue;
        }
        if name == "llama4_text" {
            // Chunked attention counts attention_mask's valid tokens: refused, by name.
            let err = static_cache(&mut portable.graph, &cfg, SLOTS).unwrap_err();
            assert!(
                err.to_string().contains("attends in chunks"),
                "{name}: {err}"
            );
            continue;
        }
        static_cache(&mut portable.graph, &cfg, SLOTS).unwrap_or_else(|e| panic!("{name}: {e}"));
        let opts = optimize_options(DType::F32, Role::Decoder);
        let (qnn, _) = optimize(&portable, &get_ep("qnn").unwrap(), &opts).unwrap();
        assert_eq!(count(&qnn.graph, "TensorScatter"), 0, "{name}");
        let (kv, d, layers) = (cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers);
        let mut past: HashMap<String, Tensor> = HashMap::new();
        let mut caches: [HashMap<String, Tensor>; 2] = Default::default();
        for i in 0..layers {
            for (value, part) in [(false, "key"), (true, "value")] {
                past.insert(
                    format!("past_key_values.{i}.{part}"),
                    Tensor::float(DType::F32, vec![1, kv, 0, d], vec![]),
                );
                let zeros = Tensor::float(
                    DType::F32,
                    vec![1, SLOTS, kv * d],
                    vec![0.0; SLOTS * kv * d],
                );
                for c in &mut caches {
                    c.insert(cache_input(i, value), zeros.clone());
                }
            }
        }
        let mut written = 0i64;
        for ids in steps {
            let feed = decoder_feed(ids, written as usize, &past);
            let want = run_graph(&dynamic.graph, &feed, &mut Evaluator::new(Some(&store))).unwrap();
            for (form, graph) in [("portable", &portable.graph), ("qnn", &qnn.graph)] {
                let c = &mut caches[(form == "qnn") as usize];
                let feed = static_feed(ids, c, written);
                let got = run_graph(graph, &feed, &mut Evaluator::new(Some(&store))).unwrap();
                assert_tensors_close(
                    &format!("{name} {form} at {written}"),
                    &want["logits"],
                    &got["logits"],
                    atol(1e-5),
                );
                for i in 0..layers {
                    for value in [false, true] {
                        c.insert(cache_input(i, value), got[&cache_output(i, value)].clone());
                    }
                }
            }
            past = (0..layers)
                .flat_map(|i| ["key", "value"].map(|p| format!("past_key_values.{i}.{p}")))
                .map(|k| {
                    let present = want[&k.replace("past_key_values", "present")].clone();
                    (k, present)
                })
                .collect();
            written += ids.len() as i64;
        }
    }
}
