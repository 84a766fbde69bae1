//! Appliers of the norm recognition rules (`rewrites/recognize/`): the norm a proven chain
//! computes, with a unit scale (the weight, bias and casts are folded by further rules).
//! The predicates are in `src/rulebook/recognize.rs`.

use egg::Id;

use crate::ir::{DType, TensorData};
use crate::ops::value::{AttrValue, Literal};
use crate::opt::analysis::OnnxGraph;
use crate::opt::bind::{Applier, Site};
use crate::opt::emit::Emit;
use crate::opt::lang::Onnx;
use crate::rulebook::recognize::{centered_eps, mean_square_eps};

pub(super) const RMS_NORM_UNIT: Applier<2> = Applier::new(["?x", "?v"], rms_norm_unit);
pub(super) const LAYER_NORM_UNIT: Applier<3> = Applier::new(["?x", "?m", "?v"], layer_norm_unit);
pub(super) const RMS_NORM_WITHOUT_CASTS: Applier<2> =
    Applier::new(["?x", "?eps"], rms_norm_without_casts);

/// A `[hidden]` constant of ones of `x`'s float dtype (`x`'s last dim must be known).
fn ones_like_last_axis(g: &mut OnnxGraph, x: Id) -> Option<Id> {
    let t = g[x].data.tensor()?;
    let dtype = t.dtype?;
    let hidden = usize::try_from(t.shape.as_ref()?.last()?.known()?).ok()?;
    let one: Vec<u8> = match dtype {
        DType::F32 => 1f32.to_le_bytes().to_vec(),
        DType::F16 => half::f16::ONE.to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::ONE.to_le_bytes().to_vec(),
        _ => return None,
    };
    let data = TensorData {
        dtype,
        shape: vec![hidden],
        bytes: one.repeat(hidden),
    };
    Some(g.add(Onnx::Const(Box::new(Literal::from(&data)))))
}

/// `op(x, ones[hidden][, none]; axis −1, epsilon, stash_type 1)`.
fn unit_norm(g: &mut OnnxGraph, op: &str, x: Id, epsilon: f32, bias: bool) -> Option<Id> {
    let ones = ones_like_last_axis(g, x)?;
    let mut inputs = vec![x, ones];
    if bias {
        inputs.push(g.add(Onnx::Absent));
    }
    let attrs = [
        ("axis", AttrValue::Int(-1)),
        ("epsilon", AttrValue::Float(epsilon.to_bits())),
        ("stash_type", AttrValue::Int(1)),
    ];
    Some(Emit::new(g).op(op, &inputs, &attrs))
}

/// Reads `?x ?v` of an RMS normalization `x / √v` (`?v` = `mean(x²) + ε`, checked by
/// `mean-square-plus-eps`): `RMSNormalization(x, ones; axis −1, epsilon ε, stash_type 1)`.
fn rms_norm_unit(g: &mut OnnxGraph, _: Site<'_>, [x, v]: [Id; 2]) -> Option<Id> {
    let eps = mean_square_eps(g, v, x)?;
    unit_norm(g, "RMSNormalization", x, eps, false)
}

/// Reads `?x ?m ?v` of a layer normalization `(x − m) / √v` (`?m` the mean, `?v` the variance
/// plus ε, checked by `mean-over-last-axis` and `centered-variance-plus-eps`):
/// `LayerNormalization(x, ones, none; axis −1, epsilon ε, stash_type 1)`.
fn layer_norm_unit(g: &mut OnnxGraph, _: Site<'_>, [x, m, v]: [Id; 3]) -> Option<Id> {
    let eps = centered_eps(g, v, x, m)?;
    unit_norm(g, "LayerNormalization", x, eps, true)
}

/// Reads `?x ?eps` of `Cast(RMSNormalization(Cast(x → f32), ones; eps) → x's dtype)` (the
/// round trip checked by `f32-round-trip`, the scale by `unit-scale`):
/// `RMSNormalization(x, ones of x's dtype; axis −1, eps, stash_type 1)`, which normalizes in f32
/// and rounds to x's dtype once, as the casts do.
fn rms_norm_without_casts(g: &mut OnnxGraph, _: Site<'_>, [x, eps]: [Id; 2]) -> Option<Id> {
    let AttrValue::Float(bits) = g[eps].data.attr()? else {
        return None;
    };
    unit_norm(g, "RMSNormalization", x, f32::from_bits(*bits), false)
}
