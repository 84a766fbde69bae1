//! GPT-J: one LayerNorm per layer feeding attention and MLP in parallel,
//! `x + attn(ln_1(x)) + mlp(ln_1(x))`, RoPE on the first `rotary_dim` channels of each head
//! with its pairs interleaved (`rotate_every_two`), q/k/v/out projections without biases, an
//! ungated `fc_out(act(fc_in(x)))` MLP with biases, a final LayerNorm and an LM head with a
//! bias. CodeGen (`codegen`) is this layout with q, k and v in one `qkv_proj` laid out for the
//! 4 model-parallel shards it was trained on: 4 chunks, each a quarter of q, then of v, then
//! of k; the three projections are cut out of it when the model is saved.

use super::components::{fused_qkv, ungated_mlp, Activation, FusedQkv, Norm, NormKind};
use super::decoder::{biased_logits, plain_qkv, Family, LayerNorms, Names};
use super::family::FamilySpec;
use super::gpt2::{self, read_gpt2_layout};
use crate::config::{
    ArchConfig, CheckpointRenaming, Fields, HfConfig, Knobs, ModelType, Rope, RopeScaling,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `gptj` or `codegen` type: its
/// generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gptj",
    summary: "parallel attention and MLP off one LayerNorm, partial interleaved RoPE \
              (`rotary_dim`), unbiased q/k/v/out, LM head with bias; codegen: one `qkv_proj` \
              in 4 model-parallel shards of q, v, k (cut apart at save time)",
    model_types: &[
        ModelType::generative("gptj", "decoder", |raw, t, f| {
            read_gptj_layout(raw, t, f, QkvWeights::Separate)
        }),
        ModelType::generative("codegen", "decoder", |raw, t, f| {
            read_gptj_layout(raw, t, f, QkvWeights::CodeGenShards)
        }),
    ],
};

/// Where a GPT-J-like layer's q, k and v weights are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkvWeights {
    /// `q_proj`, `k_proj`, `v_proj` (GPT-J).
    Separate,
    /// One `qkv_proj` of 4 chunks (the model-parallel shards CodeGen was trained on), each a
    /// quarter of q, then of v, then of k (CodeGen).
    CodeGenShards,
}

/// GPT-J's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptJ {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`activation_function`).
    pub act: Activation,
    /// Where the q, k and v weights are.
    pub qkv: QkvWeights,
}

/// transformers' `rotary_dim` when config.json leaves it out.
const DEFAULT_ROTARY_DIM: usize = 64;

/// The model-parallel shards of CodeGen's fused `qkv_proj`.
const CODEGEN_SHARDS: usize = 4;

/// Reads a GPT-J-like config as transformers' GPTJConfig (CodeGenConfig) does: GPT-2's sizes,
/// `rotary_dim` 64, `activation_function` `gelu_new`, an untied head. Errors name the field.
fn read_gptj_layout(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    qkv: QkvWeights,
) -> Result<ArchConfig> {
    let sizes = HfConfig {
        activation_function: None,
        ..raw.clone()
    };
    let (mut cfg, gpt2) = read_gpt2_layout(&sizes, model_type, f, "gelu_new", |heads| heads)?;
    let name = raw.activation_function.as_deref().unwrap_or("gelu_new");
    let act = Activation::from_hf_name(name).ok_or_else(|| {
        f.err(
            "activation_function",
            &format!(
                "`{name}` is not supported for {} (expected {})",
                model_type.name,
                Activation::NAMES
            ),
        )
    })?;
    let (heads, head_dim) = (cfg.num_attention_heads, cfg.head_dim);
    let rotary_dim = match raw.rotary_dim {
        None => DEFAULT_ROTARY_DIM,
        // null: transformers rotates with a table as wide as the hidden size, which fits
        // the heads only when there is one.
        Some(None) if heads == 1 => head_dim,
        Some(None) => {
            return Err(f.err(
                "rotary_dim",
                &format!(
                    "null with {heads} heads (transformers then rotates by a table \
                     hidden_size wide, which fits a single head only)"
                ),
            ))
        }
        Some(Some(d)) => f.positive("rotary_dim", Some(d), MAX_WIDTH)?,
    };
    if rotary_dim > head_dim {
        // transformers' sin/cos tables are then wider than the head they multiply.
        return Err(f.err(
            "rotary_dim",
            &format!("{rotary_dim} is wider than a head ({head_dim} channels)"),
        ));
    }
    if rotary_dim % 2 != 0 {
        return Err(f.err(
            "rotary_dim",
            &format!("{rotary_dim} (expected an even count)"),
        ));
    }
    if qkv == QkvWeights::CodeGenShards && cfg.hidden_size % CODEGEN_SHARDS != 0 {
        return Err(f.err(
            "n_embd",
            &format!(
                "{} (CodeGen's qkv_proj splits it into {CODEGEN_SHARDS} shards)",
                cfg.hidden_size
            ),
        ));
    }
    cfg.rope = Rope {
        theta: 10_000.0,
        scaling: RopeScaling::Default,
        rotary_dim,
        interleaved: true,
    };
    cfg.tie_word_embeddings = raw.tie_word_embeddings.unwrap_or(false);
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (false, false, true);
    cfg.family = Knobs::new(GptJ {
        layer_norm_eps: gpt2.layer_norm_eps,
        act,
        qkv,
    });
    Ok(cfg)
}

impl Family for GptJ {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "wte",
            layers: "h",
            attn: "attn",
            o_proj: "out_proj",
            final_norm: "ln_f",
        }
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::Layer,
            eps: self.layer_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("ln_1"),
            post_attention: None,
            pre_mlp: None,
            post_mlp: None,
        }
    }

    fn parallel_blocks(&self) -> bool {
        true
    }

    /// `q_proj`, `k_proj`, `v_proj`, or their rows cut out of CodeGen's fused `qkv_proj`.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        match self.qkv {
            QkvWeights::Separate => plain_qkv(b, cfg, x, attn, dtype),
            QkvWeights::CodeGenShards => {
                let layout = FusedQkv {
                    widths: [cfg.hidden_size; 3],
                    chunks: CODEGEN_SHARDS,
                    order: [0, 2, 1],
                };
                let fused = format!("{attn}.qkv_proj");
                fused_qkv(b, x, attn, &fused, &layout, cfg.hidden_size, false, dtype)
            }
        }
    }

    /// `fc_out(act(fc_in(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        ungated_mlp(b, cfg, x, (mlp, "fc_in", "fc_out"), self.act, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        biased_logits(b, cfg, x, head, dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "gptj", "n_embd": 64, "n_head": 4, "n_layer": 2,
            "n_positions": 128, "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "rotary_dim": 8"#).unwrap();
        assert_eq!((cfg.rope.rotary_dim, cfg.rope.interleaved), (8, true));
        assert_eq!(cfg.intermediate_size, 256);
        assert!(!cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && cfg.mlp_bias);
        let knobs = cfg.knobs::<GptJ>().unwrap();
        assert_eq!(knobs.act, Activation::Gelu(crate::config::Gelu::Tanh));
        assert_eq!(knobs.qkv, QkvWeights::Separate);
        let fields = r#""model_type": "gptj", "n_embd": 64, "n_head": 1, "n_layer": 2,
            "n_positions": 128, "vocab_size": 300"#;
        let one_head = crate::models::parse_fields(fields, r#", "rotary_dim": null"#).unwrap();
        assert_eq!(one_head.rope.rotary_dim, 64);
        let default = crate::models::parse_fields(fields, "").unwrap();
        assert_eq!(default.rope.rotary_dim, DEFAULT_ROTARY_DIM);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            // the default rotary_dim (64) is wider than a head of 16
            ("", "rotary_dim"),
            (r#", "rotary_dim": 7"#, "rotary_dim"),
            (r#", "rotary_dim": 32"#, "rotary_dim"),
            (r#", "rotary_dim": null"#, "rotary_dim"),
            (
                r#", "rotary_dim": 8, "activation_function": "tanh""#,
                "activation_function",
            ),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
    }

    #[test]
    fn codegen_reads_its_shards() {
        let fields = r#""model_type": "codegen", "n_head": 3, "n_layer": 2, "n_positions": 128,
            "vocab_size": 300, "rotary_dim": 8"#;
        let cfg = crate::models::parse_fields(fields, r#", "n_embd": 48"#).unwrap();
        assert_eq!(cfg.knobs::<GptJ>().unwrap().qkv, QkvWeights::CodeGenShards);
        // 4 shards do not split 66 channels
        let msg = crate::models::parse_fields(fields, r#", "n_embd": 66"#)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `n_embd`"), "{msg}");
    }
}
