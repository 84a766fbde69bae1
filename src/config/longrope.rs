//! LongRoPE (`rope_type` `longrope`, legacy `su`; Phi-3/3.5): two sets of per-frequency
//! divisors and an attention factor that scales cos/sin.
//!
//! transformers picks the set per forward pass from `max(position_ids) + 1`: the short
//! factors while it is at most `original_max_position_embeddings`, the long factors (for
//! *every* position of that pass) beyond it.

use serde_json::Value;

use super::{Fields, HfConfig, Sign};
use crate::Result;

/// LongRoPE parameters, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct LongRope {
    /// Divisors of the inverse frequencies while the sequence fits the original context.
    pub short_factor: Vec<f32>,
    /// Divisors used once the sequence is longer than the original context.
    pub long_factor: Vec<f32>,
    /// The context length the model was pre-trained with.
    pub original_max_position_embeddings: usize,
    /// Multiplier of every cos/sin value.
    pub attention_factor: f32,
}

impl LongRope {
    /// The inverse frequencies `1 / (factor_j · theta^(2j/dim))` of the short (or long) set,
    /// computed in f32 as transformers computes them.
    pub fn inv_freq(&self, theta: f32, rotary_dim: usize, long: bool) -> Vec<f32> {
        let factors = if long {
            &self.long_factor
        } else {
            &self.short_factor
        };
        let dim = rotary_dim as f32;
        factors
            .iter()
            .enumerate()
            .map(|(j, e)| 1.0 / (e * theta.powf((2 * j) as f32 / dim)))
            .collect()
    }
}

/// Parses the LongRoPE fields of `params` (the `field` object: v5 `rope_parameters` or v4
/// `rope_scaling`); `original_max_position_embeddings` may also be top-level (v4).
pub(super) fn parse(
    raw: &HfConfig,
    field: &str,
    params: Option<&Value>,
    max_positions: usize,
    f: &Fields<'_>,
) -> Result<LongRope> {
    let get = |key: &str| params.and_then(|p| p.get(key)).filter(|v| !v.is_null());
    let name = |key: &str| format!("{field}.{key}");
    let factors = |key: &str| -> Result<Vec<f32>> {
        let list = get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| f.err(&name(key), "missing (expected a list of numbers)"))?;
        list.iter()
            .map(|v| match v.as_f64() {
                Some(x) => f.number(&name(key), Some(x), x, Sign::Positive),
                None => Err(f.err(&name(key), &format!("`{v}` is not a positive number"))),
            })
            .collect()
    };
    let short_factor = factors("short_factor")?;
    let long_factor = factors("long_factor")?;
    // transformers gives the top-level field (Phi-3's spelling) priority over the nested one.
    let nested = f.json_integer(
        &name("original_max_position_embeddings"),
        get("original_max_position_embeddings"),
    )?;
    let original = match raw.original_max_position_embeddings.or(nested) {
        Some(o) if o > 0 && o as usize <= max_positions => o as usize,
        Some(o) => {
            return Err(f.err(
                "original_max_position_embeddings",
                &format!("{o} (expected 1..=max_position_embeddings = {max_positions})"),
            ))
        }
        None => {
            return Err(f.err(
                "original_max_position_embeddings",
                &format!("missing (LongRoPE needs it, at top level or in {field})"),
            ))
        }
    };
    let ratio = max_positions as f64 / original as f64;
    let factor = f.number(
        &name("factor"),
        f.json_number(&name("factor"), get("factor"))?,
        ratio,
        Sign::Positive,
    )? as f64;
    let attention_factor =
        match f.json_number(&name("attention_factor"), get("attention_factor"))? {
            Some(a) => f.number(&name("attention_factor"), Some(a), a, Sign::Positive)?,
            None if factor <= 1.0 => 1.0,
            None => (1.0 + factor.ln() / (original as f64).ln()).sqrt() as f32,
        };
    Ok(LongRope {
        short_factor,
        long_factor,
        original_max_position_embeddings: original,
        attention_factor,
    })
}

/// Checks that both factor lists hold one entry per rotated channel pair.
pub(super) fn check_width(
    rope: &LongRope,
    field: &str,
    rotary_dim: usize,
    f: &Fields<'_>,
) -> Result<()> {
    for (key, list) in [
        ("short_factor", &rope.short_factor),
        ("long_factor", &rope.long_factor),
    ] {
        if list.len() != rotary_dim / 2 {
            return Err(f.err(
                &format!("{field}.{key}"),
                &format!(
                    "has {} entries, expected rotary width / 2 = {}",
                    list.len(),
                    rotary_dim / 2
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope() -> LongRope {
        LongRope {
            short_factor: vec![1.0, 2.0],
            long_factor: vec![4.0, 8.0],
            original_max_position_embeddings: 16,
            attention_factor: 1.0,
        }
    }

    use crate::config::{ArchConfig, RopeScaling};
    use std::path::Path;

    fn parse(json: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_config(json.as_bytes(), Path::new("config.json"))
    }

    const DIMS: &str = r#""model_type": "phi3", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
        "max_position_embeddings": 128"#;

    #[test]
    fn v4_and_v5_spellings_agree_and_the_factor_comes_from_the_context_ratio() {
        let v4 = parse(&format!(
            r#"{{{DIMS}, "original_max_position_embeddings": 16, "rope_theta": 10000.0,
            "rope_scaling": {{"type": "su", "short_factor": [1,1,1,1,1,1,1,1],
                              "long_factor": [2,2,2,2,2,2,2,2]}}}}"#
        ))
        .unwrap();
        let v5 = parse(&format!(
            r#"{{{DIMS}, "rope_parameters": {{"rope_type": "longrope", "rope_theta": 10000.0,
            "original_max_position_embeddings": 16, "short_factor": [1,1,1,1,1,1,1,1],
            "long_factor": [2,2,2,2,2,2,2,2]}}}}"#
        ))
        .unwrap();
        assert_eq!(v4, v5);
        let RopeScaling::LongRope(l) = &v4.rope.scaling else {
            panic!("{:?}", v4.rope.scaling)
        };
        let want = (1.0 + 8f64.ln() / 16f64.ln()).sqrt() as f32;
        assert_eq!(l.attention_factor, want);
        assert_eq!(l.original_max_position_embeddings, 16);
    }

    #[test]
    fn the_top_level_original_context_wins_as_in_transformers() {
        let cfg = parse(&format!(
            r#"{{{DIMS}, "original_max_position_embeddings": 16,
            "rope_parameters": {{"rope_type": "longrope", "rope_theta": 10000.0,
            "original_max_position_embeddings": 8, "short_factor": [1,1,1,1,1,1,1,1],
            "long_factor": [2,2,2,2,2,2,2,2]}}}}"#
        ))
        .unwrap();
        let RopeScaling::LongRope(l) = &cfg.rope.scaling else {
            panic!("{:?}", cfg.rope.scaling)
        };
        assert_eq!(l.original_max_position_embeddings, 16);
    }

    #[test]
    fn bad_longrope_fields_are_named() {
        let cases = [
            (
                r#""rope_scaling": {"type": "longrope", "short_factor": [1,1], "long_factor": [1,1],
                   "original_max_position_embeddings": 16}"#,
                "rope_scaling.short_factor",
            ),
            (
                r#""rope_scaling": {"type": "longrope", "long_factor": [1,1,1,1,1,1,1,1],
                   "original_max_position_embeddings": 16}"#,
                "rope_scaling.short_factor",
            ),
            (
                r#""rope_scaling": {"type": "longrope", "short_factor": [1,1,1,1,1,1,1,1],
                   "long_factor": [1,1,1,1,1,1,1,1]}"#,
                "original_max_position_embeddings",
            ),
            (
                r#""rope_scaling": {"type": "longrope", "short_factor": [1,1,1,1,1,1,1,-1],
                   "long_factor": [1,1,1,1,1,1,1,1], "original_max_position_embeddings": 16}"#,
                "expected a finite number > 0",
            ),
        ];
        for (extra, want) in cases {
            let err = parse(&format!("{{{DIMS}, {extra}}}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn factors_divide_the_base_frequencies() {
        let short = rope().inv_freq(10000.0, 4, false);
        let long = rope().inv_freq(10000.0, 4, true);
        assert_eq!(short[0], 1.0);
        assert!((short[1] - 0.01 / 2.0).abs() < 1e-9);
        assert_eq!(long[0], 0.25);
        assert!((long[1] - 0.01 / 8.0).abs() < 1e-9);
    }
}
