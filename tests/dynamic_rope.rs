//! Dynamic NTK RoPE beyond the original context, through the reference interpreter, against
//! transformers (tests/fixtures/llama-dynamic: original context 32, factor 2): one forward of
//! 64 tokens (`long_prompt`), and a KV-cache decode of the greedy tokens from a 12-token prompt
//! to 43 positions, each step against transformers' generate (`generation_logits`: past 32
//! tokens each step rotates with the base of its own length while the cache keeps the
//! rotations it was given, so these differ from one forward's logits). Both on the portable
//! graph and on the cpu graph (GroupQueryAttention behind the per-pass rotations).

mod common;

use std::collections::HashMap;

use common::compare::{assert_close, atol};
use common::*;
use mobius::interp::run_graph;
use mobius::ir::{DType, Graph};
use mobius::models::build_model;
use mobius::ops::Tensor;
use mobius::weights::eval::Evaluator;
use mobius::weights::store::TensorStore;
use serde_json::Value;

const NAME: &str = "llama-dynamic";
const ORIGINAL: usize = 32;

fn reference() -> Value {
    serde_json::from_slice(&std::fs::read(fixture(NAME).join("reference.json")).unwrap()).unwrap()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn rows(v: &Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

/// max |got − want| within the f32 bound, through the suite's one comparison (a NaN or an
/// infinity on one side fails).
fn max_abs_error(got: &[f32], want: &[f32], what: &str) -> f32 {
    assert_close(what, want, got, atol(1e-4)) as f32
}

/// The two graphs under test: portable, and optimized for cpu (GroupQueryAttention, the
/// rotations of q and k in front of it: no stored table for it to read).
fn graphs() -> Vec<(&'static str, Graph)> {
    let cfg = fixture_config(NAME);
    let cpu = optimized(&cfg, "cpu", DType::F32);
    assert_eq!(count(&cpu, "com.microsoft::GroupQueryAttention"), 2);
    assert_eq!(count(&cpu, "RotaryEmbedding"), 4);
    vec![
        ("portable", build_model(&cfg, DType::F32).unwrap().graph),
        ("cpu", cpu),
    ]
}

/// One pass of `ids` at positions `past…` over `cache` (the presents of the last pass, or
/// empty); returns the logits `[S, V]` flattened and the presents as the next pass's past.
fn step(
    graph: &Graph,
    store: &TensorStore,
    ids: &[i64],
    cache: &HashMap<String, Tensor>,
    past: usize,
) -> (Vec<f32>, HashMap<String, Tensor>) {
    let feed = decoder_feed(ids, past, cache);
    let out = run_graph(graph, &feed, &mut Evaluator::new(Some(store))).unwrap();
    let next = cache
        .keys()
        .map(|k| {
            (
                k.clone(),
                out[&k.replace("past_key_values", "present")].clone(),
            )
        })
        .collect();
    (out["logits"].floats().unwrap().to_vec(), next)
}

fn empty_cache() -> HashMap<String, Tensor> {
    let cfg = fixture_config(NAME);
    let (kv, d) = (cfg.num_key_value_heads, cfg.head_dim);
    (0..cfg.num_hidden_layers)
        .flat_map(|i| ["key", "value"].map(|p| format!("past_key_values.{i}.{p}")))
        .map(|k| (k, Tensor::float(DType::F32, vec![1, kv, 0, d], vec![])))
        .collect()
}

#[test]
fn the_fixture_is_dynamic_over_an_original_context_of_32() {
    let cfg = fixture_config(NAME);
    assert_eq!(
        cfg.rope.scaling,
        mobius::config::RopeScaling::Dynamic {
            factor: 2.0,
            original: ORIGINAL
        }
    );
    assert_eq!(cfg.max_position_embeddings, ORIGINAL);
    let r = reference();
    assert_eq!(ints(&r["long_prompt"]["input_ids"]).len(), 2 * ORIGINAL);
    let prompt = ints(&r["input_ids"]).len();
    assert!(prompt < ORIGINAL && prompt + ints(&r["greedy_tokens"]).len() > ORIGINAL);
}

#[test]
fn one_forward_at_twice_the_original_context_matches_transformers() {
    let r = reference();
    let ids = ints(&r["long_prompt"]["input_ids"]);
    let want: Vec<f32> = rows(&r["long_prompt"]["logits"]).concat();
    let store = fixture_store(NAME);
    for (form, graph) in graphs() {
        let (logits, _) = step(&graph, &store, &ids, &empty_cache(), 0);
        let err = max_abs_error(&logits, &want, form);
        assert!(err <= 1e-4, "{form}: max abs error {err}");
    }
}

#[test]
fn cached_decode_across_the_original_context_matches_transformers_generate() {
    let r = reference();
    let prompt = ints(&r["input_ids"]);
    let tokens = ints(&r["greedy_tokens"]);
    let want = rows(&r["generation_logits"]);
    assert_eq!(want.len(), tokens.len());
    let store = fixture_store(NAME);
    let vocab = want[0].len();
    for (form, graph) in graphs() {
        let (logits, mut cache) = step(&graph, &store, &prompt, &empty_cache(), 0);
        let last = &logits[logits.len() - vocab..];
        let mut worst = max_abs_error(last, &want[0], form);
        for (i, &t) in tokens[..tokens.len() - 1].iter().enumerate() {
            let past = prompt.len() + i;
            let (logits, next) = step(&graph, &store, &[t], &cache, past);
            let err = max_abs_error(&logits, &want[i + 1], &format!("{form} at {past}"));
            assert!(
                err <= 1e-4,
                "{form}: step at position {past}: max abs error {err}"
            );
            worst = worst.max(err);
            cache = next;
        }
        assert!(worst <= 1e-4, "{form}: {worst}");
    }
}

#[test]
fn the_context_length_is_the_factor_times_the_original_context() {
    let cfg = fixture_config(NAME);
    assert_eq!(cfg.rope.context_length(cfg.max_position_embeddings), 64);
    let model = build_model(&cfg, DType::F32).unwrap();
    let caps = mobius::ep::get_ep("cpu").unwrap();
    let gc = mobius::package::genai_config::genai_config(
        &cfg,
        "llama",
        &caps,
        &model.graph,
        "model.onnx",
    );
    assert_eq!(gc["model"]["context_length"], 64);
    // A factor that is not a whole number rounds up.
    let mut rope = cfg.rope.clone();
    rope.scaling = mobius::config::RopeScaling::Dynamic {
        factor: 1.5,
        original: 33,
    };
    assert_eq!(rope.context_length(33), 50);
}

#[test]
fn a_static_cache_may_hold_the_whole_context_length() {
    let cfg = fixture_config(NAME);
    let mut graph = build_model(&cfg, DType::F32).unwrap().graph;
    let err = mobius::passes::static_cache::static_cache(&mut graph.clone(), &cfg, 65)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("from 1 to 64") && err.contains("dynamic RoPE factor 2"),
        "{err}"
    );
    mobius::passes::static_cache::static_cache(&mut graph, &cfg, 64).unwrap();
}
