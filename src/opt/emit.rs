//! [`Emit`]: adds standard ops and constants to the e-graph, every attribute of an op's schema
//! present (unset unless given), for the appliers of rewrite rules.

use egg::Id;
use half::{bf16, f16};

use super::analysis::OnnxGraph;
use super::lang::Onnx;
use crate::ir::{DType, TensorData};
use crate::ops::schema;
use crate::ops::types::TensorType;
use crate::ops::value::{AttrValue, Literal};

/// `i64::MAX`, the "to the end" bound of `Slice`.
pub(crate) const TO_END: i64 = i64::MAX;

/// Adds standard ops and constants to the e-graph, with every attribute of the op's schema
/// (unset unless given).
pub(crate) struct Emit<'a> {
    /// The e-graph ops are added to.
    pub(crate) g: &'a mut OnnxGraph,
}

impl<'a> Emit<'a> {
    /// An emitter over `g`.
    pub(crate) fn new(g: &'a mut OnnxGraph) -> Emit<'a> {
        Emit { g }
    }

    /// The tensor type of class `id`, if it holds a tensor.
    pub(crate) fn tensor(&self, id: Id) -> Option<&TensorType> {
        self.g[id].data.tensor()
    }

    /// The attribute value of class `id`, if it holds one.
    pub(crate) fn attr(&self, id: Id) -> Option<&AttrValue> {
        self.g[id].data.attr()
    }

    /// The integer attribute of class `id`: `Some(default)` when unset, `None` when it is not
    /// an integer.
    pub(crate) fn int_or(&self, id: Id, default: i64) -> Option<i64> {
        match self.attr(id)? {
            AttrValue::Unset => Some(default),
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// Whether class `id` is an absent optional input.
    pub(crate) fn is_absent(&self, id: Id) -> bool {
        self.g[id].nodes.iter().any(|n| matches!(n, Onnx::Absent))
    }

    /// The standard op `op` (one output) over `inputs`; attributes not in `attrs` stay unset.
    pub(crate) fn op(&mut self, op: &str, inputs: &[Id], attrs: &[(&str, AttrValue)]) -> Id {
        let attrs: Vec<(&str, Id)> = attrs
            .iter()
            .map(|(n, v)| (*n, self.g.add(Onnx::Attr(v.clone()))))
            .collect();
        self.op_with(op, inputs, &attrs)
    }

    /// [`Emit::op`] with attribute classes already in the e-graph.
    pub(crate) fn op_with(&mut self, op: &str, inputs: &[Id], attrs: &[(&str, Id)]) -> Id {
        let names = schema(op).unwrap_or_else(|| panic!("{op} has no schema"));
        debug_assert!(attrs.iter().all(|(n, _)| names.contains(n)), "{op}");
        let unset = self.g.add(Onnx::Attr(AttrValue::Unset));
        let mut children = inputs.to_vec();
        children.extend(names.iter().map(|name| {
            attrs
                .iter()
                .find(|(n, _)| n == name)
                .map_or(unset, |(_, id)| *id)
        }));
        self.g.add(Onnx::op(op, names, inputs.len(), 1, children))
    }

    /// A binary op without attributes (`Add`, `Mul`, `MatMul`, …).
    pub(crate) fn bin(&mut self, op: &str, a: Id, b: Id) -> Id {
        self.op(op, &[a, b], &[])
    }

    /// A scalar int64 constant.
    pub(crate) fn int(&mut self, value: i64) -> Id {
        let data = TensorData::from_i64(Vec::new(), &[value]);
        self.g.add(Onnx::Const(Box::new(Literal::from(&data))))
    }

    /// A 1-D int64 constant.
    pub(crate) fn ints(&mut self, values: &[i64]) -> Id {
        let data = TensorData::from_i64(vec![values.len()], values);
        self.g.add(Onnx::Const(Box::new(Literal::from(&data))))
    }

    /// A scalar constant `value` of the float type `dtype` (`None` for other dtypes).
    pub(crate) fn float(&mut self, dtype: DType, value: f32) -> Option<Id> {
        let bytes = match dtype {
            DType::F32 => value.to_le_bytes().to_vec(),
            DType::F16 => f16::from_f32(value).to_le_bytes().to_vec(),
            DType::BF16 => bf16::from_f32(value).to_le_bytes().to_vec(),
            _ => return None,
        };
        let lit = Literal {
            dtype,
            shape: Vec::new(),
            bytes,
        };
        Some(self.g.add(Onnx::Const(Box::new(lit))))
    }

    /// `Reshape(x, shape)` to a constant shape (0 copies the input dim).
    pub(crate) fn reshape(&mut self, x: Id, shape: &[i64]) -> Id {
        let shape = self.ints(shape);
        self.op("Reshape", &[x, shape], &[])
    }

    /// `Transpose(x; perm)`.
    pub(crate) fn transpose(&mut self, x: Id, perm: &[i64]) -> Id {
        self.op(
            "Transpose",
            &[x],
            &[("perm", AttrValue::Ints(perm.to_vec()))],
        )
    }

    /// `Unsqueeze(x, axes)`.
    pub(crate) fn unsqueeze(&mut self, x: Id, axes: &[i64]) -> Id {
        let axes = self.ints(axes);
        self.op("Unsqueeze", &[x, axes], &[])
    }

    /// `(values, indices)` of `TopK(x, [k]; axis -1)`, the largest first (`largest` and
    /// `sorted` unset: their defaults).
    pub(crate) fn top_k(&mut self, x: Id, k: i64) -> (Id, Id) {
        let k = self.ints(&[k]);
        let axis = self.g.add(Onnx::Attr(AttrValue::Int(-1)));
        let unset = self.g.add(Onnx::Attr(AttrValue::Unset));
        let names = schema("TopK").expect("TopK has a schema");
        let top = self.g.add(Onnx::op(
            "TopK",
            names,
            2,
            2,
            vec![x, k, axis, unset, unset],
        ));
        let values = self.g.add(Onnx::Get {
            index: 0,
            tuple: [top],
        });
        let indices = self.g.add(Onnx::Get {
            index: 1,
            tuple: [top],
        });
        (values, indices)
    }

    /// `Slice(x, [start], [end], [axis])` with constant bounds.
    pub(crate) fn slice(&mut self, x: Id, start: i64, end: i64, axis: i64) -> Id {
        let (s, e, a) = (self.ints(&[start]), self.ints(&[end]), self.ints(&[axis]));
        self.op("Slice", &[x, s, e, a], &[])
    }

    /// `Concat(parts; axis)`.
    pub(crate) fn concat(&mut self, parts: &[Id], axis: i64) -> Id {
        self.op("Concat", parts, &[("axis", AttrValue::Int(axis))])
    }

    /// `Shape(x; start, end)`.
    pub(crate) fn shape(&mut self, x: Id, start: i64, end: i64) -> Id {
        self.op(
            "Shape",
            &[x],
            &[
                ("end", AttrValue::Int(end)),
                ("start", AttrValue::Int(start)),
            ],
        )
    }
}
