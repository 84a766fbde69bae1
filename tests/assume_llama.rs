//! `mobius build --assume-llama`: a copy of the llama fixture whose `model_type` no family
//! answers to builds as llama only with the flag, only when its config.json and every
//! checkpoint tensor match the Llama layout, and then gives the llama fixture's very graph.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// The llama fixture copied into `dir`, its `model_type` renamed to `myllama` (architectures
/// `MyLlamaForCausalLM`), with `edit` applied to its config.json.
fn renamed_llama(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> PathBuf {
    let src = copy_fixture("llama", &dir.join("ckpt"));
    let path = src.join("config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let map = cfg.as_object_mut().unwrap();
    map.insert("model_type".into(), "myllama".into());
    map.insert(
        "architectures".into(),
        serde_json::json!(["MyLlamaForCausalLM"]),
    );
    edit(map);
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    src
}

/// Runs `mobius build --config src out --ep cpu -q` with `extra` flags; the error text when it
/// fails (exit code 1 or 2), `None` when it succeeds.
fn build(src: &Path, out: &Path, extra: &[&str]) -> Option<String> {
    let mut cmd = mobius();
    cmd.arg("build").arg("--config").arg(src).arg(out);
    cmd.args(["--ep", "cpu", "-q"]).args(extra);
    let output = cmd.output().unwrap();
    if output.status.success() {
        return None;
    }
    assert!(matches!(output.status.code(), Some(1 | 2)), "{output:?}");
    Some(String::from_utf8(output.stderr).unwrap())
}

/// Edits the checkpoint of `src` with `edit`.
fn edit_tensors(src: &Path, edit: impl FnOnce(&mut std::collections::BTreeMap<String, RawTensor>)) {
    let path = src.join("model.safetensors");
    let mut tensors = read_safetensors(&path);
    edit(&mut tensors);
    write_safetensors(&path, &tensors);
}

#[test]
fn without_the_flag_the_error_names_the_file_the_type_and_the_flag() {
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |_| {});
    let out = t.path().join("out");
    let err = build(&src, &out, &[]).expect("refused without --assume-llama");
    assert!(
        err.contains("config.json: field `model_type`: `myllama`")
            && err.contains("MyLlamaForCausalLM")
            && err.contains("--assume-llama"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn with_the_flag_it_builds_the_llama_fixtures_graph() {
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |_| {});
    let (assumed, plain) = (t.path().join("assumed"), t.path().join("plain"));
    assert_eq!(build(&src, &assumed, &["--assume-llama"]), None);
    assert_eq!(build(&fixture("llama"), &plain, &[]), None);
    for file in ["model.onnx", "model.onnx.data"] {
        assert!(
            std::fs::read(assumed.join(file)).unwrap() == std::fs::read(plain.join(file)).unwrap(),
            "{file} differs from the llama fixture's"
        );
    }
    let genai: Value =
        serde_json::from_slice(&std::fs::read(assumed.join("genai_config.json")).unwrap()).unwrap();
    assert_eq!(genai["model"]["type"], "llama");
}

#[test]
fn a_registered_type_is_built_as_itself_with_the_flag() {
    let t = tempfile::tempdir().unwrap();
    let (flagged, plain) = (t.path().join("flagged"), t.path().join("plain"));
    assert_eq!(
        build(&fixture("qwen2"), &flagged, &["--assume-llama"]),
        None
    );
    assert_eq!(build(&fixture("qwen2"), &plain, &[]), None);
    let read = |dir: &Path| std::fs::read(dir.join("model.onnx")).unwrap();
    assert!(read(&flagged) == read(&plain));
}

#[test]
fn every_tensor_is_checked_against_the_llama_layout() {
    let q = "model.layers.1.self_attn.q_proj.weight";
    type Edit = Box<dyn FnOnce(&mut std::collections::BTreeMap<String, RawTensor>)>;
    let cases: Vec<(Edit, Vec<String>)> = vec![
        (
            Box::new(|t| {
                let norm = t["model.layers.0.input_layernorm.weight"].clone();
                t.insert("model.layers.0.self_attn.q_norm.weight".into(), norm);
            }),
            vec![
                "checkpoint tensor `model.layers.0.self_attn.q_norm.weight` is not part of the \
                 Llama layout"
                    .into(),
                "model.layers.N.* for N in 0..=1".into(),
                "(the head is tied)".into(),
            ],
        ),
        (
            Box::new(move |t| {
                t.remove(q);
            }),
            vec![format!("tensor `{q}` not found"), "Llama layout".into()],
        ),
        (
            Box::new(move |t| {
                let w = t.get_mut(q).unwrap();
                w.shape = vec![32, 128];
            }),
            vec![
                format!("tensor `{q}`"),
                "expected shape [64, 64], found [32, 128]".into(),
            ],
        ),
    ];
    for (edit, expected) in cases {
        let t = tempfile::tempdir().unwrap();
        let src = renamed_llama(t.path(), |_| {});
        edit_tensors(&src, edit);
        let out = t.path().join("out");
        let err = build(&src, &out, &["--assume-llama"]).expect("refused");
        for part in &expected {
            assert!(err.contains(part.as_str()), "{err}\nexpected: {part}");
        }
        assert!(!out.exists(), "no partial output");
    }
}

#[test]
fn an_untied_checkpoint_with_a_tied_config_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |_| {});
    edit_tensors(&src, |t| {
        let embed = t["model.embed_tokens.weight"].clone();
        t.insert("lm_head.weight".into(), embed);
    });
    let err = build(&src, &t.path().join("out"), &["--assume-llama"]).expect("refused");
    assert!(
        err.contains("`lm_head.weight` is not part of the Llama layout"),
        "{err}"
    );
}

#[test]
fn a_field_of_another_familys_computation_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |m| {
        m.insert("logit_scale".into(), 0.25.into());
    });
    let err = build(&src, &t.path().join("out"), &["--assume-llama"]).expect("refused");
    assert!(
        err.contains("config.json: field `logit_scale`: 0.25 is not part of the Llama layout"),
        "{err}"
    );
    // `false` and `null` say the feature is off.
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |m| {
        m.insert("qk_layernorm".into(), false.into());
        m.insert("logit_scale".into(), Value::Null);
    });
    assert_eq!(
        build(&src, &t.path().join("out"), &["--assume-llama"]),
        None
    );
}

#[test]
fn only_causal_lms_are_assumed_and_only_with_weights() {
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |m| {
        m.insert("architectures".into(), serde_json::json!(["MyLlamaModel"]));
    });
    let err = build(&src, &t.path().join("out"), &["--assume-llama"]).expect("refused");
    assert!(err.contains("unsupported model_type `myllama`"), "{err}");
    let t = tempfile::tempdir().unwrap();
    let src = renamed_llama(t.path(), |_| {});
    let err = build(
        &src,
        &t.path().join("out"),
        &["--assume-llama", "--no-weights"],
    )
    .expect("refused");
    assert!(err.contains("drop --no-weights"), "{err}");
}

#[test]
fn help_explains_the_flag() {
    let out = mobius().args(["build", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("--assume-llama") && help.contains("ForCausalLM"),
        "{help}"
    );
}
