//! `mobius run` on models whose sizes come from data: each output shape is checked against the
//! per-tensor budget before it is allocated, malformed sizes are errors naming the node, and a
//! failed run writes nothing. A NaN the model computes reaches the output as NaN.

use std::path::{Path, PathBuf};

use mobius::interp::npy::{read_npy, to_npy};
use mobius::ir::{Attr, DType, Graph, GraphBuilder, Shape, TensorData};
use mobius::limits::InterpLimits;
use mobius::limits::TENSOR_ELEMENTS_FLAG;
use mobius::rulebook::contrib_functions::ContribFunctions;

use crate::check::{fails_with, listing, save_model};
use crate::common::mobius;
use mobius::ops::Tensor;

/// A graph computing output `y` (f32, rank `rank`) with node `y_node` = `op(inputs)`, the
/// inputs being int64 / f32 constants made by `make`.
fn one_node(
    op: &str,
    attrs: Vec<(&str, Attr)>,
    rank: usize,
    make: impl FnOnce(&mut GraphBuilder) -> Vec<String>,
) -> Graph {
    let mut g = GraphBuilder::new("g");
    let inputs = make(&mut g);
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    g.op_into(op, &refs, attrs, "y");
    g.output("y", DType::F32, Shape::new(vec![1usize; rank]));
    g.finish()
}

fn f32s(g: &mut GraphBuilder, shape: &[usize]) -> String {
    let n = shape.iter().product();
    g.constant(TensorData::from_f32(shape.to_vec(), &vec![1.0; n]))
}

/// `mobius run MODEL [--input …] --output-dir OUT` must fail with exit 1, an error naming
/// every needle, and no output folder.
fn run_fails(dir: &Path, model: &Path, inputs: &[(&str, &Path)], needles: &[&str]) {
    let out = dir.join("out");
    let mut cmd = mobius();
    cmd.arg("run").arg(model).arg("--output-dir").arg(&out);
    for (name, file) in inputs {
        cmd.arg("--input").arg(format!("{name}={}", file.display()));
    }
    fails_with(cmd, 1, needles);
    assert!(listing(&out).is_empty(), "{} was written", out.display());
    assert!(!out.exists(), "{} was created", out.display());
}

/// Builds the one-node model and expects `run` to fail naming `y_node` and `needles`.
fn refused(
    op: &str,
    attrs: Vec<(&str, Attr)>,
    make: impl FnOnce(&mut GraphBuilder) -> Vec<String>,
    needles: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let model = save_model(dir.path(), one_node(op, attrs, 1, make));
    let node = format!("{op} `y_node`");
    let all: Vec<&str> = [node.as_str()]
        .into_iter()
        .chain(needles.iter().copied())
        .collect();
    run_fails(dir.path(), &model, &[], &all);
}

/// The needles of a per-tensor budget refusal.
const OVER_BUDGET: &[&str] = &[
    "more than the limit of 268435456 per tensor",
    TENSOR_ELEMENTS_FLAG,
];

#[test]
fn constant_of_shape_over_the_budget() {
    refused(
        "ConstantOfShape",
        vec![],
        |g| vec![g.const_i64(&[1 << 20, 1 << 20])],
        &["shape [1048576, 1048576] has 1099511627776 elements"],
    );
    refused(
        "ConstantOfShape",
        vec![],
        |g| vec![g.const_i64(&[1 << 20, 1 << 20])],
        OVER_BUDGET,
    );
}

#[test]
fn constant_of_shape_negative_dimension() {
    refused(
        "ConstantOfShape",
        vec![],
        |g| vec![g.const_i64(&[4, -1])],
        &["negative dimension -1"],
    );
}

#[test]
fn expand_over_the_budget() {
    refused(
        "Expand",
        vec![],
        |g| vec![f32s(g, &[1]), g.const_i64(&[1 << 40])],
        OVER_BUDGET,
    );
}

#[test]
fn expand_incompatible_shape() {
    refused(
        "Expand",
        vec![],
        |g| vec![f32s(g, &[3]), g.const_i64(&[4])],
        &["cannot expand [3] to [4]"],
    );
}

#[test]
fn tile_over_the_budget_and_overflowing() {
    refused(
        "Tile",
        vec![],
        |g| vec![f32s(g, &[2]), g.const_i64(&[1 << 40])],
        OVER_BUDGET,
    );
    refused(
        "Tile",
        vec![],
        |g| vec![f32s(g, &[4]), g.const_i64(&[i64::MAX])],
        &["overflow"],
    );
}

#[test]
fn range_huge_count_and_zero_delta() {
    let scalar = |g: &mut GraphBuilder, v: f32| g.constant(TensorData::from_f32(vec![], &[v]));
    refused(
        "Range",
        vec![],
        |g| vec![scalar(g, 0.0), scalar(g, 1e30), scalar(g, 1.0)],
        OVER_BUDGET,
    );
    refused(
        "Range",
        vec![],
        |g| vec![scalar(g, 0.0), scalar(g, 1.0), scalar(g, 0.0)],
        &["delta must be a non-zero number"],
    );
}

#[test]
fn reshape_with_two_unknown_dims() {
    refused(
        "Reshape",
        vec![],
        |g| vec![f32s(g, &[6]), g.const_i64(&[-1, -1])],
        &["more than one -1"],
    );
}

#[test]
fn gather_index_out_of_range() {
    refused(
        "Gather",
        vec![],
        |g| vec![f32s(g, &[3, 2]), g.const_i64(&[7])],
        &["index 7 is out of range for dim 3"],
    );
}

#[test]
fn broadcast_add_and_matmul_over_the_budget() {
    // Each operand holds 32768 values; the [32768, 32768] result is 2^30.
    refused(
        "Add",
        vec![],
        |g| vec![f32s(g, &[1 << 15, 1]), f32s(g, &[1 << 15])],
        OVER_BUDGET,
    );
    refused(
        "MatMul",
        vec![],
        |g| vec![f32s(g, &[1 << 15, 1]), f32s(g, &[1, 1 << 15])],
        OVER_BUDGET,
    );
}

#[test]
fn attention_scores_over_the_budget() {
    // Q and K are [1, 1, 32768, 1]: the scores would be [1, 1, 32768, 32768].
    refused(
        "Attention",
        vec![],
        |g| {
            let q = f32s(g, &[1, 1, 1 << 15, 1]);
            vec![q.clone(), q.clone(), q]
        },
        OVER_BUDGET,
    );
}

#[test]
fn unknown_op_is_named() {
    refused(
        "NoSuchOp",
        vec![],
        |g| vec![f32s(g, &[2])],
        &["does not implement `NoSuchOp`"],
    );
}

#[test]
fn truncated_external_data_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    // 64 x 64 floats go to model.onnx.data; cut it short.
    let model = save_model(
        dir.path(),
        one_node("Relu", vec![], 2, |g| vec![f32s(g, &[64, 64])]),
    );
    let data = dir.path().join("model.onnx.data");
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() / 2]).unwrap();
    run_fails(
        dir.path(),
        &model,
        &[],
        &["model.onnx.data", "past the end"],
    );
}

#[test]
fn nan_scores_reach_the_output_as_nan() {
    // Attention over a query whose second row is NaN: that row's output is NaN, not zeros.
    let dir = tempfile::tempdir().unwrap();
    let mut g = GraphBuilder::new("g");
    let q = g.input("q", DType::F32, Shape::new([1usize, 1, 2, 4]));
    let k = f32s(&mut g, &[1, 1, 3, 4]);
    g.op_into("Attention", &[&q, &k, &k], vec![], "y");
    g.output("y", DType::F32, Shape::new([1usize, 1, 2, 4]));
    let model = save_model(dir.path(), g.finish());
    let mut values = vec![0.5f32; 8];
    values[4..].fill(f32::NAN);
    let q_file = dir.path().join("q.npy");
    std::fs::write(
        &q_file,
        to_npy(&Tensor::float(DType::F32, vec![1, 1, 2, 4], values)),
    )
    .unwrap();
    let out = dir.path().join("out");
    mobius()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("q={}", q_file.display()))
        .arg("--output-dir")
        .arg(&out)
        .assert()
        .success();
    let y = read_npy(&out.join("y.npy"), &InterpLimits::default()).unwrap();
    let y = y.floats().unwrap();
    assert_eq!(&y[..4], &[1.0; 4], "row 0 averages ones");
    assert!(y[4..].iter().all(|v| v.is_nan()), "row 1: {y:?}");
}

/// Every input the fuzzer found crashing the interpreter (`fuzz/artifacts-found/*.onnx`) is now
/// a clean error under `mobius run`, its inputs being ones of the declared (fixed) shapes.
#[test]
fn inputs_found_by_the_fuzzer_are_clean_errors() {
    let found = crate::common::root().join("fuzz/artifacts-found");
    let mut models: Vec<PathBuf> = std::fs::read_dir(&found)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    models.sort();
    assert!(!models.is_empty(), "no models in {}", found.display());
    for model in models {
        let dir = tempfile::tempdir().unwrap();
        let graph = mobius::onnx::import::load(&model, &ContribFunctions)
            .unwrap()
            .graph;
        let mut files = Vec::new();
        for v in &graph.inputs {
            let shape: Vec<usize> = v
                .shape
                .0
                .iter()
                .map(|d| match d {
                    mobius::ir::Dim::Fixed(n) => *n as usize,
                    mobius::ir::Dim::Sym(_) => 2,
                })
                .collect();
            let n = shape.iter().product();
            let file = dir.path().join(format!("{}.npy", v.name));
            std::fs::write(&file, to_npy(&Tensor::float(v.dtype, shape, vec![1.0; n]))).unwrap();
            files.push((v.name.clone(), file));
        }
        let inputs: Vec<(&str, &Path)> = files
            .iter()
            .map(|(n, f)| (n.as_str(), f.as_path()))
            .collect();
        run_fails(
            dir.path(),
            &model,
            &inputs,
            &["limit exceeded", TENSOR_ELEMENTS_FLAG],
        );
    }
}

/// `com.microsoft` `GroupQueryAttention` over a packed QKV `[1, 1, width]` query, with
/// `seqlens_k` and total length 1 and the given attributes.
fn gqa(attrs: Vec<(&str, Attr)>, width: usize, seqlen: i64, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GraphBuilder::new("g");
    let q = f32s(&mut g, &[1, 1, width]);
    let seqlens = g.const_i64(&[seqlen]);
    let total = g.scalar_i64(1);
    g.node(
        "com.microsoft",
        "GroupQueryAttention",
        &[&q, "", "", "", "", &seqlens, &total],
        attrs,
        vec!["y".into()],
    );
    g.output("y", DType::F32, Shape::new(vec![1usize, 1, 1]));
    let model = save_model(dir.path(), g.finish());
    let all: Vec<&str> = ["GroupQueryAttention `y_node`"]
        .into_iter()
        .chain(needles.iter().copied())
        .collect();
    run_fails(dir.path(), &model, &[], &all);
}

#[test]
fn gqa_head_counts_that_overflow_or_are_negative() {
    let max = i64::MAX;
    gqa(
        vec![
            ("num_heads", Attr::Int(max)),
            ("kv_num_heads", Attr::Int(max)),
        ],
        12,
        0,
        &["attribute `num_heads` = 9223372036854775807 is not a head count (expected 0 to 4096)"],
    );
    gqa(
        vec![("num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(-1))],
        12,
        0,
        &["attribute `kv_num_heads` = -1 is not a head count"],
    );
    gqa(
        vec![
            ("num_heads", Attr::Int(4096)),
            ("kv_num_heads", Attr::Int(4097)),
        ],
        12,
        0,
        &["attribute `kv_num_heads` = 4097 is not a head count"],
    );
}

#[test]
fn gqa_zero_head_size_and_huge_seqlens() {
    let heads = || vec![("num_heads", Attr::Int(2)), ("kv_num_heads", Attr::Int(1))];
    gqa(
        heads(),
        0,
        0,
        &["query width 0", "head size must be positive"],
    );
    gqa(
        heads(),
        8,
        i64::MAX,
        &["seqlens_k[0] = 9223372036854775807 is inconsistent"],
    );
}

#[test]
fn attention_head_attributes_and_nonpad_lengths_out_of_range() {
    refused(
        "Attention",
        vec![
            ("q_num_heads", Attr::Int(-3)),
            ("kv_num_heads", Attr::Int(1)),
        ],
        |g| {
            let q = f32s(g, &[1, 2, 6]);
            vec![q.clone(), q.clone(), q]
        },
        &["attribute `q_num_heads` = -3 is not a head count"],
    );
    refused(
        "Attention",
        vec![],
        |g| {
            let q = f32s(g, &[1, 1, 1, 2]);
            let nonpad = g.const_i64(&[i64::MIN]);
            vec![
                q.clone(),
                q.clone(),
                q,
                String::new(),
                String::new(),
                String::new(),
                nonpad,
            ]
        },
        &["nonpad_kv_seqlen[0] = -9223372036854775808 must not be negative"],
    );
}

#[test]
fn rotary_dimension_attribute_negative() {
    refused(
        "RotaryEmbedding",
        vec![("rotary_embedding_dim", Attr::Int(-2))],
        |g| {
            let x = f32s(g, &[1, 1, 1, 4]);
            let cache = f32s(g, &[1, 1, 2]);
            vec![x, cache.clone(), cache]
        },
        &["attribute `rotary_embedding_dim` = -2 must not be negative"],
    );
}

#[test]
fn split_sizes_whose_sum_overflows() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GraphBuilder::new("g");
    let x = f32s(&mut g, &[2]);
    let sizes = g.const_i64(&[i64::MAX, i64::MAX, 2]);
    g.node(
        "",
        "Split",
        &[&x, &sizes],
        vec![],
        vec!["y".into(), "b".into(), "c".into()],
    );
    g.output("y", DType::F32, Shape::new(vec![1usize]));
    let model = save_model(dir.path(), g.finish());
    run_fails(
        dir.path(),
        &model,
        &[],
        &["Split `y_node`", "does not cut dim 2 into 3 parts"],
    );
}

/// `[0, 2^40]`: an f32 tensor of no element with a long axis, made by ConstantOfShape.
fn empty_long(g: &mut GraphBuilder, dims: &[i64]) -> String {
    let shape = g.const_i64(dims);
    g.op("ConstantOfShape", &[&shape], vec![])
}

#[test]
fn reshape_of_an_empty_tensor_whose_dimensions_pass_i64() {
    // 2^32 · 2^31 = 2^63 fits usize, not i64.
    refused(
        "Reshape",
        vec![("allowzero", Attr::Int(1))],
        |g| {
            let x = empty_long(g, &[0, 1 << 32, 1 << 31]);
            vec![x, g.const_i64(&[0, -1])]
        },
        &["cannot reshape [0, 4294967296, 2147483648] to [0, -1]"],
    );
}

#[test]
fn reduction_of_an_empty_tensor_with_a_long_axis_is_over_the_budget() {
    refused(
        "ReduceSum",
        vec![],
        |g| {
            let x = empty_long(g, &[0, 1 << 40]);
            vec![x, g.const_i64(&[0])]
        },
        &[
            "shape [1, 1099511627776] has 1099511627776 elements",
            TENSOR_ELEMENTS_FLAG,
        ],
    );
}

/// Runs `graph` (no inputs) and returns its output `name`.
fn run_ok(graph: Graph, name: &str) -> Tensor {
    let dir = tempfile::tempdir().unwrap();
    let model = save_model(dir.path(), graph);
    let out = dir.path().join("out");
    mobius()
        .arg("run")
        .arg(&model)
        .arg("--output-dir")
        .arg(&out)
        .assert()
        .success();
    read_npy(&out.join(format!("{name}.npy")), &InterpLimits::default()).unwrap()
}

#[test]
fn ops_on_an_empty_tensor_with_a_long_axis_allocate_nothing() {
    for (op, attrs, shape) in [
        ("Transpose", vec![], vec![1usize << 40, 0]),
        ("Softmax", vec![], vec![0, 1 << 40]),
        ("Tile", vec![], vec![0, 1 << 40]),
    ] {
        let graph = one_node(op, attrs, 2, |g| {
            let x = empty_long(g, &[0, 1 << 40]);
            if op == "Tile" {
                vec![x, g.const_i64(&[1, 1])]
            } else {
                vec![x]
            }
        });
        let y = run_ok(graph, "y");
        assert_eq!(y.shape, shape, "{op}");
        assert!(y.floats().unwrap().is_empty(), "{op}");
    }
}

#[test]
fn layer_norm_statistics_of_empty_rows_are_nan() {
    let mut g = GraphBuilder::new("g");
    let x = empty_long(&mut g, &[3, 0]);
    let scale = empty_long(&mut g, &[0]);
    g.node(
        "",
        "LayerNormalization",
        &[&x, &scale],
        vec![],
        vec!["y".into(), "mean".into(), "inv".into()],
    );
    for name in ["y", "mean", "inv"] {
        g.output(name, DType::F32, Shape::new(vec![1usize, 1]));
    }
    let mean = run_ok(g.finish(), "mean");
    assert_eq!(mean.shape, [3, 1]);
    let values = mean.floats().unwrap();
    assert!(
        values.len() == 3 && values.iter().all(|v| v.is_nan()),
        "{values:?}"
    );
}

/// A constant of `dtype` (one byte per value, all `value`) and shape `shape`.
fn bytes_of(g: &mut GraphBuilder, dtype: DType, shape: &[usize], value: u8) -> String {
    let n = shape.iter().product();
    g.constant(TensorData {
        dtype,
        shape: shape.to_vec(),
        bytes: vec![value; n],
    })
}

/// Expects `run` of the one-node model `domain::op(make(...))` to fail naming the node and
/// `needles`.
fn quant_refused(
    (domain, op): (&str, &str),
    attrs: Vec<(&str, Attr)>,
    make: impl FnOnce(&mut GraphBuilder) -> Vec<String>,
    needles: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let mut g = GraphBuilder::new("g");
    let inputs = make(&mut g);
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    g.node(domain, op, &refs, attrs, vec!["y".into()]);
    g.output("y", DType::F32, Shape::new(vec![1usize]));
    let model = save_model(dir.path(), g.finish());
    let node = format!("{op} `y_node`");
    let all: Vec<&str> = [node.as_str()]
        .into_iter()
        .chain(needles.iter().copied())
        .collect();
    run_fails(dir.path(), &model, &[], &all);
}

#[test]
fn dequantize_linear_mismatched_zero_point_scale_and_output_type() {
    let dq = ("", "DequantizeLinear");
    quant_refused(
        dq,
        vec![],
        |g| {
            vec![
                bytes_of(g, DType::I4, &[4], 1),
                f32s(g, &[]),
                bytes_of(g, DType::U4, &[], 1),
            ]
        },
        &["input `x_zero_point` (2) is u4; expected i4 like `x`"],
    );
    quant_refused(
        dq,
        vec![("axis", Attr::Int(0)), ("block_size", Attr::Int(4))],
        |g| vec![bytes_of(g, DType::I8, &[9, 4], 1), f32s(g, &[2, 4])],
        &["input `x_scale` (1) has shape [2, 4]", "need shape [3, 4]"],
    );
    quant_refused(
        dq,
        vec![("axis", Attr::Int(1))],
        |g| vec![bytes_of(g, DType::U8, &[2, 3], 1), f32s(g, &[2])],
        &["per-axis dequantization along axis 1", "shape [3]"],
    );
    quant_refused(
        dq,
        vec![("output_dtype", Attr::Int(10))],
        |g| vec![bytes_of(g, DType::U8, &[2], 1), f32s(g, &[])],
        &["attribute output_dtype is 10, but `x_scale` is f32"],
    );
    quant_refused(
        dq,
        vec![],
        |g| vec![f32s(g, &[2]), f32s(g, &[])],
        &["input `x` (0) is f32; expected int8, uint8, int16, uint16, int4, uint4 or int32"],
    );
}

#[test]
fn matmul_nbits_shapes_attributes_and_inputs_that_do_not_match() {
    let nbits = ("com.microsoft", "MatMulNBits");
    let attrs = |k: i64, bits: i64, block: i64| {
        vec![
            ("K", Attr::Int(k)),
            ("N", Attr::Int(4)),
            ("bits", Attr::Int(bits)),
            ("block_size", Attr::Int(block)),
        ]
    };
    // K = 40 needs 3 blocks of 16, B holds 2
    quant_refused(
        nbits,
        attrs(40, 4, 16),
        |g| {
            vec![
                f32s(g, &[1, 40]),
                bytes_of(g, DType::U8, &[4, 2, 8], 0x88),
                f32s(g, &[4, 2]),
            ]
        },
        &["input `B` (1) is u8 [4, 2, 8]", "need uint8 [4, 3, 8]"],
    );
    quant_refused(
        nbits,
        attrs(32, 4, 16),
        |g| {
            vec![
                f32s(g, &[1, 30]),
                bytes_of(g, DType::U8, &[4, 2, 8], 0x88),
                f32s(g, &[4, 2]),
            ]
        },
        &["input `A` (0) has shape [1, 30]; its last dimension must be K = 32"],
    );
    quant_refused(
        nbits,
        attrs(32, 4, 16),
        |g| {
            vec![
                f32s(g, &[1, 32]),
                bytes_of(g, DType::U8, &[4, 2, 8], 0x88),
                f32s(g, &[4, 2]),
                bytes_of(g, DType::U8, &[4, 2], 0x88),
            ]
        },
        &["input `zero_points` (3) has shape [4, 2]; expected [4, 1] or [4]"],
    );
    quant_refused(
        nbits,
        attrs(32, 4, 16),
        |g| {
            vec![
                f32s(g, &[1, 32]),
                bytes_of(g, DType::U8, &[4, 2, 8], 0x88),
                f32s(g, &[4, 2]),
                String::new(),
                g.constant(TensorData::from_i64(vec![32], &[0; 32])),
            ]
        },
        &["input `g_idx` (4) is not supported"],
    );
    quant_refused(
        nbits,
        attrs(32, 3, 16),
        |g| vec![f32s(g, &[1, 32])],
        &["attribute bits is 3; expected 2, 4 or 8"],
    );
    quant_refused(
        nbits,
        attrs(32, 4, 24),
        |g| vec![f32s(g, &[1, 32])],
        &["attribute block_size is 24; expected a power of two of at least 16"],
    );
    // sizes whose products overflow
    quant_refused(
        nbits,
        vec![
            ("K", Attr::Int(i64::MAX)),
            ("N", Attr::Int(i64::MAX)),
            ("bits", Attr::Int(8)),
            ("block_size", Attr::Int(1 << 62)),
        ],
        |g| vec![f32s(g, &[1, 32])],
        &["attribute block_size 4611686018427387904 times bits 8 overflows"],
    );
    quant_refused(
        nbits,
        vec![
            ("K", Attr::Int(i64::MAX)),
            ("N", Attr::Int(i64::MAX)),
            ("block_size", Attr::Int(16)),
        ],
        |g| vec![f32s(g, &[1, 32]), bytes_of(g, DType::U8, &[4, 2, 8], 0x88)],
        &["input `B` (1) is u8 [4, 2, 8]"],
    );
    quant_refused(
        nbits,
        vec![("N", Attr::Int(4)), ("block_size", Attr::Int(16))],
        |g| vec![f32s(g, &[1, 32])],
        &["integer attribute `K` is required"],
    );
}

#[test]
fn gather_block_quantized_unsupported_forms_and_budget() {
    let gbq = ("com.microsoft", "GatherBlockQuantized");
    let attrs = |gather: i64, block: i64| {
        vec![
            ("gather_axis", Attr::Int(gather)),
            ("quantize_axis", Attr::Int(1)),
            ("block_size", Attr::Int(block)),
        ]
    };
    // uint8 (packed) data: gather_axis must be 0
    quant_refused(
        gbq,
        attrs(1, 16),
        |g| {
            vec![
                bytes_of(g, DType::U8, &[4, 16], 0x88),
                g.const_i64(&[0]),
                f32s(g, &[4, 2]),
            ]
        },
        &["needs gather_axis 0 and quantize_axis the last axis"],
    );
    quant_refused(
        gbq,
        attrs(0, 16),
        |g| {
            vec![
                bytes_of(g, DType::U8, &[4, 16], 0x88),
                g.const_i64(&[0]),
                f32s(g, &[4, 1]),
            ]
        },
        &["input `scales` (2) has shape [4, 1]", "need [4, 2]"],
    );
    quant_refused(
        gbq,
        attrs(0, 16),
        |g| {
            vec![
                bytes_of(g, DType::I4, &[4, 32], 1),
                g.const_i64(&[0]),
                f32s(g, &[4, 2]),
                bytes_of(g, DType::U4, &[4, 2], 1),
            ]
        },
        &["input `zero_points` (3) is u4 [4, 2]; expected i4 [4, 2]"],
    );
    quant_refused(
        gbq,
        attrs(0, 16),
        |g| {
            vec![
                bytes_of(g, DType::I8, &[4, 32], 1),
                g.const_i64(&[0]),
                f32s(g, &[4, 2]),
            ]
        },
        &["input `data` (0) is i8; expected int4, uint4 or uint8"],
    );
    // 200 rows of 2^21 4-bit values: over the per-tensor budget, refused before allocating
    quant_refused(
        gbq,
        attrs(0, 16),
        |g| {
            vec![
                bytes_of(g, DType::U8, &[1, 1 << 20], 0x88),
                g.const_i64(&[0; 200]),
                f32s(g, &[1, 1 << 17]),
            ]
        },
        OVER_BUDGET,
    );
}
