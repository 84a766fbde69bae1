//! The decoder of BART-style sequence-to-sequence models run alone (transformers'
//! `BartForCausalLM`, `MBartForCausalLM`, `PLBartForCausalLM`, `MvpForCausalLM`,
//! `BlenderbotForCausalLM`, `BlenderbotSmallForCausalLM`, `MarianForCausalLM`,
//! `PegasusForCausalLM`, `TrOCRForCausalLM`): token embeddings (times √d_model with
//! `scale_embedding`) plus learned positions (offset by 2 but in the Blenderbots; Marian and
//! Pegasus: sinusoidal, the table computed at save time), `layernorm_embedding` (after the
//! positions are added, unless TrOCR's config drops it; Blenderbot-Small: on the token
//! embeddings before; Blenderbot, Marian, Pegasus: none), then the BART layers
//! (`components::encoder_layer`: self-attention with a KV cache, `fc1` → GELU → `fc2`;
//! post-norm, or pre-norm with a final `layer_norm` in mBART, Blenderbot and Pegasus) and the
//! LM head, tied to the embeddings unless the config unties it (TrOCR's head is
//! `output_projection`). The cross-attention (`encoder_attn`) is skipped, as transformers
//! skips it without encoder states.
//!
//! transformers builds the decoder alone for `*ForCausalLM`, which saves `is_decoder: true`;
//! mobius builds a config that says so (or names a `*ForCausalLM` in `architectures`) and
//! refuses the seq2seq checkpoints (docs/families.md, "Causal LMs of encoder architectures").
//! Positions are the `position_ids` input plus the offset.

use super::components::{
    attention, decoder_io, layer_norm, padding_mask, scalar, AttentionSpec, DecoderDims,
    EncoderLayer, EncoderNorms, LayerNames,
};
use super::family::FamilySpec;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, FamilyKnobs, Fields, Gelu, HfConfig, Knobs,
    ModelType, Rope, RopeScaling,
};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bart_lm",
    summary: "the decoder of a BART-style seq2seq model alone (`*ForCausalLM`, `is_decoder`): \
              learned positions (offset by 2 but in the blenderbots; marian, pegasus: \
              sinusoidal), `layernorm_embedding`, post-norm layers (mbart, blenderbot, pegasus: \
              pre-norm and a final norm), cross-attention skipped, tied head",
    model_types: &[
        ModelType::generative("bart", "decoder", |r, t, f| read(r, t, f, &BART)),
        ModelType::generative("mbart", "decoder", |r, t, f| read(r, t, f, &MBART)),
        ModelType::generative("plbart", "decoder", |r, t, f| read(r, t, f, &BART)),
        ModelType::generative("mvp", "decoder", |r, t, f| read(r, t, f, &BART)),
        ModelType::generative("blenderbot", "decoder", |r, t, f| {
            read(r, t, f, &BLENDERBOT)
        }),
        ModelType::generative("blenderbot-small", "decoder", |r, t, f| {
            read(r, t, f, &BLENDERBOT_SMALL)
        }),
        ModelType::generative("marian", "decoder", |r, t, f| read(r, t, f, &MARIAN)),
        ModelType::generative("pegasus", "decoder", |r, t, f| read(r, t, f, &PEGASUS)),
        ModelType::generative("trocr", "decoder", |r, t, f| read(r, t, f, &TROCR)),
    ],
};

/// Where a model type's `layernorm_embedding` sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedNorm {
    /// None (Blenderbot).
    None,
    /// On the sum of token and position embeddings (BART).
    AfterPositions,
    /// On the token embeddings, before the positions are added (Blenderbot-Small).
    BeforePositions,
}

/// One model type's layout: position table and offset, embedding norm, pre-norm layers.
#[derive(Debug, Clone, Copy)]
struct Layout {
    head: &'static str,
    sinusoidal: bool,
    position_offset: i64,
    embed_norm: EmbedNorm,
    pre_norm: bool,
}

const BART: Layout = Layout {
    head: "lm_head",
    sinusoidal: false,
    position_offset: 2,
    embed_norm: EmbedNorm::AfterPositions,
    pre_norm: false,
};
const MBART: Layout = Layout {
    pre_norm: true,
    ..BART
};
const BLENDERBOT: Layout = Layout {
    head: "lm_head",
    sinusoidal: false,
    position_offset: 0,
    embed_norm: EmbedNorm::None,
    pre_norm: true,
};
const BLENDERBOT_SMALL: Layout = Layout {
    embed_norm: EmbedNorm::BeforePositions,
    pre_norm: false,
    ..BLENDERBOT
};
const MARIAN: Layout = Layout {
    sinusoidal: true,
    pre_norm: false,
    ..BLENDERBOT
};
const PEGASUS: Layout = Layout {
    sinusoidal: true,
    ..BLENDERBOT
};
const TROCR: Layout = Layout {
    head: "output_projection",
    ..BART
};
/// transformers' BART LayerNorms are `nn.LayerNorm` with its default epsilon.
const LAYER_NORM_EPS: f32 = 1e-5;

/// What the decoder of a BART-style model adds to [`ArchConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct BartLmConfig {
    /// The token embeddings' scale (`√d_model` with `scale_embedding`, else 1).
    pub embed_scale: f32,
    /// Sinusoidal positions (Marian, Pegasus): `embed_positions` is `sin` of `p · 10000^(−2j/d)`
    /// in its first half and `cos` in its second, computed at save time.
    pub sinusoidal: bool,
    /// The first row of `embed_positions` position 0 reads (2: BART; 0: the Blenderbots).
    pub position_offset: i64,
    /// Where `layernorm_embedding` sits.
    pub embed_norm: EmbedNorm,
    /// Pre-norm layers and a final `layer_norm` (mBART, Blenderbot).
    pub pre_norm: bool,
    /// The LM head module (`lm_head`; TrOCR: `output_projection`).
    pub head: &'static str,
    /// The MLP activation (`activation_function`).
    pub gelu: Gelu,
}

fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    layout: &Layout,
) -> Result<ArchConfig> {
    let name = model_type.name;
    let causal_class = raw
        .architectures
        .as_ref()
        .and_then(|a| a.as_array())
        .is_some_and(|a| {
            a.iter()
                .any(|c| c.as_str().is_some_and(|c| c.ends_with("ForCausalLM")))
        });
    if raw.is_decoder != Some(true) && !causal_class {
        return Err(f.err(
            "is_decoder",
            &format!(
                "must be true (or `architectures` name a *ForCausalLM): mobius builds the \
                 decoder of {name} alone, as transformers' *ForCausalLM runs it, not the \
                 seq2seq model"
            ),
        ));
    }
    let hidden_size = f.positive("d_model", raw.d_model, MAX_WIDTH)?;
    let heads = f.positive(
        "decoder_attention_heads",
        raw.decoder_attention_heads,
        MAX_HEADS,
    )?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "decoder_attention_heads",
            &format!("{heads} must divide d_model ({hidden_size})"),
        ));
    }
    let head_dim = hidden_size / heads;
    let layers = f.positive("decoder_layers", raw.decoder_layers, MAX_LAYERS)?;
    let max_positions = f.positive(
        "max_position_embeddings",
        raw.max_position_embeddings,
        MAX_POSITIONS,
    )?;
    let act = raw.activation_function.as_deref().unwrap_or("gelu");
    let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
        f.err(
            "activation_function",
            &format!(
                "`{act}` is not supported for {name} (expected {})",
                Gelu::NAMES
            ),
        )
    })?;
    if layout.sinusoidal && hidden_size % 2 != 0 {
        return Err(f.err(
            "d_model",
            &format!(
                "{hidden_size} is odd (the sinusoidal positions of {name} are built for an \
                 even width)"
            ),
        ));
    }
    let vocab_size = f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?;
    if let Some(decoder_vocab) = raw.decoder_vocab_size {
        if decoder_vocab != vocab_size as i64 {
            return Err(f.err(
                "decoder_vocab_size",
                &format!("{decoder_vocab} differs from vocab_size ({vocab_size})"),
            ));
        }
    }
    if raw.use_learned_position_embeddings == Some(false) {
        return Err(f.err(
            "use_learned_position_embeddings",
            "false (TrOCR's sinusoidal positions) is not supported (expected true)",
        ));
    }
    let embed_scale = match raw.scale_embedding {
        Some(true) => (hidden_size as f32).sqrt(),
        _ => 1.0,
    };
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: f.positive("decoder_ffn_dim", raw.decoder_ffn_dim, MAX_WIDTH)?,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size,
        max_position_embeddings: max_positions,
        rms_norm_eps: 0.0,
        tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        // No rotary embedding: positions are learned.
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
        family: Knobs::new(BartLmConfig {
            embed_scale,
            sinusoidal: layout.sinusoidal,
            position_offset: layout.position_offset,
            // TrOCR's `layernorm_embedding` false drops it.
            embed_norm: match raw.layernorm_embedding {
                Some(false) => EmbedNorm::None,
                _ => layout.embed_norm,
            },
            pre_norm: layout.pre_norm,
            head: layout.head,
            gelu,
        }),
    })
}

impl FamilyKnobs for BartLmConfig {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        build(cfg, self, dtype)
    }
}

/// A checkpoint tensor as an initializer of the same name.
fn tensor(b: &mut GraphBuilder, name: &str, shape: Vec<usize>, dtype: DType) -> String {
    b.initializer(Initializer {
        name: name.to_string(),
        dtype,
        shape,
        source: Some(TensorSource::Checkpoint(name.to_string())),
    })
}

/// Builds the decoder graph of `cfg`, whose knobs are `lm`.
fn build(cfg: &ArchConfig, lm: &BartLmConfig, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new("main_graph");
    let h = cfg.hidden_size;
    let io = decoder_io(&mut b, DecoderDims::of(cfg), dtype);
    let gather = |b: &mut GraphBuilder, table: &str, ids: &str| {
        b.op("Gather", &[table, ids], vec![("axis", Attr::Int(0))])
    };

    b.set_scope("model.decoder.embed_tokens");
    let embed = "model.decoder.embed_tokens.weight";
    let embed = tensor(&mut b, embed, vec![cfg.vocab_size, h], dtype);
    let mut x = gather(&mut b, &embed, &io.input_ids);
    if lm.embed_scale != 1.0 {
        let scale = scalar(&mut b, lm.embed_scale, dtype);
        x = b.op("Mul", &[&x, &scale], vec![]);
    }
    let embed_norm = |b: &mut GraphBuilder, x: &str| {
        b.set_scope("model.decoder.layernorm_embedding");
        let ln = "model.decoder.layernorm_embedding";
        layer_norm(b, x, ln, h, LAYER_NORM_EPS, dtype)
    };
    if lm.embed_norm == EmbedNorm::BeforePositions {
        x = embed_norm(&mut b, &x);
    }
    b.set_scope("model.decoder.embed_positions");
    let ids = match lm.position_offset {
        0 => io.position_ids.clone(),
        offset => {
            let offset = b.scalar_i64(offset);
            b.op("Add", &[&io.position_ids, &offset], vec![])
        }
    };
    let rows = cfg.max_position_embeddings + lm.position_offset as usize;
    let name = "model.decoder.embed_positions.weight";
    let table = match lm.sinusoidal {
        false => tensor(&mut b, name, vec![rows, h], dtype),
        true => {
            let inv_freq: Vec<f32> = (0..h / 2)
                .map(|j| 10000f64.powf(-2.0 * j as f64 / h as f64) as f32)
                .collect();
            let half = |sine| TensorSource::RotaryTable {
                inv_freq: inv_freq.clone(),
                positions: rows,
                sine,
            };
            b.initializer(Initializer {
                name: name.to_string(),
                dtype,
                shape: vec![rows, h],
                source: Some(TensorSource::Concat {
                    parts: vec![half(true), half(false)],
                    axis: 1,
                }),
            })
        }
    };
    let pos = gather(&mut b, &table, &ids);
    x = b.op("Add", &[&x, &pos], vec![]);
    if lm.embed_norm == EmbedNorm::AfterPositions {
        x = embed_norm(&mut b, &x);
    }

    b.set_scope("model.decoder.mask");
    let mask = padding_mask(&mut b, &io.input_ids, &io.attention_mask);
    let norms = match lm.pre_norm {
        false => EncoderNorms::Post {
            attention: "self_attn_layer_norm",
            mlp: "final_layer_norm",
        },
        true => EncoderNorms::Pre {
            attention: "self_attn_layer_norm",
            mlp: "final_layer_norm",
        },
    };
    for i in 0..cfg.num_hidden_layers {
        let p = format!("model.decoder.layers.{i}");
        b.set_scope(&p);
        let layer = EncoderLayer {
            prefix: &p,
            names: LayerNames::BART,
            hidden: h,
            intermediate: cfg.intermediate_size,
            eps: LAYER_NORM_EPS,
            gelu: lm.gelu,
            norms,
            dtype,
        };
        let present = (format!("present.{i}.key"), format!("present.{i}.value"));
        let (past_k, past_v) = io.kv(i);
        let spec = AttentionSpec {
            q_heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            scale: (cfg.head_dim as f32).powf(-0.5),
            mask: &mask,
            past: (past_k, past_v),
            present: (&present.0, &present.1),
            index: None,
        };
        let attend = |b: &mut GraphBuilder, [q, k, v]: [&str; 3]| attention(b, q, k, v, &spec);
        x = layer.build(&mut b, &x, attend, None);
    }
    if lm.pre_norm {
        b.set_scope("model.decoder.layer_norm");
        let ln = "model.decoder.layer_norm";
        x = layer_norm(&mut b, &x, ln, h, LAYER_NORM_EPS, dtype);
    }

    b.set_scope("lm_head");
    let head = if cfg.tie_word_embeddings {
        b.op(
            "Transpose",
            &[&embed],
            vec![("perm", Attr::Ints(vec![1, 0]))],
        )
    } else {
        b.initializer(Initializer {
            name: format!("{}.weight_t", lm.head),
            dtype,
            shape: vec![h, cfg.vocab_size],
            source: Some(TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
                format!("{}.weight", lm.head),
            )))),
        })
    };
    b.op_into("MatMul", &[&x, &head], vec![], "logits");
    b.finish()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{json, Value};

    use super::*;
    use crate::Error;

    fn config(model_type: &str, changes: Value) -> Result<ArchConfig> {
        let mut cfg = json!({"model_type": model_type, "d_model": 64,
            "decoder_attention_heads": 4, "decoder_layers": 2, "decoder_ffn_dim": 128,
            "vocab_size": 300, "max_position_embeddings": 128, "is_decoder": true});
        for (k, v) in changes.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        crate::models::parse_config(cfg.to_string().as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn causal_lm_configs_read_with_class_defaults() {
        let bart = config("bart", json!({})).unwrap();
        let lm = bart.knobs::<BartLmConfig>().unwrap();
        assert_eq!(
            (lm.embed_scale, lm.pre_norm, lm.gelu),
            (1.0, false, Gelu::Exact)
        );
        assert_eq!(
            (lm.position_offset, lm.embed_norm),
            (2, EmbedNorm::AfterPositions)
        );
        let small = config("blenderbot-small", json!({})).unwrap();
        let lm = small.knobs::<BartLmConfig>().unwrap();
        assert_eq!(
            (lm.position_offset, lm.embed_norm),
            (0, EmbedNorm::BeforePositions)
        );
        let blenderbot = config("blenderbot", json!({})).unwrap();
        let lm = blenderbot.knobs::<BartLmConfig>().unwrap();
        assert_eq!((lm.embed_norm, lm.pre_norm), (EmbedNorm::None, true));
        let marian = config("marian", json!({})).unwrap();
        let lm = marian.knobs::<BartLmConfig>().unwrap();
        assert_eq!(
            (lm.sinusoidal, lm.pre_norm, lm.position_offset),
            (true, false, 0)
        );
        let trocr = config("trocr", json!({"layernorm_embedding": false})).unwrap();
        let lm = trocr.knobs::<BartLmConfig>().unwrap();
        assert_eq!(
            (lm.embed_norm, lm.head),
            (EmbedNorm::None, "output_projection")
        );
        let err = config("trocr", json!({"use_learned_position_embeddings": false})).unwrap_err();
        assert!(
            err.to_string().contains("use_learned_position_embeddings"),
            "{err}"
        );
        let err = config("marian", json!({"decoder_vocab_size": 400})).unwrap_err();
        assert!(err.to_string().contains("decoder_vocab_size"), "{err}");
        assert!(bart.tie_word_embeddings);
        let mbart = config(
            "mbart",
            json!({"scale_embedding": true, "is_decoder": null,
                   "architectures": ["MBartForCausalLM"]}),
        )
        .unwrap();
        let lm = mbart.knobs::<BartLmConfig>().unwrap();
        assert_eq!((lm.embed_scale, lm.pre_norm), (8.0, true));
    }

    #[test]
    fn seq2seq_checkpoints_are_refused() {
        let seq2seq =
            json!({"is_decoder": null, "architectures": ["BartForConditionalGeneration"]});
        match config("bart", seq2seq).unwrap_err() {
            Error::ConfigField { field, message, .. } => {
                assert_eq!(field, "is_decoder");
                assert!(message.contains("seq2seq"), "{message}");
            }
            other => panic!("expected a field error, got {other}"),
        }
    }
}
