//! GPT-NeoX (EleutherAI: Pythia, GPT-NeoX-20B…): LayerNorm with bias, one fused
//! `query_key_value` projection whose rows are grouped by head (`[heads, 3, head_dim]`: each
//! head's q, k and v rows together), RoPE on the first `rotary_pct` (0.25 by default) of each
//! head, a GELU MLP `dense_4h_to_h(gelu(dense_h_to_4h(x)))`, biases on every projection, and
//! by default parallel residual blocks with a norm each,
//! `x + attn(ln1(x)) + mlp(ln2(x))` (`use_parallel_residual`).

use super::components::{head_interleaved_qkv, ungated_mlp, Activation, Norm, NormKind};
use super::decoder::{Family, Names};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields, Gelu,
    HfConfig, Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::{Error, Result};

/// The family's registry entry. onnxruntime-genai 0.18 has no `gpt_neox` type: its generic
/// `decoder` runs the graph (whose q, k and v are separate projections, split at save time).
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt_neox",
    summary: "fused head-interleaved `query_key_value` (split at save time), parallel residual \
              with two LayerNorms, partial RoPE (`rotary_pct`), GELU MLP, biases everywhere",
    model_types: &[ModelType::generative("gpt_neox", "decoder", read)],
};

/// transformers' GPTNeoXConfig: GELU read by the knobs, biases set below, RoPE theta
/// `rotary_emb_base` (1e4) on `rotary_pct` (0.25) of each head, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    rope: neox_rope,
    ..DecoderFields::LLAMA
};

/// GPT-NeoX's RoPE, [`read_neox_rope`] with `rotary_pct` 0.25 by default.
fn neox_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<crate::config::Rope> {
    read_neox_rope(raw, head_dim, f, 0.25)
}

/// The RoPE as transformers reads a GPT-NeoX-like config: `rope_parameters` (or
/// `rope_scaling`) first, else `rotary_emb_base` and `rotary_pct` (`default_pct` when
/// absent); the top-level `rope_theta` and `partial_rotary_factor` of other families are
/// ignored. Errors name the field read.
pub(super) fn read_neox_rope(
    raw: &HfConfig,
    head_dim: usize,
    f: &Fields<'_>,
    default_pct: f64,
) -> Result<crate::config::Rope> {
    let neox = HfConfig {
        rope_theta: raw.rotary_emb_base,
        partial_rotary_factor: Some(raw.rotary_pct.unwrap_or(default_pct)),
        ..raw.clone()
    };
    read_rope(&neox, head_dim, 10_000.0, f).map_err(|e| match e {
        Error::ConfigField {
            path,
            field,
            message,
        } => {
            let field = match field.as_str() {
                "partial_rotary_factor" => "rotary_pct".to_string(),
                "rope_theta" => "rotary_emb_base".to_string(),
                _ => field,
            };
            Error::ConfigField {
                path,
                field,
                message,
            }
        }
        e => e,
    })
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // GPTNeoXConfig has no key/value heads or sliding windows: transformers runs multi-head
    // attention without a window, whatever else config.json holds.
    let raw = HfConfig {
        num_key_value_heads: None,
        sliding_window: None,
        use_sliding_window: None,
        layer_types: None,
        ..raw.clone()
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |_| {
        let act = raw.hidden_act.as_deref().unwrap_or("gelu");
        let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
            f.err(
                "hidden_act",
                &format!(
                    "`{act}` is not supported for gpt_neox (expected {})",
                    Gelu::NAMES
                ),
            )
        })?;
        Ok(GptNeox {
            layer_norm_eps: f.number(
                "layer_norm_eps",
                raw.layer_norm_eps,
                1e-5,
                Sign::NonNegative,
            )?,
            gelu,
            parallel_residual: raw.use_parallel_residual.unwrap_or(true),
        })
    })?;
    let attention_bias = raw.attention_bias.unwrap_or(true);
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (attention_bias, attention_bias, true);
    // transformers derives the head width from hidden_size; a different head_dim would
    // not be the model transformers runs.
    if cfg.q_size() != cfg.hidden_size {
        return Err(f.err(
            "head_dim",
            &format!(
                "{} (transformers' GPT-NeoX uses hidden_size / num_attention_heads = {})",
                cfg.head_dim,
                cfg.hidden_size / cfg.num_attention_heads
            ),
        ));
    }
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

/// GPT-NeoX's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptNeox {
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`hidden_act`).
    pub gelu: Gelu,
    /// `x + attn(ln1(x)) + mlp(ln2(x))` instead of sequential blocks
    /// (`use_parallel_residual`).
    pub parallel_residual: bool,
}

impl Family for GptNeox {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "gpt_neox",
            embed: "embed_in",
            layers: "layers",
            attn: "attention",
            o_proj: "dense",
            final_norm: "final_layer_norm",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }

    fn parallel_blocks(&self) -> bool {
        self.parallel_residual
    }

    /// q, k and v as three projections, their rows gathered from the fused
    /// `query_key_value` when the model is saved.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        head_interleaved_qkv(b, cfg, x, attn, dtype)
    }

    /// `dense_4h_to_h(gelu(dense_h_to_4h(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        ungated_mlp(
            b,
            cfg,
            x,
            (mlp, "dense_h_to_4h", "dense_4h_to_h"),
            Activation::Gelu(self.gelu),
            dtype,
        )
    }
}

/// Checkpoint names as the builder reads them: checkpoints written before transformers 5
/// (the hub's Pythia models) call the LM head `embed_out`; transformers 5 `lm_head`.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(match name.strip_prefix("embed_out.") {
        Some(rest) => format!("lm_head.{rest}"),
        None => name.to_string(),
    })
}

#[cfg(test)]
mod tests {

    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        parse_sized(64, extra)
    }

    fn parse_sized(hidden_size: usize, extra: &str) -> crate::Result<ArchConfig> {
        let fields = format!(
            r#""model_type": "gpt_neox", "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 128,
            "hidden_size": {hidden_size}"#
        );
        crate::models::parse_fields(&fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 5"#).unwrap();
        assert_eq!((cfg.num_key_value_heads, cfg.head_dim), (4, 16));
        assert_eq!((cfg.rope.rotary_dim, cfg.rope.theta), (4, 1e4));
        assert!(cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias && !cfg.tie_word_embeddings);
        let knobs = cfg.knobs::<GptNeox>().unwrap();
        assert_eq!(knobs.gelu, Gelu::Exact);
        assert!(knobs.parallel_residual);
        assert_eq!(knobs.layer_norm_eps, 1e-5);
        let v4 = parse(
            r#", "rotary_pct": 0.5, "rotary_emb_base": 500, "use_parallel_residual": false,
            "attention_bias": false, "hidden_act": "gelu_new""#,
        )
        .unwrap();
        assert_eq!((v4.rope.rotary_dim, v4.rope.theta), (8, 500.0));
        assert!(!v4.qkv_bias && !v4.o_bias && v4.mlp_bias);
        let knobs = v4.knobs::<GptNeox>().unwrap();
        assert!(!knobs.parallel_residual);
        assert_eq!(knobs.gelu, Gelu::Tanh);
        let v5 = parse(
            r#", "rotary_pct": 0.5, "rope_parameters": {"rope_type": "default",
            "rope_theta": 1000, "partial_rotary_factor": 1.0}"#,
        )
        .unwrap();
        assert_eq!((v5.rope.rotary_dim, v5.rope.theta), (16, 1000.0));
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "rotary_pct": 0.01"#, "rotary_pct"),
            (r#", "rotary_pct": 1.5"#, "rotary_pct"),
            (r#", "rotary_emb_base": -1"#, "rotary_emb_base"),
            (r#", "hidden_act": "relu""#, "hidden_act"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#", "head_dim": 8"#, "head_dim"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
        let err = parse_sized(66, "").unwrap_err().to_string();
        assert!(err.contains("hidden_size (66)"), "{err}");
    }

    #[test]
    fn legacy_head_name_is_renamed() {
        assert_eq!(
            checkpoint_name("embed_out.weight").as_deref(),
            Some("lm_head.weight")
        );
        let layer = "gpt_neox.layers.0.attention.dense.weight";
        assert_eq!(checkpoint_name(layer).as_deref(), Some(layer));
    }
}
