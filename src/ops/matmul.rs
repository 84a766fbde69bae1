//! Matrix products: `MatMul` (numpy `matmul` semantics) and `Gemm`. Float products accumulate
//! in f64 and are rounded to the output dtype once; integer products wrap to the dtype's width.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::cost::{Cost, Work};
use super::elementwise::wrap_int;
use super::infer::{broadcast_type, shape_dims};
use super::tensor::{broadcast_index, broadcast_shape};
use super::types::TensorType;
use super::{OpCall, OpDef, Tensor, Values};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("MatMul", &[])
        .infer(|c| vec![matmul_type(&c.ty(0), &c.ty(1))])
        .cost(PRODUCT)
        .eval(matmul),
    OpDef::onnx("Gemm", &["alpha", "beta", "transA", "transB"])
        .infer(|c| {
            vec![gemm_type(
                &c.ty(0),
                &c.ty(1),
                c.int("transA"),
                c.int("transB"),
            )]
        })
        .cost(PRODUCT)
        .eval(gemm),
];

/// A matrix product's cost.
const PRODUCT: Cost = Cost::KERNEL.work(Work::Product);

/// The sizes of a batched product: per batch element, the indices of its A and B matrices,
/// multiplied as `m x k` by `k x n`.
struct Dims {
    pairs: Vec<(usize, usize)>,
    m: usize,
    k: usize,
    n: usize,
}

/// The row-major `m x n` products of the matrix pairs of `dims`, concatenated; `fma(acc, a, b)`
/// accumulates `acc + a * b`, starting from `zero`.
fn batched<T: Copy, A: Copy>(
    x: &[T],
    y: &[T],
    dims: &Dims,
    zero: A,
    fma: impl Fn(A, T, T) -> A,
) -> Vec<A> {
    let Dims { m, k, n, .. } = *dims;
    let mut out = Vec::with_capacity(dims.pairs.len() * m * n);
    let mut row = vec![zero; n];
    for &(pa, pb) in &dims.pairs {
        let (a, b) = (&x[pa * m * k..][..m * k], &y[pb * k * n..][..k * n]);
        for i in 0..m {
            row.fill(zero);
            for p in 0..k {
                let s = a[i * k + p];
                for (acc, &v) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    *acc = fma(*acc, s, v);
                }
            }
            out.extend_from_slice(&row);
        }
    }
    out
}

/// `MatMul`: 1-D operands are promoted to matrices (and the added dimension removed from the
/// result); batch dimensions broadcast.
pub(super) fn matmul(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = (call.input(0)?, call.input(1)?);
    if a.dtype != b.dtype {
        return Err(call.error(format!("input dtypes differ: {} and {}", a.dtype, b.dtype)));
    }
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(call.error("operands must have rank >= 1"));
    }
    let a_shape = match a.shape.as_slice() {
        [k] => vec![1, *k],
        s => s.to_vec(),
    };
    let b_shape = match b.shape.as_slice() {
        [k] => vec![*k, 1],
        s => s.to_vec(),
    };
    let (ra, rb) = (a_shape.len(), b_shape.len());
    let (m, k, k2, n) = (
        a_shape[ra - 2],
        a_shape[ra - 1],
        b_shape[rb - 2],
        b_shape[rb - 1],
    );
    if k != k2 {
        return Err(call.error(format!(
            "inner dimensions differ: {:?} and {:?}",
            a.shape, b.shape
        )));
    }
    let (a_batch, b_batch) = (&a_shape[..ra - 2], &b_shape[..rb - 2]);
    let batch = broadcast_shape(&[a_batch, b_batch]).map_err(|e| call.error(e))?;
    call.alloc(&batch)?;
    call.alloc(&[&batch[..], &[m, n]].concat())?;
    let pairs = broadcast_index(a_batch, &batch)
        .into_iter()
        .zip(broadcast_index(b_batch, &batch))
        .collect();
    let dims = Dims { pairs, m, k, n };
    let mut shape = batch;
    if a.shape.len() > 1 {
        shape.push(m);
    }
    if b.shape.len() > 1 {
        shape.push(n);
    }
    let out = match (&a.values, &b.values) {
        (Values::Float(x), Values::Float(y)) => {
            let acc = batched(x, y, &dims, 0f64, |acc, p, q| acc + p as f64 * q as f64);
            Tensor::float(a.dtype, shape, acc.into_iter().map(|v| v as f32).collect())
        }
        (Values::Int(x), Values::Int(y)) => {
            let acc = batched(x, y, &dims, 0i64, |acc, p, q| {
                acc.wrapping_add(p.wrapping_mul(q))
            });
            let values = acc.into_iter().map(|v| wrap_int(a.dtype, v)).collect();
            Tensor::int(a.dtype, shape, values)
        }
        _ => return Err(call.error(format!("unsupported dtype {}", a.dtype))),
    };
    Ok(vec![out])
}

/// `Gemm`: `alpha * A' B' + beta * C` with A', B' optionally transposed (`transA`, `transB`)
/// and the optional C unidirectionally broadcast to the result; C is ignored when `beta` is 0,
/// as in onnxruntime. Float dtypes only.
fn gemm(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = (call.input(0)?, call.input(1)?);
    let (x, y) = (
        a.floats().map_err(|e| call.error(e))?,
        b.floats().map_err(|e| call.error(e))?,
    );
    if a.shape.len() != 2 || b.shape.len() != 2 {
        return Err(call.error(format!(
            "A and B must be matrices, found {:?} and {:?}",
            a.shape, b.shape
        )));
    }
    let (trans_a, trans_b) = (call.int("transA", 0) != 0, call.int("transB", 0) != 0);
    let (alpha, beta) = (
        call.float("alpha", 1.0) as f64,
        call.float("beta", 1.0) as f64,
    );
    let (m, k) = if trans_a {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let (k2, n) = if trans_b {
        (b.shape[1], b.shape[0])
    } else {
        (b.shape[0], b.shape[1])
    };
    if k != k2 {
        return Err(call.error(format!(
            "inner dimensions differ: {:?} and {:?}",
            a.shape, b.shape
        )));
    }
    let a_at = |i: usize, p: usize| f64::from(if trans_a { x[p * m + i] } else { x[i * k + p] });
    let b_at = |p: usize, j: usize| f64::from(if trans_b { y[j * k + p] } else { y[p * n + j] });
    let out_shape = [m, n];
    call.alloc(&out_shape)?;
    let bias = match call.optional(2) {
        Some(c) if beta != 0.0 => {
            let values = c.floats().map_err(|e| call.error(e))?;
            if broadcast_shape(&[&c.shape, &out_shape]).ok().as_deref() != Some(&out_shape[..]) {
                return Err(call.error(format!(
                    "C of shape {:?} does not broadcast to {out_shape:?}",
                    c.shape
                )));
            }
            let index = broadcast_index(&c.shape, &out_shape);
            index.into_iter().map(|i| beta * values[i] as f64).collect()
        }
        _ => vec![0.0; m * n],
    };
    let values = (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            let dot: f64 = (0..k).map(|p| a_at(i, p) * b_at(p, j)).sum();
            (alpha * dot + bias[ij]) as f32
        })
        .collect();
    Ok(vec![Tensor::float(a.dtype, out_shape.to_vec(), values)])
}

/// `MatMul` of two operands of rank ≥ 2: the broadcast batch dims, then `[M, N]`, in A's
/// dtype.
fn matmul_type(a: &TensorType, b: &TensorType) -> TensorType {
    let shape = match (shape_dims(a), shape_dims(b)) {
        (Some(x), Some(y)) if x.len() >= 2 && y.len() >= 2 => {
            let batch = broadcast_type(
                &TensorType {
                    dtype: None,
                    shape: Some(x[..x.len() - 2].to_vec()),
                },
                &TensorType {
                    dtype: None,
                    shape: Some(y[..y.len() - 2].to_vec()),
                },
            );
            let mut s = batch.shape.unwrap_or_default();
            s.push(x[x.len() - 2].clone());
            s.push(y[y.len() - 1].clone());
            Some(s)
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}

/// Gemm: `A [M, K]` (or `[K, M]` with `transA`) times `B [K, N]` (or `[N, K]` with `transB`)
/// gives `[M, N]` in A's dtype.
fn gemm_type(
    a: &TensorType,
    b: &TensorType,
    trans_a: Option<i64>,
    trans_b: Option<i64>,
) -> TensorType {
    let shape = match (shape_dims(a), shape_dims(b)) {
        (Some([a0, a1]), Some([b0, b1])) => {
            let m = if trans_a == Some(1) { a1 } else { a0 };
            let n = if trans_b == Some(1) { b0 } else { b1 };
            Some(vec![m.clone(), n.clone()])
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}
