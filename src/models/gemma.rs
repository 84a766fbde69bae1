//! The Gemma family (gemma, gemma2, gemma3_text), spec §1.10.
//!
//! Like the Llama decoder, with: token embeddings scaled by `sqrt(hidden_size)` (rounded to
//! the model dtype), RMSNorms scaling by `1 + weight`, a GELU-gated MLP and tied embeddings.
//! Gemma 2 and 3 add a norm after attention and one on each side of the MLP, a custom
//! attention scale, soft-capped attention scores and final logits, and sliding-window layers;
//! Gemma 3 also normalises queries and keys per head and gives sliding layers their own RoPE.
//! Same graph contract as [`super::llama`].

use std::collections::BTreeMap;

use super::components::{
    gelu_mlp, linear, named_rope_tables, offset_rms_norm, padding_mask, rope_tables,
    rotary_embedding, sliding_window_mask, soft_capped_attention, AttentionSpec, RopeTables,
};
use super::decoder::{BATCH, MASK_LEN, PAST, SEQ, TOTAL};
use crate::config::{ArchConfig, GemmaConfig, Rope};
use crate::ir::{
    Attr, DType, Dim, Graph, GraphBuilder, Initializer, Shape, TensorData, TensorSource,
};
use crate::weights::convert;

/// Builds the decoder graph of a Gemma-family config (`cfg.gemma` must be set).
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    let gemma = cfg
        .gemma
        .as_ref()
        .expect("config parsing sets the Gemma knobs for every Gemma model type");
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
    let gathered = b.op(
        "Gather",
        &[&embed, &input_ids],
        vec![("axis", Attr::Int(0))],
    );
    let scale = scalar(&mut b, gemma.embed_scale, dtype);
    let mut x = b.op("Mul", &[&gathered, &scale], vec![]);

    b.set_scope("model.rotary_emb");
    let positions = cfg.max_position_embeddings;
    let global = rope_tables(&mut b, &cfg.rope, positions, &position_ids, dtype);
    let local = gemma.local_rope.as_ref().map(|rope| {
        let tables = named_rope_tables(
            &mut b,
            "model.rotary_emb_local",
            rope,
            positions,
            &position_ids,
            dtype,
        );
        (rope, tables)
    });

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
        let window = cfg.layer_windows[i];
        // Gemma 3's sliding layers rotate with the local RoPE.
        let (rope, tables) = match (&local, window) {
            (Some((rope, tables)), Some(_)) => (*rope, tables),
            _ => (&cfg.rope, &global),
        };
        let layer = Layer {
            cfg,
            gemma,
            prefix: &p,
            dtype,
        };
        let normed = layer.norm(&mut b, &x, "input_layernorm", h);
        let present = (format!("present.{i}.key"), format!("present.{i}.value"));
        let spec = AttentionSpec {
            q_heads: cfg.num_attention_heads,
            kv_heads: kv,
            scale: gemma.attn_scale,
            mask: &masks[&window],
            past: (past_k, past_v),
            present: (&present.0, &present.1),
        };
        let mut o = layer.attention(&mut b, &normed, rope, tables, &spec);
        if gemma.sandwich_norms() {
            o = layer.norm(&mut b, &o, "post_attention_layernorm", h);
        }
        x = b.op("Add", &[&x, &o], vec![]);
        let pre_mlp = if gemma.sandwich_norms() {
            "pre_feedforward_layernorm"
        } else {
            "post_attention_layernorm"
        };
        let normed = layer.norm(&mut b, &x, pre_mlp, h);
        let mut m = gelu_mlp(
            &mut b,
            &normed,
            &format!("{p}.mlp"),
            h,
            cfg.intermediate_size,
            gemma.gelu,
            dtype,
        );
        if gemma.sandwich_norms() {
            m = layer.norm(&mut b, &m, "post_feedforward_layernorm", h);
        }
        x = b.op("Add", &[&x, &m], vec![]);
    }

    b.set_scope("model.norm");
    let normed = offset_rms_norm(&mut b, &x, "model.norm.weight", h, cfg.rms_norm_eps, dtype);
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
    match gemma.final_softcap {
        None => b.op_into("MatMul", &[&normed, &head], vec![], "logits"),
        Some(cap) => {
            let raw = b.op("MatMul", &[&normed, &head], vec![]);
            let c = scalar(&mut b, cap, dtype);
            let scaled = b.op("Div", &[&raw, &c], vec![]);
            let squashed = b.op("Tanh", &[&scaled], vec![]);
            b.op_into("Mul", &[&squashed, &c], vec![], "logits");
        }
    }
    b.finish()
}

/// One decoder layer's names and parameters.
struct Layer<'a> {
    cfg: &'a ArchConfig,
    gemma: &'a GemmaConfig,
    prefix: &'a str,
    dtype: DType,
}

impl Layer<'_> {
    /// The Gemma RMSNorm `{prefix}.{name}.weight` over the last axis of width `width`.
    fn norm(&self, b: &mut GraphBuilder, x: &str, name: &str, width: usize) -> String {
        let weight = format!("{}.{name}.weight", self.prefix);
        offset_rms_norm(b, x, &weight, width, self.cfg.rms_norm_eps, self.dtype)
    }

    /// q/k/v projections, per-head q/k norms (Gemma 3), RoPE, attention and the output
    /// projection.
    fn attention(
        &self,
        b: &mut GraphBuilder,
        x: &str,
        rope: &Rope,
        tables: &RopeTables,
        spec: &AttentionSpec<'_>,
    ) -> String {
        let (cfg, h, d) = (self.cfg, self.cfg.hidden_size, self.cfg.head_dim);
        let a = format!("{}.self_attn", self.prefix);
        let proj = |b: &mut GraphBuilder, name: &str, width: usize| {
            linear(b, x, &format!("{a}.{name}"), h, width, false, self.dtype)
        };
        let mut q = proj(b, "q_proj", cfg.q_size());
        let mut k = proj(b, "k_proj", cfg.kv_size());
        let v = proj(b, "v_proj", cfg.kv_size());
        if self.gemma.qk_norm() {
            let (heads, kv_heads) = (self.cfg.num_attention_heads, self.cfg.num_key_value_heads);
            q = self.per_head_norm(b, &q, heads, &format!("{a}.q_norm"));
            k = self.per_head_norm(b, &k, kv_heads, &format!("{a}.k_norm"));
        }
        let q = rotary_embedding(b, &q, tables, rope, cfg.num_attention_heads, d);
        let k = rotary_embedding(b, &k, tables, rope, cfg.num_key_value_heads, d);
        let softcap = self.gemma.attn_softcap.unwrap_or(0.0);
        let y = soft_capped_attention(b, &q, &k, &v, spec, softcap);
        linear(
            b,
            &y,
            &format!("{a}.o_proj"),
            cfg.q_size(),
            h,
            false,
            self.dtype,
        )
    }

    /// `[B, S, heads·D]` → `[B, S, heads, D]` → Gemma RMSNorm over D → `[B, S, heads·D]`.
    fn per_head_norm(&self, b: &mut GraphBuilder, x: &str, heads: usize, module: &str) -> String {
        let d = self.cfg.head_dim;
        let split = b.const_i64(&[0, 0, heads as i64, d as i64]);
        let heads = b.op("Reshape", &[x, &split], vec![]);
        let weight = format!("{module}.weight");
        let normed = offset_rms_norm(b, &heads, &weight, d, self.cfg.rms_norm_eps, self.dtype);
        let merge = b.const_i64(&[0, 0, -1]);
        b.op("Reshape", &[&normed, &merge], vec![])
    }
}

/// A scalar constant of `dtype` holding `value` rounded to that dtype.
fn scalar(b: &mut GraphBuilder, value: f32, dtype: DType) -> String {
    let (bytes, _) = convert::convert(bytemuck::bytes_of(&value), DType::F32, dtype);
    b.constant(TensorData {
        dtype,
        shape: vec![],
        bytes,
    })
}
