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
    /// A float `[K, N]` source, converted to `dtype`, quantized in blocks of `block_size` rows
    /// along K for every column (round to nearest, bit for bit as onnxruntime's quantizer):
    /// one part of the result, in the `DequantizeLinear` layout (blocks along axis 0).
    Quantize {
        /// The float weight.
        source: Box<TensorSource>,
        /// The float type the weight is converted to before quantizing (the model's dtype;
        /// also the scales' dtype).
        dtype: DType,
        /// What to quantize to and which part to produce.
        spec: QuantParams,
        /// Which part of the result this is.
        part: QuantPart,
    },
    /// One part of a block-quantized `[K, N]` weight (values `[K, N]` or zero points
    /// `[⌈K/B⌉, N]`, one value per byte) re-laid out for `com.microsoft::MatMulNBits`:
    /// per column, blocks of packed values (signed values offset by 2^(bits−1), the kernel's
    /// default zero point) or the packed zero points.
    NBits {
        /// The part in the `DequantizeLinear` layout.
        source: Box<TensorSource>,
        /// Bits per value and block size.
        spec: QuantParams,
        /// `Values` or `ZeroPoints`.
        part: QuantPart,
    },
    /// One part of a weight stored in the `com.microsoft::MatMulNBits` layout (`B`
    /// `[N, ⌈K/B⌉, B·bits/8]` u8, `scales` `[N, ⌈K/B⌉]` or flat, packed u8 `zero_points`)
    /// read back into the `DequantizeLinear` layout: values `[K, N]` (I4/I8 = code −
    /// 2^(bits−1) when `spec.symmetric`, else U4/U8), scales `[⌈K/B⌉, N]`, zero points
    /// `[⌈K/B⌉, N]` U4/U8. The inverse of [`TensorSource::NBits`].
    FromNBits {
        /// The MatMulNBits input (`B`, `scales` or `zero_points`).
        source: Box<TensorSource>,
        /// Bits per value, block size, and whether the values are signed (no zero points).
        spec: QuantParams,
        /// K, the rows of the weight (`B` pads the last block past it).
        rows: usize,
        /// Which part this is.
        part: QuantPart,
    },
    /// One part of a 4-bit weight `[K, N]` that a quantizer stored packed in the checkpoint
    /// (`{prefix}.qweight`, `{prefix}.qzeros`, `{prefix}.scales`, GPTQ also `{prefix}.g_idx`),
    /// unpacked into the `DequantizeLinear` layout (blocks along axis 0): values `[K, N]` U4
    /// and zero points `[⌈K/G⌉, N]` U4, one value per byte, or the scales `[⌈K/G⌉, N]` as
    /// stored.
    Packed4 {
        /// The module's checkpoint name (`model.layers.0.self_attn.q_proj`).
        prefix: String,
        /// How the tensors are packed.
        format: PackedFormat,
        /// Rows of K per group (K itself for one group per column).
        group_size: usize,
        /// Which part of the weight this is.
        part: QuantPart,
    },
    /// A float8 (e4m3) checkpoint weight `[N, K]` scaled per block, dequantized to f32:
    /// `weight[n, k] · scales[n / bn, k / bk]` for `block = [bn, bk]`.
    Fp8Blocks {
        /// The float8 weight's checkpoint name.
        weight: String,
        /// The f32 block scales' checkpoint name (`[⌈N/bn⌉, ⌈K/bk⌉]`).
        scales: String,
        /// Block extent along N and along K.
        block: [usize; 2],
    },
    /// Another source's elements read with another shape of the same size (row-major order
    /// unchanged; e.g. one expert `[1, r, c]` of a stacked `[E, r, c]` tensor as `[r, c]`).
    Reshape {
        /// The reshaped source.
        source: Box<TensorSource>,
        /// The shape it is read with.
        shape: Vec<usize>,
    },
    /// Stacked expert weights of a dense mixture-of-experts block re-laid out per expert for
    /// `com.microsoft::MoE` (see [`MoeLayer`]).
    MoeExperts {
        /// The stacked weights.
        source: Box<TensorSource>,
        /// Number of experts E.
        experts: usize,
        /// Which of the op's weight inputs this is.
        layer: MoeLayer,
    },
}

/// A weight input of `com.microsoft::MoE` made from a dense block's stacked expert weights, or
/// a stack read back from one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoeLayer {
    /// `fc1_experts_weights` `[E, 2·I, H]` from the gate and up stacks joined along their
    /// columns, `[H, 2·E·I]` (gate columns `e·I..(e+1)·I`, then up columns): per expert the gate
    /// and up rows interleaved (row `2i` gate row `i`, row `2i + 1` up row `i`,
    /// `swiglu_fusion = 1`).
    Fc1,
    /// `fc2_experts_weights` `[E, H, I]` from the down stack `[E·I, H]`: per expert its rows
    /// transposed.
    Fc2,
    /// The inverse of [`MoeLayer::Fc1`] for the gate: the gate stack `[H, E·I]` of
    /// `fc1_experts_weights` `[E, 2·I, H]` (each expert's even rows, transposed).
    GateStack,
    /// The up stack `[H, E·I]` of `fc1_experts_weights` (each expert's odd rows, transposed).
    UpStack,
    /// The inverse of [`MoeLayer::Fc2`]: the down stack `[E·I, H]` of `fc2_experts_weights`
    /// `[E, H, I]`.
    DownStack,
}

/// How a pre-quantized checkpoint packs its 4-bit weights into `int32` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackedFormat {
    /// GPTQ, `checkpoint_format` "gptq": `qweight [K/8, N]` packs 8 rows of K per word,
    /// `qzeros [⌈K/G⌉, N/8]` 8 columns per word (low nibble first), and every stored zero
    /// point is one less than the one that dequantizes (`w = s · (q − (z + 1))`).
    GptqV1,
    /// GPTQ, `checkpoint_format` "gptq_v2": as [`PackedFormat::GptqV1`], zero points as stored.
    GptqV2,
    /// AWQ "gemm": `qweight [K, N/8]` and `qzeros [⌈K/G⌉, N/8]` pack 8 columns per word, in
    /// the interleaved order 0, 2, 4, 6, 1, 3, 5, 7 (nibble j holds column `8c + order[j]`).
    AwqGemm,
}

/// Block quantization parameters of a lazy weight transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantParams {
    /// Bits per value: 4 or 8.
    pub bits: u8,
    /// Rows of K per block (a power of two, 16 to 256).
    pub block_size: usize,
    /// Signed values without zero points (`true`) or unsigned values with zero points.
    pub symmetric: bool,
}

impl QuantParams {
    /// Parameters of `bits`-bit values in blocks of `block_size`, symmetric or not.
    pub const fn new(bits: u8, block_size: usize, symmetric: bool) -> QuantParams {
        QuantParams {
            bits,
            block_size,
            symmetric,
        }
    }

    /// The type of the quantized values (and zero points): I4/U4 or I8/U8.
    pub fn value_dtype(&self) -> DType {
        match (self.bits, self.symmetric) {
            (4, true) => DType::I4,
            (4, false) => DType::U4,
            (_, true) => DType::I8,
            (_, false) => DType::U8,
        }
    }

    /// Blocks along K: `⌈k / block_size⌉`.
    pub fn blocks(&self, k: usize) -> usize {
        k.div_ceil(self.block_size)
    }
}

/// One part of a block-quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantPart {
    /// The quantized values.
    Values,
    /// One scale per block and column.
    Scales,
    /// One zero point per block and column (asymmetric quantization only).
    ZeroPoints,
}
