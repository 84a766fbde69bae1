//! The graph IR: values with dtype and symbolic shape, nodes with domain/op/attributes, and
//! initializers whose data is a lazy [`TensorSource`] expression.
//!
//! The IR is deliberately plain (ordered vectors, names as edges) so that it maps one-to-one to
//! ONNX and can be lifted into an e-graph by the optimizer.

pub mod attr;
pub mod builder;
pub mod dtype;
pub mod graph;
pub mod shape;
pub mod tensor;

pub use attr::{Attr, Attrs};
pub use builder::GraphBuilder;
pub use dtype::{f8e4m3, pack_4bit, unpack_4bit, DType};
pub use graph::{Graph, Initializer, Model, Node, ValueInfo};
pub use shape::{Dim, Shape};
pub use tensor::{MoeLayer, PackedFormat, QuantParams, QuantPart, TensorData, TensorSource};
