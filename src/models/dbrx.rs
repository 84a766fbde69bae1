//! DBRX (Databricks): pre-norm blocks of LayerNorm without bias (`norm_attn_norm.norm_1`,
//! `norm_2`), one fused `Wqkv` projection (q, then `attn_config.kv_n_heads` key and value heads)
//! whose outputs are clamped to `attn_config.clip_qkv`, RoPE over whole heads, no biases, and in
//! every layer a sparse mixture of SwiGLU experts (`ffn`: router `router.layer`, experts stored
//! flat in `experts.mlp.w1`, `v1`, `w2`) routed by softmax → top-k (`ffn_config.moe_top_k`) →
//! weights divided by their sum (`moe_normalize_expert_weights` 1, the L1 norm; null leaves
//! them), and an untied LM head.
//!
//! transformers 5 reads the rotation's theta from `rope_parameters` (or a top-level
//! `rope_theta`), 1e4 by default: the `attn_config.rope_theta` of DBRX's own configs is not
//! read, and mobius follows transformers.

use super::components::{ExpertWeights, MoeSpec, Norm, NormKind, Router};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use super::olmo::clipped;
use super::phi3::Fused;
use crate::config::{
    first_token, parse_dtype, read_rope, token_list, ArchConfig, Fields, HfConfig, Knobs,
    ModelType, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{
    MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH,
};
use crate::Result;
use serde_json::{Map, Value};

/// The family's registry entry. onnxruntime-genai 0.18 has no `dbrx` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "dbrx",
    summary: "LayerNorm without bias, fused `Wqkv` clamped to `clip_qkv` (split at save time), \
              sparse SwiGLU experts stored flat (`w1`, `v1`, `w2`) in every layer, softmax → \
              top-k → L1-renormalised routing, untied",
    model_types: &[ModelType::generative("dbrx", "decoder", read)],
};

/// The router and experts of a DBRX block (module `ffn`).
const EXPERTS: ExpertWeights = ExpertWeights::Flat {
    router: "router.layer",
    gate: "experts.mlp.w1",
    up: "experts.mlp.v1",
    down: "experts.mlp.w2",
};

/// The sub-config `field` of `raw` as an object (empty when absent or null).
fn sub_config(value: Option<&Value>, field: &str, f: &Fields<'_>) -> Result<Map<String, Value>> {
    match value {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(other) => Err(f.err(field, &format!("{other} (expected an object)"))),
    }
}

/// A count of sub-config `map` (`{section}.{key}`), `default` when absent.
fn sub_count(
    map: &Map<String, Value>,
    (section, key): (&str, &str),
    default: usize,
    max: usize,
    f: &Fields<'_>,
) -> Result<usize> {
    let field = format!("{section}.{key}");
    match f.json_integer(&field, map.get(key))? {
        None => Ok(default),
        Some(n) => f.count(&field, n, max),
    }
}

/// Reads a DBRX config as transformers' DbrxConfig does (defaults: `d_model` 2048, `n_heads`
/// 16, `n_layers` 24, `max_seq_len` 2048, `vocab_size` 32000, 1 key/value head, 4 experts of
/// 3584, top-1, untied); errors name the field and what was expected.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden_size = f.positive("d_model", raw.d_model.or(Some(2048)), MAX_WIDTH)?;
    let heads = f.positive("n_heads", raw.n_heads.or(Some(16)), MAX_HEADS)?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "n_heads",
            &format!("{heads} does not divide d_model ({hidden_size})"),
        ));
    }
    let layers = f.positive("n_layers", raw.n_layers.or(Some(24)), MAX_LAYERS)?;
    let head_dim = hidden_size / heads;
    let attn = sub_config(raw.attn_config.as_ref(), "attn_config", f)?;
    let kv_heads = sub_count(&attn, ("attn_config", "kv_n_heads"), 1, heads, f)?;
    if heads % kv_heads != 0 {
        return Err(f.err(
            "attn_config.kv_n_heads",
            &format!("{kv_heads} does not divide n_heads ({heads})"),
        ));
    }
    let clip_qkv = match f.json_number("attn_config.clip_qkv", attn.get("clip_qkv"))? {
        None => None,
        Some(c) => Some(f.number("attn_config.clip_qkv", Some(c), c, Sign::NonNegative)?),
    };
    let ffn = sub_config(raw.ffn_config.as_ref(), "ffn_config", f)?;
    let experts = sub_count(&ffn, ("ffn_config", "moe_num_experts"), 4, MAX_EXPERTS, f)?;
    let top_k = sub_count(&ffn, ("ffn_config", "moe_top_k"), 1, experts, f)?;
    let width = sub_count(&ffn, ("ffn_config", "ffn_hidden_size"), 3584, MAX_WIDTH, f)?;
    let norm_field = "ffn_config.moe_normalize_expert_weights";
    let normalize = match ffn.get("moe_normalize_expert_weights") {
        None => true,
        Some(Value::Null) => false,
        Some(p) if p.as_f64() == Some(1.0) => true,
        Some(p) => {
            return Err(f.err(
                norm_field,
                &format!("{p} is not supported (expected 1, the L1 norm, or null)"),
            ))
        }
    };
    let act = ffn
        .get("ffn_act_fn")
        .and_then(|a| a.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("silu");
    if act != "silu" {
        return Err(f.err(
            "ffn_config.ffn_act_fn",
            &format!("`{act}` is not supported for dbrx (expected \"silu\")"),
        ));
    }
    if raw.tie_word_embeddings == Some(true) {
        return Err(f.err(
            "tie_word_embeddings",
            "is not supported (transformers refuses it for DBRX: expected false)",
        ));
    }
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: width,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size.or(Some(32_000)), MAX_VOCAB)?,
        max_position_embeddings: f.positive(
            "max_seq_len",
            raw.max_seq_len.or(Some(2048)),
            MAX_POSITIONS,
        )?,
        rms_norm_eps: 0.0,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        rope: read_rope(raw, head_dim, 10_000.0, f)?,
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
        family: Knobs::new(Dbrx {
            clip_qkv,
            experts,
            top_k,
            normalize,
        }),
    })
}

/// DBRX's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dbrx {
    /// The bound q, k and v are clamped to (`attn_config.clip_qkv`), if any.
    pub clip_qkv: Option<f32>,
    /// `ffn_config.moe_num_experts`.
    pub experts: usize,
    /// `ffn_config.moe_top_k`.
    pub top_k: usize,
    /// Whether the top-k weights are divided by their sum (`moe_normalize_expert_weights` 1).
    pub normalize: bool,
}

/// DBRX's hooks: its module names, bias-free LayerNorm, the clamped fused q/k/v, the MoE
/// blocks.
impl Family for Dbrx {
    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "wte",
            layers: "blocks",
            attn: "norm_attn_norm.attn",
            o_proj: "out_proj",
            final_norm: "norm_f",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::UnbiasedLayer,
            eps: 1e-5,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("norm_attn_norm.norm_1"),
            pre_mlp: Some("norm_attn_norm.norm_2"),
            ..LayerNorms::PRE
        }
    }

    /// q, k and v as three projections of rows of the fused `Wqkv` (sliced at save time), each
    /// clamped to `clip_qkv`.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let (h, kv) = (cfg.hidden_size, cfg.kv_size());
        let fused = Fused {
            weight: format!("{attn}.Wqkv.weight"),
            rows: h + 2 * kv,
            in_features: h,
        };
        [("q_proj", 0, h), ("k_proj", h, kv), ("v_proj", h + kv, kv)].map(|(name, start, len)| {
            let name = format!("{attn}.{name}");
            let y = fused.block(b, x, &name, start, len, dtype);
            clipped(b, y, self.clip_qkv, dtype)
        })
    }

    /// The MLP of layer `i` is the MoE block `ffn`.
    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        _i: usize,
        dtype: DType,
    ) -> String {
        let router = Router::Softmax {
            normalize: self.normalize,
        };
        let routing = (self.experts, self.top_k);
        let spec = MoeSpec::new(cfg, cfg.intermediate_size, routing, router, EXPERTS);
        spec.build(b, x, &format!("{layer}.ffn"), dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let json = format!(
            r#"{{"model_type": "dbrx", "vocab_size": 300, "d_model": 64, "n_heads": 4,
            "n_layers": 2{extra}}}"#
        );
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!(
            (cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size),
            (1, 16, 3584)
        );
        assert_eq!(
            (
                cfg.rope.theta,
                cfg.rope.rotary_dim,
                cfg.max_position_embeddings
            ),
            (1e4, 16, 2048)
        );
        assert!(!cfg.tie_word_embeddings && !cfg.qkv_bias);
        let k = *cfg.knobs::<Dbrx>().unwrap();
        assert_eq!(
            k,
            Dbrx {
                clip_qkv: None,
                experts: 4,
                top_k: 1,
                normalize: true
            }
        );
        let cfg = parse(
            r#", "attn_config": {"kv_n_heads": 2, "clip_qkv": 8, "rope_theta": 500000},
            "ffn_config": {"ffn_hidden_size": 32, "moe_num_experts": 16, "moe_top_k": 4,
            "moe_normalize_expert_weights": null}"#,
        )
        .unwrap();
        // attn_config.rope_theta is not read (transformers 5 does not).
        assert_eq!(
            (
                cfg.num_key_value_heads,
                cfg.intermediate_size,
                cfg.rope.theta
            ),
            (2, 32, 1e4)
        );
        let k = *cfg.knobs::<Dbrx>().unwrap();
        assert_eq!(
            k,
            Dbrx {
                clip_qkv: Some(8.0),
                experts: 16,
                top_k: 4,
                normalize: false
            }
        );
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (
                r#", "attn_config": {"kv_n_heads": 3}"#,
                "attn_config.kv_n_heads",
            ),
            (r#", "attn_config": 1"#, "attn_config"),
            (
                r#", "ffn_config": {"moe_num_experts": 2, "moe_top_k": 3}"#,
                "ffn_config.moe_top_k",
            ),
            (
                r#", "ffn_config": {"moe_normalize_expert_weights": 2.0}"#,
                "ffn_config.moe_normalize_expert_weights",
            ),
            (
                r#", "ffn_config": {"ffn_act_fn": {"name": "gelu"}}"#,
                "ffn_config.ffn_act_fn",
            ),
            (r#", "tie_word_embeddings": true"#, "tie_word_embeddings"),
            (r#", "n_heads": 5"#, "n_heads"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(&format!("field `{want}`")), "{extra}: {err}");
        }
    }
}
