//! Pre-quantized checkpoints (tests/fixtures/llama-gptq, llama-awq, llama-fp8): `mobius
//! build` keeps GPTQ / AWQ weights packed (MatMulNBits with the checkpoint's group size on the
//! cpu EP, DequantizeLinear + MatMul and no contrib op on onnx-standard), dequantizes FP8
//! blocks, and the saved model, run by the reference interpreter, gives transformers' logits
//! of the dequantized float model (reference.json) to 1e-4.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::compare::{assert_close, atol};
use common::*;
use mobius::interp::run_graph;
use mobius::ir::{Attr, DType, Graph};
use mobius::ops::Tensor;
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;
use serde_json::Value;
use tempfile::TempDir;

const FIXTURES: [&str; 3] = ["llama-gptq", "llama-awq", "llama-fp8"];

fn reference(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name).join("reference.json")).unwrap()).unwrap()
}

/// Builds fixture `name` for `ep` in f32 at accuracy_level 0 and loads the saved model.
fn build(name: &str, ep: &str, tmp: &TempDir) -> Graph {
    let out = tmp.path().join(format!("{name}-{ep}"));
    let run = mobius()
        .args(["build", "--config"])
        .arg(fixture(name))
        .arg(&out)
        .args(["--ep", ep, "--dtype", "f32", "--accuracy-level", "0"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{name} --ep {ep}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    mobius::onnx::import::load(&out.join("model.onnx"), &ContribFunctions)
        .unwrap()
        .graph
}

/// The prompt's logits of a saved decoder, by the reference interpreter.
fn prompt_logits(graph: &Graph, name: &str, ids: &[i64]) -> Vec<f32> {
    let cfg = load_config(&fixture(name));
    let s = ids.len();
    let mut inputs = HashMap::from([
        (
            "input_ids".to_string(),
            Tensor::int(DType::I64, vec![1, s], ids.to_vec()),
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
    for i in 0..cfg.num_hidden_layers {
        for part in ["key", "value"] {
            inputs.insert(
                format!("past_key_values.{i}.{part}"),
                Tensor::float(
                    DType::F32,
                    vec![1, cfg.num_key_value_heads, 0, cfg.head_dim],
                    vec![],
                ),
            );
        }
    }
    let graph_inputs: Vec<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    inputs.retain(|k, _| graph_inputs.contains(&k.as_str()));
    let out = run_graph(graph, &inputs, &mut Evaluator::new(None)).unwrap();
    out["logits"].floats().unwrap().to_vec()
}

fn block_sizes(graph: &Graph, op: &str) -> Vec<i64> {
    let mut sizes: Vec<i64> = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == op)
        .filter_map(|n| match n.attrs.get("block_size") {
            Some(Attr::Int(b)) => Some(*b),
            _ => None,
        })
        .collect();
    sizes.sort();
    sizes.dedup();
    sizes
}

#[test]
fn prequantized_fixtures_build_and_match_transformers() {
    let tmp = TempDir::new().unwrap();
    for name in FIXTURES {
        let reference = reference(name);
        assert_eq!(reference["task"], "prequantized-text-generation", "{name}");
        let method = reference["quantization"]["quant_method"].as_str().unwrap();
        let weights = reference["quantized_weights"].as_u64().unwrap() as usize;
        let ids: Vec<i64> = reference["input_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
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
        for ep in ["cpu", "onnx-standard"] {
            let graph = build(name, ep, &tmp);
            if method == "fp8" {
                assert_eq!(
                    count(&graph, "com.microsoft::MatMulNBits") + count(&graph, "DequantizeLinear"),
                    0
                );
            } else {
                let group = reference["quantization"]["group_size"].as_i64().unwrap();
                if ep == "cpu" {
                    assert!(count(&graph, "com.microsoft::MatMulNBits") > 0, "{name}");
                    assert_eq!(count(&graph, "DequantizeLinear"), 0, "{name}");
                    assert_eq!(block_sizes(&graph, "MatMulNBits"), vec![group], "{name}");
                } else {
                    assert_eq!(count(&graph, "com.microsoft::MatMulNBits"), 0, "{name}");
                    assert_eq!(count(&graph, "DequantizeLinear"), weights, "{name}");
                    assert_eq!(
                        block_sizes(&graph, "DequantizeLinear"),
                        vec![group],
                        "{name}"
                    );
                    assert!(
                        graph.nodes.iter().all(|n| n.domain.is_empty()),
                        "{name}: contrib ops on onnx-standard"
                    );
                }
            }
            let got = prompt_logits(&graph, name, &ids);
            // f32 on the same dequantized weights as the reference: the float builds' bound
            // (achieved: at most 4.3e-6).
            let err = assert_close(&format!("{name} --ep {ep}"), &want, &got, atol(1e-4));
            println!("{name} --ep {ep}: max abs error {err:.3e}");
        }
    }
}

/// Copies `name` and applies `edit` to the copy's model.safetensors tensors.
fn edited_fixture(
    name: &str,
    tmp: &TempDir,
    edit: impl FnOnce(&mut std::collections::BTreeMap<String, RawTensor>),
) -> std::path::PathBuf {
    let src = copy_fixture(name, &tmp.path().join("src"));
    let path = src.join("model.safetensors");
    let mut tensors = read_safetensors(&path);
    edit(&mut tensors);
    write_safetensors(&path, &tensors);
    src
}

fn refused(src: &Path, tmp: &TempDir, needles: &[&str]) {
    let out = mobius()
        .args(["build", "--config"])
        .arg(src)
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "`{needle}` not in: {stderr}");
    }
    assert!(!tmp.path().join("out").exists());
}

#[test]
fn a_gptq_g_idx_out_of_order_is_refused() {
    let tmp = TempDir::new().unwrap();
    let src = edited_fixture("llama-gptq", &tmp, |t| {
        let g = t.get_mut("model.layers.1.mlp.down_proj.g_idx").unwrap();
        // Rows 0 and 40 swap groups (0 and 1): a desc_act order.
        g.data[0..4].copy_from_slice(&1i32.to_le_bytes());
        g.data[160..164].copy_from_slice(&0i32.to_le_bytes());
    });
    refused(
        &src,
        &tmp,
        &["model.layers.1.mlp.down_proj.g_idx", "row 0", "desc_act"],
    );
}

#[test]
fn packed_tensors_of_the_wrong_shape_are_refused() {
    let tmp = TempDir::new().unwrap();
    let src = edited_fixture("llama-awq", &tmp, |t| {
        let s = t.get_mut("model.layers.0.self_attn.q_proj.scales").unwrap();
        s.shape = vec![2, 32];
    });
    refused(
        &src,
        &tmp,
        &["model.layers.0.self_attn.q_proj.scales", "[1, 64]"],
    );
}

#[test]
fn float8_tensors_outside_an_fp8_config_are_refused() {
    let tmp = TempDir::new().unwrap();
    let src = copy_fixture("llama-fp8", &tmp.path().join("src"));
    let config_path = src.join("config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config
        .as_object_mut()
        .unwrap()
        .remove("quantization_config");
    std::fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
    refused(&src, &tmp, &["float8", "quant_method \"fp8\""]);
}
