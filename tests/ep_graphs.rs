//! The graphs each built-in EP gets for the Llama-3.2-1B config (16 layers, no weights):
//! which fused ops appear and which must not.

mod common;

use common::*;
use mobius::config::ArchConfig;
use mobius::ir::{Attr, DType, Graph};
use mobius::models::build_model;
use mobius::opt::{OptimizeOptions, Role};
use mobius::rulebook::optimize;

const GQA: &str = "com.microsoft::GroupQueryAttention";
const SSLN: &str = "com.microsoft::SkipSimplifiedLayerNormalization";

fn has_input(g: &Graph, name: &str) -> bool {
    g.inputs.iter().any(|v| v.name == name)
}

fn llama_1b() -> ArchConfig {
    published("llama-3.2-1b")
}

#[test]
fn default_keeps_attention_and_fuses_skip_norm() {
    let g = optimized(&llama_1b(), "default", DType::F32);
    assert_eq!(count(&g, "Attention"), 16);
    assert_eq!(count(&g, "RotaryEmbedding"), 32);
    assert_eq!(count(&g, SSLN), 32);
    assert_eq!(count(&g, GQA), 0);
}

#[test]
fn gqa_eps_fuse_attention_with_rotary() {
    for (ep, dtype) in [
        ("cpu", DType::F32),
        ("cuda", DType::F16),
        ("webgpu", DType::F16),
    ] {
        let g = optimized(&llama_1b(), ep, dtype);
        assert_eq!(count(&g, GQA), 16, "{ep}");
        assert_eq!(count(&g, SSLN), 32, "{ep}");
        assert_eq!(
            count(&g, "Attention") + count(&g, "RotaryEmbedding"),
            0,
            "{ep}"
        );
        assert!(
            !has_input(&g, "position_ids"),
            "{ep}: position_ids has no reader left"
        );
        let gqa = g
            .nodes
            .iter()
            .find(|n| n.op_type == "GroupQueryAttention")
            .unwrap();
        assert_eq!(gqa.attrs["do_rotary"], mobius::ir::Attr::Int(1), "{ep}");
        assert!(
            gqa.inputs[1].is_empty() && gqa.inputs[2].is_empty(),
            "{ep}: packed QKV"
        );
        let packed = g
            .initializers
            .iter()
            .filter(|i| i.name.ends_with("__axis_1__concat"))
            .count();
        assert_eq!(packed, 16, "{ep}: one packed q|k|v weight per layer");
    }
}

#[test]
fn trt_rtx_gets_gqa_without_skip_norm() {
    let g = optimized(&llama_1b(), "trt-rtx", DType::F16);
    assert_eq!(count(&g, GQA), 16);
    assert!(
        g.op_counts().keys().all(|op| !op.contains("Skip")),
        "{:?}",
        g.op_counts()
    );
}

#[test]
fn dml_gets_gqa_without_fused_rotary_and_unpacked() {
    let g = optimized(&llama_1b(), "dml", DType::F16);
    assert_eq!(count(&g, GQA), 16);
    assert_eq!(count(&g, "RotaryEmbedding"), 32);
    assert_eq!(count(&g, "Attention"), 0);
    for n in g
        .nodes
        .iter()
        .filter(|n| n.op_type == "GroupQueryAttention")
    {
        assert_eq!(n.attrs["do_rotary"], mobius::ir::Attr::Int(0));
        assert!(
            n.inputs[1..3].iter().all(|i| !i.is_empty()),
            "unpacked q, k, v"
        );
    }
}

#[test]
fn onnx_standard_has_no_contrib_ops() {
    let g = optimized(&llama_1b(), "onnx-standard", DType::F32);
    assert_eq!(count(&g, "Attention"), 16);
    assert!(g.nodes.iter().all(|n| n.domain.is_empty()));
}

#[test]
fn qnn_gets_decomposed_attention_and_rotary() {
    for dtype in [DType::F32, DType::F16] {
        let g = optimized(&llama_1b(), "qnn", dtype);
        for op in ["Attention", "RotaryEmbedding", "Range"] {
            assert_eq!(count(&g, op), 0, "{dtype}: {op}");
        }
        assert!(
            g.nodes.iter().all(|n| n.domain.is_empty()),
            "{dtype}: {:?}",
            g.op_counts()
        );
        assert_eq!(count(&g, "Softmax"), 16, "{dtype}");
        assert_eq!(count(&g, "RMSNormalization"), 33, "{dtype}");
        assert!(
            has_input(&g, "position_ids"),
            "{dtype}: the rotary reads it"
        );
    }
}

#[test]
fn head_dim_8_declines_gqa_on_cuda() {
    let mut cfg = fixture_config("llama");
    cfg.num_attention_heads = 8;
    cfg.num_key_value_heads = 4;
    cfg.head_dim = 8;
    cfg.rope.rotary_dim = 8;
    let g = optimized(&cfg, "cuda", DType::F16);
    assert_eq!(count(&g, GQA), 0);
    assert_eq!(count(&g, "Attention"), 2);
    assert_eq!(count(&g, SSLN), 4);
}

#[test]
fn sliding_window_layers_carry_their_window_into_gqa() {
    let mut cfg = fixture_config("mistral");
    cfg.layer_windows = vec![Some(4), None];
    let g = optimized(&cfg, "cuda", DType::F16);
    assert_eq!(count(&g, "Attention"), 0);
    let windows: Vec<Option<&mobius::ir::Attr>> = g
        .nodes
        .iter()
        .filter(|n| n.op_type == "GroupQueryAttention")
        .map(|n| n.attrs.get("local_window_size"))
        .collect();
    assert_eq!(windows, [Some(&mobius::ir::Attr::Int(4)), None]);
}

#[test]
fn optimizing_never_raises_the_estimated_cost_and_tracing_changes_nothing() {
    let cfg = llama_1b();
    for ep in mobius::ep::builtin_eps() {
        for dtype in [DType::F32, DType::F16] {
            let portable = build_model(&cfg, dtype).unwrap();
            let opts = OptimizeOptions {
                trace: true,
                ..optimize_options(dtype, Role::Decoder)
            };
            let (traced, report) = optimize(&portable, &ep, &opts).unwrap();
            let before = report
                .cost_before
                .expect("traced runs cost the input graph");
            // Tracing only measures: an untraced run extracts the same graph.
            let untraced = OptimizeOptions {
                trace: false,
                ..opts
            };
            let (model, quiet) = optimize(&portable, &ep, &untraced).unwrap();
            assert!(
                model == traced,
                "{} {dtype}: tracing changed the graph",
                ep.name
            );
            assert_eq!(quiet.cost_before, None);
            assert_eq!(quiet.cost_after, report.cost_after);
            assert!(
                report.cost_after <= before * (1.0 + 1e-9),
                "{} {dtype}: {} → {}",
                ep.name,
                before,
                report.cost_after
            );
        }
    }
}

#[test]
fn moe_blocks_run_as_the_fused_kernel_where_it_takes_their_dtype() {
    const MOE: &str = "com.microsoft::MoE";
    for (name, layers) in [
        ("mixtral", 2),
        ("qwen2_moe", 2),
        ("qwen3_moe", 1),
        ("olmoe", 2),
        ("granitemoe", 2),
    ] {
        let cfg = fixture_config(name);
        for (ep, dtype, fused) in [
            ("cpu", DType::F32, true),
            ("cpu", DType::F16, true),
            ("cuda", DType::F16, true),
            ("cuda", DType::F32, true),
            // onnxruntime's CPU kernel, the reference here, takes f32 and f16 only.
            ("cuda", DType::BF16, false),
            ("onnx-standard", DType::F32, false),
        ] {
            let g = optimized(&cfg, ep, dtype);
            let what = format!("{name} --ep {ep} {dtype}");
            assert_eq!(count(&g, MOE), if fused { layers } else { 0 }, "{what}");
            // The routing and the stacked experts are gone with the dense block.
            assert_eq!(count(&g, "TopK"), if fused { 0 } else { layers }, "{what}");
            let stacks = g
                .initializers
                .iter()
                .filter(|i| i.name.ends_with(".weight_t") && i.name.contains(".experts."))
                .count();
            assert_eq!(stacks, if fused { 0 } else { 3 * layers }, "{what}");
            for n in g.nodes.iter().filter(|n| n.op_type == "MoE") {
                assert_eq!(n.inputs.len(), 5, "{what}");
                assert!(n.inputs[3].is_empty(), "{what}: no fc1 bias");
            }
        }
    }
}

/// The decoder graph of `cfg` in `dtype` quantized as `--quant int4` quantizes it (signed,
/// block 32), optimized for EP `ep`.
fn optimized_int4(cfg: &ArchConfig, ep: &str, dtype: DType) -> Graph {
    use mobius::ir::QuantParams;
    use mobius::passes::quantize::{quantize_graph, QuantRequest};
    let mut portable = build_model(cfg, dtype).unwrap();
    let request = QuantRequest {
        params: QuantParams::new(4, 32, true),
        exclude: Vec::new(),
        embeddings: false,
    };
    quantize_graph(&mut portable.graph, &request, false).unwrap();
    let opts = optimize_options(dtype, Role::Decoder);
    optimize(&portable, &mobius::ep::get_ep(ep).unwrap(), &opts)
        .unwrap()
        .0
        .graph
}

#[test]
fn int4_moe_blocks_that_renormalise_run_as_qmoe() {
    const QMOE: &str = "com.microsoft::QMoE";
    const MOE: &str = "com.microsoft::MoE";
    // (fixture, layers, whether its blocks renormalise their top-k weights)
    for (name, layers, renormalise) in [
        ("mixtral", 2, true),
        ("qwen3_moe", 1, true),
        ("granitemoe", 2, true),
        ("qwen2_moe", 2, false),
        ("olmoe", 2, false),
    ] {
        let cfg = fixture_config(name);
        for (ep, dtype, fused) in [
            ("cpu", DType::F32, renormalise),
            ("cpu", DType::F16, renormalise),
            ("cuda", DType::F16, renormalise),
            ("onnx-standard", DType::F32, false),
        ] {
            let g = optimized_int4(&cfg, ep, dtype);
            let what = format!("{name} --ep {ep} {dtype} --quant int4");
            assert_eq!(count(&g, QMOE), if fused { layers } else { 0 }, "{what}");
            assert_eq!(count(&g, MOE), 0, "{what}");
            // The routing is gone with the dense block; the dense block keeps it.
            assert_eq!(count(&g, "TopK"), if fused { 0 } else { layers }, "{what}");
            for n in g.nodes.iter().filter(|n| n.op_type == "QMoE") {
                assert_eq!(n.inputs.len(), 7, "{what}");
                assert!(n.inputs[4].is_empty(), "{what}: no fc1 bias");
                let attr = |a: &str| n.attrs.get(a).cloned();
                assert_eq!(attr("block_size"), Some(Attr::Int(32)), "{what}");
                assert_eq!(attr("expert_weight_bits"), Some(Attr::Int(4)), "{what}");
                assert_eq!(attr("accuracy_level"), Some(Attr::Int(0)), "{what}");
                assert_eq!(
                    attr("normalize_routing_weights"),
                    Some(Attr::Int(1)),
                    "{what}"
                );
            }
            if ep == "onnx-standard" {
                // The experts stay DequantizeLinear stacks: three per layer.
                let stacks = g
                    .nodes
                    .iter()
                    .filter(|n| n.op_type == "DequantizeLinear")
                    .filter(|n| n.inputs[0].contains(".experts."))
                    .count();
                assert_eq!(stacks, 3 * layers, "{what}");
            }
        }
    }
}

#[test]
fn sparsemixer_blocks_stay_standard_ops_on_every_ep() {
    // onnxruntime's CPU MoE ignores `use_sparse_mixer` (tests/ort/test_moe.py shows it): a
    // phimoe block keeps its two TopK picks and its stacked experts wherever MoE would run.
    let cfg = fixture_config("phimoe");
    for (ep, dtype) in [
        ("cpu", DType::F32),
        ("cpu", DType::F16),
        ("cuda", DType::F16),
        ("cuda", DType::F32),
        ("onnx-standard", DType::F32),
    ] {
        let g = optimized(&cfg, ep, dtype);
        let what = format!("phimoe --ep {ep} {dtype}");
        assert_eq!(count(&g, "com.microsoft::MoE"), 0, "{what}");
        assert_eq!(count(&g, "TopK"), 2 * 2, "{what}");
    }
}

#[test]
fn gpt_oss_sink_attention_runs_as_gqa_with_head_sink() {
    let cfg = fixture_config("gpt_oss");
    for (ep, dtype) in [
        ("cpu", DType::F32),
        ("cuda", DType::F16),
        ("webgpu", DType::F16),
    ] {
        let g = optimized(&cfg, ep, dtype);
        let gqa: Vec<_> = g
            .nodes
            .iter()
            .filter(|n| n.op_type == "GroupQueryAttention")
            .collect();
        assert_eq!(gqa.len(), 2, "{ep}: one per layer");
        assert_eq!(sink_columns(&g), 0, "{ep}: no sink attention left");
        for n in &gqa {
            assert_eq!(n.inputs.len(), 12, "{ep}: head_sink is input 11");
            assert!(!n.inputs[11].is_empty(), "{ep}: head_sink set");
            assert!(n.inputs[9].is_empty() && n.inputs[10].is_empty(), "{ep}");
            assert_eq!(n.attrs["do_rotary"], mobius::ir::Attr::Int(1), "{ep}");
        }
        let windows: Vec<_> = gqa
            .iter()
            .map(|n| n.attrs.get("local_window_size"))
            .collect();
        assert_eq!(windows, [Some(&mobius::ir::Attr::Int(4)), None], "{ep}");
    }
    // Standard ops where the EP has no GroupQueryAttention (or no fused rotary for it).
    for (ep, dtype) in [("onnx-standard", DType::F32), ("dml", DType::F16)] {
        let g = optimized(&cfg, ep, dtype);
        assert_eq!(count(&g, GQA), 0, "{ep}");
        assert_eq!(sink_columns(&g), 2, "{ep}");
    }
}

/// gpt-oss-20b's attention shapes (64 query heads, 8 kv heads of 64, window 128, YaRN) in two
/// layers: both run as GroupQueryAttention with head_sink on cuda f16.
#[test]
fn gpt_oss_20b_shapes_fuse_to_gqa() {
    let json = r#"{"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 128, "num_local_experts": 4, "num_experts_per_tok": 2,
        "vocab_size": 1000, "max_position_embeddings": 131072, "rope_theta": 150000,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 4096}}"#;
    let cfg =
        mobius::models::parse_config(json.as_bytes(), std::path::Path::new("config.json")).unwrap();
    let g = optimized(&cfg, "cuda", DType::F16);
    let windows: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| n.op_type == "GroupQueryAttention")
        .map(|n| (n.inputs.len(), n.attrs.get("local_window_size")))
        .collect();
    assert_eq!(
        windows,
        [(12, Some(&mobius::ir::Attr::Int(128))), (12, None)]
    );
    assert_eq!(sink_columns(&g), 0);
}

/// The sink columns of standard-op sink attention: Expands of a layer's `sinks`.
fn sink_columns(g: &Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.op_type == "Expand" && n.inputs[0].ends_with(".sinks"))
        .count()
}
