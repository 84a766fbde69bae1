//! GPT-Neo (EleutherAI): GPT-2's pre-norm layers and learned positions with `nn.Linear`
//! weights, q/k/v projections without biases (`attn.attention.*`), attention scores that are
//! not scaled by 1/√head_dim, and layers that attend globally or locally, to the last
//! `window_size` tokens, as `attention_types` lists them (global and local in turn by default).

use super::components::{
    learned_positions, ungated_mlp, Activation, DecoderInputs, Norm, NormKind,
};
use super::decoder::{Family, LayerNorms, Names};
use super::family::{without_windows, FamilySpec};
use super::gpt2::{self, read_gpt2_layout};
use crate::config::{ArchConfig, CheckpointRenaming, Fields, HfConfig, Knobs, ModelType};
use crate::ir::{DType, GraphBuilder};
use crate::limits::config::{MAX_LAYERS, MAX_POSITIONS};
use crate::Result;
use serde_json::Value;

/// The family's registry entry. onnxruntime-genai has no `gpt_neo` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt_neo",
    summary: "GPT-2's layout with `nn.Linear` weights, unbiased q/k/v, unscaled attention \
              scores, global and local (`window_size`) layers as `attention_types` lists them",
    model_types: &[ModelType::generative("gpt_neo", "decoder", read)],
};

/// transformers' `window_size` when config.json leaves it out.
const DEFAULT_WINDOW: i64 = 256;

/// GPT-Neo's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptNeo {
    /// Epsilon of every LayerNorm (`layer_norm_epsilon`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`activation_function`).
    pub act: Activation,
}

/// Reads a GPT-Neo config as transformers' GPTNeoConfig does: `hidden_size`, `num_layers`,
/// `num_heads`, `max_position_embeddings`, `intermediate_size` (null: 4·hidden), `gelu_new`,
/// `window_size` 256, `attention_types` `[[["global", "local"], 12]]`, a tied head. Errors
/// name the field.
fn read(raw: &HfConfig, model_type: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    // GPTNeoConfig's own names (transformers maps num_attention_heads and num_hidden_layers
    // onto them), and none of GPT-2's spellings or Llama's windows.
    let sizes = HfConfig {
        n_embd: None,
        n_layer: raw.num_layers.or(raw.num_hidden_layers).or(Some(24)),
        n_head: raw.num_heads.or(raw.num_attention_heads).or(Some(16)),
        n_positions: None,
        n_inner: None,
        hidden_size: raw.hidden_size.or(Some(2048)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(2048)),
        vocab_size: raw.vocab_size.or(Some(50257)),
        layer_norm_eps: None,
        activation_function: None,
        ..without_windows(raw)
    };
    let (mut cfg, gpt2) = read_gpt2_layout(&sizes, model_type, f, "gelu_new", |heads| heads)?;
    let act = Activation::read(
        raw.activation_function.as_deref(),
        "gelu_new",
        "activation_function",
        f,
    )?;
    let window = f.positive(
        "window_size",
        Some(raw.window_size.unwrap_or(DEFAULT_WINDOW)),
        MAX_POSITIONS,
    )?;
    let local = local_layers(raw.attention_types.as_ref(), cfg.num_hidden_layers, f)?;
    cfg.layer_windows = local.into_iter().map(|l| l.then_some(window)).collect();
    (cfg.qkv_bias, cfg.o_bias, cfg.mlp_bias) = (false, true, true);
    cfg.family = Knobs::new(GptNeo {
        layer_norm_eps: gpt2.layer_norm_eps,
        act,
    });
    Ok(cfg)
}

/// Per layer, whether `attention_types` (`[[["global", "local"], n], …]`: each list repeated
/// n times; absent: `[[["global", "local"], 12]]`) makes it local. The expansion must have
/// one entry per layer, as transformers requires.
fn local_layers(types: Option<&Value>, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let bad = |what: &str| f.err("attention_types", what);
    let mut local = Vec::new();
    let Some(types) = types else {
        return match layers {
            24 => Ok((0..24).map(|i| i % 2 == 1).collect()),
            _ => Err(bad(&format!(
                "absent: its default lists 24 layers, the config has {layers}"
            ))),
        };
    };
    let items = types
        .as_array()
        .ok_or_else(|| bad("must be a list of [types, count] pairs"))?;
    for item in items {
        let pair = item.as_array().filter(|p| p.len() == 2);
        let (names, count) = match pair {
            Some(p) => (p[0].as_array(), p[1].as_u64()),
            None => (None, None),
        };
        let (Some(names), Some(count)) = (names, count) else {
            return Err(bad(&format!("{item} is not a [types, count] pair")));
        };
        let mut block = Vec::new();
        for name in names {
            match name.as_str() {
                Some("global") => block.push(false),
                Some("local") => block.push(true),
                _ => return Err(bad(&format!("{name} (expected \"global\" or \"local\")"))),
            }
        }
        for _ in 0..count {
            local.extend(&block);
            if local.len() > MAX_LAYERS {
                return Err(bad(&format!("lists more than {MAX_LAYERS} layers")));
            }
        }
    }
    if local.len() != layers {
        return Err(bad(&format!(
            "lists {} layers, the config has {layers}",
            local.len()
        )));
    }
    Ok(local)
}

impl Family for GptNeo {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(gpt2::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "transformer",
            embed: "wte",
            layers: "h",
            attn: "attn.attention",
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
        let table = [cfg.max_position_embeddings, cfg.hidden_size];
        let positions = learned_positions(b, "transformer.wpe", table, &io.position_ids, 0, dtype);
        b.op("Add", &[&x, &positions], vec![])
    }

    fn rotary_positions(&self, _cfg: &ArchConfig) -> bool {
        false
    }

    /// GPT-Neo does not scale the attention scores.
    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        1.0
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
        ungated_mlp(b, cfg, x, (mlp, "c_fc", "c_proj"), self.act, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "gpt_neo", "hidden_size": 64, "num_heads": 4,
            "num_layers": 2, "max_position_embeddings": 128, "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg =
            parse(r#", "attention_types": [[["global", "local"], 1]], "n_inner": 7"#).unwrap();
        assert_eq!(cfg.layer_windows, [None, Some(256)]);
        assert_eq!(cfg.intermediate_size, 256);
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && cfg.o_bias && cfg.mlp_bias);
        let knobs = cfg.knobs::<GptNeo>().unwrap();
        assert_eq!(knobs.act, Activation::Gelu(crate::config::Gelu::Tanh));
        assert_eq!(knobs.attention_scale(&cfg), 1.0);
        let local = parse(r#", "attention_types": [[["local"], 2]], "window_size": 4"#).unwrap();
        assert_eq!(local.layer_windows, [Some(4), Some(4)]);
        let default = crate::models::parse_fields(r#""model_type": "gpt_neo""#, "").unwrap();
        assert_eq!((default.hidden_size, default.num_hidden_layers), (2048, 24));
        assert_eq!(default.layer_windows[..3], [None, Some(256), None]);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            ("", "attention_types"),
            (
                r#", "attention_types": [[["global"], 3]]"#,
                "attention_types",
            ),
            (
                r#", "attention_types": [[["sparse"], 2]]"#,
                "attention_types",
            ),
            (r#", "attention_types": [["global", 2]]"#, "attention_types"),
            (
                r#", "attention_types": [[["local"], 2]], "window_size": 0"#,
                "window_size",
            ),
            (
                r#", "attention_types": [[["local"], 2]], "activation_function": "x""#,
                "activation_function",
            ),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
    }
}
