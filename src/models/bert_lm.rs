//! Causal language models of encoder architectures (transformers' `BertLMHeadModel`,
//! `RobertaForCausalLM` and their kin): the BERT-style layers (`components::encoder_layer`)
//! run with causal self-attention and a KV cache, and an LM head (dense → GELU → LayerNorm →
//! decoder with its own bias) gives the logits.
//!
//! transformers builds these models as decoders when config.json says `is_decoder: true`
//! (without it `BertLMHeadModel` warns and attends bidirectionally). mobius follows
//! config.json: `bert` and `roberta` configs with `is_decoder` true are read here (and built
//! as encoders otherwise, `bert.rs`); the other model types of this family are built as
//! decoders only and refuse a config without `is_decoder` (docs/families.md, "Causal LMs of
//! encoder architectures").
//!
//! Embeddings: word + token type 0 (+ task type 0, ERNIE) + learned position, LayerNorm
//! (none in Megatron-BERT and XLM-RoBERTa-XL), then a dense up to the hidden size where the
//! embedding is narrower (ELECTRA, RemBERT, RoFormer); RoCBert first maps each word embedding
//! concatenated with row 0 of its shape and pronunciation embeddings back to the hidden size. Positions are the `position_ids` input
//! (BERT) or `position_ids + pad_token_id + 1` (RoBERTa's numbering after the padding token,
//! equal to transformers' `create_position_ids_from_input_ids` for sequences without padding
//! tokens); RoFormer has no position embedding and rotates q and k (interleaved RoPE).
//! Checkpoint names lose their model-class prefix (`bert.`, `roberta.` …).

use super::components::{
    attention, decoder_io, gelu, layer_norm, linear, padding_mask, rope_tables, rotary_embedding,
    AttentionSpec, DecoderDims, EncoderLayer, EncoderNorms, LayerNames,
};
use super::family::FamilySpec;
use crate::config::{
    first_token, parse_dtype, token_list, ArchConfig, CheckpointRenaming, FamilyKnobs, Fields,
    Gelu, HfConfig, Knobs, ModelType, Rope, RopeScaling, Sign,
};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::{MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, MAX_WIDTH};
use crate::Result;

/// The family's registry entry: the model types built as decoders only. `bert` and `roberta`
/// configs with `is_decoder` true come here through [`BERT`] and [`ROBERTA`].
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bert_lm",
    summary: "causal LMs of encoder architectures (`is_decoder` true; bert and roberta too): \
              post-norm BERT layers with causal attention (pre-norm: megatron-bert, \
              roberta-prelayernorm, xlm-roberta-xl), learned positions (RoBERTa-likes: after \
              the padding token; roformer: interleaved RoPE), token type 0 (roc_bert: shape \
              and pronunciation id 0 mapped in with the word), LM head dense → GELU → \
              LayerNorm → decoder + bias",
    model_types: &[
        ModelType::generative("camembert", "decoder", |r, t, f| {
            read(r, t, f, &ROBERTA_LAYOUT)
        }),
        ModelType::generative("xlm-roberta", "decoder", |r, t, f| {
            read(r, t, f, &ROBERTA_LAYOUT)
        }),
        ModelType::generative("data2vec-text", "decoder", |r, t, f| {
            read(r, t, f, &DATA2VEC_LAYOUT)
        }),
        ModelType::generative("roberta-prelayernorm", "decoder", |r, t, f| {
            read(r, t, f, &PRELAYERNORM_LAYOUT)
        }),
        ModelType::generative("xlm-roberta-xl", "decoder", |r, t, f| {
            read(r, t, f, &XLMR_XL_LAYOUT)
        }),
        ModelType::generative("ernie", "decoder", |r, t, f| read(r, t, f, &ERNIE_LAYOUT)),
        ModelType::generative("megatron-bert", "decoder", |r, t, f| {
            read(r, t, f, &MEGATRON_LAYOUT)
        }),
        ModelType::generative("electra", "decoder", |r, t, f| {
            read(r, t, f, &ELECTRA_LAYOUT)
        }),
        ModelType::generative("rembert", "decoder", |r, t, f| {
            read(r, t, f, &REMBERT_LAYOUT)
        }),
        ModelType::generative("bert-generation", "decoder", |r, t, f| {
            read(r, t, f, &BERT_GENERATION_LAYOUT)
        }),
        ModelType::generative("roformer", "decoder", |r, t, f| {
            read(r, t, f, &ROFORMER_LAYOUT)
        }),
        ModelType::generative("roc_bert", "decoder", |r, t, f| {
            read(r, t, f, &ROC_BERT_LAYOUT)
        }),
    ],
};

/// `bert` read as a causal LM (`is_decoder` true): onnxruntime-genai runs it as `decoder`.
/// Not in the registry (the `bert` entry there is the encoder's, which hands such configs to
/// [`read_bert`]); equal to it by name.
pub static BERT: ModelType = ModelType::generative("bert", "decoder", read_bert);
/// `roberta` read as a causal LM (`is_decoder` true), as [`BERT`].
pub static ROBERTA: ModelType = ModelType::generative("roberta", "decoder", read_roberta);

/// Normalises a `bert` config with `is_decoder` true (`BertLMHeadModel`).
pub fn read_bert(raw: &HfConfig, _: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read(raw, &BERT, f, &BERT_LAYOUT)
}

/// Normalises a `roberta` config with `is_decoder` true (`RobertaForCausalLM`).
pub fn read_roberta(raw: &HfConfig, _: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read(raw, &ROBERTA, f, &ROBERTA_LAYOUT)
}

/// How a model type's embeddings number positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Positions {
    /// The `position_ids` input (BERT).
    Absolute,
    /// `position_ids + padding_idx + 1` (RoBERTa).
    AfterPadding {
        /// `pad_token_id`.
        padding_idx: i64,
    },
    /// No position embedding: q and k are rotated by `position_ids` (RoFormer's interleaved
    /// RoPE over the whole head, theta 10000).
    Rotary,
}

/// Where a model type's embedding is projected up to the hidden size, and from which width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Projection {
    /// The embedding is `hidden_size` wide.
    None,
    /// ELECTRA: `embeddings_project` from `embedding_size` (only where it differs).
    Electra,
    /// RemBERT: `encoder.embedding_hidden_mapping_in` from `input_embedding_size`.
    RemBert,
    /// RoFormer: `embeddings_project` from `embedding_size` (`hidden_size` when absent; only
    /// where it differs).
    RoFormer,
}

/// The LM head's modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HeadLayout {
    /// The transform's dense and LayerNorm, and whether its GELU is fixed (else `hidden_act`);
    /// `None`: no transform (BertGeneration).
    transform: Option<(&'static str, &'static str, bool)>,
    /// The decoder module: its `.weight` when untied, its `.bias` when untied.
    decoder: &'static str,
    /// The bias the decoder's is tied to when the embeddings are.
    tied_bias: &'static str,
}

/// What sets one model type's layout apart, and its config class defaults.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Whether positions follow RoBERTa's numbering.
    roberta_positions: bool,
    /// Whether positions rotate q and k instead (RoFormer).
    rotary: bool,
    /// Whether there is a token-type embedding (all but BertGeneration).
    token_types: bool,
    /// Whether the embeddings end in `embeddings.LayerNorm`.
    embed_norm: bool,
    /// Whether the word embedding may be concatenated with shape and pronunciation embeddings
    /// (RoCBert).
    roc: bool,
    /// The embedding projection.
    projection: Projection,
    /// Where the layers' norms sit.
    norms: EncoderNorms,
    /// The final norm of pre-norm models (after the model-class prefix).
    final_norm: Option<&'static str>,
    /// The LM head.
    head: HeadLayout,
    /// Defaults: `layer_norm_eps`, `pad_token_id`, `tie_word_embeddings`, `type_vocab_size`.
    eps: f64,
    pad: i64,
    tie: bool,
    types: i64,
}

const BERT_HEAD: HeadLayout = HeadLayout {
    transform: Some((
        "cls.predictions.transform.dense",
        "cls.predictions.transform.LayerNorm",
        false,
    )),
    decoder: "cls.predictions.decoder",
    tied_bias: "cls.predictions.bias",
};
const ROBERTA_HEAD: HeadLayout = HeadLayout {
    transform: Some(("lm_head.dense", "lm_head.layer_norm", true)),
    decoder: "lm_head.decoder",
    tied_bias: "lm_head.bias",
};
const BERT_LAYOUT: Layout = Layout {
    roberta_positions: false,
    rotary: false,
    token_types: true,
    embed_norm: true,
    roc: false,
    projection: Projection::None,
    norms: EncoderNorms::BERT,
    final_norm: None,
    head: BERT_HEAD,
    eps: 1e-12,
    pad: 0,
    tie: true,
    types: 2,
};
const ERNIE_LAYOUT: Layout = BERT_LAYOUT;
const ROBERTA_LAYOUT: Layout = Layout {
    roberta_positions: true,
    head: ROBERTA_HEAD,
    pad: 1,
    ..BERT_LAYOUT
};
const DATA2VEC_LAYOUT: Layout = ROBERTA_LAYOUT;
const PRELAYERNORM_LAYOUT: Layout = Layout {
    norms: EncoderNorms::Pre {
        attention: "attention.LayerNorm",
        mlp: "intermediate.LayerNorm",
    },
    final_norm: Some("LayerNorm"),
    ..ROBERTA_LAYOUT
};
const XLMR_XL_LAYOUT: Layout = Layout {
    embed_norm: false,
    norms: EncoderNorms::Pre {
        attention: "attention.self_attn_layer_norm",
        mlp: "LayerNorm",
    },
    final_norm: Some("encoder.LayerNorm"),
    eps: 1e-5,
    types: 1,
    ..ROBERTA_LAYOUT
};
const MEGATRON_LAYOUT: Layout = Layout {
    embed_norm: false,
    norms: EncoderNorms::Pre {
        attention: "attention.ln",
        mlp: "ln",
    },
    final_norm: Some("encoder.ln"),
    ..BERT_LAYOUT
};
const ELECTRA_LAYOUT: Layout = Layout {
    projection: Projection::Electra,
    head: HeadLayout {
        transform: Some((
            "generator_predictions.dense",
            "generator_predictions.LayerNorm",
            true,
        )),
        decoder: "generator_lm_head",
        tied_bias: "generator_lm_head.bias",
    },
    ..BERT_LAYOUT
};
const REMBERT_LAYOUT: Layout = Layout {
    projection: Projection::RemBert,
    head: HeadLayout {
        transform: Some(("cls.predictions.dense", "cls.predictions.LayerNorm", false)),
        decoder: "cls.predictions.decoder",
        // RemBERT never ties its head (transformers declares no tied weights for it).
        tied_bias: "cls.predictions.decoder.bias",
    },
    tie: false,
    ..BERT_LAYOUT
};
const ROFORMER_LAYOUT: Layout = Layout {
    rotary: true,
    projection: Projection::RoFormer,
    ..BERT_LAYOUT
};
const ROC_BERT_LAYOUT: Layout = Layout {
    roc: true,
    ..BERT_LAYOUT
};
const BERT_GENERATION_LAYOUT: Layout = Layout {
    token_types: false,
    head: HeadLayout {
        transform: None,
        decoder: "lm_head.decoder",
        tied_bias: "lm_head.bias",
    },
    ..BERT_LAYOUT
};

/// What a causal LM of an encoder architecture adds to [`ArchConfig`].
#[derive(Debug, Clone, PartialEq)]
pub struct BertLmConfig {
    /// Position numbering.
    pub positions: Positions,
    /// Rows of the token-type embedding (`type_vocab_size`), whose row 0 every token gets;
    /// `None`: there is none (BertGeneration).
    pub token_types: Option<usize>,
    /// ERNIE's `use_task_id`: rows of the task-type embedding (`task_type_vocab_size`), whose
    /// row 0 every token gets.
    pub task_types: Option<usize>,
    /// Whether the embeddings end in a LayerNorm.
    pub embed_norm: bool,
    /// RoCBert's `concat_input`: the shape and pronunciation embeddings' (rows, width) (each
    /// `None` where disabled), whose row 0 (transformers' default ids) is concatenated to each
    /// word embedding before `embeddings.map_inputs_layer`; `None` without it.
    pub roc_inputs: Option<[Option<(usize, usize)>; 2]>,
    /// Width of the embedding tables (`hidden_size` unless projected).
    pub embedding_size: usize,
    /// The dense from the embedding up to the hidden size, if any (module name).
    pub projection: Option<&'static str>,
    /// Where the layers' norms sit.
    pub norms: EncoderNorms,
    /// The final norm module of pre-norm models.
    pub final_norm: Option<&'static str>,
    /// The LM head transform: dense and LayerNorm modules, its GELU and output width.
    pub transform: Option<(&'static str, &'static str, Gelu, usize)>,
    /// The decoder's weight (`None`: the word embedding, tied) and its bias.
    pub decoder_weight: Option<String>,
    /// The decoder's bias.
    pub decoder_bias: String,
    /// The layers' GELU (`hidden_act`).
    pub gelu: Gelu,
    /// Epsilon of every LayerNorm (`layer_norm_eps`).
    pub layer_norm_eps: f32,
}

fn read(
    raw: &HfConfig,
    model_type: &'static ModelType,
    f: &Fields<'_>,
    layout: &Layout,
) -> Result<ArchConfig> {
    let name = model_type.name;
    if raw.is_decoder != Some(true) {
        return Err(f.err(
            "is_decoder",
            &format!(
                "must be true: mobius builds {name} as a causal LM only (transformers' \
                 *ForCausalLM runs it as a decoder when config.json says is_decoder)"
            ),
        ));
    }
    let hidden_size = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
    if hidden_size % heads != 0 {
        return Err(f.err(
            "num_attention_heads",
            &format!("{heads} must divide hidden_size ({hidden_size})"),
        ));
    }
    let head_dim = hidden_size / heads;
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let vocab_size = f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?;
    let max_positions = f.positive(
        "max_position_embeddings",
        raw.max_position_embeddings,
        MAX_POSITIONS,
    )?;
    let act = raw.hidden_act.as_deref().unwrap_or("gelu");
    let gelu = Gelu::from_hf_name(act).ok_or_else(|| {
        f.err(
            "hidden_act",
            &format!(
                "`{act}` is not supported for {name} (expected {})",
                Gelu::NAMES
            ),
        )
    })?;
    if let Some(kind) = raw.position_embedding_type.as_deref() {
        if kind != "absolute" {
            return Err(f.err(
                "position_embedding_type",
                &format!("`{kind}` is not supported (expected \"absolute\")"),
            ));
        }
    }
    let token_types = match layout.token_types {
        true => Some(f.positive(
            "type_vocab_size",
            raw.type_vocab_size.or(Some(layout.types)),
            MAX_VOCAB,
        )?),
        false => None,
    };
    let task_types = match raw.use_task_id {
        Some(true) => Some(f.positive(
            "task_type_vocab_size",
            raw.task_type_vocab_size.or(Some(3)),
            MAX_VOCAB,
        )?),
        _ => None,
    };
    let layer_norm_eps = f.number(
        "layer_norm_eps",
        raw.layer_norm_eps,
        layout.eps,
        Sign::NonNegative,
    )?;
    let pad_token_id = match raw.pad_token_id.as_ref() {
        None => Some(layout.pad),
        Some(v) => first_token(f, "pad_token_id", Some(v))?,
    };
    let positions = if layout.roberta_positions {
        let padding_idx = pad_token_id.ok_or_else(|| {
            f.err(
                "pad_token_id",
                &format!("missing ({name} numbers positions after it)"),
            )
        })?;
        if padding_idx < 0 || padding_idx as usize + 1 >= max_positions {
            return Err(f.err(
                "pad_token_id",
                &format!(
                    "{padding_idx} leaves no position below max_position_embeddings \
                     ({max_positions}) ({name} positions start at pad_token_id + 1)"
                ),
            ));
        }
        Positions::AfterPadding { padding_idx }
    } else if layout.rotary {
        if raw.rotary_value == Some(true) {
            return Err(f.err(
                "rotary_value",
                "true (values rotated too) is not supported (expected false)",
            ));
        }
        Positions::Rotary
    } else {
        Positions::Absolute
    };
    let (embedding_size, projection) = match layout.projection {
        Projection::None => (hidden_size, None),
        Projection::Electra => {
            let e = f.positive(
                "embedding_size",
                raw.embedding_size.or(Some(128)),
                MAX_WIDTH,
            )?;
            (e, (e != hidden_size).then_some("embeddings_project"))
        }
        Projection::RoFormer => {
            let e = raw.embedding_size.or(Some(hidden_size as i64));
            let e = f.positive("embedding_size", e, MAX_WIDTH)?;
            (e, (e != hidden_size).then_some("embeddings_project"))
        }
        Projection::RemBert => {
            let field = "input_embedding_size";
            let e = f.positive(field, raw.input_embedding_size.or(Some(256)), MAX_WIDTH)?;
            (e, Some("encoder.embedding_hidden_mapping_in"))
        }
    };
    let roc_inputs = match (layout.roc, raw.concat_input.unwrap_or(true)) {
        (true, true) => {
            let table = |enabled: Option<bool>, name: &str, [rows, width]: [Option<i64>; 2]| {
                if !enabled.unwrap_or(true) {
                    return Ok(None);
                }
                let rows = f.positive(&format!("{name}_vocab_size"), rows, MAX_VOCAB)?;
                let width = f.positive(&format!("{name}_embed_dim"), width, MAX_WIDTH)?;
                Ok(Some((rows, width)))
            };
            let sizes = [
                raw.shape_vocab_size.or(Some(24858)),
                raw.shape_embed_dim.or(Some(512)),
            ];
            let shape = table(raw.enable_shape, "shape", sizes)?;
            let sizes = [
                raw.pronunciation_vocab_size.or(Some(910)),
                raw.pronunciation_embed_dim.or(Some(768)),
            ];
            let pron = table(raw.enable_pronunciation, "pronunciation", sizes)?;
            Some([shape, pron])
        }
        _ => None,
    };
    let transform = match layout.head.transform {
        None => None,
        Some((dense, norm, fixed)) => {
            let width = match layout.projection {
                Projection::None => hidden_size,
                Projection::Electra | Projection::RoFormer => embedding_size,
                Projection::RemBert => f.positive(
                    "output_embedding_size",
                    raw.output_embedding_size.or(Some(1664)),
                    MAX_WIDTH,
                )?,
            };
            Some((dense, norm, if fixed { Gelu::Exact } else { gelu }, width))
        }
    };
    // The head's width is the word embedding's wherever the layout can tie (ELECTRA's maps
    // back to embedding_size; RemBERT's, which differs, never ties).
    let tie = raw.tie_word_embeddings.unwrap_or(layout.tie) && layout.tie;
    let decoder = layout.head.decoder;
    Ok(ArchConfig {
        model_type,
        hidden_size,
        intermediate_size: f.positive("intermediate_size", raw.intermediate_size, MAX_WIDTH)?,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim,
        num_hidden_layers: layers,
        vocab_size,
        max_position_embeddings: max_positions,
        // No RMSNorm: the LayerNorm epsilon is `layer_norm_eps`.
        rms_norm_eps: 0.0,
        tie_word_embeddings: tie,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        // Learned positions, or RoFormer's interleaved rotation (its sinusoidal table is this
        // RoPE's cos/sin).
        rope: Rope {
            theta: 10000.0,
            scaling: RopeScaling::Default,
            rotary_dim: head_dim,
            interleaved: positions == Positions::Rotary,
        },
        layer_windows: vec![None; layers],
        dtype: parse_dtype(raw, f)?,
        bos_token_id: first_token(f, "bos_token_id", raw.bos_token_id.as_ref())?,
        eos_token_ids: token_list(f, "eos_token_id", raw.eos_token_id.as_ref())?,
        pad_token_id,
        family: Knobs::new(BertLmConfig {
            positions,
            token_types,
            task_types,
            embed_norm: layout.embed_norm,
            roc_inputs,
            embedding_size,
            projection,
            norms: layout.norms,
            final_norm: layout.final_norm,
            transform,
            decoder_weight: (!tie).then(|| format!("{decoder}.weight")),
            decoder_bias: if tie {
                layout.head.tied_bias.to_string()
            } else {
                format!("{decoder}.bias")
            },
            gelu,
            layer_norm_eps,
        }),
    })
}

impl FamilyKnobs for BertLmConfig {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        build(cfg, self, dtype)
    }

    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }
}

/// Model-class prefixes of the causal-LM checkpoints (`BertLMHeadModel` saves `bert.…`).
const PREFIXES: &[&str] = &[
    "roformer.",
    "roc_bert.",
    "bert.",
    "roberta.",
    "roberta_prelayernorm.",
    "data2vec_text.",
    "electra.",
    "ernie.",
    "rembert.",
];

/// The name the builder reads for checkpoint tensor `name`: the model-class prefix stripped,
/// the LayerNorm `gamma`/`beta` of old checkpoints read as `weight`/`bias`; cross-attention
/// (unused without encoder states) and the pooler are never read.
pub fn checkpoint_name(name: &str) -> Option<String> {
    let name = PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    if name.starts_with("pooler.") || name.contains(".crossattention.") {
        return None;
    }
    Some(if let Some(base) = name.strip_suffix(".gamma") {
        format!("{base}.weight")
    } else if let Some(base) = name.strip_suffix(".beta") {
        format!("{base}.bias")
    } else {
        name.to_string()
    })
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

/// RoCBert's `map_inputs_layer` of each word embedding `x` (`[B, S, H]`) concatenated with
/// row 0 of the enabled shape and pronunciation embeddings (`extra`: rows and width), the
/// ids transformers gives a forward without them.
fn roc_inputs(
    b: &mut GraphBuilder,
    x: String,
    extra: [Option<(usize, usize)>; 2],
    h: usize,
    dtype: DType,
) -> String {
    let rows = b.op("Shape", &[&x], vec![("end", Attr::Int(2))]);
    let mut parts = vec![x];
    for (table, width) in ["shape_embed", "pronunciation_embed"].iter().zip(extra) {
        let Some((total, width)) = width else {
            continue;
        };
        let name = format!("embeddings.{table}.weight");
        let t = b.initializer(Initializer {
            name: format!("{name}.row0"),
            dtype,
            shape: vec![width],
            source: Some(TensorSource::Reshape {
                source: Box::new(TensorSource::Slice {
                    source: Box::new(TensorSource::Checkpoint(name)),
                    axis: 0,
                    start: 0,
                    len: 1,
                    total,
                }),
                shape: vec![width],
            }),
        });
        let last = b.const_i64(&[width as i64]);
        let shape = b.op("Concat", &[&rows, &last], vec![("axis", Attr::Int(0))]);
        parts.push(b.op("Expand", &[&t, &shape], vec![]));
    }
    let width = h + extra.iter().flatten().map(|(_, w)| w).sum::<usize>();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let joined = b.op("Concat", &refs, vec![("axis", Attr::Int(-1))]);
    linear(
        b,
        &joined,
        "embeddings.map_inputs_layer",
        width,
        h,
        true,
        dtype,
    )
}

/// Builds the decoder graph of `cfg`, whose knobs are `lm`.
fn build(cfg: &ArchConfig, lm: &BertLmConfig, dtype: DType) -> Graph {
    let eps = lm.layer_norm_eps;
    let mut b = GraphBuilder::new("main_graph");
    let h = cfg.hidden_size;
    let io = decoder_io(&mut b, DecoderDims::of(cfg), dtype);

    b.set_scope("embeddings");
    let e = lm.embedding_size;
    let word = tensor(
        &mut b,
        "embeddings.word_embeddings.weight",
        vec![cfg.vocab_size, e],
        dtype,
    );
    let gather = |b: &mut GraphBuilder, table: &str, ids: &str| {
        b.op("Gather", &[table, ids], vec![("axis", Attr::Int(0))])
    };
    let mut x = gather(&mut b, &word, &io.input_ids);
    if let Some(extra) = lm.roc_inputs {
        x = roc_inputs(&mut b, x, extra, h, dtype);
    }
    // transformers' default token (and task) type 0 for every token: row 0, broadcast.
    let row0 = |b: &mut GraphBuilder, x: String, table: &str, rows: usize| {
        let t = tensor(
            b,
            &format!("embeddings.{table}.weight"),
            vec![rows, e],
            dtype,
        );
        let zero = b.scalar_i64(0);
        let row = gather(b, &t, &zero);
        b.op("Add", &[&x, &row], vec![])
    };
    if let Some(rows) = lm.token_types {
        x = row0(&mut b, x, "token_type_embeddings", rows);
    }
    let ids = match lm.positions {
        Positions::Absolute => Some(io.position_ids.clone()),
        Positions::AfterPadding { padding_idx } => {
            let offset = b.scalar_i64(padding_idx + 1);
            Some(b.op("Add", &[&io.position_ids, &offset], vec![]))
        }
        Positions::Rotary => None,
    };
    if let Some(ids) = ids {
        let positions = tensor(
            &mut b,
            "embeddings.position_embeddings.weight",
            vec![cfg.max_position_embeddings, e],
            dtype,
        );
        let pos = gather(&mut b, &positions, &ids);
        x = b.op("Add", &[&x, &pos], vec![]);
    }
    if let Some(rows) = lm.task_types {
        x = row0(&mut b, x, "task_type_embeddings", rows);
    }
    if lm.embed_norm {
        x = layer_norm(&mut b, &x, "embeddings.LayerNorm", e, eps, dtype);
    }
    if let Some(proj) = lm.projection {
        b.set_scope(proj);
        x = linear(&mut b, &x, proj, e, h, true, dtype);
    }

    b.set_scope("mask");
    let mask = padding_mask(&mut b, &io.input_ids, &io.attention_mask);
    let rotary = (lm.positions == Positions::Rotary).then(|| {
        b.set_scope("model.rotary_emb");
        let positions = cfg.max_position_embeddings;
        rope_tables(&mut b, &cfg.rope, positions, &io.position_ids, dtype)
    });

    for i in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        b.set_scope(&p);
        let layer = EncoderLayer {
            prefix: &p,
            names: LayerNames::BERT,
            hidden: h,
            intermediate: cfg.intermediate_size,
            eps,
            gelu: lm.gelu,
            norms: lm.norms,
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
        let attend = |b: &mut GraphBuilder, [q, k, v]: [&str; 3]| match &rotary {
            None => attention(b, q, k, v, &spec),
            Some(tables) => {
                let (heads, d) = (cfg.num_attention_heads, cfg.head_dim);
                let q = rotary_embedding(b, q, tables, &cfg.rope, heads, d);
                let k = rotary_embedding(b, k, tables, &cfg.rope, heads, d);
                attention(b, &q, &k, v, &spec)
            }
        };
        x = layer.build(&mut b, &x, attend, None);
    }
    if let Some(norm) = lm.final_norm {
        b.set_scope(norm);
        x = layer_norm(&mut b, &x, norm, h, eps, dtype);
    }

    b.set_scope("lm_head");
    let mut width = h;
    if let Some((dense, norm, act, out)) = lm.transform {
        x = linear(&mut b, &x, dense, h, out, true, dtype);
        x = gelu(&mut b, &x, act);
        x = layer_norm(&mut b, &x, norm, out, eps, dtype);
        width = out;
    }
    let weight = match &lm.decoder_weight {
        None => b.op(
            "Transpose",
            &[&word],
            vec![("perm", Attr::Ints(vec![1, 0]))],
        ),
        Some(name) => b.initializer(Initializer {
            name: format!("{name}_t"),
            dtype,
            shape: vec![width, cfg.vocab_size],
            source: Some(TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
                name.clone(),
            )))),
        }),
    };
    let y = b.op("MatMul", &[&x, &weight], vec![]);
    let bias = tensor(&mut b, &lm.decoder_bias, vec![cfg.vocab_size], dtype);
    b.op_into("Add", &[&y, &bias], vec![], "logits");
    b.finish()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{json, Value};

    use super::*;
    use crate::role::Role;
    use crate::Error;

    /// A tiny causal-LM config of `model_type` with `changes` applied (null removes a field).
    fn config(model_type: &str, changes: Value) -> Result<ArchConfig> {
        let mut cfg = json!({"model_type": model_type, "hidden_size": 64,
            "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 128,
            "vocab_size": 300, "max_position_embeddings": 128, "is_decoder": true});
        for (k, v) in changes.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        crate::models::parse_config(cfg.to_string().as_bytes(), Path::new("config.json"))
    }

    fn knobs(cfg: &ArchConfig) -> &BertLmConfig {
        cfg.knobs::<BertLmConfig>().unwrap()
    }

    #[test]
    fn each_type_takes_its_layout_and_class_defaults() {
        let bert = config("bert", json!({})).unwrap();
        assert_eq!(bert.role(), Role::Decoder);
        assert_eq!(bert.model_type.genai_type, Some("decoder"));
        let lm = knobs(&bert);
        assert_eq!(lm.positions, Positions::Absolute);
        assert_eq!((lm.token_types, lm.layer_norm_eps), (Some(2), 1e-12));
        assert_eq!(lm.decoder_weight, None);
        assert_eq!(lm.decoder_bias, "cls.predictions.bias");

        let xl = config("xlm-roberta-xl", json!({})).unwrap();
        let lm = knobs(&xl);
        assert_eq!(lm.positions, Positions::AfterPadding { padding_idx: 1 });
        assert_eq!((lm.token_types, lm.layer_norm_eps), (Some(1), 1e-5));
        assert!(!lm.embed_norm);
        assert_eq!(lm.final_norm, Some("encoder.LayerNorm"));

        let electra = config("electra", json!({})).unwrap();
        let lm = knobs(&electra);
        assert_eq!(lm.embedding_size, 128);
        assert_eq!(lm.projection, Some("embeddings_project"));
        assert_eq!(lm.transform.map(|t| t.3), Some(128));
        assert_eq!(lm.decoder_bias, "generator_lm_head.bias");
        let same = config("electra", json!({"embedding_size": 64})).unwrap();
        assert_eq!(knobs(&same).projection, None);

        let rembert = config("rembert", json!({"tie_word_embeddings": true})).unwrap();
        let lm = knobs(&rembert);
        assert!(!rembert.tie_word_embeddings, "RemBERT never ties its head");
        assert_eq!(
            lm.decoder_weight.as_deref(),
            Some("cls.predictions.decoder.weight")
        );
        assert_eq!(lm.decoder_bias, "cls.predictions.decoder.bias");
        assert_eq!(lm.transform.map(|t| t.3), Some(1664));

        let generation = config("bert-generation", json!({"tie_word_embeddings": false})).unwrap();
        let lm = knobs(&generation);
        assert_eq!((lm.token_types, lm.transform), (None, None));
        assert_eq!(lm.decoder_bias, "lm_head.decoder.bias");

        let ernie = config("ernie", json!({"use_task_id": true})).unwrap();
        assert_eq!(knobs(&ernie).task_types, Some(3));

        let roformer = config("roformer", json!({})).unwrap();
        let lm = knobs(&roformer);
        assert_eq!((lm.positions, lm.projection), (Positions::Rotary, None));
        assert!(roformer.rope.interleaved && roformer.rope.rotary_dim == 16);
        assert_eq!(lm.transform.map(|t| t.3), Some(64));
    }

    #[test]
    fn bad_causal_lm_fields_are_named() {
        for (model_type, change, field, says) in [
            (
                "camembert",
                json!({"is_decoder": null}),
                "is_decoder",
                "causal LM only",
            ),
            (
                "electra",
                json!({"is_decoder": false}),
                "is_decoder",
                "must be true",
            ),
            ("bert", json!({"hidden_act": "relu"}), "hidden_act", "gelu"),
            (
                "ernie",
                json!({"position_embedding_type": "relative_key"}),
                "position_embedding_type",
                "absolute",
            ),
            (
                "roberta",
                json!({"pad_token_id": 127}),
                "pad_token_id",
                "pad_token_id + 1",
            ),
            (
                "roformer",
                json!({"rotary_value": true}),
                "rotary_value",
                "not supported",
            ),
        ] {
            let result = config(model_type, change);
            match result.unwrap_err() {
                Error::ConfigField {
                    field: got,
                    message,
                    ..
                } => {
                    assert_eq!(got, field, "{message}");
                    assert!(message.contains(says), "{field}: {message}");
                }
                other => panic!("{field}: expected a field error, got {other}"),
            }
        }
    }

    #[test]
    fn checkpoint_names_lose_prefixes_and_cross_attention() {
        for (from, to) in [
            (
                "roberta_prelayernorm.LayerNorm.weight",
                Some("LayerNorm.weight"),
            ),
            (
                "electra.embeddings_project.bias",
                Some("embeddings_project.bias"),
            ),
            (
                "bert.embeddings.LayerNorm.gamma",
                Some("embeddings.LayerNorm.weight"),
            ),
            ("cls.predictions.bias", Some("cls.predictions.bias")),
            (
                "bert.encoder.layer.0.crossattention.self.query.weight",
                None,
            ),
            ("bert.pooler.dense.weight", None),
        ] {
            assert_eq!(checkpoint_name(from).as_deref(), to, "{from}");
        }
    }
}
