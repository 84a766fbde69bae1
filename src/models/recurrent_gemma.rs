//! RecurrentGemma (Griffin): residual blocks whose temporal block is either Griffin's recurrent
//! block ([`super::components::rglru`]: GELU-gated branch, a causal depthwise convolution and
//! the Real-Gated Linear Recurrent Unit, its prompt-length recurrence an ONNX `Scan`) or local
//! multi-query attention (a sliding window of `attention_window_size` tokens, half of each head
//! rotated, q/k/v biases by `attention_bias`, `o_proj` always biased), cycled by `block_types`;
//! every block then has a GELU-gated MLP of `intermediate_size / 2` with biases. The token
//! embeddings are scaled by `sqrt(hidden_size)` rounded to bf16 (transformers' bf16 buffer),
//! every RMSNorm scales by `1 + weight`, and the logits are soft-capped by `logits_soft_cap`.
//!
//! A recurrent layer `i` carries its conv state `past.{i}.conv` (`[batch, lru_width,
//! conv1d_width − 1]`) and its RG-LRU state `past.{i}.recurrent` (`[batch, lru_width]`); an
//! attention layer its KV cache, kept whole (the window is a mask over it, not a bound on it:
//! docs/recurrent.md). The RoPE angles are computed in the graph from `position_ids` (the config
//! has no `max_position_embeddings`, and transformers rotates any position). onnxruntime-genai
//! 0.18 has no RecurrentGemma model type, so the package has no genai_config.json.

use super::components::decoder_io::{BATCH, MASK_LEN, PAST, SEQ, TOTAL};
use super::components::rglru::{recurrent_block, RecurrentBlock};
use super::components::{
    attention, gated_mlp, linear, padding_mask, past_conv_name, present_conv_name,
    rotary_embedding, scalar, sliding_window_mask, AttentionSpec, ConvState, GateActivation, Norm,
    NormKind, RopeTables, SsmState,
};
use super::decoder::soft_capped_logits;
use super::family::FamilySpec;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, FamilyKnobs, Fields, Gelu,
    HfConfig, ModelType, RopeScaling, Sign,
};
use crate::ir::TensorSource;
use crate::ir::{Attr, DType, Dim, Graph, GraphBuilder, Initializer, Shape, TensorData};
use crate::limits::config::{MAX_CONV_KERNEL, MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_WIDTH};
use crate::Result;

/// The family's registry entry.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "recurrent_gemma",
    summary: "Griffin: RG-LRU recurrent blocks (the recurrence an ONNX `Scan`; conv and \
              recurrent states carried as `past.{i}.conv` / `past.{i}.recurrent`) and local \
              MQA blocks by `block_types`; GeGLU MLP, soft-capped logits",
    model_types: &[ModelType {
        name: "recurrent_gemma",
        genai_type: None,
        read,
        builds_longrope: false,
    }],
};

/// transformers' RecurrentGemmaConfig: RoPE theta 1e4 on half of each head by default, tied
/// head, `rms_norm_eps` 1e-6, q/k/v biases by `attention_bias`, no window read here (the
/// family reads `attention_window_size` itself).
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    silu_mlp: false,
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 10_000.0, f),
    tie_word_embeddings: true,
    use_sliding_window: false,
    ..DecoderFields::LLAMA
};

/// RecurrentGemma's knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct RecurrentGemma {
    /// Per layer, whether its temporal block is recurrent (else local attention).
    pub recurrent: Vec<bool>,
    /// The recurrent blocks' shape.
    pub block: RecurrentBlock,
    /// The local attention's window (`attention_window_size`): a query sees the keys less than
    /// this many tokens behind it, itself included.
    pub window: usize,
    /// `logits_soft_cap`: logits become `c · tanh(logits / c)`.
    pub softcap: f32,
    /// The token embeddings' factor: `sqrt(hidden_size)` rounded to bf16.
    pub embed_scale: f32,
    /// The MLP's width (`intermediate_size / 2`).
    pub mlp_width: usize,
}

/// `x` rounded to the nearest bf16 value (ties to even), as f32.
fn round_to_bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(rounded)
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let hidden = f.positive("hidden_size", raw.hidden_size, MAX_WIDTH)?;
    let heads = f.positive("num_attention_heads", raw.num_attention_heads, MAX_HEADS)?;
    if heads > hidden {
        return Err(f.err(
            "num_attention_heads",
            &format!("{heads} is more than hidden_size ({hidden}): no channel per head"),
        ));
    }
    let layers = f.positive("num_hidden_layers", raw.num_hidden_layers, MAX_LAYERS)?;
    let width = match raw.lru_width {
        None => hidden,
        Some(v) => f.count("lru_width", v, MAX_WIDTH)?,
    };
    if width % heads != 0 {
        return Err(f.err(
            "lru_width",
            &format!("{width} must be a multiple of num_attention_heads ({heads})"),
        ));
    }
    let kernel = f.optional_count("conv1d_width", raw.conv1d_width, 4, MAX_CONV_KERNEL)?;
    if kernel < 2 {
        return Err(f.err(
            "conv1d_width",
            "must be at least 2 (the conv state holds conv1d_width − 1 steps)",
        ));
    }
    let window = f.optional_count(
        "attention_window_size",
        raw.attention_window_size,
        2048,
        MAX_POSITIONS,
    )?;
    let softcap = f.number("logits_soft_cap", raw.logits_soft_cap, 30.0, Sign::Positive)?;
    let gelu = Gelu::read(
        raw.hidden_activation.as_deref(),
        "gelu_pytorch_tanh",
        "hidden_activation",
        f,
    )?;
    let types = match &raw.block_types {
        None => vec![
            "recurrent".to_string(),
            "recurrent".into(),
            "attention".into(),
        ],
        Some(types) => types.clone(),
    };
    if types.is_empty() {
        return Err(f.err(
            "block_types",
            "is empty (expected recurrent or attention entries)",
        ));
    }
    let kinds = types
        .iter()
        .map(|t| match t.as_str() {
            "recurrent" => Ok(true),
            "attention" => Ok(false),
            other => Err(f.err(
                "block_types",
                &format!("`{other}` (expected recurrent or attention)"),
            )),
        })
        .collect::<Result<Vec<bool>>>()?;
    let recurrent: Vec<bool> = (0..layers).map(|i| kinds[i % kinds.len()]).collect();
    let intermediate = f.positive("intermediate_size", raw.intermediate_size, MAX_WIDTH)?;
    if intermediate < 2 {
        return Err(f.err(
            "intermediate_size",
            "must be at least 2 (the MLP is intermediate_size / 2 wide)",
        ));
    }
    // transformers sets head_dim to hidden_size / num_attention_heads whatever config.json
    // says, rotates half of each head unless the RoPE parameters say otherwise, and computes
    // RoPE for any position (one position here: the graph computes its angles itself).
    let plain = HfConfig {
        head_dim: Some((hidden / heads) as i64),
        max_position_embeddings: Some(1),
        partial_rotary_factor: raw.partial_rotary_factor.or(Some(0.5)),
        hidden_act: None,
        layer_types: None,
        sliding_window: None,
        ..raw.clone()
    };
    let cfg = read_decoder(&plain, t, f, &FIELDS, |dims| {
        Ok(RecurrentGemma {
            recurrent,
            block: RecurrentBlock {
                hidden: dims.hidden_size,
                width,
                blocks: heads,
                kernel,
                gelu,
            },
            window,
            softcap,
            embed_scale: round_to_bf16((hidden as f64).sqrt() as f32),
            mlp_width: intermediate / 2,
        })
    })?;
    if !matches!(cfg.rope.scaling, RopeScaling::Default) {
        return Err(f.err(
            "rope_parameters",
            "RecurrentGemma supports only the default RoPE (rope_type `default`)",
        ));
    }
    Ok(cfg)
}

impl FamilyKnobs for RecurrentGemma {
    fn build(&self, cfg: &ArchConfig, dtype: DType) -> Graph {
        build(cfg, self, dtype)
    }
}

/// What layer `i` reads and writes between calls.
enum LayerState {
    /// A recurrent block: `past.{i}.conv`, `past.{i}.recurrent`.
    Recurrent { conv: String, recurrent: String },
    /// A local attention block: `past_key_values.{i}.key`, `.value`.
    Attention { key: String, value: String },
}

/// The RG-LRU state's name between `past.{i}.` / `present.{i}.` (onnxruntime-genai 0.18's
/// spelling of a linear recurrence's state, as Gated DeltaNet's).
const RECURRENT: &str = "recurrent";

/// The decoder contract's inputs and outputs, each layer's state in layer order.
fn declare_io(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    k: &RecurrentGemma,
    dtype: DType,
) -> (String, String, String, Vec<LayerState>) {
    let input_ids = b.input("input_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let attention_mask = b.input("attention_mask", DType::I64, Shape::new([BATCH, MASK_LEN]));
    let position_ids = b.input("position_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let (w, kernel) = (k.block.width, k.block.kernel);
    let conv_shape = || Shape(vec![Dim::sym(BATCH), w.into(), (kernel - 1).into()]);
    let lru_shape = || Shape(vec![Dim::sym(BATCH), w.into()]);
    let kv_shape = |len: &str| {
        Shape(vec![
            Dim::sym(BATCH),
            cfg.num_key_value_heads.into(),
            Dim::sym(len),
            cfg.head_dim.into(),
        ])
    };
    let mut states = Vec::with_capacity(k.recurrent.len());
    for (i, &recurrent) in k.recurrent.iter().enumerate() {
        states.push(match recurrent {
            true => LayerState::Recurrent {
                conv: b.input(&past_conv_name(i), dtype, conv_shape()),
                recurrent: b.input(&format!("past.{i}.{RECURRENT}"), dtype, lru_shape()),
            },
            false => LayerState::Attention {
                key: b.input(&format!("past_key_values.{i}.key"), dtype, kv_shape(PAST)),
                value: b.input(&format!("past_key_values.{i}.value"), dtype, kv_shape(PAST)),
            },
        });
    }
    let logits = Shape(vec![Dim::sym(BATCH), Dim::sym(SEQ), cfg.vocab_size.into()]);
    b.output("logits", dtype, logits);
    for (i, &recurrent) in k.recurrent.iter().enumerate() {
        if recurrent {
            b.output(&present_conv_name(i), dtype, conv_shape());
            b.output(&format!("present.{i}.{RECURRENT}"), dtype, lru_shape());
        } else {
            b.output(&format!("present.{i}.key"), dtype, kv_shape(TOTAL));
            b.output(&format!("present.{i}.value"), dtype, kv_shape(TOTAL));
        }
    }
    (input_ids, attention_mask, position_ids, states)
}

/// The cos/sin (`[B, S, rotary_dim / 2]`, in `dtype`) of the current tokens' positions,
/// computed as transformers does: `position · inv_freq` in f32, then `Cos` / `Sin`.
fn rotary_angles(b: &mut GraphBuilder, cfg: &ArchConfig, ids: &str, dtype: DType) -> RopeTables {
    let inv_freq = cfg.rope.inv_freq();
    let inv_freq = b.constant(TensorData::from_f32(vec![inv_freq.len()], &inv_freq));
    let f32_code = Attr::Int(DType::F32.onnx_code() as i64);
    let positions = b.op("Cast", &[ids], vec![("to", f32_code)]);
    let axis = b.const_i64(&[2]);
    let positions = b.op("Unsqueeze", &[&positions, &axis], vec![]);
    let angles = b.op("Mul", &[&positions, &inv_freq], vec![]);
    let mut table = |op: &str| {
        let t = b.op(op, &[&angles], vec![]);
        match dtype {
            DType::F32 => t,
            _ => b.op(
                "Cast",
                &[&t],
                vec![("to", Attr::Int(dtype.onnx_code() as i64))],
            ),
        }
    };
    RopeTables {
        cos: table("Cos"),
        sin: table("Sin"),
    }
}

/// Builds the RecurrentGemma graph of `cfg`.
fn build(cfg: &ArchConfig, k: &RecurrentGemma, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new("main_graph");
    let h = cfg.hidden_size;
    let (input_ids, attention_mask, position_ids, states) = declare_io(&mut b, cfg, k, dtype);

    b.set_scope("model.embed_tokens");
    let embed = b.initializer(Initializer {
        name: "model.embed_tokens.weight".into(),
        dtype,
        shape: vec![cfg.vocab_size, h],
        source: Some(TensorSource::Checkpoint("model.embed_tokens.weight".into())),
    });
    let gathered = b.op(
        "Gather",
        &[&embed, &input_ids],
        vec![("axis", Attr::Int(0))],
    );
    let factor = scalar(&mut b, k.embed_scale, dtype);
    let mut x = b.op("Mul", &[&gathered, &factor], vec![]);

    let attends = k.recurrent.contains(&false);
    b.set_scope("model.rotary_emb");
    let rotary = attends.then(|| rotary_angles(&mut b, cfg, &position_ids, dtype));
    b.set_scope("model.mask");
    let mask = attends.then(|| {
        let full = padding_mask(&mut b, &input_ids, &attention_mask);
        sliding_window_mask(&mut b, &full, &input_ids, &attention_mask, k.window)
    });

    let norm = Norm {
        kind: NormKind::OffsetRms,
        eps: cfg.rms_norm_eps,
    };
    for (i, state) in states.iter().enumerate() {
        let p = format!("model.layers.{i}");
        b.set_scope(&p);
        let normed = norm.apply(&mut b, &x, &format!("{p}.temporal_pre_norm"), h, dtype);
        let module = format!("{p}.temporal_block");
        let o = match state {
            LayerState::Recurrent { conv, recurrent } => {
                let (conv_out, lru_out) =
                    (present_conv_name(i), format!("present.{i}.{RECURRENT}"));
                let state = SsmState {
                    conv: ConvState {
                        past: conv,
                        present: &conv_out,
                    },
                    past: recurrent,
                    present: &lru_out,
                };
                recurrent_block(
                    &mut b,
                    &normed,
                    &module,
                    k.block,
                    state,
                    &position_ids,
                    dtype,
                )
            }
            LayerState::Attention { key, value } => {
                let present = (format!("present.{i}.key"), format!("present.{i}.value"));
                let spec = AttentionSpec {
                    q_heads: cfg.num_attention_heads,
                    kv_heads: cfg.num_key_value_heads,
                    scale: (cfg.head_dim as f64).powf(-0.5) as f32,
                    mask: mask.as_deref().expect("an attention layer has its mask"),
                    past: (key, value),
                    present: (&present.0, &present.1),
                    index: None,
                };
                let tables = rotary.as_ref().expect("an attention layer has its RoPE");
                local_attention(&mut b, cfg, &normed, &module, tables, &spec, dtype)
            }
        };
        let residual = b.op("Add", &[&o, &x], vec![]);
        let normed = norm.apply(
            &mut b,
            &residual,
            &format!("{p}.channel_pre_norm"),
            h,
            dtype,
        );
        let act = GateActivation::Gelu(k.block.gelu);
        let mlp = format!("{p}.mlp_block");
        let m = gated_mlp(&mut b, &normed, &mlp, (h, k.mlp_width), true, act, dtype);
        x = b.op("Add", &[&m, &residual], vec![]);
    }

    b.set_scope("model.final_norm");
    let normed = norm.apply(&mut b, &x, "model.final_norm", h, dtype);
    b.set_scope("lm_head");
    let head = match cfg.tie_word_embeddings {
        true => b.op(
            "Transpose",
            &[&embed],
            vec![("perm", Attr::Ints(vec![1, 0]))],
        ),
        false => b.initializer(Initializer {
            name: "lm_head.weight_t".into(),
            dtype,
            shape: vec![h, cfg.vocab_size],
            source: Some(TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
                "lm_head.weight".into(),
            )))),
        }),
    };
    soft_capped_logits(&mut b, &normed, &head, Some(k.softcap), dtype);
    b.finish()
}

/// The local attention block of module `module`: q/k/v projections (biased by
/// `attention_bias`), RoPE on the rotated part of each head, attention over the KV cache under
/// the sliding-window mask of `spec`, and the always-biased `o_proj`.
fn local_attention(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    module: &str,
    tables: &RopeTables,
    spec: &AttentionSpec<'_>,
    dtype: DType,
) -> String {
    let h = cfg.hidden_size;
    let proj = |b: &mut GraphBuilder, name: &str, width: usize| {
        linear(
            b,
            x,
            &format!("{module}.{name}"),
            h,
            width,
            cfg.qkv_bias,
            dtype,
        )
    };
    let q = proj(b, "q_proj", cfg.q_size());
    let k = proj(b, "k_proj", cfg.kv_size());
    let v = proj(b, "v_proj", cfg.kv_size());
    let d = cfg.head_dim;
    let q = rotary_embedding(b, &q, tables, &cfg.rope, spec.q_heads, d);
    let k = rotary_embedding(b, &k, tables, &cfg.rope, spec.kv_heads, d);
    let y = attention(b, &q, &k, &v, spec);
    linear(
        b,
        &y,
        &format!("{module}.o_proj"),
        cfg.q_size(),
        h,
        true,
        dtype,
    )
}

#[cfg(test)]
mod tests {
    use super::{round_to_bf16, RecurrentGemma};
    use crate::config::ArchConfig;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::parse_fields(
            r#""model_type": "recurrent_gemma", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 4,
            "vocab_size": 300"#,
            extra,
        )
    }

    #[test]
    fn the_embedding_scale_is_rounded_to_bf16_as_transformers_buffer() {
        assert_eq!(round_to_bf16(8.0), 8.0);
        // sqrt(2560) = 50.596…: transformers' bf16 buffer holds 50.5.
        assert_eq!(round_to_bf16(2560f32.sqrt()), 50.5);
        let c = crate::models::parse_fields(
            r#""model_type": "recurrent_gemma", "hidden_size": 2560, "intermediate_size": 128,
            "num_attention_heads": 10, "num_hidden_layers": 1, "vocab_size": 300"#,
            "",
        )
        .unwrap();
        assert_eq!(c.knobs::<RecurrentGemma>().unwrap().embed_scale, 50.5);
    }

    #[test]
    fn reads_the_block_cycle_widths_window_and_half_rotary() {
        let c = parse(r#", "lru_width": 96, "attention_window_size": 4"#).unwrap();
        let k = c.knobs::<RecurrentGemma>().unwrap();
        assert_eq!(k.recurrent, [true, true, false, true]);
        assert_eq!((k.block.width, k.block.blocks, k.block.kernel), (96, 4, 4));
        assert_eq!((k.window, k.softcap, k.mlp_width), (4, 30.0, 64));
        assert_eq!(
            (c.head_dim, c.rope.rotary_dim, c.num_key_value_heads),
            (16, 8, 1)
        );
        assert!(c.tie_word_embeddings);
        let c = parse(r#", "block_types": ["attention", "recurrent"], "head_dim": 7"#).unwrap();
        assert_eq!(
            c.knobs::<RecurrentGemma>().unwrap().recurrent,
            [false, true, false, true]
        );
        assert_eq!(c.head_dim, 16);
    }

    #[test]
    fn hostile_values_are_refused_by_name() {
        let cases = [
            (r#", "lru_width": 7"#, "lru_width"),
            (r#", "lru_width": 0"#, "lru_width"),
            (r#", "conv1d_width": 1"#, "conv1d_width"),
            (r#", "conv1d_width": 100000"#, "conv1d_width"),
            (r#", "attention_window_size": 0"#, "attention_window_size"),
            (r#", "logits_soft_cap": 0"#, "logits_soft_cap"),
            (r#", "logits_soft_cap": -3"#, "logits_soft_cap"),
            (r#", "block_types": []"#, "block_types"),
            (r#", "block_types": ["mamba"]"#, "block_types"),
            (r#", "hidden_activation": "relu""#, "hidden_activation"),
            (r#", "intermediate_size": 1"#, "intermediate_size"),
            (r#", "num_attention_heads": 128"#, "num_attention_heads"),
            (r#", "num_key_value_heads": 3"#, "num_key_value_heads"),
            (
                r#", "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}"#,
                "rope_parameters",
            ),
        ];
        for (extra, field) in cases {
            let err = parse(extra).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }
}
