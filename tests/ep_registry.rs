//! The EP registry: built-in values, validation rules, registration, EP files,
//! genai_config.json provider options and the `eps` listings.
//!
//! Tests run in parallel in one process and share the registry: those that register use
//! names no other test uses, and built-ins are only ever re-registered with their own values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use mobius::ep::{
    builtin_eps, ep_json, ep_registry, ep_table, genai_provider_options, genai_search_max_length,
    get_ep, load_ep_file, register_ep, CostParams, EpCapabilities,
};
use mobius::ir::DType::{self, BF16, F16, F32, I64};
use mobius::Error;
use serde_json::json;

const BUILTIN_NAMES: [&str; 10] = [
    "default",
    "openvino",
    "cpu",
    "cuda",
    "dml",
    "webgpu",
    "mlx",
    "trt-rtx",
    "qnn",
    "onnx-standard",
];

fn dtypes(list: &[DType]) -> BTreeSet<DType> {
    list.iter().copied().collect()
}

fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ep_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/eps/{name}"))
}

/// The built-in table: the defaults with each built-in's non-default fields (cost aside).
fn spec_builtin(name: &str) -> EpCapabilities {
    let base = EpCapabilities::new(name);
    match name {
        "default" => base,
        "openvino" => EpCapabilities {
            dtypes: dtypes(&[F32, F16]),
            supports_skip_layer_norm: false,
            provider_options: options(&[("device_type", "NPU")]),
            supports_contrib_ops: false,
            ..base
        },
        "cpu" => EpCapabilities {
            dtypes: dtypes(&[F32, F16]),
            gqa_dtypes: dtypes(&[F32]),
            qkv_pack_dtypes: dtypes(&[F32]),
            default_int4_accuracy_level: 4,
            supports_past_present_share_buffer: true,
            supports_linear_attention: true,
            ..base
        },
        "cuda" => EpCapabilities {
            default_dtype: F16,
            gqa_dtypes: dtypes(&[F16, BF16]),
            qkv_pack_dtypes: dtypes(&[F32, F16, BF16]),
            provider_options: options(&[("enable_skip_layer_norm_strict_mode", "1")]),
            supports_past_present_share_buffer: true,
            supports_fp8_kv_cache: true,
            supports_linear_attention: true,
            ..base
        },
        "dml" => EpCapabilities {
            dtypes: dtypes(&[F32, F16]),
            default_dtype: F16,
            gqa_dtypes: dtypes(&[F16]),
            supports_fused_rope: false,
            supports_past_present_share_buffer: true,
            ..base
        },
        "webgpu" => EpCapabilities {
            dtypes: dtypes(&[F32, F16]),
            default_dtype: F16,
            gqa_dtypes: dtypes(&[F32, F16]),
            qkv_pack_dtypes: dtypes(&[F32, F16]),
            default_int4_accuracy_level: 4,
            enable_graph_capture: true,
            supports_past_present_share_buffer: true,
            cap_kv_buffer_max_length: true,
            ..base
        },
        "mlx" => EpCapabilities {
            default_dtype: F16,
            gqa_dtypes: dtypes(&[F32, F16, BF16]),
            supports_past_present_share_buffer: true,
            ..base
        },
        "trt-rtx" => EpCapabilities {
            default_dtype: F16,
            gqa_dtypes: dtypes(&[F16, BF16]),
            qkv_pack_dtypes: dtypes(&[F32, F16, BF16]),
            supports_skip_layer_norm: false,
            enable_graph_capture: true,
            supports_past_present_share_buffer: true,
            ..base
        },
        "qnn" => EpCapabilities {
            dtypes: dtypes(&[F32, F16]),
            supports_fused_rope: false,
            supports_skip_layer_norm: false,
            provider_options: options(&[
                ("backend_path", "QnnHtp.dll"),
                ("htp_performance_mode", "burst"),
                ("htp_graph_finalization_optimization_mode", "3"),
                ("enable_htp_shared_memory_allocator", "1"),
            ]),
            supports_rank4_rmsnorm: false,
            supports_attention: false,
            supports_matmul_nbits: false,
            supports_rotary_embedding: false,
            supports_tensor_scatter: false,
            supports_range: false,
            supports_contrib_ops: false,
            ..base
        },
        "onnx-standard" => EpCapabilities {
            supports_fused_rope: false,
            supports_skip_layer_norm: false,
            supports_contrib_ops: false,
            ..base
        },
        other => panic!("not a built-in: {other}"),
    }
}

/// The `InvalidEp` message of `caps.validate()`, which must fail.
fn invalid_message(caps: &EpCapabilities) -> String {
    match caps.validate() {
        Err(Error::InvalidEp { name, message }) => {
            assert_eq!(name, caps.name);
            message
        }
        other => panic!("expected InvalidEp for {}, got {other:?}", caps.name),
    }
}

/// `(line, column, message)` of the `EpFile` error loading `tests/data/eps/<file>` gives.
fn file_error(file: &str) -> (usize, usize, String) {
    match load_ep_file(&ep_file(file)) {
        Err(Error::EpFile {
            path,
            line,
            column,
            message,
        }) => {
            assert_eq!(path, ep_file(file));
            (line, column, message)
        }
        other => panic!("expected EpFile error for {file}, got {other:?}"),
    }
}

#[test]
fn builtins_come_first_in_spec_order() {
    assert_eq!(ep_registry()[..10], BUILTIN_NAMES.map(String::from));
    let names: Vec<String> = builtin_eps().into_iter().map(|c| c.name).collect();
    assert_eq!(names, BUILTIN_NAMES);
}

#[test]
fn builtin_values_match_the_spec_table() {
    for name in BUILTIN_NAMES {
        let actual = get_ep(name).unwrap();
        let expected = EpCapabilities {
            cost: actual.cost,
            ..spec_builtin(name)
        };
        assert_eq!(actual, expected, "built-in `{name}`");
        actual.validate().unwrap();
    }
}

#[test]
fn new_gives_spec_defaults() {
    let c = EpCapabilities::new("x");
    assert!(c.gqa_dtypes.is_empty() && c.qkv_pack_dtypes.is_empty());
    assert!(c.supports_fused_rope && c.supports_skip_layer_norm && c.supports_fused_moe);
    assert!(c.supports_rank4_rmsnorm && c.supports_attention && c.supports_matmul_nbits);
    assert!(c.supports_rotary_embedding && c.supports_tensor_scatter && c.supports_range);
    assert!(!c.supports_fp8_kv_cache && !c.enable_graph_capture);
    assert!(!c.supports_linear_attention);
    assert!(!c.supports_past_present_share_buffer && !c.cap_kv_buffer_max_length);
    assert_eq!(c.default_int4_accuracy_level, 0);
    assert!(c.provider_options.is_empty());
    assert_eq!(c.cost, CostParams::default());
    c.validate().unwrap();
}

#[test]
fn cost_params_are_valid_and_device_class_specific() {
    for c in builtin_eps() {
        let p = c.cost;
        assert!(
            p.launch_overhead_us > 0.0 && p.memory_bandwidth_gbps > 0.0,
            "{}",
            c.name
        );
        assert!(p.peak_tflops_f32 > 0.0 && p.peak_tflops_f16 > 0.0 && p.prefill_tokens > 0);
    }
    let bw = |n: &str| get_ep(n).unwrap().cost.memory_bandwidth_gbps;
    assert!(bw("cpu") < bw("webgpu") && bw("webgpu") < bw("cuda"));
    assert!(bw("dml") < bw("trt-rtx"));
    assert_eq!(get_ep("default").unwrap().cost, CostParams::default());
}

#[test]
fn fused_rope_off_with_qkv_packing_is_rejected() {
    let caps = EpCapabilities {
        supports_fused_rope: false,
        qkv_pack_dtypes: dtypes(&[F16]),
        ..EpCapabilities::new("rule-one")
    };
    let msg = invalid_message(&caps);
    assert!(
        msg.contains("supports_fused_rope") && msg.contains("qkv_pack_dtypes"),
        "{msg}"
    );
}

#[test]
fn capped_kv_buffer_needs_a_shared_buffer() {
    let caps = EpCapabilities {
        cap_kv_buffer_max_length: true,
        ..EpCapabilities::new("rule-two")
    };
    let msg = invalid_message(&caps);
    assert!(msg.contains("cap_kv_buffer_max_length"), "{msg}");
    assert!(msg.contains("supports_past_present_share_buffer"), "{msg}");
}

#[test]
fn names_must_be_lowercase_identifiers() {
    for bad in ["", "CUDA", "my ep", "ep/1", "é"] {
        let msg = invalid_message(&EpCapabilities::new(bad));
        assert!(msg.contains("`name`"), "{bad:?}: {msg}");
    }
    EpCapabilities::new("a-b_c.9").validate().unwrap();
}

#[test]
fn provider_options_reject_graph_capture_keys() {
    for key in ["enable_cuda_graph", "enableGraphCapture", "validationMode"] {
        let caps = EpCapabilities {
            provider_options: options(&[(key, "1")]),
            ..EpCapabilities::new("graph-keys")
        };
        let msg = invalid_message(&caps);
        assert!(
            msg.contains("provider_options") && msg.contains(key),
            "{msg}"
        );
        assert!(msg.contains("enable_graph_capture"), "{msg}");
    }
}

#[test]
fn dtype_sets_hold_only_float_model_dtypes() {
    let gqa = EpCapabilities {
        gqa_dtypes: dtypes(&[F16, I64]),
        ..EpCapabilities::new("int-gqa")
    };
    let msg = invalid_message(&gqa);
    assert!(msg.contains("gqa_dtypes") && msg.contains("i64"), "{msg}");
    let qkv = EpCapabilities {
        qkv_pack_dtypes: dtypes(&[DType::I8]),
        ..EpCapabilities::new("int-qkv")
    };
    assert!(invalid_message(&qkv).contains("qkv_pack_dtypes"));
}

#[test]
fn numeric_fields_are_range_checked() {
    let level = EpCapabilities {
        default_int4_accuracy_level: 5,
        ..EpCapabilities::new("level")
    };
    assert!(invalid_message(&level).contains("default_int4_accuracy_level"));
    for (cost, field) in [
        (
            CostParams {
                peak_tflops_f16: f64::NAN,
                ..CostParams::default()
            },
            "cost.peak_tflops_f16",
        ),
        (
            CostParams {
                memory_bandwidth_gbps: 0.0,
                ..CostParams::default()
            },
            "cost.memory_bandwidth_gbps",
        ),
        (
            CostParams {
                prefill_tokens: 0,
                ..CostParams::default()
            },
            "cost.prefill_tokens",
        ),
    ] {
        let caps = EpCapabilities {
            cost,
            ..EpCapabilities::new("cost")
        };
        let msg = invalid_message(&caps);
        assert!(msg.contains(field), "{msg}");
    }
}

#[test]
fn registering_appends_and_duplicates_need_overwrite() {
    let caps = EpCapabilities {
        gqa_dtypes: dtypes(&[F16]),
        ..EpCapabilities::new("test-register-dup")
    };
    register_ep(caps.clone(), false).unwrap();
    assert_eq!(get_ep("test-register-dup").unwrap(), caps);
    assert!(ep_registry().contains(&caps.name));

    let changed = EpCapabilities {
        supports_attention: false,
        ..caps.clone()
    };
    match register_ep(changed.clone(), false) {
        Err(Error::InvalidEp { name, message }) => {
            assert_eq!(name, "test-register-dup");
            assert!(message.contains("already registered"), "{message}");
            assert!(message.contains("overwrite"), "{message}");
        }
        other => panic!("expected InvalidEp, got {other:?}"),
    }
    assert_eq!(get_ep("test-register-dup").unwrap(), caps);

    register_ep(changed.clone(), true).unwrap();
    assert_eq!(get_ep("test-register-dup").unwrap(), changed);
    let names = ep_registry();
    assert_eq!(
        names.iter().filter(|n| *n == "test-register-dup").count(),
        1
    );
}

#[test]
fn builtins_are_replaced_only_with_overwrite() {
    let cuda = get_ep("cuda").unwrap();
    match register_ep(cuda.clone(), false) {
        Err(Error::InvalidEp { name, message }) => {
            assert_eq!(name, "cuda");
            assert!(message.contains("already registered"), "{message}");
        }
        other => panic!("expected InvalidEp, got {other:?}"),
    }
    register_ep(cuda.clone(), true).unwrap();
    assert_eq!(get_ep("cuda").unwrap(), cuda);
    assert_eq!(ep_registry()[3], "cuda", "overwriting keeps the position");
}

#[test]
fn invalid_capabilities_are_not_registered() {
    let caps = EpCapabilities {
        cap_kv_buffer_max_length: true,
        ..EpCapabilities::new("test-register-invalid")
    };
    assert!(matches!(
        register_ep(caps, true),
        Err(Error::InvalidEp { .. })
    ));
    assert!(!ep_registry().contains(&"test-register-invalid".to_string()));
}

#[test]
fn unknown_ep_lists_registered_names() {
    let err = get_ep("tpu").unwrap_err();
    match &err {
        Error::UnknownEp { name, registered } => {
            assert_eq!(name, "tpu");
            for b in BUILTIN_NAMES {
                assert!(registered.iter().any(|r| r == b), "{b} missing");
            }
        }
        other => panic!("expected UnknownEp, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("`tpu`") && msg.contains("cuda") && msg.contains("webgpu"),
        "{msg}"
    );
}

#[test]
fn ep_file_from_scratch() {
    let caps = load_ep_file(&ep_file("valid.toml")).unwrap();
    let expected = EpCapabilities {
        dtypes: dtypes(&[F16, BF16]),
        default_dtype: BF16,
        gqa_dtypes: dtypes(&[F16, BF16]),
        qkv_pack_dtypes: dtypes(&[F16]),
        supports_skip_layer_norm: false,
        supports_fp8_kv_cache: true,
        default_int4_accuracy_level: 2,
        supports_past_present_share_buffer: true,
        provider_options: options(&[("device_id", "0")]),
        cost: CostParams {
            memory_bandwidth_gbps: 800.0,
            peak_tflops_f16: 90.5,
            ..get_ep("default").unwrap().cost
        },
        ..EpCapabilities::new("test-accel")
    };
    assert_eq!(caps, expected);
    register_ep(caps, false).unwrap();
    assert!(ep_registry().contains(&"test-accel".to_string()));
}

#[test]
fn ep_file_with_base_starts_from_that_ep() {
    let caps = load_ep_file(&ep_file("based.toml")).unwrap();
    let cuda = get_ep("cuda").unwrap();
    let expected = EpCapabilities {
        name: "test-cuda-variant".into(),
        enable_graph_capture: true,
        gqa_dtypes: dtypes(&[F16]),
        cost: CostParams {
            prefill_tokens: 2048,
            ..cuda.cost
        },
        ..cuda
    };
    assert_eq!(caps, expected);
}

#[test]
fn example_ep_file_loads() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/custom_ep.toml");
    let caps = load_ep_file(&path).unwrap();
    assert_eq!(caps.name, "my-gpu");
    assert_eq!(caps.gqa_dtypes, dtypes(&[F16, BF16]));
    assert_eq!(caps.cost.memory_bandwidth_gbps, 900.0);
}

#[test]
fn ep_file_unknown_key_gives_position_and_name() {
    let (line, column, msg) = file_error("unknown_key.toml");
    assert_eq!((line, column), (3, 1), "{msg}");
    assert!(msg.contains("supports_fused_ropes"), "{msg}");
    let err = load_ep_file(&ep_file("unknown_key.toml")).unwrap_err();
    assert!(err.to_string().contains("unknown_key.toml:3:1:"), "{err}");
}

#[test]
fn ep_file_bad_dtype_names_the_field() {
    let (line, column, msg) = file_error("bad_dtype.toml");
    assert_eq!(line, 2, "{msg}");
    assert!(column > 1, "{msg}");
    assert!(msg.contains("gqa_dtypes") && msg.contains("int8"), "{msg}");
}

#[test]
fn ep_file_default_dtype_outside_its_dtypes_points_at_the_key() {
    let (line, column, msg) = file_error("bad_default_dtype.toml");
    assert_eq!((line, column), (3, 1), "{msg}");
    assert!(
        msg.contains("`default_dtype` bf16 is not one of `dtypes` [f32, f16]"),
        "{msg}"
    );
}

#[test]
fn ep_file_wrong_type_names_the_field() {
    let (line, column, msg) = file_error("wrong_type.toml");
    assert_eq!((line, column), (2, 22), "{msg}");
    assert!(msg.contains("supports_attention"), "{msg}");
}

#[test]
fn ep_file_invalid_combination_points_at_the_key() {
    let (line, column, msg) = file_error("invalid_combination.toml");
    assert_eq!((line, column), (2, 1), "{msg}");
    assert!(msg.contains("test-bad-combination"), "{msg}");
    assert!(
        msg.contains("supports_fused_rope") && msg.contains("qkv_pack_dtypes"),
        "{msg}"
    );
}

#[test]
fn ep_file_bad_cost_points_into_the_cost_table() {
    let (line, column, msg) = file_error("bad_cost.toml");
    assert_eq!((line, column), (5, 1), "{msg}");
    assert!(msg.contains("cost.peak_tflops_f32"), "{msg}");
}

#[test]
fn ep_file_missing_name() {
    let (_, _, msg) = file_error("missing_name.toml");
    assert!(msg.contains("name"), "{msg}");
}

#[test]
fn ep_file_malformed_toml() {
    let (line, column, msg) = file_error("malformed.toml");
    assert_eq!(line, 2, "{msg}");
    assert!(column > 1, "{msg}");
}

#[test]
fn ep_file_unknown_base() {
    let (line, column, msg) = file_error("unknown_base.toml");
    assert_eq!((line, column), (2, 8), "{msg}");
    assert!(
        msg.contains("base") && msg.contains("tpu") && msg.contains("cuda"),
        "{msg}"
    );
}

#[test]
fn ep_file_missing_file_is_an_io_error() {
    let err = load_ep_file(&ep_file("does_not_exist.toml")).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
}

#[test]
fn genai_provider_options_per_ep() {
    let opts = |n: &str| genai_provider_options(&get_ep(n).unwrap());
    assert_eq!(
        opts("cuda"),
        json!([{"cuda": {"enable_skip_layer_norm_strict_mode": "1", "enable_cuda_graph": "0"}}])
    );
    assert_eq!(
        opts("webgpu"),
        json!([{"webgpu": {"enableGraphCapture": "1", "validationMode": "disabled"}}])
    );
    assert_eq!(
        opts("trt-rtx"),
        json!([{"NvTensorRtRtx": {"enable_cuda_graph": "1"}}])
    );
    for n in ["cpu", "default", "onnx-standard"] {
        assert_eq!(opts(n), json!([]), "{n}");
    }
    assert_eq!(
        opts("openvino"),
        json!([{"OpenVINO": {"device_type": "NPU"}}])
    );
    assert_eq!(opts("dml"), json!([{"dml": {}}]));
    assert_eq!(opts("qnn")[0]["QNN"]["backend_path"], "QnnHtp.dll");
    assert_eq!(opts("mlx"), json!([{"mlx": {}}]));
}

#[test]
fn genai_graph_capture_off_on_webgpu() {
    let caps = EpCapabilities {
        enable_graph_capture: false,
        ..get_ep("webgpu").unwrap()
    };
    assert_eq!(
        genai_provider_options(&caps),
        json!([{"webgpu": {"enableGraphCapture": "0", "validationMode": "basic"}}])
    );
}

#[test]
fn genai_max_length_is_capped_only_for_shared_capped_buffers() {
    let webgpu = get_ep("webgpu").unwrap();
    let cuda = get_ep("cuda").unwrap();
    assert_eq!(genai_search_max_length(&webgpu, 131072, true), 4096);
    assert_eq!(genai_search_max_length(&webgpu, 2048, true), 2048);
    assert_eq!(genai_search_max_length(&webgpu, 131072, false), 131072);
    assert_eq!(genai_search_max_length(&cuda, 131072, true), 131072);
}

#[test]
fn table_lists_every_builtin() {
    let eps = builtin_eps();
    let table = ep_table(&eps);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 11, "{table}");
    assert!(lines[0].starts_with("name") && lines[0].contains("graph capture"));
    for (line, name) in lines[1..].iter().zip(BUILTIN_NAMES) {
        assert!(line.starts_with(name), "{line}");
    }
    let cuda = lines[4];
    assert!(
        cuda.contains("f16,bf16") && cuda.contains("f32,f16,bf16"),
        "{cuda}"
    );
    let col = lines[0].find("qkv pack dtypes").unwrap();
    assert!(lines.iter().skip(1).all(|l| l.len() > col), "{table}");
    assert!(lines[3].ends_with("MatMulNBits (level 4)"), "cpu: {table}");
    assert!(lines[4].ends_with("MatMulNBits (level 0)"), "cuda: {table}");
    assert!(lines[9].ends_with("DequantizeLinear"), "qnn: {table}");
    assert!(
        lines[10].ends_with("DequantizeLinear"),
        "onnx-standard: {table}"
    );
}

#[test]
fn json_has_every_field_of_every_builtin() {
    let value = ep_json(&builtin_eps());
    let list = value.as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, BUILTIN_NAMES);
    let webgpu = &list[5];
    assert_eq!(webgpu.as_object().unwrap().len(), 23, "{webgpu}");
    assert_eq!(webgpu["dtypes"], json!(["f32", "f16"]));
    assert_eq!(webgpu["default_dtype"], json!("f16"));
    assert_eq!(webgpu["gqa_dtypes"], json!(["f32", "f16"]));
    for key in [
        "max_buffer_size",
        "requires_graph_capture_rewrite",
        "supports_packed_multi_head_attention",
    ] {
        assert!(webgpu.get(key).is_none(), "{key} has no effect: {webgpu}");
    }
    assert_eq!(
        list[3]["provider_options"],
        json!({"enable_skip_layer_norm_strict_mode": "1"})
    );
    let cost = webgpu["cost"].as_object().unwrap();
    for key in [
        "launch_overhead_us",
        "memory_bandwidth_gbps",
        "peak_tflops_f32",
        "peak_tflops_f16",
        "prefill_tokens",
    ] {
        assert!(cost.contains_key(key), "{key}");
    }
}
