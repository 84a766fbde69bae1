//! SmolLM3: the Llama decoder where the layers marked 0 in `no_rope_layers` use no position
//! embedding at all (NoPE): their q and k go to attention unrotated. With a sliding window
//! (only when `use_sliding_window` is set), the NoPE layers slide, as in transformers.

use super::decoder::{Family, LayerRope};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Fields, HfConfig, SlidingLayers,
};
use crate::limits::config::MAX_LAYERS;
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "smollm3",
    summary:
        "Llama with NoPE layers (no rotary embedding in every `no_rope_layer_interval`-th layer)",
    model_types: &[ModelType::generative("smollm3", "smollm3", |raw, t, f| {
        read_decoder(raw, t, f, &FIELDS, |dims| {
            Ok(SmolLm3 {
                rope_layers: rope_layers(raw, dims.num_hidden_layers, f)?,
            })
        })
    })],
};

/// transformers' SmolLM3Config: theta 2e6, windows off unless enabled, on the NoPE layers.
const FIELDS: DecoderFields = DecoderFields {
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 2_000_000.0, f),
    use_sliding_window: false,
    sliding_layers: SlidingLayers::Pattern(nope_layers),
    ..DecoderFields::LLAMA
};

/// SmolLM3's knobs and hooks: RoPE only in some layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmolLm3 {
    /// Per layer, whether it applies RoPE.
    pub rope_layers: Vec<bool>,
}

impl Family for SmolLm3 {
    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::config_if(self.rope_layers.get(i).copied().unwrap_or(true))
    }
}

/// The layers without RoPE, which slide when a window is set.
fn nope_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    Ok(rope_layers(raw, layers, f)?.iter().map(|r| !r).collect())
}

/// `no_rope_layers` (1 = the layer uses RoPE), else one NoPE layer every
/// `no_rope_layer_interval` layers (default 4), as transformers derives it.
pub(crate) fn rope_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
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
    use super::SmolLm3;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "smollm3", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 128"#,
            extra,
        )
    }

    fn rope_layers(cfg: &ArchConfig) -> &[bool] {
        &cfg.knobs::<SmolLm3>().unwrap().rope_layers
    }

    #[test]
    fn nope_layers_from_the_list_or_the_interval() {
        let listed = parse(r#", "no_rope_layers": [1, 0, 1, 1]"#).unwrap();
        assert_eq!(rope_layers(&listed), [true, false, true, true]);
        let derived = parse("").unwrap();
        assert_eq!(rope_layers(&derived), [true, true, true, false]);
        // Sliding windows (only when enabled) go to the NoPE layers, as in transformers.
        let sliding = parse(r#", "use_sliding_window": true, "sliding_window": 8"#).unwrap();
        assert_eq!(sliding.layer_windows, [None, None, None, Some(8)]);
        let off = parse(r#", "sliding_window": 8"#).unwrap();
        assert_eq!(off.layer_windows, [None; 4]);
        for (extra, want) in [
            (r#", "no_rope_layers": [1, 0]"#, "has 2 entries"),
            (r#", "no_rope_layers": [1, 2, 1, 1]"#, "entry 2"),
            (r#", "no_rope_layer_interval": 0"#, "no_rope_layer_interval"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
