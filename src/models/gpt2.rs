//! GPT-2: learned positions added to the token embeddings, pre-norm layers of LayerNorm →
//! multi-head attention (no RoPE) → residual → LayerNorm → GELU MLP → residual, a final
//! LayerNorm and the LM head (tied to `wte` unless the config unties it).
//!
//! Weights are HF `Conv1D`s stored `[in, out]`, used by `MatMul` as they are; the fused
//! `c_attn` (`[H, 3H]`) is cut lazily into its q, k and v column blocks.

use super::components::{conv1d, gelu, Conv1dParams, DecoderInputs, Norm, NormKind, RopeTables};
use super::decoder::{self, Family, LayerNorms, Names};
use super::registry::{FamilySpec, ModelType};
use crate::config::gpt2::{self as config, Gpt2Config};
use crate::config::{ArchConfig, CheckpointRenaming, FamilyKnobs, Rope};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};

/// The family's registry entry. onnxruntime-genai's own `gpt2` type expects one combined
/// `past_%d` cache tensor per layer, not the separate key/value inputs of our graph contract,
/// and refuses the package ("Model input was not found"); its generic `decoder` runs it.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt2",
    summary: "learned positions, LayerNorm, Conv1D weights with the fused `c_attn` cut \
              lazily into q/k/v, GELU MLP, tied head",
    model_types: &[ModelType::generative("gpt2", "decoder", config::read)],
};

/// GPT-2's hooks: `transformer.*` names, LayerNorm, learned positions, Conv1D projections.
impl Family for Gpt2Config {
    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "wte",
            layers: "h",
            attn: "attn",
            o_proj: "c_proj",
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
            pre_mlp: Some("ln_2"),
            post_mlp: None,
        }
    }

    /// Token embeddings plus the `transformer.wpe` rows of `position_ids`.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        b.set_scope("transformer.wpe");
        let wpe = b.initializer(Initializer {
            name: "transformer.wpe.weight".into(),
            dtype,
            shape: vec![cfg.max_position_embeddings, cfg.hidden_size],
            source: Some(TensorSource::Checkpoint("transformer.wpe.weight".into())),
        });
        let positions = b.op(
            "Gather",
            &[&wpe, &io.position_ids],
            vec![("axis", Attr::Int(0))],
        );
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary(
        &self,
        _b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        _dtype: DType,
    ) -> Vec<RopeTables> {
        vec![]
    }

    fn layer_rope<'c>(&'c self, _cfg: &'c ArchConfig, _i: usize) -> Option<(&'c Rope, usize)> {
        None
    }

    /// The q, k and v column blocks of the fused `c_attn`.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let h = cfg.hidden_size;
        [("q_proj", 0), ("k_proj", 1), ("v_proj", 2)].map(|(name, block)| {
            let params = Conv1dParams {
                weight: format!("{attn}.c_attn.weight"),
                bias: format!("{attn}.c_attn.bias"),
                columns: Some((block * h, h, 3 * h)),
            };
            conv1d(b, x, &format!("{attn}.{name}"), &params, h, h, dtype)
        })
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (h, proj) = (cfg.hidden_size, format!("{attn}.{}", self.names().o_proj));
        conv1d(b, y, &proj, &whole(&proj), h, h, dtype)
    }

    /// `c_proj(gelu(c_fc(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let fc = format!("{mlp}.c_fc");
        let up = conv1d(b, x, &fc, &whole(&fc), h, inner, dtype);
        let up = gelu(b, &up, self.gelu);
        let proj = format!("{mlp}.c_proj");
        conv1d(b, &up, &proj, &whole(&proj), inner, h, dtype)
    }
}

/// The whole `{prefix}.weight` / `{prefix}.bias` of one Conv1D.
fn whole(prefix: &str) -> Conv1dParams {
    Conv1dParams {
        weight: format!("{prefix}.weight"),
        bias: format!("{prefix}.bias"),
        columns: None,
    }
}

impl FamilyKnobs for Gpt2Config {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        decoder::build(cfg, dtype, self)
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }
}

/// Checkpoint names as the builder reads them: base-model checkpoints (`GPT2Model`, e.g. the
/// hub's `openai-community/gpt2`) spell `h.0.…`, `wte.weight`; `GPT2LMHeadModel` ones
/// `transformer.h.0.…`. Every name outside `transformer.` and `lm_head.` gets the prefix.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(
        if name.starts_with("transformer.") || name.starts_with("lm_head.") {
            name.to_string()
        } else {
            format!("transformer.{name}")
        },
    )
}
