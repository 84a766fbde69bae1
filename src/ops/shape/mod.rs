//! Shape and data-movement ops (ONNX opset 24): Transpose, Reshape, Flatten, Squeeze,
//! Unsqueeze, Expand, Tile (`layout`); Concat, Split, Slice, Gather, GatherND, GatherElements
//! (`select`); Shape, Size, Range, ConstantOfShape, Constant (`make`); ScatterND,
//! ScatterElements, Scatter, TensorScatter (`scatter`); Pad, DepthToSpace, SpaceToDepth,
//! Compress, ReverseSequence, NonZero (`arrange`).
//!
//! Every op that only moves elements is a gather: it computes, for each output element, the
//! flat position of the input element it copies, so one code path serves float, integer and
//! bool tensors alike.
//!
//! [`OPS`] registers each op with its attribute schema, type inference and cost facts
//! beside its evaluator.

mod arrange;
mod layout;
mod make;
mod scatter;
mod select;

use super::cost::{Cost, Reads};
use super::elementwise::first_type;
use super::infer::{
    broadcast_type, constant_value, input_type, literal_ints, normal_axis, shape_dims, Attrs,
    InputView,
};
use super::tensor::axis;
use super::types::{SymDim, TensorType};
use super::value::{AttrValue, Literal};
use super::{OpCall, OpDef, Tensor, Values};
use crate::ir::DType;
use crate::Result;

/// The ops of this family (standard domain only).
pub const OPS: &[OpDef] = &[
    OpDef::onnx("Transpose", &["perm"])
        .infer(|c| {
            let perm = c.attrs.get("perm").and_then(AttrValue::ints);
            vec![transpose_type(&c.ty(0), perm)]
        })
        .eval(|c| layout::transpose(c).map(|t| vec![t])),
    OpDef::onnx("Reshape", &["allowzero"])
        .infer(|c| {
            let shape = c.inputs.get(1).copied();
            vec![reshape_type(&c.ty(0), shape, c.int("allowzero"))]
        })
        .eval(|c| layout::reshape(c).map(|t| vec![t])),
    OpDef::onnx("Flatten", &["axis"])
        .infer(|c| vec![flatten_type(&c.ty(0), c.int("axis").unwrap_or(1))])
        .eval(|c| layout::flatten(c).map(|t| vec![t])),
    OpDef::onnx("Squeeze", &[])
        .infer(|c| {
            let axes = c.inputs.get(1).filter(|v| v.ty.is_some());
            vec![squeeze_type(&c.ty(0), axes)]
        })
        .eval(|c| layout::squeeze(c).map(|t| vec![t])),
    OpDef::onnx("Unsqueeze", &[])
        .infer(|c| {
            let axes = c.inputs.get(1).and_then(|v| v.konst);
            vec![unsqueeze_type(&c.ty(0), axes)]
        })
        .eval(|c| layout::unsqueeze(c).map(|t| vec![t])),
    OpDef::onnx("Expand", &[])
        .infer(|c| vec![from_shape_input(c.op, &c.ty(0), c.inputs.get(1).copied())])
        .eval(|c| layout::expand(c).map(|t| vec![t])),
    OpDef::onnx("Tile", &[])
        .infer(|c| vec![tile_type(c.inputs)])
        .eval(|c| layout::tile(c).map(|t| vec![t])),
    OpDef::onnx("Concat", &["axis"])
        .infer(|c| vec![concat_type(c.inputs, c.int("axis").unwrap_or(0))])
        .cost(Cost::KERNEL.folds_on_initializers())
        .eval(|c| select::concat(c).map(|t| vec![t])),
    OpDef::onnx("Split", &["axis", "num_outputs"])
        .infer(|c| split_types(c.inputs, c.attrs, c.outputs))
        .eval(select::split),
    OpDef::onnx("Slice", &[])
        .infer(|c| vec![slice_type(c.inputs)])
        .eval(|c| select::slice(c).map(|t| vec![t])),
    OpDef::onnx("Gather", &["axis"])
        .infer(|c| vec![gather_type(&c.ty(0), &c.ty(1), c.int("axis").unwrap_or(0))])
        .cost(Cost::KERNEL.reads(Reads::Lookup))
        .eval(|c| select::gather(c).map(|t| vec![t])),
    OpDef::onnx("GatherND", &["batch_dims"])
        .infer(|c| {
            vec![gather_nd_type(
                &c.ty(0),
                &c.ty(1),
                c.int("batch_dims").unwrap_or(0),
            )]
        })
        .eval(|c| select::gather_nd(c).map(|t| vec![t])),
    OpDef::onnx("Shape", &["end", "start"])
        .infer(|c| vec![shape_of(&c.ty(0), c.int("start"), c.int("end"))])
        .eval(|c| make::shape(c).map(|t| vec![t])),
    OpDef::onnx("Size", &[])
        .lacks("inference: no rule needs its output's type")
        .eval(|c| make::size(c).map(|t| vec![t])),
    OpDef::onnx("Range", &[])
        .infer(|c| {
            vec![TensorType {
                dtype: c.ty(0).dtype,
                shape: Some(vec![range_len(c.inputs)]),
            }]
        })
        .cost(Cost::KERNEL.support(|c, _, _| c.supports_range))
        .eval(|c| make::range(c).map(|t| vec![t])),
    OpDef::onnx("ConstantOfShape", &["value"])
        .infer(|c| {
            // The dtype of the `value` tensor attribute (f32 zero when unset).
            let dtype = match c.attrs.get("value") {
                Some(AttrValue::Tensor(value)) => value.dtype,
                _ => DType::F32,
            };
            let shape = c.inputs.first().copied();
            vec![from_shape_input(c.op, &c.ty(0), shape).with_dtype(Some(dtype))]
        })
        .eval(|c| make::constant_of_shape(c).map(|t| vec![t])),
    OpDef::onnx(
        "Constant",
        &[
            "value",
            "value_float",
            "value_floats",
            "value_int",
            "value_ints",
            "value_string",
            "value_strings",
        ],
    )
    .infer(|c| {
        vec![
            constant_value(c.attrs).map_or_else(TensorType::default, |k| TensorType {
                dtype: Some(k.dtype),
                shape: Some(k.shape.iter().map(|&d| SymDim::Known(d as i64)).collect()),
            }),
        ]
    })
    .eval(|c| make::constant(c).map(|t| vec![t])),
    OpDef::onnx("Pad", &["mode"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| arrange::pad(c).map(|t| vec![t])),
    OpDef::onnx("DepthToSpace", &["blocksize", "mode"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| arrange::depth_to_space(c).map(|t| vec![t])),
    OpDef::onnx("SpaceToDepth", &["blocksize", "mode"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| arrange::space_to_depth(c).map(|t| vec![t])),
    OpDef::onnx("ReverseSequence", &["batch_axis", "time_axis"])
        .infer(first_type)
        .eval(|c| arrange::reverse_sequence(c).map(|t| vec![t])),
    OpDef::onnx("NonZero", &[])
        .infer(|c| {
            let rank = c
                .ty(0)
                .shape
                .map_or(SymDim::Unknown, |s| SymDim::Known(s.len() as i64));
            vec![TensorType::new(DType::I64, vec![rank, SymDim::Unknown])]
        })
        .eval(|c| arrange::non_zero(c).map(|t| vec![t])),
    OpDef::onnx("Compress", &["axis"])
        .infer(|c| vec![c.ty(0).with_unknown_shape()])
        .eval(|c| arrange::compress(c).map(|t| vec![t])),
    OpDef::onnx("OneHot", &["axis"])
        .infer(|c| vec![c.ty(2).with_unknown_shape()])
        .eval(|c| make::one_hot(c).map(|t| vec![t])),
    OpDef::onnx("EyeLike", &["dtype", "k"])
        .infer(|c| {
            let to = c.int("dtype").and_then(|t| DType::from_onnx_code(t as i32));
            vec![c.ty(0).with_dtype(to.or(c.ty(0).dtype))]
        })
        .eval(|c| make::eye_like(c).map(|t| vec![t])),
    OpDef::onnx("HannWindow", WINDOW_ATTRS)
        .infer(window_type)
        .eval(|c| make::window(c, make::Window::Hann).map(|t| vec![t])),
    OpDef::onnx("HammingWindow", WINDOW_ATTRS)
        .infer(window_type)
        .eval(|c| make::window(c, make::Window::Hamming).map(|t| vec![t])),
    OpDef::onnx("BlackmanWindow", WINDOW_ATTRS)
        .infer(window_type)
        .eval(|c| make::window(c, make::Window::Blackman).map(|t| vec![t])),
    OpDef::onnx("MelWeightMatrix", &["output_datatype"])
        .infer(|c| {
            let dtype = DType::from_onnx_code(c.int("output_datatype").unwrap_or(1) as i32);
            vec![TensorType {
                dtype,
                shape: Some(vec![SymDim::Unknown, SymDim::Unknown]),
            }]
        })
        .eval(|c| make::mel_weight_matrix(c).map(|t| vec![t])),
    OpDef::onnx("GatherElements", &["axis"])
        .infer(|c| vec![c.ty(1).with_dtype(c.ty(0).dtype)])
        .eval(|c| select::gather_elements(c).map(|t| vec![t])),
    OpDef::onnx("ScatterElements", &["axis", "reduction"])
        .infer(first_type)
        .eval(|c| scatter::scatter_elements(c).map(|t| vec![t])),
    // `Scatter` (opsets 9 and 10) is `ScatterElements` under its first name.
    OpDef::onnx("Scatter", &["axis"])
        .infer(first_type)
        .eval(|c| scatter::scatter_elements(c).map(|t| vec![t])),
    OpDef::onnx("ScatterND", &["reduction"])
        .infer(first_type)
        .eval(|c| scatter::scatter_nd(c).map(|t| vec![t])),
    OpDef::onnx("TensorScatter", &["axis", "mode"])
        .infer(first_type)
        .cost(Cost::KERNEL.support(|c, _, _| c.supports_tensor_scatter))
        .eval(|c| scatter::tensor_scatter(c).map(|t| vec![t]))
        .since(24),
];

/// The window functions' attributes.
const WINDOW_ATTRS: &[&str] = &["output_datatype", "periodic"];

/// A window's type: 1-D, of `output_datatype` (float32 by default).
fn window_type(c: &super::infer::Infer<'_>) -> Vec<TensorType> {
    let dtype = DType::from_onnx_code(c.int("output_datatype").unwrap_or(1) as i32);
    vec![TensorType {
        dtype,
        shape: Some(vec![SymDim::Unknown]),
    }]
}

/// A tensor of `t`'s dtype and the given shape holding `t`'s elements at flat positions `idx`.
fn take(t: &Tensor, shape: Vec<usize>, idx: &[usize]) -> Tensor {
    let values = match &t.values {
        Values::Float(v) => Values::Float(idx.iter().map(|&i| v[i]).collect()),
        Values::Int(v) => Values::Int(idx.iter().map(|&i| v[i]).collect()),
        Values::Bool(v) => Values::Bool(idx.iter().map(|&i| v[i]).collect()),
    };
    Tensor {
        dtype: t.dtype,
        shape,
        values,
    }
}

/// `t`'s elements, in order, under another shape with the same element count.
fn with_shape(t: &Tensor, shape: Vec<usize>) -> Tensor {
    Tensor {
        dtype: t.dtype,
        shape,
        values: t.values.clone(),
    }
}

/// For every element of `out_shape` in row-major order, the flat input position
/// `Σᵢ offset(i, cᵢ)`, where `cᵢ` is the element's coordinate along output axis `i`. The
/// per-axis offsets are tabulated only when the output has elements: an empty output may have
/// long axes.
fn index_map(out_shape: &[usize], offset: impl Fn(usize, usize) -> usize) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let tables: Vec<Vec<usize>> = out_shape
        .iter()
        .enumerate()
        .map(|(i, &d)| (0..d).map(|c| offset(i, c)).collect())
        .collect();
    let mut out = Vec::with_capacity(n);
    let mut coord = vec![0; out_shape.len()];
    for _ in 0..n {
        out.push(coord.iter().zip(&tables).map(|(&c, t)| t[c]).sum());
        for i in (0..coord.len()).rev() {
            coord[i] += 1;
            if coord[i] < out_shape[i] {
                break;
            }
            coord[i] = 0;
        }
    }
    out
}

/// The values of integer input `i` (shape, axes, starts, repeats, …).
fn int_input(call: &OpCall<'_>, i: usize) -> Result<Vec<i64>> {
    let t = call.input(i)?;
    t.ints().map(<[i64]>::to_vec).map_err(|_| {
        call.error(format!(
            "input {i} must be an integer tensor, found {}",
            t.dtype
        ))
    })
}

/// Non-negative dims from integer values.
fn dims(call: &OpCall<'_>, values: &[i64]) -> Result<Vec<usize>> {
    values
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| call.error(format!("negative dimension {d} in {values:?}")))
        })
        .collect()
}

/// Resolves a possibly negative axis against `rank`, with the node named in the error.
fn norm_axis(call: &OpCall<'_>, a: i64, rank: usize) -> Result<usize> {
    axis(a, rank).map_err(|_| call.error(format!("axis {a} is out of range for rank {rank}")))
}

/// Resolves a list of axes against `rank`, rejecting duplicates.
fn norm_axes(call: &OpCall<'_>, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = Vec::with_capacity(axes.len());
    for &a in axes {
        let v = norm_axis(call, a, rank)?;
        if out.contains(&v) {
            return Err(call.error(format!("axes {axes:?} repeat axis {v}")));
        }
        out.push(v);
    }
    Ok(out)
}

/// Split along `axis` into constant sizes (the second input, or the `split` attribute before
/// opset 13), or into `outputs` equal
/// parts (the last one smaller when the dim does not divide; a symbolic dim only when the
/// parts are exact).
fn split_types(inputs: &[InputView<'_>], attr: &Attrs<'_>, outputs: usize) -> Vec<TensorType> {
    let x = input_type(inputs, 0);
    let unknown_axis = |d: &[SymDim], a: usize| {
        let mut s = d.to_vec();
        s[a] = SymDim::Unknown;
        s
    };
    let Some((d, a)) = shape_dims(&x)
        .and_then(|d| Some((d, normal_axis(attr.int("axis").unwrap_or(0), d.len())?)))
    else {
        return vec![x.with_dtype(x.dtype); outputs];
    };
    // The sizes: the second input (opset ≥ 13) or the `split` attribute (before).
    let listed = match (inputs.get(1).filter(|v| v.ty.is_some()), attr.get("split")) {
        (Some(v), _) => Some(v.konst.and_then(literal_ints)),
        (None, Some(AttrValue::Ints(s))) => Some(Some(s.clone())),
        _ => None,
    };
    let sizes: Option<Vec<SymDim>> = match listed {
        Some(sizes) => sizes
            .filter(|s| s.len() == outputs)
            .map(|s| s.into_iter().map(SymDim::Known).collect()),
        None if outputs == 0 => None,
        None => match &d[a] {
            SymDim::Known(n) => {
                let n = *n;
                let part = (n + outputs as i64 - 1) / outputs as i64;
                Some(
                    (0..outputs as i64)
                        .map(|i| SymDim::Known(n.saturating_sub(i * part).clamp(0, part)))
                        .collect(),
                )
            }
            dim => match dim.div_exact(&SymDim::Known(outputs as i64)) {
                SymDim::Unknown => None,
                part => Some(vec![part; outputs]),
            },
        },
    };
    (0..outputs)
        .map(|i| {
            let mut s = unknown_axis(d, a);
            if let Some(sizes) = &sizes {
                s[a] = sizes[i].clone();
            }
            TensorType {
                dtype: x.dtype,
                shape: Some(s),
            }
        })
        .collect()
}

/// `Gather` along `ax`: the data's dims with that axis replaced by the indices' dims.
fn gather_type(data: &TensorType, idx: &TensorType, ax: i64) -> TensorType {
    let shape = match (shape_dims(data), shape_dims(idx)) {
        (Some(d), Some(i)) => normal_axis(ax, d.len()).map(|a| {
            let mut s = d[..a].to_vec();
            s.extend_from_slice(i);
            s.extend_from_slice(&d[a + 1..]);
            s
        }),
        _ => None,
    };
    TensorType {
        dtype: data.dtype,
        shape,
    }
}

/// `Tile`'s output: each dim of the input times its repeat count, the repeats read as a
/// constant or a symbolic value (one per axis); unknown dims where they are not.
fn tile_type(inputs: &[InputView<'_>]) -> TensorType {
    let data = inputs.first().and_then(|v| v.ty);
    let shape = data.and_then(|t| {
        let dims = shape_dims(t)?;
        let repeats = inputs.get(1)?.elements()?;
        (repeats.len() == dims.len()).then(|| {
            dims.iter()
                .zip(&repeats)
                .map(|(d, r)| match r {
                    SymDim::Known(1) => d.clone(),
                    SymDim::Unknown => SymDim::Unknown,
                    r => d.mul(r),
                })
                .collect()
        })
    });
    TensorType {
        dtype: data.and_then(|t| t.dtype),
        shape,
    }
}

/// `GatherND`'s output: `indices.shape[:-1] + data.shape[batch_dims + k:]` for the index
/// tuples' length `k` (the indices' last dim, which must be known).
fn gather_nd_type(data: &TensorType, idx: &TensorType, batch_dims: i64) -> TensorType {
    let shape = match (shape_dims(data), shape_dims(idx)) {
        (Some(d), Some(i)) => i.last().and_then(SymDim::known).and_then(|k| {
            let from = usize::try_from(batch_dims.checked_add(k)?).ok()?;
            (batch_dims >= 0 && from <= d.len()).then(|| {
                let mut s = i[..i.len() - 1].to_vec();
                s.extend_from_slice(&d[from..]);
                s
            })
        }),
        _ => None,
    };
    TensorType {
        dtype: data.dtype,
        shape,
    }
}

fn shape_of(t: &TensorType, start: Option<i64>, end: Option<i64>) -> TensorType {
    let len = t.rank().map(|r| {
        let clamp = |v: i64| {
            let v = if v < 0 { v + r as i64 } else { v };
            v.clamp(0, r as i64)
        };
        let s = clamp(start.unwrap_or(0));
        let e = clamp(end.unwrap_or(r as i64));
        (e - s).max(0)
    });
    TensorType {
        dtype: Some(DType::I64),
        shape: Some(vec![len.map_or(SymDim::Unknown, SymDim::Known)]),
    }
}

/// `Unsqueeze` by constant `axes`: ones inserted at those positions of the output.
fn unsqueeze_type(t: &TensorType, axes: Option<&Literal>) -> TensorType {
    let shape = match (shape_dims(t), axes.and_then(literal_ints)) {
        (Some(d), Some(axes)) => {
            let rank = d.len() + axes.len();
            let mut positions: Vec<usize> =
                axes.iter().filter_map(|&a| normal_axis(a, rank)).collect();
            positions.sort_unstable();
            let mut rest = d.iter();
            (positions.len() == axes.len()).then(|| {
                (0..rank)
                    .map(|i| {
                        if positions.contains(&i) {
                            SymDim::Known(1)
                        } else {
                            rest.next().cloned().unwrap_or(SymDim::Unknown)
                        }
                    })
                    .collect()
            })
        }
        _ => None,
    };
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// Squeeze: the listed axes go; without axes, every dim of size 1 goes (only decidable when
/// every dim is known).
fn squeeze_type(t: &TensorType, axes: Option<&InputView<'_>>) -> TensorType {
    let shape = shape_dims(t).and_then(|d| match axes {
        Some(axes) => {
            let drop: Vec<usize> = literal_ints(axes.konst?)?
                .iter()
                .map(|&a| normal_axis(a, d.len()))
                .collect::<Option<_>>()?;
            Some(
                d.iter()
                    .enumerate()
                    .filter(|(i, _)| !drop.contains(i))
                    .map(|(_, s)| s.clone())
                    .collect(),
            )
        }
        None => {
            let known: Option<Vec<i64>> = d.iter().map(SymDim::known).collect();
            Some(
                known?
                    .into_iter()
                    .filter(|&k| k != 1)
                    .map(SymDim::Known)
                    .collect(),
            )
        }
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// `Concat` along `ax`: the inputs' dims joined (unknown where they name a dim differently),
/// that axis summed over the inputs.
fn concat_type(inputs: &[InputView<'_>], ax: i64) -> TensorType {
    let types: Vec<TensorType> = (0..inputs.len()).map(|i| input_type(inputs, i)).collect();
    let dtype = types.first().and_then(|t| t.dtype);
    let all: Option<Vec<&[SymDim]>> = types.iter().map(shape_dims).collect();
    let shape = all.and_then(|all| {
        let first = all.first()?;
        let a = normal_axis(ax, first.len())?;
        // The other dims are equal at run time; inputs that name one differently (an export's
        // inputs renamed independently) leave it unknown rather than guessed from one input, so
        // that no other computation of the value is typed with another name.
        let mut s: Vec<SymDim> = first
            .iter()
            .enumerate()
            .map(
                |(i, d)| match all.iter().all(|o| o.get(i).is_none_or(|x| x.compatible(d))) {
                    true => all
                        .iter()
                        .fold(d.clone(), |acc, o| acc.join(o.get(i).unwrap_or(&acc))),
                    false => SymDim::Unknown,
                },
            )
            .collect();
        s[a] = all
            .iter()
            .skip(1)
            .fold(first[a].clone(), |acc, d| match (&acc, d.get(a)) {
                (SymDim::Known(x), Some(SymDim::Known(y))) => SymDim::Known(x + y),
                (acc, Some(d)) => acc.add(d),
                _ => SymDim::Unknown,
            });
        Some(s)
    });
    TensorType { dtype, shape }
}

/// Flatten: `[d0 … d(axis−1), d(axis) … dn]` → `[d0·…·d(axis−1), d(axis)·…·dn]`.
fn flatten_type(t: &TensorType, ax: i64) -> TensorType {
    let shape = shape_dims(t).and_then(|d| {
        let r = d.len() as i64;
        let a = if ax < 0 { ax + r } else { ax };
        let a = usize::try_from(a).ok().filter(|&a| a <= d.len())?;
        let product = |f: &[SymDim]| f.iter().fold(SymDim::Known(1), |acc, x| acc.mul(x));
        Some(vec![product(&d[..a]), product(&d[a..])])
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// `Transpose` by `perm` (reversed dims when unset).
fn transpose_type(t: &TensorType, perm: Option<&[i64]>) -> TensorType {
    let shape = shape_dims(t).map(|d| match perm {
        Some(p) if p.len() == d.len() => p
            .iter()
            .map(|&i| d.get(i as usize).cloned().unwrap_or(SymDim::Unknown))
            .collect(),
        _ => d.iter().rev().cloned().collect(),
    });
    TensorType {
        dtype: t.dtype,
        shape,
    }
}

/// The dims a shape tensor's element stands for: a number ≥ 0 or a never-negative symbolic
/// dim (taken as positive, as exporters declare them), else unknown.
fn target_dim(d: &SymDim) -> SymDim {
    match d {
        SymDim::Known(v) if *v >= 0 => d.clone(),
        SymDim::Sym(_) if d.is_nonnegative() => d.clone(),
        _ => SymDim::Unknown,
    }
}

/// Expand / Reshape / ConstantOfShape: the output shape comes from a shape tensor, constant or
/// symbolic (see `opt::sym_value`); else only the rank, from the shape tensor's length.
fn from_shape_input(op: &str, data: &TensorType, shape: Option<InputView<'_>>) -> TensorType {
    let rank = shape
        .and_then(|s| s.ty)
        .and_then(|t| t.static_shape())
        .and_then(|s| s.first().copied());
    let values: Option<Vec<SymDim>> = shape
        .and_then(|s| s.elements())
        .map(|v| v.iter().map(target_dim).collect());
    // ConstantOfShape's dtype comes from its attribute (set by the caller).
    let dtype = data.dtype;
    let out = match (values, rank) {
        (Some(v), _) if op == "ConstantOfShape" => Some(v),
        (Some(v), _) if op == "Expand" => Some(
            broadcast_type(
                data,
                &TensorType {
                    dtype: None,
                    shape: Some(v),
                },
            )
            .shape
            .unwrap_or_default(),
        ),
        (_, Some(r)) if r >= 0 => Some(vec![SymDim::Unknown; r as usize]),
        _ => None,
    };
    TensorType { dtype, shape: out }
}

/// Reshape: the target shape (constant or symbolic) gives its dims, the input's dim for each 0
/// (unless `allowzero`), and for a single −1 the input's size divided by the other dims, equal
/// factors cancelled first (`[batch, seq, 64]` → `[batch, seq, -1, 16]` gives 4); otherwise
/// only the rank (from the shape input's length).
fn reshape_type(
    data: &TensorType,
    shape: Option<InputView<'_>>,
    allowzero: Option<i64>,
) -> TensorType {
    let Some(target) = shape.and_then(|s| s.elements()) else {
        return from_shape_input("Reshape", data, shape);
    };
    let input = shape_dims(data);
    let copy_zero = allowzero.unwrap_or(0) == 0;
    let mut out: Vec<SymDim> = target
        .iter()
        .enumerate()
        .map(|(i, v)| match v {
            SymDim::Known(0) if copy_zero => input
                .and_then(|d| d.get(i).cloned())
                .unwrap_or(SymDim::Unknown),
            v => target_dim(v),
        })
        .collect();
    let minus: Vec<usize> = (0..target.len())
        .filter(|&i| target[i] == SymDim::Known(-1))
        .collect();
    if let ([minus], Some(input)) = (minus.as_slice(), input) {
        let others: Vec<SymDim> = (0..out.len())
            .filter(|i| i != minus)
            .map(|i| out[i].clone())
            .collect();
        out[*minus] = quotient(input, &others);
    }
    TensorType {
        dtype: data.dtype,
        shape: Some(out),
    }
}

/// The product of `num` divided by the product of `den`, equal factors cancelled first, when
/// the division is exact (unknown otherwise).
fn quotient(num: &[SymDim], den: &[SymDim]) -> SymDim {
    let mut num: Vec<SymDim> = num.to_vec();
    let mut rest = Vec::new();
    for d in den {
        match num.iter().position(|n| n == d && *n != SymDim::Unknown) {
            Some(i) => {
                num.swap_remove(i);
            }
            None => rest.push(d.clone()),
        }
    }
    let product = |f: &[SymDim]| f.iter().fold(SymDim::Known(1), |acc, d| acc.mul(d));
    product(&num).div_exact(&product(&rest))
}

/// Range's length when its start, limit and delta are read: `max(⌈(limit − start) / delta⌉,
/// 0)` for numbers, `limit − start` for a delta of 1 when that is never negative.
fn range_len(inputs: &[InputView<'_>]) -> SymDim {
    let scalar = |i: usize| match inputs.get(i).and_then(InputView::elements).as_deref() {
        Some([d]) => d.clone(),
        _ => SymDim::Unknown,
    };
    match (scalar(0), scalar(1), scalar(2)) {
        (SymDim::Known(s), SymDim::Known(l), SymDim::Known(d)) if d != 0 => l
            .checked_sub(s)
            .and_then(|span| {
                let (q, r) = (span / d, span % d);
                q.checked_add(i64::from(r != 0 && (r < 0) == (d < 0)))
            })
            .map_or(SymDim::Unknown, |n| SymDim::Known(n.max(0))),
        (s, l, SymDim::Known(1)) => {
            let span = l.sub(&s);
            match span.is_nonnegative() {
                true => span,
                false => SymDim::Unknown,
            }
        }
        _ => SymDim::Unknown,
    }
}

/// At least this large, a Slice end is past the end of any dim (exporters write `i64::MAX`).
const SLICE_TO_END: i64 = 1 << 62;

/// Slice: the input's rank and dtype; a sliced dim is computed when the starts/ends (constant
/// or symbolic) and steps are read with a step of 1: from numbers on a known dim, or as the
/// whole dim when it starts at 0 and ends at the dim itself or past any end; unknown otherwise.
fn slice_type(inputs: &[InputView<'_>]) -> TensorType {
    let data = input_type(inputs, 0);
    let konst = |i: usize| inputs.get(i).and_then(|v| v.konst).and_then(literal_ints);
    let bound = |i: usize| inputs.get(i).and_then(InputView::elements);
    let shape = shape_dims(&data).map(|d| {
        let (starts, ends) = (bound(1), bound(2));
        // How many axes are sliced: the length of `starts`, from its value or its static type.
        let count = match (&starts, inputs.get(1).and_then(|v| v.ty)) {
            (Some(s), _) => s.len(),
            (None, Some(t)) => match t.static_shape().as_deref() {
                Some([n]) if *n >= 0 => *n as usize,
                _ => return vec![SymDim::Unknown; d.len()],
            },
            (None, None) => return vec![SymDim::Unknown; d.len()],
        };
        let axes = match inputs.get(3).and_then(|v| v.ty) {
            None => Some((0..count as i64).collect()),
            Some(_) => konst(3),
        };
        let steps = match inputs.get(4).and_then(|v| v.ty) {
            None => Some(vec![1; count]),
            Some(_) => konst(4),
        };
        let mut out = d.to_vec();
        let Some(axes) = axes else {
            return vec![SymDim::Unknown; d.len()];
        };
        for (i, &a) in axes.iter().enumerate() {
            let Some(a) = normal_axis(a, d.len()) else {
                return vec![SymDim::Unknown; d.len()];
            };
            let at = |v: &Option<Vec<SymDim>>| v.as_ref().and_then(|v| v.get(i).cloned());
            let step_one = steps.as_ref().and_then(|st| st.get(i)) == Some(&1);
            out[a] = match (at(&starts), at(&ends), &d[a]) {
                (Some(SymDim::Known(s)), Some(SymDim::Known(e)), SymDim::Known(n)) if step_one => {
                    let clamp = |v: i64| if v < 0 { v + n } else { v }.clamp(0, *n);
                    SymDim::Known((clamp(e) - clamp(s)).max(0))
                }
                (Some(SymDim::Known(0)), Some(e), n) if step_one => match e {
                    SymDim::Known(e) if e >= SLICE_TO_END => n.clone(),
                    e if e == *n => n.clone(),
                    _ => SymDim::Unknown,
                },
                _ => SymDim::Unknown,
            };
        }
        out
    });
    TensorType {
        dtype: data.dtype,
        shape,
    }
}
