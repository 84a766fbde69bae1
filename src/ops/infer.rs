//! Type inference: what an op's inference function sees ([`Infer`]: input types, constant and
//! symbolic input values, attributes), the lattice helpers the ops' modules share (numpy
//! broadcasting, axes, small integer constants), and [`infer`], which runs an op's registered
//! function. Each op's own rule lives in its module beside its evaluator.

use crate::ir::DType;
use crate::ops::types::{SymDim, TensorType};
use crate::ops::value::{AttrValue, Literal};

/// What inference sees of one input.
#[derive(Debug, Clone, Copy)]
pub struct InputView<'a> {
    /// Its type (`None` for an absent optional input).
    pub ty: Option<&'a TensorType>,
    /// Its constant value, when known.
    pub konst: Option<&'a Literal>,
    /// Its symbolic value, when a small shape tensor that is not constant (see
    /// `opt::sym_value`).
    pub value: Option<&'a [SymDim]>,
}

impl InputView<'_> {
    /// The elements of a small rank ≤ 1 integer input: its constant value or its symbolic one.
    pub fn elements(&self) -> Option<Vec<SymDim>> {
        match self.konst {
            Some(k) => literal_elements(k),
            None => self.value.map(<[SymDim]>::to_vec),
        }
    }
}

/// The set attributes of the op being inferred or folded, by name.
#[derive(Debug, Clone, Default)]
pub struct Attrs<'a> {
    pairs: Vec<(&'a str, &'a AttrValue)>,
}

impl<'a> Attrs<'a> {
    /// Attributes from `(name, value)` pairs; `unset` values are skipped.
    pub fn new(pairs: impl IntoIterator<Item = (&'a str, &'a AttrValue)>) -> Attrs<'a> {
        Attrs {
            pairs: pairs
                .into_iter()
                .filter(|(_, v)| **v != AttrValue::Unset)
                .collect(),
        }
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&'a AttrValue> {
        self.pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// The integer value of `name`, if set and an integer.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(AttrValue::int)
    }
}

/// What an op's inference sees: the op (`OpType` or `domain::OpType`), its inputs, its set
/// attributes and how many outputs the node has.
#[derive(Debug, Clone, Copy)]
pub struct Infer<'a> {
    /// The op key.
    pub op: &'a str,
    /// Its inputs, positionally.
    pub inputs: &'a [InputView<'a>],
    /// Its set attributes.
    pub attrs: &'a Attrs<'a>,
    /// The number of outputs of the node.
    pub outputs: usize,
}

impl Infer<'_> {
    /// The type of input `i` (unknown when absent or not inferred).
    pub fn ty(&self, i: usize) -> TensorType {
        input_type(self.inputs, i)
    }

    /// The integer attribute `name`, if set.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.attrs.int(name)
    }
}

/// How an op's output types follow from what [`Infer`] sees (fewer types than outputs: the
/// rest unknown).
pub type InferFn = fn(&Infer<'_>) -> Vec<TensorType>;

/// The output types of `op` (`outputs` of them), by the op's entry in the registry; an op
/// without one gets unknown types, and rules that need a shape do not fire on it.
pub fn infer(
    op: &str,
    inputs: &[InputView<'_>],
    attr: &Attrs<'_>,
    outputs: usize,
) -> Vec<TensorType> {
    let call = Infer {
        op,
        inputs,
        attrs: attr,
        outputs,
    };
    let mut result = super::find(op)
        .and_then(|def| def.infer)
        .map_or_else(Vec::new, |f| f(&call));
    result.resize(outputs, TensorType::default());
    result
}

/// The type of input `i` (unknown when absent or not inferred).
pub(super) fn input_type(inputs: &[InputView<'_>], i: usize) -> TensorType {
    inputs
        .get(i)
        .and_then(|v| v.ty)
        .cloned()
        .unwrap_or_default()
}

/// The dims of `t`, when its rank is known.
pub(super) fn shape_dims(t: &TensorType) -> Option<&[SymDim]> {
    t.shape.as_deref()
}

/// Numpy broadcasting of two shapes.
pub(super) fn broadcast_type(a: &TensorType, b: &TensorType) -> TensorType {
    let shape = match (shape_dims(a), shape_dims(b)) {
        (Some(x), Some(y)) => {
            let n = x.len().max(y.len());
            let at = |d: &[SymDim], i: usize| {
                let off = n - d.len();
                if i < off {
                    SymDim::Known(1)
                } else {
                    d[i - off].clone()
                }
            };
            Some(
                (0..n)
                    .map(|i| match (at(x, i), at(y, i)) {
                        (SymDim::Known(1), d) | (d, SymDim::Known(1)) => d,
                        (p, q) if p == q => p,
                        (SymDim::Unknown, d) | (d, SymDim::Unknown) => d,
                        _ => SymDim::Unknown,
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    TensorType {
        dtype: a.dtype,
        shape,
    }
}

/// Axis `a` of a tensor of rank `rank`, counted from the end when negative (`None`: out of
/// range).
pub(super) fn normal_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// Largest tensor given a symbolic value (shape tensors have one element per axis; see
/// `opt::sym_value`).
pub const MAX_VALUE_LEN: usize = 16;

/// The elements of a small constant of rank ≤ 1 (int64, int32 or bool) as known dims.
pub fn literal_elements(lit: &Literal) -> Option<Vec<SymDim>> {
    if lit.shape.len() > 1 || lit.shape.iter().product::<usize>() > MAX_VALUE_LEN {
        return None;
    }
    let ints = match lit.dtype {
        DType::Bool => lit.bytes.iter().map(|&b| i64::from(b != 0)).collect(),
        _ => literal_ints(lit)?,
    };
    Some(ints.into_iter().map(SymDim::Known).collect())
}

/// Integer values of a small constant (i64 or i32).
pub fn literal_ints(lit: &Literal) -> Option<Vec<i64>> {
    match lit.dtype {
        DType::I64 => Some(
            lit.bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ),
        DType::I32 => Some(
            lit.bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                .collect(),
        ),
        _ => None,
    }
}

/// The value of a `Constant` node: its `value` tensor, or a `value_float(s)` / `value_int(s)`
/// scalar or list (strings are not folded).
pub fn constant_value(attr: &Attrs<'_>) -> Option<Literal> {
    use crate::ir::TensorData;
    let tensor = |data: TensorData| Literal::from(&data);
    Some(match attr.get("value") {
        Some(AttrValue::Tensor(t)) => (**t).clone(),
        Some(_) => return None,
        None => match (
            attr.get("value_float"),
            attr.get("value_floats"),
            attr.get("value_int"),
            attr.get("value_ints"),
        ) {
            (Some(AttrValue::Float(b)), None, None, None) => {
                tensor(TensorData::from_f32(Vec::new(), &[f32::from_bits(*b)]))
            }
            (None, Some(AttrValue::Floats(v)), None, None) => {
                let values: Vec<f32> = v.iter().map(|b| f32::from_bits(*b)).collect();
                tensor(TensorData::from_f32(vec![values.len()], &values))
            }
            (None, None, Some(AttrValue::Int(v)), None) => {
                tensor(TensorData::from_i64(Vec::new(), &[*v]))
            }
            (None, None, None, Some(AttrValue::Ints(v))) => {
                tensor(TensorData::from_i64(vec![v.len()], v))
            }
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;

    fn tensor(dims: &[i64]) -> TensorType {
        TensorType {
            dtype: Some(DType::I64),
            shape: Some(dims.iter().map(|&d| SymDim::Known(d)).collect()),
        }
    }

    #[test]
    fn slice_with_runtime_starts_and_default_axes_keeps_only_the_rank() {
        let (x, bounds) = (tensor(&[4, 8]), tensor(&[2]));
        let view = |ty| InputView {
            ty: Some(ty),
            konst: None,
            value: None,
        };
        let out = infer(
            "Slice",
            &[view(&x), view(&bounds), view(&bounds)],
            &Attrs::default(),
            1,
        );
        assert_eq!(out[0].shape, Some(vec![SymDim::Unknown; 2]));
    }

    #[test]
    fn top_k_puts_k_on_its_axis_with_int64_indices() {
        let x = TensorType {
            dtype: Some(DType::F16),
            shape: Some(vec![SymDim::Sym("b".into()), SymDim::Known(8)]),
        };
        let k = Literal::from(&TensorData::from_i64(vec![1], &[2]));
        let k_ty = tensor(&[1]);
        let inputs = [
            InputView {
                ty: Some(&x),
                konst: None,
                value: None,
            },
            InputView {
                ty: Some(&k_ty),
                konst: Some(&k),
                value: None,
            },
        ];
        let out = infer("TopK", &inputs, &Attrs::default(), 2);
        let shape = Some(vec![SymDim::Sym("b".into()), SymDim::Known(2)]);
        assert_eq!((out[0].dtype, &out[0].shape), (Some(DType::F16), &shape));
        assert_eq!((out[1].dtype, &out[1].shape), (Some(DType::I64), &shape));
        let runtime_k = [
            inputs[0],
            InputView {
                konst: None,
                ..inputs[1]
            },
        ];
        let out = infer("TopK", &runtime_k, &Attrs::default(), 2);
        let unknown = Some(vec![SymDim::Sym("b".into()), SymDim::Unknown]);
        assert_eq!(out[0].shape, unknown);
    }

    #[test]
    fn squeeze_drops_listed_axes_or_known_ones_and_keeps_the_dtype() {
        let x = TensorType {
            dtype: Some(DType::I64),
            shape: Some(vec![SymDim::Known(1), SymDim::Sym("n".into())]),
        };
        let axes = Literal::from(&TensorData::from_i64(vec![1], &[0]));
        let listed = [
            InputView {
                ty: Some(&x),
                konst: None,
                value: None,
            },
            InputView {
                ty: Some(&tensor(&[1])),
                konst: Some(&axes),
                value: None,
            },
        ];
        let out = infer("Squeeze", &listed, &Attrs::default(), 1);
        assert_eq!(out[0].dtype, Some(DType::I64));
        assert_eq!(out[0].shape, Some(vec![SymDim::Sym("n".into())]));
        // Without axes, a symbolic dim may be 1: only the dtype is known.
        let out = infer("Squeeze", &listed[..1], &Attrs::default(), 1);
        assert_eq!(
            (out[0].dtype, out[0].shape.clone()),
            (Some(DType::I64), None)
        );
        // Axes computed at run time: only the dtype.
        let runtime = [
            listed[0],
            InputView {
                ty: Some(&tensor(&[1])),
                konst: None,
                value: None,
            },
        ];
        let out = infer("Squeeze", &runtime, &Attrs::default(), 1);
        assert_eq!(
            (out[0].dtype, out[0].shape.clone()),
            (Some(DType::I64), None)
        );
    }

    #[test]
    fn constant_nodes_have_the_type_and_value_of_their_attribute() {
        let cases = [
            ("value_int", AttrValue::Int(7), DType::I64, vec![]),
            (
                "value_ints",
                AttrValue::Ints(vec![1, 2]),
                DType::I64,
                vec![SymDim::Known(2)],
            ),
            (
                "value_float",
                AttrValue::Float(1.5f32.to_bits()),
                DType::F32,
                vec![],
            ),
        ];
        for (name, value, dtype, shape) in cases {
            let attrs = Attrs::new([(name, &value)]);
            let out = infer("Constant", &[], &attrs, 1);
            assert_eq!(out[0].dtype, Some(dtype), "{name}");
            assert_eq!(out[0].shape, Some(shape), "{name}");
            let folded = crate::opt::fold::fold("Constant", &[], &attrs).expect(name);
            assert_eq!(folded.dtype, dtype, "{name}");
        }
        let tensor_value = AttrValue::Tensor(Box::new(Literal::from(&TensorData::from_i64(
            vec![3],
            &[4, 5, 6],
        ))));
        let attrs = Attrs::new([("value", &tensor_value)]);
        assert_eq!(
            crate::opt::fold::fold("Constant", &[], &attrs).and_then(|l| literal_ints(&l)),
            Some(vec![4, 5, 6])
        );
        let string = AttrValue::Str("s".into());
        let attrs = Attrs::new([("value_string", &string)]);
        assert_eq!(infer("Constant", &[], &attrs, 1)[0].dtype, None);
    }

    #[test]
    fn max_and_min_broadcast_all_their_inputs() {
        let (a, b, c) = (tensor(&[3, 1, 1]), tensor(&[4, 1]), tensor(&[5]));
        let view = |ty| InputView {
            ty: Some(ty),
            konst: None,
            value: None,
        };
        for op in ["Max", "Min"] {
            let out = infer(op, &[view(&a), view(&b), view(&c)], &Attrs::default(), 1);
            assert_eq!(out[0], tensor(&[3, 4, 5]), "{op}");
            let out = infer(op, &[view(&b)], &Attrs::default(), 1);
            assert_eq!(out[0], b, "{op}");
        }
    }

    #[test]
    fn constant_of_shape_takes_the_dtype_of_its_value() {
        let shape = tensor(&[2]);
        let dims = Literal::from(&TensorData::from_i64(vec![2], &[3, 5]));
        let view = [InputView {
            ty: Some(&shape),
            konst: Some(&dims),
            value: None,
        }];
        let one = AttrValue::Tensor(Box::new(Literal::from(&TensorData::from_i64(
            vec![1],
            &[1],
        ))));
        let out = infer("ConstantOfShape", &view, &Attrs::new([("value", &one)]), 1);
        assert_eq!(out[0], tensor(&[3, 5]));
        let out = infer("ConstantOfShape", &view, &Attrs::default(), 1);
        assert_eq!(out[0].dtype, Some(DType::F32));
    }

    #[test]
    fn slice_with_constant_bounds_computes_the_sliced_dims() {
        let (x, bounds) = (tensor(&[4, 8]), tensor(&[2]));
        let starts = Literal::from(&TensorData::from_i64(vec![2], &[1, 2]));
        let ends = Literal::from(&TensorData::from_i64(vec![2], &[3, 5]));
        let out = infer(
            "Slice",
            &[
                InputView {
                    ty: Some(&x),
                    konst: None,
                    value: None,
                },
                InputView {
                    ty: Some(&bounds),
                    konst: Some(&starts),
                    value: None,
                },
                InputView {
                    ty: Some(&bounds),
                    konst: Some(&ends),
                    value: None,
                },
            ],
            &Attrs::default(),
            1,
        );
        assert_eq!(out[0].shape, Some(vec![SymDim::Known(2), SymDim::Known(3)]));
    }

    fn sym(s: &str) -> SymDim {
        SymDim::expr(s)
    }

    fn typed(dtype: DType, shape: Vec<SymDim>) -> TensorType {
        TensorType::new(dtype, shape)
    }

    fn valued<'a>(t: &'a TensorType, value: &'a [SymDim]) -> InputView<'a> {
        InputView {
            ty: Some(t),
            konst: None,
            value: Some(value),
        }
    }

    fn plain(t: &TensorType) -> InputView<'_> {
        InputView {
            ty: Some(t),
            konst: None,
            value: None,
        }
    }

    #[test]
    fn reshape_to_a_symbolic_target_copies_zeros_and_cancels_factors_for_minus_one() {
        let x = typed(
            DType::F32,
            vec![sym("batch"), sym("past + seq"), SymDim::Known(64)],
        );
        let t4 = tensor(&[4]);
        let run = |target: &[SymDim], allowzero: i64| {
            let az = AttrValue::Int(allowzero);
            let out = infer(
                "Reshape",
                &[plain(&x), valued(&t4, target)],
                &Attrs::new([("allowzero", &az)]),
                1,
            );
            out[0].shape.clone().unwrap()
        };
        let (k, u) = (SymDim::Known, SymDim::Unknown);
        assert_eq!(
            run(&[sym("batch"), sym("seq + past"), k(-1), k(16)], 0),
            [sym("batch"), sym("past + seq"), k(4), k(16)]
        );
        assert_eq!(
            run(&[k(0), k(0), k(4), k(-1)], 0),
            [sym("batch"), sym("past + seq"), k(4), k(16)]
        );
        // Heads merged: [batch, past + seq, 64] → [-1, past + seq, 16] leaves 4·batch.
        assert_eq!(
            run(&[k(-1), sym("past + seq"), k(16), k(1)], 0)[0],
            sym("4*batch")
        );
        // A factor that does not cancel, an unknown or a possibly negative element.
        assert_eq!(run(&[sym("batch"), sym("seq"), k(-1), k(16)], 0)[2], u);
        assert_eq!(run(&[u.clone(), sym("past + seq"), k(-1), k(16)], 0)[2], u);
        assert_eq!(run(&[sym("seq + -1"), k(1), k(1), k(1)], 0)[0], u);
        // allowzero keeps 0 as a dim (and then -1 is not computed).
        assert_eq!(run(&[k(0), k(0), k(4), k(-1)], 1), [k(0), k(0), k(4), u]);
    }

    #[test]
    fn expand_and_constant_of_shape_take_symbolic_shapes() {
        let x = typed(
            DType::F32,
            vec![SymDim::Known(1), SymDim::Known(1), sym("seq")],
        );
        let t3 = tensor(&[3]);
        let target = [sym("batch"), SymDim::Known(4), SymDim::Known(1)];
        let out = infer(
            "Expand",
            &[plain(&x), valued(&t3, &target)],
            &Attrs::default(),
            1,
        );
        assert_eq!(
            out[0].shape,
            Some(vec![sym("batch"), SymDim::Known(4), sym("seq")])
        );
        let fill = AttrValue::Tensor(Box::new(Literal::from(&TensorData::from_i64(
            vec![1],
            &[0],
        ))));
        let out = infer(
            "ConstantOfShape",
            &[valued(&t3, &target)],
            &Attrs::new([("value", &fill)]),
            1,
        );
        assert_eq!(out[0], typed(DType::I64, target.to_vec()));
    }

    #[test]
    fn range_and_slice_lengths_from_symbolic_bounds() {
        let scalar = tensor(&[]);
        let (zero, seq, one) = ([SymDim::Known(0)], [sym("seq")], [SymDim::Known(1)]);
        let (past, three) = ([sym("past")], [SymDim::Known(3)]);
        let range = |start: &[SymDim], limit: &[SymDim], delta: &[SymDim]| {
            infer(
                "Range",
                &[
                    valued(&scalar, start),
                    valued(&scalar, limit),
                    valued(&scalar, delta),
                ],
                &Attrs::default(),
                1,
            )[0]
            .shape
            .clone()
            .unwrap()[0]
                .clone()
        };
        assert_eq!(range(&zero, &seq, &one), sym("seq"));
        assert_eq!(range(&past, &[sym("past + seq")], &one), sym("seq"));
        // seq − past may be negative; a step other than 1 on symbols is not computed.
        assert_eq!(range(&past, &seq, &one), SymDim::Unknown);
        assert_eq!(range(&zero, &seq, &three), SymDim::Unknown);
        let ten = [SymDim::Known(10)];
        assert_eq!(range(&one, &ten, &three), SymDim::Known(3));
        assert_eq!(range(&ten, &one, &[SymDim::Known(-4)]), SymDim::Known(3));
        assert_eq!(range(&ten, &one, &one), SymDim::Known(0));

        let x = typed(DType::F32, vec![sym("batch"), sym("seq")]);
        let t1 = tensor(&[1]);
        let slice = |start: &[SymDim], end: &[SymDim]| {
            infer(
                "Slice",
                &[plain(&x), valued(&t1, start), valued(&t1, end)],
                &Attrs::default(),
                1,
            )[0]
            .shape
            .clone()
            .unwrap()[0]
                .clone()
        };
        assert_eq!(slice(&zero, &[SymDim::Known(i64::MAX)]), sym("batch"));
        assert_eq!(slice(&zero, &[sym("batch")]), sym("batch"));
        assert_eq!(slice(&zero, &[sym("seq")]), SymDim::Unknown);
        assert_eq!(slice(&one, &[SymDim::Known(i64::MAX)]), SymDim::Unknown);
    }

    #[test]
    fn flatten_gemm_and_split_shapes() {
        let x = typed(
            DType::F32,
            vec![sym("batch"), sym("seq"), SymDim::Known(64)],
        );
        let two = AttrValue::Int(2);
        let out = infer("Flatten", &[plain(&x)], &Attrs::new([("axis", &two)]), 1);
        assert_eq!(
            out[0].shape,
            Some(vec![sym("batch*seq"), SymDim::Known(64)])
        );
        let a = typed(DType::F32, vec![sym("n"), SymDim::Known(64)]);
        let b = typed(DType::F32, vec![SymDim::Known(192), SymDim::Known(64)]);
        let one = AttrValue::Int(1);
        let out = infer(
            "Gemm",
            &[plain(&a), plain(&b)],
            &Attrs::new([("transB", &one)]),
            1,
        );
        assert_eq!(out[0].shape, Some(vec![sym("n"), SymDim::Known(192)]));
        let wide = typed(DType::F32, vec![sym("n"), SymDim::Known(10), sym("3*h")]);
        let out = infer("Split", &[plain(&wide)], &Attrs::new([("axis", &one)]), 3);
        let widths: Vec<SymDim> = out
            .iter()
            .map(|t| t.shape.clone().unwrap()[1].clone())
            .collect();
        assert_eq!(
            widths,
            [SymDim::Known(4), SymDim::Known(4), SymDim::Known(2)]
        );
        let last = AttrValue::Int(-1);
        let out = infer("Split", &[plain(&wide)], &Attrs::new([("axis", &last)]), 3);
        assert_eq!(out[2].shape.clone().unwrap()[2], sym("h"));
        let sizes = AttrValue::Ints(vec![7, 3]);
        let out = infer(
            "Split",
            &[plain(&wide)],
            &Attrs::new([("axis", &one), ("split", &sizes)]),
            2,
        );
        assert_eq!(out[1].shape.clone().unwrap()[1], SymDim::Known(3));
    }
}
