//! The interpreter's tensors: values held as f32 (floats), i64 (integers) or bool, tagged with
//! the graph dtype they stand for. f16/bf16 values are rounded to their dtype whenever an op
//! produces them, so results match what a runtime computing in f32 and storing in f16 gives.

use half::{bf16, f16};

use crate::ir::{f8e4m3, DType, TensorData};
use crate::{Error, Result};

/// Element storage.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// f32, f16, bf16 and f64 tensors (computed in f32).
    Float(Vec<f32>),
    /// Integer tensors of any width.
    Int(Vec<i64>),
    /// Boolean tensors.
    Bool(Vec<bool>),
}

/// A concrete tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// The dtype it stands for.
    pub dtype: DType,
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// The elements.
    pub values: Values,
}

impl Tensor {
    /// A float tensor of logical dtype `dtype` (values rounded to it).
    pub fn float(dtype: DType, shape: Vec<usize>, values: Vec<f32>) -> Tensor {
        let mut t = Tensor {
            dtype,
            shape,
            values: Values::Float(values),
        };
        t.round_to_dtype();
        t
    }

    /// An integer tensor.
    pub fn int(dtype: DType, shape: Vec<usize>, values: Vec<i64>) -> Tensor {
        Tensor {
            dtype,
            shape,
            values: Values::Int(values),
        }
    }

    /// A boolean tensor.
    pub fn bool(shape: Vec<usize>, values: Vec<bool>) -> Tensor {
        Tensor {
            dtype: DType::Bool,
            shape,
            values: Values::Bool(values),
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The float values (error for non-float tensors).
    pub fn floats(&self) -> Result<&[f32]> {
        match &self.values {
            Values::Float(v) => Ok(v),
            _ => Err(Error::Graph(format!(
                "expected a float tensor, found {}",
                self.dtype
            ))),
        }
    }

    /// The integer values (error for non-integer tensors).
    pub fn ints(&self) -> Result<&[i64]> {
        match &self.values {
            Values::Int(v) => Ok(v),
            _ => Err(Error::Graph(format!(
                "expected an integer tensor, found {}",
                self.dtype
            ))),
        }
    }

    /// The boolean values (error for non-bool tensors).
    pub fn bools(&self) -> Result<&[bool]> {
        match &self.values {
            Values::Bool(v) => Ok(v),
            _ => Err(Error::Graph(format!(
                "expected a bool tensor, found {}",
                self.dtype
            ))),
        }
    }

    /// Every element as f64 (any storage).
    pub fn as_f64(&self) -> Vec<f64> {
        match &self.values {
            Values::Float(v) => v.iter().map(|&x| x as f64).collect(),
            Values::Int(v) if self.dtype == DType::U64 => {
                v.iter().map(|&x| x as u64 as f64).collect()
            }
            Values::Int(v) => v.iter().map(|&x| x as f64).collect(),
            Values::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
        }
    }

    /// Rounds float values to the precision of the logical dtype (f16, bf16; float8 e4m3fn
    /// saturating to ±448, the `Cast` default).
    pub fn round_to_dtype(&mut self) {
        if let Values::Float(v) = &mut self.values {
            match self.dtype {
                DType::F16 => v.iter_mut().for_each(|x| *x = f16::from_f32(*x).to_f32()),
                DType::BF16 => v.iter_mut().for_each(|x| *x = bf16::from_f32(*x).to_f32()),
                DType::F8E4M3FN => v.iter_mut().for_each(|x| *x = f8e4m3::round(*x, true)),
                _ => {}
            }
        }
    }

    /// From little-endian tensor bytes, which must hold exactly `shape × dtype size` bytes (an
    /// error otherwise: a shape that overflows, or bytes too short or too long for it).
    pub fn from_data(t: &TensorData) -> Result<Tensor> {
        let b = &t.bytes;
        let expected = t.dtype.bytes_for(&t.shape);
        if expected != Some(b.len()) {
            return Err(Error::Graph(format!(
                "{} tensor of shape {:?} needs {} bytes, found {}",
                t.dtype,
                t.shape,
                expected.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string()),
                b.len()
            )));
        }
        let shape = t.shape.clone();
        Ok(match t.dtype {
            DType::F32 => Tensor::float(
                DType::F32,
                shape,
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            DType::F64 => Tensor::float(
                DType::F64,
                shape,
                b.chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()) as f32)
                    .collect(),
            ),
            DType::F16 => Tensor::float(
                DType::F16,
                shape,
                b.chunks_exact(2)
                    .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                    .collect(),
            ),
            DType::BF16 => Tensor::float(
                DType::BF16,
                shape,
                b.chunks_exact(2)
                    .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                    .collect(),
            ),
            DType::I64 | DType::U64 => Tensor::int(
                t.dtype,
                shape,
                b.chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
            ),
            DType::I32 => Tensor::int(
                DType::I32,
                shape,
                b.chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i64)
                    .collect(),
            ),
            DType::I8 => Tensor::int(
                DType::I8,
                shape,
                b.iter().map(|&x| x as i8 as i64).collect(),
            ),
            DType::I16 => Tensor::int(
                DType::I16,
                shape,
                b.chunks_exact(2)
                    .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                    .collect(),
            ),
            DType::U16 => Tensor::int(
                DType::U16,
                shape,
                b.chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64)
                    .collect(),
            ),
            DType::U32 => Tensor::int(
                DType::U32,
                shape,
                b.chunks_exact(4)
                    .map(|c| u32::from_le_bytes(c.try_into().unwrap()) as i64)
                    .collect(),
            ),
            DType::U8 | DType::U4 => {
                Tensor::int(t.dtype, shape, b.iter().map(|&x| x as i64).collect())
            }
            DType::I4 => Tensor::int(
                DType::I4,
                shape,
                b.iter().map(|&x| x as i8 as i64).collect(),
            ),
            DType::Bool => Tensor::bool(shape, b.iter().map(|&x| x != 0).collect()),
            DType::F8E4M3FN => Tensor::float(
                DType::F8E4M3FN,
                shape,
                b.iter().map(|&x| f8e4m3::to_f32(x)).collect(),
            ),
        })
    }

    /// To little-endian tensor bytes of its dtype.
    pub fn to_data(&self) -> TensorData {
        let bytes = match (&self.values, self.dtype) {
            (Values::Float(v), DType::F16) => v
                .iter()
                .flat_map(|x| f16::from_f32(*x).to_bits().to_le_bytes())
                .collect(),
            (Values::Float(v), DType::BF16) => v
                .iter()
                .flat_map(|x| bf16::from_f32(*x).to_bits().to_le_bytes())
                .collect(),
            (Values::Float(v), DType::F8E4M3FN) => {
                v.iter().map(|x| f8e4m3::from_f32(*x, true)).collect()
            }
            (Values::Float(v), DType::F64) => {
                v.iter().flat_map(|x| (*x as f64).to_le_bytes()).collect()
            }
            (Values::Float(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            (Values::Int(v), DType::I32 | DType::U32) => {
                v.iter().flat_map(|x| (*x as i32).to_le_bytes()).collect()
            }
            (Values::Int(v), DType::I16 | DType::U16) => {
                v.iter().flat_map(|x| (*x as i16).to_le_bytes()).collect()
            }
            (Values::Int(v), DType::I8 | DType::U8 | DType::I4 | DType::U4) => {
                v.iter().map(|x| *x as u8).collect()
            }
            (Values::Int(v), _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            (Values::Bool(v), _) => v.iter().map(|x| *x as u8).collect(),
        };
        TensorData {
            dtype: self.dtype,
            shape: self.shape.clone(),
            bytes,
        }
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The numpy-broadcast shape of several shapes.
pub fn broadcast_shape(shapes: &[&[usize]]) -> Result<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(Error::Graph(format!("cannot broadcast shapes {shapes:?}")));
            }
        }
    }
    Ok(out)
}

/// For each element of `out_shape`, the index of the element of `shape` it reads under
/// broadcasting.
pub fn broadcast_index(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let n: usize = out_shape.iter().product();
    let off = out_shape.len() - shape.len();
    let in_strides = strides(shape);
    let out_strides = strides(out_shape);
    (0..n)
        .map(|flat| {
            let mut idx = 0;
            for (i, &d) in shape.iter().enumerate() {
                if d != 1 {
                    let coord = (flat / out_strides[off + i]) % out_shape[off + i];
                    idx += coord * in_strides[i];
                }
            }
            idx
        })
        .collect()
}

/// Resolves a possibly negative axis against `rank`.
pub fn axis(a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r).contains(&v) {
        Ok(v as usize)
    } else {
        Err(Error::Graph(format!(
            "axis {a} out of range for rank {rank}"
        )))
    }
}
