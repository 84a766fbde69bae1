//! GPT-2: learned positions added to the token embeddings, pre-norm layers of LayerNorm →
//! multi-head attention (no RoPE) → residual → LayerNorm → GELU MLP → residual, a final
//! LayerNorm and the LM head (tied to `wte` unless the config unties it).
//!
//! Weights are HF `Conv1D`s stored `[in, out]`, used by `MatMul` as they are; the fused
//! `c_attn` (`[H, 3H]`) is cut lazily into its q, k and v column blocks.

use super::components::{
    attention, conv1d, decoder_io, gelu, layer_norm, padding_mask, AttentionSpec, Conv1dParams,
    DecoderDims,
};
use crate::config::{ArchConfig, Gelu};
use crate::ir::{Attr, DType, Graph, GraphBuilder, Initializer, TensorSource};

/// Builds the decoder graph.
pub fn build(cfg: &ArchConfig, dtype: DType) -> Graph {
    let mut b = GraphBuilder::new("main_graph");
    let h = cfg.hidden_size;
    let eps = cfg.layer_norm_eps.unwrap_or(1e-5);
    let act = cfg.gelu.unwrap_or(Gelu::Tanh);
    let dims = DecoderDims {
        layers: cfg.num_hidden_layers,
        kv_heads: cfg.num_key_value_heads,
        head_dim: cfg.head_dim,
        vocab: cfg.vocab_size,
    };
    let io = decoder_io(&mut b, dims, dtype);

    b.set_scope("transformer.wte");
    let wte = embedding(&mut b, "transformer.wte.weight", cfg.vocab_size, h, dtype);
    let tokens = b.op(
        "Gather",
        &[&wte, &io.input_ids],
        vec![("axis", Attr::Int(0))],
    );
    b.set_scope("transformer.wpe");
    let wpe = embedding(
        &mut b,
        "transformer.wpe.weight",
        cfg.max_position_embeddings,
        h,
        dtype,
    );
    let positions = b.op(
        "Gather",
        &[&wpe, &io.position_ids],
        vec![("axis", Attr::Int(0))],
    );
    let mut x = b.op("Add", &[&tokens, &positions], vec![]);

    b.set_scope("transformer.mask");
    let mask = padding_mask(&mut b, &io.input_ids, &io.attention_mask);

    for (i, (past_k, past_v)) in io.past.iter().enumerate() {
        let p = format!("transformer.h.{i}");
        b.set_scope(&p);
        let normed = layer_norm(&mut b, &x, &format!("{p}.ln_1"), h, eps, dtype);
        let [q, k, v] = [("q_proj", 0), ("k_proj", 1), ("v_proj", 2)].map(|(name, block)| {
            let params = Conv1dParams {
                weight: format!("{p}.attn.c_attn.weight"),
                bias: format!("{p}.attn.c_attn.bias"),
                columns: Some((block * h, h, 3 * h)),
            };
            let init = format!("{p}.attn.{name}");
            conv1d(&mut b, &normed, &init, &params, h, h, dtype)
        });
        let present = (format!("present.{i}.key"), format!("present.{i}.value"));
        let spec = AttentionSpec {
            q_heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            scale: (cfg.head_dim as f32).powf(-0.5),
            mask: &mask,
            past: (past_k, past_v),
            present: (&present.0, &present.1),
        };
        let y = attention(&mut b, &q, &k, &v, &spec);
        let o = conv1d(
            &mut b,
            &y,
            &format!("{p}.attn.c_proj"),
            &whole(&format!("{p}.attn.c_proj")),
            h,
            h,
            dtype,
        );
        x = b.op("Add", &[&x, &o], vec![]);
        let normed = layer_norm(&mut b, &x, &format!("{p}.ln_2"), h, eps, dtype);
        let inner = cfg.intermediate_size;
        let fc = format!("{p}.mlp.c_fc");
        let up = conv1d(&mut b, &normed, &fc, &whole(&fc), h, inner, dtype);
        let up = gelu(&mut b, &up, act);
        let proj = format!("{p}.mlp.c_proj");
        let m = conv1d(&mut b, &up, &proj, &whole(&proj), inner, h, dtype);
        x = b.op("Add", &[&x, &m], vec![]);
    }

    b.set_scope("transformer.ln_f");
    let normed = layer_norm(&mut b, &x, "transformer.ln_f", h, eps, dtype);
    b.set_scope("lm_head");
    let head = if cfg.tie_word_embeddings {
        b.op("Transpose", &[&wte], vec![("perm", Attr::Ints(vec![1, 0]))])
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

/// A `[rows, width]` embedding table read from the checkpoint tensor `name`.
fn embedding(b: &mut GraphBuilder, name: &str, rows: usize, width: usize, dtype: DType) -> String {
    b.initializer(Initializer {
        name: name.into(),
        dtype,
        shape: vec![rows, width],
        source: Some(TensorSource::Checkpoint(name.into())),
    })
}

/// The whole `{prefix}.weight` / `{prefix}.bias` of one Conv1D.
fn whole(prefix: &str) -> Conv1dParams {
    Conv1dParams {
        weight: format!("{prefix}.weight"),
        bias: format!("{prefix}.bias"),
        columns: None,
    }
}
