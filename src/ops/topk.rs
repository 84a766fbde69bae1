//! `TopK` (opset 11+): the `k` largest (or smallest) elements along an axis, with their
//! int64 indices.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use super::infer::{input_type, literal_ints, normal_axis, shape_dims, InputView};
use super::tensor::axis;
use super::types::{SymDim, TensorType};
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx("TopK", &["axis", "largest", "sorted"])
    .infer(|c| top_k_types(c.inputs, c.int("axis").unwrap_or(-1)))
    .eval(top_k)];

/// `TopK(X, K; axis = -1, largest = 1, sorted = 1)`: along `axis`, the `K` (a one-element
/// int64 input, `0 ≤ K ≤` the axis' extent) largest elements (smallest with `largest = 0`),
/// best first, equal values in index order, as onnxruntime orders them. Output order is
/// always sorted (`sorted = 0` leaves it unspecified). NaN ranks above every number when
/// taking the largest and below when taking the smallest.
fn top_k(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    let ks = call.input(1)?.ints().map_err(|e| call.error(e))?;
    let &[k] = ks else {
        return Err(call.error(format!("input K must hold one value, found {}", ks.len())));
    };
    let ax = axis(call.int("axis", -1), x.shape.len()).map_err(|e| call.error(e))?;
    let n = x.shape[ax];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= n)
        .ok_or_else(|| call.error(format!("K = {k} is outside 0..={n} (axis {ax})")))?;
    let largest = call.int("largest", 1) != 0;
    let mut shape = x.shape.clone();
    shape[ax] = k;
    call.alloc(&shape)?;
    let inner: usize = x.shape[ax + 1..].iter().product();
    let outer: usize = x.shape[..ax].iter().product();
    let keys = x.as_f64();
    // Whether element `a` ranks before element `b` (by value, then index).
    let before = |a: f64, b: f64| match (a.is_nan(), b.is_nan()) {
        (true, true) => false,
        (true, false) => largest,
        (false, true) => !largest,
        _ if largest => a > b,
        _ => a < b,
    };
    let mut picked = Vec::with_capacity(outer * k * inner);
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            order.clear();
            order.extend(0..n);
            // A stable sort keeps equal values in index order.
            order.sort_by(|&a, &b| {
                let (va, vb) = (keys[at(a)], keys[at(b)]);
                if before(va, vb) {
                    std::cmp::Ordering::Less
                } else if before(vb, va) {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            });
            picked.push(order[..k].to_vec());
        }
    }
    // Output element (o, j, i) is the j-th pick of row (o, i).
    let flat = |o: usize, j: usize, i: usize| picked[o * inner + i][j];
    let mut index = Vec::with_capacity(outer * k * inner);
    let mut position = Vec::with_capacity(outer * k * inner);
    for o in 0..outer {
        for j in 0..k {
            for i in 0..inner {
                let src = flat(o, j, i);
                index.push(src as i64);
                position.push(o * n * inner + src * inner + i);
            }
        }
    }
    let values = match &x.values {
        Values::Float(v) => Tensor::float(
            x.dtype,
            shape.clone(),
            position.iter().map(|&p| v[p]).collect(),
        ),
        Values::Int(v) => Tensor::int(
            x.dtype,
            shape.clone(),
            position.iter().map(|&p| v[p]).collect(),
        ),
        Values::Bool(_) => return Err(call.error("takes a numeric input, not bool")),
    };
    Ok(vec![values, Tensor::int(DType::I64, shape, index)])
}

/// A reduction over constant `axes` (the second input since opset 18, an attribute before):
/// those dims become 1 (`keepdims` 1, the default) or disappear. No axes reduce every dim,
/// unless `noop_with_empty_axes` makes the op an identity.
/// TopK's values (the input's dtype) and int64 indices: the input shape with `k` (the
/// constant input 1) along `axis`.
fn top_k_types(inputs: &[InputView<'_>], axis_attr: i64) -> Vec<TensorType> {
    let t = input_type(inputs, 0);
    let k = inputs
        .get(1)
        .and_then(|v| v.konst)
        .and_then(literal_ints)
        .and_then(|k| (k.len() == 1).then(|| k[0]));
    let shape = shape_dims(&t).map(|d| {
        let at = normal_axis(axis_attr, d.len());
        d.iter()
            .enumerate()
            .map(|(i, dim)| match (Some(i) == at, k) {
                (false, _) => dim.clone(),
                (true, Some(k)) => SymDim::Known(k),
                (true, None) => SymDim::Unknown,
            })
            .collect()
    });
    let values = TensorType {
        dtype: t.dtype,
        shape,
    };
    let indices = values.with_dtype(Some(DType::I64));
    vec![values, indices]
}

#[cfg(test)]
mod tests {
    use crate::interp::eval_op;
    use crate::ir::{Attr, Attrs, DType};
    use crate::limits::InterpLimits;
    use crate::ops::Tensor;

    fn run(x: &Tensor, k: i64, attrs: &[(&str, i64)]) -> crate::Result<Vec<Tensor>> {
        let attrs: Attrs = attrs
            .iter()
            .map(|(n, v)| (n.to_string(), Attr::Int(*v)))
            .collect();
        let k = Tensor::int(DType::I64, vec![1], vec![k]);
        let limits = InterpLimits::default();
        eval_op(
            "t",
            ("", "TopK"),
            attrs,
            &[Some(x), Some(&k)],
            &["v", "i"],
            &limits,
        )
    }

    #[test]
    fn picks_along_the_axis_ties_in_index_order() {
        let x = Tensor::float(
            DType::F32,
            vec![2, 4],
            vec![1., 3., 3., 0., 5., -1., 2., 5.],
        );
        let out = run(&x, 2, &[]).unwrap();
        assert_eq!(out[0].floats().unwrap(), [3., 3., 5., 5.]);
        assert_eq!(out[1].ints().unwrap(), [1, 2, 0, 3]);
        let out = run(&x, 1, &[("axis", 0), ("largest", 0)]).unwrap();
        assert_eq!(out[0].shape, [1, 4]);
        assert_eq!(out[0].floats().unwrap(), [1., -1., 2., 0.]);
        assert_eq!(out[1].ints().unwrap(), [0, 1, 1, 0]);
    }

    #[test]
    fn rejects_k_out_of_range() {
        let x = Tensor::float(DType::F32, vec![3], vec![1., 2., 3.]);
        for k in [-1, 4] {
            let err = run(&x, k, &[]).unwrap_err().to_string();
            assert!(err.contains("K = "), "{err}");
        }
    }
}
