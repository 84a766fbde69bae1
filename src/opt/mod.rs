//! The equality-saturation engine: lift the IR into an `egg` e-graph, saturate it with the
//! rules of a rule set the target execution provider enables, extract the cheapest graph under
//! that EP's cost model, and lower it back to the IR. It reads rules in the format of
//! `rewrites/` ([`rules`]) and offers what their conditions and appliers need ([`bind`],
//! `query`, `emit`, `shape_value`, [`checked_union`]); the rules themselves, and the Rust they
//! name, are the rulebook's (`crate::rulebook`), which this module does not import.

pub mod analysis;
pub mod bind;
pub mod checked_union;
pub mod cost;
pub mod declared_dims;
pub(crate) mod emit;
pub mod extract;
pub mod fingerprint;
pub mod fold;
pub mod gate;
pub mod lang;
pub mod lift;
pub mod lower;
mod nodeset;
pub mod opset;
pub mod pipeline;
pub(crate) mod query;
pub mod rules;
mod saturate;
pub(crate) mod shape_value;
mod sym_value;
pub mod trace;

pub use crate::role::Role;
pub use gate::KvCache;
pub use pipeline::{optimize, Limits, OptimizeOptions};
pub use trace::OptimizeReport;
