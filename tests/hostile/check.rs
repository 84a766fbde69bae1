//! Assertions shared by the hostile-input cases.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use mobius::ir::{Graph, Model};
use mobius::onnx::proto::{self, DimensionValue};
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;

/// Runs `cmd`, expecting exit code `code` and exactly one `error:` line on stderr that contains
/// every needle. No panic message, no abort. Returns the standard error.
pub fn fails_with(mut cmd: Command, code: i32, needles: &[&str]) -> String {
    let out = cmd.output().expect("mobius runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit code (stderr: {stderr})"
    );
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert_eq!(
        stderr.matches("error:").count(),
        1,
        "one error line: {stderr}"
    );
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks `{n}`: {stderr}");
    }
    stderr
}

/// The names in folder `dir` (empty when it does not exist).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Asserts that `dir` holds exactly `expected` (sorted names): nothing was written there, no
/// staging folder is left.
pub fn unchanged(dir: &Path, expected: &[String]) {
    assert_eq!(listing(dir), expected, "{} changed", dir.display());
}

/// Saves `graph` as `dir/model.onnx` (+ external data; opsets: ONNX 24 and com.microsoft 1)
/// and returns the model path.
pub fn save_model(dir: &Path, graph: Graph) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let model = Model {
        graph,
        opsets: BTreeMap::from([(String::new(), 24), ("com.microsoft".to_string(), 1)]),
        ir_version: 11,
        producer_name: "hostile".into(),
        producer_version: "0".into(),
    };
    mobius::onnx::export::save(
        &model,
        dir,
        &mut Evaluator::new(None),
        &indicatif::ProgressBar::hidden(),
        &ContribFunctions,
    )
    .unwrap();
    dir.join("model.onnx")
}

/// The ONNX element type code of float32.
pub const F32: i32 = 1;

/// A float32 graph input or output `name` of fixed shape `dims` (ONNX protobuf).
pub fn value(name: &str, dims: &[i64]) -> proto::ValueInfoProto {
    proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(proto::TypeProto {
            tensor_type: Some(proto::TypeProtoTensor {
                elem_type: F32,
                shape: Some(proto::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| proto::Dimension {
                            value: Some(DimensionValue::DimValue(d)),
                        })
                        .collect(),
                }),
            }),
        }),
        ..Default::default()
    }
}
