//! Tensor data: small in-memory tensors and lazy initializer expressions.

use std::path::PathBuf;

use super::DType;

/// A small tensor held in memory as little-endian bytes (shape constants, folded values, …).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorData {
    /// Element type of `bytes`.
    pub dtype: DType,
    /// Shape (row-major).
    pub shape: Vec<usize>,
    /// Little-endian element bytes, `numel * dtype.size()` long.
    pub bytes: Vec<u8>,
}

impl TensorData {
    /// A tensor of `f32` values.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> TensorData {
        TensorData {
            dtype: DType::F32,
            shape,
            bytes: bytemuck::cast_slice(values).to_vec(),
        }
    }

    /// A tensor of `i64` values.
    pub fn from_i64(shape: Vec<usize>, values: &[i64]) -> TensorData {
        TensorData {
            dtype: DType::I64,
            shape,
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

/// Where an initializer's bytes come from, evaluated only when the model is saved.
///
/// Weights are never held in memory as a whole: a checkpoint tensor is read from the mmap'd
/// safetensors file, transformed, converted to the initializer's dtype and streamed out, one
/// tensor at a time.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorSource {
    /// A tensor of the checkpoint, by its name in the safetensors files.
    Checkpoint(String),
    /// Bytes computed by mobius (constants, folded values).
    Inline(TensorData),
    /// A tensor stored in an external data file of an imported ONNX model.
    External {
        /// The data file.
        path: PathBuf,
        /// Byte offset in the file.
        offset: u64,
        /// Byte length.
        length: u64,
        /// Element type of the stored bytes.
        dtype: DType,
        /// Shape of the stored tensor.
        shape: Vec<usize>,
    },
    /// A rotary-embedding table `[positions, inv_freq.len()]` of `cos(p · f)` (or `sin`),
    /// computed in f32 when saved (tables can hold millions of values).
    RotaryTable {
        /// The inverse frequencies, one per column.
        inv_freq: Vec<f32>,
        /// Number of rows (positions 0, 1, …).
        positions: usize,
        /// `sin` instead of `cos`.
        sine: bool,
    },
    /// A 2-D transpose of another source (`[r, c]` → `[c, r]`).
    Transpose(Box<TensorSource>),
    /// Sources concatenated along `axis`.
    Concat {
        /// The parts, in order.
        parts: Vec<TensorSource>,
        /// The axis to join along.
        axis: usize,
    },
    /// Another source plus a scalar, computed in f32 (e.g. Gemma's norm gamma `1 + w`).
    AddScalar {
        /// The tensor the scalar is added to.
        source: Box<TensorSource>,
        /// The scalar.
        value: f32,
    },
    /// The block `start..start + len` of another source along `axis` (e.g. the q, k or v
    /// columns of a fused `[H, 3H]` projection), every other axis kept whole.
    Slice {
        /// The sliced source.
        source: Box<TensorSource>,
        /// The axis to cut along.
        axis: usize,
        /// First index kept along `axis`.
        start: usize,
        /// Number of indices kept along `axis`.
        len: usize,
        /// The extent the source must have along `axis` (checked before anything is read).
        total: usize,
    },
}
