//! The quantization request applied to a graph: every float MatMul weight (a 2-D
//! initializer `W [K, N]` read as `MatMul`'s second input) becomes
//! `DequantizeLinear(Wq, scales[, zero_points]; axis 0, block_size B)`, with `Wq`, `scales` and
//! `zero_points` lazy [`TensorSource::Quantize`] parts of `W`, computed when the model is saved.
//!
//! This fake-quantized graph is standard ONNX (opset 21+) and *defines* the quantized model:
//! the optimizer's rules then only change its form (e.g. into `com.microsoft::MatMulNBits`
//! where the EP runs it), never its values, so every rule stays an equivalence.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::ir::{
    Attr, Attrs, DType, Graph, Initializer, Node, QuantParams, QuantPart, TensorSource,
};
use crate::Result;

/// What to quantize and how.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantRequest {
    /// Bits, block size and symmetry.
    pub params: QuantParams,
    /// Weights to keep in float: a weight is kept when its initializer name or its MatMul
    /// node's name matches one of these (`*` matches any run of characters; a pattern
    /// without `*` matches anywhere in the name).
    pub exclude: Vec<String>,
    /// Quantize the token-embedding tables too (see [`super::embeddings`]).
    pub embeddings: bool,
}

impl QuantRequest {
    /// The first exclusion pattern matching one of `names`.
    pub(super) fn excluding(&self, names: &[&str]) -> Option<&str> {
        self.exclude
            .iter()
            .find(|pat| names.iter().any(|name| name_matches(pat, name)))
            .map(String::as_str)
    }
}

/// `[rows, cols]` of a weight that can be quantized: a non-empty 2-D f32/f16/bf16 tensor.
pub(super) fn float_matrix(dtype: DType, shape: &[usize]) -> Option<[usize; 2]> {
    match shape {
        &[rows, cols] if dtype.is_float() && dtype != DType::F64 && rows > 0 && cols > 0 => {
            Some([rows, cols])
        }
        _ => None,
    }
}

/// What [`quantize_graph`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantSummary {
    /// Weights quantized.
    pub weights: usize,
    /// MatMul nodes now reading a quantized weight.
    pub matmuls: usize,
    /// Embedding tables quantized.
    pub embeddings: usize,
    /// Bytes of the quantized weights in float (their dtype).
    pub float_bytes: u64,
    /// Bytes of their quantized values, scales and zero points as stored.
    pub quantized_bytes: u64,
    /// Weights kept in float because `exclude` matched, with the pattern.
    pub excluded: Vec<(String, String)>,
    /// A remark on how the request was carried out, if any.
    pub note: Option<String>,
    /// Whether a tied LM head and its embedding share one quantized table.
    pub shared: bool,
    /// Float tables kept in their checkpoint's narrower type (see
    /// [`super::narrow_tables`]), with that type.
    pub narrowed: Vec<(String, DType)>,
}

impl QuantSummary {
    /// Records that `weight` stays float because of `pattern` (once).
    pub(super) fn exclude(&mut self, weight: String, pattern: &str) {
        if !self.excluded.iter().any(|(w, _)| *w == weight) {
            self.excluded.push((weight, pattern.to_string()));
        }
    }
}

impl std::fmt::Display for QuantSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{} MatMul weights quantized ({} nodes)",
            self.weights, self.matmuls
        )?;
        match self.embeddings {
            0 => {}
            1 => write!(f, " and 1 embedding table")?,
            n => write!(f, " and {n} embedding tables")?,
        }
        write!(
            f,
            ": {:.2} MiB → {:.2} MiB",
            mib(self.float_bytes),
            mib(self.quantized_bytes)
        )?;
        for (name, pattern) in &self.excluded {
            write!(f, "; kept in float: {name} (--quant-exclude {pattern})")?;
        }
        if self.shared {
            write!(f, " (the tied LM head and the embedding share one table)")?;
        }
        for (name, dtype) in &self.narrowed {
            write!(
                f,
                "; {name} kept in {dtype} as in the checkpoint (its rows cast to f32)"
            )?;
        }
        if let Some(note) = &self.note {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// Whether `caps` runs `com.microsoft::GatherBlockQuantized` for a model of `dtype` (the
/// 4-bit form of `--quant-embeddings`).
pub fn runs_gather_block_quantized(caps: &crate::ep::EpCapabilities, dtype: DType) -> bool {
    caps.supports_contrib_ops
        && caps.supports_matmul_nbits
        && matches!(dtype, DType::F32 | DType::F16)
}

/// Whether `name` matches `pattern` (see [`QuantRequest::exclude`]).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains('*') {
        return name.contains(pattern);
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

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

/// A fresh value name from `stem`, recorded in `used`.
pub(crate) fn fresh(used: &mut HashSet<String>, stem: String) -> String {
    let mut name = stem.clone();
    let mut i = 1;
    while used.contains(&name) {
        name = format!("{stem}_{i}");
        i += 1;
    }
    used.insert(name.clone());
    name
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
        super::embeddings::quantize_embeddings(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusion_patterns_match_substrings_and_globs() {
        assert!(name_matches("lm_head", "lm_head.weight"));
        assert!(name_matches("mlp", "model.layers.0.mlp.up_proj.weight"));
        assert!(!name_matches("lm_head", "model.embed_tokens.weight"));
        assert!(name_matches(
            "model.layers.*.mlp.*",
            "model.layers.3.mlp.down_proj.weight"
        ));
        assert!(!name_matches(
            "model.layers.*.mlp.*",
            "model.layers.3.self_attn.q_proj.weight"
        ));
        assert!(name_matches("*_proj.weight", "x.q_proj.weight"));
        assert!(!name_matches("*_proj.weight", "x.q_proj.bias"));
        assert!(name_matches("*", "anything"));
    }
}
