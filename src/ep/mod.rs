//! Execution providers: what each ONNX Runtime EP can run, and how to configure it.
//!
//! An [`EpCapabilities`] lists the fused operators an EP supports (which steer the rewrite
//! pipeline), its session provider options and KV-cache behaviour (written to
//! `genai_config.json` by [`genai_provider_options`] and [`genai_search_max_length`]), and
//! [`CostParams`] for the cost model. Ten EPs are built in ([`builtin_eps`]); more can be
//! registered in the process-wide registry ([`register_ep`], [`get_ep`], [`ep_registry`]) or
//! loaded from a TOML file ([`load_ep_file`]). [`ep_table`] and [`ep_json`] list them.

mod builtins;
mod capabilities;
mod cost_params;
mod dtype_names;
mod file;
mod file_spec;
mod genai;
mod registry;
mod table;
mod validation;

pub use builtins::builtin_eps;
pub use capabilities::EpCapabilities;
pub use cost_params::{CostParams, OpCostCorrection};
pub use file::{load_ep_file, register_ep_file, target_ep, MAX_EP_FILE_BYTES};
pub use genai::{genai_provider_options, genai_search_max_length};
pub use registry::{ep_registry, get_ep, register_ep};
pub use table::{ep_json, ep_table};
pub use validation::MAX_EP_NAME_LEN;
