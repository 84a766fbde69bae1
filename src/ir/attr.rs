//! Node attributes.

use super::tensor::TensorData;

/// The value of a node attribute, in the ONNX attribute kinds mobius handles.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    /// A single float (`AttributeProto.f`).
    Float(f32),
    /// A single integer (`AttributeProto.i`).
    Int(i64),
    /// A string (`AttributeProto.s`).
    String(String),
    /// A tensor (`AttributeProto.t`), e.g. the value of a `Constant` node.
    Tensor(TensorData),
    /// A list of floats.
    Floats(Vec<f32>),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of strings.
    Strings(Vec<String>),
}
