//! One Hugging Face `model_type` as mobius knows it: how its config.json reads and which
//! onnxruntime-genai `model.type` runs it. The families declare them (`src/models/`); the
//! registry (`crate::models::registry`) lists them.

use super::{ArchConfig, Fields, HfConfig};
use crate::Result;

/// Normalises a config.json whose `model_type` is the given entry.
pub type ReadConfig = fn(&HfConfig, &'static ModelType, &Fields<'_>) -> Result<ArchConfig>;

/// One Hugging Face `model_type` and how mobius reads and packages it.
pub struct ModelType {
    /// The `model_type` of config.json.
    pub name: &'static str,
    /// onnxruntime-genai's `model.type` for it; `None` for models genai does not run
    /// (encoders): their package has no genai_config.json.
    pub genai_type: Option<&'static str>,
    /// Its config.json → [`ArchConfig`].
    pub read: ReadConfig,
    /// Whether its builder switches LongRoPE's short and long factors (and scales by its
    /// attention factor); config reading refuses a LongRoPE config of any other type, whose
    /// graph would rotate with the short factors alone.
    pub builds_longrope: bool,
}

impl ModelType {
    /// A model type onnxruntime-genai runs as `genai_type`.
    pub const fn generative(
        name: &'static str,
        genai_type: &'static str,
        read: ReadConfig,
    ) -> Self {
        ModelType {
            name,
            genai_type: Some(genai_type),
            read,
            builds_longrope: false,
        }
    }

    /// This model type, its builder building LongRoPE.
    pub const fn building_longrope(self) -> Self {
        ModelType {
            builds_longrope: true,
            ..self
        }
    }
}

impl std::fmt::Debug for ModelType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Model types are the same when their names are (a name is registered once).
impl PartialEq for ModelType {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
