//! The Llama-like variants (qwen3, smollm3, granite, olmo2, phi3) on their published configs
//! (no weights): every built-in EP optimizes them, and the family-specific structure survives
//! where it must (per-head q/k norms block QKV packing but not GroupQueryAttention; NoPE
//! layers; Granite's multipliers; phi3's split fused weights; LongRoPE's table switch).

mod common;

use common::*;
use mobius::ep::builtin_eps;
use mobius::ir::DType;
use mobius::models::build_model;

const GQA: &str = "com.microsoft::GroupQueryAttention";
const CONFIGS: &[&str] = &[
    "qwen3-0.6b",
    "smollm3-3b",
    "granite-3.0-2b-instruct",
    "olmo-2-0425-1b",
    "phi-3-mini-4k-instruct",
];

#[test]
fn every_builtin_ep_optimizes_every_variant() {
    for name in CONFIGS {
        let cfg = published(name);
        for ep in builtin_eps().iter().map(|e| e.name.clone()) {
            if ep == "qnn" {
                continue; // refused until its lowering rules land (tests/ort/test_eps.py)
            }
            let g = optimized(&cfg, &ep, DType::F16);
            let attention = count(&g, "Attention") + count(&g, GQA);
            assert_eq!(attention, cfg.num_hidden_layers, "{name} --ep {ep}");
        }
    }
}

#[test]
fn qwen3_gets_gqa_but_no_qkv_packing() {
    let cfg = published("qwen3-0.6b");
    let portable = build_model(&cfg, DType::F16).unwrap().graph;
    assert_eq!(count(&portable, "RMSNormalization"), 2 * 28 + 1 + 2 * 28);
    let g = optimized(&cfg, "cuda", DType::F16);
    assert_eq!(count(&g, GQA), 28);
    // q, k, v stay three projections per layer (plus o, gate, up, down, and the LM head).
    assert_eq!(count(&g, "MatMul"), 7 * 28 + 1);
    let llama = published("llama-3.2-1b");
    let packed = optimized(&llama, "cuda", DType::F16);
    assert_eq!(
        count(&packed, "MatMul"),
        5 * 16 + 1,
        "PackQKV fires on plain Llama"
    );
}

#[test]
fn smollm3_rotates_only_in_its_rope_layers() {
    let cfg = published("smollm3-3b");
    let g = build_model(&cfg, DType::F32).unwrap().graph;
    assert_eq!(
        count(&g, "RotaryEmbedding"),
        2 * 27,
        "36 layers, every 4th NoPE"
    );
}

#[test]
fn granite_scales_embeddings_residuals_and_logits() {
    let cfg = published("granite-3.0-2b-instruct");
    let g = build_model(&cfg, DType::F32).unwrap().graph;
    // embedding + 2 residual branches per layer
    assert_eq!(count(&g, "Mul") - 2 * 40, 1 + 2 * 40);
    assert_eq!(count(&g, "Div"), 1);
    let scales: Vec<f32> = g
        .nodes
        .iter()
        .filter(|n| n.op_type == "Attention")
        .filter_map(|n| match n.attrs.get("scale") {
            Some(mobius::ir::Attr::Float(s)) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(scales, vec![0.015625; 40]);
}

#[test]
fn olmo2_norms_block_outputs_and_full_width_q_k() {
    let cfg = published("olmo-2-0425-1b");
    let g = build_model(&cfg, DType::F32).unwrap().graph;
    let norms: Vec<&str> = g
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .filter(|n| n.starts_with("model.layers.0.") && n.ends_with("norm.weight"))
        .collect();
    assert_eq!(
        norms,
        [
            "model.layers.0.self_attn.q_norm.weight",
            "model.layers.0.self_attn.k_norm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.layers.0.post_feedforward_layernorm.weight",
        ]
    );
    let q_norm = g
        .initializers
        .iter()
        .find(|i| i.name == "model.layers.0.self_attn.q_norm.weight")
        .unwrap();
    assert_eq!(q_norm.shape, vec![2048]);
}

#[test]
fn phi3_splits_fused_weights_and_keeps_its_window() {
    let cfg = published("phi-3-mini-4k-instruct");
    assert_eq!(cfg.layer_windows, vec![Some(2047); 32]);
    let g = build_model(&cfg, DType::F32).unwrap().graph;
    for part in ["q_proj", "k_proj", "v_proj"] {
        let name = format!("model.layers.0.self_attn.{part}.weight_t");
        assert!(g.initializers.iter().any(|i| i.name == name), "{name}");
    }
    assert!(g
        .initializers
        .iter()
        .any(|i| i.name == "model.layers.0.mlp.gate_proj.weight_t"));
    assert_eq!(count(&g, "MatMul"), 7 * 32 + 1);
}

#[test]
fn longrope_switches_tables_by_the_largest_position() {
    let cfg = fixture_config("phi3");
    let g = build_model(&cfg, DType::F32).unwrap().graph;
    assert_eq!(count(&g, "ReduceMax"), 1);
    assert_eq!(count(&g, "Where"), 2);
    for table in ["cos_cache", "long_cos_cache", "sin_cache", "long_sin_cache"] {
        let name = format!("model.rotary_emb.{table}");
        assert!(g.initializers.iter().any(|i| i.name == name), "{name}");
    }
}
