//! The side condition of GemmAsMatMul (`rewrites/recognize/gemm.rules`): a `Gemm` that only
//! multiplies the rows of a flattened `x [.., K]` by `W [K, N]` and adds a `[N]` bias, its
//! result reshaped back to `x`'s leading dims, is `Add(MatMul(x, W), b)` (what `mobius build`
//! emits, and what the bias-taking fusions match).

use egg::Id;

use super::head_layout::reshaped_dims;
use crate::ir::DType;
use crate::ops::types::SymDim;
use crate::ops::value::AttrValue;
use crate::opt::analysis::OnnxGraph;
use crate::opt::shape_value::shape_value;

/// Whether a float attribute class is unset (its default is 1) or set to exactly 1.
fn unit_or_unset(g: &OnnxGraph, a: Id) -> bool {
    match g[a].data.attr() {
        Some(AttrValue::Unset) => true,
        Some(AttrValue::Float(bits)) => f32::from_bits(*bits) == 1.0,
        _ => false,
    }
}

/// Whether an integer attribute class is unset (its default is 0) or set to 0.
fn zero_or_unset(g: &OnnxGraph, a: Id) -> bool {
    matches!(
        g[a].data.attr(),
        Some(AttrValue::Unset) | Some(AttrValue::Int(0))
    )
}

/// The dtype and dims of class `id` when both are inferred and no dim is unknown.
fn typed_dims(g: &OnnxGraph, id: Id) -> Option<(DType, Vec<SymDim>)> {
    let t = g[id].data.tensor()?;
    let dims = t.shape.clone()?;
    (!dims.contains(&SymDim::Unknown)).then_some((t.dtype?, dims))
}

/// `?x ?flat ?flat_zero ?w ?b ?alpha ?beta ?trans_a ?trans_b ?shape ?shape_zero` of
/// `Reshape(Gemm(Reshape(x, flat), w, b; alpha, beta, transA, transB), shape)`: all f32, `x`
/// of rank ≥ 2 with a known last dim K, `flat` giving `[rows, K]`, `w` `[K, N]`, `b` `[N]`,
/// alpha and beta 1, no transposes, and `shape` giving `x`'s leading dims followed by N — so
/// the whole is `Add(MatMul(x, w), b)`. A 0 in `shape` is refused (with `allowzero` 0 it would
/// copy a dim of the 2-D Gemm result, not of `x`).
pub fn gemm_is_matmul_add(
    g: &OnnxGraph,
    [x, flat, flat_zero, w, b, alpha, beta, trans_a, trans_b, shape, shape_zero]: [Id; 11],
) -> bool {
    gemm_result_dims(g, [x, flat, flat_zero, w, b])
        .zip(shape_value(g, shape))
        .is_some_and(|(dims, target)| {
            unit_or_unset(g, alpha)
                && unit_or_unset(g, beta)
                && zero_or_unset(g, trans_a)
                && zero_or_unset(g, trans_b)
                && !target.contains(&SymDim::Known(0))
                // The Gemm result [rows, N] holds the elements of `dims` in the same order, so
                // reshaping either gives the same dims.
                && reshaped_dims(g, &dims, shape, shape_zero).is_some_and(|out| out == dims)
        })
}

/// The dims of `MatMul(x, w)` (x's leading dims, then N) when `Reshape(x, flat)` is `[rows, K]`
/// for x's own last dim K, `w` is `[K, N]` and `b` is `[N]`, all f32.
fn gemm_result_dims(g: &OnnxGraph, [x, flat, flat_zero, w, b]: [Id; 5]) -> Option<Vec<SymDim>> {
    let (xt, xd) = typed_dims(g, x)?;
    let (wt, wd) = typed_dims(g, w)?;
    let (bt, bd) = typed_dims(g, b)?;
    let k = xd.last()?.known()?;
    let two_d = reshaped_dims(g, &xd, flat, flat_zero)?;
    let ([_, fk], [wk, n], [bn]) = (two_d.as_slice(), wd.as_slice(), bd.as_slice()) else {
        return None;
    };
    let n = n.known()?;
    let ok = xd.len() >= 2
        && xt == DType::F32
        && wt == DType::F32
        && bt == DType::F32
        && fk.known() == Some(k)
        && wk.known() == Some(k)
        && bn.known() == Some(n);
    ok.then(|| {
        let mut dims = xd[..xd.len() - 1].to_vec();
        dims.push(SymDim::Known(n));
        dims
    })
}
