//! Hybrid decoders through the reference interpreter (no onnxruntime): the lfm2, lfm2_moe,
//! mamba2, mamba, falcon_mamba, bamba, granitemoehybrid, nemotron_h, jamba, falcon_h1, zamba2,
//! qwen3_next, qwen3_5_text, qwen3_5_moe_text, qwen3_5 and qwen3_5_moe (image-text) and
//! recurrent_gemma fixtures' portable graphs and their cpu graphs (with GroupQueryAttention where
//! a layer attends; mamba's, jamba's, the Gated DeltaNet layers' and the RG-LRU layers' with their
//! `Scan`) give transformers' prefill logits, then those of 8 decode steps of one
//! token each fed the returned conv, SSM and recurrent states (`present.{i}.conv` →
//! `past.{i}.conv`, `present.{i}.ssm` → `past.{i}.ssm`, `present.{i}.recurrent` →
//! `past.{i}.recurrent`) and KV caches (f32 ≤ 1e-4; docs/recurrent.md); Qwen3.5's 3-D
//! `position_ids` get a text token's three equal rows.

mod common;

use std::collections::HashMap;

use common::compare::{assert_close, atol};
use common::*;
use mobius::interp::run_graph;
use mobius::ir::{DType, Graph};
use mobius::models::build_model;
use mobius::ops::Tensor;
use mobius::weights::eval::Evaluator;
use serde_json::Value;

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn floats(rows: &Value) -> Vec<f32> {
    rows.as_array()
        .unwrap()
        .iter()
        .flat_map(|row| match row {
            Value::Array(values) => values.iter().map(|v| v.as_f64().unwrap() as f32).collect(),
            v => vec![v.as_f64().unwrap() as f32],
        })
        .collect()
}

/// The prefill and the 8 reference decode steps of fixture `name` through `graph`, each
/// call's logits against reference.json.
fn check_decode_loop(name: &str, graph: &Graph) {
    let reference: Value =
        serde_json::from_slice(&std::fs::read(fixture(name).join("reference.json")).unwrap())
            .unwrap();
    let store = fixture_store(name);
    let mut state = HashMap::new();
    for input in graph.inputs.iter().filter(|v| v.name.starts_with("past")) {
        let shape = empty_state_shape(&input.name, &input.shape.0);
        let zeros = vec![0.0; shape.iter().product()];
        state.insert(input.name.clone(), Tensor::float(DType::F32, shape, zeros));
    }
    assert!(!state.is_empty(), "{name}: no state inputs");
    let prompt = ints(&reference["input_ids"]);
    let steps = &reference["decode_steps"];
    let mut calls = vec![(prompt.clone(), floats(&reference["logits"]))];
    for (t, want) in ints(&steps["input_ids"])
        .into_iter()
        .zip(steps["logits"].as_array().unwrap())
    {
        calls.push((vec![t], floats(want)));
    }
    assert_eq!(
        calls.len(),
        9,
        "{name}: reference.json holds 8 decode steps"
    );
    let mut past = 0;
    for (j, (ids, want)) in calls.iter().enumerate() {
        let mut feed = decoder_feed(ids, past, &state);
        match graph.inputs.iter().find(|i| i.name == "position_ids") {
            None => {
                feed.remove("position_ids");
            }
            // Qwen3.5's multimodal RoPE rows: a text token's three rows are equal.
            Some(p) if p.shape.0.len() == 3 => {
                let rows: Vec<i64> = (past as i64..(past + ids.len()) as i64).collect();
                let three = rows.repeat(3);
                let positions = Tensor::int(DType::I64, vec![3, 1, ids.len()], three);
                feed.insert("position_ids".into(), positions);
            }
            Some(_) => {}
        }
        let out = run_graph(graph, &feed, &mut Evaluator::new(Some(&store))).unwrap();
        assert_close(
            &format!("{name} call {j}"),
            want,
            out["logits"].floats().unwrap(),
            atol(1e-4),
        );
        past += ids.len();
        state = out
            .into_iter()
            .filter_map(|(k, v)| {
                let rest = k.strip_prefix("present.")?;
                let name = match [".conv", ".ssm", ".recurrent"]
                    .iter()
                    .any(|s| rest.ends_with(s))
                {
                    true => format!("past.{rest}"),
                    false => format!("past_key_values.{rest}"),
                };
                Some((name, v))
            })
            .collect();
    }
}

/// The shape of state input `name` before the first call: batch 1, an empty KV cache, the
/// fixed dims of a conv or SSM state.
fn empty_state_shape(name: &str, dims: &[mobius::ir::Dim]) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            mobius::ir::Dim::Fixed(n) => *n as usize,
            mobius::ir::Dim::Sym(s) if s == "batch" => 1,
            mobius::ir::Dim::Sym(s) if s == "past_sequence_len" => 0,
            other => panic!("{name}: dim {other:?}"),
        })
        .collect()
}

#[test]
fn lfm2_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("lfm2");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("lfm2", &portable.graph);
    check_decode_loop("lfm2", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn lfm2_moe_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("lfm2_moe");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("lfm2_moe", &portable.graph);
    check_decode_loop("lfm2_moe", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn mamba2_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("mamba2");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("mamba2", &portable.graph);
    check_decode_loop("mamba2", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn bamba_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("bamba");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("bamba", &portable.graph);
    check_decode_loop("bamba", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn granitemoehybrid_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("granitemoehybrid");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("granitemoehybrid", &portable.graph);
    check_decode_loop("granitemoehybrid", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn mamba_and_falcon_mamba_decode_loops_through_the_interpreter() {
    for name in ["mamba", "falcon_mamba"] {
        let cfg = fixture_config(name);
        let portable = build_model(&cfg, DType::F32).unwrap();
        check_decode_loop(name, &portable.graph);
        check_decode_loop(name, &optimized(&cfg, "cpu", DType::F32));
    }
}

#[test]
fn nemotron_h_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("nemotron_h");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("nemotron_h", &portable.graph);
    check_decode_loop("nemotron_h", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn jamba_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("jamba");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("jamba", &portable.graph);
    check_decode_loop("jamba", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn falcon_h1_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("falcon_h1");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("falcon_h1", &portable.graph);
    check_decode_loop("falcon_h1", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn zamba2_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("zamba2");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("zamba2", &portable.graph);
    check_decode_loop("zamba2", &optimized(&cfg, "cpu", DType::F32));
}

#[test]
fn gated_delta_decode_loops_through_the_interpreter() {
    for name in [
        "qwen3_next",
        "qwen3_5_text",
        "qwen3_5_moe_text",
        "qwen3_5",
        "qwen3_5_moe",
    ] {
        let cfg = fixture_config(name);
        let portable = build_model(&cfg, DType::F32).unwrap();
        check_decode_loop(name, &portable.graph);
        check_decode_loop(name, &optimized(&cfg, "cpu", DType::F32));
    }
}

#[test]
fn recurrent_gemma_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("recurrent_gemma");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("recurrent_gemma", &portable.graph);
    check_decode_loop("recurrent_gemma", &optimized(&cfg, "cpu", DType::F32));
}
