//! `mobius build --features fp8-kv-cache [--kv-cache-scale-file FILE]`: the flags, the rewritten
//! GroupQueryAttention contract of a cuda f16 build, the plain build (and one warning) wherever
//! onnxruntime has no float8 cache, and, through the reference interpreter, the float8 cache
//! that a prefill and decode steps write (onnxruntime's schema check and a numpy reference of
//! the kernel: tests/ort/test_fp8_kv_cache.py).

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;
use mobius::interp::run_graph;
use mobius::ir::{Attr, DType, Model};
use mobius::onnx::import;
use mobius::ops::Tensor;
use mobius::passes::fp8_kv_cache::{fp8_kv_cache, KvCacheScales};
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;
use predicates::str::contains;

fn build_args(out: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    mobius()
        .args(["build", "--config"])
        .arg(fixture("llama"))
        .arg(out)
        .args(extra)
        .assert()
}

fn dtype_of(m: &Model, name: &str) -> DType {
    let v = m.graph.inputs.iter().chain(&m.graph.outputs);
    v.clone().find(|v| v.name == name).unwrap().dtype
}

fn scale_of(m: &Model, name: &str) -> f32 {
    let init = m
        .graph
        .initializers
        .iter()
        .find(|i| i.name == name)
        .unwrap();
    assert_eq!(
        (init.dtype, init.shape.as_slice()),
        (DType::F32, &[1usize][..])
    );
    match init.source.as_ref().unwrap() {
        mobius::ir::TensorSource::Inline(d) => f32::from_le_bytes(d.bytes[..4].try_into().unwrap()),
        s => panic!("{name}: {s:?}"),
    }
}

#[test]
fn cuda_f16_builds_store_the_cache_as_float8_with_the_file_scales() {
    let t = tempfile::tempdir().unwrap();
    let scales = t.path().join("scales.json");
    // As onnxruntime-genai's calibration writes them: per-tensor [[s], ...], qmax 448.
    std::fs::write(
        &scales,
        r#"{"scales": {"k_scales": [[0.5], [0.25]], "v_scales": [[2.0], [4.0]]},
            "qmax": 448.0, "layer_ids": [0, 1]}"#,
    )
    .unwrap();
    let out = t.path().join("fp8");
    let file = scales.to_str().unwrap();
    let flags = [
        "--ep",
        "cuda",
        "--dtype",
        "f16",
        "--features",
        "fp8-kv-cache",
    ];
    let assert = build_args(
        &out,
        &[&flags[..], &["--kv-cache-scale-file", file]].concat(),
    );
    let stderr = String::from_utf8_lossy(&assert.success().get_output().stderr).into_owned();
    assert!(!stderr.contains("WARN"), "{stderr}");
    let m = import::load(&out.join("model.onnx"), &ContribFunctions).unwrap();
    for i in 0..2 {
        for part in ["key", "value"] {
            assert_eq!(
                dtype_of(&m, &format!("past_key_values.{i}.{part}")),
                DType::F8E4M3FN
            );
            assert_eq!(
                dtype_of(&m, &format!("present.{i}.{part}")),
                DType::F8E4M3FN
            );
        }
    }
    assert_eq!(dtype_of(&m, "logits"), DType::F16);
    let gqa: Vec<_> = m
        .graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "GroupQueryAttention")
        .collect();
    assert_eq!(gqa.len(), 2);
    for node in gqa {
        let i = &node.inputs;
        assert_eq!(i.len(), 14);
        assert!(i[9..12].iter().all(String::is_empty), "{i:?}");
        assert_eq!(i[12], format!("{}.fp8_scale", i[3]));
        assert_eq!(
            i[13],
            format!("{}.fp8_scale", i[4]),
            "k and v scales differ here"
        );
        for side in ["k_quant_type", "v_quant_type"] {
            assert_eq!(node.attrs[side], Attr::String("PER_TENSOR".into()));
        }
        assert_eq!(node.attrs["kv_cache_bit_width"], Attr::Int(8));
    }
    assert_eq!(scale_of(&m, "past_key_values.1.key.fp8_scale"), 0.25);
    assert_eq!(scale_of(&m, "past_key_values.1.value.fp8_scale"), 4.0);
    assert_eq!(scale_of(&m, "past_key_values.0.key.fp8_scale"), 0.5);
    // genai_config.json is the plain build's: onnxruntime-genai takes the cache type from the
    // model's inputs.
    let plain = t.path().join("plain");
    build_args(&plain, &flags[..4]).success();
    let config = |d: &Path| std::fs::read_to_string(d.join("genai_config.json")).unwrap();
    assert_eq!(config(&out), config(&plain));
    // Without a file every scale is 1.0, one initializer for both (equal scales are shared).
    let ones = t.path().join("ones");
    build_args(&ones, &flags).success();
    let m = import::load(&ones.join("model.onnx"), &ContribFunctions).unwrap();
    assert_eq!(scale_of(&m, "past_key_values.0.key.fp8_scale"), 1.0);
    let node = m
        .graph
        .nodes
        .iter()
        .find(|n| n.op_type == "GroupQueryAttention")
        .unwrap();
    assert_eq!(node.inputs[12], node.inputs[13]);
    let scales = m
        .graph
        .initializers
        .iter()
        .filter(|i| i.name.ends_with(".fp8_scale"));
    assert_eq!(scales.count(), 2);
}

#[test]
fn other_eps_dtypes_and_static_caches_get_one_warning_and_the_plain_build() {
    let t = tempfile::tempdir().unwrap();
    let builds: [&[&str]; 4] = [
        &["--ep", "cpu", "--dtype", "f16"],
        &["--ep", "cuda", "--dtype", "f32"],
        &["--ep", "webgpu", "--dtype", "f16"],
        &["--ep", "cuda", "--dtype", "f16", "--max-seq-len", "16"],
    ];
    for (n, flags) in builds.iter().enumerate() {
        let static_cache = flags.contains(&"--max-seq-len");
        let feature = if static_cache {
            "static-cache"
        } else {
            "prune-lm-head"
        };
        let plain = t.path().join(format!("{n}-plain"));
        build_args(&plain, &[*flags, &["--features", feature]].concat()).success();
        let fp8 = t.path().join(format!("{n}-fp8"));
        let features = format!("{feature},fp8-kv-cache");
        let assert = build_args(&fp8, &[*flags, &["--features", &features]].concat()).success();
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert_eq!(
            stderr.matches("fp8-kv-cache ignored").count(),
            1,
            "{flags:?}: {stderr}"
        );
        let bytes = |d: &Path| std::fs::read(d.join("model.onnx")).unwrap();
        assert!(bytes(&plain) == bytes(&fp8), "{flags:?}: the model differs");
    }
}

#[test]
fn scale_files_need_the_feature_and_bad_ones_are_named() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let file = t.path().join("scales.json");
    std::fs::write(
        &file,
        r#"{"scales": {"k_scales": [1, 1], "v_scales": [1, 1]}}"#,
    )
    .unwrap();
    build_args(
        &out,
        &[
            "--ep",
            "cuda",
            "--dtype",
            "f16",
            "--kv-cache-scale-file",
            file.to_str().unwrap(),
        ],
    )
    .code(2)
    .stderr(contains("add --features fp8-kv-cache"));
    let bad = [
        (
            r#"{"scales": {"k_scales": [1, 1], "v_scales": [1, NaN]}}"#,
            "line 1",
        ),
        (
            r#"{"scales": {"k_scales": [1, 1], "v_scales": [1, 0]}}"#,
            "scales.v_scales[1]",
        ),
        (
            r#"{"scales": {"k_scales": [1, 1], "v_scales": [1, -1e-3]}}"#,
            "finite positive",
        ),
        (
            r#"{"scales": {"k_scales": [1], "v_scales": [1]}}"#,
            "layers {0, 1}",
        ),
        (
            r#"{"scales": {"k_scales": [1, 1], "v_scales": [1, 1]}, "layer_ids": [0, 5]}"#,
            "{0, 5}",
        ),
    ];
    for (text, needle) in bad {
        std::fs::write(&file, text).unwrap();
        build_args(
            &out,
            &[
                "--ep",
                "cuda",
                "--dtype",
                "f16",
                "--features",
                "fp8-kv-cache",
                "--kv-cache-scale-file",
                file.to_str().unwrap(),
            ],
        )
        .code(1)
        .stderr(contains("scales.json"))
        .stderr(contains(needle));
    }
    assert!(!out.exists());
}

#[test]
fn help_lists_the_float8_cache() {
    mobius()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(contains("fp8-kv-cache"))
        .stdout(contains("--kv-cache-scale-file"))
        .stdout(contains("FLOAT8E4M3FN"));
}

/// `x` (within ±448) rounded to float8 e4m3fn by search, apart from the interpreter's rounding:
/// the nearest of the 127 non-negative finite e4m3 values (exponent bias 7, 3 fraction bits,
/// subnormals below 2^-6), a tie going to the even code, and `x`'s sign.
fn nearest_e4m3(x: f32) -> f32 {
    let value = |code: u32| -> f64 {
        let (e, m) = (code >> 3, f64::from(code & 7));
        if e == 0 {
            m * 2f64.powi(-9)
        } else {
            (1.0 + m / 8.0) * 2f64.powi(e as i32 - 7)
        }
    };
    let a = f64::from(x.abs());
    let best = (0..0x7f)
        .min_by(|&p, &q| {
            let (dp, dq) = ((value(p) - a).abs(), (value(q) - a).abs());
            dp.total_cmp(&dq).then((p & 1).cmp(&(q & 1)))
        })
        .unwrap();
    (value(best) as f32).copysign(x)
}

#[test]
fn the_test_rounding_is_round_to_nearest_even() {
    for (x, want) in [
        (0.0, 0.0),
        (-0.0, -0.0),
        (448.0, 448.0),
        (-440.0, -448.0), // a tie between 416 and 448: the even code
        (17.0, 16.0),     // a tie between 16 and 18
        (19.0, 20.0),     // a tie between 18 and 20
        (2f32.powi(-9), 2f32.powi(-9)),
        (2f32.powi(-10), 0.0), // a tie between 0 and the smallest subnormal
        (0.3, 0.3125),
    ] {
        let got = nearest_e4m3(x);
        assert_eq!(got.to_bits(), f32::to_bits(want), "{x}: {got}");
    }
}

/// The float8 graph, run by the interpreter over a prefill and decode steps that feed its own
/// presents back: layer 0's keys and values do not depend on the cache, so every new row it
/// writes is exactly the plain f16 graph's row quantized (`e4m3(clamp(x / scale))`, rounded by
/// [`nearest_e4m3`], not by the interpreter's code), and the rows it was given come back
/// unchanged. (tests/ort/test_fp8_kv_cache.py checks whole caches against ml_dtypes' rounding
/// and bounds the logits against the plain build's.)
#[test]
fn the_interpreter_writes_the_plain_cache_quantized() {
    let cfg = fixture_config("llama");
    let store = fixture_store("llama");
    let plain = optimized(&cfg, "cuda", DType::F16);
    let mut fp8 = plain.clone();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scales.json");
    let (k_scale, v_scale) = (0.004f32, 0.002f32);
    std::fs::write(
        &file,
        format!(r#"{{"scales": {{"k_scales": [{k_scale}, 1], "v_scales": [{v_scale}, 1]}}}}"#),
    )
    .unwrap();
    let scales = KvCacheScales::read(&file).unwrap();
    assert_eq!(
        fp8_kv_cache(&mut fp8, Some(&scales)).unwrap().layers,
        [0, 1]
    );
    let (kv, d) = (cfg.num_key_value_heads, cfg.head_dim);
    let names: Vec<String> = (0..cfg.num_hidden_layers)
        .flat_map(|i| ["key", "value"].map(|p| format!("past_key_values.{i}.{p}")))
        .collect();
    let empty = |dtype| Tensor::float(dtype, vec![1, kv, 0, d], vec![]);
    let mut past: [HashMap<String, Tensor>; 2] = [
        names
            .iter()
            .map(|n| (n.clone(), empty(DType::F16)))
            .collect(),
        names
            .iter()
            .map(|n| (n.clone(), empty(DType::F8E4M3FN)))
            .collect(),
    ];
    let mut len = 0;
    let mut saturated = 0;
    let mut nonzero = 0;
    for ids in [&[3i64, 17, 5, 11, 2][..], &[7], &[13]] {
        let s = ids.len();
        let mut got = Vec::new();
        for (graph, past) in [&plain, &fp8].iter().zip(&past) {
            let mut feed = past.clone();
            feed.insert(
                "input_ids".into(),
                Tensor::int(DType::I64, vec![1, s], ids.to_vec()),
            );
            let mask = Tensor::int(DType::I64, vec![1, len + s], vec![1; len + s]);
            feed.insert("attention_mask".into(), mask);
            got.push(run_graph(graph, &feed, &mut Evaluator::new(Some(&store))).unwrap());
        }
        for (part, scale) in [("key", k_scale), ("value", v_scale)] {
            let name = format!("present.0.{part}");
            let (want, have) = (
                got[0][&name].floats().unwrap(),
                got[1][&name].floats().unwrap(),
            );
            assert_eq!(got[1][&name].dtype, DType::F8E4M3FN);
            let given = past[1][&format!("past_key_values.0.{part}")]
                .floats()
                .unwrap();
            for h in 0..kv {
                for t in 0..len + s {
                    for j in 0..d {
                        let at = (h * (len + s) + t) * d + j;
                        let expected = if t < len {
                            given[(h * len + t) * d + j]
                        } else {
                            let x = (want[at] * (1.0 / scale)).clamp(-448.0, 448.0);
                            saturated += (x.abs() == 448.0) as usize;
                            nonzero += (x != 0.0) as usize;
                            nearest_e4m3(x)
                        };
                        assert_eq!(
                            have[at].to_bits(),
                            expected.to_bits(),
                            "{name}[{h},{t},{j}]"
                        );
                    }
                }
            }
        }
        let logits = got[1]["logits"].floats().unwrap();
        assert!(logits.iter().all(|x| x.is_finite()));
        for (i, p) in [&got[0], &got[1]].iter().enumerate() {
            past[i] = names
                .iter()
                .map(|n| {
                    (
                        n.clone(),
                        p[&n.replace("past_key_values", "present")].clone(),
                    )
                })
                .collect();
        }
        len += s;
    }
    // The scales put the values across the float8 range, some beyond it.
    assert!(
        saturated > 0 && nonzero > 100,
        "{saturated} saturated, {nonzero} nonzero"
    );
}
