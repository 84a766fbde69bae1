//! The e-graph language: one e-node kind per ONNX op, with inputs and then attributes (in
//! [`schema`](super::schema) order) as children; leaves for graph inputs, initializers,
//! attribute values, folded constants and absent optional inputs; `get<i>` projections of
//! multi-output ops; one `root` over the graph outputs.
//!
//! Text form (used by rule patterns and `Display`):
//! `(RMSNormalization ?x ?w ?axis ?eps ?stash)`, `(get1 (Attention/3 …))`,
//! `input:input_ids`, `init:model.norm.weight`, `i:-1`, `f:1e-05`, `s:tanh`, `ints:1,0`,
//! `unset`, `none`; an op with several outputs carries `/N`, a contrib op its domain
//! (`com.microsoft::SkipSimplifiedLayerNormalization/4`).

use std::fmt;

use egg::{Id, Language, Symbol};
use smallvec::SmallVec;

use crate::ops::schema;
use crate::ops::value::{AttrValue, Literal};

/// An operator application.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpNode {
    /// `OpType` or `domain::OpType`.
    pub op: Symbol,
    /// Attribute names after the inputs, comma-separated (the op's schema for known ops).
    pub attrs: Symbol,
    /// How many children are inputs (the rest are attributes).
    pub inputs: usize,
    /// Number of outputs; more than one makes the node tuple-valued (read through `get<i>`).
    pub outputs: usize,
    /// Inputs, then one attribute leaf per attribute name.
    pub children: Children,
}

/// The children of an op e-node, inline up to 8 (most ops: their inputs and attributes): an
/// e-node is copied into the hash-cons table, its class and egg's node list, and a search or an
/// analysis visiting it then reads its children where it reads the node.
pub type Children = SmallVec<[Id; 8]>;

impl OpNode {
    /// The input children.
    pub fn input_ids(&self) -> &[Id] {
        &self.children[..self.inputs]
    }

    /// The attribute children, aligned with [`OpNode::attr_names`].
    pub fn attr_ids(&self) -> &[Id] {
        &self.children[self.inputs..]
    }

    /// The attribute names.
    pub fn attr_names(&self) -> Vec<&str> {
        split_names(self.attrs.as_str())
    }

    /// The child holding attribute `name`, if the op has it.
    pub fn attr_id(&self, name: &str) -> Option<Id> {
        let i = self.attr_names().iter().position(|n| *n == name)?;
        Some(self.attr_ids()[i])
    }

    /// `(domain, op_type)`.
    pub fn domain_and_type(&self) -> (&str, &str) {
        match self.op.as_str().split_once("::") {
            Some((d, t)) => (d, t),
            None => ("", self.op.as_str()),
        }
    }
}

fn split_names(s: &str) -> Vec<&str> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split(',').collect()
    }
}

/// The e-node type of the optimizer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Onnx {
    /// An operator.
    Op(OpNode),
    /// Output `index` of a multi-output op.
    Get {
        /// Output position.
        index: usize,
        /// The tuple-valued op class.
        tuple: [Id; 1],
    },
    /// A graph input, by name.
    Input(Symbol),
    /// An initializer, by name.
    Init(Symbol),
    /// A constant computed by the optimizer (folded), saved as a new initializer.
    Const(Box<Literal>),
    /// An attribute value.
    Attr(AttrValue),
    /// An absent optional input.
    Absent,
    /// The graph outputs, in order.
    Root(Vec<Id>),
}

impl Onnx {
    /// A new op node; `attrs` are the attribute names matching the attribute children.
    pub fn op(
        op: &str,
        attrs: &[&str],
        inputs: usize,
        outputs: usize,
        children: impl Into<Children>,
    ) -> Onnx {
        Onnx::Op(OpNode {
            op: Symbol::from(op),
            attrs: Symbol::from(attrs.join(",")),
            inputs,
            outputs,
            children: children.into(),
        })
    }

    /// The op node, if this is one.
    pub fn as_op(&self) -> Option<&OpNode> {
        match self {
            Onnx::Op(op) => Some(op),
            _ => None,
        }
    }
}

/// The key `egg` indexes e-classes by for pattern search ([`Language::discriminant`]): the
/// variant, and for an op its name. Keying ops by name lets a rule rooted at `MatMul` visit
/// only the classes holding a `MatMul` instead of every class holding some op, so a search
/// costs what it matches rather than the size of the graph. Nodes that
/// [`matches`](Language::matches) have equal keys, and nodes with equal keys are adjacent in
/// [`Onnx`]'s order (the variant, then the op name), as `egg` requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OnnxKind(std::mem::Discriminant<Onnx>, Option<Symbol>);

impl Language for Onnx {
    type Discriminant = OnnxKind;

    fn discriminant(&self) -> OnnxKind {
        let op = match self {
            Onnx::Op(op) => Some(op.op),
            _ => None,
        };
        OnnxKind(std::mem::discriminant(self), op)
    }

    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (Onnx::Op(a), Onnx::Op(b)) => {
                a.op == b.op
                    && a.attrs == b.attrs
                    && a.inputs == b.inputs
                    && a.outputs == b.outputs
                    && a.children.len() == b.children.len()
            }
            (Onnx::Get { index: a, .. }, Onnx::Get { index: b, .. }) => a == b,
            (Onnx::Root(a), Onnx::Root(b)) => a.len() == b.len(),
            (a, b) if a.children().is_empty() && b.children().is_empty() => a == b,
            _ => false,
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            Onnx::Op(op) => &op.children,
            Onnx::Get { tuple, .. } => tuple,
            Onnx::Root(ids) => ids,
            _ => &[],
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            Onnx::Op(op) => &mut op.children,
            Onnx::Get { tuple, .. } => tuple,
            Onnx::Root(ids) => ids,
            _ => &mut [],
        }
    }
}

impl fmt::Display for Onnx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Onnx::Op(op) => {
                write!(f, "{}", op.op)?;
                if op.outputs != 1 {
                    write!(f, "/{}", op.outputs)?;
                }
                let canonical = schema(op.op.as_str()).map(|s| s.join(","));
                if canonical.as_deref() != Some(op.attrs.as_str()) {
                    write!(f, "{{{}}}", op.attrs)?;
                }
                Ok(())
            }
            Onnx::Get { index, .. } => write!(f, "get{index}"),
            Onnx::Input(name) => write!(f, "input:{name}"),
            Onnx::Init(name) => write!(f, "init:{name}"),
            Onnx::Const(lit) => write!(f, "const:{}{:?}", lit.dtype, lit.shape),
            Onnx::Attr(a) => match a {
                AttrValue::Unset => f.write_str("unset"),
                AttrValue::Int(v) => write!(f, "i:{v}"),
                AttrValue::Float(b) => write!(f, "f:{:?}", f32::from_bits(*b)),
                AttrValue::Str(s) => write!(f, "s:{s}"),
                AttrValue::Ints(v) => write!(f, "ints:{}", join(v.iter())),
                AttrValue::Floats(v) => {
                    write!(f, "floats:{}", join(v.iter().map(|b| f32::from_bits(*b))))
                }
                AttrValue::Strs(v) => write!(f, "strs:{}", join(v.iter())),
                AttrValue::Tensor(t) => write!(f, "tensor:{}{:?}", t.dtype, t.shape),
                AttrValue::Graph(g) => write!(f, "graph:{}", g.graph().name),
            },
            Onnx::Absent => f.write_str("none"),
            Onnx::Root(_) => f.write_str("root"),
        }
    }
}

fn join<T: fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

/// Why a pattern token could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseOpError(pub String);

impl fmt::Display for ParseOpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseOpError {}

impl egg::FromOp for Onnx {
    type Error = ParseOpError;

    fn from_op(token: &str, children: Vec<Id>) -> Result<Self, Self::Error> {
        let err = |m: &str| ParseOpError(format!("`{token}`: {m}"));
        let leaf = |node: Onnx| {
            if children.is_empty() {
                Ok(node)
            } else {
                Err(err("takes no children"))
            }
        };
        if let Some(rest) = token.strip_prefix("get") {
            if let Ok(index) = rest.parse::<usize>() {
                let [tuple] = children[..] else {
                    return Err(err("takes exactly one child"));
                };
                return Ok(Onnx::Get {
                    index,
                    tuple: [tuple],
                });
            }
        }
        match token {
            "none" => return leaf(Onnx::Absent),
            "unset" => return leaf(Onnx::Attr(AttrValue::Unset)),
            "root" => return Ok(Onnx::Root(children)),
            _ => {}
        }
        if let Some((kind, value)) = token
            .split_once(':')
            .filter(|(k, _)| !k.is_empty() && !k.contains('.'))
        {
            let attr = match kind {
                "input" => return leaf(Onnx::Input(Symbol::from(value))),
                "init" => return leaf(Onnx::Init(Symbol::from(value))),
                "i" => AttrValue::Int(value.parse().map_err(|_| err("bad integer"))?),
                "f" => AttrValue::Float(
                    value
                        .parse::<f32>()
                        .map_err(|_| err("bad float"))?
                        .to_bits(),
                ),
                "s" => AttrValue::Str(Symbol::from(value)),
                "ints" => AttrValue::Ints(
                    split_names(value)
                        .iter()
                        .map(|v| v.parse().map_err(|_| err("bad integer list")))
                        .collect::<Result<_, _>>()?,
                ),
                _ => return Err(err("unknown leaf kind")),
            };
            return leaf(Onnx::Attr(attr));
        }
        let (op, outputs) = match token.rsplit_once('/') {
            Some((op, n)) => (op, n.parse::<usize>().map_err(|_| err("bad output count"))?),
            None => (token, 1),
        };
        let names = schema(op).ok_or_else(|| err("unknown op (register it in src/ops)"))?;
        if children.len() < names.len() {
            return Err(err(&format!(
                "needs its {} attribute children {:?} after the inputs",
                names.len(),
                names
            )));
        }
        let inputs = children.len() - names.len();
        Ok(Onnx::op(op, names, inputs, outputs, children))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egg::RecExpr;

    #[test]
    fn patterns_parse_and_print_back() {
        for text in [
            "(RMSNormalization (Add input:x input:y) init:w i:-1 f:1e-5 unset)",
            "(get1 (Attention/3 input:q input:k input:v none none none i:1 unset unset unset unset f:0.0 unset))",
            "(Transpose input:x ints:1,0)",
        ] {
            let e: RecExpr<Onnx> = text.parse().unwrap();
            let again: RecExpr<Onnx> = e.to_string().parse().unwrap();
            assert_eq!(e, again, "{text}");
        }
    }

    #[test]
    fn bad_tokens_are_explained() {
        let err = "(NoSuchOp input:x)"
            .parse::<RecExpr<Onnx>>()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("NoSuchOp") && err.contains("unknown op"),
            "{err}"
        );
        let err = "(RMSNormalization input:x init:w)"
            .parse::<RecExpr<Onnx>>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("attribute children"), "{err}");
    }
}
