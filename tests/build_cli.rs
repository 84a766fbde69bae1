//! `mobius build` end to end on the bundled fixtures and the published configs.

mod common;

use std::path::Path;

use common::*;
use mobius::ir::{DType, Dim, Model};
use mobius::onnx::import;
use mobius::rulebook::contrib_functions::ContribFunctions;
use predicates::str::contains;

fn build(src: &Path, out: &Path, extra: &[&str]) -> String {
    let assert = mobius()
        .arg("build")
        .args(extra)
        .arg("--config")
        .arg(src)
        .arg(out)
        .assert()
        .success();
    String::from_utf8(assert.get_output().stderr.clone()).unwrap()
}

fn load(out: &Path) -> Model {
    import::load(&out.join("model.onnx"), &ContribFunctions).unwrap()
}

fn dims(model: &Model, name: &str) -> Vec<String> {
    let v = model
        .graph
        .inputs
        .iter()
        .chain(&model.graph.outputs)
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no value {name}"));
    v.shape.0.iter().map(Dim::to_string).collect()
}

#[test]
fn llama_package_has_model_data_genai_config_and_tokenizer() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("pkg");
    build(&fixture("llama"), &out, &[]);
    assert_eq!(
        entries(&out),
        [
            "genai_config.json",
            "generation_config.json",
            "model.onnx",
            "model.onnx.data",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let m = load(&out);
    assert_eq!(m.ir_version, 11);
    assert_eq!(m.opsets.get(""), Some(&24));
    assert_eq!(
        m.opsets.get("com.microsoft"),
        Some(&1),
        "the default EP fuses SkipSimplifiedLayerNormalization"
    );
    assert_eq!(m.producer_name, "mobius");
    let names: Vec<&str> = m.graph.inputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "input_ids",
            "attention_mask",
            "position_ids",
            "past_key_values.0.key",
            "past_key_values.0.value",
            "past_key_values.1.key",
            "past_key_values.1.value"
        ]
    );
    let outs: Vec<&str> = m.graph.outputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        outs,
        [
            "logits",
            "present.0.key",
            "present.0.value",
            "present.1.key",
            "present.1.value"
        ]
    );
    assert_eq!(
        dims(&m, "attention_mask"),
        ["batch", "past_seq_len + seq_len"]
    );
    assert_eq!(
        dims(&m, "past_key_values.1.value"),
        ["batch", "2", "past_sequence_len", "16"]
    );
    assert_eq!(
        dims(&m, "present.0.key"),
        ["batch", "2", "past_sequence_len + sequence_len", "16"]
    );
    assert_eq!(dims(&m, "logits"), ["batch", "sequence_len", "300"]);
    // Tied embeddings: one initializer feeds both the Gather and the LM head.
    let inits: Vec<&str> = m
        .graph
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert!(
        inits.contains(&"model.embed_tokens.weight")
            && !inits.iter().any(|n| n.starts_with("lm_head"))
    );
    assert!(inits.contains(&"model.layers.0.self_attn.q_proj.weight_t"));
    let counts = m.graph.op_counts();
    assert_eq!(counts["Attention"], 2);
    assert_eq!(counts["RotaryEmbedding"], 4);
    assert_eq!(counts["RMSNormalization"], 1);
    assert_eq!(counts["com.microsoft::SkipSimplifiedLayerNormalization"], 4);

    let genai: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("genai_config.json")).unwrap()).unwrap();
    assert_eq!(genai["model"]["type"], "llama");
    assert_eq!(genai["model"]["vocab_size"], 300);
    assert_eq!(genai["model"]["decoder"]["head_size"], 16);
    assert_eq!(genai["model"]["decoder"]["num_key_value_heads"], 2);
    assert_eq!(
        genai["model"]["decoder"]["inputs"]["position_ids"],
        "position_ids"
    );
    assert_eq!(genai["model"]["eos_token_id"], 2);
    assert_eq!(genai["search"]["past_present_share_buffer"], false);
}

/// The float dtype of every float initializer and output of a built model (one, or a panic).
fn float_dtype(m: &Model) -> DType {
    let mut floats = m
        .graph
        .initializers
        .iter()
        .map(|i| i.dtype)
        .chain(m.graph.outputs.iter().map(|o| o.dtype))
        .filter(|d| d.is_float());
    let first = floats.next().expect("a float output");
    assert!(floats.all(|d| d == first), "one float dtype");
    first
}

#[test]
fn the_dtype_is_the_eps_default_and_one_its_runtime_runs() {
    let t = tempfile::tempdir().unwrap();
    let bf16 = fixture("llama-bf16-sharded");
    // Without --dtype: the EP's default, whatever the checkpoint stores (bf16 here).
    for (ep, want) in [
        (None, DType::F32),
        (Some("cpu"), DType::F32),
        (Some("onnx-standard"), DType::F32),
        (Some("cuda"), DType::F16),
        (Some("webgpu"), DType::F16),
    ] {
        let out = t.path().join(ep.unwrap_or("noflag"));
        let flags: Vec<&str> = ep.map(|e| vec!["--ep", e]).unwrap_or_default();
        build(&bf16, &out, &flags);
        assert_eq!(float_dtype(&load(&out)), want, "--ep {ep:?}");
    }
    // An explicit dtype the EP runs.
    let kept = t.path().join("bf16");
    build(&bf16, &kept, &["--dtype", "bf16"]);
    assert_eq!(float_dtype(&load(&kept)), DType::BF16);
    let f16 = t.path().join("f16");
    build(&bf16, &f16, &["--ep", "cpu", "--dtype", "f16"]);
    assert_eq!(load(&f16).graph.inputs[3].dtype, DType::F16);
    // An EP file's dtypes and default (f16, bf16; bf16).
    let custom = t.path().join("custom");
    let ep_file = root().join("tests/data/eps/valid.toml");
    build(&bf16, &custom, &["--ep-file", ep_file.to_str().unwrap()]);
    assert_eq!(float_dtype(&load(&custom)), DType::BF16);
    let out = t.path().join("refused-custom");
    mobius()
        .args(["build", "--dtype", "f32", "--ep-file"])
        .arg(&ep_file)
        .arg("--config")
        .arg(&bf16)
        .arg(&out)
        .assert()
        .code(2)
        .stderr(contains(
            "`test-accel` does not run f32 models; its dtypes are f16, bf16 (default bf16)",
        ));
    assert!(!out.exists());
    // One it does not: a usage error naming the EP's dtypes, before anything is written.
    for (ep, dtype) in [("cpu", "bf16"), ("dml", "bf16"), ("webgpu", "bf16")] {
        let out = t.path().join(format!("refused-{ep}"));
        mobius()
            .args(["build", "--ep", ep, "--dtype", dtype, "--config"])
            .arg(&bf16)
            .arg(&out)
            .assert()
            .code(2)
            .stderr(contains(format!(
                "execution provider `{ep}` does not run bf16 models; its dtypes are f32, f16"
            )));
        assert!(
            !out.exists(),
            "--ep {ep} --dtype {dtype} wrote {}",
            out.display()
        );
    }
}

/// The files of the package at `out`, by name, but genai_config.json (it names the EP).
fn package_files(out: &Path) -> Vec<(String, Vec<u8>)> {
    entries(out)
        .into_iter()
        .filter(|name| name != "genai_config.json")
        .map(|name| {
            let bytes = std::fs::read(out.join(&name)).unwrap();
            (name, bytes)
        })
        .collect()
}

#[test]
fn every_capability_an_ep_file_sets_changes_the_build_or_is_said_to_change_nothing() {
    let t = tempfile::tempdir().unwrap();
    let llama = fixture("llama");
    let cpu = t.path().join("cpu");
    build(&llama, &cpu, &["--ep", "cpu"]);
    let genai = |out: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(out.join("genai_config.json")).unwrap()).unwrap()
    };
    let shared = |out: &Path| genai(out)["search"]["past_present_share_buffer"].clone();
    assert_eq!(shared(&cpu), serde_json::json!(true));
    // No shared past/present buffer: genai_config asks for none; the graph is the same.
    let file = t.path().join("separate.toml");
    std::fs::write(
        &file,
        "name = \"cpu-separate-kv\"\nbase = \"cpu\"\nsupports_past_present_share_buffer = false\n",
    )
    .unwrap();
    let separate = t.path().join("separate");
    build(&llama, &separate, &["--ep-file", file.to_str().unwrap()]);
    assert_eq!(shared(&separate), serde_json::json!(false));
    assert!(package_files(&separate) == package_files(&cpu));
    // mobius-onnx's keys without an effect: accepted, each named in a warning, nothing changes.
    let file = t.path().join("compat.toml");
    std::fs::write(
        &file,
        "name = \"cpu-compat\"\nbase = \"cpu\"\nmax_buffer_size = 1024\n\
         requires_graph_capture_rewrite = true\nsupports_packed_multi_head_attention = true\n",
    )
    .unwrap();
    let compat = t.path().join("compat");
    let stderr = build(&llama, &compat, &["--ep-file", file.to_str().unwrap()]);
    for key in [
        "max_buffer_size",
        "requires_graph_capture_rewrite",
        "supports_packed_multi_head_attention",
    ] {
        assert!(
            stderr.contains(&format!("`{key}` has no effect")),
            "{key}: {stderr}"
        );
    }
    assert!(package_files(&compat) == package_files(&cpu));
    assert_eq!(genai(&compat)["search"], genai(&cpu)["search"]);
}

#[test]
fn f16_overflow_is_clamped_with_a_counted_warning() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama-bf16-sharded", &t.path().join("ckpt"));
    let shard = entries(&src)
        .into_iter()
        .find(|e| e.starts_with("model-00001"))
        .unwrap();
    let path = src.join(shard);
    let mut tensors = read_safetensors(&path);
    let (name, tensor) = tensors.iter_mut().find(|(_, t)| t.dtype == "BF16").unwrap();
    let big = half::bf16::from_f32(1.0e6).to_bits().to_le_bytes();
    tensor.data[..2].copy_from_slice(&big);
    tensor.data[2..4].copy_from_slice(&half::bf16::from_f32(-7.0e4).to_bits().to_le_bytes());
    let name = name.clone();
    write_safetensors(&path, &tensors);
    let stderr = build(&src, &t.path().join("out"), &["--dtype", "f16"]);
    assert!(
        stderr.contains("2 weight values") && stderr.contains("65504"),
        "{name}: {stderr}"
    );
}

#[test]
fn no_weights_writes_a_loadable_model_without_reading_safetensors() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    std::fs::remove_file(src.join("model.safetensors")).unwrap();
    let out = t.path().join("out");
    build(&src, &out, &["--no-weights"]);
    let m = load(&out);
    let data = std::fs::metadata(out.join("model.onnx.data"))
        .unwrap()
        .len();
    let mut declared = 0;
    for init in &m.graph.initializers {
        if let Some(mobius::ir::TensorSource::External { offset, length, .. }) = &init.source {
            assert!(
                offset + length <= data,
                "{} lies outside the data file",
                init.name
            );
            assert_eq!(*length as usize, init.byte_len(), "{}", init.name);
            declared += 1;
        }
    }
    assert!(
        declared >= 20,
        "checkpoint tensors are declared externally: {declared}"
    );
}

#[test]
fn published_configs_build_without_weights_with_expected_structure() {
    for (name, layers, kv_heads, head_dim) in [
        ("llama-3.2-1b", 16, 8, 64),
        ("llama-3.1-8b", 32, 8, 128),
        ("qwen2.5-0.5b", 24, 2, 64),
        ("mistral-7b-v0.3", 32, 8, 128),
        ("llama-3-70b", 80, 8, 128),
    ] {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        build(&real_config(name), &out, &["--no-weights"]);
        let m = load(&out);
        let counts = m.graph.op_counts();
        assert_eq!(counts["Attention"], layers, "{name}");
        assert_eq!(counts["RotaryEmbedding"], 2 * layers, "{name}");
        // Every norm after a residual Add is fused; only the first layer's input norm stays.
        assert_eq!(counts["RMSNormalization"], 1, "{name}");
        assert_eq!(
            counts["com.microsoft::SkipSimplifiedLayerNormalization"],
            2 * layers,
            "{name}"
        );
        let bias_adds = if name.starts_with("qwen") {
            3 * layers
        } else {
            0
        };
        assert_eq!(
            counts.get("Add").copied().unwrap_or(0),
            bias_adds,
            "{name}: residual Adds are fused, q/k/v bias Adds stay"
        );
        assert_eq!(m.graph.inputs.len(), 3 + 2 * layers, "{name}");
        assert_eq!(
            dims(&m, "past_key_values.0.key"),
            [
                "batch".to_string(),
                kv_heads.to_string(),
                "past_sequence_len".into(),
                head_dim.to_string()
            ],
            "{name}"
        );
        let model_bytes = std::fs::metadata(out.join("model.onnx")).unwrap().len();
        assert!(
            model_bytes < 64 << 20,
            "{name}: model.onnx is {model_bytes} bytes"
        );
    }
}

#[test]
fn qwen2_has_biases_and_mistral_reads_v4_spellings() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("qwen2");
    build(&fixture("qwen2"), &out, &[]);
    let m = load(&out);
    let inits: Vec<&str> = m
        .graph
        .initializers
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    assert!(inits.contains(&"model.layers.0.self_attn.q_proj.bias"));
    assert!(!inits.contains(&"model.layers.0.self_attn.o_proj.bias"));
    let out = t.path().join("mistral");
    build(&fixture("mistral"), &out, &[]);
    let genai: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("genai_config.json")).unwrap()).unwrap();
    assert_eq!(genai["model"]["type"], "mistral");
}

#[test]
fn help_lists_the_build_flags() {
    mobius()
        .args(["build", "--help"])
        .assert()
        .success()
        .stdout(contains("--no-weights"))
        .stdout(contains("--overwrite"))
        .stdout(contains("--dtype"))
        .stdout(contains("HF_HUB_OFFLINE"));
}

/// Lays out `fixture` as a Hugging Face cache entry `models--test--tiny` with ref `main`.
fn prepared_cache(fixture_name: &str, cache: &Path) {
    let repo = cache.join("models--test--tiny");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    copy_fixture(fixture_name, &repo.join("snapshots").join(commit));
}

#[test]
fn model_id_builds_offline_from_the_hugging_face_cache() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("hub");
    prepared_cache("llama-bf16-sharded", &cache);
    let out = t.path().join("out");
    mobius()
        .args(["build", "--model", "test/tiny", "--dtype", "f32"])
        .arg(&out)
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .assert()
        .success();
    assert!(out.join("model.onnx.data").exists() && out.join("tokenizer.json").exists());

    let missing = t.path().join("missing");
    mobius()
        .args(["build", "--model", "test/other"])
        .arg(&missing)
        .env("HF_HUB_CACHE", &cache)
        .env("HF_HUB_OFFLINE", "1")
        .assert()
        .failure()
        .stderr(contains("config.json"))
        .stderr(contains("HF_HUB_OFFLINE"));
    assert!(!missing.exists());
}

#[test]
fn verify_rewrites_checks_every_rewrite_on_a_real_build() {
    let t = tempfile::tempdir().unwrap();
    for ep in ["default", "cpu", "onnx-standard"] {
        mobius()
            .args(["build", "-q", "--verify-rewrites", "--ep", ep, "--config"])
            .arg(fixture("llama"))
            .arg(t.path().join(ep))
            .assert()
            .success();
    }
    let out = t.path().join("no-weights");
    mobius()
        .args(["build", "--verify-rewrites", "--no-weights", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .failure()
        .stderr(contains("--verify-rewrites"));
    assert!(!out.exists());
}

/// ALiBi (bloom): where the EP runs GroupQueryAttention, the attention stays opset-24 Attention
/// with the bias as its float mask, and the build says why instead of warning of a missed
/// fusion; the graph reads no position_ids (ALiBi counts positions from attention_mask).
#[test]
fn alibi_attention_stays_attention_and_says_why() {
    let t = tempfile::tempdir().unwrap();
    for (ep, dtype, gqa_ep) in [("cpu", "f32", true), ("onnx-standard", "f32", false)] {
        let out = t.path().join(ep);
        let stderr = build(&fixture("bloom"), &out, &["--ep", ep, "--dtype", dtype]);
        let said = stderr.contains("ALiBi: 2 Attention nodes add the ALiBi bias");
        assert_eq!(said, gqa_ep, "--ep {ep}: {stderr}");
        assert!(
            !stderr.contains("GQA fusion expected"),
            "--ep {ep}: {stderr}"
        );
        let m = load(&out);
        let counts = m.graph.op_counts();
        assert_eq!(counts.get("Attention"), Some(&2), "--ep {ep}: {counts:?}");
        assert_eq!(counts.get("com.microsoft::GroupQueryAttention"), None);
        let masks: Vec<&str> = (m.graph.nodes.iter())
            .filter(|n| n.op_type == "Attention")
            .map(|n| n.inputs[3].as_str())
            .collect();
        assert_eq!(masks, ["alibi_bias", "alibi_bias"], "--ep {ep}");
        let inputs: Vec<&str> = m.graph.inputs.iter().map(|v| v.name.as_str()).collect();
        assert!(!inputs.contains(&"position_ids"), "{inputs:?}");
    }
}
