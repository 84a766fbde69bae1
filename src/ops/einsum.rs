//! `Einsum` (opset 12): a sum of products over labelled axes, `"ij,jk->ik"`. Labels are
//! letters; `...` stands for the same broadcast dims in every operand (right-aligned, size 1
//! broadcasting); a label repeated within an operand takes its diagonal. Without `->` the
//! output is the ellipsis dims then the labels used once, alphabetically (uppercase first).
//! Every label's extent is iterated once per output element and summed label (at most 64 times
//! the per-tensor element limit in all), accumulating in f64 (integers wrapped to their dtype).
//!
//! [`OPS`] registers the op with its attribute schema, type inference and cost facts beside its
//! evaluator.

use super::{OpCall, OpDef, Tensor, Values};
use crate::Result;

/// The ops of this family.
pub const OPS: &[OpDef] = &[OpDef::onnx("Einsum", &["equation"])
    .infer(|c| vec![c.ty(0).with_unknown_shape()])
    .since(12)
    .eval(einsum)];

/// A label: the ellipsis' dims count from 0 (`Dim(0)` its first), letters after them.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Label {
    /// Ellipsis dim `k` of the broadcast ellipsis.
    Dim(usize),
    /// A letter.
    Letter(u8),
}

/// One operand's term: its labels, with `None` where the ellipsis sits.
fn parse_term(term: &str) -> std::result::Result<Vec<Option<u8>>, String> {
    let mut out = Vec::new();
    let mut ellipsis = false;
    let mut rest = term.trim();
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("...") {
            if ellipsis {
                return Err(format!("term `{term}` has two ellipses"));
            }
            ellipsis = true;
            out.push(None);
            rest = tail;
        } else if c.is_ascii_alphabetic() {
            out.push(Some(c as u8));
            rest = &rest[1..];
        } else if c.is_whitespace() {
            rest = &rest[1..];
        } else {
            return Err(format!("term `{term}` holds `{c}`: labels are letters"));
        }
    }
    Ok(out)
}

/// `Einsum(Inputs...)`.
fn einsum(call: &OpCall<'_>) -> Result<Vec<Tensor>> {
    let equation = call
        .string("equation")
        .ok_or_else(|| call.error("equation is required"))?;
    let inputs: Vec<&Tensor> = (0..call.inputs.len())
        .map(|i| call.input(i))
        .collect::<Result<_>>()?;
    if inputs.is_empty() {
        return Err(call.error("Einsum takes one input or more"));
    }
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let terms: Vec<Vec<Option<u8>>> = lhs
        .split(',')
        .map(parse_term)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| call.error(e))?;
    if terms.len() != inputs.len() {
        return Err(call.error(format!(
            "equation `{equation}` names {} operands, the node has {} inputs",
            terms.len(),
            inputs.len()
        )));
    }
    // Each operand's labels, dim by dim, its ellipsis expanded right-aligned.
    let mut ellipsis_rank = 0;
    let mut operand_labels: Vec<Vec<Label>> = Vec::new();
    for (term, x) in terms.iter().zip(&inputs) {
        let letters = term.iter().filter(|l| l.is_some()).count();
        let has_ellipsis = term.len() > letters;
        if x.shape.len() < letters || (!has_ellipsis && x.shape.len() != letters) {
            return Err(call.error(format!(
                "operand of shape {:?} does not fit the term `{}`",
                x.shape,
                term.iter()
                    .map(|l| l.map_or("...".to_string(), |c| (c as char).to_string()))
                    .collect::<String>()
            )));
        }
        let e = x.shape.len() - letters;
        ellipsis_rank = ellipsis_rank.max(e);
        operand_labels.push(
            term.iter()
                .flat_map(|l| match l {
                    Some(c) => vec![Label::Letter(*c)],
                    None => (0..e).map(|k| Label::Dim(usize::MAX - e + k)).collect(),
                })
                .collect(),
        );
    }
    // Right-align the ellipsis dims: `usize::MAX - e + k` becomes `ellipsis_rank - e + k`.
    for labels in &mut operand_labels {
        for l in labels.iter_mut() {
            if let Label::Dim(d) = l {
                *l = Label::Dim(ellipsis_rank - (usize::MAX - *d));
            }
        }
    }
    // Every label's extent (1 broadcasts for ellipsis dims).
    let mut extents: std::collections::BTreeMap<Label, usize> = Default::default();
    for (labels, x) in operand_labels.iter().zip(&inputs) {
        for (&l, &d) in labels.iter().zip(&x.shape) {
            let e = extents.entry(l).or_insert(d);
            match (l, *e, d) {
                (_, a, b) if a == b => {}
                (Label::Dim(_), 1, b) => *e = b,
                (Label::Dim(_), _, 1) => {}
                _ => {
                    return Err(call.error(format!(
                        "label {l:?} has extents {} and {d} in `{equation}`",
                        *e
                    )))
                }
            }
        }
    }
    let output: Vec<Label> = match rhs {
        Some(r) => {
            let term = parse_term(r).map_err(|e| call.error(e))?;
            let mut out = Vec::new();
            for l in term {
                match l {
                    Some(c) if !extents.contains_key(&Label::Letter(c)) => {
                        return Err(
                            call.error(format!("output label `{}` is no input's", c as char))
                        )
                    }
                    Some(c) if out.contains(&Label::Letter(c)) => {
                        return Err(call.error(format!("output label `{}` is repeated", c as char)))
                    }
                    Some(c) => out.push(Label::Letter(c)),
                    None => out.extend((0..ellipsis_rank).map(Label::Dim)),
                }
            }
            out
        }
        None => {
            let once = |l: &Label| operand_labels.iter().flatten().filter(|m| *m == l).count() == 1;
            (0..ellipsis_rank)
                .map(Label::Dim)
                .chain(
                    extents
                        .keys()
                        .filter(|l| matches!(l, Label::Letter(_)) && once(l))
                        .copied(),
                )
                .collect()
        }
    };
    let summed: Vec<Label> = extents
        .keys()
        .filter(|l| !output.contains(l))
        .copied()
        .collect();
    let out_shape: Vec<usize> = output.iter().map(|l| extents[l]).collect();
    call.alloc(&out_shape)?;
    let loop_labels: Vec<Label> = output.iter().chain(&summed).copied().collect();
    let sizes: Vec<usize> = loop_labels.iter().map(|l| extents[l]).collect();
    let iterations = sizes
        .iter()
        .try_fold(1usize, |a, &s| a.checked_mul(s))
        .filter(|&n| n as u64 <= call.limits.max_tensor_elements.saturating_mul(64))
        .ok_or_else(|| {
            call.error(format!(
                "`{equation}` iterates over extents {sizes:?}: more than 64 times the \
                 per-tensor element limit"
            ))
        })?;
    // Per operand, per loop label, the stride it advances the operand by.
    let strides: Vec<Vec<usize>> = operand_labels
        .iter()
        .zip(&inputs)
        .map(|(labels, x)| {
            let s = super::tensor::strides(&x.shape);
            loop_labels
                .iter()
                .map(|l| {
                    labels
                        .iter()
                        .zip(&x.shape)
                        .zip(&s)
                        .filter(|((m, &d), _)| *m == l && d == extents[l])
                        .map(|(_, &st)| st)
                        .sum()
                })
                .collect()
        })
        .collect();
    let values: Vec<Vec<f64>> = inputs.iter().map(|x| x.as_f64()).collect();
    let out_len: usize = out_shape.iter().product();
    let inner: usize = sizes[output.len()..].iter().product();
    let mut out = vec![0.0f64; out_len];
    let mut index = vec![0usize; loop_labels.len()];
    let mut offsets = vec![0usize; inputs.len()];
    for step in 0..iterations {
        out[step / inner.max(1)] += offsets
            .iter()
            .zip(&values)
            .map(|(&o, v)| v[o])
            .product::<f64>();
        // Advance the odometer, last label fastest.
        for a in (0..index.len()).rev() {
            index[a] += 1;
            for (o, s) in offsets.iter_mut().zip(&strides) {
                *o += s[a];
            }
            if index[a] < sizes[a] {
                break;
            }
            for (o, s) in offsets.iter_mut().zip(&strides) {
                *o -= s[a] * sizes[a];
            }
            index[a] = 0;
        }
    }
    let x = inputs[0];
    Ok(vec![match x.values {
        Values::Float(_) => Tensor::float(
            x.dtype,
            out_shape,
            out.into_iter().map(|v| v as f32).collect(),
        ),
        _ => Tensor::int(
            x.dtype,
            out_shape,
            out.into_iter()
                .map(|v| super::elementwise::wrap_int(x.dtype, v as i64))
                .collect(),
        ),
    }])
}
