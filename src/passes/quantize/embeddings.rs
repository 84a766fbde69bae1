//! `--quant-embeddings`: each token-embedding lookup `Gather(table [V, D], input_ids)` of a
//! float table reads the table quantized in blocks along D (each row separately, round to
//! nearest as for MatMul weights: the table is quantized as the transpose of its LM-head use,
//! `[D, V]` in blocks along D, so a tied LM head and the embedding hold the same values):
//!
//! - 4-bit on EPs with the contrib kernels: `com.microsoft::GatherBlockQuantized(Tq [V, D]
//!   int4/uint4, input_ids, scales [V, ⌈D/B⌉][, zero_points])`;
//! - otherwise (standard ONNX, whose `Gather` takes no 4-bit type):
//!   `DequantizeLinear(Gather(Tq, ids), Gather(scales, ids)[, Gather(zero_points, ids)]; axis
//!   −1, block_size B)` with the values held in 8-bit integers — only the looked-up rows are
//!   dequantized.
//!
//! A table whose transpose is also a quantized MatMul weight (a tied LM head) on an EP with
//! both kernels, of a width D that is a multiple of the block size, is stored once, as onnxruntime-genai's builder shares it: the embedding's
//! GatherBlockQuantized reads the LM head's MatMulNBits weight (`[V, ⌈D/B⌉, B/2]` bytes, through
//! a `Reshape` to `[V, ⌈D/B⌉·B/2]`), scales and zero points — the same initializers (the
//! `ai.mobius::NBits*` relayouts the MatMulNBits fusion creates for the LM head; onnxruntime may
//! still copy the reshaped weight in memory, the file holds it once).
//!
//! Only lookups by the graph input `input_ids` (or by `input_ids` with the ids past a table
//! replaced, [`token_ids`]) are token embeddings (position tables and RoPE caches are gathered
//! by other indices and stay float).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::request::{float_matrix, QuantRequest, QuantSummary};
use crate::ir::{Attr, Attrs, DType, Graph, Initializer, Node, QuantPart, TensorSource};
use crate::passes::fresh;

/// The values that are token ids: `input_ids`, and `input_ids` with the ids outside a table
/// replaced, `Where(Less(input_ids, rows), input_ids, other)` (Gemma 3n's per-layer table).
fn token_ids(graph: &Graph) -> HashSet<&str> {
    let less_than: HashSet<&str> = graph
        .nodes
        .iter()
        .filter(|n| n.domain.is_empty() && n.op_type == "Less" && n.inputs[0] == "input_ids")
        .map(|n| n.outputs[0].as_str())
        .collect();
    let clamped = graph.nodes.iter().filter(|n| {
        n.domain.is_empty()
            && n.op_type == "Where"
            && n.inputs.len() == 3
            && less_than.contains(n.inputs[0].as_str())
            && n.inputs[1] == "input_ids"
    });
    std::iter::once("input_ids")
        .chain(clamped.map(|n| n.outputs[0].as_str()))
        .collect()
}

/// Applies the embedding part of `request` to `graph`, counting into `summary`; with
/// `gather_block_quantized`, 4-bit tables are read by `com.microsoft::GatherBlockQuantized`.
pub fn quantize_embeddings(
    graph: &mut Graph,
    request: &QuantRequest,
    gather_block_quantized: bool,
    tied: &HashMap<String, Vec<String>>,
    used: &mut HashSet<String>,
    summary: &mut QuantSummary,
) {
    let p = request.params;
    let fused = gather_block_quantized && p.bits == 4;
    // The stored type of the values (and zero points): 4-bit only where GatherBlockQuantized
    // reads them; otherwise 8-bit containers of the same values.
    let stored = match (fused, p.value_dtype()) {
        (false, DType::I4) => DType::I8,
        (false, DType::U4) => DType::U8,
        (_, dtype) => dtype,
    };
    let inputs: HashSet<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    let by_name: HashMap<&str, &Initializer> = graph
        .initializers
        .iter()
        .map(|i| (i.name.as_str(), i))
        .collect();
    // Table name → its quantized values, scales and zero points.
    let mut quantized: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut new_inits: Vec<Initializer> = Vec::new();
    // Node index → the nodes replacing it.
    let mut replaced: BTreeMap<usize, Vec<Node>> = BTreeMap::new();
    // The relayouts of a shared table, made once: table values name → (data, scales, zero points).
    let mut shared_nodes: HashMap<String, Vec<String>> = HashMap::new();
    let ids = token_ids(graph);
    for (index, node) in graph.nodes.iter().enumerate() {
        let axis0 = matches!(node.attrs.get("axis"), None | Some(Attr::Int(0)));
        if !(node.domain.is_empty()
            && node.op_type == "Gather"
            && node.inputs.len() == 2
            && axis0
            && ids.contains(node.inputs[1].as_str())
            && inputs.contains("input_ids"))
        {
            continue;
        }
        let name = node.inputs[0].as_str();
        let Some(table) = by_name.get(name) else {
            continue;
        };
        let Some([v, d]) =
            float_matrix(table.dtype, &table.shape).filter(|_| !inputs.contains(name))
        else {
            continue;
        };
        if let Some(pattern) = request.excluding(&[name, &node.name]) {
            summary.exclude(name.to_string(), pattern);
            continue;
        }
        // The LM head's MatMulNBits weight pads each row to whole blocks: it is the table's
        // layout only when D is a multiple of the block size.
        let shareable = fused && d % p.block_size == 0;
        if let (true, Some(parts)) = (shareable, tied.get(name)) {
            if shared_nodes.is_empty() {
                summary.embeddings += 1;
                summary.shared = true;
            }
            let nodes = shared_lookup(
                parts,
                &node.inputs[1],
                name,
                p,
                &node.outputs,
                used,
                &mut new_inits,
                &mut shared_nodes,
            );
            replaced.insert(index, nodes);
            continue;
        }
        let parts = quantized.entry(name.to_string()).or_insert_with(|| {
            let blocks = p.blocks(d);
            // The table's rows quantized along D: the transpose of the `[D, V]` quantization.
            let part = |part| {
                table.source.clone().map(|source| {
                    TensorSource::Transpose(Box::new(TensorSource::Quantize {
                        source: Box::new(TensorSource::Transpose(Box::new(source))),
                        dtype: table.dtype,
                        spec: p,
                        part,
                    }))
                })
            };
            let mut parts = vec![
                (
                    format!("{name}.q{}", p.bits),
                    stored,
                    vec![v, d],
                    QuantPart::Values,
                ),
                (
                    format!("{name}.scales"),
                    table.dtype,
                    vec![v, blocks],
                    QuantPart::Scales,
                ),
            ];
            if !p.symmetric {
                parts.push((
                    format!("{name}.zero_points"),
                    stored,
                    vec![v, blocks],
                    QuantPart::ZeroPoints,
                ));
            }
            summary.embeddings += 1;
            summary.float_bytes += (v * d * table.dtype.size()) as u64;
            parts
                .into_iter()
                .map(|(stem, dtype, shape, which)| {
                    let init = Initializer {
                        name: fresh(used, stem),
                        dtype,
                        shape: shape.clone(),
                        source: part(which),
                    };
                    summary.quantized_bytes += dtype.stored_bytes(shape.iter().product()) as u64;
                    let name = init.name.clone();
                    new_inits.push(init);
                    name
                })
                .collect()
        });
        let ids = node.inputs[1].clone();
        let nodes = if fused {
            let mut inputs = vec![parts[0].clone(), ids, parts[1].clone()];
            inputs.extend(parts.get(2).cloned());
            vec![Node {
                name: fresh(used, format!("{name}.gather_block_quantized")),
                domain: "com.microsoft".into(),
                op_type: "GatherBlockQuantized".into(),
                inputs,
                outputs: node.outputs.clone(),
                attrs: Attrs::from([
                    ("bits".to_string(), Attr::Int(4)),
                    ("block_size".to_string(), Attr::Int(p.block_size as i64)),
                    ("gather_axis".to_string(), Attr::Int(0)),
                    ("quantize_axis".to_string(), Attr::Int(1)),
                ]),
            }]
        } else {
            rows_then_dequantize(parts, &ids, name, p.block_size, &node.outputs, used)
        };
        replaced.insert(index, nodes);
    }
    if !replaced.is_empty() && !fused {
        summary.note = Some("embedding values are stored in 8-bit integers (standard ONNX Gather takes no 4-bit type)".into());
    }
    graph.initializers.extend(new_inits);
    let old = std::mem::take(&mut graph.nodes);
    for (index, node) in old.into_iter().enumerate() {
        match replaced.remove(&index) {
            Some(nodes) => graph.nodes.extend(nodes),
            None => graph.nodes.push(node),
        }
    }
}

/// `DequantizeLinear(Gather(values, ids), Gather(scales, ids)[, Gather(zero_points, ids)];
/// axis −1, block)`, writing `outputs`.
fn rows_then_dequantize(
    parts: &[String],
    ids: &str,
    table: &str,
    block: usize,
    outputs: &[String],
    used: &mut HashSet<String>,
) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    let mut gathered = Vec::new();
    for part in parts {
        let out = fresh(used, format!("{part}.gathered"));
        nodes.push(Node {
            name: fresh(used, format!("{part}.gather")),
            domain: String::new(),
            op_type: "Gather".into(),
            inputs: vec![part.clone(), ids.to_string()],
            outputs: vec![out.clone()],
            attrs: Attrs::from([("axis".to_string(), Attr::Int(0))]),
        });
        gathered.push(out);
    }
    nodes.push(Node {
        name: fresh(used, format!("{table}.dequantize_rows")),
        domain: String::new(),
        op_type: "DequantizeLinear".into(),
        inputs: gathered,
        outputs: outputs.to_vec(),
        attrs: Attrs::from([
            ("axis".to_string(), Attr::Int(-1)),
            ("block_size".to_string(), Attr::Int(block as i64)),
        ]),
    });
    nodes
}

/// `GatherBlockQuantized(Reshape(NBitsWeight(values), [0, −1]), ids, NBitsScales(scales)[,
/// NBitsZeroPoints(zero_points)])` over the quantized parts `parts` of a tied LM head (`[D, V]`
/// in the DequantizeLinear layout), writing `outputs`; the relayouts (nodes of the
/// `ai.mobius` domain, folded into initializers when the graph is lowered) are made once per
/// table and recorded in `shared`.
#[allow(clippy::too_many_arguments)]
fn shared_lookup(
    parts: &[String],
    ids: &str,
    table: &str,
    p: crate::ir::QuantParams,
    outputs: &[String],
    used: &mut HashSet<String>,
    new_inits: &mut Vec<Initializer>,
    shared: &mut HashMap<String, Vec<String>>,
) -> Vec<Node> {
    let mut nodes = Vec::new();
    let relayout = |op: &str, attrs: bool| {
        let a = if attrs {
            Attrs::from([
                ("bits".to_string(), Attr::Int(i64::from(p.bits))),
                ("block_size".to_string(), Attr::Int(p.block_size as i64)),
            ])
        } else {
            Attrs::new()
        };
        (op.to_string(), a)
    };
    let inputs = match shared.get(&parts[0]) {
        Some(done) => done.clone(),
        None => {
            let mut made = Vec::new();
            let ops = [
                relayout("NBitsWeight", true),
                relayout("NBitsScales", false),
                relayout("NBitsZeroPoints", true),
            ];
            for (part, (op, attrs)) in parts.iter().zip(ops) {
                let out = fresh(used, format!("{part}.nbits"));
                nodes.push(Node {
                    name: fresh(used, format!("{part}.{op}")),
                    domain: "ai.mobius".into(),
                    op_type: op,
                    inputs: vec![part.clone()],
                    outputs: vec![out.clone()],
                    attrs,
                });
                made.push(out);
            }
            // The 3-D MatMulNBits weight as the 2-D table GatherBlockQuantized reads.
            let shape = fresh(used, format!("{table}.shared_shape"));
            new_inits.push(Initializer {
                name: shape.clone(),
                dtype: DType::I64,
                shape: vec![2],
                source: Some(TensorSource::Inline(crate::ir::TensorData::from_i64(
                    vec![2],
                    &[0, -1],
                ))),
            });
            let data = fresh(used, format!("{table}.shared_data"));
            nodes.push(Node {
                name: fresh(used, format!("{table}.shared_reshape")),
                domain: String::new(),
                op_type: "Reshape".into(),
                inputs: vec![made[0].clone(), shape],
                outputs: vec![data.clone()],
                attrs: Attrs::new(),
            });
            made[0] = data;
            shared.insert(parts[0].clone(), made.clone());
            made
        }
    };
    let mut gbq_inputs = vec![inputs[0].clone(), ids.to_string(), inputs[1].clone()];
    gbq_inputs.extend(inputs.get(2).cloned());
    nodes.push(Node {
        name: fresh(used, format!("{table}.gather_block_quantized")),
        domain: "com.microsoft".into(),
        op_type: "GatherBlockQuantized".into(),
        inputs: gbq_inputs,
        outputs: outputs.to_vec(),
        attrs: Attrs::from([
            ("bits".to_string(), Attr::Int(i64::from(p.bits))),
            ("block_size".to_string(), Attr::Int(p.block_size as i64)),
            ("gather_axis".to_string(), Attr::Int(0)),
            ("quantize_axis".to_string(), Attr::Int(1)),
        ]),
    });
    nodes
}
