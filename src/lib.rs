//! mobius: turns a Hugging Face checkpoint (config.json + safetensors) into an ONNX model
//! package that ONNX Runtime and onnxruntime-genai run.
//!
//! The pipeline, one module per stage:
//! [`source`] (local folder, Hugging Face cache, hub download) → [`config`] (config.json →
//! [`config::ArchConfig`]) → [`models`] (portable graph in the [`ir`]) → [`weights`]
//! (safetensors, lazy transforms, streaming) → [`onnx`] (protobuf + external data) →
//! [`package`] (output folder, genai_config.json, tokenizer files). [`build()`] runs it all
//! and returns a [`ModelPackage`] to [`ModelPackage::save`]; [`opt`] is the
//! equality-saturation engine that specialises the graph for an execution provider ([`ep`])
//! with the rules of the [`rulebook`]; [`passes`] are the graph passes before and after it
//! (quantization planning, prune-lm-head, static and float8 KV caches); [`quant`] is the block
//! quantization kernel (int4/int8 weights, bit-identical to onnxruntime's).

pub mod build;
pub mod cancel;
pub mod config;
pub mod cost_file;
pub mod ep;
pub mod error;
pub mod interp;
pub mod ir;
pub mod limits;
pub mod models;
pub mod onnx;
pub mod ops;
pub mod opt;
pub mod optimize_file;
pub mod package;
pub mod passes;
pub mod paths;
pub mod quant;
pub mod role;
pub mod rulebook;
pub mod run_file;
pub mod source;
pub mod verify;
pub mod weights;

#[cfg(test)]
mod acyclic;

pub use build::{build, BuildOptions, Features, ModelPackage, SaveOptions};
pub use cancel::Cancel;
pub use ep::{ep_registry, get_ep, register_ep, EpCapabilities};
pub use error::{Error, Result};
pub use opt::OptimizeOptions;
pub use role::Role;
pub use rulebook::optimize;
