//! The loss ops of ONNX's default domain: `NegativeLogLikelihoodLoss` and
//! `SoftmaxCrossEntropyLoss` (its log-softmax over the class axis, then the same loss). No
//! decoder build emits them and no rule rewrites them; the interpreter runs them so that
//! `mobius run` and `verify` take the graphs that hold them.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

use egg::Symbol;

use super::elementwise::first_type;
use super::infer::Infer;
use super::types::TensorType;
use super::value::AttrValue;
use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[
    OpDef::onnx("NegativeLogLikelihoodLoss", LOSS_ATTRS)
        .infer(loss_type)
        .eval(|c| {
            let x = c.input(0)?;
            nll(c, x, &x.as_f64()).map(|loss| vec![loss])
        }),
    OpDef::onnx("SoftmaxCrossEntropyLoss", LOSS_ATTRS)
        .infer(|c| {
            let mut types = loss_type(c);
            types.extend(first_type(c));
            types
        })
        .eval(softmax_cross_entropy),
];

/// The attributes of both losses.
const LOSS_ATTRS: &[&str] = &["ignore_index", "reduction"];

/// The loss' type: the input's dtype; its shape only where `reduction` is `none` (the target's).
fn loss_type(c: &Infer<'_>) -> Vec<TensorType> {
    let none = Symbol::from("none");
    let reduced = !matches!(c.attrs.get("reduction"), Some(AttrValue::Str(s)) if *s == none);
    let shape = match reduced {
        true => Some(vec![]),
        false => c.ty(1).shape,
    };
    vec![TensorType {
        dtype: c.ty(0).dtype,
        shape,
    }]
}

/// The loss of the log-probabilities `logp` (laid out as input 0, `[N, C, d1, …]`) against the
/// class indices of input 1 (`[N, d1, …]`), each weighted by input 2's entry for its class
/// (1 without weights): `-logp[n, t, d…]·w[t]`, 0 where the target is `ignore_index`. Reduced
/// by `reduction`: `none` (per element), `sum`, or `mean` (the default: the sum over the total
/// weight of the elements not ignored). A target outside `0..C` that is not ignored is an
/// error.
fn nll(call: &OpCall<'_>, x: &Tensor, logp: &[f64]) -> Result<Tensor> {
    let target = call.input(1)?;
    let classes = target.ints().map_err(|e| call.error(e))?;
    if x.shape.len() < 2 || target.shape.len() != x.shape.len() - 1 {
        return Err(call.error(format!(
            "input of shape {:?} needs a target of shape [N, d1, ...] one rank lower, got {:?}",
            x.shape, target.shape
        )));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let inner: usize = x.shape[2..].iter().product();
    if target.shape[0] != n || target.shape[1..] != x.shape[2..] {
        return Err(call.error(format!(
            "target shape {:?} does not match input shape {:?}",
            target.shape, x.shape
        )));
    }
    let weights = match call.optional(2) {
        Some(w) if w.shape != [c] => {
            return Err(call.error(format!("weight must have shape [{c}], got {:?}", w.shape)))
        }
        Some(w) => Some(w.as_f64()),
        None => None,
    };
    let ignore = call
        .attrs()
        .get("ignore_index")
        .map(|_| call.int("ignore_index", 0));
    let mut losses = Vec::with_capacity(n * inner);
    let mut total_weight = 0f64;
    for b in 0..n {
        for i in 0..inner {
            let t = classes[b * inner + i];
            if Some(t) == ignore {
                losses.push(0.0);
                continue;
            }
            let k = usize::try_from(t)
                .ok()
                .filter(|&k| k < c)
                .ok_or_else(|| call.error(format!("target {t} is not a class in 0..{c}")))?;
            let w = weights.as_ref().map_or(1.0, |w| w[k]);
            total_weight += w;
            losses.push(-logp[(b * c + k) * inner + i] * w);
        }
    }
    let reduction = call.string("reduction").unwrap_or("mean");
    let (shape, values) = match reduction {
        "none" => (target.shape.clone(), losses),
        "sum" => (vec![], vec![losses.iter().sum()]),
        "mean" => (vec![], vec![losses.iter().sum::<f64>() / total_weight]),
        other => {
            return Err(call.error(format!(
                "reduction must be \"none\", \"sum\" or \"mean\", got \"{other}\""
            )))
        }
    };
    let values = values.into_iter().map(|v| v as f32).collect();
    Ok(Tensor::float(x.dtype, shape, values))
}

/// `SoftmaxCrossEntropyLoss(scores, labels, weights)`: the log-softmax of the scores over
/// axis 1, computed stably in f64, then [`nll`]'s loss; the second output is that
/// log-softmax.
fn softmax_cross_entropy(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let x = call.input(0)?;
    if x.shape.len() < 2 {
        return Err(call.error(format!(
            "scores must have rank 2 or more, got {:?}",
            x.shape
        )));
    }
    let (c, inner) = (x.shape[1], x.shape[2..].iter().product::<usize>());
    let v = x.as_f64();
    let mut logp = vec![0f64; v.len()];
    for b in 0..if v.is_empty() { 0 } else { x.shape[0] } {
        for i in 0..inner {
            let at = |k: usize| (b * c + k) * inner + i;
            let max = (0..c).map(|k| v[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..c).map(|k| (v[at(k)] - max).exp()).sum();
            for k in 0..c {
                logp[at(k)] = v[at(k)] - max - sum.ln();
            }
        }
    }
    let loss = nll(call, x, &logp)?;
    let logp = Tensor::float(
        x.dtype,
        x.shape.clone(),
        logp.iter().map(|&p| p as f32).collect(),
    );
    Ok(vec![loss, logp])
}
