//! The optimizer steps of ONNX's `ai.onnx.preview.training` domain: `Adagrad`, `Adam` and
//! `Momentum`, each updating one or more tensors `X` from their gradients `G` and carried
//! statistics, as the spec's pseudo code writes them (f64 arithmetic, rounded to each
//! output's dtype). The inputs are `R` (learning rate) and `T` (update count), scalars, then
//! the `n` tensors, their `n` gradients and their statistics, `n` of each; the outputs the
//! `n` new tensors, then the new statistics.

use super::infer::Infer;
use super::types::TensorType;
use super::{OpCall, OpDef, Tensor};
use crate::Result;

/// The domain of ONNX's training ops.
pub const TRAINING_DOMAIN: &str = "ai.onnx.preview.training";

/// The optimizer steps.
pub const OPS: &[OpDef] = &[
    OpDef::new(
        TRAINING_DOMAIN,
        "Adagrad",
        &["decay_factor", "epsilon", "norm_coefficient"],
    )
    .infer(|c| step_types(c, 3))
    .eval(adagrad),
    OpDef::new(
        TRAINING_DOMAIN,
        "Adam",
        &[
            "alpha",
            "beta",
            "epsilon",
            "norm_coefficient",
            "norm_coefficient_post",
        ],
    )
    .infer(|c| step_types(c, 4))
    .eval(adam),
    OpDef::new(
        TRAINING_DOMAIN,
        "Momentum",
        &["alpha", "beta", "mode", "norm_coefficient"],
    )
    .infer(|c| step_types(c, 3))
    .eval(momentum),
];

/// Each output has the type of the input it updates: the new tensors their `X`'s, the new
/// statistics theirs (after `R`, `T`, `X`s and `G`s, `groups` lists of `n` inputs).
fn step_types(call: &Infer<'_>, groups: usize) -> Vec<TensorType> {
    let n = call.inputs.len().saturating_sub(2) / groups;
    (0..call.outputs)
        .map(|o| {
            let (k, i) = (o / n.max(1), o % n.max(1));
            let list = if k == 0 {
                0
            } else {
                groups - (call.outputs / n.max(1)) + k
            };
            call.ty(2 + list * n + i)
        })
        .collect()
}

/// `R` and `T` (scalars), then the `groups` lists of `n` tensors each, every tensor of a
/// position the shape of its `X`.
fn step_inputs<'a>(call: &OpCall<'a>, groups: usize) -> Result<(f64, i64, Vec<Vec<&'a Tensor>>)> {
    let (r, t) = (call.input(0)?, call.input(1)?);
    let (Ok([r]), Ok([t])) = (
        <[f64; 1]>::try_from(r.as_f64()),
        <[i64; 1]>::try_from(t.ints()?.to_vec()),
    ) else {
        return Err(call.error("R and T must be scalars"));
    };
    let rest = call.inputs.len().saturating_sub(2);
    if rest == 0 || rest % groups != 0 {
        return Err(call.error(format!(
            "after R and T, {rest} inputs: expected {groups} lists of equal length"
        )));
    }
    let n = rest / groups;
    let mut lists = Vec::with_capacity(groups);
    for g in 0..groups {
        let list = (0..n)
            .map(|i| call.input(2 + g * n + i))
            .collect::<Result<Vec<_>>>()?;
        for (i, t) in list.iter().enumerate() {
            if t.shape != call.input(2 + i)?.shape {
                return Err(call.error(format!(
                    "input {} has shape {:?}, its X {:?}",
                    2 + g * n + i,
                    t.shape,
                    call.input(2 + i)?.shape
                )));
            }
        }
        lists.push(list);
    }
    Ok((r, t, lists))
}

/// `f` over the elements of `X`, `G` and the statistics of each tensor, giving the new
/// values (new `X` first); the outputs grouped as the spec lists them.
fn update(lists: &[Vec<&Tensor>], outputs: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<Tensor> {
    let n = lists[0].len();
    let mut out: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); n]; outputs];
    for i in 0..n {
        let values: Vec<Vec<f64>> = lists.iter().map(|l| l[i].as_f64()).collect();
        for e in 0..values[0].len() {
            let args: Vec<f64> = values.iter().map(|v| v[e]).collect();
            for (k, v) in f(&args).into_iter().enumerate() {
                out[k][i].push(v);
            }
        }
    }
    // Output group k, tensor i: of X's shape, in the dtype of the input it updates
    // (X for the new X, the statistic otherwise).
    let mut tensors = Vec::with_capacity(outputs * n);
    for (k, group) in out.into_iter().enumerate() {
        for (i, values) in group.into_iter().enumerate() {
            let like = lists[if k == 0 { 0 } else { lists.len() - outputs + k }][i];
            let values = values.into_iter().map(|v| v as f32).collect();
            tensors.push(Tensor::float(like.dtype, like.shape.clone(), values));
        }
    }
    tensors
}

fn adagrad(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (r, t, lists) = step_inputs(call, 3)?;
    let decay = call.float("decay_factor", 0.0) as f64;
    let eps = call.float("epsilon", 1e-6) as f64;
    let norm = call.float("norm_coefficient", 0.0) as f64;
    let rate = r / (1.0 + t as f64 * decay);
    Ok(update(&lists, 2, |a| {
        let (x, g, h) = (a[0], a[1], a[2]);
        let g = norm * x + g;
        let h = h + g * g;
        vec![x - rate * g / (h.sqrt() + eps), h]
    }))
}

fn adam(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (r, t, lists) = step_inputs(call, 4)?;
    let alpha = call.float("alpha", 0.9) as f64;
    let beta = call.float("beta", 0.999) as f64;
    let eps = call.float("epsilon", 1e-6) as f64;
    let norm = call.float("norm_coefficient", 0.0) as f64;
    let post = call.float("norm_coefficient_post", 0.0) as f64;
    let rate = match t > 0 {
        true => r * (1.0 - beta.powf(t as f64)).sqrt() / (1.0 - alpha.powf(t as f64)),
        false => r,
    };
    Ok(update(&lists, 3, |a| {
        let (x, g, v, h) = (a[0], a[1], a[2], a[3]);
        let g = norm * x + g;
        let v = alpha * v + (1.0 - alpha) * g;
        let h = beta * h + (1.0 - beta) * g * g;
        let x = x - rate * v / (h.sqrt() + eps);
        vec![(1.0 - post) * x, v, h]
    }))
}

fn momentum(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let (r, t, lists) = step_inputs(call, 3)?;
    let required = |name: &str| match call.attrs().get(name) {
        Some(crate::ir::Attr::Float(v)) => Ok(*v as f64),
        _ => Err(call.error(format!("attribute {name} (a float) is required"))),
    };
    let (alpha, beta, norm) = (
        required("alpha")?,
        required("beta")?,
        required("norm_coefficient")?,
    );
    let nesterov = match call.string("mode") {
        Some("standard") => false,
        Some("nesterov") => true,
        other => {
            return Err(call.error(format!(
                "mode must be \"standard\" or \"nesterov\", got {other:?}"
            )))
        }
    };
    let beta = if t > 0 { beta } else { 1.0 };
    Ok(update(&lists, 2, |a| {
        let (x, g, v) = (a[0], a[1], a[2]);
        let g = norm * x + g;
        let v = alpha * v + beta * g;
        match nesterov {
            true => vec![x - r * (g + alpha * v), v],
            false => vec![x - r * v, v],
        }
    }))
}
