//! Export → import → export gives identical files; imported initializers reference the
//! external data they came from.

mod common;

use common::*;
use mobius::ir::TensorSource;
use mobius::onnx::{export, import};
use mobius::weights::eval::Evaluator;

#[test]
fn built_model_round_trips_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let first = t.path().join("first");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("qwen2"))
        .arg(&first)
        .assert()
        .success();

    let model = import::load(&first.join("model.onnx")).unwrap();
    assert!(model
        .graph
        .initializers
        .iter()
        .any(|i| matches!(i.source, Some(TensorSource::External { .. }))));
    let second = t.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let mut ev = Evaluator::new(None);
    export::save(&model, &second, &mut ev, &indicatif::ProgressBar::hidden()).unwrap();
    for file in ["model.onnx", "model.onnx.data"] {
        assert_eq!(
            std::fs::read(first.join(file)).unwrap(),
            std::fs::read(second.join(file)).unwrap(),
            "{file} differs after a round trip"
        );
    }
    let again = import::load(&second.join("model.onnx")).unwrap();
    assert_eq!(again.graph.nodes, model.graph.nodes);
    assert_eq!(again.graph.inputs, model.graph.inputs);
    assert_eq!(again.graph.outputs, model.graph.outputs);
}

#[test]
fn external_data_is_aligned() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .success();
    let model = import::load(&out.join("model.onnx")).unwrap();
    let mut external = 0;
    for init in &model.graph.initializers {
        if let Some(TensorSource::External { offset, length, .. }) = &init.source {
            external += 1;
            let align = if *length >= 1 << 16 { 1 << 16 } else { 64 };
            assert_eq!(offset % align, 0, "{} at {offset}", init.name);
        }
    }
    assert!(external > 10);
}

#[test]
fn import_rejects_garbage_and_escaping_locations() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("bad.onnx");
    std::fs::write(&path, b"\xff\xff\xff not protobuf").unwrap();
    let err = import::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("bad.onnx") && err.contains("not an ONNX model"),
        "{err}"
    );

    let out = t.path().join("out");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .success();
    let bytes = std::fs::read(out.join("model.onnx")).unwrap();
    let needle = b"model.onnx.data";
    let mut patched = bytes.clone();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    patched[at..at + 3].copy_from_slice(b"../");
    std::fs::write(out.join("model.onnx"), patched).unwrap();
    let err = import::load(&out.join("model.onnx"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unsafe path") && err.contains("`../el.onnx.data`"),
        "{err}"
    );
}
