//! Values the ops take besides their input tensors: attribute values and small constant
//! tensors, both hashable so the e-graph can hold them.

use egg::Symbol;

use crate::ir::{Attr, DType, TensorData};

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
