use super::*;

fn parse(json: &str) -> Result<ArchConfig> {
    ArchConfig::parse(json.as_bytes(), Path::new("config.json"))
}

const V4: &str = r#"{
  "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
  "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
  "vocab_size": 300, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
  "torch_dtype": "bfloat16", "rope_theta": 500000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
  "tie_word_embeddings": true, "eos_token_id": [1, 2], "bos_token_id": 0
}"#;

const V5: &str = r#"{
  "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
  "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
  "vocab_size": 300, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
  "dtype": "bfloat16", "head_dim": null,
  "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 32},
  "tie_word_embeddings": true, "eos_token_id": [1, 2], "bos_token_id": 0
}"#;

#[test]
fn v4_and_v5_spellings_normalise_to_the_same_config() {
    let a = parse(V4).unwrap();
    let b = parse(V5).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.head_dim, 16);
    assert_eq!(a.dtype, Some(DType::BF16));
    assert_eq!(a.rope.theta, 500000.0);
    assert!(matches!(a.rope.scaling, RopeScaling::Llama3 { factor, .. } if factor == 8.0));
    assert_eq!(a.eos_token_ids, vec![1, 2]);
    assert_eq!(a.layer_windows, vec![None, None]);
}

#[test]
fn qwen2_has_qkv_bias_and_disabled_window() {
    let c = parse(
        r#"{"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 300, "max_position_embeddings": 128,
            "sliding_window": 32, "use_sliding_window": false}"#,
    )
    .unwrap();
    assert!(c.qkv_bias && !c.o_bias);
    assert_eq!(c.layer_windows, vec![None, None]);
}

#[test]
fn mistral_window_applies_to_every_layer() {
    let c = parse(
        r#"{"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "head_dim": 32,
            "vocab_size": 300, "max_position_embeddings": 128, "sliding_window": 8}"#,
    )
    .unwrap();
    assert_eq!(c.num_key_value_heads, 4);
    assert_eq!(c.head_dim, 32);
    assert_eq!(c.layer_windows, vec![Some(8), Some(8)]);
}

#[test]
fn invalid_json_reports_line_and_column() {
    let err = parse("{\n  \"model_type\": \"llama\",\n  oops\n}").unwrap_err();
    match err {
        Error::Json { line, column, .. } => assert_eq!((line, column), (3, 3)),
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn unsupported_model_type_lists_the_supported_ones() {
    let msg = parse(r#"{"model_type": "mamba"}"#).unwrap_err().to_string();
    assert!(
        msg.contains("mamba") && msg.contains("llama, mistral, qwen2"),
        "{msg}"
    );
}

#[test]
fn bad_fields_are_named() {
    let msg = parse(&V4.replace("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("num_key_value_heads"), "{msg}");
    let msg = parse(&V4.replace("\"hidden_size\": 64,", ""))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("hidden_size") && msg.contains("missing"),
        "{msg}"
    );
    let msg = parse(&V4.replace("llama3", "yarn"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("rope_scaling.rope_type") && msg.contains("yarn"),
        "{msg}"
    );
    let msg = parse(&V4.replace("\"torch_dtype\": \"bfloat16\"", "\"torch_dtype\": \"int4\""))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("torch_dtype"), "{msg}");
}

#[test]
fn generation_config_fills_missing_token_ids() {
    let mut c = parse(&V4.replace(
        "\"eos_token_id\": [1, 2], \"bos_token_id\": 0",
        "\"pad_token_id\": null",
    ))
    .unwrap();
    assert!(c.eos_token_ids.is_empty());
    let dir = std::env::temp_dir().join(format!("mobius-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("generation_config.json");
    std::fs::write(
        &path,
        r#"{"bos_token_id": 5, "eos_token_id": [7, 8], "pad_token_id": 9}"#,
    )
    .unwrap();
    c.fill_tokens_from_generation_config(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        (c.bos_token_id, c.eos_token_ids.clone(), c.pad_token_id),
        (Some(5), vec![7, 8], Some(9))
    );
}

#[test]
fn generation_config_eos_ids_join_config_ones() {
    // Phi-3: config.json stops on <|endoftext|> only, generation_config.json adds <|end|>.
    let mut c = parse(V4).unwrap();
    assert_eq!(c.eos_token_ids, vec![1, 2]);
    let dir = std::env::temp_dir().join(format!("mobius-gen-eos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("generation_config.json");
    std::fs::write(&path, r#"{"bos_token_id": 5, "eos_token_id": [2, 32007]}"#).unwrap();
    c.fill_tokens_from_generation_config(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(c.eos_token_ids, vec![1, 2, 32007]);
    assert_eq!(c.bos_token_id, Some(0), "config.json's own ids win");
}

#[test]
fn absurd_sizes_are_rejected() {
    let msg = parse(&V4.replace("\"vocab_size\": 300", "\"vocab_size\": 100000000000"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("vocab_size") && msg.contains("larger"),
        "{msg}"
    );
}

#[test]
fn gemma2_and_gemma3_without_a_window_get_transformers_default() {
    for (model_type, want) in [
        ("gemma2", vec![Some(4096), None, Some(4096), None]),
        (
            "gemma3_text",
            vec![Some(4096), Some(4096), Some(4096), Some(4096)],
        ),
    ] {
        let cfg = parse(&format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
                "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 8192}}"#
        ))
        .unwrap();
        assert_eq!(cfg.layer_windows, want, "{model_type}");
    }
}

#[test]
fn families_with_a_fixed_head_dim_default_to_it() {
    for (model_type, want) in [("qwen3", 128), ("gemma2", 256), ("llama", 16)] {
        let cfg = parse(&format!(
            r#"{{"model_type": "{model_type}", "hidden_size": 64, "intermediate_size": 128,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                "vocab_size": 300, "max_position_embeddings": 128}}"#
        ))
        .unwrap();
        assert_eq!(cfg.head_dim, want, "{model_type}");
    }
}

#[test]
fn smollm3_without_rope_theta_gets_transformers_default() {
    let cfg = parse(
        r#"{"model_type": "smollm3", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
            "vocab_size": 300, "max_position_embeddings": 128}"#,
    )
    .unwrap();
    assert_eq!(cfg.rope.theta, 2_000_000.0);
}
