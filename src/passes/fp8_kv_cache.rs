//! `--features fp8-kv-cache` [`--kv-cache-scale-file FILE`]: the decoder's KV cache stored as
//! float8 e4m3fn, for onnxruntime's CUDA `com.microsoft::GroupQueryAttention`.
//!
//! A rewrite of the optimized graph: every `GroupQueryAttention` whose past_key/past_value
//! (inputs 3/4) are graph inputs read by nothing else (but `Shape`) and whose present
//! outputs are graph outputs gets
//! - its past inputs and present outputs retyped to `FLOAT8E4M3FN` (same `[batch, kv_heads,
//!   sequence, head_size]` shapes: one byte per element, half an f16 cache);
//! - inputs 12/13 `k_scale`/`v_scale`: f32 initializers of shape `[1]` named
//!   `<past_key>.fp8_scale` / `<past_value>.fp8_scale`, one `<past_key>.fp8_scale` for both
//!   when they are equal (onnxruntime's fused decode kernel, XQA, needs k_scale and v_scale to
//!   be one tensor); inputs 9–11 left empty;
//! - attributes `k_quant_type = v_quant_type = "PER_TENSOR"`, `kv_cache_bit_width = 8`.
//!
//! The kernel stores a new key `x` as `e4m3(clamp(x / k_scale, ±448))` and attends over
//! `e4m3 · k_scale` (values likewise), so a scale is the largest magnitude a layer's keys
//! (values) reach, over 448. Without a scale file every scale is 1.0: keys and values beyond
//! ±448 saturate and magnitudes up to 2^-10 flush to zero. The scale file is the JSON that
//! onnxruntime-genai's KV-cache calibration writes (`python -m
//! onnxruntime_genai.models.quantization.kv_cache_calibration`, run on a plain build of the
//! same model: the cache names match), see [`KvCacheScales::read`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::ir::{f8e4m3, Attr, DType, Graph, Initializer, TensorData, TensorSource};
use crate::{Error, Result};

/// Input slots of GroupQueryAttention's scales (onnxruntime 1.32's schema).
const K_SCALE: usize = 12;
/// See [`K_SCALE`].
const V_SCALE: usize = 13;
/// The largest scale file read (per-layer scales take a few bytes a layer).
const MAX_SCALE_FILE_BYTES: u64 = 16 << 20;
/// The `qmax` a scale is the threshold over, for float8 e4m3fn.
const QMAX: f64 = f8e4m3::MAX as f64;

/// `--features fp8-kv-cache`, with the scales of `--kv-cache-scale-file` if given.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8KvCacheRequest {
    /// Per-layer scales; `None`: 1.0 for every layer.
    pub scales: Option<KvCacheScales>,
}

/// Per-layer (key, value) scales of a float8 KV cache.
#[derive(Debug, Clone, PartialEq)]
pub struct KvCacheScales {
    /// Scales by layer id (the `{i}` of `past_key_values.{i}.key`).
    pub layers: BTreeMap<usize, (f32, f32)>,
    /// Where they were read from (named in errors).
    pub file: PathBuf,
}

impl KvCacheScales {
    /// Reads a scale file: `{"scales": {"k_scales": [...], "v_scales": [...]}, "layer_ids":
    /// [...], "qmax": Q}`. `k_scales`/`v_scales` hold one per-tensor scale per layer (a number
    /// or a one-element list), finite and positive; `layer_ids` (optional, default 0, 1, …)
    /// names the layer of each entry; `qmax` (optional) is the divisor the scales were
    /// calibrated with (448 for float8, 128 for int8…): they are rescaled by `qmax / 448`.
    /// Errors name the file and the field.
    pub fn read(path: &Path) -> Result<KvCacheScales> {
        let err = |field: &str, message: String| Error::ConfigField {
            path: path.to_path_buf(),
            field: field.into(),
            message,
        };
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        // Checked before reading: a FIFO or device is never read, a huge file never loaded.
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() || meta.len() > MAX_SCALE_FILE_BYTES {
            return Err(err(
                "scales",
                format!(
                    "expected a regular JSON file of at most {MAX_SCALE_FILE_BYTES} bytes \
                     (per-layer scales)"
                ),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        let json: Value = serde_json::from_str(&text).map_err(|e| Error::Json {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: format!("{e} (expected a KV-cache scale file)"),
        })?;
        let top = json
            .as_object()
            .ok_or_else(|| err("scales", "expected a JSON object with `scales`".into()))?;
        if let Some(k) = top
            .keys()
            .find(|k| !["scales", "layer_ids", "qmax"].contains(&k.as_str()))
        {
            return Err(err(
                k,
                "unknown field (expected `scales`, `layer_ids`, `qmax`)".into(),
            ));
        }
        let scales = top
            .get("scales")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                err(
                    "scales",
                    "expected an object with `k_scales` and `v_scales`".into(),
                )
            })?;
        let factor = match top.get("qmax") {
            None => 1.0,
            Some(q) => match q.as_f64() {
                Some(q) if q.is_finite() && q > 0.0 => q / QMAX,
                _ => return Err(err("qmax", format!("{q}, expected a positive number"))),
            },
        };
        let list = |name: &str| -> Result<Vec<f32>> {
            let field = format!("scales.{name}");
            let values = scales
                .get(name)
                .and_then(Value::as_array)
                .ok_or_else(|| err(&field, "expected a list of per-layer scales".into()))?;
            values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let number = match v {
                        Value::Array(one) if one.len() == 1 => one[0].as_f64(),
                        Value::Array(many) => {
                            return Err(err(
                                &format!("{field}[{i}]"),
                                format!(
                                    "{} values: mobius builds per-tensor (PER_TENSOR) \
                                     scales, one per layer",
                                    many.len()
                                ),
                            ))
                        }
                        v => v.as_f64(),
                    };
                    let scale = number.map(|s| s * factor).unwrap_or(f64::NAN) as f32;
                    if !(scale.is_finite() && scale > 0.0) {
                        return Err(err(
                            &format!("{field}[{i}]"),
                            format!("{v}, expected a finite positive number"),
                        ));
                    }
                    Ok(scale)
                })
                .collect()
        };
        let (k, v) = (list("k_scales")?, list("v_scales")?);
        if k.len() != v.len() {
            return Err(err(
                "scales",
                format!(
                    "`k_scales` has {} entries, `v_scales` {}: one each per layer",
                    k.len(),
                    v.len()
                ),
            ));
        }
        let ids: Vec<usize> = match top.get("layer_ids") {
            None => (0..k.len()).collect(),
            Some(ids) => {
                let ids = ids
                    .as_array()
                    .ok_or_else(|| err("layer_ids", "expected a list of layer numbers".into()))?;
                ids.iter()
                    .map(|i| {
                        i.as_u64()
                            .and_then(|i| usize::try_from(i).ok())
                            .ok_or_else(|| err("layer_ids", format!("{i} is not a layer number")))
                    })
                    .collect::<Result<_>>()?
            }
        };
        if ids.len() != k.len() {
            return Err(err(
                "layer_ids",
                format!("{} entries for {} scales", ids.len(), k.len()),
            ));
        }
        let mut layers = BTreeMap::new();
        for (&id, (k, v)) in ids.iter().zip(k.into_iter().zip(v)) {
            if layers.insert(id, (k, v)).is_some() {
                return Err(err("layer_ids", format!("layer {id} appears twice")));
            }
        }
        Ok(KvCacheScales {
            layers,
            file: path.to_path_buf(),
        })
    }
}

/// One cache a GroupQueryAttention reads and writes.
struct Cache {
    node: usize,
    layer: usize,
    past: [String; 2],
    present: [String; 2],
}

/// What [`fp8_kv_cache`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fp8Summary {
    /// Layers whose cache became float8.
    pub layers: Vec<usize>,
    /// Cache inputs left as they were, each with the reason.
    pub skipped: Vec<String>,
}

/// Rewrites `graph` (an optimized decoder) to a float8 cache (see the module documentation),
/// with `scales` or 1.0 for every layer. Errors: a scale file whose layers are not exactly the
/// converted caches'; nothing is changed then, nor when no cache can be converted (the
/// summary says why).
pub fn fp8_kv_cache(graph: &mut Graph, scales: Option<&KvCacheScales>) -> Result<Fp8Summary> {
    let mut summary = Fp8Summary::default();
    let mut caches = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if node.op_type != "GroupQueryAttention" || node.domain != "com.microsoft" {
            continue;
        }
        match cache_of(graph, i) {
            Ok(cache) => caches.push(cache),
            Err(why) => summary.skipped.push(format!("{}: {why}", node.name)),
        }
    }
    if caches.is_empty() {
        return Ok(summary);
    }
    let converted: BTreeSet<usize> = caches.iter().map(|c| c.layer).collect();
    if let Some(s) = scales {
        let given: BTreeSet<usize> = s.layers.keys().copied().collect();
        if given != converted {
            return Err(Error::ConfigField {
                path: s.file.clone(),
                field: "layer_ids".into(),
                message: format!(
                    "scales for layers {given:?}, but the model's float8 caches are layers \
                     {converted:?}"
                ),
            });
        }
    }
    for cache in caches {
        let (k, v) = scales.map_or((1.0, 1.0), |s| s.layers[&cache.layer]);
        // Equal scales share one initializer: onnxruntime's fused float8 decode (XQA) needs
        // k_scale and v_scale to be the same tensor.
        let key_name = format!("{}.fp8_scale", cache.past[0]);
        let names = match k == v {
            true => [key_name.clone(), key_name],
            false => [key_name, format!("{}.fp8_scale", cache.past[1])],
        };
        let distinct = if k == v { 1 } else { 2 };
        for (name, value) in names.iter().zip([k, v]).take(distinct) {
            graph.initializers.push(Initializer {
                name: name.clone(),
                dtype: DType::F32,
                shape: vec![1],
                source: Some(TensorSource::Inline(TensorData::from_f32(
                    vec![1],
                    &[value],
                ))),
            });
        }
        let node = &mut graph.nodes[cache.node];
        node.inputs.resize(V_SCALE + 1, String::new());
        node.inputs[K_SCALE] = names[0].clone();
        node.inputs[V_SCALE] = names[1].clone();
        for side in ["k_quant_type", "v_quant_type"] {
            node.attrs
                .insert(side.into(), Attr::String("PER_TENSOR".into()));
        }
        node.attrs.insert("kv_cache_bit_width".into(), Attr::Int(8));
        for v in graph.inputs.iter_mut().chain(graph.outputs.iter_mut()) {
            if cache.past.contains(&v.name) || cache.present.contains(&v.name) {
                v.dtype = DType::F8E4M3FN;
            }
        }
        summary.layers.push(cache.layer);
    }
    graph.validate()?;
    Ok(summary)
}

/// The cache of GroupQueryAttention node `i`, or why it cannot become float8.
fn cache_of(graph: &Graph, i: usize) -> std::result::Result<Cache, String> {
    let node = &graph.nodes[i];
    let slot = |k: usize, names: &[String]| names.get(k).filter(|n| !n.is_empty()).cloned();
    let (Some(pk), Some(pv)) = (slot(3, &node.inputs), slot(4, &node.inputs)) else {
        return Err("no past_key/past_value inputs".into());
    };
    let (Some(ok), Some(ov)) = (slot(1, &node.outputs), slot(2, &node.outputs)) else {
        return Err("no present_key/present_value outputs".into());
    };
    if node.inputs.iter().skip(9).any(|n| !n.is_empty()) {
        return Err("inputs beyond sin_cache are in use".into());
    }
    let input = |n: &str| graph.inputs.iter().find(|v| v.name == n);
    for past in [&pk, &pv] {
        let declared = input(past).ok_or(format!("`{past}` is not a graph input"))?;
        if !matches!(declared.dtype, DType::F16 | DType::BF16) {
            return Err(format!("`{past}` is {}, not f16/bf16", declared.dtype));
        }
        let other =
            graph.nodes.iter().enumerate().find(|(j, n)| {
                *j != i && n.op_type != "Shape" && n.inputs.iter().any(|x| x == past)
            });
        if let Some((_, n)) = other {
            return Err(format!(
                "`{past}` is read by {} `{}` too",
                n.op_type, n.name
            ));
        }
    }
    for present in [&ok, &ov] {
        if !graph.outputs.iter().any(|v| &v.name == present) {
            return Err(format!("`{present}` is not a graph output"));
        }
        if graph.nodes.iter().any(|n| n.inputs.contains(present)) {
            return Err(format!("`{present}` is read inside the graph"));
        }
    }
    let layer = layer_of(&pk).ok_or(format!("no layer number in `{pk}`"))?;
    if layer_of(&pv) != Some(layer) {
        return Err(format!("`{pk}` and `{pv}` name different layers"));
    }
    Ok(Cache {
        node: i,
        layer,
        past: [pk, pv],
        present: [ok, ov],
    })
}

/// The layer number `i` of a cache name `….{i}.…` (the first all-digit dotted part).
fn layer_of(name: &str) -> Option<usize> {
    name.split('.').find_map(|part| {
        (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> std::path::PathBuf {
        let p = dir.join("scales.json");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn refused(text: &str, needle: &str) {
        let dir = tempfile::tempdir().unwrap();
        let e = KvCacheScales::read(&write(dir.path(), text))
            .unwrap_err()
            .to_string();
        assert!(e.contains("scales.json") && e.contains(needle), "{e}");
    }

    #[test]
    fn scale_files_of_genai_calibration_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            r#"{"scales": {"k_scales": [[0.5], 2], "v_scales": [[0.25], [1.0]]},
                "qmax": 224, "layer_ids": [3, 1]}"#,
        );
        let s = KvCacheScales::read(&p).unwrap();
        assert_eq!(s.layers[&3], (0.25, 0.125));
        assert_eq!(s.layers[&1], (1.0, 0.5));
        let p = write(
            dir.path(),
            r#"{"scales": {"k_scales": [1.5], "v_scales": [2.5]}}"#,
        );
        assert_eq!(KvCacheScales::read(&p).unwrap().layers[&0], (1.5, 2.5));
    }

    #[test]
    fn hostile_scale_files_are_refused_naming_the_field() {
        refused("[1, 2]", "`scales`");
        refused("{", "expected a KV-cache scale file");
        refused(r#"{"scales": {"k_scales": [1]}}"#, "scales.v_scales");
        refused(
            r#"{"scales": {"k_scales": [0], "v_scales": [1]}}"#,
            "scales.k_scales[0]",
        );
        refused(
            r#"{"scales": {"k_scales": [1], "v_scales": [-2]}}"#,
            "scales.v_scales[0]",
        );
        refused(
            r#"{"scales": {"k_scales": ["x"], "v_scales": [1]}}"#,
            "scales.k_scales[0]",
        );
        refused(
            r#"{"scales": {"k_scales": [1e39], "v_scales": [1]}}"#,
            "finite",
        );
        refused(
            r#"{"scales": {"k_scales": [[1, 2]], "v_scales": [1]}}"#,
            "PER_TENSOR",
        );
        refused(
            r#"{"scales": {"k_scales": [1, 2], "v_scales": [1]}}"#,
            "2 entries",
        );
        refused(
            r#"{"scales": {"k_scales": [1], "v_scales": [1]}, "qmax": 0}"#,
            "`qmax`",
        );
        refused(
            r#"{"scales": {"k_scales": [1, 1], "v_scales": [1, 1]}, "layer_ids": [0, 0]}"#,
            "twice",
        );
        refused(
            r#"{"scales": {"k_scales": [1], "v_scales": [1]}, "layer_ids": [-1]}"#,
            "`layer_ids`",
        );
        refused(
            r#"{"scales": {"k_scales": [1], "v_scales": [1]}, "model": {}}"#,
            "`model`",
        );
    }

    #[test]
    fn layer_numbers_come_from_the_cache_name() {
        assert_eq!(layer_of("past_key_values.12.key"), Some(12));
        assert_eq!(layer_of("past.key"), None);
    }
}
