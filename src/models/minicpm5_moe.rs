//! OpenBMB's MiniCPM5-MoE (`minicpm5_moe`): Llama's attention whose result is gated before
//! `o_proj` (`q_proj` yields each head's query and then its gate, `[heads, 2, head_dim]`
//! rows; the attention output is multiplied by the sigmoid of the gates), RoPE over the whole
//! head (theta 5e6), head dim 128, and DeepSeek-V3's mixture of experts ([`DeepseekMoe`]:
//! sigmoid router with `e_score_correction_bias`, group-limited top-k, renormalised, times
//! `routed_scaling_factor`, a shared expert) in the layers `mlp_layer_types` names `sparse`
//! (by default from `first_k_dense_replace`, 1, on).

use super::components::{linear, AttentionSpec};
use super::decoder::Family;
use super::deepseek::{sigmoid_router, DeepseekExperts, DeepseekMoe};
use super::family::{without_windows, FamilySpec};
use super::glm4_moe::mlp_layer_types;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, CheckpointRenaming, DecoderFields, Fields,
    HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::Result;
use serde_json::Value;

/// The family's registry entry. onnxruntime-genai 0.18 has no `minicpm5_moe` type: its
/// generic `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "minicpm5_moe",
    summary: "attention output gated by the sigmoid of a per-head gate from `q_proj`; \
              DeepSeek-V3's experts in the layers `mlp_layer_types` names",
    model_types: &[ModelType::generative("minicpm5_moe", "decoder", read)],
};

/// transformers' MiniCPM5MoeConfig: head dim 128, `attention_bias` on q (and gate), k, v and
/// o, no MLP bias, RoPE theta 5e6 over the whole head, untied, `rms_norm_eps` 1e-6.
const FIELDS: DecoderFields = DecoderFields {
    head_dim: Some(128),
    biases: Biases::Configured { mlp_bias: false },
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 5_000_000.0, f),
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    if raw.use_gated_attention == Some(false) {
        return Err(f.err(
            "use_gated_attention",
            "false (MiniCPM5-MoE's attention is always gated, as transformers requires)",
        ));
    }
    // The rotary embedding (DeepSeek-V3's) covers the whole head whatever
    // `partial_rotary_factor` says; the config class has no sliding window.
    let rope_parameters = match &raw.rope_parameters {
        Some(Value::Object(p)) => {
            let mut p = p.clone();
            p.remove("partial_rotary_factor");
            Some(Value::Object(p))
        }
        other => other.clone(),
    };
    let raw = HfConfig {
        partial_rotary_factor: None,
        rope_parameters,
        ..without_windows(raw)
    };
    read_decoder(&raw, t, f, &FIELDS, |dims| {
        let mut experts = DeepseekExperts::read(&raw, f, (160, Some(16)), 512, 1, 1)?;
        if let Some(types) = &raw.mlp_layer_types {
            experts.moe_layers = mlp_layer_types(types, dims.num_hidden_layers, f)?;
        }
        let router = sigmoid_router(&raw, f, experts.experts, (1, 1), (true, 3.66))?;
        Ok(MiniCpm5Moe {
            moe: DeepseekMoe { experts, router },
        })
    })
}

/// The name transformers gives tensor `name`: its `q_gate_proj` is the checkpoints' `q_proj`.
pub fn checkpoint_name(name: &str) -> Option<String> {
    Some(name.replace(".self_attn.q_gate_proj.", ".self_attn.q_proj."))
}

/// MiniCPM5-MoE's knobs and hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniCpm5Moe {
    /// The mixture of experts.
    pub moe: DeepseekMoe,
}

/// Half `part` (0: the queries, 1: the gates) of attention module `attn`'s `q_proj` on `x`:
/// its rows gathered per head (each head's query rows, then its gate rows) when the model is
/// saved, as `{attn}.{name}` (`q_proj`, `gate_proj`).
fn q_proj_half(
    b: &mut GraphBuilder,
    cfg: &ArchConfig,
    x: &str,
    attn: &str,
    (part, name): (usize, &str),
    dtype: DType,
) -> String {
    let (heads, d) = (cfg.num_attention_heads, cfg.head_dim);
    let rows = |tensor: &str| TensorSource::Concat {
        parts: (0..heads)
            .map(|h| TensorSource::Slice {
                source: Box::new(TensorSource::Checkpoint(format!("{attn}.q_proj.{tensor}"))),
                axis: 0,
                start: (2 * h + part) * d,
                len: d,
                total: 2 * heads * d,
            })
            .collect(),
        axis: 0,
    };
    let prefix = format!("{attn}.{name}");
    let w = b.initializer(Initializer {
        name: format!("{prefix}.weight_t"),
        dtype,
        shape: vec![cfg.hidden_size, heads * d],
        source: Some(TensorSource::Transpose(Box::new(rows("weight")))),
    });
    let y = b.op("MatMul", &[x, &w], vec![]);
    if !cfg.qkv_bias {
        return y;
    }
    let bias = b.initializer(Initializer {
        name: format!("{prefix}.bias"),
        dtype,
        shape: vec![heads * d],
        source: Some(rows("bias")),
    });
    b.op("Add", &[&y, &bias], vec![])
}

impl Family for MiniCpm5Moe {
    fn checkpoint_renaming(&self) -> Option<CheckpointRenaming> {
        Some(checkpoint_name)
    }

    fn qkv(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        attn: &str,
        dtype: DType,
    ) -> [String; 3] {
        let (h, kv, bias) = (cfg.hidden_size, cfg.kv_size(), cfg.qkv_bias);
        [
            q_proj_half(b, cfg, x, attn, (0, "q_proj"), dtype),
            linear(b, x, &format!("{attn}.k_proj"), h, kv, bias, dtype),
            linear(b, x, &format!("{attn}.v_proj"), h, kv, bias, dtype),
        ]
    }

    /// `o_proj` of the attention result times the sigmoid of the gates.
    fn attention_output(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        y: &str,
        attn: &str,
        _spec: &AttentionSpec<'_>,
        dtype: DType,
    ) -> String {
        let gate = q_proj_half(b, cfg, x, attn, (1, "gate_proj"), dtype);
        let gate = b.op("Sigmoid", &[&gate], vec![]);
        let y = b.op("Mul", &[y, &gate], vec![]);
        self.o_proj(b, cfg, &y, attn, dtype)
    }

    fn layer_mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        layer: &str,
        i: usize,
        dtype: DType,
    ) -> String {
        let dense = |b: &mut GraphBuilder, mlp: &str| self.mlp(b, cfg, x, mlp, dtype);
        self.moe.layer(b, cfg, x, layer, i, dtype, dense)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#""model_type": "minicpm5_moe", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 3,
        "vocab_size": 300, "max_position_embeddings": 128"#;

    #[test]
    fn minicpm5_moe_reads_its_defaults() {
        let extra = r#", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
            "partial_rotary_factor": 0.5}, "first_k_dense_replace": 2"#;
        let c = crate::models::parse_fields(BASE, extra).unwrap();
        let k = c.knobs::<MiniCpm5Moe>().unwrap();
        assert_eq!(
            (c.head_dim, c.rope.rotary_dim, c.rope.theta),
            (128, 128, 1e4)
        );
        assert_eq!(c.num_key_value_heads, 4);
        let e = &k.moe.experts;
        assert_eq!((e.experts, e.top_k, e.width, e.shared), (160, 16, 512, 1));
        assert_eq!(e.moe_layers, [false, false, true]);
        assert_eq!((k.moe.router.scale, k.moe.router.groups), (3.66, 1));
        let c = crate::models::parse_fields(BASE, "").unwrap();
        assert_eq!(c.rope.theta, 5e6);
    }

    #[test]
    fn minicpm5_moe_reads_mlp_layer_types_and_refuses_ungated_attention() {
        let types = r#", "mlp_layer_types": ["sparse", "dense", "sparse"]"#;
        let c = crate::models::parse_fields(BASE, types).unwrap();
        let k = c.knobs::<MiniCpm5Moe>().unwrap();
        assert_eq!(k.moe.experts.moe_layers, [true, false, true]);
        let err = crate::models::parse_fields(BASE, r#", "use_gated_attention": false"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("use_gated_attention"), "{err}");
        assert_eq!(
            checkpoint_name("model.layers.0.self_attn.q_gate_proj.weight").as_deref(),
            Some("model.layers.0.self_attn.q_proj.weight")
        );
    }
}
