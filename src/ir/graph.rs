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
#[derive(Debug, Clone, PartialEq)]
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
            for input in node.inputs.iter().filter(|i| !i.is_empty()) {
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
