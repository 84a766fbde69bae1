//! The Llama-family decoder (llama, mistral, qwen2): pre-norm layers of RMSNorm → attention
//! with RoPE → residual → RMSNorm → SiLU-gated MLP → residual, then a final norm and LM head.
//!
//! Graph contract (spec §1.2): inputs `input_ids`, `attention_mask`, `position_ids`,
//! `past_key_values.{i}.{key,value}`; outputs `logits`, `present.{i}.{key,value}`.

use std::collections::BTreeMap;

use super::components::{
    attention, linear, padding_mask, rms_norm, rope_tables, rotary_embedding, sliding_window_mask,
    swiglu_mlp, AttentionSpec,
};
use crate::config::ArchConfig;
use crate::ir::{Attr, DType, Dim, Graph, GraphBuilder, Initializer, Shape, TensorSource};

/// Symbolic dims, spelled as the peer spells them (onnxruntime-genai and tooling rely on it).
pub(super) const BATCH: &str = "batch";
pub(super) const SEQ: &str = "sequence_len";
pub(super) const MASK_LEN: &str = "past_seq_len + seq_len";
pub(super) const PAST: &str = "past_sequence_len";
pub(super) const TOTAL: &str = "past_sequence_len + sequence_len";

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new("main_graph");
    let (h, kv, d) = (cfg.hidden_size, cfg.num_key_value_heads, cfg.head_dim);

    let input_ids = b.input("input_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let attention_mask = b.input("attention_mask", DType::I64, Shape::new([BATCH, MASK_LEN]));
    let position_ids = b.input("position_ids", DType::I64, Shape::new([BATCH, SEQ]));
    let kv_shape = |len: &str| Shape(vec![Dim::sym(BATCH), kv.into(), Dim::sym(len), d.into()]);
    let past: Vec<(String, String)> = (0..cfg.num_hidden_layers)
        .map(|i| {
            (
                b.input(&format!("past_key_values.{i}.key"), dtype, kv_shape(PAST)),
                b.input(&format!("past_key_values.{i}.value"), dtype, kv_shape(PAST)),
            )
        })
        .collect();
    b.output(
        "logits",
        dtype,
        Shape(vec![Dim::sym(BATCH), Dim::sym(SEQ), cfg.vocab_size.into()]),
    );
    for i in 0..cfg.num_hidden_layers {
        b.output(&format!("present.{i}.key"), dtype, kv_shape(TOTAL));
        b.output(&format!("present.{i}.value"), dtype, kv_shape(TOTAL));
    }

    b.set_scope("model.embed_tokens");
    let embed = b.initializer(Initializer {
        name: "model.embed_tokens.weight".into(),
        dtype,
        shape: vec![cfg.vocab_size, h],
        source: Some(TensorSource::Checkpoint("model.embed_tokens.weight".into())),
    });
    let mut x = b.op(
        "Gather",
        &[&embed, &input_ids],
        vec![("axis", Attr::Int(0))],
    );

    b.set_scope("model.rotary_emb");
    let tables = rope_tables(
        &mut b,
        &cfg.rope,
        cfg.max_position_embeddings,
        &position_ids,
        dtype,
    );

    b.set_scope("model.mask");
    let full_mask = padding_mask(&mut b, &input_ids, &attention_mask);
    let mut masks: BTreeMap<Option<usize>, String> = BTreeMap::from([(None, full_mask.clone())]);
    for window in cfg.layer_windows.iter().flatten() {
        if let std::collections::btree_map::Entry::Vacant(slot) = masks.entry(Some(*window)) {
            slot.insert(sliding_window_mask(
                &mut b,
                &full_mask,
                &input_ids,
                &attention_mask,
                *window,
            ));
        }
    }

    for (i, (past_k, past_v)) in past.iter().enumerate() {
        let p = format!("model.layers.{i}");
        b.set_scope(&p);
        let normed = rms_norm(
            &mut b,
            &x,
            &format!("{p}.input_layernorm.weight"),
            h,
            cfg.rms_norm_eps,
            dtype,
        );
        let a = format!("{p}.self_attn");
        let q = linear(
            &mut b,
            &normed,
            &format!("{a}.q_proj"),
            h,
            cfg.q_size(),
            cfg.qkv_bias,
            dtype,
        );
        let k = linear(
            &mut b,
            &normed,
            &format!("{a}.k_proj"),
            h,
            cfg.kv_size(),
            cfg.qkv_bias,
            dtype,
        );
        let v = linear(
            &mut b,
            &normed,
            &format!("{a}.v_proj"),
            h,
            cfg.kv_size(),
            cfg.qkv_bias,
            dtype,
        );
        let q = rotary_embedding(&mut b, &q, &tables, &cfg.rope, cfg.num_attention_heads, d);
        let k = rotary_embedding(&mut b, &k, &tables, &cfg.rope, kv, d);
        let present = (format!("present.{i}.key"), format!("present.{i}.value"));
        let spec = AttentionSpec {
            q_heads: cfg.num_attention_heads,
            kv_heads: kv,
            scale: (d as f32).powf(-0.5),
            mask: &masks[&cfg.layer_windows[i]],
            past: (past_k, past_v),
            present: (&present.0, &present.1),
        };
        let y = attention(&mut b, &q, &k, &v, &spec);
        let o = linear(
            &mut b,
            &y,
            &format!("{a}.o_proj"),
            cfg.q_size(),
            h,
            cfg.o_bias,
            dtype,
        );
        x = b.op("Add", &[&x, &o], vec![]);
        let normed = rms_norm(
            &mut b,
            &x,
            &format!("{p}.post_attention_layernorm.weight"),
            h,
            cfg.rms_norm_eps,
            dtype,
        );
        let m = swiglu_mlp(
            &mut b,
            &normed,
            &format!("{p}.mlp"),
            h,
            cfg.intermediate_size,
            cfg.mlp_bias,
            dtype,
        );
        x = b.op("Add", &[&x, &m], vec![]);
    }

    b.set_scope("model.norm");
    let normed = rms_norm(&mut b, &x, "model.norm.weight", h, cfg.rms_norm_eps, dtype);
    b.set_scope("lm_head");
    let head = if cfg.tie_word_embeddings {
        b.op(
            "Transpose",
            &[&embed],
            vec![("perm", Attr::Ints(vec![1, 0]))],
        )
    } else {
        b.initializer(Initializer {
            name: "lm_head.weight_t".into(),
            dtype,
            shape: vec![h, cfg.vocab_size],
            source: Some(TensorSource::Transpose(Box::new(TensorSource::Checkpoint(
                "lm_head.weight".into(),
            )))),
        })
    };
    b.op_into("MatMul", &[&normed, &head], vec![], "logits");
    b.finish()
}
