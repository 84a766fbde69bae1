//! The quantization request applied to a graph: every float MatMul weight (a 2-D
//! initializer `W [K, N]` read as `MatMul`'s second input) becomes
//! `DequantizeLinear(Wq, scales[, zero_points]; axis 0, block_size B)`, with `Wq`, `scales` and
//! `zero_points` lazy [`TensorSource::Quantize`] parts of `W`, computed when the model is saved.
//!
//! This fake-quantized graph is standard ONNX (opset 21+) and *defines* the quantized model:
//! the optimizer's rules then only change its form (e.g. into `com.microsoft::MatMulNBits`
//! where the EP runs it), never its values, so every rule stays an equivalence.
//!
//! With `--quant-embeddings` the token-embedding tables are quantized too (`embeddings.rs`);
//! the request, the summary and what both parts share are in `request.rs`.

mod embeddings;
mod request;

pub use request::{name_matches, runs_gather_block_quantized, QuantRequest, QuantSummary};

use std::collections::{BTreeMap, HashMap, HashSet};

use self::request::float_matrix;
use crate::ir::{Attr, Attrs, DType, Graph, Initializer, Node, QuantPart, TensorSource};
use crate::passes::fresh;
use crate::Result;

/// A MatMul's float weight: an initializer, or the transpose of one.
struct Weight<'g> {
    /// The initializer it comes from.
    base: &'g str,
    dtype: DType,
    shape: Vec<usize>,
    source: Option<TensorSource>,
}

/// The weight read as `name`: an initializer, or `Transpose` of a 2-D initializer.
fn matmul_weight<'g>(
    name: &str,
    inits: &HashMap<&'g str, &'g Initializer>,
    transposes: &HashMap<&str, &'g str>,
) -> Option<Weight<'g>> {
    if let Some(init) = inits.get(name) {
        return Some(Weight {
            base: init.name.as_str(),
            dtype: init.dtype,
            shape: init.shape.clone(),
            source: init.source.clone(),
        });
    }
    let init = inits.get(transposes.get(name)?)?;
    let [r, c] = init.shape[..] else { return None };
    Some(Weight {
        base: init.name.as_str(),
        dtype: init.dtype,
        shape: vec![c, r],
        source: init
            .source
            .clone()
            .map(|s| TensorSource::Transpose(Box::new(s))),
    })
}

/// Applies `request` to `graph` (see the module docs; embedding tables too when
/// `request.embeddings`, read by `com.microsoft::GatherBlockQuantized` when
/// `gather_block_quantized`: the target EP runs it). Weights that are also graph inputs, not
/// 2-D, or not float are left alone.
pub fn quantize_graph(
    graph: &mut Graph,
    request: &QuantRequest,
    gather_block_quantized: bool,
) -> Result<QuantSummary> {
    let p = request.params;
    let mut used: HashSet<String> = graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .chain(graph.initializers.iter().map(|i| i.name.clone()))
        .chain(graph.nodes.iter().flat_map(|n| n.outputs.iter().cloned()))
        .collect();
    let inputs: HashSet<&str> = graph.inputs.iter().map(|v| v.name.as_str()).collect();
    let by_name: HashMap<&str, &Initializer> = graph
        .initializers
        .iter()
        .map(|i| (i.name.as_str(), i))
        .collect();
    // `Transpose(W)` of a 2-D initializer (a tied LM head reads the embedding table so), by
    // output name.
    let transposes: HashMap<&str, &str> = graph
        .nodes
        .iter()
        .filter(|n| n.domain.is_empty() && n.op_type == "Transpose" && n.inputs.len() == 1)
        .filter(|n| match n.attrs.get("perm") {
            None => true,
            Some(Attr::Ints(p)) => p == &[1, 0],
            Some(_) => false,
        })
        .map(|n| (n.outputs[0].as_str(), n.inputs[0].as_str()))
        .collect();
    let mut summary = QuantSummary::default();
    // Weight name → the DequantizeLinear output that replaces it.
    let mut dequantized: BTreeMap<String, String> = BTreeMap::new();
    // Initializer read transposed by a quantized MatMul (a tied LM head) → its quantized
    // values, scales and zero points.
    let mut tied: HashMap<String, Vec<String>> = HashMap::new();
    let mut new_inits: Vec<Initializer> = Vec::new();
    let mut new_nodes: Vec<Node> = Vec::new();
    let mut rewired: Vec<(usize, String)> = Vec::new();
    for (index, node) in graph.nodes.iter().enumerate() {
        if !(node.domain.is_empty() && node.op_type == "MatMul" && node.inputs.len() == 2) {
            continue;
        }
        let weight = node.inputs[1].as_str();
        let Some(w) = matmul_weight(weight, &by_name, &transposes) else {
            continue;
        };
        let Some([k, n]) = float_matrix(w.dtype, &w.shape).filter(|_| !inputs.contains(w.base))
        else {
            continue;
        };
        if let Some(pattern) = request.excluding(&[weight, &node.name]) {
            let shown = if w.base == weight {
                weight.to_string()
            } else {
                format!("{weight} (the transpose of {})", w.base)
            };
            summary.exclude(shown, pattern);
            continue;
        }
        if let Some(out) = dequantized.get(weight) {
            rewired.push((index, out.clone()));
            summary.matmuls += 1;
            continue;
        }
        let blocks = p.blocks(k);
        let part = |part| {
            w.source.clone().map(|source| TensorSource::Quantize {
                source: Box::new(source),
                dtype: w.dtype,
                spec: p,
                part,
            })
        };
        let values = fresh(&mut used, format!("{weight}.q{}", p.bits));
        let scales = fresh(&mut used, format!("{weight}.scales"));
        new_inits.push(Initializer {
            name: values.clone(),
            dtype: p.value_dtype(),
            shape: vec![k, n],
            source: part(QuantPart::Values),
        });
        new_inits.push(Initializer {
            name: scales.clone(),
            dtype: w.dtype,
            shape: vec![blocks, n],
            source: part(QuantPart::Scales),
        });
        let mut dq_inputs = vec![values, scales];
        let mut stored = p.value_dtype().stored_bytes(k * n) + w.dtype.size() * blocks * n;
        if !p.symmetric {
            let zero_points = fresh(&mut used, format!("{weight}.zero_points"));
            new_inits.push(Initializer {
                name: zero_points.clone(),
                dtype: p.value_dtype(),
                shape: vec![blocks, n],
                source: part(QuantPart::ZeroPoints),
            });
            stored += p.value_dtype().stored_bytes(blocks * n);
            dq_inputs.push(zero_points);
        }
        if w.base != weight {
            tied.insert(w.base.to_string(), dq_inputs.clone());
        }
        let out = fresh(&mut used, format!("{weight}.dequantized"));
        new_nodes.push(Node {
            name: fresh(&mut used, format!("{weight}.dequantize")),
            domain: String::new(),
            op_type: "DequantizeLinear".into(),
            inputs: dq_inputs,
            outputs: vec![out.clone()],
            attrs: Attrs::from([
                ("axis".to_string(), Attr::Int(0)),
                ("block_size".to_string(), Attr::Int(p.block_size as i64)),
            ]),
        });
        summary.weights += 1;
        summary.matmuls += 1;
        summary.float_bytes += (k * n * w.dtype.size()) as u64;
        summary.quantized_bytes += stored as u64;
        dequantized.insert(weight.to_string(), out.clone());
        rewired.push((index, out));
    }
    for (index, out) in rewired {
        graph.nodes[index].inputs[1] = out;
    }
    graph.initializers.extend(new_inits);
    // The dequantizations read initializers only: they go first, before any reader.
    graph.nodes.splice(0..0, new_nodes);
    // Float weights nothing reads any more are dropped.
    let read: HashSet<&str> = graph
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().map(String::as_str))
        .chain(graph.outputs.iter().map(|o| o.name.as_str()))
        .collect();
    let dropped: HashSet<String> = dequantized
        .keys()
        .filter(|w| !read.contains(w.as_str()))
        .cloned()
        .collect();
    graph.initializers.retain(|i| !dropped.contains(&i.name));
    if request.embeddings {
        embeddings::quantize_embeddings(
            graph,
            request,
            gather_block_quantized,
            &tied,
            &mut used,
            &mut summary,
        );
    }
    graph.validate()?;
    Ok(summary)
}
