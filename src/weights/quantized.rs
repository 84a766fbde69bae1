//! Lazy quantization sources at save time: [`TensorSource::Quantize`] (a float weight →
//! block-quantized values, scales or zero points), [`TensorSource::NBits`] (those parts
//! re-laid out for `com.microsoft::MatMulNBits`) and [`TensorSource::FromNBits`] (the
//! reverse).

use std::sync::Arc;

use super::convert;
use super::eval::{Evaluator, KeptQuantization, SourceInfo};
use super::sink::Store;
use crate::ir::{DType, MoeLayer, QuantParams, QuantPart, TensorData, TensorSource};
use crate::quant::{self, Quantized};
use crate::{Error, Result};

/// `[K, N]` of a 2-D source, or an error naming what was expected.
fn matrix(info: &SourceInfo, what: &str) -> Result<(usize, usize)> {
    match info.shape[..] {
        [k, n] => Ok((k, n)),
        _ => Err(Error::Graph(format!(
            "{what} needs a 2-D tensor, found shape {:?}",
            info.shape
        ))),
    }
}

/// Type and shape of a [`TensorSource::Quantize`] part over a source described by `info`.
pub(super) fn describe_quantize(
    info: &SourceInfo,
    dtype: DType,
    spec: &QuantParams,
    part: QuantPart,
) -> Result<SourceInfo> {
    let (k, n) = matrix(info, "block quantization")?;
    if !convert::can_convert(info.dtype, dtype) || !dtype.is_float() {
        return Err(Error::Graph(format!(
            "block quantization of a {} tensor as {dtype} (expected a float weight)",
            info.dtype
        )));
    }
    let blocks = spec.blocks(k);
    Ok(match part {
        QuantPart::Values => SourceInfo {
            dtype: spec.value_dtype(),
            shape: vec![k, n],
        },
        QuantPart::Scales => SourceInfo {
            dtype,
            shape: vec![blocks, n],
        },
        QuantPart::ZeroPoints if !spec.symmetric => SourceInfo {
            dtype: spec.value_dtype(),
            shape: vec![blocks, n],
        },
        QuantPart::ZeroPoints => {
            return Err(Error::Graph(
                "symmetric block quantization has no zero points".into(),
            ))
        }
    })
}

/// Type and shape of a [`TensorSource::NBits`] part over a source described by `info`.
pub(super) fn describe_nbits(
    info: &SourceInfo,
    spec: &QuantParams,
    part: QuantPart,
) -> Result<SourceInfo> {
    let (rows, n) = matrix(info, "the MatMulNBits layout")?;
    let want = match spec.bits {
        4 => [DType::I4, DType::U4],
        _ => [DType::I8, DType::U8],
    };
    if !want.contains(&info.dtype) {
        return Err(Error::Graph(format!(
            "the {}-bit MatMulNBits layout of a {} tensor (expected {} or {})",
            spec.bits, info.dtype, want[0], want[1]
        )));
    }
    let bits = spec.bits as usize;
    Ok(match part {
        QuantPart::Values => SourceInfo {
            dtype: DType::U8,
            shape: vec![n, spec.blocks(rows), spec.block_size * bits / 8],
        },
        QuantPart::ZeroPoints => SourceInfo {
            dtype: DType::U8,
            shape: vec![n, (rows * bits).div_ceil(8)],
        },
        QuantPart::Scales => {
            return Err(Error::Graph(
                "MatMulNBits scales are a transpose, not an NBits part".into(),
            ))
        }
    })
}

/// Evaluates a [`TensorSource::NBits`] part from its evaluated source (`shape` `[rows, N]`).
pub(super) fn nbits(
    bytes: &[u8],
    dtype: DType,
    shape: &[usize],
    spec: &QuantParams,
    part: QuantPart,
) -> Result<(DType, Vec<usize>, Vec<u8>)> {
    let info = SourceInfo {
        dtype,
        shape: shape.to_vec(),
    };
    let out = describe_nbits(&info, spec, part)?;
    let (rows, n) = (shape[0], shape[1]);
    let signed = matches!(dtype, DType::I4 | DType::I8);
    let spec = QuantParams {
        symmetric: signed,
        ..*spec
    };
    let bytes = match part {
        QuantPart::Values => quant::nbits::nbits_weight(bytes, rows, n, &spec),
        // Zero points hold one row per block: any K with that many blocks packs the same.
        _ => quant::nbits::nbits_zero_points(bytes, rows * spec.block_size, n, &spec),
    };
    Ok((out.dtype, out.shape, bytes))
}

/// The lazy source of the optimizer's weight relayout `op` (`ai.mobius::NBitsWeight`,
/// `NBitsScales`, `NBitsZeroPoints` — MatMulNBits' layouts of a `DequantizeLinear`-layout
/// weight, attributes `bits`, `block_size` — their inverses `FromNBits*`, attributes `K`,
/// `bits`, `block_size`, `signed`, and `MoEFc1`, `MoEFc2` — `com.microsoft::MoE`'s expert
/// weights of a dense block's stacks — and their inverses `MoEGateStack`, `MoEUpStack`,
/// `MoEDownStack`, attribute `experts`, and `QMoEFc1Weight`, `QMoEFc2Weight` —
/// `com.microsoft::QMoE`'s packed expert values of a stack's `DequantizeLinear`-layout
/// values — and their inverses `QMoEGateValues`, `QMoEUpValues`, `QMoEDownValues` (signed),
/// attributes `experts`, `K`, `N`, `bits`, `block_size`, read through `attr`) applied to
/// `source`, a tensor of `dtype`: one definition for the saved initializer and for
/// verification mode.
pub fn relayout_source(
    op: &str,
    source: TensorSource,
    dtype: DType,
    attr: &dyn Fn(&str) -> Option<i64>,
) -> Result<TensorSource> {
    let bad = || Error::Graph(format!("{op} without valid bits, block_size (and K)"));
    let block_size = attr("block_size").and_then(|b| usize::try_from(b).ok());
    let bits = attr("bits").filter(|b| matches!(b, 4 | 8));
    let spec = |symmetric: bool| match (bits, block_size) {
        (Some(bits), Some(block_size)) if block_size > 0 => {
            Ok(QuantParams::new(bits as u8, block_size, symmetric))
        }
        _ => Err(bad()),
    };
    let source = Box::new(source);
    let from_nbits = |part| -> Result<TensorSource> {
        let rows = attr("K")
            .and_then(|k| usize::try_from(k).ok())
            .ok_or_else(bad)?;
        Ok(TensorSource::FromNBits {
            source: source.clone(),
            spec: spec(attr("signed") == Some(1))?,
            rows,
            part,
        })
    };
    let nbits = |part| -> Result<TensorSource> {
        Ok(TensorSource::NBits {
            source: source.clone(),
            spec: spec(matches!(dtype, DType::I4 | DType::I8))?,
            part,
        })
    };
    match op {
        "NBitsScales" => Ok(TensorSource::Transpose(source.clone())),
        "NBitsWeight" => nbits(QuantPart::Values),
        "NBitsZeroPoints" => nbits(QuantPart::ZeroPoints),
        "FromNBitsWeight" => from_nbits(QuantPart::Values),
        "FromNBitsScales" => from_nbits(QuantPart::Scales),
        "FromNBitsZeroPoints" => from_nbits(QuantPart::ZeroPoints),
        "MoEFc1" | "MoEFc2" | "MoEGateStack" | "MoEUpStack" | "MoEDownStack" => {
            let experts = attr("experts")
                .and_then(|e| usize::try_from(e).ok())
                .filter(|&e| e > 0)
                .ok_or_else(|| Error::Graph(format!("{op} without a positive `experts`")))?;
            let layer = match op {
                "MoEFc1" => MoeLayer::Fc1,
                "MoEFc2" => MoeLayer::Fc2,
                "MoEGateStack" => MoeLayer::GateStack,
                "MoEUpStack" => MoeLayer::UpStack,
                _ => MoeLayer::DownStack,
            };
            Ok(TensorSource::MoeExperts {
                source,
                experts,
                layer,
            })
        }
        "QMoEFc1Weight" | "QMoEFc2Weight" => {
            // Per expert `[K, N]` (transposed from the MoE layout `[E, N, K]`), packed as
            // MatMulNBits packs it: `[E·N, K/B, B·bits/8]`, read as `[E, N, K·bits/8]`.
            let size = |name: &str| attr(name).and_then(|v| usize::try_from(v).ok());
            let (Some(experts), Some(k), Some(n)) = (size("experts"), size("K"), size("N")) else {
                return Err(Error::Graph(format!("{op} without experts, K and N")));
            };
            let spec = spec(matches!(dtype, DType::I4 | DType::I8))?;
            if experts == 0 || k % spec.block_size != 0 {
                return Err(Error::Graph(format!(
                    "{op} of {experts} experts needs K = {k} a multiple of block_size {}",
                    spec.block_size
                )));
            }
            let layer = match op {
                "QMoEFc1Weight" => MoeLayer::Fc1,
                _ => MoeLayer::Fc2,
            };
            let per_expert = TensorSource::Reshape {
                source: Box::new(TensorSource::MoeExperts {
                    source,
                    experts,
                    layer,
                }),
                shape: vec![experts * n, k],
            };
            let packed = TensorSource::NBits {
                source: Box::new(TensorSource::Transpose(Box::new(per_expert))),
                spec,
                part: QuantPart::Values,
            };
            Ok(TensorSource::Reshape {
                source: Box::new(packed),
                shape: vec![experts, n, k * spec.bits as usize / 8],
            })
        }
        "QMoEGateValues" | "QMoEUpValues" | "QMoEDownValues" => {
            // The inverse: QMoE's `[E, N, K·bits/8]` read as MatMulNBits' `B` of `[K, E·N]`,
            // unpacked, per expert `[N, K]` again, then the stack.
            let size = |name: &str| attr(name).and_then(|v| usize::try_from(v).ok());
            let (Some(experts), Some(k), Some(n)) = (size("experts"), size("K"), size("N")) else {
                return Err(Error::Graph(format!("{op} without experts, K and N")));
            };
            let spec = spec(true)?;
            if experts == 0 || k % spec.block_size != 0 {
                return Err(Error::Graph(format!(
                    "{op} of {experts} experts needs K = {k} a multiple of block_size {}",
                    spec.block_size
                )));
            }
            let blocks = k / spec.block_size;
            let blob = spec.block_size * spec.bits as usize / 8;
            let unpacked = TensorSource::FromNBits {
                source: Box::new(TensorSource::Reshape {
                    source,
                    shape: vec![experts * n, blocks, blob],
                }),
                spec,
                rows: k,
                part: QuantPart::Values,
            };
            let per_expert = TensorSource::Reshape {
                source: Box::new(TensorSource::Transpose(Box::new(unpacked))),
                shape: vec![experts, n, k],
            };
            let layer = match op {
                "QMoEGateValues" => MoeLayer::GateStack,
                "QMoEUpValues" => MoeLayer::UpStack,
                _ => MoeLayer::DownStack,
            };
            Ok(TensorSource::MoeExperts {
                source: Box::new(per_expert),
                experts,
                layer,
            })
        }
        other => Err(Error::Graph(format!("unknown weight relayout {other}"))),
    }
}

/// The value of the weight relayout `op` (see [`relayout_source`]) of `value`, as the saved
/// initializer will hold it — for verification mode, where every e-class is evaluated.
pub fn relayout(
    op: &str,
    value: &TensorData,
    attr: &dyn Fn(&str) -> Option<i64>,
) -> Result<TensorData> {
    let source = relayout_source(op, TensorSource::Inline(value.clone()), value.dtype, attr)?;
    let (dtype, shape, bytes) = Evaluator::new(None).materialize(&source)?;
    Ok(TensorData {
        dtype,
        shape,
        bytes,
    })
}

/// Type and shape of a [`TensorSource::FromNBits`] part over a MatMulNBits input described
/// by `info` (`B` `[N, ⌈K/B⌉, B·bits/8]` u8; `scales` `[N, ⌈K/B⌉]` or flat; packed
/// `zero_points` `[N, ⌈⌈K/B⌉·bits/8⌉]` u8 or flat), K being `rows`.
pub(super) fn describe_from_nbits(
    info: &SourceInfo,
    spec: &QuantParams,
    rows: usize,
    part: QuantPart,
) -> Result<SourceInfo> {
    let (blocks, bits) = (spec.blocks(rows), spec.bits as usize);
    let blob = spec.block_size * bits / 8;
    let (what, width) = match part {
        QuantPart::Values => ("B", blocks * blob),
        QuantPart::Scales => ("scales", blocks),
        QuantPart::ZeroPoints => ("zero_points", (blocks * bits).div_ceil(8)),
    };
    let n = match (part, &info.shape[..]) {
        (QuantPart::Values, &[n, b, w]) if b == blocks && w == blob => Some(n),
        (QuantPart::Scales | QuantPart::ZeroPoints, &[n, w]) if w == width => Some(n),
        (QuantPart::Scales | QuantPart::ZeroPoints, &[len]) if width > 0 && len % width == 0 => {
            Some(len / width)
        }
        _ => None,
    };
    let dtype_ok = match part {
        QuantPart::Scales => info.dtype.is_float(),
        _ => info.dtype == DType::U8,
    };
    let (Some(n), true, 4 | 8) = (n, dtype_ok, spec.bits) else {
        return Err(Error::Graph(format!(
            "MatMulNBits {what} of K={rows}, bits={}, block_size={}: expected {} of width {width} \
             (per column), found {} {:?}",
            spec.bits,
            spec.block_size,
            if part == QuantPart::Scales {
                "floats"
            } else {
                "u8"
            },
            info.dtype,
            info.shape
        )));
    };
    Ok(match part {
        QuantPart::Values => SourceInfo {
            dtype: spec.value_dtype(),
            shape: vec![rows, n],
        },
        QuantPart::Scales => SourceInfo {
            dtype: info.dtype,
            shape: vec![blocks, n],
        },
        QuantPart::ZeroPoints => SourceInfo {
            dtype: QuantParams {
                symmetric: false,
                ..*spec
            }
            .value_dtype(),
            shape: vec![blocks, n],
        },
    })
}

/// Evaluates a [`TensorSource::FromNBits`] part from its evaluated MatMulNBits input.
pub(super) fn from_nbits(
    bytes: &[u8],
    dtype: DType,
    shape: &[usize],
    spec: &QuantParams,
    rows: usize,
    part: QuantPart,
) -> Result<(DType, Vec<usize>, Vec<u8>)> {
    let info = SourceInfo {
        dtype,
        shape: shape.to_vec(),
    };
    let out = describe_from_nbits(&info, spec, rows, part)?;
    let n = out.shape[1];
    let bytes = match part {
        QuantPart::Values => quant::from_nbits::values_from_nbits(bytes, rows, n, spec),
        // `[N, ⌈K/B⌉]` (or flat) → `[⌈K/B⌉, N]`.
        QuantPart::Scales => super::transpose::transposed(bytes, n, spec.blocks(rows), dtype),
        QuantPart::ZeroPoints => quant::from_nbits::zero_points_from_nbits(bytes, rows, n, spec),
    };
    Ok((out.dtype, out.shape, bytes))
}

impl Evaluator<'_> {
    /// `source` quantized: the weight is quantized once and kept for its other parts, which
    /// the writer asks for next.
    fn quantized(
        &mut self,
        source: &TensorSource,
        dtype: DType,
        spec: &QuantParams,
        wants_values: bool,
    ) -> Result<Arc<Quantized>> {
        let hit = self
            .last_quantized
            .as_ref()
            .filter(|c| c.source == *source && c.dtype == dtype && c.spec == *spec)
            .map(|c| (Arc::clone(&c.result), c.values_dropped));
        match hit {
            Some((result, false)) => return Ok(result),
            Some((result, true)) if !wants_values => return Ok(result),
            _ => {}
        }
        self.last_quantized = None;
        let result = self
            .quantize_weight(source, dtype, spec)
            .map_err(|e| match e {
                Error::Quantize {
                    tensor: None,
                    message,
                } => Error::Quantize {
                    tensor: Some(describe_source(source)),
                    message,
                },
                other => other,
            })?;
        let result = Arc::new(result);
        self.last_quantized = Some(KeptQuantization {
            source: source.clone(),
            dtype,
            spec: *spec,
            result: Arc::clone(&result),
            values_dropped: false,
        });
        Ok(result)
    }

    /// Quantizes the `[K, N]` weight `source` (converted to `dtype` first): a weight read in
    /// place (a stored matrix, its transpose or a concatenation of such: a
    /// [`Matrix`](super::matrix::Matrix)) is read, transposed and converted block row by block
    /// row straight from the mapped files, so the float weight is never held whole.
    fn quantize_weight(
        &mut self,
        source: &TensorSource,
        dtype: DType,
        spec: &QuantParams,
    ) -> Result<Quantized> {
        if let Some(weight) = self.matrix(source)? {
            if convert::can_convert(weight.dtype(), dtype) {
                let (k, n) = (weight.rows(), weight.cols());
                let fill = |first: usize, dst: &mut [u8]| {
                    weight.fill(first, 0..n, dtype, dst, Store::Cached);
                };
                return quant::quantize_with(dtype, k, n, spec, &fill);
            }
        }
        let (from, shape, bytes) = self.materialize(source)?;
        let (k, n) = (shape[0], shape[1]);
        let bytes = if from == dtype {
            bytes
        } else {
            convert::convert(&bytes, from, dtype).0
        };
        quant::quantize(&bytes, dtype, k, n, spec)
    }

    /// The part `source` (a [`TensorSource::Quantize`] part) of its weight's quantization,
    /// shared with the kept quantization (computed and kept when it is not the kept one), with
    /// its dtype and shape: no copy. `None` when `source` is not a `Quantize` part.
    pub(super) fn shared_part(
        &mut self,
        source: &TensorSource,
    ) -> Result<Option<(KeptPart, DType, Vec<usize>)>> {
        let TensorSource::Quantize {
            source: weight,
            dtype,
            spec,
            part,
        } = source
        else {
            return Ok(None);
        };
        let info = describe_quantize(&self.describe(weight)?, *dtype, spec, *part)?;
        let result = self.quantized(weight, *dtype, spec, *part == QuantPart::Values)?;
        part_of(&result, *part)?;
        Ok(Some((
            KeptPart {
                result,
                part: *part,
            },
            info.dtype,
            info.shape,
        )))
    }

    /// A [`TensorSource::NBits`] part of `source`; straight from the quantized weight when
    /// `source` is its [`TensorSource::Quantize`] part (no copy of the values).
    pub(super) fn nbits_part(
        &mut self,
        source: &TensorSource,
        spec: &QuantParams,
        part: QuantPart,
    ) -> Result<(DType, Vec<usize>, Vec<u8>)> {
        if let Some((bytes, dtype, shape)) = self.shared_part(source)? {
            let out = nbits(&bytes, dtype, &shape, spec, part);
            let values_written = bytes.part == QuantPart::Values;
            drop(bytes);
            if values_written {
                // The values are written now; keep only the scales and zero points the
                // weight's other parts read next.
                if let Some(cached) = &mut self.last_quantized {
                    if let Some(q) = Arc::get_mut(&mut cached.result) {
                        q.values = Vec::new();
                        cached.values_dropped = true;
                    }
                }
            }
            return out;
        }
        let (dtype, shape, bytes) = self.materialize(source)?;
        nbits(&bytes, dtype, &shape, spec, part)
    }
}

/// One part of a kept quantization, shared (dereferences to its bytes).
pub(super) struct KeptPart {
    result: Arc<Quantized>,
    part: QuantPart,
}

impl std::ops::Deref for KeptPart {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        part_of(&self.result, self.part).expect("checked when kept")
    }
}

/// The bytes of one part of a quantized weight.
fn part_of(q: &Quantized, part: QuantPart) -> Result<&[u8]> {
    match part {
        QuantPart::Values => Ok(&q.values),
        QuantPart::Scales => Ok(&q.scales),
        QuantPart::ZeroPoints => q
            .zero_points
            .as_deref()
            .ok_or_else(|| Error::Graph("symmetric block quantization has no zero points".into())),
    }
}

/// How a weight source reads in an error: the checkpoint tensor(s) it comes from and how.
pub(super) fn describe_source(src: &TensorSource) -> String {
    match src {
        TensorSource::Checkpoint(name) => name.clone(),
        TensorSource::Transpose(inner) => format!("{} (transposed)", describe_source(inner)),
        TensorSource::Slice {
            source,
            axis,
            start,
            len,
            ..
        } => format!(
            "{} (rows {start}..{} of axis {axis})",
            describe_source(source),
            start + len
        ),
        TensorSource::Concat { parts, .. } => parts
            .iter()
            .map(describe_source)
            .collect::<Vec<_>>()
            .join(" + "),
        TensorSource::AddScalar { source, .. }
        | TensorSource::Quantize { source, .. }
        | TensorSource::NBits { source, .. }
        | TensorSource::FromNBits { source, .. }
        | TensorSource::MoeExperts { source, .. }
        | TensorSource::Reshape { source, .. } => describe_source(source),
        TensorSource::External { path, offset, .. } => {
            format!("the weight at byte {offset} of {}", path.display())
        }
        TensorSource::Packed4 { prefix, .. } => format!("{prefix} (unpacked)"),
        TensorSource::Fp8Blocks { weight, .. } => format!("{weight} (dequantized from fp8)"),
        TensorSource::Inline(_) | TensorSource::RotaryTable { .. } => {
            "a weight of the model".into()
        }
    }
}
