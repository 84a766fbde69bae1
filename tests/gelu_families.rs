//! The GELU-MLP, LayerNorm families (gpt2, phi): config spellings and errors, and the graphs
//! each EP gets (SkipLayerNormalization and FastGelu where the EP runs them, the standard
//! forms elsewhere).

mod common;

use common::*;
use mobius::config::Gelu;
use mobius::ir::DType;
use mobius::models::gpt2::Gpt2Config;
use mobius::models::phi::PhiConfig;

const SLN: &str = "com.microsoft::SkipLayerNormalization";
const FAST_GELU: &str = "com.microsoft::FastGelu";
const BIAS_GELU: &str = "com.microsoft::BiasGelu";
const GQA: &str = "com.microsoft::GroupQueryAttention";

#[test]
fn gpt2_fixture_fuses_skip_layer_norm_and_fast_gelu_on_cpu_and_cuda() {
    let cfg = load_config(&fixture("gpt2"));
    for (ep, dtype) in [("cpu", DType::F32), ("cuda", DType::F16)] {
        let g = optimized(&cfg, ep, dtype);
        // ln_1 of every layer (the first one over the embedding sum), ln_2, ln_f.
        assert_eq!(count(&g, SLN), 5, "{ep}");
        assert_eq!(count(&g, FAST_GELU), 2, "{ep}");
        assert_eq!(count(&g, "Gelu"), 0, "{ep}");
        assert_eq!(count(&g, "LayerNormalization"), 0, "{ep}");
    }
}

#[test]
fn eps_without_the_fused_kernels_keep_layer_norm_and_gelu() {
    for name in ["gpt2", "phi"] {
        let cfg = load_config(&fixture(name));
        for (ep, dtype) in [
            ("trt-rtx", DType::F16),
            ("onnx-standard", DType::F32),
            ("openvino", DType::F32),
        ] {
            let g = optimized(&cfg, ep, dtype);
            for op in [SLN, FAST_GELU, BIAS_GELU] {
                assert_eq!(count(&g, op), 0, "{name} {ep} {op}");
            }
            assert_eq!(count(&g, "Gelu"), 2, "{name} {ep}");
        }
    }
}

#[test]
fn phi_shares_one_norm_between_attention_and_mlp() {
    let g = optimized(&load_config(&fixture("phi")), "cpu", DType::F32);
    // Layer 0's norm reads the embedding (no residual Add); layer 1's and the final norm fuse.
    assert_eq!(count(&g, "LayerNormalization"), 1);
    assert_eq!(count(&g, SLN), 2);
    assert_eq!(count(&g, FAST_GELU), 2);
    assert_eq!(count(&g, GQA), 2);
}

#[test]
fn published_configs_get_the_expected_fusions() {
    let gpt2 = load_config(&real_config("gpt2"));
    assert_eq!((gpt2.hidden_size, gpt2.num_hidden_layers), (768, 12));
    assert_eq!((gpt2.intermediate_size, gpt2.head_dim), (3072, 64));
    assert_eq!(gpt2.max_position_embeddings, 1024);
    assert!(gpt2.tie_word_embeddings);
    let g = optimized(&gpt2, "cuda", DType::F16);
    assert_eq!(count(&g, SLN), 25);
    assert_eq!(count(&g, FAST_GELU), 12);
    assert_eq!(count(&g, GQA), 12);

    let phi2 = load_config(&real_config("phi-2"));
    assert_eq!((phi2.head_dim, phi2.rope.rotary_dim), (80, 32));
    assert!(!phi2.tie_word_embeddings);
    let knobs = phi2.knobs::<PhiConfig>().unwrap();
    assert_eq!((knobs.layer_norm_eps, knobs.gelu), (1e-5, Gelu::Tanh));
    let g = optimized(&phi2, "cuda", DType::F16);
    assert!(
        g.initializers.iter().any(|i| i.name == "lm_head.bias"),
        "phi's LM head has a bias"
    );
    assert_eq!(count(&g, SLN), 32);
    assert_eq!(count(&g, FAST_GELU), 32);
    assert_eq!(count(&g, GQA), 32);
}

const GPT2_V4: &str = r#"{"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
  "n_positions": 128, "n_inner": null, "layer_norm_epsilon": 1e-5,
  "activation_function": "gelu_new", "vocab_size": 300, "torch_dtype": "float32",
  "bos_token_id": 1, "eos_token_id": 2}"#;

const GPT2_GENERIC: &str = r#"{"model_type": "gpt2", "hidden_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 128,
  "layer_norm_epsilon": 1e-5, "activation_function": "gelu_pytorch_tanh", "vocab_size": 300,
  "dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}"#;

#[test]
fn gpt2_spellings_normalise_to_one_config() {
    let a = parse_config(GPT2_V4).unwrap();
    let b = parse_config(GPT2_GENERIC).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.intermediate_size, 256);
    assert_eq!((a.num_key_value_heads, a.head_dim), (4, 16));
    let knobs = a.knobs::<Gpt2Config>().unwrap();
    assert_eq!(knobs.layer_norm_eps, 1e-5);
    assert_eq!(knobs.gelu, Gelu::Tanh);
    assert_eq!(a.dtype, Some(DType::F32));
}

#[test]
fn unsupported_gpt2_and_phi_settings_name_their_field() {
    let cases = [
        (
            GPT2_V4.replace("\"gelu_new\"", "\"relu\""),
            "activation_function",
        ),
        (GPT2_V4.replace("\"n_head\": 4", "\"n_head\": 5"), "n_head"),
        (
            GPT2_V4.replace(
                "\"n_layer\": 2",
                "\"n_layer\": 2, \"scale_attn_by_inverse_layer_idx\": true",
            ),
            "scale_attn_by_inverse_layer_idx",
        ),
        (GPT2_V4.replace("\"n_embd\": 64, ", ""), "n_embd"),
    ];
    for (json, field) in cases {
        let err = parse_config(&json).unwrap_err().to_string();
        assert!(err.contains(field) && err.contains("config.json"), "{err}");
    }
    let phi = std::fs::read_to_string(real_config("phi-2").join("config.json")).unwrap();
    for (from, to, field) in [
        (
            "\"qk_layernorm\": false",
            "\"qk_layernorm\": true",
            "qk_layernorm",
        ),
        ("\"gelu_new\"", "\"silu\"", "hidden_act"),
        (
            "\"partial_rotary_factor\": 0.4",
            "\"partial_rotary_factor\": 0.0",
            "partial_rotary_factor",
        ),
    ] {
        let err = parse_config(&phi.replace(from, to))
            .unwrap_err()
            .to_string();
        assert!(err.contains(field), "{err}");
    }
}

/// GPT2Model checkpoints (no `transformer.` prefix, as the hub's `openai-community/gpt2`)
/// build the same model as GPT2LMHeadModel ones.
#[test]
fn gpt2_base_model_checkpoints_build_the_same_model() {
    let t = tempfile::tempdir().unwrap();
    let base = copy_fixture("gpt2", &t.path().join("base"));
    let weights = base.join("model.safetensors");
    let renamed = read_safetensors(&weights)
        .into_iter()
        .map(|(name, tensor)| {
            let name = name
                .strip_prefix("transformer.")
                .unwrap_or(&name)
                .to_string();
            (name, tensor)
        })
        .collect();
    write_safetensors(&weights, &renamed);
    assert!(read_safetensors(&weights).contains_key("h.0.attn.c_attn.weight"));
    let build = |src: &std::path::Path, out: &str| {
        let out = t.path().join(out);
        mobius()
            .args(["build", "--config"])
            .arg(src)
            .arg(&out)
            .assert()
            .success();
        out
    };
    let (a, b) = (build(&fixture("gpt2"), "a"), build(&base, "b"));
    for file in ["model.onnx", "model.onnx.data"] {
        assert_eq!(
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
            "{file}"
        );
    }
}
