//! Per-family knobs of the Llama-like decoders (qwen3, smollm3, granite, olmo2, phi3) that
//! the shared fields of [`super::ArchConfig`] do not describe.

use super::{Fields, HfConfig, Sign};
use crate::limits::config::MAX_LAYERS;
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
    let get = |field: &str, value: Option<f64>| f.number(field, value, 1.0, Sign::NonZero);
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
    let interval = f.optional_count(
        "no_rope_layer_interval",
        raw.no_rope_layer_interval,
        4,
        MAX_LAYERS,
    )?;
    Ok((0..layers).map(|i| (i + 1) % interval != 0).collect())
}

#[cfg(test)]
mod tests {
    use crate::config::ArchConfig;
    use std::path::Path;

    fn parse(model_type: &str, extra: &str) -> crate::Result<ArchConfig> {
        let json = format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128 {extra}}}"#
        );
        ArchConfig::parse(json.as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn smollm3_nope_layers_from_the_list_or_the_interval() {
        let listed = parse("smollm3", r#", "no_rope_layers": [1, 0, 1, 1]"#).unwrap();
        assert_eq!(listed.family.rope_layers, [true, false, true, true]);
        let derived = parse("smollm3", "").unwrap();
        assert_eq!(derived.family.rope_layers, [true, true, true, false]);
        // Sliding windows (only when enabled) go to the NoPE layers, as in transformers.
        let sliding = parse(
            "smollm3",
            r#", "use_sliding_window": true, "sliding_window": 8"#,
        )
        .unwrap();
        assert_eq!(sliding.layer_windows, [None, None, None, Some(8)]);
        let off = parse("smollm3", r#", "sliding_window": 8"#).unwrap();
        assert_eq!(off.layer_windows, [None; 4]);
        for (extra, want) in [
            (r#", "no_rope_layers": [1, 0]"#, "has 2 entries"),
            (r#", "no_rope_layers": [1, 2, 1, 1]"#, "entry 2"),
            (r#", "no_rope_layer_interval": 0"#, "no_rope_layer_interval"),
        ] {
            let err = parse("smollm3", extra).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn granite_multipliers_default_to_one_and_reject_zero() {
        let plain = parse("granite", "").unwrap();
        let m = plain.family.multipliers.unwrap();
        assert_eq!(
            (m.embedding, m.residual, m.attention, m.logits),
            (1.0, 1.0, 1.0, 1.0)
        );
        let err = parse("granite", r#", "logits_scaling": 0"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("logits_scaling"), "{err}");
        assert!(parse("llama", "").unwrap().family.multipliers.is_none());
    }

    #[test]
    fn qwen3_windows_need_use_sliding_window_and_biases_follow_attention_bias() {
        let c = parse(
            "qwen3",
            r#", "sliding_window": 8, "attention_bias": true, "max_window_layers": 2"#,
        )
        .unwrap();
        assert_eq!(c.layer_windows, [None; 4]);
        assert!(c.qkv_bias && c.o_bias && !c.mlp_bias);
        let on = parse(
            "qwen3",
            r#", "sliding_window": 8, "use_sliding_window": true, "max_window_layers": 2"#,
        )
        .unwrap();
        assert_eq!(on.layer_windows, [None, None, Some(8), Some(8)]);
    }
}
