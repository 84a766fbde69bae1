//! `quantization_config` of a pre-quantized checkpoint: which packed or float8 weights the
//! checkpoint holds instead of float ones, checked against what mobius can represent.
//!
//! Supported: GPTQ (4 bits, `desc_act` false, `checkpoint_format` "gptq" or "gptq_v2"), AWQ
//! (version "gemm", 4 bits, `zero_point` true) and block-scaled FP8 (`weight_block_size`,
//! e4m3 values). Anything else is refused naming config.json, the field and the value.

use std::path::Path;

use serde_json::{Map, Value};

use super::fields::Fields;
use crate::ir::PackedFormat;
use crate::{Error, Result};

/// What a supported `quantization_config` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointQuant {
    /// How the quantized weights are stored.
    pub method: QuantMethod,
    /// Modules left in float (`modules_to_not_convert`; transformers matches them as
    /// substrings of module names).
    pub modules_to_not_convert: Vec<String>,
}

/// How a pre-quantized checkpoint stores its quantized weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantMethod {
    /// 4-bit values packed into int32 words (GPTQ, AWQ), with a scale and a zero point per
    /// group of rows along K and column.
    Packed4 {
        /// The packing.
        format: PackedFormat,
        /// Rows of K per group; `None` (`group_size` -1): one group spans K.
        group_size: Option<usize>,
    },
    /// Float8 e4m3 weights `X.weight` with f32 scales `X.weight_scale_inv` per block
    /// `[bn, bk]` of `[N, K]`.
    Fp8 {
        /// `weight_block_size`: block extent along N and along K.
        block: [usize; 2],
    },
}

/// What mobius reads, for the errors.
const SUPPORTED: &str = "mobius reads quant_method \"gptq\" (bits 4, desc_act false, \
     checkpoint_format \"gptq\" or \"gptq_v2\"), \"awq\" (version \"gemm\", bits 4, zero_point \
     true) and \"fp8\" (fmt \"e4m3\", weight_block_size [bn, bk])";

/// The largest group or block size accepted.
const MAX_GROUP: i64 = 1 << 20;

impl CheckpointQuant {
    /// Reads `quantization_config` of the config.json at `path`; `None` when it has none.
    pub fn load(path: &Path) -> Result<Option<CheckpointQuant>> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let config: Value = serde_json::from_slice(&bytes).map_err(|e| Error::json(path, &e))?;
        CheckpointQuant::parse(config.get("quantization_config"), path)
    }

    /// Checks a `quantization_config` value (`None` or `null`: not quantized); `path` names
    /// config.json in errors.
    pub fn parse(value: Option<&Value>, path: &Path) -> Result<Option<CheckpointQuant>> {
        let f = Fields { path };
        let q = match value {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(q)) => q,
            Some(other) => {
                return Err(f.err(
                    "quantization_config",
                    &format!("expected an object, found {other}"),
                ))
            }
        };
        let method = match q.get("quant_method") {
            Some(Value::String(m)) => m.to_ascii_lowercase(),
            None => {
                return Err(f.err(
                    "quantization_config.quant_method",
                    &format!("missing; {SUPPORTED}"),
                ))
            }
            Some(other) => {
                return Err(f.err(
                    "quantization_config.quant_method",
                    &format!("expected a string, found {other}; {SUPPORTED}"),
                ))
            }
        };
        let c = Check { f, q };
        let method = match method.as_str() {
            "gptq" => c.gptq()?,
            "awq" => c.awq()?,
            "fp8" => c.fp8()?,
            other => {
                return Err(c.f.err(
                    "quantization_config.quant_method",
                    &format!("`{other}` is not supported; {SUPPORTED}"),
                ))
            }
        };
        Ok(Some(CheckpointQuant {
            method,
            modules_to_not_convert: c.strings("modules_to_not_convert")?,
        }))
    }

    /// Whether the module `prefix` (`model.layers.0.mlp.up_proj`) is listed in
    /// `modules_to_not_convert`.
    pub fn keeps_float(&self, prefix: &str) -> bool {
        self.modules_to_not_convert
            .iter()
            .any(|m| prefix.contains(m.as_str()))
    }
}

/// The fields of one `quantization_config` object.
struct Check<'a> {
    f: Fields<'a>,
    q: &'a Map<String, Value>,
}

impl Check<'_> {
    fn err(&self, field: &str, message: &str) -> Error {
        self.f.err(&format!("quantization_config.{field}"), message)
    }

    /// `field` must be `want` (or absent, when `default` equals `want`).
    fn require(&self, field: &str, want: &Value, default: Option<&Value>) -> Result<()> {
        match self.q.get(field).or(default) {
            Some(v) if v == want => Ok(()),
            None => Err(self.err(field, &format!("missing (expected {want}); {SUPPORTED}"))),
            Some(v) => Err(self.err(
                field,
                &format!("{v} is not supported (expected {want}); {SUPPORTED}"),
            )),
        }
    }

    fn bits(&self) -> Result<()> {
        match self.q.get("bits").or(self.q.get("w_bit")) {
            Some(v) if v.as_i64() == Some(4) => Ok(()),
            None => Err(self.err("bits", "missing (expected 4)")),
            Some(v) => Err(self.err(
                "bits",
                &format!("{v} is not supported (mobius reads 4-bit GPTQ and AWQ weights)"),
            )),
        }
    }

    /// `group_size` (AutoAWQ also spells it `q_group_size`): -1 (one group spans K) or a power
    /// of two ≥ 16.
    fn group_size(&self) -> Result<Option<usize>> {
        let field = if self.q.contains_key("group_size") {
            "group_size"
        } else {
            "q_group_size"
        };
        let value = self.q.get(field).ok_or_else(|| {
            self.err("group_size", "missing (expected -1 or a power of two ≥ 16)")
        })?;
        match value.as_i64() {
            Some(-1) => Ok(None),
            Some(g) if (16..=MAX_GROUP).contains(&g) && g.count_ones() == 1 => Ok(Some(g as usize)),
            _ => Err(self.err(
                field,
                &format!("{value} is not supported (expected -1 or a power of two from 16 to {MAX_GROUP})"),
            )),
        }
    }

    fn gptq(&self) -> Result<QuantMethod> {
        self.bits()?;
        let group_size = self.group_size()?;
        match self.q.get("desc_act") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(v) => {
                return Err(self.err(
                    "desc_act",
                    &format!(
                        "{v} is not supported: mobius reads GPTQ checkpoints quantized with \
                         desc_act false (rows of K in order)"
                    ),
                ))
            }
        }
        match self.q.get("sym") {
            None | Some(Value::Null) | Some(Value::Bool(_)) => {}
            Some(v) => return Err(self.err("sym", &format!("expected true or false, found {v}"))),
        }
        let format = match self.q.get("checkpoint_format") {
            None | Some(Value::Null) => PackedFormat::GptqV1,
            Some(Value::String(s)) if s == "gptq" => PackedFormat::GptqV1,
            Some(Value::String(s)) if s == "gptq_v2" => PackedFormat::GptqV2,
            Some(v) => {
                return Err(self.err(
                    "checkpoint_format",
                    &format!("{v} is not supported (expected \"gptq\" or \"gptq_v2\")"),
                ))
            }
        };
        Ok(QuantMethod::Packed4 { format, group_size })
    }

    fn awq(&self) -> Result<QuantMethod> {
        self.bits()?;
        let group_size = self.group_size()?;
        match self.q.get("version") {
            None | Some(Value::Null) => {}
            Some(Value::String(v)) if v.eq_ignore_ascii_case("gemm") => {}
            Some(v) => {
                return Err(self.err(
                    "version",
                    &format!(
                        "{v} is not supported (expected \"gemm\"; other AWQ versions pack \
                         their weights differently)"
                    ),
                ))
            }
        }
        self.require("zero_point", &Value::Bool(true), Some(&Value::Bool(true)))?;
        match self.q.get("backend") {
            None | Some(Value::Null) => {}
            Some(Value::String(b)) if b == "autoawq" => {}
            Some(v) => {
                return Err(self.err(
                    "backend",
                    &format!(
                        "{v} is not supported (expected \"autoawq\", whose packing mobius reads)"
                    ),
                ))
            }
        }
        Ok(QuantMethod::Packed4 {
            format: PackedFormat::AwqGemm,
            group_size,
        })
    }

    fn fp8(&self) -> Result<QuantMethod> {
        let e4m3 = Value::String("e4m3".into());
        self.require("fmt", &e4m3, Some(&e4m3))?;
        match self.q.get("activation_scheme") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "dynamic" => {}
            Some(v) => {
                return Err(self.err(
                    "activation_scheme",
                    &format!(
                        "{v} is not supported (expected \"dynamic\": mobius dequantizes the \
                         weights and has no static activation scales)"
                    ),
                ))
            }
        }
        let field = "weight_block_size";
        let expected = "expected [bn, bk], two integers from 1 to 1048576 (per-tensor FP8 \
                        checkpoints are not supported)";
        let block = match self.q.get(field) {
            Some(Value::Array(b)) if b.len() == 2 => {
                let dims: Vec<Option<usize>> = b
                    .iter()
                    .map(|v| {
                        v.as_i64()
                            .filter(|d| (1..=MAX_GROUP).contains(d))
                            .map(|d| d as usize)
                    })
                    .collect();
                match dims[..] {
                    [Some(bn), Some(bk)] => [bn, bk],
                    _ => return Err(self.err(field, &format!("{} ({expected})", self.q[field]))),
                }
            }
            None | Some(Value::Null) => {
                return Err(self.err(field, &format!("missing ({expected})")))
            }
            Some(v) => return Err(self.err(field, &format!("{v} ({expected})"))),
        };
        Ok(QuantMethod::Fp8 { block })
    }

    /// An optional list of strings (`null` or absent: empty).
    fn strings(&self, field: &str) -> Result<Vec<String>> {
        match self.q.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| self.err(field, &format!("expected strings, found {v}")))
                })
                .collect(),
            Some(v) => Err(self.err(field, &format!("expected a list of strings, found {v}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(q: Value) -> Result<Option<CheckpointQuant>> {
        CheckpointQuant::parse(Some(&q), Path::new("config.json"))
    }

    /// The error for `q`, checked to name config.json and `field`.
    fn refused(q: Value, field: &str, needle: &str) {
        let err = parse(q).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
        assert!(
            err.contains(&format!("quantization_config.{field}")),
            "{err}"
        );
        assert!(err.contains(needle), "{err}");
    }

    fn gptq() -> Value {
        json!({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false,
               "sym": true, "checkpoint_format": "gptq"})
    }

    fn with(mut q: Value, field: &str, v: Value) -> Value {
        q[field] = v;
        q
    }

    #[test]
    fn supported_configs_parse() {
        assert_eq!(CheckpointQuant::parse(None, Path::new("c")).unwrap(), None);
        assert_eq!(parse(Value::Null).unwrap(), None);
        let q = parse(gptq()).unwrap().unwrap();
        assert_eq!(
            q.method,
            QuantMethod::Packed4 {
                format: PackedFormat::GptqV1,
                group_size: Some(128)
            }
        );
        let q = parse(with(
            with(gptq(), "checkpoint_format", json!("gptq_v2")),
            "group_size",
            json!(-1),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            q.method,
            QuantMethod::Packed4 {
                format: PackedFormat::GptqV2,
                group_size: None
            }
        );
        let awq = json!({"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm",
                         "zero_point": true, "modules_to_not_convert": ["visual"]});
        let q = parse(awq).unwrap().unwrap();
        assert_eq!(
            q.method,
            QuantMethod::Packed4 {
                format: PackedFormat::AwqGemm,
                group_size: Some(32)
            }
        );
        assert!(q.keeps_float("model.visual.proj") && !q.keeps_float("model.layers.0.mlp"));
        let fp8 = json!({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                         "weight_block_size": [128, 64]});
        assert_eq!(
            parse(fp8).unwrap().unwrap().method,
            QuantMethod::Fp8 { block: [128, 64] }
        );
    }

    #[test]
    fn other_methods_are_refused_with_what_is_supported() {
        for method in ["bitsandbytes", "hqq", "eetq", "compressed-tensors", "gguf"] {
            refused(json!({"quant_method": method}), "quant_method", method);
        }
        refused(json!({"bits": 4}), "quant_method", "missing");
        refused(
            json!({"quant_method": 3}),
            "quant_method",
            "expected a string",
        );
        let err = parse(json!([1])).unwrap_err().to_string();
        assert!(
            err.contains("quantization_config") && err.contains("object"),
            "{err}"
        );
    }

    #[test]
    fn gptq_options_mobius_cannot_represent_are_refused() {
        refused(
            with(gptq(), "desc_act", json!(true)),
            "desc_act",
            "desc_act false",
        );
        refused(with(gptq(), "bits", json!(8)), "bits", "8");
        refused(with(gptq(), "bits", json!(3)), "bits", "3");
        refused(with(gptq(), "group_size", json!(48)), "group_size", "48");
        refused(
            with(gptq(), "group_size", json!(8)),
            "group_size",
            "power of two",
        );
        refused(with(gptq(), "group_size", json!(0)), "group_size", "0");
        refused(
            with(gptq(), "checkpoint_format", json!("marlin")),
            "checkpoint_format",
            "marlin",
        );
        refused(with(gptq(), "sym", json!("yes")), "sym", "yes");
        let mut no_group = gptq();
        no_group.as_object_mut().unwrap().remove("group_size");
        refused(no_group, "group_size", "missing");
    }

    #[test]
    fn awq_options_mobius_cannot_represent_are_refused() {
        let awq = json!({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm",
                         "zero_point": true});
        refused(
            with(awq.clone(), "version", json!("gemv")),
            "version",
            "gemv",
        );
        refused(
            with(awq.clone(), "version", json!("exllama")),
            "version",
            "gemm",
        );
        refused(
            with(awq.clone(), "zero_point", json!(false)),
            "zero_point",
            "false",
        );
        refused(with(awq.clone(), "bits", json!(8)), "bits", "8");
        refused(
            with(awq.clone(), "backend", json!("llm-awq")),
            "backend",
            "llm-awq",
        );
        refused(
            with(awq, "modules_to_not_convert", json!([1])),
            "modules_to_not_convert",
            "strings",
        );
    }

    #[test]
    fn fp8_options_mobius_cannot_represent_are_refused() {
        let fp8 = json!({"quant_method": "fp8", "weight_block_size": [128, 128]});
        assert!(parse(fp8.clone()).is_ok());
        refused(with(fp8.clone(), "fmt", json!("e5m2")), "fmt", "e5m2");
        refused(
            with(fp8.clone(), "activation_scheme", json!("static")),
            "activation_scheme",
            "static",
        );
        refused(
            with(fp8.clone(), "weight_block_size", json!(null)),
            "weight_block_size",
            "per-tensor",
        );
        refused(
            with(fp8.clone(), "weight_block_size", json!([128])),
            "weight_block_size",
            "[128]",
        );
        refused(
            with(fp8, "weight_block_size", json!([0, 128])),
            "weight_block_size",
            "[0,128]",
        );
    }
}
