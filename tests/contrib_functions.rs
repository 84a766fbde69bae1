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
    mobius()
        .args(["build", "--config"])
        .arg(fixture("llama"))
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
fn function_bodies_compute_the_contrib_ops() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("default");
    let mut proto = build(&out, "default", "f32");
    let graph = proto.graph.as_mut().unwrap();
    let calls = std::mem::take(&mut graph.node);
    graph.node = mobius::onnx::functions::expand(calls, &proto.functions).unwrap();
    proto.functions.clear();
    let expanded = out.join("expanded.onnx");
    std::fs::write(&expanded, proto.encode_to_vec()).unwrap();

    // Import keeps the calls of bodies mobius writes as ops.
    let fused = mobius::onnx::import::load(&out.join("model.onnx")).unwrap();
    let inlined = mobius::onnx::import::load(&expanded).unwrap();
    assert_eq!(ops(&fused, "SkipSimplifiedLayerNormalization"), 4);
    assert_eq!(ops(&inlined, "SkipSimplifiedLayerNormalization"), 0);
    assert_eq!(ops(&inlined, "RMSNormalization"), 5);

    mobius()
        .arg("verify")
        .arg(out.join("model.onnx"))
        .arg(&expanded)
        .args(["--samples", "2", "--atol", "1e-5", "--rtol", "1e-5"])
        .assert()
        .success();
}
