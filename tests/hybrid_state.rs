//! Hybrid decoders through the reference interpreter (no onnxruntime): the lfm2 fixture's
//! portable graph and its cpu (GroupQueryAttention) graph give transformers' prefill logits,
//! then those of 8 decode steps of one token each fed the returned conv states
//! (`present.{i}.conv` → `past.{i}.conv`) and KV caches (f32 ≤ 1e-4; docs/recurrent.md).

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
    let cfg = fixture_config(name);
    let store = fixture_weights(name);
    let conv_layers: Vec<bool> = load_json(name)["layer_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t == "conv")
        .collect();
    let (h, kv, d) = (cfg.hidden_size, cfg.num_key_value_heads, cfg.head_dim);
    let mut state = HashMap::new();
    for (i, &conv) in conv_layers.iter().enumerate() {
        if conv {
            let width = graph_conv_width(graph, i);
            let zeros = vec![0.0; h * width];
            state.insert(
                format!("past.{i}.conv"),
                Tensor::float(DType::F32, vec![1, h, width], zeros),
            );
        } else {
            for part in ["key", "value"] {
                state.insert(
                    format!("past_key_values.{i}.{part}"),
                    Tensor::float(DType::F32, vec![1, kv, 0, d], vec![]),
                );
            }
        }
    }
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
        if !graph.inputs.iter().any(|i| i.name == "position_ids") {
            feed.remove("position_ids");
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
                let name = match rest.ends_with(".conv") {
                    true => format!("past.{rest}"),
                    false => format!("past_key_values.{rest}"),
                };
                Some((name, v))
            })
            .collect();
    }
}

/// The last dim of graph input `past.{i}.conv`.
fn graph_conv_width(graph: &Graph, i: usize) -> usize {
    let input = graph
        .inputs
        .iter()
        .find(|v| v.name == format!("past.{i}.conv"))
        .unwrap_or_else(|| panic!("no input past.{i}.conv"));
    match input.shape.0.last() {
        Some(mobius::ir::Dim::Fixed(n)) => *n as usize,
        other => panic!("past.{i}.conv: last dim {other:?}"),
    }
}

fn load_json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name).join("config.json")).unwrap()).unwrap()
}

#[test]
fn lfm2_decode_loop_through_the_interpreter() {
    let cfg = fixture_config("lfm2");
    let portable = build_model(&cfg, DType::F32).unwrap();
    check_decode_loop("lfm2", &portable.graph);
    check_decode_loop("lfm2", &optimized(&cfg, "cpu", DType::F32));
}
