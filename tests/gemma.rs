//! The Gemma family (gemma, gemma2, gemma3_text): config parsing in transformers v4 and v5
//! spellings, bad input, and the portable and optimized graphs of the published configs.

mod common;

use common::*;
use mobius::config::{Gelu, RopeScaling};
use mobius::ir::{Attr, DType, Graph};
use mobius::models::build_model;
use mobius::models::gemma::{GemmaConfig, GemmaVersion};

/// The `softcap` and `scale` attributes of every standard Attention node, in graph order.
fn attention_attrs(g: &Graph) -> Vec<(f32, f32)> {
    g.nodes
        .iter()
        .filter(|n| n.domain.is_empty() && n.op_type == "Attention")
        .map(|n| match (&n.attrs["softcap"], &n.attrs["scale"]) {
            (Attr::Float(c), Attr::Float(s)) => (*c, *s),
            other => panic!("Attention attributes {other:?}"),
        })
        .collect()
}

const GEMMA3_V4: &str = r#"{
  "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "num_hidden_layers": 4, "vocab_size": 300, "max_position_embeddings": 128,
  "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "torch_dtype": "float32",
  "query_pre_attn_scalar": 32, "sliding_window": 6, "sliding_window_pattern": 2,
  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
  "rope_scaling": {"rope_type": "linear", "factor": 8.0},
  "attn_logit_softcapping": null, "final_logit_softcapping": null
}"#;

const GEMMA3_V5: &str = r#"{
  "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "num_hidden_layers": 4, "vocab_size": 300, "max_position_embeddings": 128,
  "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "dtype": "float32",
  "query_pre_attn_scalar": 32, "sliding_window": 6,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
  "rope_parameters": {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}
  },
  "attn_logit_softcapping": null, "final_logit_softcapping": null
}"#;

#[test]
fn gemma3_v4_and_v5_spellings_normalise_to_the_same_config() {
    let (a, b) = (
        parse_config(GEMMA3_V4).unwrap(),
        parse_config(GEMMA3_V5).unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(a.layer_windows, vec![Some(6), None, Some(6), None]);
    assert_eq!(a.rope.theta, 1e6);
    assert_eq!(a.rope.scaling, RopeScaling::Linear { factor: 8.0 });
    let g = a.knobs::<GemmaConfig>().unwrap();
    assert_eq!(g.version, GemmaVersion::Gemma3);
    let local = g.local_rope.as_ref().unwrap();
    assert_eq!((local.theta, &local.scaling), (1e4, &RopeScaling::Default));
    assert_eq!(g.attn_scale, 32f32.powf(-0.5));
    assert_eq!((g.attn_softcap, g.final_softcap), (None, None));
    assert_eq!(g.embed_scale, 8.0);
    assert!(a.tie_word_embeddings, "Gemma ties by default");
}

#[test]
fn published_configs_parse_with_transformers_defaults() {
    let g1 = published("gemma-2b");
    let k1 = g1.knobs::<GemmaConfig>().unwrap();
    assert_eq!(k1.version, GemmaVersion::Gemma1);
    // Gemma 1's legacy hidden_act "gelu" is the tanh approximation (transformers rewrites it).
    assert_eq!(k1.gelu, Gelu::Tanh);
    assert_eq!(k1.attn_scale, 256f32.powf(-0.5));
    assert!(g1.tie_word_embeddings);
    assert!(g1.layer_windows.iter().all(Option::is_none));

    let g2 = published("gemma-2-2b");
    let k2 = g2.knobs::<GemmaConfig>().unwrap();
    assert_eq!(
        (k2.attn_softcap, k2.final_softcap),
        (Some(50.0), Some(30.0))
    );
    // v4 Gemma 2 alternates, starting with a sliding layer.
    assert_eq!(g2.layer_windows[..4], [Some(4096), None, Some(4096), None]);
    assert_eq!(k2.embed_scale, (2304f32).sqrt());

    let g3 = published("gemma-3-1b-it");
    let k3 = g3.knobs::<GemmaConfig>().unwrap();
    let full: Vec<usize> = (0..26).filter(|&i| g3.layer_windows[i].is_none()).collect();
    assert_eq!(full, vec![5, 11, 17, 23], "every 6th layer is global");
    assert_eq!(g3.rope.theta, 1e6);
    assert_eq!(k3.local_rope.as_ref().unwrap().theta, 1e4);
    assert_eq!(g3.eos_token_ids, vec![1, 106]);
}

#[test]
fn gemma2_softcap_defaults_differ_for_absent_and_null_fields() {
    let base = r#""model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 300,
        "max_position_embeddings": 128"#;
    let absent = parse_config(&format!("{{{base}}}")).unwrap();
    let k = absent.knobs::<GemmaConfig>().unwrap();
    assert_eq!((k.attn_softcap, k.final_softcap), (Some(50.0), Some(30.0)));
    assert_eq!(
        k.attn_scale,
        256f32.powf(-0.5),
        "query_pre_attn_scalar default"
    );
    let null = parse_config(&format!(
        r#"{{{base}, "attn_logit_softcapping": null, "final_logit_softcapping": null,
            "hidden_activation": "gelu"}}"#
    ))
    .unwrap();
    let k = null.knobs::<GemmaConfig>().unwrap();
    assert_eq!((k.attn_softcap, k.final_softcap), (None, None));
    assert_eq!(k.gelu, Gelu::Exact, "Gemma 2's gelu is exact");
}

#[test]
fn bad_gemma_fields_are_named() {
    let cases = [
        (r#""hidden_activation": "relu""#, "hidden_activation"),
        (
            r#""attn_logit_softcapping": -1.0"#,
            "attn_logit_softcapping",
        ),
        (
            r#""final_logit_softcapping": "big""#,
            "final_logit_softcapping",
        ),
        (r#""query_pre_attn_scalar": 0"#, "query_pre_attn_scalar"),
        (r#""attention_bias": true"#, "attention_bias"),
        (
            r#""use_bidirectional_attention": true"#,
            "use_bidirectional_attention",
        ),
        (
            r#""rope_parameters": {"full_attention": {"rope_type": "ntk-by-parts"}}"#,
            "rope_parameters.full_attention.rope_type",
        ),
        (
            r#""rope_parameters": {"sliding_attention": 3}"#,
            "rope_parameters.sliding_attention",
        ),
    ];
    for (field_json, field) in cases {
        let json = format!(
            r#"{{"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
                "num_attention_heads": 4, "head_dim": 16, "num_hidden_layers": 2,
                "vocab_size": 300, "max_position_embeddings": 128, {field_json}}}"#
        );
        let err = parse_config(&json).unwrap_err().to_string();
        assert!(
            err.contains(&format!("`{field}`")) || err.contains(field),
            "{field_json}: {err}"
        );
        assert!(err.contains("config.json"), "{err}");
    }
}

#[test]
fn published_configs_build_portable_graphs_with_the_family_structure() {
    // (name, layers, sliding layers, softcap, Tanh for final logit soft-capping)
    for (name, layers, sliding, softcap, tanh) in [
        ("gemma-2b", 18, 0, 0.0, 0),
        ("gemma-2-2b", 26, 13, 50.0, 1),
        ("gemma-3-1b-it", 26, 22, 0.0, 0),
    ] {
        let cfg = published(name);
        let g = build_model(&cfg, DType::F16).unwrap().graph;
        let attrs = attention_attrs(&g);
        assert_eq!(attrs.len(), layers, "{name}");
        assert!(
            attrs.iter().all(|&(c, _)| c == softcap),
            "{name}: {attrs:?}"
        );
        assert!(attrs.iter().all(|&(_, s)| s == 256f32.powf(-0.5)), "{name}");
        assert_eq!(count(&g, "Gelu"), layers, "{name}");
        assert_eq!(count(&g, "Tanh"), tanh, "{name}");
        // One window mask shared by every sliding layer.
        assert_eq!(count(&g, "CumSum"), usize::from(sliding > 0), "{name}");
        let norms_per_layer = match cfg.knobs::<GemmaConfig>().unwrap().version {
            GemmaVersion::Gemma1 => 2,
            GemmaVersion::Gemma2 => 4,
            GemmaVersion::Gemma3 => 6,
        };
        assert_eq!(
            count(&g, "RMSNormalization"),
            norms_per_layer * layers + 1,
            "{name}"
        );
        // Every norm gamma is the lazily computed 1 + w.
        let gammas = g
            .initializers
            .iter()
            .filter(|i| i.name.ends_with("_plus_one"))
            .count();
        assert_eq!(gammas, norms_per_layer * layers + 1, "{name}");
        let tables = g
            .initializers
            .iter()
            .filter(|i| i.name.ends_with("cos_cache"))
            .count();
        let two_ropes = cfg.knobs::<GemmaConfig>().unwrap().local_rope.is_some();
        assert_eq!(tables, 1 + usize::from(two_ropes), "{name}");
    }
}

/// `(local_window_size, softcap)` of every GroupQueryAttention, in graph order.
fn gqa_extras(g: &mobius::ir::Graph) -> Vec<(Option<i64>, Option<f32>)> {
    g.nodes
        .iter()
        .filter(|n| n.op_type == "GroupQueryAttention")
        .map(|n| {
            let window = match n.attrs.get("local_window_size") {
                Some(mobius::ir::Attr::Int(w)) => Some(*w),
                _ => None,
            };
            let softcap = match n.attrs.get("softcap") {
                Some(mobius::ir::Attr::Float(c)) => Some(*c),
                _ => None,
            };
            (window, softcap)
        })
        .collect()
}

#[test]
fn gqa_carries_windows_and_softcap_and_skip_norm_fuses_offset_norms() {
    // Gemma 1: every layer fuses; the (1 + w) gammas do not stop SkipSimplifiedLayerNorm.
    let g = optimized(&published("gemma-2b"), "cuda", DType::F16);
    assert_eq!(count(&g, "com.microsoft::GroupQueryAttention"), 18);
    assert_eq!(
        count(&g, "com.microsoft::SkipSimplifiedLayerNormalization"),
        36
    );
    // Gemma 2: every layer soft-capped, even layers sliding (4096).
    let g = optimized(&published("gemma-2-2b"), "cuda", DType::F16);
    assert_eq!(count(&g, "Attention"), 0);
    let want: Vec<_> = (0..26)
        .map(|i| ((i % 2 == 0).then_some(4096), Some(50.0)))
        .collect();
    assert_eq!(gqa_extras(&g), want);
    // Gemma 3: five sliding layers (512) to one global one; no soft-capping.
    let g = optimized(&published("gemma-3-1b-it"), "cuda", DType::F16);
    assert_eq!(count(&g, "Attention"), 0);
    let want: Vec<_> = (0..26)
        .map(|i| ((i % 6 != 5).then_some(512), None))
        .collect();
    assert_eq!(gqa_extras(&g), want);
}
