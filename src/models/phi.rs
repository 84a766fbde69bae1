//! Phi-1/1.5/2: each layer applies attention (partial RoPE) and a GELU MLP in parallel to one
//! LayerNorm of the residual stream, `x + (attn(ln(x)) + mlp(ln(x)))`; then a final LayerNorm
//! and an LM head with bias. Every projection has a bias.

use super::components::{ungated_mlp, Activation, Norm, NormKind};
use super::decoder::{self, Family, LayerNorms, Names};
use super::family::FamilySpec;
use crate::config::decoder::default_rope;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, Fields, Gelu, HfConfig, Knobs, ModelType,
    Sign,
};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "phi",
    summary: "phi-1.5/phi-2: attention and GELU MLP in parallel off one LayerNorm, partial \
              RoPE, LM head with bias",
    model_types: &[ModelType::generative("phi", "phi", read)],
};

/// Phi's knobs: its LayerNorm and GELU (the LM head always has a bias).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhiConfig {
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`hidden_act`).
    pub gelu: Gelu,
}

/// Normalises a Phi config; errors name the field and what was expected.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden_size = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
    let kv_heads = match raw.num_key_value_heads {
        None => heads,
        some => f.positive("num_key_value_heads", some, MAX_HEADS)?,
    };
    if heads % kv_heads != 0 {
        return Err(f.err(
            "num_key_value_heads",
            &format!("{kv_heads} must divide num_attention_heads ({heads})"),
        ));
    }
    if hidden_size % heads != 0 {
        return Err(f.err(
            "num_attention_heads",
            &format!("{heads} does not divide hidden_size ({hidden_size})"),
        ));
    }
    let head_dim = hidden_size / heads;
    let act = raw.hidden_act.as_deref().unwrap_or("gelu_new");
    let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
        f.err(
            "hidden_act",
            &format!(
                "`{act}` is not supported for phi (expected {})",
                Gelu::NAMES
            ),
        )
    })?;
    if raw.qk_layernorm == Some(true) {
        return Err(f.err(
            "qk_layernorm",
            "is not supported (expected false: no LayerNorm on queries and keys)",
        ));
    }
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: f.positive("intermediate_size", raw.intermediate_size, MAX_WIDTH)?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size: f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?,
        max_position_embeddings: f.positive(
            "max_position_embeddings",
            raw.max_position_embeddings,
            MAX_POSITIONS,
        )?,
        rms_norm_eps: 0.0,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        rope: default_rope(raw, head_dim, f)?,
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id: first_token(f, "pad_token_id", raw.pad_token_id.as_ref())?,
        family: Knobs::new(PhiConfig {
            layer_norm_eps: f.number(
                "layer_norm_eps",
                raw.layer_norm_eps,
                1e-5,
                Sign::NonNegative,
            )?,
            gelu,
        }),
    })
}

/// Phi's hooks: LayerNorm, parallel blocks, `dense` output projection, `fc1`/`fc2` GELU MLP,
/// LM head with bias.
impl Family for PhiConfig {
    fn names(&self) -> Names {
        Names {
            o_proj: "dense",
            final_norm: "final_layernorm",
            ..Names::LLAMA
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
            pre_mlp: None,
            ..LayerNorms::PRE
        }
    }

    fn parallel_blocks(&self) -> bool {
        true
    }

    /// `fc2(gelu(fc1(x)))`.
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
            (mlp, "fc1", "fc2"),
            Activation::Gelu(self.gelu),
            dtype,
        )
    }

    /// `x @ head + lm_head.bias`.
    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        decoder::biased_logits(b, cfg, x, head, dtype);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ArchConfig;
    use crate::Result;

    fn parse(json: &str) -> Result<ArchConfig> {
        crate::models::parse_config(json.as_bytes(), std::path::Path::new("config.json"))
    }

    #[test]
    fn bad_phi_values_are_named() {
        let phi = r#"{"model_type": "phi", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 300,
            "max_position_embeddings": 128"#;
        for (extra, field) in [
            (r#""layer_norm_eps": -1"#, "layer_norm_eps"),
            (r#""partial_rotary_factor": 0.001"#, "partial_rotary_factor"),
        ] {
            let msg = parse(&format!("{phi}, {extra}}}")).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
    }
}
