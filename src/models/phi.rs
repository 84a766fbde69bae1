//! Phi-1/1.5/2: each layer applies attention (partial RoPE) and a GELU MLP in parallel to one
//! LayerNorm of the residual stream, `x + attn(ln(x)) + mlp(ln(x))`; then a final LayerNorm and
//! an LM head with bias.

use super::components::{
    attention, decoder_io, gelu, layer_norm, linear, padding_mask, rope_tables, rotary_embedding,
    AttentionSpec, DecoderDims,
};
use crate::config::{ArchConfig, Gelu};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new("main_graph");
    let (h, d) = (cfg.hidden_size, cfg.head_dim);
    let eps = cfg.layer_norm_eps.unwrap_or(1e-5);
    let act = cfg.gelu.unwrap_or(Gelu::Tanh);
    let dims = DecoderDims {
        layers: cfg.num_hidden_layers,
        kv_heads: cfg.num_key_value_heads,
        head_dim: d,
        vocab: cfg.vocab_size,
    };
    let io = decoder_io(&mut b, dims, dtype);

    b.set_scope("model.embed_tokens");
    let embed = b.initializer(Initializer {
        name: "model.embed_tokens.weight".into(),
        dtype,
        shape: vec![cfg.vocab_size, h],
        source: Some(TensorSource::Checkpoint("model.embed_tokens.weight".into())),
    });
    let mut x = b.op(
        "Gather",
        &[&embed, &io.input_ids],
        vec![("axis", Attr::Int(0))],
    );

    b.set_scope("model.rotary_emb");
    let tables = rope_tables(
        &mut b,
        &cfg.rope,
        cfg.max_position_embeddings,
        &io.position_ids,
        dtype,
    );
    b.set_scope("model.mask");
    let mask = padding_mask(&mut b, &io.input_ids, &io.attention_mask);

    for (i, (past_k, past_v)) in io.past.iter().enumerate() {
        let p = format!("model.layers.{i}");
        b.set_scope(&p);
        let normed = layer_norm(&mut b, &x, &format!("{p}.input_layernorm"), h, eps, dtype);
        let a = format!("{p}.self_attn");
        let project = |b: &mut GraphBuilder, input: &str, name: &str, inp: usize, out: usize| {
            linear(b, input, name, inp, out, true, dtype)
        };
        let q = project(&mut b, &normed, &format!("{a}.q_proj"), h, cfg.q_size());
        let k = project(&mut b, &normed, &format!("{a}.k_proj"), h, cfg.kv_size());
        let v = project(&mut b, &normed, &format!("{a}.v_proj"), h, cfg.kv_size());
        let q = rotary_embedding(&mut b, &q, &tables, &cfg.rope, cfg.num_attention_heads, d);
        let k = rotary_embedding(&mut b, &k, &tables, &cfg.rope, cfg.num_key_value_heads, d);
        let present = (format!("present.{i}.key"), format!("present.{i}.value"));
        let spec = AttentionSpec {
            q_heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            scale: (d as f32).powf(-0.5),
            mask: &mask,
            past: (past_k, past_v),
            present: (&present.0, &present.1),
        };
        let y = attention(&mut b, &q, &k, &v, &spec);
        let o = project(&mut b, &y, &format!("{a}.dense"), cfg.q_size(), h);
        let up = project(
            &mut b,
            &normed,
            &format!("{p}.mlp.fc1"),
            h,
            cfg.intermediate_size,
        );
        let up = gelu(&mut b, &up, act);
        let m = project(
            &mut b,
            &up,
            &format!("{p}.mlp.fc2"),
            cfg.intermediate_size,
            h,
        );
        // transformers' order: (attention + feed-forward) + residual.
        let branches = b.op("Add", &[&o, &m], vec![]);
        x = b.op("Add", &[&branches, &x], vec![]);
    }

    b.set_scope("model.final_layernorm");
    let normed = layer_norm(&mut b, &x, "model.final_layernorm", h, eps, dtype);
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
    if cfg.lm_head_bias {
        let y = b.op("MatMul", &[&normed, &head], vec![]);
        let bias = b.initializer(Initializer {
            name: "lm_head.bias".into(),
            dtype,
            shape: vec![cfg.vocab_size],
            source: Some(TensorSource::Checkpoint("lm_head.bias".into())),
        });
        b.op_into("Add", &[&y, &bias], vec![], "logits");
    } else {
        b.op_into("MatMul", &[&normed, &head], vec![], "logits");
    }
    b.finish()
}
