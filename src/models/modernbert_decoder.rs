//! ModernBERT decoder: ModernBERT's layers run causally. The token embeddings are
//! layer-normed (`model.embeddings.norm`); every LayerNorm has a bias only with `norm_bias`
//! (epsilon `norm_eps`); layers are pre-norm but the first has no attention norm; the MLP is
//! a GLU of one fused `Wi` (`[2·I, H]`: the activated half first, then the gate) with
//! `hidden_activation` (a GELU); attention (`attn.q_proj`, `k_proj`, `v_proj`, `Wo`) is
//! local, a sliding window of `local_attention / 2` keys, except in every
//! `global_attn_every_n_layers`-th layer from the first (or as `layer_types` says), and
//! global and local layers rotate with their own RoPE (theta 160000 and 10000 by default).
//! After the final norm the LM head is `decoder(norm(act(dense(x))))`
//! (`lm_head.dense`, `classifier_activation`, `lm_head.norm`) with `decoder.bias`
//! (`decoder_bias`), its weight tied to the token embeddings by default.

use serde_json::{Map, Value};

use super::components::{gelu, linear, DecoderInputs, Norm, NormKind};
use super::decoder::{biased_logits, Family, LayerNorms, LayerRope, Names};
use super::family::FamilySpec;
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, sliding_layer_types, ArchConfig, Biases, CheckpointRenaming,
    DecoderFields, Fields, Gelu, HfConfig, Rope, Sign, SlidingLayers,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_LAYERS, MAX_POSITIONS};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "modernbert_decoder",
    summary: "ModernBERT's layers, causal: normed embeddings, LayerNorms (no attention norm in \
              the first layer), GLU MLP from a fused `Wi`, local (sliding) and global layers \
              with their own RoPE, LM head dense → GELU → LayerNorm → decoder + bias",
    model_types: &[ModelType::generative("modernbert-decoder", "decoder", read)],
};

/// transformers' ModernBertDecoderConfig: `attention_bias` on q, k, v and `Wo`, `mlp_bias` on
/// `Wi` and `Wo`, tied, global RoPE theta 160000, a global layer every 3 from the first.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: true },
    silu_mlp: false,
    rope: |raw, head_dim, f| rope(raw, head_dim, "full_attention", f),
    tie_word_embeddings: true,
    use_sliding_window: true,
    sliding_layers: SlidingLayers::Pattern(pattern_layers),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let sliding = match sliding_layer_types(raw, layers, f)? {
        Some(sliding) => sliding,
        None => pattern_layers(raw, layers, f)?,
    };
    let window = match raw.local_attention {
        None => Some(64),
        Some(None) => None,
        Some(Some(span)) => Some(f.count("local_attention", span, MAX_POSITIONS)? / 2),
    };
    if window.is_none() && sliding.contains(&true) {
        return Err(f.err(
            "local_attention",
            "null, but some layers are sliding_attention layers (they need a window)",
        ));
    }
    let mut raw = HfConfig {
        sliding_window: Some(window.map(|w| w as i64)),
        use_sliding_window: Some(true),
        // No grouped-query attention: every head has its own keys and values.
        num_key_value_heads: None,
        ..raw.clone()
    };
    raw.hidden_act = None;
    let gelu_of =
        |field: &str, value: &Option<String>| Gelu::read(value.as_deref(), "gelu", field, f);
    let act = gelu_of("hidden_activation", &raw.hidden_activation)?;
    let head_act = gelu_of("classifier_activation", &raw.classifier_activation)?;
    let eps = f.number("norm_eps", raw.norm_eps, 1e-5, Sign::NonNegative)?;
    let kind = match raw.norm_bias.unwrap_or(false) {
        true => NormKind::Layer,
        false => NormKind::UnbiasedLayer,
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        Ok(ModernBertDecoder {
            norm: Norm { kind, eps },
            act,
            head_act,
            classifier_bias: raw.classifier_bias.unwrap_or(false),
            decoder_bias: raw.decoder_bias.unwrap_or(true),
            local_rope: rope(&raw, dims.head_dim, "sliding_attention", f)?,
            sliding,
        })
    })
}

/// The sliding layers without `layer_types`: all but every `global_attn_every_n_layers`-th
/// (default 3) from the first.
fn pattern_layers(raw: &HfConfig, layers: usize, f: &Fields<'_>) -> Result<Vec<bool>> {
    let field = "global_attn_every_n_layers";
    let every = f.optional_count(field, raw.global_attn_every_n_layers, 3, MAX_LAYERS)?;
    Ok((0..layers).map(|i| i % every != 0).collect())
}

/// The RoPE of the `kind` layers (`full_attention` or `sliding_attention`): their entry of
/// `rope_parameters` (transformers v5), else `global_rope_theta` (`local_rope_theta`) with
/// `rope_scaling` (v4); theta 160000 (10000) by default.
fn rope(raw: &HfConfig, head_dim: usize, kind: &str, f: &Fields<'_>) -> Result<Rope> {
    let (default_theta, legacy) = match kind {
        "full_attention" => (160_000.0, raw.global_rope_theta),
        _ => (10_000.0, raw.local_rope_theta),
    };
    let mut one = HfConfig {
        rope_parameters: None,
        rope_scaling: None,
        rope_theta: None,
        ..raw.clone()
    };
    match &raw.rope_parameters {
        Some(Value::Object(map))
            if map.contains_key("full_attention") || map.contains_key("sliding_attention") =>
        {
            let mut params = match map.get(kind) {
                Some(Value::Object(p)) => p.clone(),
                Some(Value::Null) | None => Map::new(),
                Some(other) => {
                    return Err(f.err(
                        &format!("rope_parameters.{kind}"),
                        &format!("{other} (expected an object)"),
                    ))
                }
            };
            params
                .entry("rope_theta")
                .or_insert_with(|| Value::from(default_theta));
            one.rope_parameters = Some(Value::Object(params));
        }
        Some(Value::Null) | None => {
            one.rope_theta = Some(legacy.unwrap_or(default_theta));
            one.rope_scaling = raw.rope_scaling.clone();
        }
        Some(other) => {
            return Err(f.err(
                "rope_parameters",
                &format!("{other} (expected full_attention and sliding_attention entries)"),
            ))
        }
    }
    read_rope(&one, head_dim, default_theta, f)
}

/// ModernBERT decoder's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModernBertDecoder {
    /// Every LayerNorm: `norm_eps`, a bias with `norm_bias`.
    pub norm: Norm,
    /// The MLP's `hidden_activation`.
    pub act: Gelu,
    /// The LM head's `classifier_activation`.
    pub head_act: Gelu,
    /// `classifier_bias`: the LM head's dense layer has a bias.
    pub classifier_bias: bool,
    /// `decoder_bias`: the output projection has a bias.
    pub decoder_bias: bool,
    /// The RoPE of the local (sliding) layers.
    pub local_rope: Rope,
    /// Per layer, whether it is local (slides and rotates with `local_rope`).
    pub sliding: Vec<bool>,
}

/// The pre-norm layer's norms (`attn_norm`, `mlp_norm`).
const NORMS: LayerNorms = LayerNorms {
    pre_attention: Some("attn_norm"),
    post_attention: None,
    pre_mlp: Some("mlp_norm"),
    post_mlp: None,
};

/// The output projection `decoder` is read as `lm_head` (`decoder.weight`, `decoder.bias`);
/// the head's other modules (`lm_head.dense`, `lm_head.norm`) keep their names.
fn checkpoint_name(name: &str) -> Option<String> {
    Some(match name.strip_prefix("decoder.") {
        Some(rest) => format!("lm_head.{rest}"),
        None => name.to_string(),
    })
}

impl Family for ModernBertDecoder {
    fn names(&self) -> Names {
        Names {
            embed: "embeddings.tok_embeddings",
            attn: "attn",
            o_proj: "Wo",
            final_norm: "final_norm",
            ..Names::LLAMA
        }
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn norm(&self, _cfg: &ArchConfig) -> Norm {
        self.norm
    }

    fn layer_norms(&self) -> LayerNorms {
        NORMS
    }

    fn layer_norms_of(&self, i: usize) -> LayerNorms {
        match i {
            0 => LayerNorms {
                pre_attention: None,
                ..NORMS
            },
            _ => NORMS,
        }
    }

    fn embed(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let h = cfg.hidden_size;
        self.norm.apply(b, &x, "model.embeddings.norm", h, dtype)
    }

    /// Sliding-window layers rotate with the local RoPE (`model.rotary_emb_local.*`).
    fn other_rope(&self) -> Option<(&Rope, &'static str)> {
        Some((&self.local_rope, "model.rotary_emb_local"))
    }

    fn layer_rope_kind(&self, _cfg: &ArchConfig, i: usize) -> LayerRope {
        LayerRope::other_if(self.sliding[i])
    }

    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let mut half = |part: usize, name: &str| {
            let rows = |tensor: &str| TensorSource::Slice {
                source: Box::new(TensorSource::Checkpoint(format!("{mlp}.Wi.{tensor}"))),
                axis: 0,
                start: part * i,
                len: i,
                total: 2 * i,
            };
            let w = b.initializer(Initializer {
                name: format!("{mlp}.Wi.{name}.weight_t"),
                dtype,
                shape: vec![h, i],
                source: Some(TensorSource::Transpose(Box::new(rows("weight")))),
            });
            let y = b.op("MatMul", &[x, &w], vec![]);
            if !cfg.mlp_bias {
                return y;
            }
            let bias = b.initializer(Initializer {
                name: format!("{mlp}.Wi.{name}.bias"),
                dtype,
                shape: vec![i],
                source: Some(rows("bias")),
            });
            b.op("Add", &[&y, &bias], vec![])
        };
        let input = half(0, "input");
        let gate = half(1, "gate");
        let act = gelu(b, &input, self.act);
        let glu = b.op("Mul", &[&act, &gate], vec![]);
        linear(b, &glu, &format!("{mlp}.Wo"), i, h, cfg.mlp_bias, dtype)
    }

    fn logits(&self, b: &mut GraphBuilder, cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let h = cfg.hidden_size;
        let y = linear(b, x, "lm_head.dense", h, h, self.classifier_bias, dtype);
        let y = gelu(b, &y, self.head_act);
        let y = self.norm.apply(b, &y, "lm_head.norm", h, dtype);
        match self.decoder_bias {
            true => biased_logits(b, cfg, &y, head, dtype),
            false => b.op_into("MatMul", &[&y, head], vec![], "logits"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ModernBertDecoder;
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "modernbert-decoder", "hidden_size": 64, "intermediate_size": 96,
            "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 300,
            "max_position_embeddings": 512"#,
            extra,
        )
    }

    fn knobs(cfg: &ArchConfig) -> &ModernBertDecoder {
        cfg.knobs::<ModernBertDecoder>().unwrap()
    }

    #[test]
    fn local_layers_windows_and_ropes() {
        let cfg = parse("").unwrap();
        assert_eq!(knobs(&cfg).sliding, [false, true, true, false]);
        assert_eq!(cfg.layer_windows, [None, Some(64), Some(64), None]);
        assert_eq!(cfg.rope.theta, 160_000.0);
        assert_eq!(knobs(&cfg).local_rope.theta, 10_000.0);
        assert!(cfg.tie_word_embeddings);
        assert_eq!(cfg.num_key_value_heads, 4);
        let v4 = parse(
            r#", "global_attn_every_n_layers": 2, "local_attention": 32,
            "global_rope_theta": 5000.0, "local_rope_theta": 100.0"#,
        )
        .unwrap();
        assert_eq!(knobs(&v4).sliding, [false, true, false, true]);
        assert_eq!(v4.layer_windows, [None, Some(16), None, Some(16)]);
        assert_eq!(
            (v4.rope.theta, knobs(&v4).local_rope.theta),
            (5000.0, 100.0)
        );
        let v5 = parse(
            r#", "layer_types": ["full_attention", "full_attention", "sliding_attention",
            "full_attention"], "rope_parameters": {"full_attention": {"rope_type": "default",
            "rope_theta": 7.0}, "sliding_attention": {"rope_type": "default"}}"#,
        )
        .unwrap();
        assert_eq!(knobs(&v5).sliding, [false, false, true, false]);
        assert_eq!(
            (v5.rope.theta, knobs(&v5).local_rope.theta),
            (7.0, 10_000.0)
        );
        for (extra, want) in [
            (r#", "local_attention": null"#, "local_attention"),
            (r#", "hidden_activation": "relu""#, "hidden_activation"),
            (
                r#", "rope_parameters": {"rope_theta": 5.0}"#,
                "rope_parameters",
            ),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
