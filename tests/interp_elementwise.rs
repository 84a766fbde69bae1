//! The reference interpreter's elementwise, matmul and reduction ops. Expected values were
//! computed with onnxruntime 1.32 (CPU execution provider, opset 24) on the same inputs.

// Expected values are the exact decimal expansions of the f32/f16 results onnxruntime printed.
#![allow(clippy::excessive_precision)]

use std::collections::HashMap;

use mobius::interp::{eval_op, run_graph};

use mobius::ir::{Attr, DType, GraphBuilder, Shape, TensorData};
use mobius::limits::InterpLimits;
use mobius::ops::{Tensor, Values};
use mobius::weights::eval::Evaluator;

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

fn try_eval(
    domain: &str,
    op: &str,
    inputs: &[Option<&Tensor>],
    attrs: Vec<(&str, Attr)>,
) -> mobius::Result<Tensor> {
    let attrs = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    eval_op(
        "n",
        (domain, op),
        attrs,
        inputs,
        &["y"],
        &InterpLimits::default(),
    )
    .map(|mut outputs| outputs.remove(0))
}

fn eval(op: &str, inputs: &[&Tensor], attrs: Vec<(&str, Attr)>) -> Tensor {
    let inputs: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    try_eval("", op, &inputs, attrs).unwrap()
}

fn ms(op: &str, inputs: &[Option<&Tensor>]) -> Tensor {
    try_eval("com.microsoft", op, inputs, vec![]).unwrap()
}

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::float(DType::F32, shape.to_vec(), v.to_vec())
}

fn f16s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::float(DType::F16, shape.to_vec(), v.to_vec())
}

fn ints(dtype: DType, shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::int(dtype, shape.to_vec(), v.to_vec())
}

fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    ints(DType::I64, shape, v)
}

fn bools(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::bool(shape.to_vec(), v.to_vec())
}

/// Checks dtype, shape and values: NaN matches NaN, infinities and zeros match exactly,
/// finite values within `rel` of their magnitude (at least 1).
fn assert_close(t: &Tensor, dtype: DType, shape: &[usize], expected: &[f32], rel: f32) {
    assert_eq!(t.dtype, dtype, "dtype");
    assert_eq!(t.shape, shape, "shape");
    let got = t.floats().unwrap();
    assert_eq!(got.len(), expected.len(), "length");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let ok = if e.is_nan() {
            g.is_nan()
        } else if e.is_infinite() || e == 0.0 {
            g == e
        } else {
            (g - e).abs() <= rel * e.abs().max(1.0)
        };
        assert!(ok, "element {i}: got {g}, expected {e} (all: {got:?})");
    }
}

/// f32 results, to 1e-6.
fn assert_f32(t: &Tensor, shape: &[usize], expected: &[f32]) {
    assert_close(t, DType::F32, shape, expected, 1e-6);
}

/// f16/bf16 results, bit for bit (they must have been rounded the same way).
fn assert_exact(t: &Tensor, dtype: DType, shape: &[usize], expected: &[f32]) {
    assert_close(t, dtype, shape, expected, 0.0);
}

fn assert_ints(t: &Tensor, dtype: DType, shape: &[usize], expected: &[i64]) {
    assert_eq!((t.dtype, t.shape.as_slice()), (dtype, shape));
    assert_eq!(t.ints().unwrap(), expected);
}

fn assert_bools(t: &Tensor, shape: &[usize], expected: &[bool]) {
    assert_eq!((t.dtype, t.shape.as_slice()), (DType::Bool, shape));
    assert_eq!(t.bools().unwrap(), expected);
}

#[test]
fn arithmetic_broadcasts() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let row = f32s(&[3], &[10.0, 20.0, 30.0]);
    let col = f32s(&[2, 1], &[0.5, 10.0]);
    let sum = eval("Add", &[&a, &row], vec![]);
    assert_f32(&sum, &[2, 3], &[11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let diff = eval("Sub", &[&a, &col], vec![]);
    assert_f32(&diff, &[2, 3], &[0.5, 1.5, 2.5, -6.0, -5.0, -4.0]);
    let scalar = f32s(&[], &[2.0]);
    let prod = eval("Mul", &[&scalar, &col], vec![]);
    assert_f32(&prod, &[2, 1], &[1.0, 20.0]);
    let bad = f32s(&[2], &[1.0, 2.0]);
    assert!(try_eval("", "Add", &[Some(&a), Some(&bad)], vec![]).is_err());
    assert!(try_eval("", "Add", &[Some(&a), Some(&i64s(&[1], &[1]))], vec![]).is_err());
}

#[test]
fn f16_results_are_rounded() {
    let a = f16s(&[3], &[1.0, 2.0, 5.0]);
    let b = f16s(&[3], &[3.0, 3.0, 3.0]);
    let q = eval("Div", &[&a, &b], vec![]);
    assert_exact(
        &q,
        DType::F16,
        &[3],
        &[0.333251953125, 0.66650390625, 1.6669921875],
    );
    // 0.0004 is below half an f16 ulp of 1.
    let s = eval(
        "Add",
        &[&f16s(&[1], &[1.0]), &f16s(&[1], &[0.0004])],
        vec![],
    );
    assert_exact(&s, DType::F16, &[1], &[1.0]);
}

#[test]
fn integer_arithmetic_truncates_and_wraps() {
    let a = i64s(&[6], &[7, -7, 7, -7, -1, 5]);
    let b = i64s(&[6], &[2, 2, -2, -2, 3, 7]);
    let q = eval("Div", &[&a, &b], vec![]);
    assert_ints(&q, DType::I64, &[6], &[3, -3, -3, 3, 0, 0]);
    let max = ints(DType::I32, &[1], &[i32::MAX as i64]);
    let one = ints(DType::I32, &[1], &[1]);
    assert_ints(
        &eval("Add", &[&max, &one], vec![]),
        DType::I32,
        &[1],
        &[i32::MIN as i64],
    );
    let x = ints(DType::I8, &[1], &[127]);
    let y = ints(DType::I8, &[1], &[1]);
    assert_ints(&eval("Add", &[&x, &y], vec![]), DType::I8, &[1], &[-128]);
    let x = ints(DType::U8, &[1], &[200]);
    let y = ints(DType::U8, &[1], &[2]);
    assert_ints(&eval("Mul", &[&x, &y], vec![]), DType::U8, &[1], &[144]);
    let zero = i64s(&[1], &[0]);
    let err = try_eval("", "Div", &[Some(&a), Some(&zero)], vec![]).unwrap_err();
    assert!(err.to_string().contains("division by zero"), "{err}");
}

#[test]
fn pow_follows_the_base_dtype() {
    let base = f32s(&[6], &[-2.0, -8.0, 0.0, 2.0, 4.0, 1.5]);
    let exp = f32s(&[6], &[0.5, 1.0 / 3.0, -1.0, 0.5, 2.0, -2.5]);
    let p = eval("Pow", &[&base, &exp], vec![]);
    assert_f32(
        &p,
        &[6],
        &[NAN, NAN, INF, 1.4142135381698608, 16.0, 0.3628873825073242],
    );
    let fb = f32s(&[3], &[2.0, -3.0, 0.5]);
    let ie = i64s(&[3], &[3, 2, -2]);
    assert_f32(&eval("Pow", &[&fb, &ie], vec![]), &[3], &[8.0, 9.0, 4.0]);
    let ib = i64s(&[3], &[2, 3, 9]);
    let fe = f32s(&[3], &[0.5, 1.5, 0.5]);
    assert_ints(
        &eval("Pow", &[&ib, &fe], vec![]),
        DType::I64,
        &[3],
        &[1, 5, 3],
    );
    let ib = i64s(&[5], &[2, 3, -2, 2, 0]);
    let ie = i64s(&[5], &[3, 2, 3, -1, 0]);
    assert_ints(
        &eval("Pow", &[&ib, &ie], vec![]),
        DType::I64,
        &[5],
        &[8, 9, -8, 0, 1],
    );
}

#[test]
fn unary_math() {
    let x = f32s(&[5], &[-2.0, -0.5, 0.0, 0.5, 2.0]);
    let cases: [(&str, [f32; 5]); 6] = [
        (
            "Sqrt",
            [NAN, NAN, 0.0, 0.7071067690849304, 1.4142135381698608],
        ),
        (
            "Exp",
            [
                0.1353352814912796,
                0.6065306663513184,
                1.0,
                1.6487212181091309,
                7.389056205749512,
            ],
        ),
        (
            "Log",
            [NAN, NAN, -INF, -0.6931471824645996, 0.6931471824645996],
        ),
        (
            "Erf",
            [
                -0.9953222870826721,
                -0.5204998850822449,
                0.0,
                0.5204998850822449,
                0.9953222870826721,
            ],
        ),
        (
            "Tanh",
            [
                -0.9640275835990906,
                -0.46211716532707214,
                0.0,
                0.46211716532707214,
                0.9640275835990906,
            ],
        ),
        (
            "Sigmoid",
            [
                0.11920291185379028,
                0.3775407075881958,
                0.5,
                0.6224592924118042,
                0.8807970881462097,
            ],
        ),
    ];
    for (op, expected) in cases {
        assert_f32(&eval(op, &[&x], vec![]), &[5], &expected);
    }
    assert!(try_eval("", "Erf", &[Some(&i64s(&[1], &[1]))], vec![]).is_err());
}

#[test]
fn erf_is_precise() {
    // math.erf in f64, rounded to f32.
    let x = f32s(&[9], &[-7.0, -5.0, -3.0, -1.5, -0.3, 1e-3, 0.7, 2.2, 4.0]);
    let expected = [
        -1.0,
        -1.0,
        -0.9999778866767883,
        -0.9661051630973816,
        -0.32862675189971924,
        0.001128378789871931,
        0.6778011918067932,
        0.9981371760368347,
        1.0,
    ];
    assert_close(
        &eval("Erf", &[&x], vec![]),
        DType::F32,
        &[9],
        &expected,
        1e-7,
    );
    let nan = eval("Erf", &[&f32s(&[1], &[NAN])], vec![]);
    assert!(nan.floats().unwrap()[0].is_nan());
}

#[test]
fn neg_abs_relu() {
    let i = ints(DType::I8, &[3], &[-128, -5, 7]);
    assert_ints(&eval("Neg", &[&i], vec![]), DType::I8, &[3], &[-128, 5, -7]);
    assert_ints(&eval("Abs", &[&i], vec![]), DType::I8, &[3], &[-128, 5, 7]);
    assert_ints(&eval("Relu", &[&i], vec![]), DType::I8, &[3], &[0, 0, 7]);
    let f = f32s(&[4], &[NAN, -0.0, -3.0, 2.5]);
    let r = eval("Relu", &[&f], vec![]);
    assert_f32(&r, &[4], &[NAN, 0.0, 0.0, 2.5]);
    // onnxruntime keeps the sign of -0.0.
    assert!(r.floats().unwrap()[1].is_sign_negative());
    assert_f32(&eval("Neg", &[&f], vec![]), &[4], &[NAN, 0.0, 3.0, -2.5]);
    assert_f32(&eval("Abs", &[&f], vec![]), &[4], &[NAN, 0.0, 3.0, 2.5]);
}

#[test]
fn gelu_family() {
    let x = f32s(&[7], &[-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]);
    let exact = [
        -0.0040496885776519775,
        -0.15865525603294373,
        -0.1542687714099884,
        0.0,
        0.3457312285900116,
        0.8413447141647339,
        2.995950222015381,
    ];
    let tanh = [
        -0.0036375224590301514,
        -0.15880796313285828,
        -0.1542859971523285,
        0.0,
        0.3457140028476715,
        0.8411920070648193,
        2.9963626861572266,
    ];
    assert_f32(&eval("Gelu", &[&x], vec![]), &[7], &exact);
    let none = vec![("approximate", Attr::String("none".into()))];
    assert_f32(&eval("Gelu", &[&x], none), &[7], &exact);
    let approx = vec![("approximate", Attr::String("tanh".into()))];
    assert_f32(&eval("Gelu", &[&x], approx), &[7], &tanh);
    assert_f32(&ms("FastGelu", &[Some(&x)]), &[7], &tanh);

    let h = f16s(&[3], &[0.3, 1.7, -2.2]);
    let g = eval("Gelu", &[&h], vec![]);
    assert_exact(
        &g,
        DType::F16,
        &[3],
        &[0.1854248046875, 1.6240234375, -0.0306396484375],
    );

    let x = f32s(&[2, 3], &[-3.0, -1.0, -0.5, 0.0, 0.5, 1.0]);
    let bias = f32s(&[3], &[0.1, 0.2, 0.3]);
    let fast = ms("FastGelu", &[Some(&x), Some(&bias)]);
    assert_f32(
        &fast,
        &[2, 3],
        &[
            -0.004966685548424721,
            -0.16956830024719238,
            -0.08414857089519501,
            0.053982753306627274,
            0.5305701494216919,
            1.17392897605896,
        ],
    );
    let biased = ms("BiasGelu", &[Some(&x), Some(&bias)]);
    assert_f32(
        &biased,
        &[2, 3],
        &[
            -0.005410832352936268,
            -0.16948430240154266,
            -0.08414805680513382,
            0.05398278310894966,
            0.5306254625320435,
            1.174159288406372,
        ],
    );
    assert!(try_eval("com.microsoft", "BiasGelu", &[Some(&x)], vec![]).is_err());
}

#[test]
fn comparisons_and_logic() {
    let a = i64s(&[3], &[1, 2, 3]);
    let b = i64s(&[2, 1], &[1, 3]);
    let eq = eval("Equal", &[&a, &b], vec![]);
    assert_bools(&eq, &[2, 3], &[true, false, false, false, false, true]);
    let gt = eval("Greater", &[&a, &b], vec![]);
    assert_bools(&gt, &[2, 3], &[false, true, true, false, false, false]);
    let lt = eval("Less", &[&a, &b], vec![]);
    assert_bools(&lt, &[2, 3], &[false, false, false, true, true, false]);

    let nan = f32s(&[3], &[NAN, 1.0, 2.0]);
    let one = f32s(&[1], &[1.0]);
    assert_bools(
        &eval("Equal", &[&nan, &nan], vec![]),
        &[3],
        &[false, true, true],
    );
    assert_bools(
        &eval("Greater", &[&nan, &one], vec![]),
        &[3],
        &[false, false, true],
    );
    assert_bools(
        &eval("Less", &[&nan, &one], vec![]),
        &[3],
        &[false, false, false],
    );

    let p = bools(&[3], &[true, false, true]);
    let q = bools(&[2, 1], &[true, false]);
    assert_bools(
        &eval("Equal", &[&p, &q], vec![]),
        &[2, 3],
        &[true, false, true, false, true, false],
    );
    assert!(try_eval("", "Less", &[Some(&p), Some(&q)], vec![]).is_err());
    let and = eval("And", &[&p, &q], vec![]);
    assert_bools(&and, &[2, 3], &[true, false, true, false, false, false]);
    let or = eval("Or", &[&p, &q], vec![]);
    assert_bools(&or, &[2, 3], &[true, true, true, true, false, true]);
    assert_bools(&eval("Not", &[&p], vec![]), &[3], &[false, true, false]);
}

#[test]
fn where_broadcasts_three_ways() {
    let cond = bools(&[2, 1], &[true, false]);
    let x = i64s(&[3], &[1, 2, 3]);
    let y = i64s(&[], &[9]);
    assert_ints(
        &eval("Where", &[&cond, &x, &y], vec![]),
        DType::I64,
        &[2, 3],
        &[1, 2, 3, 9, 9, 9],
    );
    let x = f16s(&[3], &[1.5, 2.5, 3.5]);
    let y = f16s(&[2, 1], &[-1.0, -2.0]);
    let w = eval("Where", &[&cond, &x, &y], vec![]);
    assert_exact(&w, DType::F16, &[2, 3], &[1.5, 2.5, 3.5, -2.0, -2.0, -2.0]);
    let mismatched = f32s(&[1], &[0.0]);
    assert!(try_eval(
        "",
        "Where",
        &[Some(&cond), Some(&x), Some(&mismatched)],
        vec![]
    )
    .is_err());
}

fn cast(x: &Tensor, to: DType) -> Tensor {
    eval("Cast", &[x], vec![("to", Attr::Int(to.onnx_code() as i64))])
}

#[test]
fn cast_floats_to_integers_like_onnxruntime_on_x86() {
    let x = f32s(
        &[13],
        &[
            1.7, -1.7, 0.5, -0.5, NAN, INF, -INF, 3e9, -3e9, 300.0, -129.0, 255.9, 1e20,
        ],
    );
    let (l, m) = (i64::MIN, i32::MIN as i64);
    let expected_i64 = [
        1,
        -1,
        0,
        0,
        l,
        l,
        l,
        3_000_000_000,
        -3_000_000_000,
        300,
        -129,
        255,
        l,
    ];
    assert_ints(&cast(&x, DType::I64), DType::I64, &[13], &expected_i64);
    let expected_i32 = [1, -1, 0, 0, m, m, m, m, m, 300, -129, 255, m];
    assert_ints(&cast(&x, DType::I32), DType::I32, &[13], &expected_i32);
    let expected_i8 = [1, -1, 0, 0, 0, 0, 0, 0, 0, 44, 127, -1, 0];
    assert_ints(&cast(&x, DType::I8), DType::I8, &[13], &expected_i8);
    let expected_u8 = [1, 255, 0, 0, 0, 0, 0, 0, 0, 44, 127, 255, 0];
    assert_ints(&cast(&x, DType::U8), DType::U8, &[13], &expected_u8);
    let expected_f16 = [
        1.7001953125,
        -1.7001953125,
        0.5,
        -0.5,
        NAN,
        INF,
        -INF,
        INF,
        -INF,
        300.0,
        -129.0,
        255.875,
        INF,
    ];
    assert_exact(&cast(&x, DType::F16), DType::F16, &[13], &expected_f16);
    let z = f32s(&[4], &[0.0, -0.0, NAN, 1e-30]);
    assert_bools(&cast(&z, DType::Bool), &[4], &[false, false, true, true]);
    let h = f16s(&[4], &[2.5, -65504.0, NAN, 200.0]);
    assert_ints(&cast(&h, DType::I8), DType::I8, &[4], &[2, 32, 0, -56]);
}

#[test]
fn cast_rounds_to_half_precision() {
    let x = f32s(
        &[6],
        &[
            1.00048828125,
            1.00146484375,
            70000.0,
            1e-8,
            65519.0,
            65520.0,
        ],
    );
    let h = cast(&x, DType::F16);
    assert_exact(
        &h,
        DType::F16,
        &[6],
        &[1.0, 1.001953125, INF, 0.0, 65504.0, INF],
    );
    let x = f32s(
        &[7],
        &[
            1.00390625,
            1.01171875,
            3.4e38,
            1.0 + 2f32.powi(-8) + 2f32.powi(-20),
            NAN,
            -0.0,
            1e-40,
        ],
    );
    let b = cast(&x, DType::BF16);
    let tiny = f32::from_bits(0x0001_0000);
    assert_exact(
        &b,
        DType::BF16,
        &[7],
        &[1.0, 1.015625, INF, 1.0078125, NAN, -0.0, tiny],
    );
    assert!(b.floats().unwrap()[5].is_sign_negative());
    // Back to f32: unchanged.
    assert_eq!(
        cast(&b, DType::F32).floats().unwrap()[..4],
        b.floats().unwrap()[..4]
    );
}

#[test]
fn cast_between_integers_and_bools() {
    let i = i64s(
        &[11],
        &[
            0,
            1,
            -1,
            127,
            128,
            255,
            256,
            -129,
            1 << 31,
            (1 << 40) + 3,
            (1 << 53) + 1,
        ],
    );
    let expected_i32 = [0, 1, -1, 127, 128, 255, 256, -129, i32::MIN as i64, 3, 1];
    assert_ints(&cast(&i, DType::I32), DType::I32, &[11], &expected_i32);
    let expected_i8 = [0, 1, -1, 127, -128, -1, 0, 127, 0, 3, 1];
    assert_ints(&cast(&i, DType::I8), DType::I8, &[11], &expected_i8);
    let expected_u8 = [0, 1, 255, 127, 128, 255, 0, 127, 0, 3, 1];
    assert_ints(&cast(&i, DType::U8), DType::U8, &[11], &expected_u8);
    let mut expected_bool = [true; 11];
    expected_bool[0] = false;
    assert_bools(&cast(&i, DType::Bool), &[11], &expected_bool);
    let expected_f16 = [
        0.0, 1.0, -1.0, 127.0, 128.0, 255.0, 256.0, -129.0, INF, INF, INF,
    ];
    assert_exact(&cast(&i, DType::F16), DType::F16, &[11], &expected_f16);

    let b = bools(&[2], &[true, false]);
    assert_f32(&cast(&b, DType::F32), &[2], &[1.0, 0.0]);
    assert_ints(&cast(&b, DType::I64), DType::I64, &[2], &[1, 0]);
    assert_bools(&cast(&b, DType::Bool), &[2], &[true, false]);

    let like = ints(DType::I32, &[1], &[0]);
    let x = f32s(&[2], &[1.7, -2.5]);
    assert_ints(
        &eval("CastLike", &[&x, &like], vec![]),
        DType::I32,
        &[2],
        &[1, -2],
    );
    let id = eval("Identity", &[&like], vec![]);
    assert_eq!(id, like);
}

#[test]
fn matmul_batches_and_vectors() {
    let a: Vec<f32> = (1..=12).map(|v| v as f32 * 0.5 - 2.0).collect();
    let b: Vec<f32> = (0..36).map(|v| (v % 7) as f32 - 3.0).collect();
    let a = f32s(&[2, 1, 2, 3], &a);
    let b = f32s(&[3, 3, 4], &b);
    let expected = [
        4.5, 1.5, -1.5, 2.5, -1.5, 0.0, 1.5, -0.5, -3.5, -3.0, 4.5, 1.5, 2.5, -3.0, -1.5, 0.0, 2.5,
        -0.5, -3.5, -3.0, -0.5, 1.0, 2.5, -3.0, -7.5, -1.5, 4.5, -3.5, -13.5, -3.0, 7.5, -6.5, 8.5,
        -3.0, -7.5, -1.5, 14.5, -3.0, -13.5, -3.0, -3.5, 2.5, 8.5, -3.0, -6.5, 4.0, 14.5, -3.0,
    ];
    assert_f32(&eval("MatMul", &[&a, &b], vec![]), &[2, 3, 2, 4], &expected);

    let v = f32s(&[3], &[1.0, -2.0, 3.0]);
    let m = f32s(&[3, 2], &[-2.0, -1.0, 0.0, 1.0, 2.0, 3.0]);
    let mt = f32s(&[2, 3], &[-2.0, 0.0, 2.0, -1.0, 1.0, 3.0]);
    assert_f32(&eval("MatMul", &[&v, &m], vec![]), &[2], &[4.0, 6.0]);
    assert_f32(&eval("MatMul", &[&mt, &v], vec![]), &[2], &[4.0, 6.0]);
    assert_f32(&eval("MatMul", &[&v, &v], vec![]), &[], &[14.0]);
    let batch = f32s(&[2, 3, 2], &[1.0; 12]);
    assert_f32(&eval("MatMul", &[&v, &batch], vec![]), &[2, 2], &[2.0; 4]);
    let empty = eval(
        "MatMul",
        &[&f32s(&[2, 0], &[]), &f32s(&[0, 3], &[])],
        vec![],
    );
    assert_f32(&empty, &[2, 3], &[0.0; 6]);

    let x = ints(DType::I32, &[2, 2], &[1 << 30, 1 << 30, 1, 2]);
    let y = ints(DType::I32, &[2, 1], &[2, 3]);
    assert_ints(
        &eval("MatMul", &[&x, &y], vec![]),
        DType::I32,
        &[2, 1],
        &[1 << 30, 8],
    );
    assert!(try_eval("", "MatMul", &[Some(&mt), Some(&mt)], vec![]).is_err());
}

#[test]
fn matmul_f16_rounds_once() {
    // 1 + 2^-11 + 2^-11: each partial sum would round back to 1 in f16, the exact sum does not.
    let a = f16s(&[1, 3], &[1.0, 0.00048828125, 0.00048828125]);
    let b = f16s(&[3, 1], &[1.0, 1.0, 1.0]);
    assert_exact(
        &eval("MatMul", &[&a, &b], vec![]),
        DType::F16,
        &[1, 1],
        &[1.0009765625],
    );
}

#[test]
fn gemm_transposes_scales_and_broadcasts_c() {
    let a = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let at = f32s(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let b = f32s(&[3, 2], &[1.0, 0.0, -1.0, 2.0, 0.5, 3.0]);
    let bt = f32s(&[2, 3], &[1.0, -1.0, 0.5, 0.0, 2.0, 3.0]);
    let row = f32s(&[2], &[1.0, 10.0]);
    let attrs = vec![
        ("alpha", Attr::Float(2.0)),
        ("beta", Attr::Float(0.5)),
        ("transA", Attr::Int(1)),
    ];
    let y = try_eval("", "Gemm", &[Some(&at), Some(&b), Some(&row)], attrs).unwrap();
    assert_f32(&y, &[2, 2], &[1.5, 31.0, 4.5, 61.0]);
    let col = f32s(&[2, 1], &[1.0, 10.0]);
    let y = eval("Gemm", &[&a, &bt, &col], vec![("transB", Attr::Int(1))]);
    assert_f32(&y, &[2, 2], &[1.5, 14.0, 12.0, 38.0]);
    let y = eval("Gemm", &[&a, &b], vec![]);
    assert_f32(&y, &[2, 2], &[0.5, 13.0, 2.0, 28.0]);
    // beta = 0 ignores C entirely, even infinities.
    let inf = f32s(&[2], &[INF, 1.0]);
    let y = eval("Gemm", &[&a, &b, &inf], vec![("beta", Attr::Float(0.0))]);
    assert_f32(&y, &[2, 2], &[0.5, 13.0, 2.0, 28.0]);
    let wrong = f32s(&[3], &[1.0, 2.0, 3.0]);
    assert!(try_eval("", "Gemm", &[Some(&a), Some(&b), Some(&wrong)], vec![]).is_err());
}

fn r24() -> Tensor {
    let v: Vec<f32> = (0..24).map(|i| i as f32 * 0.25 - 1.0).collect();
    f32s(&[2, 3, 4], &v)
}

#[test]
fn reductions_with_axes_inputs() {
    let x = r24();
    let axes = i64s(&[2], &[0, -1]);
    let keep0 = vec![("keepdims", Attr::Int(0))];
    let s = try_eval("", "ReduceSum", &[Some(&x), Some(&axes)], keep0.clone()).unwrap();
    assert_f32(&s, &[3], &[7.0, 15.0, 23.0]);
    let s = eval("ReduceSum", &[&x, &i64s(&[1], &[-2])], vec![]);
    assert_f32(
        &s,
        &[2, 1, 4],
        &[0.0, 0.75, 1.5, 2.25, 9.0, 9.75, 10.5, 11.25],
    );
    // Repeated axes count once.
    let s = eval("ReduceSum", &[&x, &i64s(&[2], &[1, -2])], vec![]);
    assert_f32(
        &s,
        &[2, 1, 4],
        &[0.0, 0.75, 1.5, 2.25, 9.0, 9.75, 10.5, 11.25],
    );
    assert_f32(&eval("ReduceMean", &[&x], vec![]), &[1, 1, 1], &[1.875]);
    let m = try_eval(
        "",
        "ReduceMax",
        &[Some(&x), Some(&i64s(&[1], &[1]))],
        keep0.clone(),
    )
    .unwrap();
    assert_f32(&m, &[2, 4], &[1.0, 1.25, 1.5, 1.75, 4.0, 4.25, 4.5, 4.75]);
    assert!(try_eval(
        "",
        "ReduceSum",
        &[Some(&x), Some(&i64s(&[1], &[3]))],
        vec![]
    )
    .is_err());

    // No axes: all of them, or none with noop_with_empty_axes.
    let ones = f32s(&[2, 3], &[1.0; 6]);
    let empty = i64s(&[0], &[]);
    assert_f32(
        &eval("ReduceSum", &[&ones, &empty], vec![]),
        &[1, 1],
        &[6.0],
    );
    let noop = vec![("noop_with_empty_axes", Attr::Int(1))];
    let same = try_eval("", "ReduceSum", &[Some(&ones), Some(&empty)], noop.clone()).unwrap();
    assert_eq!(same, ones);
    let same = try_eval("", "ReduceSum", &[Some(&ones), None], noop).unwrap();
    assert_eq!(same, ones);
    let s = try_eval("", "ReduceSum", &[Some(&f32s(&[], &[3.0]))], keep0).unwrap();
    assert_f32(&s, &[], &[3.0]);
}

#[test]
fn reduction_edge_cases() {
    let i = i64s(&[2, 2], &[-1, -4, -7, 2]);
    let ax1 = i64s(&[1], &[1]);
    assert_ints(
        &eval("ReduceMean", &[&i, &ax1], vec![]),
        DType::I64,
        &[2, 1],
        &[-2, -2],
    );
    assert_ints(
        &eval("ReduceSum", &[&i, &ax1], vec![]),
        DType::I64,
        &[2, 1],
        &[-5, -5],
    );
    assert_ints(
        &eval("ReduceMax", &[&i, &ax1], vec![]),
        DType::I64,
        &[2, 1],
        &[-1, 2],
    );
    let h = f16s(&[3], &[1.0, 2.0, 4.0]);
    assert_exact(
        &eval("ReduceMean", &[&h], vec![]),
        DType::F16,
        &[1],
        &[2.333984375],
    );

    // ReduceMax keeps its first element unless a greater one follows: NaN first propagates.
    let mut v: Vec<f32> = (0..40).map(|i| i as f32).collect();
    v[0] = NAN;
    v[27] = NAN;
    let x = f32s(&[2, 20], &v);
    let rows = eval("ReduceMax", &[&x, &ax1], vec![]);
    assert_f32(&rows, &[2, 1], &[NAN, 39.0]);
    let cols = eval("ReduceMax", &[&x, &i64s(&[1], &[0])], vec![]);
    let mut expected: Vec<f32> = (20..40).map(|i| i as f32).collect();
    expected[0] = NAN;
    expected[7] = 7.0;
    assert_f32(&cols, &[1, 20], &expected);

    // Empty reductions: sum 0, mean 0, max the lowest value.
    let e = f32s(&[2, 0], &[]);
    assert_f32(
        &eval("ReduceSum", &[&e, &ax1], vec![]),
        &[2, 1],
        &[0.0, 0.0],
    );
    assert_f32(
        &eval("ReduceMean", &[&e, &ax1], vec![]),
        &[2, 1],
        &[0.0, 0.0],
    );
    assert_f32(
        &eval("ReduceMax", &[&e, &ax1], vec![]),
        &[2, 1],
        &[-INF, -INF],
    );
    let e = ints(DType::I32, &[2, 0], &[]);
    let lowest = i32::MIN as i64;
    assert_ints(
        &eval("ReduceMax", &[&e, &ax1], vec![]),
        DType::I32,
        &[2, 1],
        &[lowest, lowest],
    );
    let b = bools(&[2, 2], &[true, false, false, false]);
    assert_bools(
        &eval("ReduceMax", &[&b, &ax1], vec![]),
        &[2, 1],
        &[true, false],
    );
}

#[test]
fn softmax_along_axes() {
    let x = r24();
    let row = [
        0.16529618203639984,
        0.21224449574947357,
        0.2725273370742798,
        0.3499320149421692,
    ];
    let expected: Vec<f32> = row.iter().cycle().take(24).copied().collect();
    assert_f32(&eval("Softmax", &[&x], vec![]), &[2, 3, 4], &expected);
    let expected: Vec<f32> = [0.04742587357759476; 12]
        .into_iter()
        .chain([0.9525741338729858; 12])
        .collect();
    assert_f32(
        &eval("Softmax", &[&x], vec![("axis", Attr::Int(0))]),
        &[2, 3, 4],
        &expected,
    );
    let expected: Vec<f32> = [0.09003057330846786, 0.2447284758090973, 0.6652409434318542]
        .iter()
        .flat_map(|&p| [p; 4])
        .cycle()
        .take(24)
        .collect();
    assert_f32(
        &eval("Softmax", &[&x], vec![("axis", Attr::Int(-2))]),
        &[2, 3, 4],
        &expected,
    );

    let h = f16s(&[2, 3], &[1.0, 2.0, 3.0, 0.1, 0.2, 0.3]);
    let expected = [
        0.09002685546875,
        0.2447509765625,
        0.6650390625,
        0.300537109375,
        0.332275390625,
        0.3671875,
    ];
    assert_exact(
        &eval("Softmax", &[&h], vec![]),
        DType::F16,
        &[2, 3],
        &expected,
    );

    // Large values stay finite; all -inf, +inf or NaN give NaN as in onnxruntime.
    let x = f32s(&[4, 2], &[1000.0, 1001.0, -INF, -INF, INF, 1.0, NAN, 2.0]);
    let y = eval("Softmax", &[&x], vec![]);
    assert_f32(
        &y,
        &[4, 2],
        &[
            0.2689414322376251,
            0.7310585975646973,
            NAN,
            NAN,
            NAN,
            NAN,
            NAN,
            NAN,
        ],
    );
}

#[test]
fn runs_in_a_graph() {
    let mut g = GraphBuilder::new("g");
    let x = g.input("x", DType::F32, Shape::new([2usize, 3]));
    let w = g.constant(TensorData::from_f32(
        vec![3, 2],
        &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
    ));
    let mm = g.op("MatMul", &[&x, &w], vec![]);
    let axes = g.const_i64(&[-1]);
    let sum = g.op("ReduceSum", &[&mm, &axes], vec![("keepdims", Attr::Int(0))]);
    let half = g.constant(TensorData::from_f32(vec![], &[0.5]));
    let scaled = g.op("Mul", &[&sum, &half], vec![]);
    g.op_into("Cast", &[&scaled], vec![("to", Attr::Int(7))], "y");
    g.output("y", DType::I64, Shape::new([2usize]));
    let graph = g.finish();
    let inputs = HashMap::from([(
        "x".to_string(),
        f32s(&[2, 3], &[1.0, 2.0, 3.0, -4.0, -5.0, -6.0]),
    )]);
    let out = run_graph(&graph, &inputs, &mut Evaluator::new(None)).unwrap();
    // Rows: [1+3, 2+3] -> 9 * 0.5 = 4.5 -> 4; [-4-6, -5-6] -> -21 * 0.5 = -10.5 -> -10.
    assert_eq!(out["y"].values, Values::Int(vec![4, -10]));
}
