//! The equality-saturation optimizer: lift the IR into an `egg` e-graph, saturate it with the
//! rules the target execution provider enables, extract the cheapest graph under that EP's
//! cost model, and lower it back to the IR.

pub mod analysis;
pub mod conditions;
pub mod cost;
mod emit;
pub mod extract;
pub mod fingerprint;
pub mod fold;
mod from_nbits;
pub mod gate;
pub mod infer;
pub mod lang;
pub mod lift;
pub mod lower;
mod lowering;
mod nbits;
mod nodeset;
pub mod opset;
pub mod pipeline;
mod recognize;
pub mod rules;
pub mod schema;
pub mod trace;
pub mod types;

pub use pipeline::{optimize, optimize_with_rules, Limits, OptimizeOptions, Role};
pub use trace::OptimizeReport;
