//! Symbolic values of small shape tensors: the elements of a 0-D or 1-D int64 (or bool) tensor
//! of at most [`MAX_VALUE_LEN`] elements as [`SymDim`]s, as exporters compute them for
//! `Reshape`/`Expand` targets from `Shape`, `Gather`, `Concat`, `Slice`, `Unsqueeze`,
//! `Squeeze`, `Reshape`, `Cast`, `Add`/`Sub`/`Mul`/`Div`, `ConstantOfShape`, `ReduceMax` and the
//! `Where(Equal(x, -1), 1, x)` guard. The analysis keeps these values per e-class (beside the
//! constant value; a fully known value is a constant) and type inference reads them
//! ([`InputView::elements`]).
//!
//! Elements may be unknown; names in symbolic elements are dims, never negative (so a symbolic
//! element that is a sum of names with positive coefficients is never `-1`).

use crate::ir::DType;
use crate::ops::infer::{literal_elements, literal_ints, Attrs, InputView, MAX_VALUE_LEN};
use crate::ops::types::{SymDim, TensorType};
use crate::ops::value::{AttrValue, Literal};

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
        // The maximum of a small vector over all its axes (no `axes` input), its elements all
        // known: one element, whatever `keepdims` (TorchScript's `repeat_interleave` counts).
        "ReduceMax" if inputs.len() == 1 && attr.int("noop_with_empty_axes").unwrap_or(0) == 0 => {
            let known: Vec<i64> = arg(0)?.iter().map(SymDim::known).collect::<Option<_>>()?;
            vec![SymDim::Known(known.into_iter().max()?)]
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;

    fn sym(s: &str) -> SymDim {
        SymDim::expr(s)
    }

    fn ty(dtype: DType, shape: &[usize]) -> TensorType {
        TensorType::new(
            dtype,
            shape.iter().map(|&d| SymDim::Known(d as i64)).collect(),
        )
    }

    fn ints(shape: Vec<usize>, v: &[i64]) -> Literal {
        Literal::from(&TensorData::from_i64(shape, v))
    }

    /// An input with a type and a constant or a symbolic value.
    fn view<'a>(
        t: &'a TensorType,
        konst: Option<&'a Literal>,
        value: Option<&'a [SymDim]>,
    ) -> InputView<'a> {
        InputView {
            ty: Some(t),
            konst,
            value,
        }
    }

    #[test]
    fn shape_gather_and_concat_read_the_dims() {
        let x = TensorType::new(
            DType::F32,
            vec![sym("batch"), SymDim::Unknown, SymDim::Known(64)],
        );
        let i64_3 = ty(DType::I64, &[3]);
        let shape = op_value("Shape", &[view(&x, None, None)], &Attrs::default(), &i64_3).unwrap();
        assert_eq!(shape, [sym("batch"), SymDim::Unknown, SymDim::Known(64)]);
        let start = AttrValue::Int(-1);
        let tail = op_value(
            "Shape",
            &[view(&x, None, None)],
            &Attrs::new([("start", &start)]),
            &ty(DType::I64, &[1]),
        );
        assert_eq!(tail, Some(vec![SymDim::Known(64)]));
        let (index, scalar) = (ints(vec![], &[0]), ty(DType::I64, &[]));
        let gathered = op_value(
            "Gather",
            &[
                view(&i64_3, None, Some(&shape)),
                view(&scalar, Some(&index), None),
            ],
            &Attrs::default(),
            &scalar,
        );
        assert_eq!(gathered, Some(vec![sym("batch")]));
        // Only an unknown element: no value.
        let index1 = ints(vec![], &[1]);
        let gathered = op_value(
            "Gather",
            &[
                view(&i64_3, None, Some(&shape)),
                view(&scalar, Some(&index1), None),
            ],
            &Attrs::default(),
            &scalar,
        );
        assert_eq!(gathered, None);
        let (minus, one) = (ints(vec![1], &[-1]), ty(DType::I64, &[1]));
        let head = [sym("batch")];
        let concat = op_value(
            "Concat",
            &[
                view(&one, None, Some(&head)),
                view(&one, Some(&minus), None),
            ],
            &Attrs::default(),
            &ty(DType::I64, &[2]),
        );
        assert_eq!(concat, Some(vec![sym("batch"), SymDim::Known(-1)]));
        // Not a small int64 tensor: no value.
        let float = ty(DType::F32, &[3]);
        assert_eq!(
            op_value("Shape", &[view(&x, None, None)], &Attrs::default(), &float),
            None
        );
    }

    #[test]
    fn arithmetic_is_symbolic_and_division_exact() {
        let scalar = ty(DType::I64, &[]);
        let (seq, past, two) = ([sym("seq")], [sym("past")], ints(vec![], &[2]));
        let run = |op: &str, a: InputView<'_>, b: InputView<'_>| {
            op_value(op, &[a, b], &Attrs::default(), &scalar)
        };
        let (s, p, c) = (
            view(&scalar, None, Some(&seq)),
            view(&scalar, None, Some(&past)),
            view(&scalar, Some(&two), None),
        );
        assert_eq!(run("Add", s, p), Some(vec![sym("past + seq")]));
        assert_eq!(run("Sub", s, p), Some(vec![sym("seq + -1*past")]));
        assert_eq!(run("Mul", s, c), Some(vec![sym("2*seq")]));
        assert_eq!(run("Div", s, c), None);
        let double = [sym("2*seq")];
        let d = view(&scalar, None, Some(&double));
        assert_eq!(run("Div", d, c), Some(vec![sym("seq")]));
        // Integer division of numbers truncates toward zero (as onnxruntime's does).
        let (m7, k2) = (ints(vec![], &[-7]), ints(vec![], &[2]));
        let known = op_value(
            "Div",
            &[
                view(&scalar, Some(&m7), None),
                view(&scalar, Some(&k2), None),
            ],
            &Attrs::default(),
            &scalar,
        );
        assert_eq!(known, Some(vec![SymDim::Known(-3)]));
    }

    #[test]
    fn equal_decides_what_it_can_and_where_follows() {
        let (v4, b4) = (ty(DType::I64, &[4]), ty(DType::Bool, &[4]));
        let t = [
            sym("batch"),
            SymDim::Known(2),
            sym("seq + -1"),
            SymDim::Unknown,
        ];
        let minus = ints(vec![4], &[-1, -1, -1, -1]);
        let eq = op_value(
            "Equal",
            &[view(&v4, None, Some(&t)), view(&v4, Some(&minus), None)],
            &Attrs::default(),
            &b4,
        )
        .unwrap();
        // `seq + -1` may be -1; an unknown element may be anything.
        assert_eq!(
            eq,
            [
                SymDim::Known(0),
                SymDim::Known(0),
                SymDim::Unknown,
                SymDim::Unknown
            ]
        );
        let ones = ints(vec![4], &[1, 1, 1, 1]);
        let guarded = op_value(
            "Where",
            &[
                view(&b4, None, Some(&eq)),
                view(&v4, Some(&ones), None),
                view(&v4, None, Some(&t)),
            ],
            &Attrs::default(),
            &v4,
        );
        assert_eq!(
            guarded,
            Some(vec![
                sym("batch"),
                SymDim::Known(2),
                SymDim::Unknown,
                SymDim::Unknown
            ])
        );
    }

    #[test]
    fn slices_of_values_follow_onnx_clamping() {
        let v4 = ty(DType::I64, &[4]);
        let t = [sym("a"), sym("b"), sym("c"), sym("d")];
        let one = ty(DType::I64, &[1]);
        let slice = |start: i64, end: i64, step: Option<i64>| {
            let (s, e) = (ints(vec![1], &[start]), ints(vec![1], &[end]));
            let (axes, st) = (ints(vec![1], &[0]), ints(vec![1], &[step.unwrap_or(1)]));
            let mut inputs = vec![
                view(&v4, None, Some(&t)),
                view(&one, Some(&s), None),
                view(&one, Some(&e), None),
            ];
            if step.is_some() {
                inputs.push(view(&one, Some(&axes), None));
                inputs.push(view(&one, Some(&st), None));
            }
            op_value("Slice", &inputs, &Attrs::default(), &ty(DType::I64, &[2]))
        };
        assert_eq!(slice(1, 3, None), Some(vec![sym("b"), sym("c")]));
        assert_eq!(slice(-2, i64::MAX, None), Some(vec![sym("c"), sym("d")]));
        assert_eq!(
            slice(-1, i64::MIN, Some(-2)),
            Some(vec![sym("d"), sym("b")])
        );
        assert_eq!(slice(3, 1, None), None);
    }

    #[test]
    fn constant_of_shape_and_a_known_value_give_a_constant() {
        let (one, v3) = (ty(DType::I64, &[1]), ty(DType::I64, &[3]));
        let three = ints(vec![1], &[3]);
        let fill = AttrValue::Tensor(Box::new(ints(vec![1], &[1])));
        let ones = op_value(
            "ConstantOfShape",
            &[view(&one, Some(&three), None)],
            &Attrs::new([("value", &fill)]),
            &v3,
        )
        .unwrap();
        assert_eq!(ones, vec![SymDim::Known(1); 3]);
        assert_eq!(value_literal(&ones, &v3), Some(ints(vec![3], &[1, 1, 1])));
        assert_eq!(value_literal(&[sym("a")], &one), None);
        assert_eq!(
            value_literal(&[SymDim::Known(5)], &ty(DType::I64, &[])),
            Some(ints(vec![], &[5]))
        );
    }

    #[test]
    fn the_max_of_known_counts_is_one_element() {
        let (v3, scalar) = (ty(DType::I64, &[3]), ty(DType::I64, &[]));
        let counts = ints(vec![3], &[2, 5, 2]);
        let keep0 = AttrValue::Int(0);
        let max = |inputs: &[InputView<'_>], attrs: &Attrs<'_>| {
            op_value("ReduceMax", inputs, attrs, &scalar)
        };
        let keep = Attrs::new([("keepdims", &keep0)]);
        assert_eq!(
            max(&[view(&v3, Some(&counts), None)], &keep),
            Some(vec![SymDim::Known(5)])
        );
        // A symbolic element, or an axes input, leaves it unknown.
        let t = [SymDim::Known(2), sym("a"), SymDim::Known(2)];
        assert_eq!(max(&[view(&v3, None, Some(&t))], &keep), None);
        let axes = ints(vec![1], &[0]);
        let one = ty(DType::I64, &[1]);
        assert_eq!(
            max(
                &[
                    view(&v3, Some(&counts), None),
                    view(&one, Some(&axes), None)
                ],
                &keep
            ),
            None
        );
    }
}
