//! The contrib ops a build calls carry their standard-ONNX bodies as model-local functions:
//! written for exactly the contrib ops used (none for onnx-standard and trt-rtx on Llama), and
//! numerically the op they stand for (checked by expanding them and comparing against the
//! contrib kernels in the interpreter with `mobius verify`).

mod common;

use std::path::Path;

use common::{fixture, mobius};
use mobius::onnx::proto::ModelProto;
use prost::Message;

fn build(out: &Path, ep: &str, dtype: &str) -> ModelProto {
    build_fixture("llama", out, ep, dtype)
}

fn build_fixture(name: &str, out: &Path, ep: &str, dtype: &str) -> ModelProto {
    mobius()
        .args(["build", "--config"])
        .arg(fixture(name))
        .arg(out)
        .args(["--ep", ep, "--dtype", dtype])
        .assert()
        .success();
    ModelProto::decode(std::fs::read(out.join("model.onnx")).unwrap().as_slice()).unwrap()
}

fn function_names(m: &ModelProto) -> Vec<String> {
    m.functions
        .iter()
        .map(|f| format!("{}::{}", f.domain, f.name))
        .collect()
}

fn ops(m: &mobius::ir::Model, op: &str) -> usize {
    m.graph.nodes.iter().filter(|n| n.op_type == op).count()
}

#[test]
fn functions_exist_for_exactly_the_contrib_ops_used() {
    let t = tempfile::tempdir().unwrap();
    let ssln = "com.microsoft::SkipSimplifiedLayerNormalization";
    for (ep, dtype, want) in [
        ("default", "f32", vec![ssln]),
        ("cpu", "f32", vec![ssln]),
        ("cuda", "f16", vec![ssln]),
        ("trt-rtx", "f16", vec![]),
        ("onnx-standard", "f32", vec![]),
    ] {
        let m = build(&t.path().join(ep), ep, dtype);
        assert_eq!(function_names(&m), want, "{ep}");
        for f in &m.functions {
            assert_eq!(f.opset_import.len(), 1, "{ep}: {} imports opset 24", f.name);
            assert_eq!(f.opset_import[0].version, 24);
        }
    }
}

#[test]
fn gelu_and_layer_norm_families_carry_their_bodies() {
    let t = tempfile::tempdir().unwrap();
    let sln = "com.microsoft::SkipLayerNormalization";
    for (name, want) in [
        ("gpt2", vec!["com.microsoft::FastGelu", sln]),
        ("bert", vec!["com.microsoft::BiasGelu", sln]),
    ] {
        let m = build_fixture(name, &t.path().join(name), "default", "f32");
        assert_eq!(function_names(&m), want, "{name}");
    }
}

#[test]
fn function_bodies_compute_the_contrib_ops() {
    let t = tempfile::tempdir().unwrap();
    for (name, op, calls) in [
        ("llama", "SkipSimplifiedLayerNormalization", 4),
        ("gpt2", "FastGelu", 2),
        ("gpt2", "SkipLayerNormalization", 5),
        ("bert", "BiasGelu", 2),
    ] {
        let out = t.path().join(format!("{name}-{op}"));
        let mut proto = build_fixture(name, &out, "default", "f32");
        let graph = proto.graph.as_mut().unwrap();
        let calls_before = std::mem::take(&mut graph.node);
        graph.node = mobius::onnx::functions::expand(calls_before, &proto.functions).unwrap();
        proto.functions.clear();
        let expanded = out.join("expanded.onnx");
        std::fs::write(&expanded, proto.encode_to_vec()).unwrap();

        // Import keeps the calls of bodies mobius writes as ops.
        let fused = mobius::onnx::import::load(&out.join("model.onnx")).unwrap();
        let inlined = mobius::onnx::import::load(&expanded).unwrap();
        assert_eq!(ops(&fused, op), calls, "{name} {op}");
        assert_eq!(ops(&inlined, op), 0, "{name} {op}");

        mobius()
            .arg("verify")
            .arg(out.join("model.onnx"))
            .arg(&expanded)
            .args(["--samples", "2", "--atol", "1e-5", "--rtol", "1e-5"])
            .assert()
            .success();
    }
}
