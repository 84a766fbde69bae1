//! ONNX I/O: the protobuf messages, export of the IR with external data, and import of
//! `.onnx` files back into the IR.

pub mod data_writer;
pub mod export;
pub mod functions;
pub mod import;
pub mod names;
pub mod order;
pub mod proto;
