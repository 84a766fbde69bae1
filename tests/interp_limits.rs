//! The reference interpreter checks every output shape against the run's budget before it
//! allocates, refuses malformed sizes from data with an error naming the node, and never
//! panics on malformed inputs or attributes.

use mobius::interp::eval_op;

use mobius::ir::{Attr, DType, TensorData};
use mobius::limits::{InterpLimits, TENSOR_ELEMENTS_FLAG};
use mobius::ops::Tensor;
use mobius::Error;

const SMALL: InterpLimits = InterpLimits {
    max_tensor_elements: 1000,
    max_run_bytes: 1 << 20,
    max_loop_iterations: 1 << 10,
};

fn floats(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::float(DType::F32, shape.to_vec(), vec![1.0; n])
}

fn i64s(values: &[i64]) -> Tensor {
    Tensor::int(DType::I64, vec![values.len()], values.to_vec())
}

fn scalar(v: f32) -> Tensor {
    Tensor::float(DType::F32, vec![], vec![v])
}

/// Evaluates node `op` named `bad` within `limits`; `Ok` outputs or the error text.
fn run(
    domain: &str,
    op: &str,
    attrs: Vec<(&str, Attr)>,
    inputs: Vec<Option<Tensor>>,
    limits: &InterpLimits,
) -> Result<Vec<Tensor>, String> {
    let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    eval_op(
        "bad",
        (domain, op),
        attrs,
        &inputs,
        &["y", "y1", "y2"],
        limits,
    )
    .map_err(|e| e.to_string())
}

/// The error of `op` within [`SMALL`], which must name the node.
fn error(op: &str, attrs: Vec<(&str, Attr)>, inputs: Vec<Option<Tensor>>) -> String {
    let e = run("", op, attrs, inputs, &SMALL).expect_err(op);
    assert!(e.contains(&format!("{op} `bad`")), "{e}");
    e
}

/// Asserts that `op` is refused by the per-tensor budget before allocating.
fn over_budget(op: &str, attrs: Vec<(&str, Attr)>, inputs: Vec<Option<Tensor>>) {
    let e = error(op, attrs, inputs);
    assert!(
        e.contains("limit of 1000 per tensor") && e.contains(TENSOR_ELEMENTS_FLAG),
        "{e}"
    );
}

#[test]
fn growing_ops_check_the_budget_before_allocating() {
    over_budget(
        "ConstantOfShape",
        vec![],
        vec![Some(i64s(&[1 << 20, 1 << 20]))],
    );
    over_budget(
        "ConstantOfShape",
        vec![],
        vec![Some(i64s(&[i64::MAX, i64::MAX, 4]))],
    );
    over_budget(
        "Expand",
        vec![],
        vec![Some(floats(&[1])), Some(i64s(&[1 << 40]))],
    );
    over_budget(
        "Tile",
        vec![],
        vec![Some(floats(&[2, 2])), Some(i64s(&[1 << 20, 1 << 20]))],
    );
    over_budget(
        "Range",
        vec![],
        vec![Some(scalar(0.0)), Some(scalar(1e30)), Some(scalar(1.0))],
    );
    let int = |v| Tensor::int(DType::I64, vec![], vec![v]);
    over_budget(
        "Range",
        vec![],
        vec![Some(int(i64::MIN)), Some(int(i64::MAX)), Some(int(1))],
    );
    over_budget(
        "Add",
        vec![],
        vec![Some(floats(&[40, 1])), Some(floats(&[40]))],
    );
    over_budget(
        "Where",
        vec![],
        vec![
            Some(Tensor::bool(vec![40, 1], vec![true; 40])),
            Some(floats(&[1, 40])),
            Some(floats(&[1])),
        ],
    );
    over_budget(
        "MatMul",
        vec![],
        vec![Some(floats(&[40, 1])), Some(floats(&[1, 40]))],
    );
    over_budget(
        "Gemm",
        vec![],
        vec![Some(floats(&[40, 1])), Some(floats(&[1, 40]))],
    );
    over_budget(
        "Gather",
        vec![],
        vec![
            Some(floats(&[2, 30])),
            Some(Tensor::int(DType::I64, vec![40], vec![0; 40])),
        ],
    );
    over_budget(
        "Concat",
        vec![("axis", Attr::Int(0))],
        vec![Some(floats(&[20, 30])), Some(floats(&[20, 30]))],
    );
    // Attention's score matrix [1, 1, 40, 40] is over the budget though Q, K, V are not.
    over_budget(
        "Attention",
        vec![],
        vec![
            Some(floats(&[1, 1, 40, 4])),
            Some(floats(&[1, 1, 40, 4])),
            Some(floats(&[1, 1, 40, 4])),
        ],
    );
}

#[test]
fn gqa_present_cache_is_checked_before_allocating() {
    let e = run(
        "com.microsoft",
        "GroupQueryAttention",
        vec![("num_heads", Attr::Int(1)), ("kv_num_heads", Attr::Int(1))],
        vec![
            Some(floats(&[1, 1, 8])),
            Some(floats(&[1, 1, 8])),
            Some(floats(&[1, 1, 8])),
            Some(floats(&[1, 1, 125, 8])),
            Some(floats(&[1, 1, 125, 8])),
            Some(Tensor::int(DType::I32, vec![1], vec![125])),
            // the present caches grow to [1, 1, 126, 8]: 1008 elements
            Some(Tensor::int(DType::I32, vec![], vec![126])),
        ],
        &SMALL,
    )
    .unwrap_err();
    assert!(
        e.contains("GroupQueryAttention `bad` output: shape [1, 1, 126, 8]")
            && e.contains(TENSOR_ELEMENTS_FLAG),
        "{e}"
    );
}

#[test]
fn malformed_sizes_from_data_are_errors_naming_the_node() {
    let e = error("ConstantOfShape", vec![], vec![Some(i64s(&[2, -3]))]);
    assert!(e.contains("negative dimension -3"), "{e}");
    for delta in [0.0, f32::NAN] {
        let e = error(
            "Range",
            vec![],
            vec![Some(scalar(0.0)), Some(scalar(5.0)), Some(scalar(delta))],
        );
        assert!(e.contains("delta"), "{e}");
    }
    let e = error(
        "Range",
        vec![],
        vec![Some(scalar(f32::NAN)), Some(scalar(5.0)), Some(scalar(1.0))],
    );
    assert!(e.contains("no finite length"), "{e}");
    let e = error(
        "Reshape",
        vec![],
        vec![Some(floats(&[6])), Some(i64s(&[-1, -1]))],
    );
    assert!(e.contains("more than one -1"), "{e}");
    let e = error(
        "Reshape",
        vec![],
        vec![Some(floats(&[6])), Some(i64s(&[4, 2]))],
    );
    assert!(e.contains("cannot reshape"), "{e}");
    let e = error("Expand", vec![], vec![Some(floats(&[3])), Some(i64s(&[4]))]);
    assert!(e.contains("cannot expand"), "{e}");
    let e = error(
        "Gather",
        vec![],
        vec![
            Some(floats(&[3, 2])),
            Some(Tensor::int(DType::I64, vec![1], vec![3])),
        ],
    );
    assert!(e.contains("out of range"), "{e}");
    let e = error(
        "Gather",
        vec![("axis", Attr::Int(2))],
        vec![Some(floats(&[3, 2])), Some(i64s(&[0]))],
    );
    assert!(e.contains("axis 2"), "{e}");
    let e = error(
        "Softmax",
        vec![("axis", Attr::Int(-3))],
        vec![Some(floats(&[3, 2]))],
    );
    assert!(e.contains("axis -3"), "{e}");
    let e = error("Tile", vec![], vec![Some(floats(&[2])), Some(i64s(&[-1]))]);
    assert!(e.contains("negative dimension"), "{e}");
}

#[test]
fn tensor_bytes_must_match_the_shape() {
    let short = TensorData {
        dtype: DType::F32,
        shape: vec![2, 3],
        bytes: vec![0; 20],
    };
    let e = Tensor::from_data(&short).unwrap_err().to_string();
    assert!(e.contains("needs 24 bytes, found 20"), "{e}");
    let long = TensorData {
        dtype: DType::I64,
        shape: vec![1],
        bytes: vec![0; 9],
    };
    match Tensor::from_data(&long) {
        Err(Error::Graph(m)) => assert_eq!(m, "i64 tensor of shape [1] needs 8 bytes, found 9"),
        other => panic!("expected Error::Graph, got {other:?}"),
    }
    let overflow = TensorData {
        dtype: DType::F16,
        shape: vec![usize::MAX, 2],
        bytes: vec![],
    };
    match Tensor::from_data(&overflow) {
        Err(Error::Graph(m)) => assert!(m.contains("needs more than 2^64 bytes, found 0"), "{m}"),
        other => panic!("expected Error::Graph, got {other:?}"),
    }
    let ok = TensorData {
        dtype: DType::BF16,
        shape: vec![2],
        bytes: vec![0; 4],
    };
    assert_eq!(Tensor::from_data(&ok).unwrap().shape, [2]);
}
