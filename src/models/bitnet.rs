//! BitNet b1.58 (Microsoft, transformers' BitNetForCausalLM, unquantized weights): the Llama
//! decoder with an RMSNorm on the attention output before `o_proj` (`self_attn.attn_sub_norm`)
//! and a gated squared-ReLU MLP normalised before `down_proj`,
//! `down_proj(ffn_sub_norm(relu(gate_proj(x))² · up_proj(x)))`, without MLP biases.

use super::components::linear;
use super::decoder::Family;
use super::family::{without_windows, FamilySpec};
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, ModelType,
};
use crate::ir::{DType, GraphBuilder};
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `bitnet` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "bitnet",
    summary: "Llama with RMSNorms before `o_proj` and `down_proj`, gated squared-ReLU MLP \
              (unquantized checkpoints)",
    model_types: &[ModelType::generative("bitnet", "decoder", read)],
};

/// transformers' BitNetConfig: `attention_bias` on q, k, v and o, no MLP bias, RoPE theta 5e5,
/// `rms_norm_eps` 1e-5, untied; the activation is read below.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    silu_mlp: false,
    rope: |raw, head_dim, f| read_rope(raw, head_dim, 500_000.0, f),
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("relu2");
    if act != "relu2" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for bitnet (expected \"relu2\")"),
        ));
    }
    // BitNetConfig has no sliding window or layer types.
    read_decoder(&without_windows(raw), t, f, &FIELDS, |_| Ok(BitNet))
}

/// BitNet's hooks: the two sub-norms and the squared-ReLU gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitNet;

impl Family for BitNet {
    /// `o_proj(attn_sub_norm(y))`.
    fn o_proj(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        y: &str,
        attn: &str,
        dtype: DType,
    ) -> String {
        let (q, h) = (cfg.q_size(), cfg.hidden_size);
        let sub = format!("{attn}.attn_sub_norm");
        let normed = self.norm(cfg).apply(b, y, &sub, q, dtype);
        linear(
            b,
            &normed,
            &format!("{attn}.o_proj"),
            q,
            h,
            cfg.o_bias,
            dtype,
        )
    }

    /// `down_proj(ffn_sub_norm(relu(gate_proj(x))² · up_proj(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let gate = linear(b, x, &format!("{mlp}.gate_proj"), h, inner, false, dtype);
        let relu = b.op("Relu", &[&gate], vec![]);
        let gate = b.op("Mul", &[&relu, &relu], vec![]);
        let up = linear(b, x, &format!("{mlp}.up_proj"), h, inner, false, dtype);
        let prod = b.op("Mul", &[&gate, &up], vec![]);
        let sub = format!("{mlp}.ffn_sub_norm");
        let normed = self.norm(cfg).apply(b, &prod, &sub, inner, dtype);
        linear(
            b,
            &normed,
            &format!("{mlp}.down_proj"),
            inner,
            h,
            false,
            dtype,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("bitnet", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "mlp_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!((cfg.rms_norm_eps, cfg.rope.theta), (1e-5, 5e5));
        assert!(!cfg.mlp_bias && !cfg.qkv_bias && !cfg.tie_word_embeddings);
        assert_eq!(cfg.layer_windows, [None, None]);
        let biased = parse(r#", "attention_bias": true"#).unwrap();
        assert!(biased.qkv_bias && biased.o_bias);
        let err = parse(r#", "hidden_act": "silu""#).unwrap_err().to_string();
        assert!(err.contains("hidden_act") && err.contains("relu2"), "{err}");
    }
}
