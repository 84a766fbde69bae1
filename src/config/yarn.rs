//! YaRN (`rope_type` `yarn`; Qwen2.5, DeepSeek, gpt-oss…): inverse frequencies blended per
//! channel pair between the plain ones (extrapolation, high frequencies) and the ones divided
//! by `factor` (interpolation, low frequencies) over a linear ramp whose ends come from
//! `beta_fast`/`beta_slow` rotations within the original context; cos/sin scaled by an
//! attention factor. The frequencies do not depend on the sequence length, so one table
//! serves every position.
//!
//! Everything is computed as transformers 5.24 computes it (`_compute_yarn_parameters`): the
//! correction range and attention factor in f64 (Python floats), the ramp and frequencies in
//! f32 (torch tensors).

use std::f64::consts::PI;

use serde_json::Value;

use super::{Fields, HfConfig, Sign};
use crate::Result;

/// YaRN parameters, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct Yarn {
    /// Context extension factor (`factor`; `null`: max_position_embeddings / original).
    pub factor: f64,
    /// The context length the model was pre-trained with.
    pub original_max_position_embeddings: usize,
    /// Rotations within the original context above which a pair is extrapolated
    /// (`beta_fast`, 32 when absent or 0).
    pub beta_fast: f64,
    /// Rotations below which a pair is interpolated (`beta_slow`, 1 when absent or 0).
    pub beta_slow: f64,
    /// Whether the correction range is rounded outwards to whole pairs (`truncate`, default
    /// true).
    pub truncate: bool,
    /// Multiplier of every cos/sin value (`attention_factor`, else from `factor`, `mscale`
    /// and `mscale_all_dim`).
    pub attention_factor: f32,
}

impl Yarn {
    /// The `rotary_dim / 2` inverse frequencies for base `theta`.
    pub fn inv_freq(&self, theta: f32, rotary_dim: usize) -> Vec<f32> {
        let dim = rotary_dim as f32;
        let (low, high) = self.correction_range(theta as f64, rotary_dim);
        // transformers nudges an empty range open to avoid dividing by zero.
        let high = if low == high { high + 0.001 } else { high };
        let (low32, span) = (low as f32, (high - low) as f32);
        let factor = self.factor as f32;
        (0..rotary_dim / 2)
            .map(|j| {
                let pos_freq = theta.powf((2 * j) as f32 / dim);
                let extrapolation = 1.0 / pos_freq;
                let interpolation = 1.0 / (factor * pos_freq);
                let ramp = ((j as f32 - low32) / span).clamp(0.0, 1.0);
                let extrapolated = 1.0 - ramp;
                interpolation * (1.0 - extrapolated) + extrapolation * extrapolated
            })
            .collect()
    }

    /// The channel-pair range `[low, high]` of the ramp: where `beta_fast` and `beta_slow`
    /// rotations fit in the original context, clipped to `[0, rotary_dim - 1]`.
    fn correction_range(&self, theta: f64, rotary_dim: usize) -> (f64, f64) {
        let dim = rotary_dim as f64;
        let orig = self.original_max_position_embeddings as f64;
        let pair =
            |rotations: f64| (dim * (orig / (rotations * 2.0 * PI)).ln()) / (2.0 * theta.ln());
        let (mut low, mut high) = (pair(self.beta_fast), pair(self.beta_slow));
        if self.truncate {
            low = low.floor();
            high = high.ceil();
        }
        (low.max(0.0), high.min(dim - 1.0))
    }
}

/// `0.1 · mscale · ln(scale) + 1` (1 for scales up to 1): YaRN's attention temperature.
fn mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 {
        1.0
    } else {
        0.1 * mscale * scale.ln() + 1.0
    }
}

/// Parses the YaRN fields of `params` (the `field` object: v5 `rope_parameters` or v4
/// `rope_scaling`); a top-level `original_max_position_embeddings` wins over the nested one
/// and `max_position_embeddings` stands in for both, as in transformers.
pub(super) fn parse(
    raw: &HfConfig,
    field: &str,
    params: &Value,
    max_positions: usize,
    f: &Fields<'_>,
) -> Result<Yarn> {
    let get = |key: &str| params.get(key).filter(|v| !v.is_null());
    let name = |key: &str| format!("{field}.{key}");
    let number = |key: &str| f.json_number(&name(key), get(key));
    // Checked as f32 would be, kept in f64 (transformers computes with Python floats).
    let positive =
        |key: &str, x: f64| -> Result<f64> { f.number(key, Some(x), x, Sign::Positive).map(|_| x) };
    let nested = f.json_integer(
        &name("original_max_position_embeddings"),
        get("original_max_position_embeddings"),
    )?;
    // transformers gives the top-level field (Phi-3's spelling) priority over the nested one.
    let top = raw
        .original_max_position_embeddings
        .map(|o| ("original_max_position_embeddings".to_string(), o));
    let original = match top.or(nested.map(|o| (name("original_max_position_embeddings"), o))) {
        None => max_positions,
        Some((_, o)) if o > 0 => o as usize,
        Some((key, o)) => {
            return Err(f.err(&key, &format!("{o} (expected a positive integer)")));
        }
    };
    if original == 0 {
        return Err(f.err(
            "max_position_embeddings",
            "missing (YaRN needs it or original_max_position_embeddings)",
        ));
    }
    let factor = match (params.get("factor"), number("factor")?) {
        (None, _) => return Err(f.err(&name("factor"), "missing (expected a finite number > 0)")),
        (Some(_), None) => max_positions as f64 / original as f64,
        (Some(_), Some(x)) => positive(&name("factor"), x)?,
    };
    let attention_factor = match number("attention_factor")? {
        Some(a) => f.number(&name("attention_factor"), Some(a), a, Sign::Positive)?,
        None => {
            let (m, all) = (number("mscale")?, number("mscale_all_dim")?);
            for (key, v) in [("mscale", m), ("mscale_all_dim", all)] {
                if let Some(x) = v {
                    f.number(&name(key), Some(x), x, Sign::NonNegative)?;
                }
            }
            match (m, all) {
                (Some(m), Some(all)) if m != 0.0 && all != 0.0 => {
                    (mscale(factor, m) / mscale(factor, all)) as f32
                }
                _ => mscale(factor, 1.0) as f32,
            }
        }
    };
    // transformers reads `beta_fast or 32`: an absent, null or zero value is the default.
    let beta = |key: &str, default: f64| -> Result<f64> {
        match number(key)? {
            None | Some(0.0) => Ok(default),
            Some(b) => positive(&name(key), b),
        }
    };
    let truncate = match get("truncate") {
        None => true,
        Some(Value::Bool(t)) => *t,
        Some(v) => return Err(f.err(&name("truncate"), &format!("{v} (expected true or false)"))),
    };
    Ok(Yarn {
        factor,
        original_max_position_embeddings: original,
        beta_fast: beta("beta_fast", 32.0)?,
        beta_slow: beta("beta_slow", 1.0)?,
        truncate,
        attention_factor,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{ArchConfig, RopeScaling};

    fn parse(rope: &str) -> crate::Result<ArchConfig> {
        let json = format!(
            r#"{{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128, {rope}}}"#
        );
        crate::models::parse_config(json.as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn defaults_follow_transformers() {
        let cfg = parse(r#""rope_scaling": {"type": "yarn", "factor": 4.0}"#).unwrap();
        let RopeScaling::Yarn(y) = &cfg.rope.scaling else {
            panic!("{:?}", cfg.rope.scaling)
        };
        assert_eq!(y.original_max_position_embeddings, 128);
        assert_eq!((y.beta_fast, y.beta_slow, y.truncate), (32.0, 1.0, true));
        assert_eq!(y.attention_factor, (0.1 * 4f64.ln() + 1.0) as f32);
        let zero_betas = parse(
            r#""rope_scaling": {"type": "yarn", "factor": 4.0, "beta_fast": 0, "beta_slow": 0}"#,
        )
        .unwrap();
        assert_eq!(
            zero_betas, cfg,
            "0 betas read as the defaults (`or 32`, `or 1`)"
        );
    }

    #[test]
    fn bad_yarn_fields_are_named() {
        let cases = [
            (r#"{"type": "yarn"}"#, "`rope_scaling.factor`: missing"),
            (r#"{"type": "yarn", "factor": -2}"#, "rope_scaling.factor"),
            (r#"{"type": "yarn", "factor": "4"}"#, "rope_scaling.factor"),
            (
                r#"{"type": "yarn", "factor": 4, "truncate": "no"}"#,
                "rope_scaling.truncate",
            ),
            (
                r#"{"type": "yarn", "factor": 4, "beta_fast": -1}"#,
                "rope_scaling.beta_fast",
            ),
            (
                r#"{"type": "yarn", "factor": 4, "mscale": -1, "mscale_all_dim": 1}"#,
                "rope_scaling.mscale",
            ),
            (
                r#"{"type": "yarn", "factor": 4, "attention_factor": 0}"#,
                "rope_scaling.attention_factor",
            ),
            (
                r#"{"type": "yarn", "factor": 4, "original_max_position_embeddings": -3}"#,
                "original_max_position_embeddings",
            ),
            (r#"{"type": "dynamic"}"#, "rope_scaling.factor"),
        ];
        for (scaling, want) in cases {
            let err = parse(&format!(r#""rope_scaling": {scaling}"#))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{scaling}: {err}");
        }
    }

    #[test]
    fn dynamic_keeps_the_plain_frequencies() {
        let plain = parse(r#""rope_theta": 1e4"#).unwrap();
        let dynamic =
            parse(r#""rope_theta": 1e4, "rope_scaling": {"type": "dynamic", "factor": 4}"#)
                .unwrap();
        assert_eq!(dynamic.rope.inv_freq(), plain.rope.inv_freq());
        assert_eq!(dynamic.rope.cos_sin_scale(), 1.0);
    }
}
