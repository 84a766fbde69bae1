//! IR → e-graph.

use egg::{Id, Language, Symbol};
use rustc_hash::FxHashMap;

use super::analysis::{
    class_data, literal_type, rebuild, ClassData, Kind, OnnxAnalysis, OnnxGraph,
};
use super::fingerprint::LeafValues;
use super::fold::MAX_INPUT_ELEMS;
use super::lang::Onnx;
use crate::ir::{Graph, TensorSource};
use crate::ops::types::{SymDim, TensorType};
use crate::ops::value::{AttrValue, Literal};
use crate::ops::{op_key, schema};
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
    let mut egraph = OnnxGraph::new(leaf_analysis(graph, fingerprints));
    let outputs: usize = graph.nodes.iter().map(|n| n.outputs.len()).sum();
    let mut names = Vec::with_capacity(outputs);
    let outs = walk(graph, &mut egraph, Some(&mut names))?;
    let root = egraph.add(Onnx::Root(outs));
    rebuild(&mut egraph);
    Ok(Lifted {
        egraph,
        root,
        names,
    })
}

/// The types of `graph`'s outputs as lifting infers them (`None` for an output that is no
/// tensor), without building the e-graph: one pass of the analysis over the nodes in order.
///
/// It infers what [`lift`] does. Lifting also merges classes: identical nodes (which have
/// identical data), and a class that folds to a constant with that constant's leaf, whose type
/// (the constant's, fully known) joins the class's; this pass joins that type in too.
pub fn output_types(graph: &Graph) -> Result<Vec<Option<TensorType>>> {
    let mut pass = Pass {
        analysis: leaf_analysis(graph, None),
        data: Vec::new(),
        leaves: FxHashMap::default(),
    };
    let outs = walk(graph, &mut pass, None)?;
    Ok(outs
        .iter()
        .map(|&id| pass.data[usize::from(id)].tensor().cloned())
        .collect())
}

/// The type of every value of `graph` (inputs, initializers, node outputs) as [`output_types`]
/// infers it, by name; values that are no tensor are left out.
pub fn value_types(graph: &Graph) -> Result<FxHashMap<String, TensorType>> {
    let mut pass = Pass {
        analysis: leaf_analysis(graph, None),
        data: Vec::new(),
        leaves: FxHashMap::default(),
    };
    let mut names = Vec::new();
    walk(graph, &mut pass, Some(&mut names))?;
    let leaves = graph
        .inputs
        .iter()
        .map(|v| &v.name)
        .chain(graph.initializers.iter().map(|i| &i.name));
    let mut types: FxHashMap<String, TensorType> = FxHashMap::default();
    for name in leaves {
        let leaf = if graph.inputs.iter().any(|v| &v.name == name) {
            Onnx::Input(Symbol::from(name.as_str()))
        } else {
            Onnx::Init(Symbol::from(name.as_str()))
        };
        if let Some(t) = pass
            .leaves
            .get(&leaf)
            .and_then(|&id| pass.data[usize::from(id)].tensor())
        {
            types.insert(name.clone(), t.clone());
        }
    }
    for (name, id) in names {
        if let Some(t) = pass.data[usize::from(id)].tensor() {
            types.insert(name, t.clone());
        }
    }
    Ok(types)
}

/// Where [`walk`] puts the nodes of a graph.
trait Sink {
    /// Adds `node` (its children added before), returning its class.
    fn add(&mut self, node: Onnx) -> Id;
    /// The analysis the classes are made with.
    fn analysis(&mut self) -> &mut OnnxAnalysis;
}

impl Sink for OnnxGraph {
    fn add(&mut self, node: Onnx) -> Id {
        OnnxGraph::add(self, node)
    }

    fn analysis(&mut self) -> &mut OnnxAnalysis {
        &mut self.analysis
    }
}

/// [`output_types`]' sink: the data of every added node, by id (leaves added once: most
/// nodes share their attribute values).
struct Pass {
    analysis: OnnxAnalysis,
    data: Vec<ClassData>,
    leaves: FxHashMap<Onnx, Id>,
}

impl Sink for Pass {
    fn add(&mut self, node: Onnx) -> Id {
        if node.is_leaf() {
            if let Some(&id) = self.leaves.get(&node) {
                return id;
            }
        }
        let data = &self.data;
        let mut made = class_data(&self.analysis, &node, |id| &data[usize::from(id)]);
        // Lifting merges an op class that folds to a constant with the constant's leaf.
        if let (Onnx::Op(_), Kind::Tensor(ty), Some(k)) = (&node, &mut made.kind, &made.konst) {
            *ty = ty.join(&literal_type(k));
        }
        self.data.push(made);
        let id = Id::from(self.data.len() - 1);
        if node.is_leaf() {
            self.leaves.insert(node, id);
        }
        id
    }

    fn analysis(&mut self) -> &mut OnnxAnalysis {
        &mut self.analysis
    }
}

/// The analysis of `graph`'s leaves: the types of its inputs and initializers, and the values
/// of its small inline initializers.
fn leaf_analysis(graph: &Graph, fingerprints: Option<LeafValues>) -> OnnxAnalysis {
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
    analysis
}

/// Adds `graph`'s inputs, initializers and nodes (in order) to `sink`; pushes every node
/// output's name and class to `names`, in node order. Returns the classes of the graph outputs.
fn walk(
    graph: &Graph,
    sink: &mut impl Sink,
    mut names: Option<&mut Vec<(String, Id)>>,
) -> Result<Vec<Id>> {
    let outputs: usize = graph.nodes.iter().map(|n| n.outputs.len()).sum();
    let mut values: FxHashMap<&str, Id> = FxHashMap::with_capacity_and_hasher(
        graph.inputs.len() + graph.initializers.len() + outputs,
        Default::default(),
    );
    for v in &graph.inputs {
        values.insert(
            &v.name,
            sink.add(Onnx::Input(Symbol::from(v.name.as_str()))),
        );
    }
    for init in &graph.initializers {
        values.insert(
            &init.name,
            sink.add(Onnx::Init(Symbol::from(init.name.as_str()))),
        );
    }
    let absent = sink.add(Onnx::Absent);
    let declared_types: FxHashMap<&str, TensorType> = graph
        .value_info
        .iter()
        .map(|v| (v.name.as_str(), TensorType::of(v.dtype, &v.shape)))
        .collect();
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
        // The values a subgraph reads from this graph are children too, after the inputs:
        // the node depends on them, and lowering renames them inside the subgraph if their
        // producer's name changes ([`super::lower`]).
        let captures = node.captures();
        for name in &captures {
            children.push(values.get(name.as_str()).copied().ok_or_else(|| {
                Error::Graph(format!(
                    "a subgraph of node `{}` reads undefined value `{name}`",
                    node.name
                ))
            })?);
        }
        let key = op_key(&node.domain, &node.op_type);
        let attr_names: Vec<&str> = match schema(&key) {
            Some(s) if node.attrs.keys().all(|k| s.contains(&k.as_str())) => s.to_vec(),
            _ => node.attrs.keys().map(String::as_str).collect(),
        };
        for name in &attr_names {
            let value = node
                .attrs
                .get(name)
                .map_or(AttrValue::Unset, AttrValue::from_attr);
            children.push(sink.add(Onnx::Attr(value)));
        }
        let outputs = node.outputs.len().max(1);
        let enode = Onnx::op(
            &key,
            &attr_names,
            node.inputs.len() + captures.len(),
            outputs,
            children,
        );
        let declared: Vec<TensorType> = node
            .outputs
            .iter()
            .map(|o| declared_types.get(o.as_str()).cloned().unwrap_or_default())
            .collect();
        if declared.iter().any(|t| *t != TensorType::default()) {
            sink.analysis().declared.insert(enode.clone(), declared);
        }
        let op = sink.add(enode);
        for (i, out) in node.outputs.iter().enumerate() {
            if out.is_empty() {
                continue;
            }
            let id = if outputs == 1 {
                op
            } else {
                sink.add(Onnx::Get {
                    index: i,
                    tuple: [op],
                })
            };
            values.insert(out, id);
            if let Some(names) = names.as_deref_mut() {
                names.push((out.clone(), id));
            }
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
    Ok(outs)
}
