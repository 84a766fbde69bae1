//! Weights a pre-quantized checkpoint stores instead of float ones (its `quantization_config`,
//! see [`crate::config::quantization`]), brought into the graph the builders made for float
//! weights:
//!
//! - GPTQ / AWQ: every projection weight read as `Transpose(Checkpoint("X.weight"))` (or a
//!   block of its rows, `Slice`, for fused projections) whose module has packed tensors
//!   becomes the output of `DequantizeLinear(values, scales, zero_points; axis 0, block_size
//!   = group size)` over lazy [`TensorSource::Packed4`] parts: the 4-bit values are unpacked,
//!   never dequantized, so the optimizer's MatMulNBits rule applies as for `--quant`.
//! - FP8: every float8 checkpoint tensor with block scales becomes a lazy
//!   [`TensorSource::Fp8Blocks`] (dequantized to f32 when saved, then converted to the model
//!   dtype like any float weight), so a `--quant` request may quantize it afterwards.

use std::collections::HashSet;

use super::fresh;
use crate::config::{CheckpointQuant, QuantMethod};
use crate::ir::{Attr, Attrs, DType, Graph, Initializer, Node, QuantPart, TensorSource};
use crate::weights::store::TensorStore;
use crate::Result;

/// What [`apply_checkpoint_quantization`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrequantSummary {
    /// Weights read as packed 4-bit values through `DequantizeLinear`.
    pub packed: usize,
    /// Weights dequantized from float8 blocks.
    pub fp8: usize,
}

impl std::fmt::Display for PrequantSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pre-quantized checkpoint: {} packed 4-bit weights, {} float8 weights",
            self.packed, self.fp8
        )
    }
}

/// `(start, len, total)` of a block of rows of a checkpoint weight.
type Rows = Option<(usize, usize, usize)>;

/// The module whose weight `source` reads as `[K, N]`: `Transpose(Checkpoint("X.weight"))`
/// or `Transpose(Slice(Checkpoint("X.weight"), rows))` → `("X", rows)`.
fn projection(source: &TensorSource) -> Option<(&str, Rows)> {
    let TensorSource::Transpose(inner) = source else {
        return None;
    };
    let (name, rows) = match inner.as_ref() {
        TensorSource::Checkpoint(name) => (name, None),
        TensorSource::Slice {
            source,
            axis: 0,
            start,
            len,
            total,
        } => match source.as_ref() {
            TensorSource::Checkpoint(name) => (name, Some((*start, *len, *total))),
            _ => return None,
        },
        _ => return None,
    };
    Some((name.strip_suffix(".weight")?, rows))
}

/// Whether module `prefix` is stored packed: the checkpoint has `prefix.qweight` or, without
/// weights (`--no-weights`), it is a decoder layer's projection that `modules_to_not_convert`
/// does not keep in float (what GPTQ and AWQ quantize).
fn is_packed(prefix: &str, quant: &CheckpointQuant, store: Option<&TensorStore>) -> bool {
    match store {
        Some(store) => store.get(&format!("{prefix}.qweight")).is_some(),
        None => prefix.contains(".layers.") && !quant.keeps_float(prefix),
    }
}

/// Replaces every float8 checkpoint tensor `X` read by `source` that has block scales
/// `X_scale_inv` with its dequantization; returns how many it replaced.
fn dequantize_fp8(source: &mut TensorSource, store: &TensorStore, block: [usize; 2]) -> usize {
    match source {
        TensorSource::Checkpoint(name) => {
            let scales = format!("{name}_scale_inv");
            let fp8 = store.get(name).is_some_and(|t| t.float8_e4m3);
            if !fp8 || store.get(&scales).is_none() {
                return 0;
            }
            *source = TensorSource::Fp8Blocks {
                weight: name.clone(),
                scales,
                block,
            };
            1
        }
        TensorSource::Transpose(inner)
        | TensorSource::AddScalar { source: inner, .. }
        | TensorSource::Slice { source: inner, .. }
        | TensorSource::Quantize { source: inner, .. }
        | TensorSource::NBits { source: inner, .. }
        | TensorSource::FromNBits { source: inner, .. }
        | TensorSource::MoeExperts { source: inner, .. }
        | TensorSource::Reshape { source: inner, .. } => dequantize_fp8(inner, store, block),
        TensorSource::Concat { parts, .. } => parts
            .iter_mut()
            .map(|p| dequantize_fp8(p, store, block))
            .sum(),
        TensorSource::Inline(_)
        | TensorSource::External { .. }
        | TensorSource::RotaryTable { .. }
        | TensorSource::Packed4 { .. }
        | TensorSource::Fp8Blocks { .. } => 0,
    }
}

/// Applies the checkpoint's quantization to `graph` (see the module docs). `store` holds the
/// checkpoint's tensors (`None` with `--no-weights`: packed modules are then the decoder
/// layers' projections, and float8 weights need no data).
pub fn apply_checkpoint_quantization(
    graph: &mut Graph,
    quant: &CheckpointQuant,
    store: Option<&TensorStore>,
) -> Result<PrequantSummary> {
    let mut summary = PrequantSummary::default();
    let (format, group_size) = match quant.method {
        QuantMethod::Fp8 { block } => {
            if let Some(store) = store {
                for init in &mut graph.initializers {
                    if let Some(source) = &mut init.source {
                        summary.fp8 += dequantize_fp8(source, store, block);
                    }
                }
            }
            return Ok(summary);
        }
        QuantMethod::Packed4 { format, group_size } => (format, group_size),
    };
    let mut used: HashSet<String> = graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .chain(graph.initializers.iter().map(|i| i.name.clone()))
        .chain(graph.nodes.iter().flat_map(|n| n.outputs.iter().cloned()))
        .collect();
    let mut new_inits = Vec::new();
    let mut new_nodes = Vec::new();
    let mut replaced: HashSet<String> = HashSet::new();
    for init in &graph.initializers {
        let Some((prefix, rows)) = init.source.as_ref().and_then(projection) else {
            continue;
        };
        let [k, _] = init.shape[..] else { continue };
        if !init.dtype.is_float() || !is_packed(prefix, quant, store) {
            continue;
        }
        let group = group_size.unwrap_or(k);
        let part = |part| {
            let packed = TensorSource::Packed4 {
                prefix: prefix.to_string(),
                format,
                group_size: group,
                part,
            };
            // A block of the weight's rows is a block of the `[K, N]` parts' columns.
            Some(match rows {
                None => packed,
                Some((start, len, total)) => TensorSource::Slice {
                    source: Box::new(packed),
                    axis: 1,
                    start,
                    len,
                    total,
                },
            })
        };
        let n = init.shape[1];
        let groups = k.div_ceil(group);
        let values = fresh(&mut used, format!("{}.q4", init.name));
        let scales = fresh(&mut used, format!("{}.scales", init.name));
        let zero_points = fresh(&mut used, format!("{}.zero_points", init.name));
        new_inits.push(Initializer {
            name: values.clone(),
            dtype: DType::U4,
            shape: vec![k, n],
            source: part(QuantPart::Values),
        });
        new_inits.push(Initializer {
            name: scales.clone(),
            dtype: init.dtype,
            shape: vec![groups, n],
            source: part(QuantPart::Scales),
        });
        new_inits.push(Initializer {
            name: zero_points.clone(),
            dtype: DType::U4,
            shape: vec![groups, n],
            source: part(QuantPart::ZeroPoints),
        });
        new_nodes.push(Node {
            name: fresh(&mut used, format!("{}.dequantize", init.name)),
            domain: String::new(),
            op_type: "DequantizeLinear".into(),
            inputs: vec![values, scales, zero_points],
            outputs: vec![init.name.clone()],
            attrs: Attrs::from([
                ("axis".to_string(), Attr::Int(0)),
                ("block_size".to_string(), Attr::Int(group as i64)),
            ]),
        });
        replaced.insert(init.name.clone());
    }
    summary.packed = replaced.len();
    graph.initializers.retain(|i| !replaced.contains(&i.name));
    graph.initializers.extend(new_inits);
    // The dequantizations read initializers only: they go first, before any reader.
    graph.nodes.splice(0..0, new_nodes);
    graph.validate()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{PackedFormat, Shape, ValueInfo};

    fn gptq(group_size: Option<usize>) -> CheckpointQuant {
        CheckpointQuant {
            method: QuantMethod::Packed4 {
                format: PackedFormat::GptqV1,
                group_size,
            },
            modules_to_not_convert: vec!["mlp".into()],
        }
    }

    fn weight(name: &str, shape: [usize; 2], source: TensorSource) -> Initializer {
        Initializer {
            name: name.into(),
            dtype: DType::F32,
            shape: shape.to_vec(),
            source: Some(TensorSource::Transpose(Box::new(source))),
        }
    }

    fn graph(inits: Vec<Initializer>) -> Graph {
        let mut g = Graph::default();
        g.inputs
            .push(ValueInfo::new("x", DType::F32, Shape::new([1usize, 64])));
        for (i, init) in inits.iter().enumerate() {
            g.nodes.push(Node {
                name: format!("mm{i}"),
                domain: String::new(),
                op_type: "MatMul".into(),
                inputs: vec!["x".into(), init.name.clone()],
                outputs: vec![format!("y{i}")],
                attrs: Attrs::new(),
            });
            g.outputs.push(ValueInfo::new(
                &format!("y{i}"),
                DType::F32,
                Shape::new([1, init.shape[1]]),
            ));
        }
        g.initializers = inits;
        g
    }

    #[test]
    fn packed_projections_become_blocked_dequantizations() {
        let q = TensorSource::Checkpoint("model.layers.0.self_attn.q_proj.weight".into());
        let fused = TensorSource::Slice {
            source: Box::new(TensorSource::Checkpoint(
                "model.layers.0.self_attn.qkv_proj.weight".into(),
            )),
            axis: 0,
            start: 64,
            len: 32,
            total: 128,
        };
        let up = TensorSource::Checkpoint("model.layers.0.mlp.up_proj.weight".into());
        let head = TensorSource::Checkpoint("lm_head.weight".into());
        let mut g = graph(vec![
            weight("q.weight_t", [64, 64], q),
            weight("k.weight_t", [64, 32], fused),
            weight("up.weight_t", [64, 128], up),
            weight("head.weight_t", [64, 300], head),
        ]);
        let summary = apply_checkpoint_quantization(&mut g, &gptq(None), None).unwrap();
        assert_eq!(summary.packed, 2);
        let dq: Vec<&Node> = g
            .nodes
            .iter()
            .filter(|n| n.op_type == "DequantizeLinear")
            .collect();
        assert_eq!(dq.len(), 2);
        assert_eq!(dq[0].outputs, vec!["q.weight_t".to_string()]);
        // group_size -1: one group spans K.
        assert_eq!(dq[0].attrs["block_size"], Attr::Int(64));
        let zp = g
            .initializers
            .iter()
            .find(|i| i.name == "k.weight_t.zero_points")
            .unwrap();
        assert_eq!((zp.dtype, zp.shape.clone()), (DType::U4, vec![1, 32]));
        assert_eq!(
            zp.source,
            Some(TensorSource::Slice {
                source: Box::new(TensorSource::Packed4 {
                    prefix: "model.layers.0.self_attn.qkv_proj".into(),
                    format: PackedFormat::GptqV1,
                    group_size: 64,
                    part: QuantPart::ZeroPoints,
                }),
                axis: 1,
                start: 64,
                len: 32,
                total: 128,
            })
        );
        // modules_to_not_convert and the LM head stay float.
        let names: HashSet<&str> = g.initializers.iter().map(|i| i.name.as_str()).collect();
        assert!(names.contains("up.weight_t") && names.contains("head.weight_t"));
        assert!(!names.contains("q.weight_t") && !names.contains("k.weight_t"));
    }
}
