//! Symbolic values of small shape tensors: the elements of a 0-D or 1-D int64 (or bool) tensor
//! of at most [`MAX_VALUE_LEN`] elements as [`SymDim`]s, as exporters compute them for
//! `Reshape`/`Expand` targets from `Shape`, `Gather`, `Concat`, `Slice`, `Unsqueeze`,
//! `Squeeze`, `Reshape`, `Cast`, `Add`/`Sub`/`Mul`/`Div`, `ConstantOfShape` and the
//! `Where(Equal(x, -1), 1, x)` guard. The analysis keeps these values per e-class (beside the
//! constant value; a fully known value is a constant) and type inference reads them
//! ([`InputView::elements`]).
//!
//! Elements may be unknown; names in symbolic elements are dims, never negative (so a symbolic
//! element that is a sum of names with positive coefficients is never `-1`).

use super::infer::{literal_elements, literal_ints, Attrs, InputView, MAX_VALUE_LEN};
use super::lang::{AttrValue, Literal};
use super::types::{SymDim, TensorType};
use crate::ir::DType;

/// The constant of type `out` (int64 or bool, rank ≤ 1) whose elements are `values`, when
/// every one is known.
pub fn value_literal(values: &[SymDim], out: &TensorType) -> Option<Literal> {
    let ints: Vec<i64> = values.iter().map(SymDim::known).collect::<Option<_>>()?;
    let shape: Vec<usize> = match out.static_shape()?.as_slice() {
        [] if ints.len() == 1 => Vec::new(),
        [n] if *n as usize == ints.len() => vec![ints.len()],
        _ => return None,
    };
    let bytes = match out.dtype? {
        DType::I64 => ints.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::Bool if ints.iter().all(|&v| v == 0 || v == 1) => {
            ints.iter().map(|&v| v as u8).collect()
        }
        _ => return None,
    };
    Some(Literal {
        dtype: out.dtype?,
        shape,
        bytes,
    })
}

/// The value `op` computes (output type `out`) from its inputs' values, for the ops listed in
/// the module doc; `None` when not a small int64/bool tensor or nothing of it is known.
pub fn op_value(
    op: &str,
    inputs: &[InputView<'_>],
    attr: &Attrs<'_>,
    out: &TensorType,
) -> Option<Vec<SymDim>> {
    let small =
        matches!(out.dtype, Some(DType::I64 | DType::Bool)) && out.rank().is_some_and(|r| r <= 1);
    if !small {
        return None;
    }
    let arg = |i: usize| inputs.get(i)?.elements();
    let values = match op {
        "Shape" => {
            let dims = inputs.first()?.ty?.shape.as_ref()?;
            let rank = dims.len() as i64;
            let start = clamp(attr.int("start").unwrap_or(0), rank);
            let end = clamp(attr.int("end").unwrap_or(rank), rank);
            dims[start..end.max(start)].to_vec()
        }
        "Gather" if inputs.first()?.ty?.rank() == Some(1) => {
            let data = arg(0)?;
            let axis_ok = matches!(attr.int("axis").unwrap_or(0), 0 | -1);
            let indices = literal_ints(inputs.get(1)?.konst?)?;
            let len = data.len() as i64;
            let picked: Option<Vec<SymDim>> = indices
                .iter()
                .map(|&i| {
                    let i = if i < 0 { i + len } else { i };
                    (0..len).contains(&i).then(|| data[i as usize].clone())
                })
                .collect();
            picked.filter(|_| axis_ok)?
        }
        "Identity" | "Unsqueeze" | "Squeeze" | "Reshape" => arg(0)?,
        "Concat" => {
            let mut all = Vec::new();
            for i in 0..inputs.len() {
                all.extend(arg(i)?);
            }
            all
        }
        "Cast" => {
            let to = DType::from_onnx_code(attr.int("to")? as i32)?;
            let from = inputs.first()?.ty?.dtype?;
            let integral = |d: DType| matches!(d, DType::I64 | DType::I32 | DType::Bool);
            match to {
                DType::I64 if integral(from) => arg(0)?,
                DType::Bool if integral(from) => arg(0)?
                    .into_iter()
                    .map(|d| match d {
                        SymDim::Known(v) => SymDim::Known(i64::from(v != 0)),
                        _ => SymDim::Unknown,
                    })
                    .collect(),
                _ => return None,
            }
        }
        "Slice" => slice(inputs)?,
        "Add" | "Sub" | "Mul" | "Div" => elementwise(&[arg(0)?, arg(1)?], |d| {
            let (a, b) = (&d[0], &d[1]);
            match op {
                "Add" => a.add(b),
                "Sub" => a.sub(b),
                "Mul" => a.mul(b),
                _ => match (a, b) {
                    // ONNX integer division truncates toward zero, as Rust's does.
                    (SymDim::Known(x), SymDim::Known(y)) => {
                        x.checked_div(*y).map_or(SymDim::Unknown, SymDim::Known)
                    }
                    _ => a.div_exact(b),
                },
            }
        })?,
        "Equal" => elementwise(&[arg(0)?, arg(1)?], |d| equal(&d[0], &d[1]))?,
        "Where" => elementwise(&[arg(0)?, arg(1)?, arg(2)?], |d| match &d[0] {
            SymDim::Known(0) => d[2].clone(),
            SymDim::Known(_) => d[1].clone(),
            _ if d[1] == d[2] => d[1].clone(),
            _ => SymDim::Unknown,
        })?,
        "ConstantOfShape" => {
            let count: i64 = arg(0)?.iter().map(SymDim::known).product::<Option<i64>>()?;
            let fill = match attr.get("value") {
                Some(AttrValue::Tensor(value)) => literal_elements(value)?,
                _ => return None,
            };
            match fill.as_slice() {
                [v] if (0..=MAX_VALUE_LEN as i64).contains(&count) => {
                    vec![v.clone(); count as usize]
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    let fits = values.len() <= MAX_VALUE_LEN && (out.rank() == Some(1) || values.len() == 1);
    (fits && values.iter().any(|d| *d != SymDim::Unknown)).then_some(values)
}

/// Whether two elements are equal, as 1 or 0, when decidable: equal dims are equal, different
/// numbers differ, and a never-negative dim differs from a negative number.
fn equal(a: &SymDim, b: &SymDim) -> SymDim {
    let differ = |x: &SymDim, y: &SymDim| match (x, y) {
        (SymDim::Known(p), SymDim::Known(q)) => p != q,
        (SymDim::Known(p), d) | (d, SymDim::Known(p)) => *p < 0 && d.is_nonnegative(),
        _ => false,
    };
    match (a, b) {
        (SymDim::Unknown, _) | (_, SymDim::Unknown) => SymDim::Unknown,
        _ if a == b => SymDim::Known(1),
        _ if differ(a, b) => SymDim::Known(0),
        _ => SymDim::Unknown,
    }
}

/// `f` applied element by element to `args` of equal lengths or one element (broadcast).
fn elementwise(args: &[Vec<SymDim>], f: impl Fn(&[SymDim]) -> SymDim) -> Option<Vec<SymDim>> {
    let len = args.iter().map(Vec::len).max()?;
    if args.iter().any(|a| a.len() != len && a.len() != 1) {
        return None;
    }
    let at = |a: &Vec<SymDim>, i: usize| a[if a.len() == 1 { 0 } else { i }].clone();
    Some(
        (0..len)
            .map(|i| {
                let row: Vec<SymDim> = args.iter().map(|a| at(a, i)).collect();
                f(&row)
            })
            .collect(),
    )
}

/// `Slice` of a 1-D value along its axis with constant starts, ends and steps (ONNX clamping,
/// negative steps included).
fn slice(inputs: &[InputView<'_>]) -> Option<Vec<SymDim>> {
    let data = inputs.first()?.elements()?;
    // An absent optional input has no type.
    let konst = |i: usize| -> Option<Option<Vec<i64>>> {
        match inputs.get(i).filter(|v| v.ty.is_some()) {
            None => Some(None),
            Some(v) => literal_ints(v.konst?).map(Some),
        }
    };
    let (Some(starts), Some(ends)) = (konst(1)?, konst(2)?) else {
        return None;
    };
    let axes_ok = konst(3)?.is_none_or(|a| a == [0] || a == [-1]);
    let step = match konst(4)?.as_deref() {
        None => 1,
        Some(&[s]) if s != 0 => s,
        _ => return None,
    };
    let ([start], [end], true) = (starts.as_slice(), ends.as_slice(), axes_ok) else {
        return None;
    };
    let len = data.len() as i64;
    let from_end = |v: i64| if v < 0 { v.saturating_add(len) } else { v };
    let mut picked = Vec::new();
    if step > 0 {
        let (mut i, e) = (from_end(*start).clamp(0, len), from_end(*end).clamp(0, len));
        while i < e {
            picked.push(data[i as usize].clone());
            i = i.saturating_add(step);
        }
    } else if len > 0 {
        let (mut i, e) = (
            from_end(*start).clamp(0, len - 1),
            from_end(*end).clamp(-1, len - 1),
        );
        while i > e {
            picked.push(data[i as usize].clone());
            i = i.saturating_add(step);
        }
    }
    Some(picked)
}

/// A `Shape` bound `v` on a rank (negative counts from the end), clamped to it.
fn clamp(v: i64, len: i64) -> usize {
    let v = if v < 0 { v.saturating_add(len) } else { v };
    v.clamp(0, len) as usize
}
