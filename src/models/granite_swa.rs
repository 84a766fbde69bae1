//! Granite SWA (IBM's granite-swash, transformers' GraniteSWAForCausalLM): Granite's
//! multipliers ([`Multipliers`]) on layers that attend with per-head sinks (a learned logit
//! that joins each query's softmax, as gpt-oss's: [`sink_attention`]) over full or
//! sliding-window attention (`layer_types`; by default every fourth layer from layer 0 is
//! full, the others slide over 128 positions), each layer with its own RoPE base
//! (`layer_rope_theta`, 0 for no position embedding; by default every layer has the global
//! one). [`SwaAttention`] is that attention, which Granite-MoE SWA shares.

use super::components::{
    named_rope_tables, sink_attention, sink_logits, AttentionSpec, DecoderInputs, RopeTables,
};
use super::decoder::Family;
use super::family::FamilySpec;
use super::granite::{multipliers, Multipliers};
use crate::config::{
    read_decoder, read_rope, ArchConfig, DecoderFields, Dims, Fields, HfConfig, ModelType, Rope,
    SlidingLayers,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `granite_swa` type: its generic
/// `decoder` runs the graph (which carries the windows and sinks).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "granite_swa",
    summary: "Granite with attention sinks, sliding-window layers (three of four by default) \
              and a RoPE base per layer (`layer_rope_theta`, 0: none)",
    model_types: &[ModelType::generative("granite_swa", "decoder", read)],
};

/// transformers' GraniteSWAConfig: Granite's fields with `rms_norm_eps` 1e-5, tied embeddings
/// and a window of 128 on every layer but each fourth.
const FIELDS: DecoderFields = DecoderFields {
    tie_word_embeddings: true,
    sliding_window: Some(128),
    sliding_layers: SlidingLayers::Pattern(every_fourth_full),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// The sliding layers of the SWA configs without `layer_types`: all but every fourth, from
/// layer 0.
pub(super) fn every_fourth_full(_: &HfConfig, layers: usize, _: &Fields<'_>) -> Result<Vec<bool>> {
    Ok((0..layers).map(|i| i % 4 != 0).collect())
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // GraniteSWAConfig has no `use_sliding_window`: `layer_types` alone says which layers slide.
    let raw = HfConfig {
        use_sliding_window: None,
        ..raw.clone()
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        Ok(GraniteSwa {
            multipliers: multipliers(&raw, f)?,
            attention: SwaAttention::read(&raw, dims, f)?,
        })
    })
}

/// The attention of the SWA Granites: a RoPE per layer and per-head sinks.
#[derive(Debug, Clone, PartialEq)]
pub struct SwaAttention {
    /// One RoPE per distinct non-zero base of `layer_rope_theta`, by increasing base.
    pub ropes: Vec<Rope>,
    /// Per layer, the index of its RoPE in `ropes` (`None`: no position embedding).
    pub layer_rope: Vec<Option<usize>>,
}

impl SwaAttention {
    /// Reads `layer_rope_theta` (one base per layer, 0 for none; absent: the global RoPE's
    /// base on every layer); each base rotates as the global RoPE parameters say.
    pub(super) fn read(raw: &HfConfig, dims: Dims, f: &Fields<'_>) -> Result<SwaAttention> {
        let global = read_rope(raw, dims.head_dim, 10_000.0, f)?;
        let layers = dims.num_hidden_layers;
        let thetas = match &raw.layer_rope_theta {
            None => vec![f64::from(global.theta); layers],
            Some(t) if t.len() != layers => {
                return Err(f.err(
                    "layer_rope_theta",
                    &format!(
                        "has {} entries, expected num_hidden_layers = {layers}",
                        t.len()
                    ),
                ))
            }
            Some(t) => t.clone(),
        };
        if let Some(bad) = thetas.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
            return Err(f.err(
                "layer_rope_theta",
                &format!("{bad} (expected RoPE bases ≥ 0, 0 for no position embedding)"),
            ));
        }
        let mut bases: Vec<f64> = thetas.iter().copied().filter(|&t| t > 0.0).collect();
        bases.sort_by(f64::total_cmp);
        bases.dedup();
        let layer_rope = thetas
            .iter()
            .map(|t| bases.iter().position(|b| b == t))
            .collect();
        let ropes = bases
            .iter()
            .map(|&theta| Rope {
                theta: theta as f32,
                ..global.clone()
            })
            .collect();
        Ok(SwaAttention { ropes, layer_rope })
    }

    /// The tables of every RoPE, `model.rotary_embs.{j}.{cos,sin}_cache`.
    pub(super) fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let positions = cfg.max_position_embeddings;
        let ids = &io.position_ids;
        self.ropes
            .iter()
            .enumerate()
            .map(|(j, rope)| {
                let prefix = format!("model.rotary_embs.{j}");
                named_rope_tables(b, &prefix, rope, positions, ids, dtype)
            })
            .collect()
    }

    /// Layer `i`'s RoPE and the index of its tables.
    pub(super) fn layer_rope(&self, i: usize) -> Option<(&Rope, usize)> {
        self.layer_rope[i].map(|j| (&self.ropes[j], j))
    }

    /// Attention with the sinks `{attn}.sinks`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        qkv: [&str; 3],
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        let sinks = sink_logits(b, attn, cfg.num_attention_heads, dtype);
        sink_attention(b, io, qkv, &sinks, spec, (cfg.head_dim, dtype))
    }
}

/// Granite SWA's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct GraniteSwa {
    /// Granite's multipliers.
    pub multipliers: Multipliers,
    /// The per-layer RoPE and the sinks.
    pub attention: SwaAttention,
}

impl Family for GraniteSwa {
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        self.multipliers.embed(b, cfg, io, x, dtype)
    }

    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        self.attention.rotary(b, cfg, io, dtype)
    }

    fn layer_rope<'c>(&'c self, _cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        self.attention.layer_rope(i)
    }

    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        self.multipliers.attention_scale(cfg)
    }

    fn attention_core(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        qkv: [&str; 3],
        spec: &AttentionSpec<'_>,
        attn: &str,
        dtype: DType,
    ) -> String {
        self.attention.attention(b, cfg, io, qkv, spec, attn, dtype)
    }

    fn residual_branch(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: String,
        dtype: DType,
    ) -> String {
        self.multipliers.residual_branch(b, cfg, y, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        self.multipliers.logits(b, cfg, x, head, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "granite_swa", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 5,
            "vocab_size": 300, "max_position_embeddings": 256"#,
            extra,
        )
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "use_sliding_window": false"#).unwrap();
        let w = Some(128);
        assert_eq!(cfg.layer_windows, [None, w, w, w, None]);
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.mlp_bias);
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        let k = cfg.knobs::<GraniteSwa>().unwrap();
        assert_eq!(k.attention.ropes.len(), 1);
        assert_eq!(k.attention.ropes[0].theta, 1e4);
        assert_eq!(k.attention.layer_rope, [Some(0); 5]);
        assert_eq!(k.multipliers.attention, 1.0);
    }

    #[test]
    fn layer_bases_share_tables_and_zero_is_none() {
        let cfg = parse(r#", "layer_rope_theta": [1e6, 0, 1e4, 1e6, 0]"#).unwrap();
        let k = cfg.knobs::<GraniteSwa>().unwrap();
        let thetas: Vec<f32> = k.attention.ropes.iter().map(|r| r.theta).collect();
        assert_eq!(thetas, [1e4, 1e6]);
        assert_eq!(
            k.attention.layer_rope,
            [Some(1), None, Some(0), Some(1), None]
        );
        for (extra, want) in [
            (r#", "layer_rope_theta": [1e4, 1e4]"#, "has 2 entries"),
            (r#", "layer_rope_theta": [1e4, -1, 0, 0, 0]"#, "-1"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains("layer_rope_theta") && err.contains(want),
                "{err}"
            );
        }
    }
}
