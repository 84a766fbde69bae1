//! The equality-saturation optimizer: lift the IR into an `egg` e-graph, saturate it with the
//! rules the target execution provider enables, extract the cheapest graph under that EP's
//! cost model, and lower it back to the IR.

pub mod analysis;
pub mod appliers;
pub mod bind;
pub mod checked_union;
pub mod conditions;
pub mod cost;
pub mod declared_dims;
mod emit;
pub mod extract;
pub mod fingerprint;
pub mod fold;
pub mod gate;
mod genai_contract;
mod head_layout;
pub mod lang;
pub mod leftovers;
pub mod lift;
pub mod lower;
mod lowering;
mod nodeset;
pub mod opset;
pub mod pipeline;
mod query;
mod recognize;
mod recognize_gemm;
mod recognize_rotary;
pub mod rules;
mod saturate;
mod shape_value;
mod sym_value;
pub mod trace;

pub use crate::role::Role;
pub use gate::KvCache;
pub use pipeline::{optimize, optimize_with_rules, Limits, OptimizeOptions};
pub use trace::OptimizeReport;
