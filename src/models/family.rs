//! What a family file declares for the registry: its [`FamilySpec`] (the Hugging Face
//! `model_type`s it answers to, each a [`crate::config::ModelType`] saying how its config.json
//! reads and which onnxruntime-genai `model.type` runs it), and the config helpers several
//! families share. Families import this module; only the registry imports the families.

use crate::config::{HfConfig, ModelType};

/// One architecture family: the model types one builder serves.
#[derive(Debug)]
pub struct FamilySpec {
    /// The family's name (its file in `src/models/`).
    pub name: &'static str,
    /// What sets the family apart, in a few words (the last column of docs/families.md's table).
    pub summary: &'static str,
    /// The Hugging Face `model_type`s it answers to.
    pub model_types: &'static [ModelType],
}

/// `raw` without the sliding-window fields (`sliding_window`, `use_sliding_window`,
/// `layer_types`), for the families whose config class has none: transformers never slides
/// them, whatever else config.json holds.
pub(crate) fn without_windows(raw: &HfConfig) -> HfConfig {
    HfConfig {
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    }
}
