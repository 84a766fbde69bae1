//! config.json values that make no sense: every case builds a copied fixture whose config.json
//! was edited, and expects exit 1, one error naming config.json, the field and what was
//! expected, and nothing written (no output folder, no staging folder, the source untouched).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tempfile::TempDir;

use crate::check::{fails_with, listing, unchanged};
use crate::common::{copy_fixture, mobius};

/// A copied fixture with an edited config.json, and where a build would write.
struct Case {
    tmp: TempDir,
    src: PathBuf,
    out: PathBuf,
}

impl Case {
    /// Copies `fixture` and writes `text` as its config.json.
    fn with_text(fixture: &str, text: &str) -> Case {
        let tmp = TempDir::new().unwrap();
        let src = copy_fixture(fixture, &tmp.path().join("src"));
        std::fs::write(src.join("config.json"), text).unwrap();
        let out = tmp.path().join("out");
        Case { tmp, src, out }
    }

    /// Copies `fixture` and applies `edit` to its config.json.
    fn edited(fixture: &str, edit: impl FnOnce(&mut Value)) -> Case {
        let path = crate::common::fixture(fixture).join("config.json");
        let mut config: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        edit(&mut config);
        Case::with_text(fixture, &serde_json::to_string_pretty(&config).unwrap())
    }

    /// Builds it (`extra` flags after `--no-weights`), expecting exit 1 with an error naming
    /// config.json and each needle, and nothing written anywhere.
    fn refused(&self, extra: &[&str], needles: &[&str]) {
        let before_src = listing(&self.src);
        let before_tmp = listing(self.tmp.path());
        let config = std::fs::read(self.src.join("config.json")).unwrap();
        let mut cmd = mobius();
        cmd.arg("build")
            .arg("--config")
            .arg(&self.src)
            .arg(&self.out)
            .arg("--no-weights")
            .args(extra);
        let mut all = vec!["config.json"];
        all.extend_from_slice(needles);
        fails_with(cmd, 1, &all);
        assert!(!self.out.exists(), "no output folder");
        unchanged(self.tmp.path(), &before_tmp);
        unchanged(&self.src, &before_src);
        assert_eq!(
            std::fs::read(self.src.join("config.json")).unwrap(),
            config,
            "config.json untouched"
        );
    }
}

/// Sets `path` (`a.b` = key b of object a) to `value` in a config.
fn set(config: &mut Value, path: &str, value: Value) {
    match path.split_once('.') {
        Some((outer, inner)) => config[outer][inner] = value,
        None => config[path] = value,
    }
}

/// The llama fixture (Llama 3 RoPE in v5 `rope_parameters`) with one field set.
fn llama(path: &str, value: Value) -> Case {
    Case::edited("llama", |c| set(c, path, value))
}

#[test]
fn negative_or_zero_rope_theta() {
    llama("rope_parameters.rope_theta", json!(-1)).refused(
        &[],
        &[
            "rope_parameters.rope_theta",
            "-1",
            "expected a finite number > 0",
        ],
    );
    Case::edited("mistral", |c| c["rope_theta"] = json!(0)).refused(&[], &["`rope_theta`", "> 0"]);
}

#[test]
fn rope_theta_that_overflows_json_numbers() {
    let text =
        std::fs::read_to_string(crate::common::fixture("mistral").join("config.json")).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    let theta = value["rope_theta"].to_string();
    let pretty = serde_json::to_string_pretty(&value).unwrap();
    let hostile = pretty.replace(&format!("\"rope_theta\": {theta}"), "\"rope_theta\": 1e400");
    assert_ne!(pretty, hostile);
    Case::with_text("mistral", &hostile).refused(&[], &["field `rope_theta`", "out of range"]);
}

#[test]
fn rope_theta_beyond_f32() {
    Case::edited("mistral", |c| c["rope_theta"] = json!(1e39))
        .refused(&[], &["`rope_theta`", "1e39", "finite"]);
}

#[test]
fn zero_or_negative_rope_factor() {
    llama("rope_parameters.factor", json!(0)).refused(&[], &["rope_parameters.factor", "> 0"]);
    llama("rope_parameters.factor", json!(-8.0)).refused(&[], &["rope_parameters.factor", "> 0"]);
    Case::edited("mistral", |c| {
        c["rope_scaling"] = json!({"rope_type": "linear", "factor": -2.0})
    })
    .refused(&[], &["rope_scaling.factor", "> 0"]);
}

#[test]
fn llama3_bands_out_of_order() {
    llama("rope_parameters.high_freq_factor", json!(1.0)).refused(
        &[],
        &[
            "rope_parameters.high_freq_factor",
            "more than low_freq_factor",
        ],
    );
    llama("rope_parameters.low_freq_factor", json!(8.0))
        .refused(&[], &["rope_parameters.high_freq_factor"]);
}

#[test]
fn longrope_factor_lists_of_the_wrong_length_or_sign() {
    Case::edited("phi3", |c| {
        c["rope_scaling"]["short_factor"] = json!([1.0, 1.0, 1.0]);
    })
    .refused(&[], &["rope_scaling.short_factor", "has 3 entries", "8"]);
    Case::edited("phi3", |c| {
        c["rope_scaling"]["long_factor"][3] = json!(0.0);
    })
    .refused(&[], &["rope_scaling.long_factor", "> 0"]);
    Case::edited("phi3", |c| {
        c["rope_scaling"]["attention_factor"] = json!(-1.0);
    })
    .refused(&[], &["rope_scaling.attention_factor", "> 0"]);
}

#[test]
fn partial_rotary_factor_outside_zero_one() {
    Case::edited("phi", |c| c["partial_rotary_factor"] = json!(1.5))
        .refused(&[], &["`partial_rotary_factor`", "(0, 1]"]);
    Case::edited("phi", |c| c["partial_rotary_factor"] = json!(-0.5))
        .refused(&[], &["`partial_rotary_factor`", "(0, 1]"]);
}

#[test]
fn negative_epsilons() {
    llama("rms_norm_eps", json!(-1e-5)).refused(&[], &["`rms_norm_eps`", ">= 0"]);
    Case::edited("gpt2", |c| c["layer_norm_epsilon"] = json!(-1e-5))
        .refused(&[], &["`layer_norm_epsilon`", ">= 0"]);
    Case::edited("bert", |c| c["layer_norm_eps"] = json!(-1.0))
        .refused(&[], &["`layer_norm_eps`", ">= 0"]);
}

#[test]
fn zero_sizes() {
    for field in [
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "hidden_size",
        "intermediate_size",
        "head_dim",
        "vocab_size",
        "max_position_embeddings",
    ] {
        llama(field, json!(0)).refused(&[], &[&format!("`{field}`"), "positive integer"]);
    }
}

#[test]
fn absurd_sizes_are_refused_by_the_limits() {
    for (field, value) in [
        ("num_hidden_layers", json!(100_000)),
        ("num_attention_heads", json!(1_000_000)),
        ("hidden_size", json!(1i64 << 40)),
        ("intermediate_size", json!(1i64 << 40)),
        ("vocab_size", json!(1i64 << 40)),
        ("max_position_embeddings", json!(1i64 << 40)),
    ] {
        llama(field, value).refused(&[], &[&format!("`{field}`"), "larger than mobius supports"]);
    }
}

#[test]
fn rope_tables_beyond_the_limit() {
    // 2^26 positions (the position limit) × 2^20-wide heads: petabytes of RoPE tables.
    Case::edited("llama", |c| {
        set(c, "max_position_embeddings", json!(1i64 << 26));
        set(c, "head_dim", json!(1i64 << 20));
    })
    .refused(
        &[],
        &[
            "`max_position_embeddings`",
            "RoPE tables",
            "at most 2147483648",
        ],
    );
}

#[test]
fn a_hundred_thousand_layers_fail_fast() {
    let started = std::time::Instant::now();
    llama("num_hidden_layers", json!(100_000)).refused(
        &["--ep", "cuda", "--dtype", "f16"],
        &["`num_hidden_layers`", "100000", "at most 2048"],
    );
    assert!(started.elapsed().as_secs() < 30, "refused before building");
}

#[test]
fn kv_heads_that_do_not_divide_heads() {
    llama("num_key_value_heads", json!(3)).refused(&[], &["`num_key_value_heads`", "must divide"]);
}

#[test]
fn hidden_not_divisible_by_heads_without_head_dim() {
    Case::edited("llama", |c| {
        c.as_object_mut().unwrap().remove("head_dim");
        c["hidden_size"] = json!(66);
    })
    .refused(&[], &["`head_dim`", "not a multiple"]);
    Case::edited("gpt2", |c| c["n_head"] = json!(5)).refused(&[], &["`n_head`", "divide"]);
}

#[test]
fn zero_sliding_window() {
    Case::edited("mistral", |c| c["sliding_window"] = json!(0))
        .refused(&[], &["`sliding_window`", "positive"]);
}

#[test]
fn negative_max_window_layers() {
    Case::edited("qwen2", |c| {
        let o = c.as_object_mut().unwrap();
        o.remove("layer_types");
        o.insert("use_sliding_window".into(), json!(true));
        o.insert("sliding_window".into(), json!(8));
        o.insert("max_window_layers".into(), json!(-1));
    })
    .refused(&[], &["`max_window_layers`", "≥ 0", "-1"]);
}

#[test]
fn non_positive_softcaps_and_scalars() {
    Case::edited("gemma2", |c| c["attn_logit_softcapping"] = json!(0.0))
        .refused(&[], &["`attn_logit_softcapping`", "> 0"]);
    Case::edited("gemma2", |c| c["final_logit_softcapping"] = json!(-30.0))
        .refused(&[], &["`final_logit_softcapping`", "> 0"]);
    Case::edited("gemma2", |c| c["query_pre_attn_scalar"] = json!(-1))
        .refused(&[], &["`query_pre_attn_scalar`", "> 0"]);
    Case::edited("gemma3_text", |c| {
        c["rope_parameters"]["sliding_attention"]["rope_theta"] = json!(0)
    })
    .refused(
        &[],
        &["rope_parameters.sliding_attention.rope_theta", "> 0"],
    );
}

#[test]
fn granite_multipliers_beyond_f32_or_zero() {
    Case::edited("granite", |c| c["residual_multiplier"] = json!(1e300))
        .refused(&[], &["`residual_multiplier`", "finite"]);
    Case::edited("granite", |c| c["logits_scaling"] = json!(0))
        .refused(&[], &["`logits_scaling`", "non-zero"]);
}

#[test]
fn numbers_of_the_wrong_type() {
    llama("rope_parameters.factor", json!("8"))
        .refused(&[], &["rope_parameters.factor", "expected a number"]);
    llama("num_hidden_layers", json!(2.5)).refused(&[], &["field `num_hidden_layers`"]);
}

/// The fixtures these cases edit are decoders and encoders of every config family.
#[test]
fn edited_fixtures_build_when_left_alone() {
    for fixture in [
        "llama",
        "mistral",
        "phi3",
        "phi",
        "gpt2",
        "bert",
        "gemma2",
        "gemma3_text",
        "granite",
    ] {
        let case = Case::edited(fixture, |_| {});
        let out = case.out.clone();
        let mut cmd = mobius();
        cmd.arg("build")
            .arg("--config")
            .arg(&case.src)
            .arg(&out)
            .arg("--no-weights");
        cmd.assert().success();
        assert!(Path::new(&out).join("model.onnx").exists(), "{fixture}");
    }
}

/// Gemma 3 without `layer_types`: `sliding_window_pattern` must be a positive layer count,
/// not silently replaced by the default.
#[test]
fn gemma3_sliding_window_pattern_out_of_range() {
    for (value, expected) in [
        (json!(0), "must be a positive integer, found 0"),
        (json!(-3), "must be a positive integer, found -3"),
        (json!(1_000_000_000_000i64), "larger than mobius supports"),
    ] {
        Case::edited("gemma3_text", |c| {
            c.as_object_mut().unwrap().remove("layer_types");
            c["sliding_window_pattern"] = value.clone();
        })
        .refused(&[], &["`sliding_window_pattern`", expected]);
    }
}

/// SmolLM3 without `no_rope_layers`: `no_rope_layer_interval` must be a positive layer count.
#[test]
fn smollm3_no_rope_layer_interval_out_of_range() {
    for (value, expected) in [
        (json!(0), "must be a positive integer, found 0"),
        (json!(-1), "must be a positive integer, found -1"),
        (json!(i64::MAX), "larger than mobius supports"),
    ] {
        Case::edited("smollm3", |c| {
            c.as_object_mut().unwrap().remove("no_rope_layers");
            c["no_rope_layer_interval"] = value.clone();
        })
        .refused(&[], &["`no_rope_layer_interval`", expected]);
    }
}

#[test]
fn a_quantization_method_mobius_cannot_read() {
    llama("quantization_config.quant_method", json!("bitsandbytes")).refused(
        &[],
        &[
            "quantization_config.quant_method",
            "bitsandbytes",
            "\"gptq\"",
        ],
    );
}

#[test]
fn a_gptq_checkpoint_quantized_with_desc_act() {
    Case::edited("llama-gptq", |c| {
        c["quantization_config"]["desc_act"] = json!(true)
    })
    .refused(
        &[],
        &["quantization_config.desc_act", "true", "desc_act false"],
    );
}

#[test]
fn an_awq_checkpoint_of_another_version() {
    Case::edited("llama-awq", |c| {
        c["quantization_config"]["version"] = json!("gemv")
    })
    .refused(&[], &["quantization_config.version", "gemv", "\"gemm\""]);
}
