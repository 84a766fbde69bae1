//! Apertus (Swiss AI, transformers' ApertusForCausalLM): the Llama decoder with per-head
//! RMSNorm of q and k before RoPE (as Qwen3), its two norms named `attention_layernorm` and
//! `feedforward_layernorm`, and an ungated MLP `down_proj(xielu(up_proj(x)))` without biases.
//! xIELU has learned scalars per layer (`act_fn.alpha_p`, `act_fn.alpha_n`, and the buffers
//! `act_fn.beta`, `act_fn.eps`, all read from the checkpoint):
//! `x > 0 ? a_p·x² + β·x : (expm1(min(x, ε)) − x)·a_n + β·x`, with `a_p = softplus(alpha_p)`
//! and `a_n = β + softplus(alpha_n)`. RoPE defaults to llama3 scaling with theta 1.2e7.
//! Apertus 1.5's text decoder (`apertus1p5_text`) is Apertus with a vocabulary of 266752 by
//! default and an LM head that `output_vocab_size` may prune to the first ids: its logits are
//! that narrower width.

use serde_json::json;

use super::components::{linear, scalar};
use super::decoder::{Family, LayerNorms, QkNorm};
use super::family::{without_windows, FamilySpec};
use crate::config::ModelType;
use crate::config::{
    read_decoder, read_rope, ArchConfig, Biases, DecoderFields, Fields, HfConfig, Rope,
};
use crate::ir::{DType, GraphBuilder, Initializer, TensorSource};
use crate::limits::config::MAX_VOCAB;
use crate::Result;

/// The family's registry entry. onnxruntime-genai 0.18 has no `apertus` type: its generic
/// `decoder` runs the graph.
pub static FAMILY: FamilySpec = FamilySpec {
    name: "apertus",
    summary: "Llama with per-head q/k RMSNorm and an ungated xIELU MLP (learned scalars per \
              layer), llama3 RoPE with theta 1.2e7 by default; apertus1p5_text: an LM head \
              pruned to `output_vocab_size` ids (narrower logits)",
    model_types: &[
        ModelType::generative("apertus", "decoder", read),
        ModelType::generative("apertus1p5_text", "decoder", read_1p5),
    ],
};

/// transformers' ApertusConfig: `attention_bias` on q, k, v and o, no MLP bias, xIELU (read
/// below), `rms_norm_eps` 1e-5, untied.
const FIELDS: DecoderFields = DecoderFields {
    biases: Biases::Configured { mlp_bias: false },
    silu_mlp: false,
    rope,
    rms_norm_eps: 1e-5,
    ..DecoderFields::LLAMA
};

/// ApertusConfig's RoPE theta.
const THETA: f64 = 12_000_000.0;

/// `rope_parameters` (v5) or `rope_scaling` (v4) as given, theta 1.2e7 by default; without
/// either, transformers 5 uses its llama3 default (factor 8 over 8192 positions) whatever
/// `rope_theta` says, so another `rope_theta` alone is refused as ambiguous.
fn rope(raw: &HfConfig, head_dim: usize, f: &Fields<'_>) -> Result<Rope> {
    let given = |v: &Option<serde_json::Value>| matches!(v, Some(serde_json::Value::Object(_)));
    if given(&raw.rope_parameters) || given(&raw.rope_scaling) {
        return read_rope(raw, head_dim, THETA, f);
    }
    if let Some(theta) = raw.rope_theta.filter(|&t| t != THETA) {
        return Err(f.err(
            "rope_theta",
            &format!(
                "{theta} without rope_scaling is ambiguous (transformers 5 then uses \
                 ApertusConfig's llama3 RoPE with theta {THETA}): write rope_parameters"
            ),
        ));
    }
    let default = HfConfig {
        rope_parameters: Some(json!({
            "rope_type": "llama3", "rope_theta": THETA, "factor": 8.0,
            "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0
        })),
        ..raw.clone()
    };
    read_rope(&default, head_dim, THETA, f)
}

fn read(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    read_apertus(raw, t, f, None)
}

/// transformers' Apertus1p5TextConfig: ApertusConfig's with a vocabulary of 266752 and
/// `output_vocab_size` (1..=vocab_size; null, absent or `vocab_size` → unpruned). A pruned head
/// is its own matrix: tied to the (wider) embeddings it is refused.
fn read_1p5(raw: &HfConfig, t: &'static ModelType, f: &Fields<'_>) -> Result<ArchConfig> {
    let raw = HfConfig {
        vocab_size: raw.vocab_size.or(Some(266_752)),
        ..raw.clone()
    };
    let vocab = f.positive("vocab_size", raw.vocab_size, MAX_VOCAB)?;
    let output = match raw.output_vocab_size {
        Some(n) if n < 1 || n as u64 > vocab as u64 => {
            return Err(f.err(
                "output_vocab_size",
                &format!("{n} (expected 1..={vocab}, vocab_size)"),
            ))
        }
        Some(n) if n as usize != vocab => Some(n as usize),
        _ => None,
    };
    let cfg = read_apertus(&raw, t, f, output)?;
    if output.is_some() && cfg.tie_word_embeddings {
        return Err(f.err(
            "tie_word_embeddings",
            "true with a pruned head (output_vocab_size below vocab_size): the head cannot be \
             the embedding matrix",
        ));
    }
    Ok(cfg)
}

/// Reads an Apertus config; `output_vocab_size` is the pruned head's width, if any.
fn read_apertus(
    raw: &HfConfig,
    t: &'static ModelType,
    f: &Fields<'_>,
    output_vocab_size: Option<usize>,
) -> Result<ArchConfig> {
    let act = raw.hidden_act.as_deref().unwrap_or("xielu");
    if act != "xielu" {
        return Err(f.err(
            "hidden_act",
            &format!("`{act}` is not supported for apertus (expected \"xielu\")"),
        ));
    }
    // ApertusConfig has no sliding window or layer types.
    let raw = without_windows(raw);
    let cfg = read_decoder(&raw, t, f, &FIELDS, |_| Ok(Apertus { output_vocab_size }))?;
    if cfg.rope.rotary_dim != cfg.head_dim {
        return Err(f.err(
            "partial_rotary_factor",
            &format!(
                "rotates {} of {} channels per head (Apertus rotates whole heads)",
                cfg.rope.rotary_dim, cfg.head_dim
            ),
        ));
    }
    Ok(cfg)
}

/// Apertus's hooks: norm names, per-head q/k norms, the xIELU MLP and the head's width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apertus {
    /// Apertus 1.5's `output_vocab_size` where it prunes the head (`None`: the vocabulary).
    pub output_vocab_size: Option<usize>,
}

impl Family for Apertus {
    fn logits_width(&self, cfg: &ArchConfig) -> usize {
        self.output_vocab_size.unwrap_or(cfg.vocab_size)
    }

    fn layer_norms(&self) -> LayerNorms {
        LayerNorms {
            pre_attention: Some("attention_layernorm"),
            pre_mlp: Some("feedforward_layernorm"),
            ..LayerNorms::PRE
        }
    }

    fn qk_norm_kind(&self, _cfg: &ArchConfig) -> QkNorm {
        QkNorm::PerHead
    }

    /// `down_proj(xielu(up_proj(x)))`.
    fn mlp(
        &self,
        b: &mut GraphBuilder,
        cfg: &ArchConfig,
        x: &str,
        mlp: &str,
        dtype: DType,
    ) -> String {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let up = linear(b, x, &format!("{mlp}.up_proj"), h, i, false, dtype);
        let act = xielu(b, &up, &format!("{mlp}.act_fn"), dtype);
        linear(b, &act, &format!("{mlp}.down_proj"), i, h, false, dtype)
    }
}

/// xIELU of `x` with the scalars of module `act` (`{act}.alpha_p`, `.alpha_n` `[1]`, `.beta`,
/// `.eps` `[]`), in the graph's ops (both branches computed, `Where` picks).
fn xielu(b: &mut GraphBuilder, x: &str, act: &str, dtype: DType) -> String {
    let mut param = |name: &str, shape: Vec<usize>| {
        let name = format!("{act}.{name}");
        b.initializer(Initializer {
            name: name.clone(),
            dtype,
            shape,
            source: Some(TensorSource::Checkpoint(name)),
        })
    };
    let (alpha_p, alpha_n) = (param("alpha_p", vec![1]), param("alpha_n", vec![1]));
    let (beta, eps) = (param("beta", vec![]), param("eps", vec![]));
    let one = scalar(b, 1.0, dtype);
    let a_p = softplus(b, &alpha_p, &one, dtype);
    let sp_n = softplus(b, &alpha_n, &one, dtype);
    let a_n = b.op("Add", &[&beta, &sp_n], vec![]);
    let bx = b.op("Mul", &[&beta, x], vec![]);
    // x > 0: a_p·x·x + β·x
    let ax = b.op("Mul", &[&a_p, x], vec![]);
    let axx = b.op("Mul", &[&ax, x], vec![]);
    let pos = b.op("Add", &[&axx, &bx], vec![]);
    // else: (exp(min(x, ε)) − 1 − x)·a_n + β·x
    let clamped = b.op("Min", &[x, &eps], vec![]);
    let e = b.op("Exp", &[&clamped], vec![]);
    let em1 = b.op("Sub", &[&e, &one], vec![]);
    let d = b.op("Sub", &[&em1, x], vec![]);
    let dn = b.op("Mul", &[&d, &a_n], vec![]);
    let neg = b.op("Add", &[&dn, &bx], vec![]);
    let zero = scalar(b, 0.0, dtype);
    let positive = b.op("Greater", &[x, &zero], vec![]);
    b.op("Where", &[&positive, &pos, &neg], vec![])
}

/// `softplus(a) = max(a, 0) + log(1 + exp(−|a|))`, which never overflows.
fn softplus(b: &mut GraphBuilder, a: &str, one: &str, dtype: DType) -> String {
    let zero = scalar(b, 0.0, dtype);
    let relu = b.op("Max", &[a, &zero], vec![]);
    let abs = b.op("Abs", &[a], vec![]);
    let neg = b.op("Neg", &[&abs], vec![]);
    let e = b.op("Exp", &[&neg], vec![]);
    let e1 = b.op("Add", &[&e, one], vec![]);
    let log = b.op("Log", &[&e1], vec![]);
    b.op("Add", &[&relu, &log], vec![])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeScaling;

    fn parse(extra: &str) -> crate::Result<ArchConfig> {
        crate::models::tiny_config("apertus", extra)
    }

    #[test]
    fn reads_transformers_defaults() {
        let cfg = parse(r#", "mlp_bias": true, "sliding_window": 4"#).unwrap();
        assert_eq!(cfg.rope.theta, 1.2e7);
        assert!(matches!(
            cfg.rope.scaling,
            RopeScaling::Llama3 { factor, original_max_position_embeddings, .. }
                if factor == 8.0 && original_max_position_embeddings == 8192.0
        ));
        assert_eq!((cfg.rms_norm_eps, cfg.head_dim), (1e-5, 16));
        assert_eq!(cfg.layer_windows, [None, None]);
        assert!(!cfg.qkv_bias && !cfg.o_bias && !cfg.mlp_bias && !cfg.tie_word_embeddings);
        let biased = parse(r#", "attention_bias": true, "rope_theta": 1.2e7"#).unwrap();
        assert!(biased.qkv_bias && biased.o_bias && !biased.mlp_bias);
        let v4 =
            parse(r#", "rope_theta": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 2}"#)
                .unwrap();
        assert_eq!(v4.rope.theta, 1e4);
        assert_eq!(v4.rope.scaling, RopeScaling::Linear { factor: 2.0 });
        let v5 = parse(r#", "rope_parameters": {"rope_type": "default"}"#).unwrap();
        assert_eq!(
            (v5.rope.theta, &v5.rope.scaling),
            (1.2e7, &RopeScaling::Default)
        );
    }

    #[test]
    fn apertus1p5_prunes_its_head_to_output_vocab_size() {
        let width = |extra: &str| {
            let cfg = crate::models::tiny_config("apertus1p5_text", extra)?;
            let k = *cfg.knobs::<Apertus>().unwrap();
            Ok::<_, crate::Error>((k.output_vocab_size, k.logits_width(&cfg)))
        };
        assert_eq!(
            width(r#", "output_vocab_size": 200"#).unwrap(),
            (Some(200), 200)
        );
        assert_eq!(width(r#", "output_vocab_size": 300"#).unwrap(), (None, 300));
        assert_eq!(
            width(r#", "output_vocab_size": null"#).unwrap(),
            (None, 300)
        );
        for extra in [
            r#", "output_vocab_size": 0"#,
            r#", "output_vocab_size": 301"#,
            r#", "output_vocab_size": 200, "tie_word_embeddings": true"#,
        ] {
            let err = width(extra).unwrap_err().to_string();
            assert!(
                err.contains("output_vocab_size") || err.contains("tie_word"),
                "{err}"
            );
        }
        let cfg = crate::models::parse_fields(
            r#""model_type": "apertus1p5_text", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 128"#,
            "",
        )
        .unwrap();
        assert_eq!(cfg.vocab_size, 266_752);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, want) in [
            (r#", "hidden_act": "silu""#, "hidden_act"),
            (r#", "rope_theta": 1e4"#, "rope_theta"),
            (
                r#", "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}"#,
                "partial_rotary_factor",
            ),
            (r#", "rms_norm_eps": -1"#, "rms_norm_eps"),
        ] {
            let err = parse(extra).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("config.json"),
                "{extra}: {err}"
            );
        }
    }
}
