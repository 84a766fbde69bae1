//! Bad input: each case gives one clear message on stderr, a non-zero exit code, and leaves
//! no output folder (nor a staging folder) behind.

mod common;

use std::path::Path;

use common::*;
use predicates::str::contains;

/// Runs `mobius build --config SRC OUT` expecting failure whose stderr contains every needle;
/// checks that nothing is left next to OUT.
fn fails(src: &Path, work: &Path, needles: &[&str]) {
    let out = work.join("out");
    let mut assert = mobius()
        .args(["build", "--config"])
        .arg(src)
        .arg(&out)
        .assert()
        .failure();
    for n in needles {
        assert = assert.stderr(contains(*n));
    }
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert_eq!(
        stderr.matches("error:").count(),
        1,
        "one error message: {stderr}"
    );
    assert!(!out.exists(), "output folder left behind");
    let leftovers: Vec<String> = entries(work)
        .into_iter()
        .filter(|e| e.contains("mobius-tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "staging folder left behind: {leftovers:?}"
    );
}

#[test]
fn missing_config_json() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    std::fs::remove_file(src.join("config.json")).unwrap();
    fails(&src, t.path(), &["config.json"]);
}

#[test]
fn invalid_config_json_names_line_and_column() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    std::fs::write(
        src.join("config.json"),
        "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 64,,\n}",
    )
    .unwrap();
    fails(&src, t.path(), &["config.json:3:"]);
}

#[test]
/// An unknown model_type whose architecture is no causal LM (one that is gets the
/// `--assume-llama` offer instead: tests/assume_llama.rs).
fn unsupported_model_type_lists_supported_ones() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    let cfg = std::fs::read_to_string(src.join("config.json")).unwrap();
    std::fs::write(
        src.join("config.json"),
        cfg.replace("\"llama\"", "\"rwkv\"")
            .replace("LlamaForCausalLM", "RwkvModel"),
    )
    .unwrap();
    fails(
        &src,
        t.path(),
        &["unsupported model_type `rwkv`", "llama, mistral, qwen2"],
    );
}

#[test]
fn missing_tensor_is_named() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    let path = src.join("model.safetensors");
    let mut tensors = read_safetensors(&path);
    tensors.remove("model.layers.1.mlp.up_proj.weight").unwrap();
    write_safetensors(&path, &tensors);
    fails(
        &src,
        t.path(),
        &["model.layers.1.mlp.up_proj.weight", "not found"],
    );
}

#[test]
fn wrong_tensor_shape_names_expected_and_actual() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    let path = src.join("model.safetensors");
    let mut tensors = read_safetensors(&path);
    let norm = tensors.get_mut("model.norm.weight").unwrap();
    norm.shape = vec![32];
    norm.data.truncate(32 * 4);
    write_safetensors(&path, &tensors);
    fails(
        &src,
        t.path(),
        &["model.norm.weight", "expected shape [64]", "found [32]"],
    );
}

#[test]
fn truncated_safetensors() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    let path = src.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    fails(&src, t.path(), &["model.safetensors"]);
}

#[test]
fn corrupt_safetensors_header() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama", &t.path().join("ckpt"));
    let path = src.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] = b'#';
    std::fs::write(&path, &bytes).unwrap();
    fails(
        &src,
        t.path(),
        &["model.safetensors", "invalid safetensors"],
    );
}

#[test]
fn missing_shard_is_named() {
    let t = tempfile::tempdir().unwrap();
    let src = copy_fixture("llama-bf16-sharded", &t.path().join("ckpt"));
    let shard = entries(&src)
        .into_iter()
        .find(|e| e.starts_with("model-00002"))
        .unwrap();
    std::fs::remove_file(src.join(&shard)).unwrap();
    fails(&src, t.path(), &[&shard]);
}

#[test]
fn unwritable_output() {
    let t = tempfile::tempdir().unwrap();
    let blocker = t.path().join("a-file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let out = blocker.join("out");
    mobius()
        .args(["build", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .failure()
        .stderr(contains("a-file"));
    assert!(!out.exists());
    assert_eq!(entries(t.path()), vec!["a-file".to_string()]);
}

#[test]
fn non_empty_output_needs_overwrite() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), "mine").unwrap();
    mobius()
        .args(["build", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .failure()
        .stderr(contains("--overwrite"));
    assert_eq!(
        entries(&out),
        vec!["keep.txt".to_string()],
        "existing output untouched"
    );
    mobius()
        .args(["build", "--overwrite", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .success();
    assert!(out.join("model.onnx").exists() && !out.join("keep.txt").exists());
}

#[test]
fn unknown_dtype_is_rejected_by_the_cli() {
    let t = tempfile::tempdir().unwrap();
    mobius()
        .args(["build", "--dtype", "int4", "--config"])
        .arg(fixture("llama"))
        .arg(t.path().join("out"))
        .assert()
        .failure()
        .stderr(contains("f32"));
    assert!(!t.path().join("out").exists());
}

#[test]
fn stacked_experts_that_do_not_fit_the_config_are_named() {
    let t = tempfile::tempdir().unwrap();
    for (field, to, needles) in [
        (
            "\"intermediate_size\": 32",
            "\"intermediate_size\": 48",
            &["block_sparse_moe.input_linear.weight", "as [96, 64]"][..],
        ),
        (
            "\"num_local_experts\": 4",
            "\"num_local_experts\": 8",
            &[
                "router.layer.weight",
                "expected shape [8, 64]",
                "found [4, 64]",
            ][..],
        ),
    ] {
        let src = copy_fixture(
            "granitemoe",
            &t.path().join(to.replace(['"', ':', ' '], "")),
        );
        let config = std::fs::read_to_string(src.join("config.json")).unwrap();
        assert!(config.contains(field), "{field}");
        std::fs::write(src.join("config.json"), config.replace(field, to)).unwrap();
        let work = src.parent().unwrap().join(format!("work-{}", to.len()));
        std::fs::create_dir_all(&work).unwrap();
        fails(&src, &work, needles);
    }
}
