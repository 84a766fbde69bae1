//! The reference interpreter's shape and data-movement ops (ONNX opset 24). Every expected
//! value below was produced by running the same one-node model in onnxruntime 1.32, and every
//! `fails` case is one onnxruntime rejects.

use std::collections::HashMap;

use mobius::interp::{eval_op, run_graph};

use mobius::ir::{Attr, DType, GraphBuilder, Shape};
use mobius::limits::InterpLimits;
use mobius::ops::Tensor;
use mobius::weights::eval::Evaluator;

/// float32 `0, 1, 2, …` of the given shape.
fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    f32s(shape, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::float(DType::F32, shape.to_vec(), v.to_vec())
}

fn f16s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::float(DType::F16, shape.to_vec(), v.to_vec())
}

fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::float(
        DType::F64,
        shape.to_vec(),
        v.iter().map(|&x| x as f32).collect(),
    )
}

fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::int(DType::I64, shape.to_vec(), v.to_vec())
}

fn i32s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::int(DType::I32, shape.to_vec(), v.to_vec())
}

fn bools(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::bool(shape.to_vec(), v.to_vec())
}

/// Evaluates one `op` node with `n_out` outputs (`None` inputs are absent optional ones).
fn eval(
    op: &str,
    inputs: Vec<Option<Tensor>>,
    attrs: Vec<(&str, Attr)>,
    n_out: usize,
) -> mobius::Result<Vec<Tensor>> {
    let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let outputs: Vec<String> = (0..n_out).map(|i| format!("out{i}")).collect();
    let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(Option::as_ref).collect();
    eval_op(
        &format!("{op}_node"),
        ("", op),
        attrs,
        &inputs,
        &outputs,
        &InterpLimits::default(),
    )
}

/// The node's outputs equal `expected` exactly (dtype, shape and values).
fn check(op: &str, inputs: Vec<Option<Tensor>>, attrs: Vec<(&str, Attr)>, expected: Vec<Tensor>) {
    let got = eval(op, inputs, attrs, expected.len()).unwrap_or_else(|e| panic!("{op}: {e}"));
    assert_eq!(got, expected, "{op}");
}

/// Like [`check`], float values within 1e-6.
fn close(op: &str, inputs: Vec<Option<Tensor>>, attrs: Vec<(&str, Attr)>, expected: Vec<Tensor>) {
    let got = eval(op, inputs, attrs, expected.len()).unwrap_or_else(|e| panic!("{op}: {e}"));
    assert_eq!(got.len(), expected.len(), "{op}");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!((g.dtype, &g.shape), (e.dtype, &e.shape), "{op}");
        let (g, e) = (g.floats().unwrap(), e.floats().unwrap());
        assert!(
            g.iter().zip(e).all(|(a, b)| (a - b).abs() <= 1e-6),
            "{op}: {g:?} vs {e:?}"
        );
    }
}

/// The node is rejected.
fn fails(op: &str, inputs: Vec<Option<Tensor>>, attrs: Vec<(&str, Attr)>, n_out: usize) {
    let got = eval(op, inputs, attrs, n_out);
    assert!(got.is_err(), "{op} should fail, gave {got:?}");
}

/// Shape → Gather → Unsqueeze → Concat → Reshape → Split → Transpose through `run_graph`.
#[test]
fn shape_ops_compose_in_a_graph() {
    let mut b = GraphBuilder::new("g");
    let x = b.input("x", DType::F32, Shape::new([2i64, 3, 4]));
    let s = b.op("Shape", &[&x], vec![]);
    let zero = b.scalar_i64(0);
    let d = b.op("Gather", &[&s, &zero], vec![]);
    let axes = b.const_i64(&[0]);
    let d = b.op("Unsqueeze", &[&d, &axes], vec![]);
    let rest = b.const_i64(&[-1]);
    let target = b.op("Concat", &[&d, &rest], vec![("axis", Attr::Int(0))]);
    let r = b.op("Reshape", &[&x, &target], vec![]);
    let split = vec![("axis", Attr::Int(1)), ("num_outputs", Attr::Int(2))];
    b.node("", "Split", &[&r], split, vec!["a".into(), "b".into()]);
    b.op_into("Transpose", &["b"], vec![], "bt");
    b.output("a", DType::F32, Shape::new([2i64, 6]));
    b.output("bt", DType::F32, Shape::new([6i64, 2]));
    let graph = b.finish();
    let inputs = HashMap::from([("x".to_string(), iota(&[2, 3, 4]))]);
    let out = run_graph(&graph, &inputs, &mut Evaluator::new(None)).unwrap();
    let a: Vec<f32> = vec![
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0,
    ];
    let bt: Vec<f32> = vec![
        6.0, 18.0, 7.0, 19.0, 8.0, 20.0, 9.0, 21.0, 10.0, 22.0, 11.0, 23.0,
    ];
    assert_eq!(out["a"], f32s(&[2, 6], &a));
    assert_eq!(out["bt"], f32s(&[6, 2], &bt));
}

#[test]
fn transpose() {
    // default perm reverses the axes
    check(
        "Transpose",
        vec![Some(iota(&[2, 3, 4]))],
        vec![],
        vec![f32s(
            &[4, 3, 2],
            &[
                0.0, 12.0, 4.0, 16.0, 8.0, 20.0, 1.0, 13.0, 5.0, 17.0, 9.0, 21.0, 2.0, 14.0, 6.0,
                18.0, 10.0, 22.0, 3.0, 15.0, 7.0, 19.0, 11.0, 23.0,
            ],
        )],
    );
    check(
        "Transpose",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("perm", Attr::Ints(vec![1, 0, 2]))],
        vec![f32s(
            &[3, 2, 4],
            &[
                0.0, 1.0, 2.0, 3.0, 12.0, 13.0, 14.0, 15.0, 4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0,
                19.0, 8.0, 9.0, 10.0, 11.0, 20.0, 21.0, 22.0, 23.0,
            ],
        )],
    );
    check(
        "Transpose",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("perm", Attr::Ints(vec![2, 0, 1]))],
        vec![f32s(
            &[4, 2, 3],
            &[
                0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 1.0, 5.0, 9.0, 13.0, 17.0, 21.0, 2.0, 6.0, 10.0,
                14.0, 18.0, 22.0, 3.0, 7.0, 11.0, 15.0, 19.0, 23.0,
            ],
        )],
    );
    check(
        "Transpose",
        vec![Some(i64s(&[2, 3], &[0, 1, 2, 3, 4, 5]))],
        vec![("perm", Attr::Ints(vec![1, 0]))],
        vec![i64s(&[3, 2], &[0, 3, 1, 4, 2, 5])],
    );
    check(
        "Transpose",
        vec![Some(bools(&[2, 2], &[true, false, false, false]))],
        vec![],
        vec![bools(&[2, 2], &[true, false, false, false])],
    );
    // scalar
    check(
        "Transpose",
        vec![Some(f32s(&[], &[3.5]))],
        vec![],
        vec![f32s(&[], &[3.5])],
    );
    check(
        "Transpose",
        vec![Some(f32s(&[0, 3], &[]))],
        vec![],
        vec![f32s(&[3, 0], &[])],
    );
    // not a permutation
    fails(
        "Transpose",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("perm", Attr::Ints(vec![0, 0, 1]))],
        1,
    );
    fails(
        "Transpose",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("perm", Attr::Ints(vec![-1, 0, 1]))],
        1,
    );
}

#[test]
fn reshape() {
    // 0 copies the input dim, -1 inferred
    check(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[3], &[4, 0, -1]))],
        vec![],
        vec![iota(&[4, 3, 2])],
    );
    check(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[1], &[-1]))],
        vec![],
        vec![iota(&[24])],
    );
    // to a scalar
    check(
        "Reshape",
        vec![Some(f32s(&[1], &[1.0])), Some(i64s(&[0], &[]))],
        vec![],
        vec![f32s(&[], &[1.0])],
    );
    check(
        "Reshape",
        vec![
            Some(bools(&[4], &[true, false, true, true])),
            Some(i64s(&[2], &[2, 2])),
        ],
        vec![],
        vec![bools(&[2, 2], &[true, false, true, true])],
    );
    // allowzero: literal 0
    check(
        "Reshape",
        vec![Some(f32s(&[0, 3], &[])), Some(i64s(&[2], &[3, 0]))],
        vec![("allowzero", Attr::Int(1))],
        vec![f32s(&[3, 0], &[])],
    );
    // empty input, copied 0
    check(
        "Reshape",
        vec![Some(f32s(&[0, 3], &[])), Some(i64s(&[2], &[-1, 0]))],
        vec![],
        vec![f32s(&[0, 3], &[])],
    );
    check(
        "Reshape",
        vec![Some(f32s(&[2, 0], &[])), Some(i64s(&[2], &[0, -1]))],
        vec![],
        vec![f32s(&[2, 0], &[])],
    );
    // allowzero 0 with -1 (onnxruntime infers from non-zero dims)
    check(
        "Reshape",
        vec![Some(f32s(&[0, 3, 4], &[])), Some(i64s(&[3], &[0, -1, 2]))],
        vec![("allowzero", Attr::Int(1))],
        vec![f32s(&[0, 6, 2], &[])],
    );
    check(
        "Reshape",
        vec![Some(f32s(&[0, 3, 4], &[])), Some(i64s(&[2], &[-1, 0]))],
        vec![("allowzero", Attr::Int(1))],
        vec![f32s(&[12, 0], &[])],
    );
    // copied 0 leaves nothing to infer -1 from
    fails(
        "Reshape",
        vec![Some(f32s(&[0, 3], &[])), Some(i64s(&[2], &[0, -1]))],
        vec![],
        1,
    );
    fails(
        "Reshape",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[0, -1]))],
        vec![("allowzero", Attr::Int(1))],
        1,
    );
    fails(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[2], &[-1, -1]))],
        vec![],
        1,
    );
    fails(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[2], &[5, -1]))],
        vec![],
        1,
    );
    // 0 beyond the input rank
    fails(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[4], &[2, 3, 4, 0]))],
        vec![],
        1,
    );
    fails(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[3], &[2, -2, -6]))],
        vec![],
        1,
    );
    fails(
        "Reshape",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[2], &[4, 5]))],
        vec![],
        1,
    );
}

#[test]
fn flatten() {
    check(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![],
        vec![iota(&[2, 12])],
    );
    check(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("axis", Attr::Int(0))],
        vec![iota(&[1, 24])],
    );
    check(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("axis", Attr::Int(3))],
        vec![iota(&[24, 1])],
    );
    check(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("axis", Attr::Int(-1))],
        vec![iota(&[6, 4])],
    );
    check(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("axis", Attr::Int(-3))],
        vec![iota(&[1, 24])],
    );
    check(
        "Flatten",
        vec![Some(i64s(&[3], &[1, 2, 3]))],
        vec![("axis", Attr::Int(1))],
        vec![i64s(&[3, 1], &[1, 2, 3])],
    );
    fails(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("axis", Attr::Int(4))],
        1,
    );
    fails(
        "Flatten",
        vec![Some(iota(&[2, 3, 4]))],
        vec![("axis", Attr::Int(-4))],
        1,
    );
}

#[test]
fn concat() {
    check(
        "Concat",
        vec![
            Some(iota(&[2, 1])),
            Some(f32s(&[2, 2], &[10.0, 11.0, 12.0, 13.0])),
            Some(f32s(&[2, 3], &[20.0, 21.0, 22.0, 23.0, 24.0, 25.0])),
        ],
        vec![("axis", Attr::Int(-1))],
        vec![f32s(
            &[2, 6],
            &[
                0.0, 10.0, 11.0, 20.0, 21.0, 22.0, 1.0, 12.0, 13.0, 23.0, 24.0, 25.0,
            ],
        )],
    );
    check(
        "Concat",
        vec![
            Some(iota(&[2, 2, 1])),
            Some(f32s(&[2, 2, 1], &[7.0, 8.0, 9.0, 10.0])),
        ],
        vec![("axis", Attr::Int(1))],
        vec![f32s(&[2, 4, 1], &[0.0, 1.0, 7.0, 8.0, 2.0, 3.0, 9.0, 10.0])],
    );
    // empty part
    check(
        "Concat",
        vec![Some(f32s(&[0, 3], &[])), Some(iota(&[2, 3]))],
        vec![("axis", Attr::Int(0))],
        vec![iota(&[2, 3])],
    );
    check(
        "Concat",
        vec![
            Some(i64s(&[2], &[1, 2])),
            Some(i64s(&[0], &[])),
            Some(i64s(&[1], &[3])),
        ],
        vec![("axis", Attr::Int(0))],
        vec![i64s(&[3], &[1, 2, 3])],
    );
    check(
        "Concat",
        vec![
            Some(bools(&[2, 1], &[true, false])),
            Some(bools(&[2, 1], &[false, true])),
        ],
        vec![("axis", Attr::Int(1))],
        vec![bools(&[2, 2], &[true, false, false, true])],
    );
    check(
        "Concat",
        vec![Some(iota(&[2, 3]))],
        vec![("axis", Attr::Int(1))],
        vec![iota(&[2, 3])],
    );
    // float16 values pass through
    check(
        "Concat",
        vec![
            Some(f16s(&[2], &[0.099975586, 0.19995117])),
            Some(f16s(&[1], &[3.3007812])),
        ],
        vec![("axis", Attr::Int(0))],
        vec![f16s(&[3], &[0.099975586, 0.19995117, 3.3007812])],
    );
    // dtype mismatch
    fails(
        "Concat",
        vec![Some(iota(&[1])), Some(f64s(&[1], &[0.0]))],
        vec![("axis", Attr::Int(0))],
        1,
    );
    fails(
        "Concat",
        vec![Some(iota(&[2, 3])), Some(iota(&[3]))],
        vec![("axis", Attr::Int(0))],
        1,
    );
    fails(
        "Concat",
        vec![Some(iota(&[2, 3])), Some(iota(&[2, 2]))],
        vec![("axis", Attr::Int(0))],
        1,
    );
    fails(
        "Concat",
        vec![Some(iota(&[2, 3])), Some(iota(&[2, 3]))],
        vec![("axis", Attr::Int(2))],
        1,
    );
}

#[test]
fn split() {
    // uneven: ceil(7/4)=2 each, remainder last
    check(
        "Split",
        vec![Some(iota(&[7]))],
        vec![("num_outputs", Attr::Int(4))],
        vec![
            iota(&[2]),
            f32s(&[2], &[2.0, 3.0]),
            f32s(&[2], &[4.0, 5.0]),
            f32s(&[1], &[6.0]),
        ],
    );
    // remainder 0
    check(
        "Split",
        vec![Some(iota(&[6]))],
        vec![("num_outputs", Attr::Int(4))],
        vec![
            iota(&[2]),
            f32s(&[2], &[2.0, 3.0]),
            f32s(&[2], &[4.0, 5.0]),
            f32s(&[0], &[]),
        ],
    );
    check(
        "Split",
        vec![Some(iota(&[2, 6]))],
        vec![("num_outputs", Attr::Int(3)), ("axis", Attr::Int(-1))],
        vec![
            f32s(&[2, 2], &[0.0, 1.0, 6.0, 7.0]),
            f32s(&[2, 2], &[2.0, 3.0, 8.0, 9.0]),
            f32s(&[2, 2], &[4.0, 5.0, 10.0, 11.0]),
        ],
    );
    check(
        "Split",
        vec![Some(i64s(&[2], &[0, 1]))],
        vec![("num_outputs", Attr::Int(3))],
        vec![i64s(&[1], &[0]), i64s(&[1], &[1]), i64s(&[0], &[])],
    );
    check(
        "Split",
        vec![Some(f32s(&[0, 2], &[]))],
        vec![("num_outputs", Attr::Int(2))],
        vec![f32s(&[0, 2], &[]), f32s(&[0, 2], &[])],
    );
    check(
        "Split",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[1, 2]))],
        vec![("axis", Attr::Int(1))],
        vec![
            f32s(&[2, 1], &[0.0, 3.0]),
            f32s(&[2, 2], &[1.0, 2.0, 4.0, 5.0]),
        ],
    );
    check(
        "Split",
        vec![Some(iota(&[3, 2])), Some(i64s(&[2], &[0, 3]))],
        vec![],
        vec![f32s(&[0, 2], &[]), iota(&[3, 2])],
    );
    check(
        "Split",
        vec![
            Some(bools(&[2, 2], &[true, false, false, true])),
            Some(i64s(&[2], &[1, 1])),
        ],
        vec![("axis", Attr::Int(1))],
        vec![
            bools(&[2, 1], &[true, false]),
            bools(&[2, 1], &[false, true]),
        ],
    );
    // negative last part
    fails(
        "Split",
        vec![Some(iota(&[5]))],
        vec![("num_outputs", Attr::Int(4))],
        4,
    );
    fails(
        "Split",
        vec![Some(iota(&[6]))],
        vec![("num_outputs", Attr::Int(3))],
        2,
    );
    // Opsets 13–17 (no `split`, no `num_outputs`): equal parts, one per output.
    check(
        "Split",
        vec![Some(iota(&[6]))],
        vec![],
        vec![iota(&[3]), f32s(&[3], &[3.0, 4.0, 5.0])],
    );
    check(
        "Split",
        vec![Some(iota(&[2, 6]))],
        vec![("axis", Attr::Int(1))],
        vec![
            f32s(&[2, 2], &[0.0, 1.0, 6.0, 7.0]),
            f32s(&[2, 2], &[2.0, 3.0, 8.0, 9.0]),
            f32s(&[2, 2], &[4.0, 5.0, 10.0, 11.0]),
        ],
    );
    fails("Split", vec![Some(iota(&[7]))], vec![], 2);
    // Opsets 11–12: the sizes as an attribute.
    check(
        "Split",
        vec![Some(iota(&[5]))],
        vec![("split", Attr::Ints(vec![2, 3]))],
        vec![iota(&[2]), f32s(&[3], &[2.0, 3.0, 4.0])],
    );
    fails(
        "Split",
        vec![Some(iota(&[5])), Some(i64s(&[2], &[2, 3]))],
        vec![("split", Attr::Ints(vec![2, 3]))],
        2,
    );
    fails(
        "Split",
        vec![Some(iota(&[6])), Some(i64s(&[2], &[3, 3]))],
        vec![("num_outputs", Attr::Int(2))],
        2,
    );
    fails(
        "Split",
        vec![Some(iota(&[6])), Some(i64s(&[2], &[2, 3]))],
        vec![],
        2,
    );
    fails(
        "Split",
        vec![Some(iota(&[6])), Some(i64s(&[3], &[2, 2, 2]))],
        vec![],
        2,
    );
}

#[test]
fn slice() {
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[1000])),
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(
            &[2, 3, 3],
            &[
                1.0, 2.0, 3.0, 5.0, 6.0, 7.0, 9.0, 10.0, 11.0, 13.0, 14.0, 15.0, 17.0, 18.0, 19.0,
                21.0, 22.0, 23.0,
            ],
        )],
    );
    // axes default to the first axes
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[2], &[0, 1])),
            Some(i64s(&[2], &[2, -1])),
        ],
        vec![],
        vec![f32s(
            &[2, 1, 4],
            &[4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0],
        )],
    );
    // reverse an axis
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[-1])),
            Some(i64s(&[1], &[-1000])),
            Some(i64s(&[1], &[2])),
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(
            &[2, 3, 4],
            &[
                3.0, 2.0, 1.0, 0.0, 7.0, 6.0, 5.0, 4.0, 11.0, 10.0, 9.0, 8.0, 15.0, 14.0, 13.0,
                12.0, 19.0, 18.0, 17.0, 16.0, 23.0, 22.0, 21.0, 20.0,
            ],
        )],
    );
    // extreme bounds with a negative step
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[i64::MAX])),
            Some(i64s(&[1], &[i64::MIN])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[-2])),
        ],
        vec![],
        vec![f32s(
            &[2, 2, 4],
            &[
                8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 20.0, 21.0, 22.0, 23.0, 12.0, 13.0, 14.0,
                15.0,
            ],
        )],
    );
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[10])),
            Some(i64s(&[1], &[-10])),
            Some(i64s(&[1], &[2])),
            Some(i64s(&[1], &[-3])),
        ],
        vec![],
        vec![f32s(
            &[2, 3, 2],
            &[
                3.0, 0.0, 7.0, 4.0, 11.0, 8.0, 15.0, 12.0, 19.0, 16.0, 23.0, 20.0,
            ],
        )],
    );
    // onnxruntime: an INT_MAX end with a negative step runs through index 0
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[-1])),
            Some(i64s(&[1], &[i64::MAX])),
            Some(i64s(&[1], &[2])),
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(
            &[2, 3, 4],
            &[
                3.0, 2.0, 1.0, 0.0, 7.0, 6.0, 5.0, 4.0, 11.0, 10.0, 9.0, 8.0, 15.0, 14.0, 13.0,
                12.0, 19.0, 18.0, 17.0, 16.0, 23.0, 22.0, 21.0, 20.0,
            ],
        )],
    );
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i32s(&[1], &[-2])),
            Some(i32s(&[1], &[2147483647])),
            Some(i32s(&[1], &[1])),
            Some(i32s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(
            &[2, 2, 4],
            &[
                4.0, 5.0, 6.0, 7.0, 0.0, 1.0, 2.0, 3.0, 16.0, 17.0, 18.0, 19.0, 12.0, 13.0, 14.0,
                15.0,
            ],
        )],
    );
    // just below INT_MAX: clamped to the last index
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[2147483646])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(&[2, 0, 4], &[])],
    );
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[2], &[-100, 0])),
            Some(i64s(&[2], &[100, i64::MAX])),
            Some(i64s(&[2], &[2, 0])),
            Some(i64s(&[2], &[3, i64::MAX])),
        ],
        vec![],
        vec![f32s(&[1, 3, 2], &[0.0, 3.0, 4.0, 7.0, 8.0, 11.0])],
    );
    // empty result
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[3])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[2])),
        ],
        vec![],
        vec![f32s(&[2, 3, 0], &[])],
    );
    // empty result, negative step
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[3])),
            Some(i64s(&[1], &[2])),
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(&[2, 3, 0], &[])],
    );
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[2], &[2, 0])),
            Some(i64s(&[2], &[0, 3])),
            Some(i64s(&[2], &[1, 0])),
            Some(i64s(&[2], &[-1, 2])),
        ],
        vec![],
        vec![f32s(
            &[1, 2, 4],
            &[8.0, 9.0, 10.0, 11.0, 4.0, 5.0, 6.0, 7.0],
        )],
    );
    // int32 starts/ends/axes
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i32s(&[1], &[1])),
            Some(i32s(&[1], &[3])),
            Some(i32s(&[1], &[1])),
        ],
        vec![],
        vec![f32s(
            &[2, 2, 4],
            &[
                4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0,
                23.0,
            ],
        )],
    );
    // nothing to slice
    check(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[0], &[])),
            Some(i64s(&[0], &[])),
        ],
        vec![],
        vec![iota(&[2, 3, 4])],
    );
    check(
        "Slice",
        vec![
            Some(f64s(&[3], &[0.1, 0.2, 0.3])),
            Some(i64s(&[1], &[-1])),
            Some(i64s(&[1], &[i64::MIN])),
            None,
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f64s(&[3], &[0.3, 0.2, 0.1])],
    );
    check(
        "Slice",
        vec![
            Some(f32s(&[0, 3], &[])),
            Some(i64s(&[1], &[0])),
            Some(i64s(&[1], &[-1])),
            Some(i64s(&[1], &[0])),
            Some(i64s(&[1], &[-1])),
        ],
        vec![],
        vec![f32s(&[0, 3], &[])],
    );
    check(
        "Slice",
        vec![
            Some(i64s(&[10], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])),
            Some(i64s(&[1], &[-3])),
            Some(i64s(&[1], &[i64::MAX])),
            None,
            Some(i64s(&[1], &[1])),
        ],
        vec![],
        vec![i64s(&[3], &[7, 8, 9])],
    );
    // step 0
    fails(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[0])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[0])),
            Some(i64s(&[1], &[0])),
        ],
        vec![],
        1,
    );
    // repeated axis
    fails(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[2], &[0, 0])),
            Some(i64s(&[2], &[1, 1])),
            Some(i64s(&[2], &[1, -2])),
        ],
        vec![],
        1,
    );
    fails(
        "Slice",
        vec![
            Some(iota(&[2, 3, 4])),
            Some(i64s(&[1], &[0])),
            Some(i64s(&[1], &[1])),
            Some(i64s(&[1], &[3])),
        ],
        vec![],
        1,
    );
    // more starts than axes
    fails(
        "Slice",
        vec![
            Some(iota(&[2, 3])),
            Some(i64s(&[3], &[0, 0, 0])),
            Some(i64s(&[3], &[1, 1, 1])),
        ],
        vec![],
        1,
    );
}

#[test]
fn gather() {
    check(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[2, 2], &[0, -1, 2, 1]))],
        vec![("axis", Attr::Int(1))],
        vec![f32s(
            &[2, 2, 2, 4],
            &[
                0.0, 1.0, 2.0, 3.0, 8.0, 9.0, 10.0, 11.0, 8.0, 9.0, 10.0, 11.0, 4.0, 5.0, 6.0, 7.0,
                12.0, 13.0, 14.0, 15.0, 20.0, 21.0, 22.0, 23.0, 20.0, 21.0, 22.0, 23.0, 16.0, 17.0,
                18.0, 19.0,
            ],
        )],
    );
    // scalar index drops the axis
    check(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[], &[-1]))],
        vec![],
        vec![f32s(
            &[3, 4],
            &[
                12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0, 21.0, 22.0, 23.0,
            ],
        )],
    );
    check(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i32s(&[2], &[3, 0]))],
        vec![("axis", Attr::Int(-1))],
        vec![f32s(
            &[2, 3, 2],
            &[
                3.0, 0.0, 7.0, 4.0, 11.0, 8.0, 15.0, 12.0, 19.0, 16.0, 23.0, 20.0,
            ],
        )],
    );
    check(
        "Gather",
        vec![
            Some(i64s(&[5], &[0, 10, 20, 30, 40])),
            Some(i64s(&[3], &[4, 0, 4])),
        ],
        vec![],
        vec![i64s(&[3], &[40, 0, 40])],
    );
    check(
        "Gather",
        vec![
            Some(bools(&[2], &[true, false])),
            Some(i64s(&[3], &[1, 1, 0])),
        ],
        vec![],
        vec![bools(&[3], &[false, false, true])],
    );
    check(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[0], &[]))],
        vec![("axis", Attr::Int(2))],
        vec![f32s(&[2, 3, 0], &[])],
    );
    fails(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[1], &[3]))],
        vec![("axis", Attr::Int(1))],
        1,
    );
    fails(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[1], &[-4]))],
        vec![("axis", Attr::Int(1))],
        1,
    );
    fails(
        "Gather",
        vec![Some(iota(&[2, 3, 4])), Some(i64s(&[1], &[0]))],
        vec![("axis", Attr::Int(3))],
        1,
    );
}

#[test]
fn shape_and_size() {
    check(
        "Shape",
        vec![Some(iota(&[2, 3, 4]))],
        vec![],
        vec![i64s(&[3], &[2, 3, 4])],
    );
    check(
        "Shape",
        vec![Some(f32s(&[], &[1.0]))],
        vec![],
        vec![i64s(&[0], &[])],
    );
    check(
        "Shape",
        vec![Some(f32s(
            &[2, 3, 4, 5],
            &[
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            ],
        ))],
        vec![("start", Attr::Int(-3)), ("end", Attr::Int(100))],
        vec![i64s(&[3], &[3, 4, 5])],
    );
    check(
        "Shape",
        vec![Some(f32s(
            &[2, 3, 4, 5],
            &[
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            ],
        ))],
        vec![("start", Attr::Int(3)), ("end", Attr::Int(1))],
        vec![i64s(&[0], &[])],
    );
    check(
        "Shape",
        vec![Some(f32s(
            &[2, 3, 4, 5],
            &[
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            ],
        ))],
        vec![("start", Attr::Int(-100)), ("end", Attr::Int(-1))],
        vec![i64s(&[3], &[2, 3, 4])],
    );
    check(
        "Shape",
        vec![Some(f32s(
            &[2, 3, 4, 5],
            &[
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            ],
        ))],
        vec![("start", Attr::Int(1))],
        vec![i64s(&[3], &[3, 4, 5])],
    );
    check(
        "Size",
        vec![Some(iota(&[2, 3, 4]))],
        vec![],
        vec![i64s(&[], &[24])],
    );
    check(
        "Size",
        vec![Some(f32s(&[], &[2.0]))],
        vec![],
        vec![i64s(&[], &[1])],
    );
    check(
        "Size",
        vec![Some(bools(&[3, 0], &[]))],
        vec![],
        vec![i64s(&[], &[0])],
    );
}

#[test]
fn unsqueeze() {
    check(
        "Unsqueeze",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[-1, 0]))],
        vec![],
        vec![iota(&[1, 2, 3, 1])],
    );
    check(
        "Unsqueeze",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[1, 3]))],
        vec![],
        vec![iota(&[2, 1, 3, 1])],
    );
    check(
        "Unsqueeze",
        vec![Some(i64s(&[], &[5])), Some(i64s(&[1], &[0]))],
        vec![],
        vec![i64s(&[1], &[5])],
    );
    check(
        "Unsqueeze",
        vec![Some(iota(&[2, 3])), Some(i64s(&[0], &[]))],
        vec![],
        vec![iota(&[2, 3])],
    );
    fails(
        "Unsqueeze",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[0, 0]))],
        vec![],
        1,
    );
    fails(
        "Unsqueeze",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[0, -4]))],
        vec![],
        1,
    );
    fails(
        "Unsqueeze",
        vec![Some(iota(&[2, 3])), Some(i64s(&[1], &[4]))],
        vec![],
        1,
    );
}

#[test]
fn squeeze() {
    // no axes: all size-1 axes
    check(
        "Squeeze",
        vec![Some(iota(&[1, 3, 1, 2]))],
        vec![],
        vec![iota(&[3, 2])],
    );
    check(
        "Squeeze",
        vec![Some(iota(&[1, 3, 1, 2])), Some(i64s(&[1], &[-2]))],
        vec![],
        vec![iota(&[1, 3, 2])],
    );
    // repeated axis is accepted
    check(
        "Squeeze",
        vec![Some(iota(&[1, 3, 1, 2])), Some(i64s(&[2], &[0, -4]))],
        vec![],
        vec![iota(&[3, 1, 2])],
    );
    // empty axes: all size-1 axes
    check(
        "Squeeze",
        vec![Some(iota(&[1, 3, 1, 2])), Some(i64s(&[0], &[]))],
        vec![],
        vec![iota(&[3, 2])],
    );
    check(
        "Squeeze",
        vec![Some(i64s(&[1, 1], &[1]))],
        vec![],
        vec![i64s(&[], &[1])],
    );
    fails(
        "Squeeze",
        vec![Some(iota(&[1, 3, 1, 2])), Some(i64s(&[1], &[1]))],
        vec![],
        1,
    );
    fails(
        "Squeeze",
        vec![Some(iota(&[1, 3, 1, 2])), Some(i64s(&[1], &[4]))],
        vec![],
        1,
    );
}

#[test]
fn expand() {
    check(
        "Expand",
        vec![Some(iota(&[3, 1])), Some(i64s(&[3], &[2, 1, 4]))],
        vec![],
        vec![f32s(
            &[2, 3, 4],
            &[
                0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0,
                1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0,
            ],
        )],
    );
    // lower-rank shape
    check(
        "Expand",
        vec![Some(iota(&[2, 3])), Some(i64s(&[1], &[3]))],
        vec![],
        vec![iota(&[2, 3])],
    );
    check(
        "Expand",
        vec![Some(iota(&[2, 3])), Some(i64s(&[3], &[1, 1, 1]))],
        vec![],
        vec![iota(&[1, 2, 3])],
    );
    // 0-sized
    check(
        "Expand",
        vec![
            Some(f32s(&[1, 3], &[0.0, 0.0, 0.0])),
            Some(i64s(&[2], &[0, 1])),
        ],
        vec![],
        vec![f32s(&[0, 3], &[])],
    );
    check(
        "Expand",
        vec![Some(bools(&[2], &[true, false])), Some(i64s(&[2], &[2, 2]))],
        vec![],
        vec![bools(&[2, 2], &[true, false, true, false])],
    );
    check(
        "Expand",
        vec![Some(i64s(&[], &[7])), Some(i64s(&[1], &[2]))],
        vec![],
        vec![i64s(&[2], &[7, 7])],
    );
    fails(
        "Expand",
        vec![Some(iota(&[2, 3])), Some(i64s(&[1], &[4]))],
        vec![],
        1,
    );
    fails(
        "Expand",
        vec![Some(iota(&[2, 3])), Some(i64s(&[1], &[-1]))],
        vec![],
        1,
    );
}

#[test]
fn tile() {
    check(
        "Tile",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[2, 1]))],
        vec![],
        vec![f32s(
            &[4, 3],
            &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        )],
    );
    check(
        "Tile",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[2, 3]))],
        vec![],
        vec![f32s(
            &[4, 9],
            &[
                0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0, 5.0, 3.0,
                4.0, 5.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0,
                5.0, 3.0, 4.0, 5.0,
            ],
        )],
    );
    check(
        "Tile",
        vec![Some(bools(&[2], &[true, false])), Some(i64s(&[1], &[3]))],
        vec![],
        vec![bools(&[6], &[true, false, true, false, true, false])],
    );
    check(
        "Tile",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[0, 2]))],
        vec![],
        vec![f32s(&[0, 6], &[])],
    );
    check(
        "Tile",
        vec![Some(i64s(&[], &[4])), Some(i64s(&[0], &[]))],
        vec![],
        vec![i64s(&[], &[4])],
    );
    fails(
        "Tile",
        vec![Some(iota(&[2, 3])), Some(i64s(&[2], &[1, -1]))],
        vec![],
        1,
    );
    fails(
        "Tile",
        vec![Some(iota(&[2, 3])), Some(i64s(&[1], &[2]))],
        vec![],
        1,
    );
}

#[test]
fn range() {
    // floats accumulate
    check(
        "Range",
        vec![
            Some(f32s(&[], &[0.1])),
            Some(f32s(&[], &[1.0])),
            Some(f32s(&[], &[0.1])),
        ],
        vec![],
        vec![f32s(
            &[9],
            &[
                0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.70000005, 0.8000001, 0.9000001,
            ],
        )],
    );
    check(
        "Range",
        vec![
            Some(f32s(&[], &[1.0])),
            Some(f32s(&[], &[-1.0])),
            Some(f32s(&[], &[-0.3])),
        ],
        vec![],
        vec![f32s(
            &[7],
            &[
                1.0,
                0.7,
                0.39999998,
                0.099999964,
                -0.20000005,
                -0.50000006,
                -0.8000001,
            ],
        )],
    );
    // 1-element 1-D bounds
    check(
        "Range",
        vec![
            Some(iota(&[1])),
            Some(f32s(&[], &[1.0])),
            Some(f32s(&[], &[0.3])),
        ],
        vec![],
        vec![f32s(&[4], &[0.0, 0.3, 0.6, 0.90000004])],
    );
    check(
        "Range",
        vec![
            Some(f32s(&[], &[1.0])),
            Some(iota(&[])),
            Some(f32s(&[], &[0.5])),
        ],
        vec![],
        vec![f32s(&[0], &[])],
    );
    // float64 bounds are held as f32, so only close
    close(
        "Range",
        vec![
            Some(f64s(&[], &[0.1])),
            Some(f64s(&[], &[1.0])),
            Some(f64s(&[], &[0.1])),
        ],
        vec![],
        vec![f64s(
            &[9],
            &[
                0.1,
                0.2,
                0.30000000000000004,
                0.4,
                0.5,
                0.6,
                0.7,
                0.7999999999999999,
                0.8999999999999999,
            ],
        )],
    );
    check(
        "Range",
        vec![
            Some(i64s(&[], &[10])),
            Some(i64s(&[], &[1])),
            Some(i64s(&[], &[-3])),
        ],
        vec![],
        vec![i64s(&[3], &[10, 7, 4])],
    );
    check(
        "Range",
        vec![
            Some(i32s(&[], &[1])),
            Some(i32s(&[], &[8])),
            Some(i32s(&[], &[3])),
        ],
        vec![],
        vec![i32s(&[3], &[1, 4, 7])],
    );
    check(
        "Range",
        vec![
            Some(i64s(&[], &[-5])),
            Some(i64s(&[], &[6])),
            Some(i64s(&[], &[5])),
        ],
        vec![],
        vec![i64s(&[3], &[-5, 0, 5])],
    );
    check(
        "Range",
        vec![
            Some(i64s(&[], &[3])),
            Some(i64s(&[], &[3])),
            Some(i64s(&[], &[1])),
        ],
        vec![],
        vec![i64s(&[0], &[])],
    );
    fails(
        "Range",
        vec![
            Some(i64s(&[], &[10])),
            Some(i64s(&[], &[1])),
            Some(i64s(&[], &[0])),
        ],
        vec![],
        1,
    );
    fails(
        "Range",
        vec![Some(iota(&[])), Some(f32s(&[], &[1.0])), Some(iota(&[]))],
        vec![],
        1,
    );
    fails(
        "Range",
        vec![
            Some(i64s(&[1, 1], &[0])),
            Some(i64s(&[], &[3])),
            Some(i64s(&[], &[1])),
        ],
        vec![],
        1,
    );
}

#[test]
fn constant_of_shape() {
    // default: float32 zeros
    check(
        "ConstantOfShape",
        vec![Some(i64s(&[2], &[2, 3]))],
        vec![],
        vec![f32s(&[2, 3], &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0])],
    );
    check(
        "ConstantOfShape",
        vec![Some(i64s(&[1], &[2]))],
        vec![("value", Attr::Tensor(i64s(&[1], &[7]).to_data()))],
        vec![i64s(&[2], &[7, 7])],
    );
    // empty shape: a scalar
    check(
        "ConstantOfShape",
        vec![Some(i64s(&[0], &[]))],
        vec![("value", Attr::Tensor(f32s(&[1], &[1.5]).to_data()))],
        vec![f32s(&[], &[1.5])],
    );
    check(
        "ConstantOfShape",
        vec![Some(i64s(&[2], &[2, 0]))],
        vec![("value", Attr::Tensor(bools(&[1], &[true]).to_data()))],
        vec![bools(&[2, 0], &[])],
    );
    check(
        "ConstantOfShape",
        vec![Some(i64s(&[1], &[3]))],
        vec![("value", Attr::Tensor(i32s(&[1], &[-2]).to_data()))],
        vec![i32s(&[3], &[-2, -2, -2])],
    );
    fails(
        "ConstantOfShape",
        vec![Some(i64s(&[2], &[2, -1]))],
        vec![],
        1,
    );
    fails(
        "ConstantOfShape",
        vec![Some(i64s(&[1, 2], &[2, 3]))],
        vec![],
        1,
    );
}

#[test]
fn constant() {
    check(
        "Constant",
        vec![],
        vec![(
            "value",
            Attr::Tensor(i32s(&[2, 2], &[1, 2, 3, 4]).to_data()),
        )],
        vec![i32s(&[2, 2], &[1, 2, 3, 4])],
    );
    check(
        "Constant",
        vec![],
        vec![("value", Attr::Tensor(f32s(&[2], &[0.5, -1.0]).to_data()))],
        vec![f32s(&[2], &[0.5, -1.0])],
    );
    check(
        "Constant",
        vec![],
        vec![("value_float", Attr::Float(2.5))],
        vec![f32s(&[], &[2.5])],
    );
    check(
        "Constant",
        vec![],
        vec![("value_floats", Attr::Floats(vec![1.0, 2.5]))],
        vec![f32s(&[2], &[1.0, 2.5])],
    );
    check(
        "Constant",
        vec![],
        vec![("value_int", Attr::Int(-3))],
        vec![i64s(&[], &[-3])],
    );
    check(
        "Constant",
        vec![],
        vec![("value_ints", Attr::Ints(vec![4, 5, 6]))],
        vec![i64s(&[3], &[4, 5, 6])],
    );
}
