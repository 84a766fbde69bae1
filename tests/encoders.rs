//! BERT-family encoders (bert, roberta): the portable graph through the reference interpreter
//! matches transformers' `last_hidden_state` on every reference case (unpadded, right- and
//! left-padded batches); for every built-in EP the optimized graph computes the same (f16
//! builds within the f16 bar), gets no GroupQueryAttention and fuses SkipLayerNormalization
//! where the EP supports it; `mobius build` writes no genai_config.json for encoders.

mod common;

use std::collections::HashMap;

use common::compare::{assert_close, atol};
use common::*;
use mobius::ep::{builtin_eps, get_ep};
use mobius::interp::run_graph;
use mobius::ir::{DType, Graph};
use mobius::models::bert::EncoderConfig;
use mobius::models::build_model;
use mobius::onnx::import;
use mobius::ops::Tensor;
use mobius::opt::Role;
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::rulebook::optimize;
use mobius::weights::eval::Evaluator;
use mobius::weights::store::TensorStore;
use serde_json::Value;

const ENCODERS: &[&str] = &["bert", "roberta"];

fn store(name: &str) -> TensorStore {
    fixture_store(name)
}

fn reference(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name).join("reference.json")).unwrap()).unwrap()
}

/// A reference case's token inputs, as the graph declares them.
fn case_inputs(graph: &Graph, case: &Value) -> HashMap<String, Tensor> {
    graph
        .inputs
        .iter()
        .map(|input| {
            let rows = case[&input.name].as_array().unwrap();
            let shape = vec![rows.len(), rows[0].as_array().unwrap().len()];
            let values = rows
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
                .collect();
            (input.name.clone(), Tensor::int(DType::I64, shape, values))
        })
        .collect()
}

/// Panics unless `got` equals `want` within `tol` at the positions `case`'s attention mask marks
/// valid (the helper's NaN-aware rule).
fn assert_masked_close(
    what: &str,
    got: &[f32],
    want: &[f32],
    case: &Value,
    hidden: usize,
    tol: f64,
) {
    let valid: Vec<bool> = case["attention_mask"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_i64() == Some(1)))
        .collect();
    assert_eq!(got.len(), valid.len() * hidden, "{what}");
    assert_eq!(want.len(), valid.len() * hidden, "{what}");
    let pick = |x: &[f32]| -> Vec<f32> {
        x.chunks(hidden)
            .zip(&valid)
            .filter(|(_, v)| **v)
            .flat_map(|(row, _)| row.iter().copied())
            .collect()
    };
    assert_close(what, &pick(want), &pick(got), atol(tol));
}

fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(items) => items.iter().flat_map(flat).collect(),
        other => vec![other.as_f64().unwrap() as f32],
    }
}

#[test]
fn encoder_hidden_states_match_transformers_through_the_interpreter() {
    for name in ENCODERS {
        let cfg = fixture_config(name);
        let model = build_model(&cfg, DType::F32).unwrap();
        let store = store(name);
        let reference = reference(name);
        for case in reference["cases"].as_array().unwrap() {
            let inputs = case_inputs(&model.graph, case);
            let out = run_graph(&model.graph, &inputs, &mut Evaluator::new(Some(&store))).unwrap();
            let got = out["last_hidden_state"].floats().unwrap();
            let want = flat(&case["last_hidden_state"]);
            let what = format!("{name} {}", case["name"]);
            assert_masked_close(&what, got, &want, case, cfg.hidden_size, 1e-4);
        }
    }
}

#[test]
fn optimized_encoders_compute_what_the_portable_graph_computes() {
    for name in ENCODERS {
        let cfg = fixture_config(name);
        let store = store(name);
        let reference = reference(name);
        let layers = cfg.num_hidden_layers;
        for ep in builtin_eps().into_iter().filter(|e| e.name != "qnn") {
            let dtype = ep_dtype(&ep.name);
            let portable = build_model(&cfg, dtype).unwrap();
            let opts = optimize_options(dtype, cfg.role());
            let caps = get_ep(&ep.name).unwrap();
            let (optimized, _) = optimize(&portable, &caps, &opts).unwrap();
            let counts = optimized.graph.op_counts();
            let count = |op: &str| counts.get(op).copied().unwrap_or(0);
            assert_eq!(
                count("com.microsoft::GroupQueryAttention"),
                0,
                "{}",
                ep.name
            );
            assert_eq!(count("Attention"), layers, "{name} {}", ep.name);
            let fused = if caps.supports_skip_layer_norm {
                1 + 2 * layers
            } else {
                0
            };
            assert_eq!(
                count("com.microsoft::SkipLayerNormalization"),
                fused,
                "{name} {}",
                ep.name
            );
            assert_eq!(
                count("LayerNormalization"),
                1 + 2 * layers - fused,
                "{name} {}",
                ep.name
            );
            for case in reference["cases"].as_array().unwrap() {
                let inputs = case_inputs(&portable.graph, case);
                let run = |g: &Graph| {
                    run_graph(g, &inputs, &mut Evaluator::new(Some(&store))).unwrap()
                        ["last_hidden_state"]
                        .floats()
                        .unwrap()
                        .to_vec()
                };
                let (a, b) = (run(&portable.graph), run(&optimized.graph));
                let tol = if dtype == DType::F16 { 2e-2 } else { 1e-5 };
                let what = format!("{name} {} {}", ep.name, case["name"]);
                assert_masked_close(&what, &b, &a, case, cfg.hidden_size, tol);
                if dtype == DType::F16 {
                    let want = flat(&case["last_hidden_state"]);
                    let what = format!("{what} vs transformers");
                    assert_masked_close(&what, &b, &want, case, cfg.hidden_size, 2e-2);
                }
            }
        }
    }
}

#[test]
fn gqa_fusion_and_qkv_packing_are_for_decoders_only() {
    // The same f16 bert graph optimized for cuda as if it were a decoder gets no GQA either
    // (the mask is bidirectional), but the encoder role must not even enable those rules:
    // their groups are absent from the trace.
    let cfg = fixture_config("bert");
    let portable = build_model(&cfg, DType::F16).unwrap();
    let opts = |role| optimize_options(DType::F16, role);
    let cuda = get_ep("cuda").unwrap();
    let (_, encoder) = optimize(&portable, &cuda, &opts(Role::Encoder)).unwrap();
    let (_, decoder) = optimize(&portable, &cuda, &opts(Role::Decoder)).unwrap();
    let groups = |r: &mobius::opt::OptimizeReport| -> Vec<String> {
        r.stages
            .iter()
            .flat_map(|s| s.groups.iter().map(|g| g.group.clone()))
            .collect()
    };
    for group in ["GQAFusion", "PackQKV"] {
        assert!(!groups(&encoder).iter().any(|g| g == group), "{group}");
        assert!(groups(&decoder).iter().any(|g| g == group), "{group}");
    }
    assert!(encoder.to_string().contains("role: encoder"));
}

#[test]
fn encoder_package_has_no_genai_config() {
    let t = tempfile::tempdir().unwrap();
    for name in ENCODERS {
        let out = t.path().join(name);
        mobius()
            .args(["build", "-q", "--ep", "cuda", "--dtype", "f16", "--config"])
            .arg(fixture(name))
            .arg(&out)
            .assert()
            .success();
        let files = entries(&out);
        assert_eq!(
            files,
            [
                "model.onnx",
                "model.onnx.data",
                "tokenizer.json",
                "tokenizer_config.json"
            ],
            "{name}"
        );
        let model = import::load(&out.join("model.onnx"), &ContribFunctions).unwrap();
        let inputs: Vec<&str> = model.graph.inputs.iter().map(|v| v.name.as_str()).collect();
        let want: &[&str] = if *name == "bert" {
            &["input_ids", "attention_mask", "token_type_ids"]
        } else {
            &["input_ids", "attention_mask"]
        };
        assert_eq!(inputs, want, "{name}");
        assert_eq!(model.graph.outputs[0].name, "last_hidden_state");
    }
    let listed = mobius().args(["list", "models"]).assert().success();
    let text = String::from_utf8(listed.get_output().stdout.clone()).unwrap();
    assert!(text.contains("bert") && text.contains("roberta"), "{text}");
}

#[test]
fn checkpoint_tensors_read_under_one_name_twice_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let dir = copy_fixture("bert", &t.path().join("bert"));
    let path = dir.join("model.safetensors");
    let mut tensors = read_safetensors(&path);
    // The legacy `bert.embeddings.LayerNorm.gamma` and a modern spelling of the same tensor.
    let gamma = tensors["bert.embeddings.LayerNorm.gamma"].clone();
    tensors.insert("embeddings.LayerNorm.weight".into(), gamma);
    write_safetensors(&path, &tensors);
    let out = t.path().join("out");
    let failed = mobius()
        .args(["build", "--config"])
        .arg(&dir)
        .arg(&out)
        .assert()
        .failure();
    let err = String::from_utf8(failed.get_output().stderr.clone()).unwrap();
    assert!(
        err.contains("`bert.embeddings.LayerNorm.gamma`")
            && err.contains("`embeddings.LayerNorm.weight`"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn published_encoder_configs_build_for_every_ep_without_weights() {
    for (name, types) in [("bert-base-uncased", true), ("roberta-base", false)] {
        let cfg = published(name);
        assert_eq!(cfg.role(), Role::Encoder);
        assert_eq!(
            cfg.knobs::<EncoderConfig>().unwrap().type_vocab_size > 1,
            types
        );
        assert_eq!((cfg.num_hidden_layers, cfg.hidden_size), (12, 768));
        for ep in builtin_eps().into_iter().filter(|e| e.name != "qnn") {
            let dtype = ep_dtype(&ep.name);
            let portable = build_model(&cfg, dtype).unwrap();
            let opts = optimize_options(dtype, Role::Encoder);
            let (optimized, report) = optimize(&portable, &ep, &opts).unwrap();
            let counts = optimized.graph.op_counts();
            assert_eq!(counts["Attention"], 12, "{name} {}", ep.name);
            assert!(
                report.stages.iter().all(|s| s.limit_hit.is_none()),
                "{name} {}",
                ep.name
            );
        }
    }
}
