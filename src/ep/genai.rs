//! How EP capabilities reach onnxruntime-genai's `genai_config.json`.

use serde_json::{json, Map, Value};

use super::capabilities::EpCapabilities;

/// The longest `search.max_length` a capped shared KV buffer gets.
const CAPPED_MAX_LENGTH: usize = 4096;

/// The `session_options.provider_options` array for `genai_config.json`.
///
/// `[]` for `default`, `cpu` and `onnx-standard`; otherwise one object keyed by the genai
/// provider name (`cuda`, `dml`, `webgpu`, `NvTensorRtRtx` for `trt-rtx`, `QNN` for `qnn`,
/// `OpenVINO` for `openvino`; other names unchanged) holding the EP's provider options plus
/// its graph-capture keys: `enableGraphCapture` and `validationMode` for webgpu,
/// `enable_cuda_graph` for cuda and trt-rtx.
pub fn genai_provider_options(caps: &EpCapabilities) -> Value {
    let provider = match caps.name.as_str() {
        "default" | "cpu" | "onnx-standard" => return json!([]),
        "trt-rtx" => "NvTensorRtRtx",
        "qnn" => "QNN",
        "openvino" => "OpenVINO",
        other => other,
    };
    let mut options: Map<String, Value> = caps
        .provider_options
        .iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect();
    let flag = |on: bool, yes: &str, no: &str| Value::from(if on { yes } else { no });
    let capture = caps.enable_graph_capture;
    match caps.name.as_str() {
        "webgpu" => {
            options.insert("enableGraphCapture".into(), flag(capture, "1", "0"));
            options.insert("validationMode".into(), flag(capture, "disabled", "basic"));
        }
        "cuda" | "trt-rtx" => {
            options.insert("enable_cuda_graph".into(), flag(capture, "1", "0"));
        }
        _ => {}
    }
    json!([{ provider: options }])
}

/// The `search.max_length` for `genai_config.json`.
///
/// `uses_gqa` says whether the decoder holds `com.microsoft::GroupQueryAttention` (which is
/// what makes `past_present_share_buffer` true). With a shared buffer on an EP that caps it
/// (`cap_kv_buffer_max_length`, webgpu) this is `min(context_length, 4096)`, otherwise
/// `context_length`.
pub fn genai_search_max_length(
    caps: &EpCapabilities,
    context_length: usize,
    uses_gqa: bool,
) -> usize {
    if uses_gqa && caps.cap_kv_buffer_max_length {
        context_length.min(CAPPED_MAX_LENGTH)
    } else {
        context_length
    }
}
