//! IR → e-graph.

use egg::{Id, Symbol};
use rustc_hash::FxHashMap;

use super::analysis::{rebuild, OnnxAnalysis, OnnxGraph};
use super::fingerprint::LeafValues;
use super::fold::MAX_INPUT_ELEMS;
use super::lang::{AttrValue, Literal, Onnx};
use super::schema::{op_key, schema};
use super::types::{SymDim, TensorType};
use crate::ir::{Graph, TensorSource};
use crate::{Error, Result};

/// A graph lifted into an e-graph.
#[derive(Debug)]
pub struct Lifted {
    /// The e-graph, rebuilt.
    pub egraph: OnnxGraph,
    /// The class of the `root` node over the graph outputs.
    pub root: Id,
    /// Every node output's name and class, in node order (the lowering reuses these names).
    pub names: Vec<(String, Id)>,
}

/// Lifts `graph` into a fresh e-graph.
pub fn lift(graph: &Graph) -> Result<Lifted> {
    lift_with(graph, None)
}

/// Lifts `graph`; with `fingerprints`, every class also carries its value on those leaf
/// values (verification mode).
pub fn lift_with(graph: &Graph, fingerprints: Option<LeafValues>) -> Result<Lifted> {
    let mut analysis = OnnxAnalysis {
        fingerprint_leaves: fingerprints,
        ..OnnxAnalysis::default()
    };
    for v in &graph.inputs {
        analysis.leaf_types.insert(
            Symbol::from(v.name.as_str()),
            TensorType::of(v.dtype, &v.shape),
        );
    }
    for init in &graph.initializers {
        let name = Symbol::from(init.name.as_str());
        let shape = init
            .shape
            .iter()
            .map(|&d| SymDim::Known(d as i64))
            .collect();
        analysis
            .leaf_types
            .insert(name, TensorType::new(init.dtype, shape));
        if let Some(TensorSource::Inline(data)) = &init.source {
            if data.dtype == init.dtype && data.shape.iter().product::<usize>() <= MAX_INPUT_ELEMS {
                analysis.leaf_values.insert(name, Literal::from(data));
            }
        }
    }
    let mut egraph = OnnxGraph::new(analysis);
    let outputs: usize = graph.nodes.iter().map(|n| n.outputs.len()).sum();
    let mut values: FxHashMap<&str, Id> = FxHashMap::with_capacity_and_hasher(
        graph.inputs.len() + graph.initializers.len() + outputs,
        Default::default(),
    );
    for v in &graph.inputs {
        values.insert(
            &v.name,
            egraph.add(Onnx::Input(Symbol::from(v.name.as_str()))),
        );
    }
    for init in &graph.initializers {
        values.insert(
            &init.name,
            egraph.add(Onnx::Init(Symbol::from(init.name.as_str()))),
        );
    }
    let absent = egraph.add(Onnx::Absent);
    let declared_types: FxHashMap<&str, TensorType> = graph
        .value_info
        .iter()
        .map(|v| (v.name.as_str(), TensorType::of(v.dtype, &v.shape)))
        .collect();
    let mut names = Vec::with_capacity(outputs);
    for node in &graph.nodes {
        let mut children = node
            .inputs
            .iter()
            .map(|name| {
                if name.is_empty() {
                    Ok(absent)
                } else {
                    values.get(name.as_str()).copied().ok_or_else(|| {
                        Error::Graph(format!(
                            "node `{}` reads undefined value `{name}`",
                            node.name
                        ))
                    })
                }
            })
            .collect::<Result<Vec<Id>>>()?;
        let key = op_key(&node.domain, &node.op_type);
        let attr_names: Vec<&str> = match schema(&key) {
            Some(s) if node.attrs.keys().all(|k| s.contains(&k.as_str())) => s.to_vec(),
            _ => node.attrs.keys().map(String::as_str).collect(),
        };
        for name in &attr_names {
            let value = node
                .attrs
                .get(*name)
                .map_or(AttrValue::Unset, AttrValue::from_attr);
            children.push(egraph.add(Onnx::Attr(value)));
        }
        let outputs = node.outputs.len().max(1);
        let enode = Onnx::op(&key, &attr_names, node.inputs.len(), outputs, children);
        let declared: Vec<TensorType> = node
            .outputs
            .iter()
            .map(|o| declared_types.get(o.as_str()).cloned().unwrap_or_default())
            .collect();
        if declared.iter().any(|t| *t != TensorType::default()) {
            egraph.analysis.declared.insert(enode.clone(), declared);
        }
        let op = egraph.add(enode);
        for (i, out) in node.outputs.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            let id = if outputs == 1 {
                op
            } else {
                egraph.add(Onnx::Get {
                    index: i,
                    tuple: [op],
                })
            };
            values.insert(out, id);
            names.push((out.clone(), id));
        }
    }
    let outs = graph
        .outputs
        .iter()
        .map(|o| {
            values
                .get(o.name.as_str())
                .copied()
                .ok_or_else(|| Error::Graph(format!("graph output `{}` is never produced", o.name)))
        })
        .collect::<Result<Vec<Id>>>()?;
    let root = egraph.add(Onnx::Root(outs));
    rebuild(&mut egraph);
    Ok(Lifted {
        egraph,
        root,
        names,
    })
}
