//! Export → import → export gives identical files; imported initializers reference the
//! external data they came from.

mod common;

use std::path::Path;

use common::*;
use mobius::ir::TensorSource;
use mobius::onnx::export::{encode_model, model_proto, plan_layout, Placement};
use mobius::onnx::functions::KnownFunctions;
use mobius::onnx::{export, import};
use mobius::rulebook::contrib_functions::ContribFunctions;
use mobius::weights::eval::Evaluator;

#[test]
fn built_model_round_trips_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let first = t.path().join("first");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("qwen2"))
        .arg(&first)
        .assert()
        .success();

    let model = import::load(&first.join("model.onnx"), &ContribFunctions).unwrap();
    assert!(model
        .graph
        .initializers
        .iter()
        .any(|i| matches!(i.source, Some(TensorSource::External { .. }))));
    let second = t.path().join("second");
    std::fs::create_dir(&second).unwrap();
    let mut ev = Evaluator::new(None);
    export::save(
        &model,
        &second,
        &mut ev,
        &indicatif::ProgressBar::hidden(),
        &ContribFunctions,
    )
    .unwrap();
    for file in ["model.onnx", "model.onnx.data"] {
        assert_eq!(
            std::fs::read(first.join(file)).unwrap(),
            std::fs::read(second.join(file)).unwrap(),
            "{file} differs after a round trip"
        );
    }
    let again = import::load(&second.join("model.onnx"), &ContribFunctions).unwrap();
    assert_eq!(again.graph.nodes, model.graph.nodes);
    assert_eq!(again.graph.inputs, model.graph.inputs);
    assert_eq!(again.graph.outputs, model.graph.outputs);
}

#[test]
fn external_data_is_aligned() {
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .success();
    let model = import::load(&out.join("model.onnx"), &ContribFunctions).unwrap();
    let mut external = 0;
    for init in &model.graph.initializers {
        if let Some(TensorSource::External { offset, length, .. }) = &init.source {
            external += 1;
            let align = if *length >= 1 << 16 { 1 << 16 } else { 64 };
            assert_eq!(offset % align, 0, "{} at {offset}", init.name);
        }
    }
    assert!(external > 10);
}

#[test]
fn import_rejects_garbage_and_escaping_locations() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("bad.onnx");
    std::fs::write(&path, b"\xff\xff\xff not protobuf").unwrap();
    let err = import::load(&path, &ContribFunctions)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.onnx") && err.contains("not an ONNX model"),
        "{err}"
    );

    let out = t.path().join("out");
    mobius()
        .args(["build", "-q", "--config"])
        .arg(fixture("llama"))
        .arg(&out)
        .assert()
        .success();
    let bytes = std::fs::read(out.join("model.onnx")).unwrap();
    let needle = b"model.onnx.data";
    let mut patched = bytes.clone();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    patched[at..at + 3].copy_from_slice(b"../");
    std::fs::write(out.join("model.onnx"), patched).unwrap();
    let err = import::load(&out.join("model.onnx"), &ContribFunctions)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unsafe path") && err.contains("`../el.onnx.data`"),
        "{err}"
    );
}

/// One-byte-per-value 4-bit data: `n` values cycling through the type's range.
fn four_bit(dtype: mobius::ir::DType, shape: Vec<usize>) -> mobius::ir::TensorData {
    let n: usize = shape.iter().product();
    let bytes = (0..n)
        .map(|i| match dtype {
            mobius::ir::DType::I4 => ((i * 7 % 16) as i8 - 8) as u8,
            _ => (i * 5 % 16) as u8,
        })
        .collect();
    mobius::ir::TensorData {
        dtype,
        shape,
        bytes,
    }
}

#[test]
fn four_bit_initializers_are_packed_in_the_file_and_read_back_unpacked() {
    use mobius::ir::{DType, GraphBuilder, Initializer, Model, Shape};
    use mobius::onnx::proto;
    use prost::Message;

    // inline (packed under 256 bytes) and external, odd and even counts
    let tensors = [
        ("i4_inline_odd", four_bit(DType::I4, vec![5])),
        ("u4_inline_even", four_bit(DType::U4, vec![2, 3])),
        ("i4_external_odd", four_bit(DType::I4, vec![601])),
        ("u4_external_even", four_bit(DType::U4, vec![40, 25])),
    ];
    let mut g = GraphBuilder::new("four_bit");
    for (name, data) in &tensors {
        g.initializer(Initializer {
            name: name.to_string(),
            dtype: data.dtype,
            shape: data.shape.clone(),
            source: Some(TensorSource::Inline(data.clone())),
        });
        let y = g.op("Cast", &[name], vec![("to", mobius::ir::Attr::Int(1))]);
        g.output(
            &y,
            DType::F32,
            Shape::new(data.shape.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        );
    }
    let model = Model {
        graph: g.finish(),
        opsets: [(String::new(), 24)].into(),
        ir_version: 11,
        producer_name: "test".into(),
        producer_version: "0".into(),
    };
    let t = tempfile::tempdir().unwrap();
    let (first, second) = (t.path().join("first"), t.path().join("second"));
    for dir in [&first, &second] {
        std::fs::create_dir(dir).unwrap();
    }
    let hidden = indicatif::ProgressBar::hidden();
    export::save(
        &model,
        &first,
        &mut Evaluator::new(None),
        &hidden,
        &ContribFunctions,
    )
    .unwrap();

    // The file: two values per byte, low nibble first; external lengths are packed sizes.
    let bytes = std::fs::read(first.join("model.onnx")).unwrap();
    let data = std::fs::read(first.join("model.onnx.data")).unwrap();
    let file = proto::ModelProto::decode(&bytes[..]).unwrap();
    for (t, (name, values)) in file.graph.unwrap().initializer.iter().zip(&tensors) {
        assert_eq!(&t.name, name);
        let packed = mobius::ir::pack_4bit(&values.bytes);
        assert_eq!(packed.len(), values.bytes.len().div_ceil(2));
        if name.contains("external") {
            let entry = |k: &str| -> usize {
                let e = t.external_data.iter().find(|e| e.key == k).unwrap();
                e.value.parse().unwrap()
            };
            assert_eq!(entry("length"), packed.len(), "{name}");
            assert_eq!(
                &data[entry("offset")..][..packed.len()],
                &packed[..],
                "{name}"
            );
        } else {
            assert_eq!(t.raw_data, packed, "{name}");
        }
    }

    // Loaded back: the same values, one per byte, from inline and external data alike.
    let loaded = import::load(&first.join("model.onnx"), &ContribFunctions).unwrap();
    let mut ev = Evaluator::new(None);
    for (init, (name, values)) in loaded.graph.initializers.iter().zip(&tensors) {
        let src = init.source.as_ref().unwrap();
        assert_eq!(
            matches!(src, TensorSource::External { .. }),
            name.contains("external"),
            "{name}"
        );
        assert_eq!((init.dtype, &init.shape), (values.dtype, &values.shape));
        assert_eq!(ev.read(src, init.dtype).unwrap(), values.bytes, "{name}");
        let (dtype, shape, bytes) = ev.materialize(src).unwrap();
        assert_eq!(
            (dtype, shape, bytes),
            (values.dtype, values.shape.clone(), values.bytes.clone())
        );
    }
    // A slice of rows of an external 4-bit tensor reads the unpacked values.
    let (_, external) = &tensors[3];
    let rows = TensorSource::Slice {
        source: Box::new(loaded.graph.initializers[3].source.clone().unwrap()),
        axis: 0,
        start: 1,
        len: 2,
        total: 40,
    };
    assert_eq!(ev.read(&rows, DType::U4).unwrap(), external.bytes[25..75]);

    // Saved again: byte-identical files.
    export::save(
        &loaded,
        &second,
        &mut Evaluator::new(None),
        &hidden,
        &ContribFunctions,
    )
    .unwrap();
    for file in ["model.onnx", "model.onnx.data"] {
        assert_eq!(
            std::fs::read(first.join(file)).unwrap(),
            std::fs::read(second.join(file)).unwrap(),
            "{file} differs after a round trip"
        );
    }
}

/// The model encoded in pieces (`encode_model`) is the encoded `ModelProto` of it
/// (`model_proto`), for built, optimized and imported models.
#[test]
fn the_model_encoded_in_pieces_is_the_encoded_model_proto() {
    use prost::Message;

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut models = Vec::new();
    for (fixture, dtype) in [
        ("llama", mobius::ir::DType::F32),
        ("phi3", mobius::ir::DType::F16),
    ] {
        let config = mobius::models::load_config(&dir.join(fixture).join("config.json")).unwrap();
        let portable = mobius::models::build_model(&config, dtype).unwrap();
        for ep in ["cuda", "cpu", "webgpu"] {
            let opts = mobius::opt::OptimizeOptions {
                dtype,
                role: config.role(),
                limits: mobius::opt::Limits::default(),
                fingerprint_leaves: None,
                accuracy_level: None,
                kv_cache: mobius::opt::KvCache::AsIs,
                trace: false,
            };
            let caps = mobius::ep::get_ep(ep).unwrap();
            models.push(
                mobius::rulebook::optimize(&portable, &caps, &opts)
                    .unwrap()
                    .0,
            );
        }
        models.push(portable);
    }
    let exported = dir.join("exports/llama-dynamo-cache/model.onnx");
    models.push(import::load(&exported, &ContribFunctions).unwrap());
    // Functions, inline and external tensors, value_info, all present somewhere.
    assert!(models
        .iter()
        .any(|m| !ContribFunctions.functions_for(m).is_empty()));
    assert!(models.iter().any(|m| !m.graph.value_info.is_empty()));
    for model in &mut models {
        // Without weights (as --no-weights): inline constants stay inline.
        for init in &mut model.graph.initializers {
            if !matches!(init.source, Some(mobius::ir::TensorSource::Inline(_))) {
                init.source = None;
            }
        }
        let (placements, _) = plan_layout(&model.graph);
        assert!(placements.contains(&Placement::Inline));
        assert!(placements
            .iter()
            .any(|p| matches!(p, Placement::External { .. })));
        let whole = model_proto(
            model,
            &placements,
            &mut Evaluator::new(None),
            &ContribFunctions,
        )
        .unwrap()
        .encode_to_vec();
        let pieces = encode_model(
            model,
            &placements,
            &mut Evaluator::new(None),
            &ContribFunctions,
        )
        .unwrap();
        assert_eq!(pieces.len(), whole.len());
        assert!(pieces.to_vec() == whole, "{}", model.graph.name);
    }
}
