//! OpenAI GPT (GPT-1): GPT-2's Conv1D weights and learned positions in post-norm layers,
//! `ln_1(x + attn(x))` then `ln_2(h + mlp(h))`, with no final norm: the last layer's output
//! goes to the head (tied to `tokens_embed` unless the config unties it). The MLP is always
//! 4·`n_embd` wide; its activation `afn` reads "gelu" as transformers' tanh form.

use super::components::{conv1d_mlp, learned_positions, Activation, DecoderInputs, Norm};
use super::decoder::{Family, LayerNorms, Names};
use super::family::FamilySpec;
use super::gpt2::{self, read_gpt2_layout, Gpt2Config};
use crate::config::{ArchConfig, CheckpointRenaming, Fields, Gelu, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `openai-gpt` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "openai",
    summary: "GPT-2's Conv1D weights and learned positions in post-norm layers \
              (`ln(x + f(x))`), no final norm, `afn` activation (tanh GELU, ReLU or SiLU)",
    model_types: &[ModelType::generative("openai-gpt", "decoder", read)],
};

/// OpenAI GPT's knobs: GPT-2's LayerNorm epsilon and the MLP activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenAiGpt {
    /// The LayerNorm epsilon (GPT-2's knobs; their GELU is not read).
    pub gpt2: Gpt2Config,
    /// The MLP activation (`afn`).
    pub act: Activation,
}

/// Reads an OpenAI GPT config as transformers' OpenAIGPTConfig does: GPT-2's sizes
/// (`n_embd`, `n_layer`, `n_head`, `n_positions`, `layer_norm_epsilon`), an MLP of 4·`n_embd`
/// whatever `n_inner` says, `afn` "gelu" by default.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // GPT-2's own MLP fields mean nothing to OpenAI GPT.
    let gpt = HfConfig {
        activation_function: None,
        n_inner: None,
        intermediate_size: None,
        ..raw.clone()
    };
    let (mut cfg, gpt2) = read_gpt2_layout(&gpt, model_type, f, "gelu_new", |heads| heads)?;
    let afn = raw.afn.as_deref().unwrap_or("gelu");
    // OpenAI GPT's own table: its "gelu" is the tanh form.
    let act = match afn {
        "gelu" => Some(Activation::Gelu(Gelu::Tanh)),
        "relu" => Some(Activation::Relu),
        "silu" | "swish" => Some(Activation::Silu),
        _ => None,
    }
    .ok_or_else(|| {
        f.err(
            "afn",
            &format!("`{afn}` is not supported (expected gelu, relu, silu or swish)"),
        )
    })?;
    cfg.intermediate_size = 4 * cfg.hidden_size;
    cfg.family = Knobs::new(OpenAiGpt { gpt2, act });
    Ok(cfg)
}

/// Post-norm GPT-2 layers without a final norm.
impl Family for OpenAiGpt {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            embed: "tokens_embed",
            ..self.gpt2.names()
        }
    }

    fn norm(&self, cfg: &ArchConfig) -> Norm {
        self.gpt2.norm(cfg)
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: None,
            post_attention: Some("ln_1"),
            pre_mlp: None,
            post_mlp: Some("ln_2"),
        }
    }

    fn norm_after_residual(&self) -> bool {
        true
    }

    fn final_norm(&self) -> bool {
        false
    }

    /// Token embeddings plus the `transformer.positions_embed` rows of `position_ids`.
    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let table = [cfg.max_position_embeddings, cfg.hidden_size];
        let module = "transformer.positions_embed";
        let positions = learned_positions(b, module, table, &io.position_ids, 0, dtype);
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    /// The q, k and v column blocks of the fused Conv1D `c_attn`, as GPT-2's.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        self.gpt2.qkv(b, cfg, x, attn, dtype)
    }

    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        self.gpt2.o_proj(b, cfg, y, attn, dtype)
    }

    /// `c_proj(act(c_fc(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        conv1d_mlp(b, cfg, x, mlp, self.act, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "openai-gpt", "n_embd": 64, "n_head": 4, "n_layer": 2,
            "n_positions": 128, "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "n_inner": 100, "activation_function": "bogus""#).unwrap();
        assert_eq!(cfg.intermediate_size, 256);
        assert!(cfg.tie_word_embeddings);
        let knobs = cfg.knobs::<OpenAiGpt>().unwrap();
        assert_eq!(knobs.act, Activation::Gelu(Gelu::Tanh));
        let relu = parse(r#", "afn": "relu""#).unwrap();
        assert_eq!(relu.knobs::<OpenAiGpt>().unwrap().act, Activation::Relu);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (r#", "afn": "gelu_new""#, "afn"),
            (r#", "layer_norm_epsilon": -1"#, "layer_norm_epsilon"),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
        // n_head does not divide the width
        let heads = r#""model_type": "openai-gpt", "n_embd": 64, "n_head": 5"#;
        let msg = crate::models::parse_fields(heads, "")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("field `n_head`"), "{msg}");
    }
}
