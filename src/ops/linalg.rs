//! Linear algebra no decoder build emits: `Det` (the determinant of each trailing square
//! matrix, by LU decomposition with partial pivoting in f64) and `MatMulInteger` (2-D 8-bit
//! matrices less their zero points, multiplied exactly into int32).

use super::infer::Infer;
use super::types::TensorType;
use super::{OpCall, OpDef, Tensor};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("Det", &[]).infer(infer_det).eval(det),
    OpDef::onnx("MatMulInteger", &[])
        .infer(|c| vec![c.ty(0).with_unknown_shape().with_dtype(Some(DType::I32))])
        .eval(mat_mul_integer),
];

/// The input's batch dims, its dtype.
fn infer_det(call: &Infer<'_>) -> Vec<TensorType> {
    let t = call.ty(0);
    let shape = t
        .shape
        .as_ref()
        .filter(|s| s.len() >= 2)
        .map(|s| s[..s.len() - 2].to_vec());
    vec![TensorType {
        dtype: t.dtype,
        shape,
    }]
}

fn det(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let rank = x.shape.len();
    if rank < 2 || x.shape[rank - 1] != x.shape[rank - 2] {
        return Err(call.error(format!(
            "input must end in a square matrix [.., n, n], got {:?}",
            x.shape
        )));
    }
    let n = x.shape[rank - 1];
    let shape = x.shape[..rank - 2].to_vec();
    call.alloc(&shape)?;
    let v = x.floats()?;
    let out = v
        .chunks(n * n)
        .take(shape.iter().product())
        .map(|m| {
            let mut a: Vec<f64> = m.iter().map(|&x| x as f64).collect();
            let mut d = 1.0f64;
            for col in 0..n {
                let pivot = (col..n)
                    .max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))
                    .expect("col < n");
                if a[pivot * n + col] == 0.0 {
                    return 0.0;
                }
                if pivot != col {
                    for k in 0..n {
                        a.swap(pivot * n + k, col * n + k);
                    }
                    d = -d;
                }
                let p = a[col * n + col];
                d *= p;
                for row in col + 1..n {
                    let f = a[row * n + col] / p;
                    for k in col..n {
                        a[row * n + k] -= f * a[col * n + k];
                    }
                }
            }
            d as f32
        })
        .collect();
    Ok(vec![Tensor::float(x.dtype, shape, out)])
}

/// One zero point: a scalar or one per row of A (per column of B), as integers.
fn zero_points(call: &OpCall<'_>, i: usize, count: usize, what: &str) -> Result<Vec<i64>> {
    match call.optional(i) {
        None => Ok(vec![0; count]),
        Some(z) => {
            let v = z.ints().map_err(|e| call.error(e))?;
            match v.len() {
                1 => Ok(vec![v[0]; count]),
                n if n == count => Ok(v.to_vec()),
                n => Err(call.error(format!("{what} holds {n} values; expected 1 or {count}"))),
            }
        }
    }
}

fn mat_mul_integer(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (a, b) = (call.input(0)?, call.input(1)?);
    if a.shape.len() != 2 || b.shape.len() != 2 || a.shape[1] != b.shape[0] {
        return Err(call.error(format!(
            "A {:?} and B {:?} must be [M, K] and [K, N]",
            a.shape, b.shape
        )));
    }
    let (m, k, n) = (a.shape[0], a.shape[1], b.shape[1]);
    call.alloc(&[m, n])?;
    let (av, bv) = (
        a.ints().map_err(|e| call.error(e))?,
        b.ints().map_err(|e| call.error(e))?,
    );
    let za = zero_points(call, 2, m, "a_zero_point")?;
    let zb = zero_points(call, 3, n, "b_zero_point")?;
    let mut out = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|p| (av[i * k + p] - za[i]) * (bv[p * n + j] - zb[j]))
                .sum::<i64>();
        }
    }
    Ok(vec![Tensor::int(DType::I32, vec![m, n], out)])
}
