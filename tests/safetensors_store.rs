//! TensorStore and parse_header on hand-written safetensors files.

use std::path::{Path, PathBuf};

use mobius::ir::DType;
use mobius::source::WeightFiles;
use mobius::weights::store::{parse_header, TensorStore};
use mobius::Error;
use serde_json::json;

/// A tensor to write: name, dtype string, shape, bytes.
type Tensor<'a> = (&'a str, &'a str, &'a [usize], &'a [u8]);

/// The bytes of a safetensors file holding `tensors` laid out back to back.
fn safetensors(tensors: &[Tensor]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    with_header(&serde_json::Value::Object(header).to_string(), &data)
}

/// Length prefix + `header` + `data`.
fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Opens a single-file checkpoint holding `bytes` and returns the error message.
fn single_error(bytes: &[u8]) -> (String, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "model.safetensors", bytes);
    let err = TensorStore::open(&WeightFiles::Single(path.clone())).unwrap_err();
    assert!(
        matches!(err, Error::Safetensors { ref path, .. } if path.ends_with("model.safetensors"))
    );
    (err.to_string(), path)
}

#[test]
fn single_file_tensors_are_found_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let weight = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let bytes = safetensors(&[
        ("z.bias", "F16", &[2], &[0, 60, 0, 64]),
        ("a.weight", "F32", &[2, 3], &weight),
        ("ids", "I64", &[], &7i64.to_le_bytes()),
    ]);
    let path = write(dir.path(), "model.safetensors", &bytes);
    let store = TensorStore::open(&WeightFiles::Single(path.clone())).unwrap();

    assert_eq!(store.len(), 3);
    assert!(!store.is_empty());
    assert_eq!(
        store.names().collect::<Vec<_>>(),
        ["a.weight", "ids", "z.bias"]
    );
    let t = store.get("a.weight").unwrap();
    assert_eq!(
        (t.name, t.dtype, t.shape),
        ("a.weight", DType::F32, &[2, 3][..])
    );
    assert_eq!(t.data, &weight[..]);
    assert_eq!(t.path, path);
    let bias = store.get("z.bias").unwrap();
    assert_eq!((bias.dtype, bias.data), (DType::F16, &[0, 60, 0, 64][..]));
    let scalar = store.get("ids").unwrap();
    assert_eq!(
        (scalar.shape, scalar.data),
        (&[][..], &7i64.to_le_bytes()[..])
    );
    assert!(store.get("__metadata__").is_none());
    assert!(store.get("missing").is_none());
}

#[test]
fn header_entries_carry_absolute_byte_ranges() {
    let bytes = safetensors(&[("a", "U8", &[2], &[1, 2]), ("b", "BOOL", &[1], &[1])]);
    let entries = parse_header(&bytes, Path::new("x.safetensors")).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(&bytes[entries[0].data.clone()], &[1, 2]);
    assert_eq!(&bytes[entries[1].data.clone()], &[1]);
    assert_eq!(entries[1].dtype, DType::Bool);
}

#[test]
fn sharded_checkpoint_spans_all_shards() {
    let dir = tempfile::tempdir().unwrap();
    let one = f32_bytes(&[1.0, 2.0]);
    let two = f32_bytes(&[3.0]);
    write(
        dir.path(),
        "model-00001-of-00002.safetensors",
        &safetensors(&[("layers.0.w", "F32", &[2], &one)]),
    );
    // The second shard also holds a tensor the index does not list: it stays invisible.
    write(
        dir.path(),
        "model-00002-of-00002.safetensors",
        &safetensors(&[
            ("layers.1.w", "F32", &[1], &two),
            ("stray", "U8", &[1], &[9]),
        ]),
    );
    let index = write(
        dir.path(),
        "model.safetensors.index.json",
        json!({"metadata": {"total_size": 12}, "weight_map": {
            "layers.0.w": "model-00001-of-00002.safetensors",
            "layers.1.w": "model-00002-of-00002.safetensors"}})
        .to_string()
        .as_bytes(),
    );
    let store = TensorStore::open(&WeightFiles::Sharded {
        root: dir.path().to_path_buf(),
        index,
    })
    .unwrap();
    assert_eq!(
        store.names().collect::<Vec<_>>(),
        ["layers.0.w", "layers.1.w"]
    );
    let t = store.get("layers.1.w").unwrap();
    assert_eq!(t.data, &two[..]);
    assert!(t.path.ends_with("model-00002-of-00002.safetensors"));
    assert!(store
        .get("layers.0.w")
        .unwrap()
        .path
        .ends_with("model-00001-of-00002.safetensors"));
    assert!(store.get("stray").is_none());
}

#[test]
fn file_shorter_than_length_prefix() {
    let (err, _) = single_error(&[1, 2, 3]);
    assert!(err.contains("truncated: file has 3 bytes"), "{err}");
    let (err, _) = single_error(&[]);
    assert!(err.contains("truncated: file has 0 bytes"), "{err}");
}

#[test]
fn header_longer_than_file() {
    let mut bytes = safetensors(&[("a", "U8", &[1], &[1])]);
    bytes.truncate(20);
    let (err, path) = single_error(&bytes);
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(
        err.contains("truncated: file has 20 bytes, header declares"),
        "{err}"
    );
}

#[test]
fn data_section_truncated() {
    let mut bytes = safetensors(&[("a", "F32", &[4], &[0; 16])]);
    bytes.truncate(bytes.len() - 4);
    let (err, _) = single_error(&bytes);
    assert!(
        err.contains("tensor `a`: data_offsets [0, 16] lie outside the data section of 12 bytes"),
        "{err}"
    );
}

#[test]
fn corrupt_header_json() {
    let (err, _) = single_error(&with_header("{\"a\": {\"dtype\": ", &[]));
    assert!(err.contains("header is not a JSON object"), "{err}");
    let (err, _) = single_error(&with_header("[1, 2]", &[]));
    assert!(err.contains("header is not a JSON object"), "{err}");
    let (err, _) = single_error(&with_header(r#"{"a": {"dtype": "F32"}}"#, &[]));
    assert!(err.contains("tensor `a`: missing field `shape`"), "{err}");
    let mut bytes = 4u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[b'{', 0xff, 0xfe, b'}']);
    let (err, _) = single_error(&bytes);
    assert!(err.contains("header is not valid UTF-8"), "{err}");
}

#[test]
fn header_length_over_limit() {
    let mut bytes = 200_000_000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let (err, _) = single_error(&bytes);
    assert!(
        err.contains("header length 200000000 exceeds the limit"),
        "{err}"
    );
    let (err, _) = single_error(&u64::MAX.to_le_bytes());
    assert!(err.contains("exceeds the limit"), "{err}");
}

#[test]
fn unknown_dtype_names_tensor_and_dtype() {
    let (err, _) = single_error(&safetensors(&[("q.weight", "F8_E5M2", &[2], &[0, 0])]));
    assert!(
        err.contains("tensor `q.weight`: unsupported dtype `F8_E5M2`"),
        "{err}"
    );
}

#[test]
fn offsets_must_match_shape() {
    let header = r#"{"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}"#;
    let (err, _) = single_error(&with_header(header, &[0; 16]));
    assert!(
        err.contains(
            "tensor `w`: data_offsets [0, 12] span 12 bytes, but shape [2, 2] of f32 needs 16"
        ),
        "{err}"
    );
    let header = r#"{"w": {"dtype": "U8", "shape": [1], "data_offsets": [3, 2]}}"#;
    let (err, _) = single_error(&with_header(header, &[0; 4]));
    assert!(err.contains("lie outside the data section"), "{err}");
    let header =
        r#"{"w": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}"#;
    let (err, _) = single_error(&with_header(header, &[]));
    assert!(err.contains("overflows"), "{err}");
}

/// Writes an index with `weight_map` into `dir`.
fn write_index(dir: &Path, weight_map: serde_json::Value) -> PathBuf {
    write(
        dir,
        "model.safetensors.index.json",
        json!({ "weight_map": weight_map }).to_string().as_bytes(),
    )
}

#[test]
fn missing_shard_names_shard_and_index() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.safetensors",
        &safetensors(&[("x", "U8", &[1], &[1])]),
    );
    let index = write_index(
        dir.path(),
        json!({"x": "a.safetensors", "y": "b.safetensors"}),
    );
    let err = TensorStore::open(&WeightFiles::Sharded {
        index: index.clone(),
        root: dir.path().to_path_buf(),
    })
    .unwrap_err();
    assert!(matches!(err, Error::Source(_)));
    let err = err.to_string();
    assert!(err.contains("shard `b.safetensors`"), "{err}");
    assert!(err.contains(&index.display().to_string()), "{err}");
}

#[test]
fn bad_shard_name_in_index() {
    let dir = tempfile::tempdir().unwrap();
    for shard in ["../outside.safetensors", "/abs/x.safetensors"] {
        let index = write_index(dir.path(), json!({"model.embed": shard}));
        let err = TensorStore::open(&WeightFiles::Sharded {
            index: index.clone(),
            root: dir.path().to_path_buf(),
        })
        .unwrap_err();
        assert!(matches!(err, Error::Json { .. }));
        let err = err.to_string();
        assert!(err.contains(&index.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("weight_map entry `model.embed` → `{shard}`")),
            "{err}"
        );
    }
}

#[test]
fn index_entry_absent_from_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.safetensors",
        &safetensors(&[("x", "U8", &[1], &[1])]),
    );
    let index = write_index(
        dir.path(),
        json!({"x": "a.safetensors", "ghost": "a.safetensors"}),
    );
    match TensorStore::open(&WeightFiles::Sharded {
        index: index.clone(),
        root: dir.path().to_path_buf(),
    })
    .unwrap_err()
    {
        Error::MissingTensor { name, searched } => {
            assert_eq!(name, "ghost");
            assert!(searched.contains("a.safetensors"), "{searched}");
            assert!(
                searched.contains(&index.display().to_string()),
                "{searched}"
            );
        }
        other => panic!("expected MissingTensor, got {other}"),
    }
}

#[test]
fn index_that_is_not_json() {
    let dir = tempfile::tempdir().unwrap();
    let index = write(
        dir.path(),
        "model.safetensors.index.json",
        b"{\n\"weight_map\": {\"a\" \"b\"}}",
    );
    match TensorStore::open(&WeightFiles::Sharded {
        root: dir.path().to_path_buf(),
        index,
    })
    .unwrap_err()
    {
        Error::Json { line, column, .. } => assert!(line == 2 && column > 0, "{line}:{column}"),
        other => panic!("expected a JSON error, got {other}"),
    }
}

#[test]
fn missing_single_file_is_an_io_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let err = TensorStore::open(&WeightFiles::Single(path.clone())).unwrap_err();
    assert!(
        matches!(err, Error::Io { path: ref p, .. } if *p == path),
        "{err}"
    );
}

/// Mutated and truncated variants of a valid file must give errors or entries, never panics.
#[test]
fn parse_header_survives_corrupted_input() {
    let valid = safetensors(&[("a", "F32", &[2], &[0; 8]), ("b", "I8", &[3], &[1, 2, 3])]);
    let path = Path::new("fuzz.safetensors");
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut accepted = 0;
    for round in 0..4000 {
        let mut bytes = valid.clone();
        for _ in 0..1 + round % 4 {
            let at = next() as usize % bytes.len();
            bytes[at] = next() as u8;
        }
        if round % 3 == 0 {
            bytes.truncate(next() as usize % (bytes.len() + 1));
        }
        if let Ok(entries) = parse_header(&bytes, path) {
            accepted += 1;
            for e in entries {
                assert!(
                    e.data.end <= bytes.len(),
                    "range {:?} escapes the file",
                    e.data
                );
                let elems: usize = e.shape.iter().product();
                assert_eq!(e.data.len(), elems * e.dtype.size());
            }
        }
    }
    assert!(
        accepted > 0,
        "some mutations (e.g. of tensor bytes) keep the file valid"
    );
}

/// A header of U8 tensors at the given data offsets, followed by `data_len` bytes.
fn u8_layout(tensors: &[(&str, usize, usize)], data_len: usize) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    for (name, begin, end) in tensors {
        header.insert(
            name.to_string(),
            json!({"dtype": "U8", "shape": [end - begin], "data_offsets": [begin, end]}),
        );
    }
    with_header(
        &serde_json::Value::Object(header).to_string(),
        &vec![0; data_len],
    )
}

#[test]
fn byte_ranges_must_tile_the_data_section() {
    let path = Path::new("m.safetensors");
    // In any name order, back to back, zero-length tensors anywhere: accepted.
    let ok = u8_layout(&[("b", 0, 2), ("a", 2, 5), ("empty", 2, 2)], 5);
    let entries = parse_header(&ok, path).unwrap();
    assert_eq!(
        entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["a", "b", "empty"]
    );
    for (tensors, data_len, needle) in [
        (
            &[("a", 0, 4), ("b", 2, 6)][..],
            6,
            "tensor `b`: data_offsets [2, 6] overlap those of tensor `a`",
        ),
        (
            &[("a", 0, 2), ("b", 3, 5)],
            5,
            "leave a gap after tensor `a`",
        ),
        (&[("a", 1, 3)], 3, "gap at the start of the data section"),
        (
            &[("a", 0, 2)],
            3,
            "cover 2 bytes of the data section, but it has 3",
        ),
    ] {
        let err = parse_header(&u8_layout(tensors, data_len), path)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{err}");
        assert!(err.contains("m.safetensors"), "{err}");
    }
}
