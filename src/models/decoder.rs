//! The Llama-like decoder skeleton shared by llama, mistral, qwen2, qwen3, smollm3, granite,
//! olmo2 and phi3: embedding → layers of attention (RoPE) and a SiLU-gated MLP with residual
//! adds → final RMSNorm → LM head. Each family changes only what its [`Family`] hooks say.
//!
//! Graph contract (spec §1.2): inputs `input_ids`, `attention_mask`, `position_ids`,
//! `past_key_values.{i}.{key,value}`; outputs `logits`, `present.{i}.{key,value}`.

use std::collections::BTreeMap;

use super::components::{
    attention, linear, padding_mask, rms_norm, rope_tables, rotary_embedding, sliding_window_mask,
    swiglu_mlp, AttentionSpec, RopeTables,
};
use crate::config::ArchConfig;
use crate::ir::{
    Attr, DType, Dim, Graph, GraphBuilder, Initializer, Shape, TensorData, TensorSource,
};

/// Symbolic dims, spelled as the peer spells them (onnxruntime-genai and tooling rely on it).
pub(super) const BATCH: &str = "batch";
pub(super) const SEQ: &str = "sequence_len";
pub(super) const MASK_LEN: &str = "past_seq_len + seq_len";
pub(super) const PAST: &str = "past_sequence_len";
pub(super) const TOTAL: &str = "past_sequence_len + sequence_len";

/// Where a layer normalises: before each block (Llama) or on each block's output (OLMo 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NormPlacement {
    /// `x + f(norm(x))` with `input_layernorm` and `post_attention_layernorm`.
    Pre,
    /// `x + norm(f(x))` with `post_attention_layernorm` and `post_feedforward_layernorm`.
    Post,
}

/// The graph values every layer reads.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `input_ids` `[B, S]`.
    pub input_ids: String,
    /// `attention_mask` `[B, T]`.
    pub attention_mask: String,
    /// `position_ids` `[B, S]`.
    pub position_ids: String,
}

/// What a family changes in the decoder; every default is Llama's.
pub trait Family {
    /// Token embeddings from the gathered rows `x`.
    fn embed(&self, _b: &mut GraphBuilder, _cfg: &ArchConfig, x: String, _dtype: DType) -> String {
        x
    }

    /// The rotary cos/sin of the current tokens (computed once per graph).
    fn rotary(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        inputs: &Inputs,
        dtype: DType,
    ) -> RopeTables {
        plain_rotary(b, cfg, inputs, dtype)
    }

    /// The q, k and v projections of `x` in layer prefix `attn` (`model.layers.{i}.self_attn`).
    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let h = cfg.hidden_size;
        let mut proj = |name: &str, width: usize| {
            let prefix = format!("{attn}.{name}");
            linear(b, x, &prefix, h, width, cfg.qkv_bias, dtype)
        };
        [
            proj("q_proj", cfg.q_size()),
            proj("k_proj", cfg.kv_size()),
            proj("v_proj", cfg.kv_size()),
        ]
    }

    /// Normalisation of the projected q and k, before RoPE.
    fn qk_norm(
        &self,
        _b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        q: String,
        k: String,
        _attn: &str,
        _dtype: DType,
    ) -> (String, String) {
        (q, k)
    }

    /// Whether layer `i` applies RoPE.
    fn layer_uses_rope(&self, _cfg: &ArchConfig, _i: usize) -> bool {
        true
    }

    /// The attention softmax scale.
    fn attention_scale(&self, cfg: &ArchConfig) -> f32 {
        (cfg.head_dim as f32).powf(-0.5)
    }

    /// The MLP of layer prefix `mlp` (`model.layers.{i}.mlp`).
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        swiglu_mlp(b, x, mlp, h, i, cfg.mlp_bias, dtype)
    }

    /// A block output `y` as it enters the residual add.
    fn residual_branch(
        &self,
        _b: &mut GraphBuilder,
        _cfg: &ArchConfig,
        y: String,
        _dtype: DType,
    ) -> String {
        y
    }

    /// Where the layer norms sit.
    fn norm_placement(&self) -> NormPlacement {
        NormPlacement::Pre
    }

    /// Writes the graph output `logits` from the LM head's product `x @ head`.
    fn logits(&self, b: &mut GraphBuilder, _cfg: &ArchConfig, x: &str, head: &str, _dtype: DType) {
        b.op_into("MatMul", &[x, head], vec![], "logits");
    }
}

/// The plain RoPE tables of `cfg.rope`, gathered by `position_ids`.
pub fn plain_rotary(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    inputs: &Inputs,
    dtype: DType,
) -> RopeTables {
    rope_tables(
        b,
        &cfg.rope,
        cfg.max_position_embeddings,
        &inputs.position_ids,
        dtype,
    )
}

/// A scalar constant of `dtype` (f32, f16 or bf16).
pub fn scalar(b: &mut GraphBuilder, value: f32, dtype: DType) -> String {
    let mut bytes = Vec::new();
    crate::weights::convert::convert_into(&value.to_le_bytes(), DType::F32, dtype, &mut bytes);
    b.constant(TensorData {
        dtype,
        shape: vec![],
        bytes,
    })
}

/// Builds the decoder graph of `cfg` with the hooks of `family`.
pub fn build(cfg: &ArchConfig, dtype: DType, family: &dyn Family) -> Graph {
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
    let inputs = Inputs {
        input_ids,
        attention_mask,
        position_ids,
    };

    b.set_scope("model.embed_tokens");
    let embed = b.initializer(Initializer {
        name: "model.embed_tokens.weight".into(),
        dtype,
        shape: vec![cfg.vocab_size, h],
        source: Some(TensorSource::Checkpoint("model.embed_tokens.weight".into())),
    });
    let gathered = b.op(
        "Gather",
        &[&embed, &inputs.input_ids],
        vec![("axis", Attr::Int(0))],
    );
    let mut x = family.embed(&mut b, cfg, gathered, dtype);

    b.set_scope("model.rotary_emb");
    let rotary = family.rotary(&mut b, cfg, &inputs, dtype);

    b.set_scope("model.mask");
    let masks = masks(&mut b, cfg, &inputs);

    let norm = |b: &mut GraphBuilder, x: &str, name: &str| {
        rms_norm(b, x, name, h, cfg.rms_norm_eps, dtype)
    };
    for (i, (past_k, past_v)) in past.iter().enumerate() {
        let p = format!("model.layers.{i}");
        b.set_scope(&p);
        let placement = family.norm_placement();
        let attn_in = match placement {
            NormPlacement::Pre => norm(&mut b, &x, &format!("{p}.input_layernorm.weight")),
            NormPlacement::Post => x.clone(),
        };
        let a = format!("{p}.self_attn");
        let [q, k, v] = family.qkv(&mut b, cfg, &attn_in, &a, dtype);
        let (mut q, mut k) = family.qk_norm(&mut b, cfg, q, k, &a, dtype);
        if family.layer_uses_rope(cfg, i) {
            let r = &rotary;
            q = rotary_embedding(&mut b, &q, r, &cfg.rope, cfg.num_attention_heads, d);
            k = rotary_embedding(&mut b, &k, r, &cfg.rope, kv, d);
        }
        let present = (format!("present.{i}.key"), format!("present.{i}.value"));
        let spec = AttentionSpec {
            q_heads: cfg.num_attention_heads,
            kv_heads: kv,
            scale: family.attention_scale(cfg),
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
        let o = match placement {
            NormPlacement::Pre => o,
            NormPlacement::Post => {
                norm(&mut b, &o, &format!("{p}.post_attention_layernorm.weight"))
            }
        };
        let o = family.residual_branch(&mut b, cfg, o, dtype);
        x = b.op("Add", &[&x, &o], vec![]);
        let mlp_in = match placement {
            NormPlacement::Pre => norm(&mut b, &x, &format!("{p}.post_attention_layernorm.weight")),
            NormPlacement::Post => x.clone(),
        };
        let m = family.mlp(&mut b, cfg, &mlp_in, &format!("{p}.mlp"), dtype);
        let m = match placement {
            NormPlacement::Pre => m,
            NormPlacement::Post => norm(
                &mut b,
                &m,
                &format!("{p}.post_feedforward_layernorm.weight"),
            ),
        };
        let m = family.residual_branch(&mut b, cfg, m, dtype);
        x = b.op("Add", &[&x, &m], vec![]);
    }

    b.set_scope("model.norm");
    let normed = norm(&mut b, &x, "model.norm.weight");
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
    family.logits(&mut b, cfg, &normed, &head, dtype);
    b.finish()
}

/// The padding mask and one sliding-window mask per distinct window, keyed by window.
fn masks(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    inputs: &Inputs,
) -> BTreeMap<Option<usize>, String> {
    let full = padding_mask(b, &inputs.input_ids, &inputs.attention_mask);
    let mut masks = BTreeMap::from([(None, full.clone())]);
    for window in cfg.layer_windows.iter().flatten() {
        if let std::collections::btree_map::Entry::Vacant(slot) = masks.entry(Some(*window)) {
            slot.insert(sliding_window_mask(
                b,
                &full,
                &inputs.input_ids,
                &inputs.attention_mask,
                *window,
            ));
        }
    }
    masks
}
