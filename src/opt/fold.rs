//! Constant folding of small tensors (bounded like the peer: inputs of at most
//! [`MAX_INPUT_ELEMS`] elements, outputs of at most [`MAX_OUTPUT_ELEMS`]).

use crate::ir::DType;
use crate::ops::infer::{constant_value, literal_ints, Attrs};
use crate::ops::value::Literal;

/// Largest constant input that is folded.
pub const MAX_INPUT_ELEMS: usize = 8192;
/// Largest folded result.
pub const MAX_OUTPUT_ELEMS: usize = 262_144;

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The value of `op` applied to constant `inputs`, when mobius knows how to fold it.
pub fn fold(op: &str, inputs: &[&Literal], attr: &Attrs<'_>) -> Option<Literal> {
    if inputs.iter().any(|l| numel(&l.shape) > MAX_INPUT_ELEMS) {
        return None;
    }
    let int = |name: &str| attr.int(name);
    let out = match (op, inputs) {
        ("Identity", [x]) => (*x).clone(),
        ("Constant", []) => constant_value(attr)?,
        ("Cast", [x]) => cast(x, DType::from_onnx_code(int("to")? as i32)?)?,
        ("Unsqueeze", [x, axes]) => {
            let axes = literal_ints(axes)?;
            let rank = x.shape.len() + axes.len();
            let mut pos: Vec<usize> = axes
                .iter()
                .map(|&a| norm_axis(a, rank))
                .collect::<Option<_>>()?;
            pos.sort_unstable();
            let mut rest = x.shape.iter();
            let shape = (0..rank)
                .map(|i| {
                    if pos.contains(&i) {
                        Some(1)
                    } else {
                        rest.next().copied()
                    }
                })
                .collect::<Option<Vec<_>>>()?;
            reshaped(x, shape)
        }
        ("Squeeze", [x, axes]) => {
            let axes: Vec<usize> = literal_ints(axes)?
                .iter()
                .map(|&a| norm_axis(a, x.shape.len()))
                .collect::<Option<_>>()?;
            let shape = x
                .shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, d)| *d)
                .collect();
            reshaped(x, shape)
        }
        ("Concat", parts) if !parts.is_empty() => concat(parts, int("axis")?)?,
        ("Gather", [data, idx]) if data.shape.len() == 1 && int("axis").unwrap_or(0) == 0 => {
            let idx_values = literal_ints(idx)?;
            let n = data.shape[0] as i64;
            let size = data.dtype.size();
            let mut bytes = Vec::with_capacity(idx_values.len() * size);
            for i in idx_values {
                let i = if i < 0 { i + n } else { i };
                if !(0..n).contains(&i) {
                    return None;
                }
                bytes.extend_from_slice(&data.bytes[i as usize * size..(i as usize + 1) * size]);
            }
            Literal {
                dtype: data.dtype,
                shape: idx.shape.clone(),
                bytes,
            }
        }
        ("Add" | "Sub" | "Mul" | "Div", [a, b]) => arith(op, a, b)?,
        ("Sqrt", [x]) => sqrt(x)?,
        _ => return None,
    };
    (numel(&out.shape) <= MAX_OUTPUT_ELEMS).then_some(out)
}

fn norm_axis(a: i64, rank: usize) -> Option<usize> {
    let a = if a < 0 { a + rank as i64 } else { a };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

fn reshaped(x: &Literal, shape: Vec<usize>) -> Literal {
    Literal {
        dtype: x.dtype,
        shape,
        bytes: x.bytes.clone(),
    }
}

fn values_f64(l: &Literal) -> Option<Vec<f64>> {
    Some(match l.dtype {
        DType::I64 | DType::I32 => literal_ints(l)?.into_iter().map(|v| v as f64).collect(),
        DType::F32 => l
            .bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        DType::Bool => l.bytes.iter().map(|&b| (b != 0) as u8 as f64).collect(),
        _ => return None,
    })
}

fn from_f64(values: &[f64], dtype: DType, shape: Vec<usize>) -> Option<Literal> {
    let bytes = match dtype {
        DType::I64 => values
            .iter()
            .flat_map(|&v| (v as i64).to_le_bytes())
            .collect(),
        DType::I32 => values
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        DType::F32 => values
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect(),
        DType::Bool => values.iter().map(|&v| (v != 0.0) as u8).collect(),
        _ => return None,
    };
    Some(Literal {
        dtype,
        shape,
        bytes,
    })
}

fn cast(x: &Literal, to: DType) -> Option<Literal> {
    if x.dtype == to {
        return Some(x.clone());
    }
    from_f64(&values_f64(x)?, to, x.shape.clone())
}

fn concat(parts: &[&Literal], axis: i64) -> Option<Literal> {
    let first = parts[0];
    let a = norm_axis(axis, first.shape.len())?;
    let mut shape = first.shape.clone();
    shape[a] = 0;
    for p in parts {
        let fits = p.dtype == first.dtype
            && p.shape.len() == first.shape.len()
            && (0..shape.len()).all(|i| i == a || p.shape[i] == first.shape[i]);
        if !fits {
            return None;
        }
        shape[a] += p.shape[a];
    }
    let outer: usize = first.shape[..a].iter().product();
    let mut bytes = Vec::new();
    for o in 0..outer {
        for p in parts {
            let block = p.bytes.len() / outer.max(1);
            bytes.extend_from_slice(&p.bytes[o * block..(o + 1) * block]);
        }
    }
    Some(Literal {
        dtype: first.dtype,
        shape,
        bytes,
    })
}

/// Elementwise arithmetic on equal shapes or against a single-element operand of no higher
/// rank (the result keeps the broadcast shape).
fn arith(op: &str, a: &Literal, b: &Literal) -> Option<Literal> {
    if a.dtype != b.dtype || !matches!(a.dtype, DType::I64 | DType::I32 | DType::F32) {
        return None;
    }
    let (x, y) = (values_f64(a)?, values_f64(b)?);
    let shape = if a.shape == b.shape || (y.len() == 1 && b.shape.len() <= a.shape.len()) {
        a.shape.clone()
    } else if x.len() == 1 && a.shape.len() <= b.shape.len() {
        b.shape.clone()
    } else {
        return None;
    };
    let n = x.len().max(y.len());
    let int = a.dtype != DType::F32;
    let values: Option<Vec<f64>> = (0..n)
        .map(|i| {
            let (p, q) = (
                x[if x.len() == 1 { 0 } else { i }],
                y[if y.len() == 1 { 0 } else { i }],
            );
            match op {
                "Add" => Some(p + q),
                "Sub" => Some(p - q),
                "Mul" => Some(p * q),
                _ if int && q == 0.0 => None,
                // Integer division truncates toward zero (as onnxruntime's does).
                _ if int => Some((p / q).trunc()),
                _ => Some(p / q),
            }
        })
        .collect();
    from_f64(&values?, a.dtype, shape)
}

/// Elementwise square root of an f32 tensor (as GPT-2's export computes its attention scale
/// from the head size: `Sqrt(1 / Sqrt(Cast(D)))`). Computed in f64 and rounded once to f32,
/// which is exactly f32's correctly rounded `sqrt` (f64 carries more than 2·24 + 2 bits, so
/// the double rounding cannot differ), as onnxruntime's kernel computes it; negative values
/// give NaN as there.
fn sqrt(x: &Literal) -> Option<Literal> {
    if x.dtype != DType::F32 {
        return None;
    }
    let values: Vec<f64> = values_f64(x)?.into_iter().map(f64::sqrt).collect();
    from_f64(&values, DType::F32, x.shape.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;
    use crate::ops::value::AttrValue;

    fn ints(shape: Vec<usize>, v: &[i64]) -> Literal {
        Literal::from(&TensorData::from_i64(shape, v))
    }

    #[test]
    fn arithmetic_with_a_scalar_keeps_the_broadcast_shape() {
        let attrs = Attrs::default();
        let scalar = ints(vec![], &[5]);
        let one = ints(vec![1], &[1]);
        assert_eq!(
            fold("Sub", &[&scalar, &one], &attrs),
            Some(ints(vec![1], &[4]))
        );
        assert_eq!(
            fold("Sub", &[&one, &scalar], &attrs),
            Some(ints(vec![1], &[-4]))
        );
        let matrix = ints(vec![1, 2], &[1, 2]);
        let cube = ints(vec![1, 1, 1], &[3]);
        assert_eq!(fold("Add", &[&matrix, &cube], &attrs), None);
    }

    #[test]
    fn folds_shape_arithmetic() {
        let none = Attrs::default();
        let zero = AttrValue::Int(0);
        let axis0 = Attrs::new([("axis", &zero)]);
        let c = fold(
            "Concat",
            &[&ints(vec![2], &[1, 2]), &ints(vec![1], &[3])],
            &axis0,
        )
        .unwrap();
        assert_eq!(literal_ints(&c).unwrap(), vec![1, 2, 3]);
        let u = fold(
            "Unsqueeze",
            &[&ints(vec![2], &[4, 5]), &ints(vec![1], &[0])],
            &none,
        )
        .unwrap();
        assert_eq!(u.shape, vec![1, 2]);
        let s = fold(
            "Sub",
            &[&ints(vec![2], &[4, 5]), &ints(vec![], &[1])],
            &none,
        )
        .unwrap();
        assert_eq!(literal_ints(&s).unwrap(), vec![3, 4]);
        let g = fold(
            "Gather",
            &[&ints(vec![3], &[7, 8, 9]), &ints(vec![], &[-1])],
            &none,
        )
        .unwrap();
        assert_eq!((literal_ints(&g).unwrap(), g.shape), (vec![9], vec![]));
        assert!(fold("Div", &[&ints(vec![1], &[4]), &ints(vec![1], &[0])], &none).is_none());
        let d = fold(
            "Div",
            &[&ints(vec![2], &[-7, 7]), &ints(vec![2], &[2, -2])],
            &none,
        )
        .unwrap();
        assert_eq!(literal_ints(&d).unwrap(), vec![-3, -3]);
        let one = AttrValue::Int(1);
        let to_f32 = Attrs::new([("to", &one)]);
        let f = fold("Cast", &[&ints(vec![1], &[3])], &to_f32).unwrap();
        assert_eq!(f.dtype, DType::F32);
    }

    #[test]
    fn square_roots_of_f32_are_correctly_rounded() {
        let f32s = |v: &[f32]| Literal {
            dtype: DType::F32,
            shape: vec![v.len()],
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        let xs = [16.0f32, 0.25, 2.0, 3.0, 1e-30, 7.123_456, 0.0];
        let folded = fold("Sqrt", &[&f32s(&xs)], &Attrs::default()).unwrap();
        let want: Vec<f32> = xs.iter().map(|x| x.sqrt()).collect();
        assert_eq!(folded, f32s(&want));
        let root = fold("Sqrt", &[&f32s(&[-1.0])], &Attrs::default()).unwrap();
        assert!(f32::from_le_bytes(root.bytes[..4].try_into().unwrap()).is_nan());
        assert!(fold("Sqrt", &[&ints(vec![1], &[4])], &Attrs::default()).is_none());
    }

    #[test]
    fn large_inputs_are_not_folded() {
        let big = ints(vec![MAX_INPUT_ELEMS + 1], &vec![0; MAX_INPUT_ELEMS + 1]);
        assert!(fold("Identity", &[&big], &Attrs::default()).is_none());
    }
}
