//! Decomposed RMSNorm and LayerNorm graphs in the spellings exporters emit (and near misses of
//! them), for the recognition rule proofs and tests. Included by path where needed.
#![allow(dead_code)]

use mobius::ir::{Attr, DType, GraphBuilder, TensorData};

/// How `x²` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Square {
    /// `Pow(x, 2)`.
    Pow,
    /// `Mul(x, x)`.
    Mul,
}

/// How the division by the root mean square is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inverse {
    /// `x · Reciprocal(Sqrt(v))` (dynamo's `rsqrt`).
    Reciprocal,
    /// `x · Div(1, Sqrt(v))` (TorchScript's `rsqrt`).
    DivOne,
    /// `x / Sqrt(v)`.
    Div,
}

/// One spelling of the normalization core, and the near misses it can be built with.
#[derive(Debug, Clone, PartialEq)]
pub struct Spelling {
    /// `x²`.
    pub square: Square,
    /// The division.
    pub inverse: Inverse,
    /// `Mul(x, inv)` (true) or `Mul(inv, x)`.
    pub x_first: bool,
    /// `Add(eps, mean)` (true) or `Add(mean, eps)`.
    pub eps_first: bool,
    /// The `ReduceMean` axes (the right one: −1 or rank − 1).
    pub axis: i64,
    /// The `ReduceMean` `keepdims` (the right one: 1).
    pub keepdims: i64,
    /// The `Pow` exponent (the right one: 2).
    pub exponent: f32,
    /// The epsilon's shape (the right one: `[]` or `[1]`).
    pub eps_shape: Vec<usize>,
}

impl Spelling {
    /// The exported spelling `(square, inverse, x_first, eps_first)`, reduced over axis −1.
    pub fn new(square: Square, inverse: Inverse, x_first: bool, eps_first: bool) -> Spelling {
        Spelling {
            square,
            inverse,
            x_first,
            eps_first,
            axis: -1,
            keepdims: 1,
            exponent: 2.0,
            eps_shape: Vec::new(),
        }
    }

    /// Every combination of the exported spellings.
    pub fn all() -> Vec<Spelling> {
        let mut all = Vec::new();
        for square in [Square::Pow, Square::Mul] {
            for inverse in [Inverse::Reciprocal, Inverse::DivOne, Inverse::Div] {
                for x_first in [true, false] {
                    for eps_first in [true, false] {
                        all.push(Spelling::new(square, inverse, x_first, eps_first));
                    }
                }
            }
        }
        all
    }
}

fn scalar(b: &mut GraphBuilder, value: f32) -> String {
    b.constant(TensorData::from_f32(vec![], &[value]))
}

/// `mean(x²) + ε` over `spelling.axis`.
fn mean_square_plus_eps(b: &mut GraphBuilder, x: &str, eps: f32, s: &Spelling) -> String {
    let square = match s.square {
        Square::Pow => {
            let e = scalar(b, s.exponent);
            b.op("Pow", &[x, &e], vec![])
        }
        Square::Mul => b.op("Mul", &[x, x], vec![]),
    };
    let axes = b.const_i64(&[s.axis]);
    let mean = b.op(
        "ReduceMean",
        &[&square, &axes],
        vec![("keepdims", Attr::Int(s.keepdims))],
    );
    let n = s.eps_shape.iter().product();
    let eps = b.constant(TensorData::from_f32(s.eps_shape.clone(), &vec![eps; n]));
    match s.eps_first {
        true => b.op("Add", &[&eps, &mean], vec![]),
        false => b.op("Add", &[&mean, &eps], vec![]),
    }
}

/// `x / √v` in the spelling's division form.
fn divide_by_root(b: &mut GraphBuilder, x: &str, v: &str, s: &Spelling) -> String {
    let root = b.op("Sqrt", &[v], vec![]);
    let inverse = match s.inverse {
        Inverse::Div => return b.op("Div", &[x, &root], vec![]),
        Inverse::Reciprocal => b.op("Reciprocal", &[&root], vec![]),
        Inverse::DivOne => {
            let one = scalar(b, 1.0);
            b.op("Div", &[&one, &root], vec![])
        }
    };
    match s.x_first {
        true => b.op("Mul", &[x, &inverse], vec![]),
        false => b.op("Mul", &[&inverse, x], vec![]),
    }
}

/// The RMS normalization of `x` (no weight) in spelling `s`.
pub fn rms_core(b: &mut GraphBuilder, x: &str, eps: f32, s: &Spelling) -> String {
    let v = mean_square_plus_eps(b, x, eps, s);
    divide_by_root(b, x, &v, s)
}

/// The layer normalization of `x` (no weight, no bias) in spelling `s` (its mean over the
/// same axis as its variance).
pub fn layer_core(b: &mut GraphBuilder, x: &str, eps: f32, s: &Spelling) -> String {
    let axes = b.const_i64(&[s.axis]);
    let mean = b.op(
        "ReduceMean",
        &[x, &axes],
        vec![("keepdims", Attr::Int(s.keepdims))],
    );
    let centered = b.op("Sub", &[x, &mean], vec![]);
    let v = mean_square_plus_eps(b, &centered, eps, s);
    divide_by_root(b, &centered, &v, s)
}

/// `Mul(w, y)` (`first`) or `Mul(y, w)`.
pub fn scaled(b: &mut GraphBuilder, y: &str, w: &str, first: bool) -> String {
    match first {
        true => b.op("Mul", &[w, y], vec![]),
        false => b.op("Mul", &[y, w], vec![]),
    }
}

/// `Cast(x → dtype)`.
pub fn cast(b: &mut GraphBuilder, x: &str, dtype: DType) -> String {
    b.op(
        "Cast",
        &[x],
        vec![("to", Attr::Int(dtype.onnx_code() as i64))],
    )
}
