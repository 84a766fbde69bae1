//! Values the ops take besides their input tensors: attribute values and small constant
//! tensors, both hashable so the e-graph can hold them.

use egg::Symbol;

use crate::ir::{Attr, DType, Graph, TensorData};

/// An attribute value in the e-graph (hashable: floats by their bits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttrValue {
    /// The node does not set this attribute.
    Unset,
    /// An integer.
    Int(i64),
    /// A float, by its IEEE bits.
    Float(u32),
    /// A string.
    Str(Symbol),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of floats, by their bits.
    Floats(Vec<u32>),
    /// A list of strings.
    Strs(Vec<Symbol>),
    /// A tensor attribute.
    Tensor(Box<Literal>),
    /// A subgraph (control flow).
    Graph(Subgraph),
}

/// A subgraph attribute in the e-graph, opaque to the rules: compared, ordered and hashed by
/// its text, so that equal subgraphs share one leaf and leaves order the same way every run.
#[derive(Debug, Clone)]
pub struct Subgraph {
    text: std::sync::Arc<str>,
    graph: std::sync::Arc<Graph>,
}

impl Subgraph {
    /// The e-graph form of `graph`.
    pub fn new(graph: &Graph) -> Subgraph {
        Subgraph {
            text: format!("{graph:?}").into(),
            graph: std::sync::Arc::new(graph.clone()),
        }
    }

    /// The subgraph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
}

impl PartialEq for Subgraph {
    fn eq(&self, other: &Subgraph) -> bool {
        self.text == other.text
    }
}

impl Eq for Subgraph {}

impl std::hash::Hash for Subgraph {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl PartialOrd for Subgraph {
    fn partial_cmp(&self, other: &Subgraph) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Subgraph {
    fn cmp(&self, other: &Subgraph) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl AttrValue {
    /// The e-graph form of an IR attribute.
    pub fn from_attr(attr: &Attr) -> AttrValue {
        match attr {
            Attr::Float(v) => AttrValue::Float(v.to_bits()),
            Attr::Int(v) => AttrValue::Int(*v),
            Attr::String(s) => AttrValue::Str(Symbol::from(s.as_str())),
            Attr::Tensor(t) => AttrValue::Tensor(Box::new(Literal::from(t))),
            Attr::Floats(v) => AttrValue::Floats(v.iter().map(|f| f.to_bits()).collect()),
            Attr::Ints(v) => AttrValue::Ints(v.clone()),
            Attr::Strings(v) => {
                AttrValue::Strs(v.iter().map(|s| Symbol::from(s.as_str())).collect())
            }
            Attr::Graph(g) => AttrValue::Graph(Subgraph::new(g)),
        }
    }

    /// The IR attribute, or `None` for [`AttrValue::Unset`].
    pub fn to_attr(&self) -> Option<Attr> {
        Some(match self {
            AttrValue::Unset => return None,
            AttrValue::Int(v) => Attr::Int(*v),
            AttrValue::Float(b) => Attr::Float(f32::from_bits(*b)),
            AttrValue::Str(s) => Attr::String(s.to_string()),
            AttrValue::Ints(v) => Attr::Ints(v.clone()),
            AttrValue::Floats(v) => Attr::Floats(v.iter().map(|b| f32::from_bits(*b)).collect()),
            AttrValue::Strs(v) => Attr::Strings(v.iter().map(|s| s.to_string()).collect()),
            AttrValue::Tensor(t) => Attr::Tensor(t.to_tensor()),
            AttrValue::Graph(g) => Attr::Graph(Box::new(g.graph().clone())),
        })
    }

    /// The integer, if this is an `Int`.
    pub fn int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The integer list, if this is `Ints`.
    pub fn ints(&self) -> Option<&[i64]> {
        match self {
            AttrValue::Ints(v) => Some(v),
            _ => None,
        }
    }
}

/// A small constant tensor held in an e-node (hashable).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Literal {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Little-endian element bytes.
    pub bytes: Vec<u8>,
}

impl From<&TensorData> for Literal {
    fn from(t: &TensorData) -> Literal {
        Literal {
            dtype: t.dtype,
            shape: t.shape.clone(),
            bytes: t.bytes.clone(),
        }
    }
}

impl Literal {
    /// The IR tensor.
    pub fn to_tensor(&self) -> TensorData {
        TensorData {
            dtype: self.dtype,
            shape: self.shape.clone(),
            bytes: self.bytes.clone(),
        }
    }
}
