//! `--quant` on hostile input: weights that cannot be quantized, flags out of range or without
//! `--quant`, and models too old for the standard form.

use std::path::Path;

use mobius::ir::{DType, GraphBuilder, Initializer, Shape, TensorData, TensorSource};
use mobius::rulebook::contrib_functions::ContribFunctions;

use crate::check::{fails_with, listing, unchanged};
use crate::common::{copy_fixture, fixture, mobius, read_safetensors, write_safetensors};

/// A copy of the llama fixture with one weight element replaced by `value`.
fn llama_with(dir: &Path, tensor: &str, element: usize, value: f32) {
    copy_fixture("llama", dir);
    let path = dir.join("model.safetensors");
    let mut tensors = read_safetensors(&path);
    let t = tensors.get_mut(tensor).unwrap();
    t.data[4 * element..4 * element + 4].copy_from_slice(&value.to_le_bytes());
    write_safetensors(&path, &tensors);
}

#[test]
fn a_non_finite_weight_is_named_and_nothing_is_written() {
    for (value, word) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf")] {
        let tmp = tempfile::tempdir().unwrap();
        let ckpt = tmp.path().join("ckpt");
        llama_with(&ckpt, "model.layers.1.mlp.down_proj.weight", 37, value);
        let out = tmp.path().join("out");
        let mut cmd = mobius();
        cmd.args(["build", "--config"])
            .arg(&ckpt)
            .arg(&out)
            .args(["--quant", "int4"]);
        let err = fails_with(
            cmd,
            1,
            &["model.layers.1.mlp.down_proj.weight", "element (37, 0)"],
        );
        assert!(err.to_lowercase().contains(&word.to_lowercase()), "{err}");
        unchanged(tmp.path(), &["ckpt".to_string()]);
    }
}

#[test]
fn quantization_flags_out_of_range_or_alone_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--quant", "int3"], "int3"),
        (&["--quant", "int4", "--quant-block-size", "48"], "48"),
        (&["--quant", "int4", "--quant-block-size", "512"], "512"),
        (&["--quant", "int4", "--accuracy-level", "5"], "5"),
        (&["--quant-block-size", "64"], "--quant"),
        (&["--quant-asymmetric"], "--quant"),
        (&["--quant-exclude", "lm_head"], "--quant"),
        (&["--quant-embeddings"], "--quant"),
    ];
    for (flags, needle) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let mut cmd = mobius();
        cmd.args(["build", "--config"])
            .arg(fixture("llama"))
            .arg(&out)
            .args(*flags);
        fails_with(cmd, 2, &[needle]);
        assert!(listing(tmp.path()).is_empty(), "{flags:?} wrote output");
    }
}

/// `y = MatMul(x, w)` with a float `[16, 4]` weight, in a model importing `opset`.
fn matmul_model(dir: &Path, opset: i64) -> std::path::PathBuf {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64, 16]));
    b.output("y", DType::F32, Shape::new([2i64, 4]));
    let values: Vec<f32> = (0..64).map(|i| i as f32 / 64.0 - 0.5).collect();
    let w = b.initializer(Initializer {
        name: "w".into(),
        dtype: DType::F32,
        shape: vec![16, 4],
        source: Some(TensorSource::Inline(TensorData::from_f32(
            vec![16, 4],
            &values,
        ))),
    });
    b.op_into("MatMul", &[&x, &w], vec![], "y");
    std::fs::create_dir_all(dir).unwrap();
    let model = mobius::ir::Model {
        graph: b.finish(),
        opsets: std::collections::BTreeMap::from([(String::new(), opset)]),
        ir_version: 8,
        producer_name: "hostile".into(),
        producer_version: "0".into(),
    };
    mobius::onnx::export::save(
        &model,
        dir,
        &mut mobius::weights::eval::Evaluator::new(None),
        &indicatif::ProgressBar::hidden(),
        &ContribFunctions,
    )
    .unwrap();
    dir.join("model.onnx")
}

#[test]
fn optimize_refuses_blocked_dequantization_below_opset_21() {
    let tmp = tempfile::tempdir().unwrap();
    let model = matmul_model(&tmp.path().join("model"), 17);
    let out = tmp.path().join("out");
    let mut cmd = mobius();
    cmd.arg("optimize").arg(&model).arg(&out).args([
        "--ep",
        "onnx-standard",
        "--quant",
        "int4",
        "--quant-block-size",
        "16",
    ]);
    fails_with(cmd, 1, &["opset 17", "opset 21", "block_size"]);
    assert!(!out.exists());
    // The same model for an EP with MatMulNBits needs no blocked DequantizeLinear.
    let mut cmd = mobius();
    cmd.arg("optimize").arg(&model).arg(&out).args([
        "--ep",
        "cpu",
        "--quant",
        "int4",
        "--quant-block-size",
        "16",
    ]);
    cmd.assert().success();
    let optimized = mobius::onnx::import::load(&out.join("model.onnx"), &ContribFunctions).unwrap();
    let ops: Vec<&str> = optimized
        .graph
        .nodes
        .iter()
        .map(|n| n.op_type.as_str())
        .collect();
    assert_eq!(ops, ["MatMulNBits"]);
}
