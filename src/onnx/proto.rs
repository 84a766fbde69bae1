//! The subset of the ONNX protobuf messages (onnx.proto, IR version 11) that mobius reads and
//! writes, declared with prost derives so that building needs no `protoc`.
//!
//! Field numbers follow onnx.proto exactly; fields mobius never uses are omitted (prost skips
//! unknown fields when decoding).

/// `ModelProto`: the top-level container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ModelProto {
    /// `ir_version = 1`.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// `opset_import = 8`.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// `producer_name = 2`.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// `producer_version = 3`.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// `domain = 4`.
    #[prost(string, tag = "4")]
    pub domain: String,
    /// `model_version = 5`.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// `doc_string = 6`.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// `graph = 7`.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// `metadata_props = 14`.
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
    /// `functions = 25`: model-local functions.
    #[prost(message, repeated, tag = "25")]
    pub functions: Vec<FunctionProto>,
}

/// `FunctionProto`: a model-local function (its nodes are expanded at call sites on import).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct FunctionProto {
    /// `name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `input = 4`.
    #[prost(string, repeated, tag = "4")]
    pub input: Vec<String>,
    /// `output = 5`.
    #[prost(string, repeated, tag = "5")]
    pub output: Vec<String>,
    /// `attribute = 6`: names of attributes without defaults.
    #[prost(string, repeated, tag = "6")]
    pub attribute: Vec<String>,
    /// `node = 7`.
    #[prost(message, repeated, tag = "7")]
    pub node: Vec<NodeProto>,
    /// `opset_import = 9`: the opsets the body uses.
    #[prost(message, repeated, tag = "9")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// `domain = 10`.
    #[prost(string, tag = "10")]
    pub domain: String,
    /// `attribute_proto = 11`: attributes with defaults.
    #[prost(message, repeated, tag = "11")]
    pub attribute_proto: Vec<AttributeProto>,
}

/// `OperatorSetIdProto`: one opset import.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct OperatorSetIdProto {
    /// `domain = 1`.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// `version = 2`.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `StringStringEntryProto`: a key/value pair.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StringStringEntryProto {
    /// `key = 1`.
    #[prost(string, tag = "1")]
    pub key: String,
    /// `value = 2`.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `GraphProto`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GraphProto {
    /// `node = 1`.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// `name = 2`.
    #[prost(string, tag = "2")]
    pub name: String,
    /// `initializer = 5`.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// `doc_string = 10`.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// `input = 11`.
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// `output = 12`.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// `value_info = 13`.
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeProto {
    /// `input = 1`.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// `output = 2`.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// `name = 3`.
    #[prost(string, tag = "3")]
    pub name: String,
    /// `op_type = 4`.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// `attribute = 5`.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// `doc_string = 6`.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// `domain = 7`.
    #[prost(string, tag = "7")]
    pub domain: String,
}

/// `AttributeProto.AttributeType` values used here.
pub mod attribute_type {
    /// `FLOAT`.
    pub const FLOAT: i32 = 1;
    /// `INT`.
    pub const INT: i32 = 2;
    /// `STRING`.
    pub const STRING: i32 = 3;
    /// `TENSOR`.
    pub const TENSOR: i32 = 4;
    /// `GRAPH`.
    pub const GRAPH: i32 = 5;
    /// `FLOATS`.
    pub const FLOATS: i32 = 6;
    /// `INTS`.
    pub const INTS: i32 = 7;
    /// `STRINGS`.
    pub const STRINGS: i32 = 8;
}

/// `AttributeProto`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AttributeProto {
    /// `name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `type = 20` (see [`attribute_type`]).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
    /// `f = 2`.
    #[prost(float, tag = "2")]
    pub f: f32,
    /// `i = 3`.
    #[prost(int64, tag = "3")]
    pub i: i64,
    /// `s = 4`.
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    /// `t = 5`.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// `g = 6`: a subgraph (control flow).
    #[prost(message, optional, boxed, tag = "6")]
    pub g: Option<Box<GraphProto>>,
    /// `floats = 7`.
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    /// `ints = 8`.
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
    /// `strings = 9`.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    /// `ref_attr_name = 21`: inside a function, the caller's attribute this one takes.
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
}

/// `ValueInfoProto`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ValueInfoProto {
    /// `name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `type = 2`.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// `doc_string = 3`.
    #[prost(string, tag = "3")]
    pub doc_string: String,
}

/// `TypeProto` (tensor types only).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TypeProto {
    /// `tensor_type = 1` (the only variant of the `value` oneof mobius handles).
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeProtoTensor>,
}

/// `TypeProto.Tensor`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TypeProtoTensor {
    /// `elem_type = 1`.
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// `shape = 2`.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `TensorShapeProto`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TensorShapeProto {
    /// `dim = 1`.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `TensorShapeProto.Dimension`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Dimension {
    /// The `value` oneof: `dim_value = 1` or `dim_param = 2`.
    #[prost(oneof = "DimensionValue", tags = "1, 2")]
    pub value: Option<DimensionValue>,
}

/// The `value` oneof of [`Dimension`].
#[derive(Clone, PartialEq, ::prost::Oneof)]
pub enum DimensionValue {
    /// `dim_value = 1`.
    #[prost(int64, tag = "1")]
    DimValue(i64),
    /// `dim_param = 2`.
    #[prost(string, tag = "2")]
    DimParam(String),
}

/// `TensorProto.DataLocation::EXTERNAL`.
pub const DATA_LOCATION_EXTERNAL: i32 = 1;

/// `TensorProto`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TensorProto {
    /// `dims = 1`.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// `data_type = 2`.
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// `float_data = 4`.
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// `int32_data = 5` (also holds f16/bf16/bool/int8 values, one per element).
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// `int64_data = 7`.
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// `name = 8`.
    #[prost(string, tag = "8")]
    pub name: String,
    /// `raw_data = 9`.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// `double_data = 10`.
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// `uint64_data = 11` (also holds uint32 values, one per element).
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
    /// `external_data = 13`.
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// `data_location = 14`.
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}
