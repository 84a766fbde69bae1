use super::*;

fn parse(json: &str) -> Result<ArchConfig> {
    crate::models::parse_config(json.as_bytes(), Path::new("config.json"))
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
    let msg = parse(r#"{"model_type": "rwkv"}"#).unwrap_err().to_string();
    assert!(
        msg.contains("rwkv") && msg.contains("llama, mistral, qwen2"),
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
    let msg = parse(&V4.replace("llama3", "ntk-by-parts"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("rope_scaling.rope_type") && msg.contains("ntk-by-parts"),
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
    std::fs::write(&path, r#"{"bos_token_id": 5, "eos_token_id": [2, 299]}"#).unwrap();
    c.fill_tokens_from_generation_config(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(c.eos_token_ids, vec![1, 2, 299]);
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

/// V4 (a Llama 3 config) with `changes` applied at top level (null removes a field) or, for
/// `rope_scaling.KEY`, inside `rope_scaling`.
fn v4_with(changes: &[(&str, Value)]) -> Result<ArchConfig> {
    let mut cfg: Value = serde_json::from_str(V4).unwrap();
    for (key, value) in changes {
        match key.split_once('.') {
            Some((outer, inner)) => cfg[outer][inner] = value.clone(),
            None if value.is_null() => {
                cfg.as_object_mut().unwrap().remove(*key);
            }
            None => cfg[*key] = value.clone(),
        }
    }
    parse(&cfg.to_string())
}

#[test]
fn meaningless_values_are_named_with_what_was_expected() {
    use serde_json::json;
    type Case<'a> = (Vec<(&'a str, Value)>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (vec![("rope_theta", json!(-1))], "rope_theta", "> 0"),
        (vec![("rope_theta", json!(0))], "rope_theta", "> 0"),
        (vec![("rope_theta", json!(1e39))], "rope_theta", "finite"),
        (
            vec![("rope_scaling.factor", json!(0))],
            "rope_scaling.factor",
            "> 0",
        ),
        (
            vec![("rope_scaling.factor", json!(-8))],
            "rope_scaling.factor",
            "> 0",
        ),
        (
            vec![("rope_scaling.factor", json!("8"))],
            "rope_scaling.factor",
            "number",
        ),
        (
            vec![
                ("rope_scaling.rope_type", json!("dynamic")),
                ("rope_scaling.factor", json!(1e6)),
            ],
            "rope_scaling.factor",
            "at most 67108864",
        ),
        (
            vec![("rope_scaling.high_freq_factor", json!(1.0))],
            "rope_scaling.high_freq_factor",
            "more than low_freq_factor",
        ),
        (
            vec![("rope_scaling.low_freq_factor", json!(0))],
            "rope_scaling.low_freq_factor",
            "> 0",
        ),
        (
            vec![("rope_scaling.original_max_position_embeddings", json!(-5))],
            "rope_scaling.original_max_position_embeddings",
            "> 0",
        ),
        (
            vec![("partial_rotary_factor", json!(1.5))],
            "partial_rotary_factor",
            "(0, 1]",
        ),
        (
            vec![("partial_rotary_factor", json!(0))],
            "partial_rotary_factor",
            "(0, 1]",
        ),
        (vec![("rms_norm_eps", json!(-1e-5))], "rms_norm_eps", ">= 0"),
        (
            vec![("num_hidden_layers", json!(0))],
            "num_hidden_layers",
            "positive",
        ),
        (
            vec![("num_hidden_layers", json!(100000))],
            "num_hidden_layers",
            "at most 2048",
        ),
        (
            vec![("num_attention_heads", json!(100000))],
            "num_attention_heads",
            "at most",
        ),
        (
            vec![("num_key_value_heads", json!(0))],
            "num_key_value_heads",
            "positive",
        ),
        (
            vec![("num_key_value_heads", json!(3))],
            "num_key_value_heads",
            "must divide",
        ),
        (vec![("hidden_size", json!(-64))], "hidden_size", "positive"),
        (
            vec![("hidden_size", json!(66))],
            "head_dim",
            "not a multiple",
        ),
        (
            vec![("intermediate_size", json!(1i64 << 40))],
            "intermediate_size",
            "at most",
        ),
        (vec![("head_dim", json!(0))], "head_dim", "positive"),
        (
            vec![("head_dim", json!(15))],
            "partial_rotary_factor",
            "even",
        ),
        (vec![("vocab_size", json!(0))], "vocab_size", "positive"),
        (
            vec![("max_position_embeddings", json!(1i64 << 40))],
            "max_position_embeddings",
            "at most",
        ),
        (
            vec![("sliding_window", json!(0))],
            "sliding_window",
            "positive",
        ),
        (
            vec![(
                "rope_scaling",
                json!({"rope_type": "linear", "factor": 0.0}),
            )],
            "rope_scaling.factor",
            "> 0",
        ),
        (
            vec![("rope_scaling", json!({"rope_type": 3}))],
            "rope_scaling.rope_type",
            "string",
        ),
    ];
    for (changes, field, says) in cases {
        match v4_with(&changes) {
            Err(Error::ConfigField {
                field: got,
                message,
                path,
            }) => {
                assert_eq!(got, field, "{changes:?}: {message}");
                assert!(message.contains(says), "{changes:?}: {message}");
                assert!(path.ends_with("config.json"));
            }
            other => panic!("{changes:?}: expected a field error, got {other:?}"),
        }
    }
}

#[test]
fn numbers_too_large_for_json_name_their_field() {
    let msg = parse(&V4.replace("\"rope_theta\": 500000.0", "\"rope_theta\": 1e400"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("config.json:") && msg.contains("field `rope_theta`"),
        "{msg}"
    );
}

#[test]
fn minus_one_means_no_such_token() {
    let json = V4.replace(
        "\"eos_token_id\": [1, 2], \"bos_token_id\": 0",
        "\"eos_token_id\": [1, 2], \"bos_token_id\": 0, \"pad_token_id\": -1",
    );
    assert_eq!(parse(&json).unwrap().pad_token_id, None);
}

#[test]
fn config_token_ids_must_be_integers_inside_the_vocabulary() {
    for (ids, field, needle) in [
        (
            "\"bos_token_id\": -2",
            "bos_token_id",
            "-2 is not a token id",
        ),
        (
            "\"bos_token_id\": 300",
            "bos_token_id",
            "token id 300 is outside the vocabulary",
        ),
        (
            "\"eos_token_id\": [1, 2.5]",
            "eos_token_id",
            "2.5 is not a token id",
        ),
        (
            "\"eos_token_id\": \"2\"",
            "eos_token_id",
            "\"2\" is not a token id",
        ),
        (
            "\"pad_token_id\": [null]",
            "pad_token_id",
            "null is not a token id",
        ),
        (
            "\"pad_token_id\": 1e30",
            "pad_token_id",
            "is not a token id",
        ),
    ] {
        let json = V4.replace("\"eos_token_id\": [1, 2], \"bos_token_id\": 0", ids);
        let msg = parse(&json).unwrap_err().to_string();
        assert!(
            msg.contains("config.json") && msg.contains(field) && msg.contains(needle),
            "{ids}: {msg}"
        );
    }
}

#[test]
fn generation_config_token_ids_must_be_integers_inside_the_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("generation_config.json");
    for (ids, field, needle) in [
        (
            r#"{"eos_token_id": [2, 300]}"#,
            "eos_token_id",
            "outside the vocabulary",
        ),
        (
            r#"{"pad_token_id": -5}"#,
            "pad_token_id",
            "-5 is not a token id",
        ),
        (
            r#"{"bos_token_id": "x"}"#,
            "bos_token_id",
            "is not a token id",
        ),
    ] {
        let mut c = parse(V4).unwrap();
        std::fs::write(&path, ids).unwrap();
        let msg = c
            .fill_tokens_from_generation_config(&path)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("generation_config.json") && msg.contains(field) && msg.contains(needle),
            "{ids}: {msg}"
        );
    }
}

#[test]
fn rms_norm_eps_defaults_to_each_config_class() {
    for (model_type, eps) in [
        ("llama", 1e-6),
        ("qwen2", 1e-6),
        ("olmo2", 1e-5),
        ("phi3", 1e-5),
        ("mixtral", 1e-5),
        ("olmoe", 1e-5),
        ("granitemoe", 1e-6),
    ] {
        let cfg = crate::models::tiny_config(model_type, "").unwrap();
        assert_eq!(cfg.rms_norm_eps, eps, "{model_type}");
        let set = crate::models::tiny_config(model_type, r#", "rms_norm_eps": 1e-3"#).unwrap();
        assert_eq!(set.rms_norm_eps, 1e-3, "{model_type}");
    }
}

#[test]
fn a_sliding_window_pattern_that_is_no_count_is_named() {
    for pattern in [r#""LLLG""#, "0", "1.5"] {
        let extra = format!(r#", "sliding_window_pattern": {pattern}"#);
        let err = crate::models::tiny_config("gemma3_text", &extra)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.json: field `sliding_window_pattern`"),
            "{err}"
        );
    }
}

#[test]
fn non_finite_tokens_are_quoted_outside_strings_only() {
    let raw = br#"{"a": [0.0, Infinity, -Infinity, NaN], "b": "NaN \" Infinity"}"#;
    let quoted = super::quote_non_finite(raw);
    assert_eq!(
        std::str::from_utf8(&quoted).unwrap(),
        r#"{"a": [0.0, "Infinity", "-Infinity", "NaN"], "b": "NaN \" Infinity"}"#
    );
    let plain = br#"{"b": "Infinity"}"#;
    assert!(matches!(
        super::quote_non_finite(plain),
        std::borrow::Cow::Borrowed(_)
    ));
}
