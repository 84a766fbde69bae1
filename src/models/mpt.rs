//! MPT (MosaicML): ALiBi instead of position embeddings ([`crate::models::components::alibi`],
//! with MPT's own slope order for head counts that are not powers of two), LayerNorms with a
//! weight and no bias, one fused `Wqkv` projection (q, k and v row blocks, clamped to
//! `attn_config.clip_qkv` when set), an exact-GELU MLP `4·d_model` wide, no bias on any
//! projection, and the LM head tied to `wte`.
//!
//! As transformers 5 reads an MPT config: `d_model`, `n_heads`, `n_layers`, `max_seq_len`
//! (the package's context length), `layer_norm_epsilon`, and from `attn_config` only
//! `softmax_scale` (`head_dim^-0.5` when null) and `clip_qkv`. transformers' MPT ignores the
//! rest: `no_bias` (it builds no biases), `expansion_ratio` (its MLP is 4× wide),
//! `attn_config.alibi_bias_max` (it builds the bias with 8), `attn_type`, `qk_ln`, `alibi`,
//! `logit_scale`; so does this reading.

use super::components::{gelu, linear, Norm, NormKind};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use super::olmo::clipped;
use super::phi3::Fused;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, Fields, Gelu, HfConfig, Knobs, ModelType,
    Rope, RopeScaling, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `mpt` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "mpt",
    summary: "ALiBi (MPT's slope order), LayerNorm without bias, fused `Wqkv` (optionally \
              clamped, `attn_config.clip_qkv`), exact-GELU MLP, no biases, tied head",
    model_types: &[ModelType::generative("mpt", "decoder", read)],
};

/// The ALiBi bias transformers' MPT builds (`alibi_bias_max`, whatever the config says).
const ALIBI_BIAS_MAX: f64 = 8.0;

/// MPT's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mpt {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`, 1e-5).
    pub layer_norm_eps: f32,
    /// The attention's softmax scale (`attn_config.softmax_scale`, else `head_dim^-0.5`).
    pub softmax_scale: f32,
    /// The bound q, k and v are clamped to (`attn_config.clip_qkv`), if any.
    pub clip_qkv: Option<f32>,
}

/// Reads an MPT config as transformers' MptConfig does (defaults: `d_model` 2048, `n_heads`
/// 16, `n_layers` 24, `max_seq_len` 2048, `vocab_size` 50368, tied); errors name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden_size = f.positive(
        "d_model",
        raw.d_model.or(raw.hidden_size).or(Some(2048)),
        MAX_WIDTH,
    )?;
    let heads = f.positive(
        "n_heads",
        raw.n_heads.or(raw.num_attention_heads).or(Some(16)),
        MAX_HEADS,
    )?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "n_heads",
            &format!("{heads} does not divide d_model ({hidden_size})"),
        ));
    }
    let layers = f.positive(
        "n_layers",
        raw.n_layers.or(raw.num_hidden_layers).or(Some(24)),
        MAX_LAYERS,
    )?;
    let head_dim = hidden_size / heads;
    let attn = match &raw.attn_config {
        None | Some(serde_json::Value::Null) => serde_json::Map::new(),
        Some(serde_json::Value::Object(map)) => map.clone(),
        Some(other) => return Err(f.err("attn_config", &format!("{other} (expected an object)"))),
    };
    let softmax_scale =
        match f.json_number("attn_config.softmax_scale", attn.get("softmax_scale"))? {
            Some(s) => f.number("attn_config.softmax_scale", Some(s), s, Sign::NonNegative)?,
            None => (head_dim as f32).powf(-0.5),
        };
    // transformers clamps only when clip_qkv is truthy: 0 (or null) means no clamp.
    let clip_qkv = match f.json_number("attn_config.clip_qkv", attn.get("clip_qkv"))? {
        None => None,
        Some(0.0) => None,
        Some(c) => Some(f.number("attn_config.clip_qkv", Some(c), c, Sign::Positive)?),
    };
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: 4 * hidden_size,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size.or(Some(50_368)), MAX_VOCAB)?,
        max_position_embeddings: f.positive(
            "max_seq_len",
            raw.max_seq_len.or(Some(2048)),
            MAX_POSITIONS,
        )?,
        rms_norm_eps: 0.0,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        // No rotary embedding (ALiBi): a full-width default keeps the field well-formed.
        rope: Rope {
            theta: 10000.0,
            scaling: RopeScaling::Default,
            rotary_dim: head_dim,
            interleaved: false,
        },
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
        family: Knobs::new(Mpt {
            layer_norm_eps: f.number(
                "layer_norm_epsilon",
                raw.layer_norm_epsilon,
                1e-5,
                Sign::NonNegative,
            )?,
            softmax_scale,
            clip_qkv,
        }),
    })
}

/// MPT's ALiBi slopes for `heads` heads: with `n` the smallest power of two at least `heads`,
/// `2^(−8k/n)` for `k = 1 … n`; when `heads < n`, the even-`k` slopes then the odd-`k` ones,
/// the first `heads` of them.
pub fn mpt_alibi_slopes(heads: usize) -> Vec<f32> {
    let n = heads.max(1).next_power_of_two();
    let slope = |k: usize| (2f64).powf(-(k as f64) * ALIBI_BIAS_MAX / n as f64) as f32;
    if n == heads {
        return (1..=n).map(slope).collect();
    }
    let even = (2..=n).step_by(2);
    let odd = (1..=n).step_by(2);
    even.chain(odd).take(heads).map(slope).collect()
}

/// MPT's hooks: `transformer.blocks.*` names, bias-free LayerNorm, ALiBi, the fused `Wqkv`,
/// exact-GELU MLP.
impl Family for Mpt {
    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "wte",
            layers: "blocks",
            attn: "attn",
            o_proj: "out_proj",
            final_norm: "norm_f",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::UnbiasedLayer,
            eps: self.layer_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("norm_1"),
            post_attention: None,
            pre_mlp: Some("norm_2"),
            post_mlp: None,
        }
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    fn alibi_slopes(&self, cfg: &ArchConfig) -> Option<Vec<f32>> {
        Some(mpt_alibi_slopes(cfg.num_attention_heads))
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.softmax_scale
    }

    /// The q, k and v row blocks of `Wqkv`, each clamped to `clip_qkv` when set (the fused
    /// output's clamp, block by block).
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let h = cfg.hidden_size;
        let fused = Fused {
            weight: format!("{attn}.Wqkv.weight"),
            rows: 3 * h,
            in_features: h,
        };
        [("q_proj", 0), ("k_proj", 1), ("v_proj", 2)].map(|(name, block)| {
            let name = format!("{attn}.{name}");
            let y = fused.block(b, x, &name, block * h, h, dtype);
            clipped(b, y, self.clip_qkv, dtype)
        })
    }

    /// `down_proj(gelu(up_proj(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let up = linear(b, x, &format!("{mlp}.up_proj"), h, inner, false, dtype);
        let up = gelu(b, &up, Gelu::Exact);
        linear(b, &up, &format!("{mlp}.down_proj"), inner, h, false, dtype)
    }

    /// The MLP of layer `i` is module `ffn`.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        self.mlp(b, cfg, x, &format!("{layer}.ffn"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let json = format!(r#"{{"model_type": "mpt", "vocab_size": 300{extra}}}"#);
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!(
            (
                cfg.hidden_size,
                cfg.num_attention_heads,
                cfg.num_hidden_layers
            ),
            (2048, 16, 24)
        );
        assert_eq!(
            (cfg.intermediate_size, cfg.max_position_embeddings),
            (8192, 2048)
        );
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        let knobs = cfg.knobs::<Mpt>().unwrap();
        assert_eq!(
            (knobs.softmax_scale, knobs.clip_qkv),
            (128f32.powf(-0.5), None)
        );
        let set = parse(
            r#", "d_model": 64, "n_heads": 4, "n_layers": 2, "no_bias": false,
            "attn_config": {"softmax_scale": 0.5, "clip_qkv": 3, "alibi_bias_max": 4}"#,
        )
        .unwrap();
        assert!(!set.qkv_bias);
        let knobs = set.knobs::<Mpt>().unwrap();
        assert_eq!((knobs.softmax_scale, knobs.clip_qkv), (0.5, Some(3.0)));
        let zero = parse(r#", "attn_config": {"clip_qkv": 0}"#).unwrap();
        assert_eq!(zero.knobs::<Mpt>().unwrap().clip_qkv, None);
    }

    #[test]
    fn slopes_follow_transformers_order() {
        assert_eq!(mpt_alibi_slopes(4), [0.25, 0.0625, 0.015625, 0.00390625]);
        // 6 heads: the 8-head slopes 2^(−k), even k first, then odd.
        let want = [2, 4, 6, 8, 1, 3].map(|k| 2f32.powi(-k));
        assert_eq!(mpt_alibi_slopes(6), want);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "n_heads": 5, "d_model": 64"#, "n_heads"),
            (r#", "attn_config": 3"#, "attn_config"),
            (
                r#", "attn_config": {"clip_qkv": -1}"#,
                "attn_config.clip_qkv",
            ),
            (
                r#", "attn_config": {"softmax_scale": "x"}"#,
                "attn_config.softmax_scale",
            ),
            (r#", "max_seq_len": 0"#, "max_seq_len"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(&format!("field `{want}`")), "{extra}: {err}");
        }
    }
}
