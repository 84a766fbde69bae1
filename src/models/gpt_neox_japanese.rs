//! GPT-NeoX-Japanese (ABEJA): GPT-NeoX's fused head-interleaved `query_key_value` without
//! biases, RoPE on `rotary_pct` (all by default) of each head, sequential pre-norm LayerNorm
//! layers, an unbiased MLP `intermediate_multiple_size` times the hidden size, and one bias,
//! `dense_bias`, added to the last layer's attention output; the LM head (`embed_out`) is tied
//! to `embed_in` unless the config unties it.

use super::components::{fused_qkv, linear, ungated_mlp, Activation, FusedQkv, Norm, NormKind};
use super::decoder::{Family, Names};
use super::family::{without_windows, FamilySpec};
use super::gpt_neox::{self, read_neox_rope};
use crate::config::{
    read_decoder, ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields, HfConfig,
    ModelType, Rope, Sign,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::MAX_WIDTH;
use crate::Result;

/// The family's registry entry. onnxruntime-genai has no `gpt_neox_japanese` type: its
/// generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gpt_neox_japanese",
    summary: "GPT-NeoX's fused `query_key_value` without biases, sequential layers, full RoPE \
              by default, unbiased MLP, one `dense_bias` on the last layer's attention, tied head",
    model_types: &[ModelType::generative("gpt_neox_japanese", "decoder", read)],
};

/// transformers' GPTNeoXJapaneseConfig: no biases, GELU read by the knobs, RoPE theta
/// `rotary_emb_base` (1e4) on `rotary_pct` (1.0) of each head, tied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::None,
    silu_mlp: false,
    rope: japanese_rope,
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

fn japanese_rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    read_neox_rope(raw, head_dim, f, 1.0)
}

/// GPT-NeoX-Japanese's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptNeoxJapanese {
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
    /// The MLP activation (`hidden_act`).
    pub act: Activation,
    /// The layer whose attention output gets `dense_bias` (the last).
    pub last_layer: usize,
}

/// Reads a GPT-NeoX-Japanese config as transformers does: hidden 2560, 32 layers of 32 heads,
/// an MLP `intermediate_multiple_size` (4) times as wide, `gelu`, 2048 positions, vocabulary
/// 32000, `layer_norm_eps` 1e-5, tied. Errors name the field.
fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden = raw.hidden_size.unwrap_or(2560);
    let multiple = raw.intermediate_multiple_size.unwrap_or(4);
    let multiple = f.positive("intermediate_multiple_size", Some(multiple), MAX_WIDTH)?;
    // The config class has no key/value heads, windows or intermediate_size of its own.
    let raw = HfConfig {
        hidden_size: Some(hidden),
        num_hidden_layers: raw.num_hidden_layers.or(Some(32)),
        num_attention_heads: raw.num_attention_heads.or(Some(32)),
        max_position_embeddings: raw.max_position_embeddings.or(Some(2048)),
        vocab_size: raw.vocab_size.or(Some(32000)),
        intermediate_size: Some(hidden.saturating_mul(multiple as i64)),
        num_key_value_heads: None,
        head_dim: None,
        ..without_windows(raw)
    };
    let mut cfg = read_decoder(&raw, t, f, &FIELDS, |dims| {
        let act = Activation::read(raw.hidden_act.as_deref(), "gelu", "hidden_act", f)?;
        let eps = f.number(
            "layer_norm_eps",
            raw.layer_norm_eps,
            1e-5,
            Sign::NonNegative,
        )?;
        Ok(GptNeoxJapanese {
            layer_norm_eps: eps,
            act,
            last_layer: dims.num_hidden_layers - 1,
        })
    })?;
    cfg.rms_norm_eps = 0.0;
    Ok(cfg)
}

impl Family for GptNeoxJapanese {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(gpt_neox::checkpoint_name)
    }

    fn names(&self) -> Names {
        Names {
            root: "gpt_neox_japanese",
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

    /// q, k and v as three projections, their rows gathered from the fused, unbiased
    /// `query_key_value` when the model is saved.
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let layout = FusedQkv::per_head(cfg.num_attention_heads, cfg.head_dim);
        let fused = format!("{attn}.query_key_value");
        fused_qkv(b, x, attn, &fused, &layout, cfg.hidden_size, false, dtype)
    }

    /// `dense(y)`, plus `dense_bias` in the last layer.
    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let h = cfg.hidden_size;
        let out = linear(b, y, &format!("{attn}.dense"), h, h, false, dtype);
        let names = self.names();
        let last = format!(
            "{}.{}.{}.{}",
            names.root, names.layers, self.last_layer, names.attn
        );
        if attn != last {
            return out;
        }
        let name = format!("{attn}.dense_bias");
        let bias = b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape: vec![h],
            source: Some(TensorSource::Checkpoint(name)),
        });
        b.op("Add", &[&out, &bias], vec![])
    }

    /// `dense_4h_to_h(act(dense_h_to_4h(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let names = (mlp, "dense_h_to_4h", "dense_4h_to_h");
        ungated_mlp(b, cfg, x, names, self.act, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ArchConfig> {
        let fields = r#""model_type": "gpt_neox_japanese", "hidden_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 128,
            "vocab_size": 300"#;
        crate::models::parse_fields(fields, extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "intermediate_size": 7, "num_key_value_heads": 2"#).unwrap();
        assert_eq!((cfg.intermediate_size, cfg.num_key_value_heads), (256, 4));
        assert_eq!((cfg.rope.rotary_dim, cfg.rope.theta), (16, 1e4));
        assert!(cfg.tie_word_embeddings && !cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias);
        let knobs = cfg.knobs::<GptNeoxJapanese>().unwrap();
        let exact = Activation::Gelu(crate::config::Gelu::Exact);
        assert_eq!(
            (knobs.act, knobs.last_layer, knobs.layer_norm_eps),
            (exact, 1, 1e-5)
        );
        let v4 = parse(
            r#", "rotary_pct": 0.5, "rotary_emb_base": 500, "intermediate_multiple_size": 2"#,
        )
        .unwrap();
        assert_eq!((v4.rope.rotary_dim, v4.rope.theta), (8, 500.0));
        assert_eq!(v4.intermediate_size, 128);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (r#", "hidden_act": "bogus""#, "hidden_act"),
            (
                r#", "intermediate_multiple_size": 0"#,
                "intermediate_multiple_size",
            ),
            (r#", "rotary_pct": 1.5"#, "rotary_pct"),
            (r#", "layer_norm_eps": -1"#, "layer_norm_eps"),
        ] {
            let msg = parse(extra).unwrap_err().to_string();
            assert!(msg.contains(&format!("field `{field}`")), "{extra}: {msg}");
        }
    }
}
