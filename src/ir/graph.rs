//! Graphs, nodes, values and initializers.

use std::collections::BTreeMap;

use super::{Attrs, DType, Shape, TensorSource};

/// A named, typed value: a graph input or output.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueInfo {
    /// The value name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Symbolic shape.
    pub shape: Shape,
}

impl ValueInfo {
    /// A value named `name` of `dtype` and `shape`.
    pub fn new(name: &str, dtype: DType, shape: Shape) -> ValueInfo {
        ValueInfo {
            name: name.to_string(),
            dtype,
            shape,
        }
    }
}

/// One operator application.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    /// Node name (informative; unique within the graph).
    pub name: String,
    /// Operator domain: `""` for standard ONNX, `"com.microsoft"` for contrib ops.
    pub domain: String,
    /// Operator type, e.g. `MatMul`.
    pub op_type: String,
    /// Input value names; an empty string marks an absent optional input.
    pub inputs: Vec<String>,
    /// Output value names; an empty string marks an unused optional output.
    pub outputs: Vec<String>,
    /// Attributes, sorted by name.
    pub attrs: Attrs,
}

/// A constant tensor of the graph: declared dtype and shape, data resolved lazily.
#[derive(Debug, Clone, PartialEq)]
pub struct Initializer {
    /// The initializer name (HF names; transformed ones get suffixes such as `_t`).
    pub name: String,
    /// The dtype the tensor is stored with in the model.
    pub dtype: DType,
    /// The shape the tensor is stored with in the model.
    pub shape: Vec<usize>,
    /// Where the data comes from; `None` declares the tensor without data (`--no-weights`).
    pub source: Option<TensorSource>,
}

impl Initializer {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size in bytes once stored in an ONNX file (4-bit types packed two per byte).
    pub fn byte_len(&self) -> usize {
        self.dtype.stored_bytes(self.numel())
    }
}

/// A computation graph: ordered inputs and outputs, nodes in topological order, initializers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    /// Graph name.
    pub name: String,
    /// Graph inputs, in order.
    pub inputs: Vec<ValueInfo>,
    /// Graph outputs, in order, each with an explicit dtype and shape.
    pub outputs: Vec<ValueInfo>,
    /// Nodes in topological order.
    pub nodes: Vec<Node>,
    /// Initializers, in the order they are saved.
    pub initializers: Vec<Initializer>,
    /// Declared types of intermediate values (from an imported model's `value_info`); used
    /// for ops whose output types mobius cannot infer.
    pub value_info: Vec<ValueInfo>,
    /// Inputs and outputs of a subgraph, and outputs of a main graph, declared with a type
    /// but no shape (ONNX leaves them to inference); their `shape` here is empty (not a
    /// scalar's: nothing is checked against it) and they are saved without one.
    pub unshaped: Vec<String>,
    /// Inputs and outputs of a subgraph declared without even a type (left to inference, as
    /// function bodies expanded by the `onnx` package leave them); their `dtype` here is a
    /// placeholder, never read, and they are saved with their name only. Always empty for a
    /// main graph.
    pub untyped: Vec<String>,
}

/// A model: a graph plus the opsets it imports and model-level metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// The main graph.
    pub graph: Graph,
    /// Opset imports: domain → version.
    pub opsets: BTreeMap<String, i64>,
    /// ONNX IR version to write.
    pub ir_version: i64,
    /// Producer name.
    pub producer_name: String,
    /// Producer version.
    pub producer_version: String,
}

impl Graph {
    /// Checks structural invariants: unique value producers, every node input defined before
    /// use, every graph output produced, initializer names unique.
    pub fn validate(&self) -> crate::Result<()> {
        let outputs: usize = self.nodes.iter().map(|n| n.outputs.len()).sum();
        let mut defined: rustc_hash::FxHashSet<&str> =
            rustc_hash::FxHashSet::with_capacity_and_hasher(
                self.inputs.len() + self.initializers.len() + outputs,
                Default::default(),
            );
        for v in &self.inputs {
            if !defined.insert(&v.name) {
                return Err(crate::Error::Graph(format!(
                    "duplicate graph input `{}`",
                    v.name
                )));
            }
        }
        for init in &self.initializers {
            if !defined.insert(&init.name) {
                return Err(crate::Error::Graph(format!(
                    "initializer `{}` duplicates another value",
                    init.name
                )));
            }
        }
        for node in &self.nodes {
            for input in node.reads() {
                if !defined.contains(input.as_str()) {
                    return Err(crate::Error::Graph(format!(
                        "node `{}` ({}) reads `{}` before it is defined",
                        node.name, node.op_type, input
                    )));
                }
            }
            for output in node.outputs.iter().filter(|o| !o.is_empty()) {
                if !defined.insert(output) {
                    return Err(crate::Error::Graph(format!(
                        "value `{}` is produced twice (node `{}`)",
                        output, node.name
                    )));
                }
            }
        }
        for out in &self.outputs {
            if !defined.contains(out.name.as_str()) {
                return Err(crate::Error::Graph(format!(
                    "graph output `{}` is never produced",
                    out.name
                )));
            }
        }
        Ok(())
    }

    /// Counts nodes per `domain::op_type` (standard ops without a prefix).
    pub fn op_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for n in &self.nodes {
            let key = if n.domain.is_empty() {
                n.op_type.clone()
            } else {
                format!("{}::{}", n.domain, n.op_type)
            };
            *counts.entry(key).or_insert(0) += 1;
        }
        counts
    }
}

impl Node {
    /// The subgraphs of the node's graph attributes, in attribute-name order.
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attrs.iter().filter_map(|(_, a)| match a {
            super::Attr::Graph(g) => Some(g.as_ref()),
            _ => None,
        })
    }

    /// The values of the enclosing graph that the node's subgraphs read (its implicit inputs):
    /// the [`Graph::free_values`] of each subgraph, in attribute-name order, each once.
    pub fn captures(&self) -> Vec<String> {
        let mut seen = rustc_hash::FxHashSet::default();
        let mut captures = Vec::new();
        for g in self.subgraphs() {
            for name in g.free_values() {
                if seen.insert(name.clone()) {
                    captures.push(name);
                }
            }
        }
        captures
    }

    /// Every value the node reads: its inputs (absent optional ones left out), then its
    /// [captures](Node::captures).
    pub fn reads(&self) -> Vec<String> {
        let mut reads: Vec<String> = self
            .inputs
            .iter()
            .filter(|i| !i.is_empty())
            .cloned()
            .collect();
        if self
            .attrs
            .iter()
            .any(|(_, a)| matches!(a, super::Attr::Graph(_)))
        {
            reads.extend(self.captures());
        }
        reads
    }
}

impl Graph {
    /// The names this graph reads but does not define (as graph input, initializer or node
    /// output), its nested subgraphs' included, in the order of first reading, each once: the
    /// values a subgraph takes from its enclosing scopes. Empty for a well-formed main graph.
    pub fn free_values(&self) -> Vec<String> {
        let defined: rustc_hash::FxHashSet<&str> = self
            .inputs
            .iter()
            .map(|v| v.name.as_str())
            .chain(self.initializers.iter().map(|i| i.name.as_str()))
            .chain(
                self.nodes
                    .iter()
                    .flat_map(|n| n.outputs.iter().map(String::as_str)),
            )
            .collect();
        let mut seen = rustc_hash::FxHashSet::default();
        let mut free = Vec::new();
        let reads = self
            .nodes
            .iter()
            .flat_map(Node::reads)
            // A subgraph output may be a value of the enclosing scope, passed through.
            .chain(self.outputs.iter().map(|o| o.name.clone()));
        for name in reads {
            if !defined.contains(name.as_str()) && seen.insert(name.clone()) {
                free.push(name);
            }
        }
        free
    }

    /// Renames the values this graph reads from its enclosing scopes (its
    /// [free values](Graph::free_values)) by `map`, in its nested subgraphs too; names the
    /// graph defines itself are left alone.
    pub fn rename_free(&mut self, map: &rustc_hash::FxHashMap<String, String>) {
        let defined: rustc_hash::FxHashSet<String> = self
            .inputs
            .iter()
            .map(|v| v.name.clone())
            .chain(self.initializers.iter().map(|i| i.name.clone()))
            .chain(self.nodes.iter().flat_map(|n| n.outputs.iter().cloned()))
            .collect();
        let map: rustc_hash::FxHashMap<String, String> = map
            .iter()
            .filter(|(from, _)| !defined.contains(from.as_str()))
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect();
        if map.is_empty() {
            return;
        }
        for node in &mut self.nodes {
            for input in &mut node.inputs {
                if let Some(to) = map.get(input.as_str()) {
                    *input = to.clone();
                }
            }
            node.rename_captures(&map);
        }
        for out in &mut self.outputs {
            // A subgraph output may pass an outer value straight through.
            if let Some(to) = map.get(out.name.as_str()) {
                out.name = to.clone();
            }
        }
    }

    /// Every value name defined anywhere in the graph: inputs, initializers, node outputs,
    /// those of nested subgraphs included.
    pub fn all_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .inputs
            .iter()
            .map(|v| v.name.as_str())
            .chain(self.initializers.iter().map(|i| i.name.as_str()))
            .collect();
        for node in &self.nodes {
            names.extend(node.outputs.iter().map(String::as_str));
            for g in node.subgraphs() {
                names.extend(g.all_names());
            }
        }
        names
    }
}

impl Node {
    /// Renames, by `map`, the values of the enclosing scope that the node's subgraphs read.
    pub fn rename_captures(&mut self, map: &rustc_hash::FxHashMap<String, String>) {
        let names: Vec<String> = self
            .attrs
            .iter()
            .filter(|(_, a)| matches!(a, super::Attr::Graph(_)))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            if let Some(super::Attr::Graph(mut g)) = self.attrs.get(&name).cloned() {
                g.rename_free(map);
                self.attrs.insert(name, super::Attr::Graph(g));
            }
        }
    }
}
