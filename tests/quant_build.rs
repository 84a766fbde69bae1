//! `mobius build --quant` end to end without onnxruntime: which ops each EP gets, what stays
//! float, and that the MatMulNBits / GatherBlockQuantized forms compute what the standard
//! DequantizeLinear form computes (through mobius' reference interpreter, `mobius verify`).
//! The onnxruntime side (bit identity with its quantizer, logits against transformers) is
//! tests/ort/test_quant.py.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use mobius::ir::{DType, Model};
use mobius::onnx::import;
use mobius::rulebook::contrib_functions::ContribFunctions;

fn build(src: &Path, out: &Path, flags: &[&str]) {
    mobius()
        .args(["build", "-q", "--config"])
        .arg(src)
        .arg(out)
        .args(flags)
        .assert()
        .success();
}

fn load(out: &Path) -> Model {
    import::load(&out.join("model.onnx"), &ContribFunctions).unwrap()
}

fn counts(model: &Model) -> HashMap<String, usize> {
    let mut c = HashMap::new();
    for n in &model.graph.nodes {
        *c.entry(n.op_type.clone()).or_insert(0) += 1;
    }
    c
}

/// MatMul nodes whose second input is an initializer (a float weight left unquantized).
fn float_matmul_weights(model: &Model) -> Vec<String> {
    let inits: Vec<&str> = model
        .graph
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    model
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMul" && inits.contains(&n.inputs[1].as_str()))
        .map(|n| n.inputs[1].clone())
        .collect()
}

fn verify_equivalent(a: &Path, b: &Path) {
    mobius()
        .arg("verify")
        .arg(a.join("model.onnx"))
        .arg(b.join("model.onnx"))
        .args(["--dims", "batch=1,sequence_len=5,past_sequence_len=3"])
        .assert()
        .success();
}

#[test]
fn int4_runs_as_matmulnbits_where_the_ep_has_it_and_as_dequantize_linear_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let (cpu, standard) = (tmp.path().join("cpu"), tmp.path().join("standard"));
    build(&fixture("llama"), &cpu, &["--ep", "cpu", "--quant", "int4"]);
    build(
        &fixture("llama"),
        &standard,
        &["--ep", "onnx-standard", "--quant", "int4"],
    );
    let (c, s) = (load(&cpu), load(&standard));
    // q/k/v packed into one MatMulNBits per layer: 2 layers x (qkv, o, gate, up, down) + head.
    assert_eq!(counts(&c)["MatMulNBits"], 11, "{:?}", counts(&c));
    assert!(!counts(&c).contains_key("DequantizeLinear"));
    assert_eq!(counts(&s)["DequantizeLinear"], 15, "{:?}", counts(&s));
    assert!(s.graph.nodes.iter().all(|n| n.domain.is_empty()));
    assert!(float_matmul_weights(&c).is_empty() && float_matmul_weights(&s).is_empty());
    for n in c.graph.nodes.iter().filter(|n| n.op_type == "MatMulNBits") {
        let b = c
            .graph
            .initializers
            .iter()
            .find(|i| i.name == n.inputs[1])
            .unwrap();
        assert_eq!(b.dtype, DType::U8);
        assert_eq!(b.shape[2], 16, "block 32 of 4-bit values: 16 bytes");
    }
    let q = s
        .graph
        .initializers
        .iter()
        .filter(|i| i.dtype == DType::I4)
        .count();
    assert_eq!(q, 15);
    verify_equivalent(&standard, &cpu);
}

#[test]
fn biases_move_into_matmulnbits_and_asymmetric_weights_carry_zero_points() {
    let tmp = tempfile::tempdir().unwrap();
    let (cpu, standard) = (tmp.path().join("cpu"), tmp.path().join("standard"));
    let flags = [
        "--quant",
        "int4",
        "--quant-asymmetric",
        "--quant-block-size",
        "16",
    ];
    build(
        &fixture("qwen2"),
        &cpu,
        &[&["--ep", "cpu"][..], &flags].concat(),
    );
    build(
        &fixture("qwen2"),
        &standard,
        &[&["--ep", "onnx-standard"][..], &flags].concat(),
    );
    let c = load(&cpu);
    let nbits: Vec<_> = c
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMulNBits")
        .collect();
    assert!(
        nbits
            .iter()
            .all(|n| n.inputs.len() >= 4 && !n.inputs[3].is_empty()),
        "zero points"
    );
    let biased = nbits
        .iter()
        .filter(|n| n.inputs.get(5).is_some_and(|b| !b.is_empty()))
        .count();
    assert_eq!(biased, 2, "the packed q/k/v bias of each layer");
    verify_equivalent(&standard, &cpu);
}

#[test]
fn excluded_weights_stay_float_and_embeddings_share_the_tied_head() {
    let tmp = tempfile::tempdir().unwrap();
    let excluded = tmp.path().join("excluded");
    build(
        &fixture("llama"),
        &excluded,
        &[
            "--ep",
            "cpu",
            "--quant",
            "int4",
            "--quant-exclude",
            "lm_head",
        ],
    );
    let e = load(&excluded);
    assert_eq!(counts(&e)["MatMulNBits"], 10);
    assert_eq!(
        counts(&e)["MatMul"],
        1,
        "the tied head stays a float MatMul"
    );

    let (shared, standard) = (tmp.path().join("shared"), tmp.path().join("standard"));
    let flags = ["--quant", "int4", "--quant-embeddings"];
    build(
        &fixture("llama"),
        &shared,
        &[&["--ep", "cpu"][..], &flags].concat(),
    );
    build(
        &fixture("llama"),
        &standard,
        &[&["--ep", "onnx-standard"][..], &flags].concat(),
    );
    let m = load(&shared);
    let gbq = m
        .graph
        .nodes
        .iter()
        .find(|n| n.op_type == "GatherBlockQuantized")
        .unwrap();
    let reshape = m
        .graph
        .nodes
        .iter()
        .find(|n| n.outputs[0] == gbq.inputs[0])
        .unwrap();
    assert_eq!(reshape.op_type, "Reshape");
    let head = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMulNBits")
        .find(|n| n.inputs[1] == reshape.inputs[0])
        .expect("the LM head's MatMulNBits reads the table the embedding reads");
    assert_eq!(head.inputs[2], gbq.inputs[2], "one scales initializer");
    let s = load(&standard);
    assert!(s
        .graph
        .initializers
        .iter()
        .any(|i| i.dtype == DType::I8 && i.shape == [300, 64]));
    verify_equivalent(&standard, &shared);
}

/// A block larger than the hidden size pads the LM head's MatMulNBits rows: the embedding then
/// keeps its own table (it crashed the optimizer with a 128-wide GatherBlockQuantized output
/// for a 64-wide hidden state).
#[test]
fn embeddings_do_not_share_a_head_padded_to_the_block() {
    let tmp = tempfile::tempdir().unwrap();
    let (fused, standard) = (tmp.path().join("fused"), tmp.path().join("standard"));
    let flags = [
        "--quant",
        "int4",
        "--quant-block-size",
        "128",
        "--quant-embeddings",
    ];
    build(
        &fixture("llama"),
        &fused,
        &[&["--ep", "cpu"][..], &flags].concat(),
    );
    build(
        &fixture("llama"),
        &standard,
        &[&["--ep", "onnx-standard"][..], &flags].concat(),
    );
    let m = load(&fused);
    let gbq = m
        .graph
        .nodes
        .iter()
        .find(|n| n.op_type == "GatherBlockQuantized")
        .expect("the embedding is GatherBlockQuantized");
    assert!(
        m.graph.initializers.iter().any(|i| i.name == gbq.inputs[0]),
        "its own table, not the head's reshaped weight"
    );
    verify_equivalent(&standard, &fused);
}

#[test]
fn graph_only_builds_declare_the_quantized_initializers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    build(
        &real_config("llama-3.2-1b"),
        &out,
        &[
            "--ep",
            "cpu",
            "--dtype",
            "f32",
            "--no-weights",
            "--quant",
            "int4",
            "--quant-embeddings",
        ],
    );
    let m = load(&out);
    let c = counts(&m);
    // 16 layers x (packed qkv, o, gate, up, down) + the tied head.
    assert_eq!(c["MatMulNBits"], 81, "{c:?}");
    assert_eq!(c["GatherBlockQuantized"], 1, "{c:?}");
    assert!(float_matmul_weights(&m).is_empty());
}
