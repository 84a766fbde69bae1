//! Per-family knobs of the Llama-like decoders (qwen3, smollm3, granite, olmo2, phi3) that
//! the shared fields of [`super::ArchConfig`] do not describe.

use super::{Fields, HfConfig};
use crate::Result;

/// Family-specific parameters; the default is a plain Llama decoder.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FamilyKnobs {
    /// Granite's scalar multipliers (`None` for every other family).
    pub multipliers: Option<Multipliers>,
    /// SmolLM3: per layer, whether it applies RoPE (empty = every layer does).
    pub rope_layers: Vec<bool>,
}

/// Granite's multipliers, as transformers applies them.
#[derive(Debug, Clone, PartialEq)]
pub struct Multipliers {
    /// Token embeddings are multiplied by it.
    pub embedding: f32,
    /// Attention and MLP outputs are multiplied by it before the residual add.
    pub residual: f32,
    /// The attention softmax scale (replaces `head_dim^-0.5`).
    pub attention: f32,
    /// Logits are divided by it.
    pub logits: f32,
}

impl FamilyKnobs {
    /// Whether layer `i` applies RoPE.
    pub fn layer_uses_rope(&self, i: usize) -> bool {
        self.rope_layers.get(i).copied().unwrap_or(true)
    }
}

/// Reads the knobs of `model_type` from `raw`.
pub(super) fn parse(
    raw: &HfConfig,
    model_type: &str,
    layers: usize,
    f: &Fields<'_>,
) -> Result<FamilyKnobs> {
    Ok(FamilyKnobs {
        multipliers: match model_type {
            "granite" => Some(multipliers(raw, f)?),
            _ => None,
        },
        rope_layers: match model_type {
            "smollm3" => rope_layers(raw, layers, f)?,
            _ => Vec::new(),
        },
    })
}

fn multipliers(raw: &HfConfig, f: &Fields<'_>) -> Result<Multipliers> {
    let get = |field: &str, value: Option<f64>| -> Result<f32> {
        match value {
            None => Ok(1.0),
            Some(v) if v.is_finite() && v != 0.0 => Ok(v as f32),
            Some(v) => Err(f.err(field, &format!("{v} (expected a finite, non-zero number)"))),
        }
    };
    Ok(Multipliers {
        embedding: get("embedding_multiplier", raw.embedding_multiplier)?,
        residual: get("residual_multiplier", raw.residual_multiplier)?,
        attention: get("attention_multiplier", raw.attention_multiplier)?,
        logits: get("logits_scaling", raw.logits_scaling)?,
    })
}

/// SmolLM3's `no_rope_layers` (1 = the layer uses RoPE), else one NoPE layer every
/// `no_rope_layer_interval` layers (default 4), as transformers derives it.
fn rope_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    if let Some(list) = &raw.no_rope_layers {
        if list.len() != layers {
            return Err(f.err(
                "no_rope_layers",
                &format!(
                    "has {} entries, expected num_hidden_layers = {layers}",
                    list.len()
                ),
            ));
        }
        return list
            .iter()
            .map(|v| match v {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(f.err(
                    "no_rope_layers",
                    &format!("entry {other} (expected 0 = no RoPE or 1 = RoPE)"),
                )),
            })
            .collect();
    }
    let interval = match raw.no_rope_layer_interval {
        None => 4,
        Some(n) if n > 0 => n as usize,
        Some(n) => {
            return Err(f.err(
                "no_rope_layer_interval",
                &format!("must be a positive integer, found {n}"),
            ))
        }
    };
    Ok((0..layers).map(|i| (i + 1) % interval != 0).collect())
}
