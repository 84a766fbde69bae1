//! The Gemma family (gemma, gemma2, gemma3_text), spec §1.10.
//!
//! Like the Llama decoder, with: token embeddings scaled by `sqrt(hidden_size)` (rounded to
//! the model dtype), RMSNorms scaling by `1 + weight`, a GELU-gated MLP and tied embeddings.
//! Gemma 2 and 3 add a norm after attention and one on each side of the MLP, a custom
//! attention scale, soft-capped attention scores and final logits, and sliding-window layers;
//! Gemma 3 also normalises queries and keys per head and gives sliding layers their own RoPE.

use super::components::{
    gated_mlp, named_rope_tables, scalar, DecoderInputs, GateActivation, Norm, NormKind, RopeTables,
};
use super::decoder::{self, Family, LayerNorms, QkNorm};
use super::multimodal::{read_text_part, TextPart, TextType};
use super::registry::{FamilySpec, ModelType};
use crate::config::gemma::{gemma2_sliding_layers, gemma3_global_rope, gemma3_sliding_layers};
use crate::config::{
    gemma, read_decoder, ArchConfig, Biases, DecoderFields, FamilyKnobs, Fields, GemmaConfig,
    GemmaVersion, HfConfig, Knobs, Rope, SlidingLayers,
};
use crate::ir::{DType, Graph, GraphBuilder};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "gemma",
    summary: "RMSNorm gain `1 + w`, scaled embeddings, GELU-gated MLP; Gemma 2/3: four norms \
              per layer, `query_pre_attn_scalar`, attention and final-logit soft-capping, \
              alternating sliding-window layers; Gemma 3: per-head q/k norms, local RoPE; \
              `gemma3`: the text decoder of Gemma3ForConditionalGeneration (no vision part)",
    model_types: &[
        ModelType::generative("gemma", "gemma", |raw, t, f| {
            read(raw, t, f, GemmaVersion::Gemma1, &GEMMA1)
        }),
        ModelType::generative("gemma2", "gemma", |raw, t, f| {
            read(raw, t, f, GemmaVersion::Gemma2, &GEMMA2)
        }),
        ModelType::generative("gemma3_text", "gemma3_text", |raw, t, f| {
            read(raw, t, f, GemmaVersion::Gemma3, &GEMMA3)
        }),
        ModelType::generative("gemma3", "gemma3_text", |raw, t, f| {
            read_text_part(raw, t, f, &GEMMA3_IMAGE_TEXT)
        }),
    ],
};

/// Gemma3ForConditionalGeneration's text decoder: a `gemma3_text` config, whose head never
/// soft-caps the logits (whatever `final_logit_softcapping` says).
const GEMMA3_IMAGE_TEXT: TextPart = TextPart {
    default_type: "gemma3_text",
    text_types: &[TextType {
        name: "gemma3_text",
        // transformers' Gemma3TextConfig defaults the reader does not hold itself.
        defaults: r#"{"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 256, "max_position_embeddings": 131072, "bos_token_id": 2,
            "eos_token_id": 1, "pad_token_id": 0}"#,
    }],
    decoder: |knobs| match knobs.as_any().downcast_ref::<GemmaConfig>() {
        Some(gemma) => Knobs::new(GemmaConfig {
            final_softcap: None,
            ..gemma.clone()
        }),
        None => knobs.clone(),
    },
};

/// transformers' GemmaConfig: head_dim 256, no biases, tied embeddings, its own activation.
const GEMMA1: DecoderFields = DecoderFields {
    head_dim: Some(256),
    biases: Biases::None,
    silu_mlp: false,
    tie_word_embeddings: true,
    ..DecoderFields::LLAMA
};

/// Gemma 2: a window of 4096 by default, on every other layer.
const GEMMA2: DecoderFields = DecoderFields {
    sliding_window: Some(4096),
    sliding_layers: SlidingLayers::Pattern(gemma2_sliding_layers),
    ..GEMMA1
};

/// Gemma 3: its own RoPE reading, full attention every `sliding_window_pattern` layers.
const GEMMA3: DecoderFields = DecoderFields {
    rope: gemma3_global_rope,
    sliding_layers: SlidingLayers::Pattern(gemma3_sliding_layers),
    ..GEMMA2
};

fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    version: GemmaVersion,
    fields: &DecoderFields,
) -> Result<ArchConfig> {
    read_decoder(raw, model_type, f, fields, |dims| {
        gemma::read(raw, version, model_type.name, dims, f)
    })
}

impl Family for GemmaConfig {
    fn norm(&self, cfg: &ArchConfig) -> Norm {
        Norm {
            kind: NormKind::OffsetRms,
            eps: cfg.rms_norm_eps,
        }
    }

    fn layer_norms(&self) -> LayerNorms {
        if self.sandwich_norms() {
            LayerNorms::SANDWICH
        } else {
            LayerNorms::PRE
        }
    }

    fn embed(
        &self,
        b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        _io: &DecoderInputs,
        x: String,
        dtype: DType,
    ) -> String {
        let scale = scalar(b, self.embed_scale, dtype);
        b.op("Mul", &[&x, &scale], vec![])
    }

    /// The global tables, then (Gemma 3) the local ones `model.rotary_emb_local.*`.
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        io: &DecoderInputs,
        dtype: DType,
    ) -> Vec<RopeTables> {
        let mut tables = vec![decoder::plain_rotary(b, cfg, io, dtype)];
        if let Some(rope) = &self.local_rope {
            let (prefix, positions) = ("model.rotary_emb_local", cfg.max_position_embeddings);
            let ids = &io.position_ids;
            tables.push(named_rope_tables(b, prefix, rope, positions, ids, dtype));
        }
        tables
    }

    /// Gemma 3's sliding layers rotate with the local RoPE.
    fn layer_rope<'c>(&'c self, cfg: &'c ArchConfig, i: usize) -> Option<(&'c Rope, usize)> {
        match (&self.local_rope, cfg.layer_windows[i]) {
            (Some(rope), Some(_)) => Some((rope, 1)),
            _ => Some((&cfg.rope, 0)),
        }
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        match self.qk_norm() {
            true => QkNorm::PerHeadCounted,
            false => QkNorm::Off,
        }
    }

    fn attention_scale(&self, _cfg: &ArchConfig) -> f32 {
        self.attn_scale
    }

    fn attention_softcap(&self, _cfg: &ArchConfig) -> f32 {
        self.attn_softcap.unwrap_or(0.0)
    }

    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let act = GateActivation::Gelu(self.gelu);
        let sizes = (cfg.hidden_size, cfg.intermediate_size);
        gated_mlp(b, x, mlp, sizes, false, act, dtype)
    }

    /// `cap · tanh(x @ head / cap)` when the final logits are soft-capped.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, dtype: DType) {
        let Some(cap) = self.final_softcap else {
            b.op_into("MatMul", &[x, head], vec![], "logits");
            return;
        };
        let raw = b.op("MatMul", &[x, head], vec![]);
        let c = scalar(b, cap, dtype);
        let scaled = b.op("Div", &[&raw, &c], vec![]);
        let squashed = b.op("Tanh", &[&scaled], vec![]);
        b.op_into("Mul", &[&squashed, &c], vec![], "logits");
    }
}

impl FamilyKnobs for GemmaConfig {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        decoder::build(cfg, dtype, self)
    }
}
