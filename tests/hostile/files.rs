//! Files and paths: external data that leaves the model folder or disagrees with its tensor,
//! graphs that assign a value twice, model files that are not models, shard indexes and
//! tokenizer files that point outside the checkpoint, safetensors whose byte ranges overlap,
//! output folders that would swallow their input, and interrupted builds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use mobius::onnx::proto;
use prost::Message;

use crate::check::{fails_with, listing, unchanged, value, F32};
use crate::common::{copy_fixture, fixture, mobius, read_safetensors, write_safetensors};

fn entry(key: &str, value: &str) -> proto::StringStringEntryProto {
    proto::StringStringEntryProto {
        key: key.into(),
        value: value.into(),
    }
}

/// `y = x + w` on two f32 values, `w` stored as external data in `w.bin` (offset 0, 8 bytes).
fn tiny_model() -> proto::ModelProto {
    let w = proto::TensorProto {
        dims: vec![2],
        data_type: F32,
        name: "w".into(),
        data_location: proto::DATA_LOCATION_EXTERNAL,
        external_data: vec![
            entry("location", "w.bin"),
            entry("offset", "0"),
            entry("length", "8"),
        ],
        ..Default::default()
    };
    let add = proto::NodeProto {
        input: vec!["x".into(), "w".into()],
        output: vec!["y".into()],
        name: "add".into(),
        op_type: "Add".into(),
        ..Default::default()
    };
    proto::ModelProto {
        ir_version: 8,
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(proto::GraphProto {
            node: vec![add],
            name: "tiny".into(),
            initializer: vec![w],
            input: vec![value("x", &[2])],
            output: vec![value("y", &[2])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn graph(m: &mut proto::ModelProto) -> &mut proto::GraphProto {
    m.graph.as_mut().unwrap()
}

/// Sets external data entry `key` of initializer `w` (removing it when `value` is `None`).
fn set_external(m: &mut proto::ModelProto, key: &str, value: Option<&str>) {
    let w = &mut graph(m).initializer[0];
    w.external_data.retain(|e| e.key != key);
    if let Some(v) = value {
        w.external_data.push(entry(key, v));
    }
}

/// Writes the tiny model, changed by `change`, into `root/model` with its `w.bin` (and
/// `secret.bin` in `root`, outside the model folder). Returns the model file.
fn write_model(root: &Path, change: impl FnOnce(&mut proto::ModelProto, &Path)) -> PathBuf {
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let floats = |v: [f32; 2]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.join("w.bin"), floats([1.0, 2.0])).unwrap();
    std::fs::write(root.join("secret.bin"), floats([7.0, 7.0])).unwrap();
    let mut m = tiny_model();
    change(&mut m, &dir);
    let path = dir.join("model.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

/// A float32 .npy array of shape `[n]`.
fn npy(path: &Path, values: &[f32]) {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        values.len()
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, bytes).unwrap();
}

/// `model` is refused, with every needle in the message and nothing written, by `run`
/// (exit 1), `verify` against itself (exit 2) and `optimize` (exit 1).
fn refused_everywhere(root: &Path, model: &Path, needles: &[&str]) {
    let before = listing(root);
    let model_dir = model.parent().unwrap();
    let model_files = listing(model_dir);
    let inputs = tempfile::tempdir().unwrap();
    let input = inputs.path().join("x.npy");
    npy(&input, &[0.5, 0.25]);
    let mut run = mobius();
    run.arg("run")
        .arg(model)
        .arg("--input")
        .arg(format!("x={}", input.display()))
        .arg("--output-dir")
        .arg(root.join("outputs"));
    fails_with(run, 1, needles);
    let mut verify = mobius();
    verify.arg("verify").arg(model).arg(model);
    fails_with(verify, 2, needles);
    let mut optimize = mobius();
    optimize.arg("optimize").arg(model).arg(root.join("opt"));
    fails_with(optimize, 1, needles);
    unchanged(root, &before);
    unchanged(model_dir, &model_files);
}

#[test]
fn the_tiny_model_runs_verifies_and_optimizes() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |_, _| {});
    let input = t.path().join("x.npy");
    npy(&input, &[0.5, 0.25]);
    mobius()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("x={}", input.display()))
        .arg("--output-dir")
        .arg(t.path().join("outputs"))
        .assert()
        .success();
    let y = std::fs::read(t.path().join("outputs/y.npy")).unwrap();
    let tail: Vec<f32> = y[y.len() - 8..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(tail, [1.5, 2.25]);
    mobius()
        .arg("verify")
        .arg(&model)
        .arg(&model)
        .assert()
        .success();
    mobius()
        .arg("optimize")
        .arg(&model)
        .arg(t.path().join("opt"))
        .assert()
        .success();
}

#[cfg(unix)]
#[test]
fn external_data_link_to_a_file_outside_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, dir| {
        std::os::unix::fs::symlink(dir.join("../secret.bin"), dir.join("link.bin")).unwrap();
        set_external(m, "location", Some("link.bin"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "link.bin", "outside"],
    );
}

#[cfg(unix)]
#[test]
fn external_data_in_a_linked_folder_outside_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, dir| {
        std::os::unix::fs::symlink(dir.join(".."), dir.join("sub")).unwrap();
        set_external(m, "location", Some("sub/secret.bin"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "sub/secret.bin", "outside"],
    );
}

#[test]
fn absolute_external_data_location_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let secret = t.path().join("secret.bin");
    let model = write_model(t.path(), |m, _| {
        set_external(m, "location", Some(secret.to_str().unwrap()));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "the path is absolute"],
    );
}

#[test]
fn external_data_location_with_dotdot_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "location", Some("../secret.bin"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "../secret.bin", "the path contains `..`"],
    );
}

#[test]
fn external_data_location_that_is_a_folder_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, dir| {
        std::fs::create_dir(dir.join("data")).unwrap();
        set_external(m, "location", Some("data"));
    });
    refused_everywhere(t.path(), &model, &["initializer `w`", "not a regular file"]);
}

#[test]
fn external_data_location_with_nul_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "location", Some("w.bin\0.txt"));
    });
    refused_everywhere(t.path(), &model, &["initializer `w`", "w.bin\\0.txt"]);
}

#[test]
fn missing_external_data_file_is_named() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "location", Some("gone.bin"));
    });
    refused_everywhere(t.path(), &model, &["initializer `w`", "gone.bin"]);
}

#[test]
fn external_data_length_shorter_than_the_shape_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "length", Some("4"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "length 4", "w.bin", "needs 8 bytes"],
    );
}

#[test]
fn external_data_length_longer_than_the_shape_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, dir| {
        std::fs::write(dir.join("w.bin"), [0u8; 64]).unwrap();
        set_external(m, "length", Some("16"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "length 16", "needs 8"],
    );
}

#[test]
fn external_data_offset_past_the_end_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "offset", Some("4"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &[
            "initializer `w`",
            "4..4+8",
            "past the end",
            "w.bin",
            "(8 bytes)",
        ],
    );
}

#[test]
fn external_data_without_length_in_a_short_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, dir| {
        std::fs::write(dir.join("w.bin"), [0u8; 6]).unwrap();
        set_external(m, "length", None);
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "past the end", "(6 bytes)"],
    );
}

#[test]
fn overflowing_external_data_offset_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "offset", Some(&(u64::MAX - 3).to_string()));
    });
    refused_everywhere(t.path(), &model, &["initializer `w`", "past the end"]);
}

#[test]
fn negative_external_data_offset_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        set_external(m, "offset", Some("-8"));
    });
    refused_everywhere(
        t.path(),
        &model,
        &["initializer `w`", "offset `-8` is not a byte count"],
    );
}

#[test]
fn inline_data_shorter_than_the_shape_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        let w = &mut graph(m).initializer[0];
        w.data_location = 0;
        w.external_data.clear();
        w.raw_data = vec![0; 6];
    });
    refused_everywhere(t.path(), &model, &["tensor `w`", "6 data bytes", "needs 8"]);
}

/// A second node `Neg(x) → output`.
fn add_neg(m: &mut proto::ModelProto, output: &str) {
    graph(m).node.push(proto::NodeProto {
        input: vec!["x".into()],
        output: vec![output.into()],
        name: "neg".into(),
        op_type: "Neg".into(),
        ..Default::default()
    });
}

#[test]
fn two_nodes_producing_one_value_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| add_neg(m, "y"));
    refused_everywhere(
        t.path(),
        &model,
        &["value `y`", "node `add` (Add)", "node `neg` (Neg)"],
    );
}

#[test]
fn node_output_named_like_a_graph_input_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| add_neg(m, "x"));
    refused_everywhere(
        t.path(),
        &model,
        &["value `x`", "graph input", "node `neg`"],
    );
}

#[test]
fn node_output_named_like_an_initializer_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| add_neg(m, "w"));
    refused_everywhere(
        t.path(),
        &model,
        &["value `w`", "initializer", "node `neg`"],
    );
}

#[test]
fn duplicate_initializers_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        let w = graph(m).initializer[0].clone();
        graph(m).initializer.push(w);
    });
    refused_everywhere(t.path(), &model, &["initializer `w` is declared twice"]);
}

#[test]
fn duplicate_graph_inputs_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        graph(m).input.push(value("x", &[2]));
    });
    refused_everywhere(t.path(), &model, &["graph input `x` is declared twice"]);
}

#[test]
fn model_path_that_is_a_folder_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |_, dir| {
        std::fs::create_dir(dir.join("folder.onnx")).unwrap();
    });
    let folder = model.with_file_name("folder.onnx");
    refused_everywhere(t.path(), &folder, &["folder.onnx", "not a file"]);
}

#[test]
fn empty_model_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |_, _| {});
    std::fs::write(&model, b"").unwrap();
    refused_everywhere(t.path(), &model, &["model.onnx", "empty"]);
}

#[test]
fn truncated_model_file_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |_, _| {});
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() - 5]).unwrap();
    refused_everywhere(t.path(), &model, &["model.onnx", "not an ONNX model"]);
}

#[cfg(unix)]
#[test]
fn a_model_file_that_is_a_link_is_followed_but_its_data_stays_in_its_folder() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |_, _| {});
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let link = elsewhere.join("linked.onnx");
    std::os::unix::fs::symlink(&model, &link).unwrap();
    // The user named the link: it is read. Its external data is looked up next to the link,
    // where there is none.
    let mut verify = mobius();
    verify.arg("verify").arg(&link).arg(&model);
    fails_with(verify, 2, &["initializer `w`", "w.bin"]);
    std::fs::copy(model.with_file_name("w.bin"), elsewhere.join("w.bin")).unwrap();
    mobius()
        .arg("verify")
        .arg(&link)
        .arg(&model)
        .assert()
        .success();
}

/// `build --config CKPT OUT` (plus `extra`) fails with `code` and the needles; nothing is
/// written next to OUT nor into CKPT.
fn build_refused(ckpt: &Path, out: &Path, extra: &[&str], code: i32, needles: &[&str]) {
    let ckpt_files = listing(ckpt);
    let parent = out.parent().unwrap();
    let around = listing(parent);
    let mut build = mobius();
    build
        .arg("build")
        .arg("--config")
        .arg(ckpt)
        .arg(out)
        .args(extra);
    fails_with(build, code, needles);
    unchanged(ckpt, &ckpt_files);
    unchanged(parent, &around);
}

/// The llama fixture as a two-shard checkpoint in `dir`: `a.safetensors` holds the
/// embedding, `b.safetensors` the rest; `shard_b` is the name the index gives the second.
fn sharded_llama(dir: &Path, shard_b: &str) {
    copy_fixture("llama", dir);
    let tensors = read_safetensors(&dir.join("model.safetensors"));
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let (a, b): (Vec<_>, Vec<_>) = tensors
        .into_iter()
        .partition(|(name, _)| name.contains("embed_tokens"));
    write_safetensors(&dir.join("a.safetensors"), &a.iter().cloned().collect());
    write_safetensors(&dir.join("b.safetensors"), &b.iter().cloned().collect());
    let mut map = serde_json::Map::new();
    for (name, _) in &a {
        map.insert(name.clone(), "a.safetensors".into());
    }
    for (name, _) in &b {
        map.insert(name.clone(), shard_b.into());
    }
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::json!({ "weight_map": map }).to_string(),
    )
    .unwrap();
}

#[test]
fn sharded_checkpoint_builds() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "b.safetensors");
    mobius()
        .arg("build")
        .arg("--config")
        .arg(&ckpt)
        .arg(t.path().join("out"))
        .assert()
        .success();
}

#[test]
fn shard_name_with_dotdot_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "../b.safetensors");
    std::fs::copy(ckpt.join("b.safetensors"), t.path().join("b.safetensors")).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["model.safetensors.index.json", "`../b.safetensors`", "`..`"],
    );
}

#[cfg(unix)]
#[test]
fn shard_that_links_outside_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "b.safetensors");
    std::fs::rename(ckpt.join("b.safetensors"), t.path().join("b.safetensors")).unwrap();
    std::os::unix::fs::symlink(t.path().join("b.safetensors"), ckpt.join("b.safetensors")).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["shard `b.safetensors`", "outside"],
    );
}

#[cfg(unix)]
#[test]
fn shard_in_a_linked_folder_outside_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "shards/b.safetensors");
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::rename(ckpt.join("b.safetensors"), outside.join("b.safetensors")).unwrap();
    std::os::unix::fs::symlink(&outside, ckpt.join("shards")).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["shard `shards/b.safetensors`", "outside"],
    );
}

/// A shard missing from a linked folder outside is refused as outside: the error does not
/// tell whether a file of that name exists there.
#[cfg(unix)]
#[test]
fn missing_shard_in_a_linked_folder_outside_is_refused_as_outside() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "shards/b.safetensors");
    let outside = t.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::remove_file(ckpt.join("b.safetensors")).unwrap();
    std::os::unix::fs::symlink(&outside, ckpt.join("shards")).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["shard `shards/b.safetensors`", "outside"],
    );
}

#[test]
fn missing_shard_is_named() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "c.safetensors");
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &[
            "shard `c.safetensors` listed in",
            "model.safetensors.index.json",
            "is missing: expected the file",
        ],
    );
}

/// Rewrites the llama fixture's safetensors header in `ckpt` with `change` applied to the
/// parsed header (tensor name → entry); the data section is kept.
fn edit_header(ckpt: &Path, change: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let path = ckpt.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    change(&mut header);
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&path, out).unwrap();
}

#[test]
fn overlapping_safetensors_offsets_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    // Two tensors of the same size: the second is made to read the first's bytes.
    edit_header(&ckpt, |h| {
        let norm = h["model.layers.0.input_layernorm.weight"]["data_offsets"].clone();
        h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] = norm;
    });
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["model.safetensors", "overlap", "layernorm.weight"],
    );
}

#[test]
fn trailing_bytes_after_the_safetensors_data_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    let path = ckpt.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0; 16]);
    std::fs::write(&path, bytes).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["model.safetensors", "trailing bytes"],
    );
}

#[cfg(unix)]
#[test]
fn tokenizer_file_that_links_outside_is_not_copied() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    std::fs::rename(ckpt.join("tokenizer.json"), t.path().join("secret.json")).unwrap();
    std::os::unix::fs::symlink(t.path().join("secret.json"), ckpt.join("tokenizer.json")).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["tokenizer file", "tokenizer.json", "outside"],
    );
}

#[test]
fn build_into_its_own_checkpoint_folder_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    build_refused(
        &ckpt,
        &ckpt,
        &["--overwrite"],
        2,
        &["output folder", "is the checkpoint folder"],
    );
}

#[test]
fn build_into_a_folder_inside_the_checkpoint_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    let out = ckpt.join("onnx");
    build_refused(&ckpt, &out, &[], 2, &["is inside the checkpoint folder"]);
    assert!(!out.exists());
}

#[test]
fn build_into_a_folder_containing_the_checkpoint_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("work");
    let ckpt = copy_fixture("llama", &work.join("ckpt"));
    build_refused(
        &ckpt,
        &work,
        &["--overwrite"],
        2,
        &["contains the checkpoint folder"],
    );
}

#[cfg(unix)]
#[test]
fn build_into_a_link_to_the_checkpoint_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&ckpt, &link).unwrap();
    build_refused(
        &ckpt,
        &link,
        &["--overwrite"],
        2,
        &["is the checkpoint folder"],
    );
}

#[test]
fn optimize_into_the_model_folder_or_around_it_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |_, _| {});
    let model_dir = model.parent().unwrap();
    for (out, needle) in [
        (model_dir.to_path_buf(), "is the model folder"),
        (t.path().to_path_buf(), "contains the model folder"),
    ] {
        let files = listing(model_dir);
        let around = listing(t.path());
        let mut optimize = mobius();
        optimize
            .arg("optimize")
            .arg(&model)
            .arg(&out)
            .arg("--overwrite");
        fails_with(optimize, 2, &["output folder", needle]);
        unchanged(model_dir, &files);
        unchanged(t.path(), &around);
    }
}

/// A llama checkpoint whose embedding has 8 million rows of f32 (2 GiB, stored sparse): saving
/// it in f16 takes long enough to interrupt (0.7 s here uninterrupted, with the page cache warm;
/// a million rows took 0.07 s once the weights were streamed at disk speed, which a loaded
/// machine could miss).
fn slow_checkpoint(dir: &Path) {
    copy_fixture("llama", dir);
    let rows: usize = 1 << 23;
    let mut tensors = read_safetensors(&dir.join("model.safetensors"));
    let hidden = tensors["model.embed_tokens.weight"].shape[1];
    tensors.remove("model.embed_tokens.weight");
    write_safetensors(&dir.join("model.safetensors"), &tensors);
    // Append the embedding as the last tensor: extend the header, then the (sparse) data.
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let len = rows * hidden * 4;
    header.insert(
        "model.embed_tokens.weight".into(),
        serde_json::json!({"dtype": "F32", "shape": [rows, hidden],
                           "data_offsets": [data.len(), data.len() + len]}),
    );
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    let total = (out.len() + len) as u64;
    std::fs::write(&path, out).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(total)
        .unwrap();
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config["vocab_size"] = rows.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

/// Starts a build of the slow checkpoint, sends `signal` (SIG`name`) once its staging folder
/// appears, and expects exit code `code` with nothing left next to the output.
#[cfg(unix)]
fn interrupted(signal: libc::c_int, name: &str, code: i32) {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    slow_checkpoint(&ckpt);
    let work = t.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut build = std::process::Command::new(assert_cmd::cargo::cargo_bin("mobius"));
    build
        .args(["-q", "build", "--dtype", "f16", "--config"])
        .arg(&ckpt)
        .arg(work.join("out"))
        .stderr(Stdio::piped());
    // The build keeps a signal it started with ignored (as `nohup` means it), and a test run
    // started in the background of a non-interactive shell passes SIGINT and SIGQUIT on
    // ignored: the build starts with the signal's default action, whatever this process has.
    // SAFETY: signal() is async-signal-safe, and the closure touches nothing else.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut build, move || {
            if libc::signal(signal, libc::SIG_DFL) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = build.spawn().unwrap();
    let staging = format!(".out.mobius-tmp-{}", child.id());
    let started = Instant::now();
    while !work.join(&staging).exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the build ended before its staging folder was seen"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no staging folder"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Sent at once (no `kill` process to start first, which a loaded machine can delay).
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill takes no pointer; the child is ours and not yet waited for.
    let sent = unsafe { libc::kill(pid, signal) };
    assert_eq!(sent, 0, "kill failed");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("interrupted by SIG{name}")),
        "{stderr}"
    );
    assert_eq!(listing(&work), Vec::<String>::new(), "left behind");
}

#[cfg(unix)]
#[test]
fn sigterm_during_a_build_removes_the_staging_folder() {
    interrupted(libc::SIGTERM, "TERM", 143);
}

#[cfg(unix)]
#[test]
fn sigint_during_a_build_removes_the_staging_folder() {
    interrupted(libc::SIGINT, "INT", 130);
}

#[cfg(target_os = "linux")]
#[test]
fn stale_staging_folders_of_dead_processes_are_removed_live_ones_kept() {
    let t = tempfile::tempdir().unwrap();
    // A process that has exited: its pid names no process any more.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    assert!(!Path::new(&format!("/proc/{dead_pid}")).exists());
    let stale = t.path().join(format!(".out.mobius-tmp-{dead_pid}"));
    let live = t
        .path()
        .join(format!(".out.mobius-tmp-{}", std::process::id()));
    for dir in [&stale, &live] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("model.onnx"), b"partial").unwrap();
    }
    mobius()
        .arg("build")
        .arg("--config")
        .arg(fixture("llama"))
        .arg(t.path().join("out"))
        .assert()
        .success();
    assert!(!stale.exists(), "stale staging folder kept");
    assert!(live.exists(), "a live process's staging folder was removed");
    assert!(t.path().join("out/model.onnx").is_file());
}

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// A Hugging Face cache in `cache` holding repo `org/tiny` at `main`: the llama fixture's files
/// as blobs, linked from the snapshot folder as the hub client stores them. Returns the
/// snapshot folder.
#[cfg(unix)]
fn cached_repo(cache: &Path) -> PathBuf {
    let repo = cache.join("models--org--tiny");
    let snapshot = repo.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    for (i, name) in listing(&fixture("llama")).iter().enumerate() {
        let blob = repo.join("blobs").join(format!("blob{i}"));
        std::fs::copy(fixture("llama").join(name), &blob).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/blob{i}"), snapshot.join(name)).unwrap();
    }
    snapshot
}

/// `build --model org/tiny OUT` offline from `cache`.
#[cfg(unix)]
fn hub_build(cache: &Path, out: &Path) -> assert_cmd::Command {
    let mut build = mobius();
    build
        .env("HF_HUB_CACHE", cache)
        .env("HF_HUB_OFFLINE", "1")
        .args(["build", "--model", "org/tiny"])
        .arg(out);
    build
}

#[cfg(unix)]
#[test]
fn hub_cache_links_into_blobs_are_followed_links_out_of_the_repo_are_not() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let snapshot = cached_repo(&cache);
    hub_build(&cache, &t.path().join("out")).assert().success();
    assert!(t.path().join("out/tokenizer.json").is_file());

    std::fs::write(t.path().join("secret.json"), "{}").unwrap();
    std::fs::remove_file(snapshot.join("tokenizer.json")).unwrap();
    std::os::unix::fs::symlink(
        t.path().join("secret.json"),
        snapshot.join("tokenizer.json"),
    )
    .unwrap();
    let around = listing(t.path());
    fails_with(
        hub_build(&cache, &t.path().join("out2")),
        1,
        &["tokenizer file", "tokenizer.json", "outside"],
    );
    unchanged(t.path(), &around);
}

#[cfg(unix)]
#[test]
fn build_into_the_hub_cache_folder_of_its_repo_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    cached_repo(&cache);
    let repo = cache.join("models--org--tiny");
    for (out, needle) in [
        (repo.join("onnx"), "is inside the checkpoint folder"),
        (cache.clone(), "contains the checkpoint folder"),
    ] {
        let files = listing(&repo);
        let around = listing(&cache);
        let mut build = hub_build(&cache, &out);
        build.arg("--overwrite");
        fails_with(build, 2, &["output folder", needle, "models--org--tiny"]);
        unchanged(&repo, &files);
        unchanged(&cache, &around);
    }
}

#[test]
fn a_node_reading_its_own_output_is_a_cycle() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        graph(m).node[0].input[0] = "y".into();
    });
    refused_everywhere(t.path(), &model, &["cycle", "node `add` (Add)"]);
}

#[test]
fn two_nodes_reading_each_other_are_a_cycle() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        graph(m).node[0].input[0] = "z".into();
        add_neg(m, "z");
        graph(m).node[1].input[0] = "y".into();
    });
    refused_everywhere(
        t.path(),
        &model,
        &["cycle", "node `add` (Add) → node `neg` (Neg)"],
    );
}

#[test]
fn an_output_without_shape_is_taken_and_kept_without_one() {
    // onnxruntime runs such a model (ONNX's checker asks for a shape): run, verify and
    // optimize take it, and the optimized model declares the output as the input did.
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        let y = &mut graph(m).output[0];
        y.r#type
            .as_mut()
            .unwrap()
            .tensor_type
            .as_mut()
            .unwrap()
            .shape = None;
    });
    let input = t.path().join("x.npy");
    npy(&input, &[0.5, 0.25]);
    mobius()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("x={}", input.display()))
        .arg("--output-dir")
        .arg(t.path().join("outputs"))
        .assert()
        .success();
    mobius()
        .arg("verify")
        .arg(&model)
        .arg(&model)
        .assert()
        .success();
    let opt = t.path().join("opt");
    mobius()
        .arg("optimize")
        .arg(&model)
        .arg(&opt)
        .assert()
        .success();
    let saved =
        proto::ModelProto::decode(&*std::fs::read(opt.join("model.onnx")).unwrap()).unwrap();
    let y = &saved.graph.unwrap().output[0];
    assert!(y
        .r#type
        .as_ref()
        .unwrap()
        .tensor_type
        .as_ref()
        .unwrap()
        .shape
        .is_none());
}

#[test]
fn an_input_without_shape_is_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        let x = &mut graph(m).input[0];
        x.r#type
            .as_mut()
            .unwrap()
            .tensor_type
            .as_mut()
            .unwrap()
            .shape = None;
    });
    refused_everywhere(t.path(), &model, &["value `x` declares no shape"]);
}

#[test]
fn a_model_without_a_default_domain_opset_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| m.opset_import[0].domain = "other".into());
    refused_everywhere(t.path(), &model, &["no opset of the default ONNX domain"]);
}

#[test]
fn opset_versions_out_of_range_are_refused() {
    for version in [-1, 0, 1 << 62] {
        let t = tempfile::tempdir().unwrap();
        let model = write_model(t.path(), |m, _| m.opset_import[0].version = version);
        refused_everywhere(
            t.path(),
            &model,
            &[
                &format!("opset import of the default domain has version {version}"),
                "expected 1 to 1000",
            ],
        );
    }
}

#[test]
fn an_initializer_that_is_also_a_graph_input_is_refused_everywhere() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| graph(m).input.push(value("w", &[2])));
    refused_everywhere(
        t.path(),
        &model,
        &[
            "`w` is both a graph input and an initializer (an input with a default value); \
           mobius does not support input defaults",
        ],
    );
}

/// Before IR 4 every initializer was also listed as a graph input: such a model runs, with
/// `w` a constant (only `x` is asked for).
#[test]
fn initializers_listed_as_inputs_before_ir_4_are_constants() {
    let t = tempfile::tempdir().unwrap();
    let model = write_model(t.path(), |m, _| {
        m.ir_version = 3;
        graph(m).input.push(value("w", &[2]));
    });
    let input = t.path().join("x.npy");
    npy(&input, &[0.5, 0.25]);
    mobius()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("x={}", input.display()))
        .arg("--output-dir")
        .arg(t.path().join("outputs"))
        .assert()
        .success();
    assert!(t.path().join("outputs/y.npy").is_file());
}

#[test]
fn a_tensor_listed_twice_in_the_shard_index_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "b.safetensors");
    let index = ckpt.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).unwrap();
    let twice = text.replacen(
        "\"weight_map\":{",
        "\"weight_map\":{\"model.embed_tokens.weight\":\"b.safetensors\",",
        1,
    );
    assert_ne!(twice, text);
    std::fs::write(&index, twice).unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &[
            "model.safetensors.index.json",
            "tensor `model.embed_tokens.weight` is listed twice",
        ],
    );
}

#[test]
fn a_shard_index_with_too_many_shards_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = t.path().join("ckpt");
    sharded_llama(&ckpt, "b.safetensors");
    let map: serde_json::Map<String, serde_json::Value> = (0..100_000)
        .map(|i| (format!("t{i}"), format!("s{i}.safetensors").into()))
        .collect();
    std::fs::write(
        ckpt.join("model.safetensors.index.json"),
        serde_json::json!({ "weight_map": map }).to_string(),
    )
    .unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["100000 shard files", "limit of 4096"],
    );
}

#[cfg(unix)]
#[test]
fn sighup_during_a_build_removes_the_staging_folder() {
    interrupted(libc::SIGHUP, "HUP", 129);
}

#[cfg(unix)]
#[test]
fn sigquit_during_a_build_removes_the_staging_folder() {
    interrupted(libc::SIGQUIT, "QUIT", 131);
}

/// Replaces checkpoint file `name` in `ckpt` with something that is not a regular file:
/// `kind` is `fifo`, `folder`, `dangling` (a link to nothing) or `zero` (a link to /dev/zero).
#[cfg(unix)]
fn not_a_file(ckpt: &Path, name: &str, kind: &str) {
    let path = ckpt.join(name);
    let _ = std::fs::remove_file(&path);
    match kind {
        "fifo" => crate::run::fifo(&path),
        "folder" => std::fs::create_dir(&path).unwrap(),
        "dangling" => std::os::unix::fs::symlink(ckpt.join("nothing-here"), &path).unwrap(),
        "zero" => std::os::unix::fs::symlink("/dev/zero", &path).unwrap(),
        other => panic!("unknown kind {other}"),
    }
}

#[cfg(unix)]
#[test]
fn known_checkpoint_files_that_are_not_regular_files_are_named_not_skipped() {
    let names = [
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ];
    for name in names {
        for kind in ["fifo", "folder", "dangling", "zero"] {
            let t = tempfile::tempdir().unwrap();
            let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
            not_a_file(&ckpt, name, kind);
            let mut build = mobius();
            build
                .arg("build")
                .arg("--config")
                .arg(&ckpt)
                .arg(t.path().join("out"))
                .timeout(Duration::from_secs(60));
            let around = listing(t.path());
            fails_with(build, 1, &[name, "exists but is not a regular file"]);
            unchanged(t.path(), &around);
        }
    }
}

#[test]
fn a_tokenizer_file_over_one_gib_is_refused_and_nothing_is_written() {
    let t = tempfile::tempdir().unwrap();
    let ckpt = copy_fixture("llama", &t.path().join("ckpt"));
    // Sparse: takes no disk space.
    std::fs::File::create(ckpt.join("tokenizer.json"))
        .unwrap()
        .set_len((1 << 30) + 1)
        .unwrap();
    build_refused(
        &ckpt,
        &t.path().join("out"),
        &[],
        1,
        &["tokenizer.json", "1073741824 bytes (1 GiB)"],
    );
}
