//! The evaluator of lazy [`TensorSource`] expressions at save time, one tensor at a time: its
//! state (the checkpoint, the mapped external data files, the parts of the last weight
//! quantized kept for the next ones, unmapping, cancellation) and its reads of stored bytes in
//! place (leaves, and matrices over them). The evaluation of each kind of source builds on
//! these: `describe`, `materialize` and `stream` in [`super::dispatch`], the quantized kinds in
//! their own modules.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::matrix::Matrix;
use super::store::{TensorRef, TensorStore};
use super::unmap::{self, Round};
use crate::ir::{DType, QuantParams, TensorSource};
use crate::quant::Quantized;
use crate::{Error, Result};

/// What a source evaluates to, without reading data: element type and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceInfo {
    /// Element type of the evaluated bytes (before conversion to the initializer's dtype).
    pub dtype: DType,
    /// Shape of the evaluated tensor.
    pub shape: Vec<usize>,
}

/// The stored bytes of a leaf source (checkpoint, inline or external), borrowed.
pub(super) struct Leaf<'a> {
    pub(super) dtype: DType,
    pub(super) shape: Vec<usize>,
    pub(super) data: &'a [u8],
}

/// Resolves checkpoint tensors and external files while sources are evaluated.
pub struct Evaluator<'a> {
    store: Option<&'a TensorStore>,
    files: HashMap<PathBuf, Mmap>,
    /// The last weight quantized, kept while its other parts (values, scales, zero points,
    /// written one after the other) are read.
    pub(super) last_quantized: Option<KeptQuantization>,
    /// The scales and zero points the last values pass by columns kept for the parts written
    /// after it.
    pub(super) kept_parameters: Option<KeptParameters>,
    /// Once [`Evaluator::unmap_when_read`] is called: the address spans of the mapped input
    /// bytes read since the last [`Evaluator::unmap_read`].
    read: RefCell<Option<Vec<Range<usize>>>>,
    /// Set by [`Evaluator::cancel_on`]: the writer asks [`Evaluator::check_cancel`] before
    /// each initializer.
    cancel: Option<crate::cancel::Cancel>,
}

impl<'a> Evaluator<'a> {
    /// An evaluator reading checkpoint tensors from `store` (if any).
    pub fn new(store: Option<&'a TensorStore>) -> Evaluator<'a> {
        Evaluator {
            store,
            files: HashMap::new(),
            last_quantized: None,
            kept_parameters: None,
            read: RefCell::new(None),
            cancel: None,
        }
    }

    /// Makes [`Evaluator::check_cancel`] fail once `cancel` is set.
    pub fn cancel_on(&mut self, cancel: crate::cancel::Cancel) {
        self.cancel = Some(cancel);
    }

    /// [`crate::Error::Interrupted`] once the flag of [`Evaluator::cancel_on`] is set.
    pub fn check_cancel(&self) -> Result<()> {
        crate::cancel::check(self.cancel.as_ref())
    }

    /// From now on, lets go of the pages of the mapped inputs as their bytes are written out
    /// ([`super::unmap`]): remembers the mapped bytes read, for [`Evaluator::unmap_read`], and
    /// unmaps each piece of a tensor streamed in place once the sink has it.
    pub fn unmap_when_read(&mut self) {
        *self.read.get_mut() = Some(Vec::new());
    }

    /// Unmaps the pages around the mapped input bytes read since the last call (nothing before
    /// [`Evaluator::unmap_when_read`]): called once an initializer is written. Bytes read again
    /// later are mapped again.
    pub fn unmap_read(&self) {
        let spans = self.read.borrow_mut().as_mut().map(std::mem::take);
        for span in spans.into_iter().flatten() {
            self.unmap(&span, Round::Out(unmap::AROUND));
        }
    }

    /// Notes that the mapped bytes `data` were read (when unmapping is on).
    fn note_read(&self, data: &[u8]) {
        if let Some(read) = self.read.borrow_mut().as_mut() {
            let start = data.as_ptr() as usize;
            read.push(start..start + data.len());
        }
    }

    /// Unmaps `piece`, bytes of a tensor streamed in place that the sink now has, rounded
    /// inwards (when unmapping is on; bytes that are not mapped input are left alone).
    pub(super) fn unmap_passed(&self, piece: &[u8]) {
        if self.read.borrow().is_some() {
            let start = piece.as_ptr() as usize;
            self.unmap(&(start..start + piece.len()), Round::In(unmap::WITHIN));
        }
    }

    /// Unmaps `span` from the mapped input that holds it.
    fn unmap(&self, span: &Range<usize>, round: Round) {
        let mut maps = self
            .store
            .into_iter()
            .flat_map(|s| s.maps())
            .chain(self.files.values());
        let _ = maps.any(|map| unmap::unmap(map, span, round));
    }

    pub(super) fn checkpoint(&self, name: &str) -> Result<TensorRef<'_>> {
        let t = self.stored(name)?;
        if t.float8_e4m3 {
            return Err(Error::Graph(format!(
                "checkpoint tensor `{name}` holds float8 (F8_E4M3) values, which mobius reads \
                 only as block-scaled weights of a quantization_config with quant_method \"fp8\""
            )));
        }
        Ok(t)
    }

    /// Shape and bytes of a float8 e4m3 checkpoint tensor (error if absent or not float8).
    pub(super) fn float8(&self, name: &str) -> Result<(Vec<usize>, &[u8])> {
        let t = self.stored(name)?;
        if !t.float8_e4m3 {
            return Err(Error::Graph(format!(
                "checkpoint tensor `{name}` is {}, expected float8 values (F8_E4M3)",
                t.dtype
            )));
        }
        Ok((t.shape.to_vec(), t.data))
    }

    fn stored(&self, name: &str) -> Result<TensorRef<'_>> {
        let store = self.store.ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            searched: "no checkpoint weights were loaded".into(),
        })?;
        let tensor = store.get(name).ok_or_else(|| Error::MissingTensor {
            name: name.to_string(),
            searched: format!("{} tensors in the safetensors files", store.len()),
        })?;
        self.note_read(tensor.data);
        Ok(tensor)
    }

    /// Shape and file of a checkpoint tensor (error if absent).
    pub fn checkpoint_shape(&self, name: &str) -> Result<(Vec<usize>, PathBuf)> {
        let t = self.checkpoint(name)?;
        Ok((t.shape.to_vec(), t.path.to_path_buf()))
    }

    pub(super) fn external(&mut self, path: &Path, offset: u64, length: u64) -> Result<&[u8]> {
        self.map_file(path)?;
        self.mapped(path, offset, length)
    }

    /// Maps the external data file `path` (once).
    fn map_file(&mut self, path: &Path) -> Result<()> {
        if !self.files.contains_key(path) {
            let file = File::open(path).map_err(|e| Error::io(path, e))?;
            // SAFETY: the file is opened read-only and mobius never writes to an input file while
            // the map is alive; a concurrent external modification is outside our contract.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
            self.files.insert(path.to_path_buf(), map);
        }
        Ok(())
    }

    /// Maps the external data files of the stored tensors that `src` reads in place (its
    /// leaves, through transposes, slices and concatenations), so that [`Evaluator::stored_leaf`]
    /// can borrow several of them at once.
    pub(super) fn map_files(&mut self, src: &TensorSource) -> Result<()> {
        match src {
            TensorSource::External { path, .. } => self.map_file(path),
            TensorSource::Transpose(inner)
            | TensorSource::Slice { source: inner, .. }
            | TensorSource::Reshape { source: inner, .. } => self.map_files(inner),
            TensorSource::Concat { parts, .. } => parts.iter().try_for_each(|p| self.map_files(p)),
            _ => Ok(()),
        }
    }

    /// Bytes `offset..offset + length` of the mapped external data file `path`.
    fn mapped(&self, path: &Path, offset: u64, length: u64) -> Result<&[u8]> {
        let map = self.files.get(path).ok_or_else(|| Error::Onnx {
            path: path.to_path_buf(),
            message: "external data file read before it was opened".into(),
        })?;
        let end = offset
            .checked_add(length)
            .filter(|&e| e <= map.len() as u64);
        match end {
            Some(end) => {
                let data = &map[offset as usize..end as usize];
                self.note_read(data);
                Ok(data)
            }
            None => Err(Error::Onnx {
                path: path.to_path_buf(),
                message: format!(
                    "external data range {offset}+{length} exceeds the file size {}",
                    map.len()
                ),
            }),
        }
    }

    /// The stored bytes of a leaf source (checkpoint, inline or external), without copying;
    /// `None` for transforms and for packed 4-bit external data (see [`Evaluator::materialize`]).
    pub(super) fn leaf<'s>(&'s mut self, src: &'s TensorSource) -> Result<Option<Leaf<'s>>> {
        self.map_files(src)?;
        self.stored_leaf(src)
    }

    /// [`Evaluator::leaf`] of a source whose external data files are mapped
    /// ([`Evaluator::map_files`]).
    pub(super) fn stored_leaf<'s>(&'s self, src: &'s TensorSource) -> Result<Option<Leaf<'s>>> {
        let (dtype, shape, data) = match src {
            TensorSource::Checkpoint(name) => {
                let t = self.checkpoint(name)?;
                (t.dtype, t.shape.to_vec(), t.data)
            }
            TensorSource::Inline(data) => (data.dtype, data.shape.clone(), &data.bytes[..]),
            TensorSource::External {
                path,
                offset,
                length,
                dtype,
                shape,
            } => {
                if dtype.is_4bit() {
                    // The file packs two values per byte; only `materialize` unpacks them.
                    return Ok(None);
                }
                let (dtype, shape) = (*dtype, shape.clone());
                (dtype, shape, self.mapped(path, *offset, *length)?)
            }
            TensorSource::Slice {
                source,
                axis: 0,
                start,
                len,
                total,
            } => {
                let Some(leaf) = self.stored_leaf(source)? else {
                    return Ok(None);
                };
                let mut shape = leaf.shape.clone();
                slice_shape(&mut shape, 0, *start, *len, *total, source)?;
                let row = leaf.dtype.size() * shape[1..].iter().product::<usize>();
                (
                    leaf.dtype,
                    shape,
                    &leaf.data[start * row..(start + len) * row],
                )
            }
            TensorSource::Reshape { source, shape } => {
                let Some(leaf) = self.stored_leaf(source)? else {
                    return Ok(None);
                };
                reshaped(&leaf.shape, shape, source)?;
                (leaf.dtype, shape.clone(), leaf.data)
            }
            TensorSource::Transpose(_)
            | TensorSource::Concat { .. }
            | TensorSource::AddScalar { .. }
            | TensorSource::Slice { .. }
            | TensorSource::RotaryTable { .. }
            | TensorSource::Quantize { .. }
            | TensorSource::NBits { .. }
            | TensorSource::FromNBits { .. }
            | TensorSource::Packed4 { .. }
            | TensorSource::Fp8Blocks { .. }
            | TensorSource::MoeExperts { .. } => return Ok(None),
        };
        Ok(Some(Leaf { dtype, shape, data }))
    }

    /// `src` as a 2-D matrix read in place ([`Matrix`]): a 2-D stored tensor (or a row slice
    /// of one), the transpose of one, or a concatenation of such along axis 0 or 1. `None` for
    /// anything else.
    pub(super) fn matrix<'s>(&'s mut self, src: &'s TensorSource) -> Result<Option<Matrix<'s>>> {
        self.map_files(src)?;
        self.stored_matrix(src)
    }

    /// [`Evaluator::matrix`] of a source whose external data files are mapped.
    pub(super) fn stored_matrix<'s>(&'s self, src: &'s TensorSource) -> Result<Option<Matrix<'s>>> {
        match src {
            TensorSource::Transpose(inner) => Ok(self.stored_leaf(inner)?.and_then(|leaf| {
                let [rows, cols] = leaf.shape[..] else {
                    return None;
                };
                Matrix::transposed(leaf.data, leaf.dtype, rows, cols)
            })),
            TensorSource::Concat { parts, axis } => {
                let mut matrices = Vec::with_capacity(parts.len());
                for part in parts {
                    match self.stored_matrix(part)? {
                        Some(m) => matrices.push(m),
                        None => return Ok(None),
                    }
                }
                Ok(Matrix::concat(matrices, *axis))
            }
            other => Ok(self.stored_leaf(other)?.and_then(|leaf| {
                let [rows, cols] = leaf.shape[..] else {
                    return None;
                };
                Matrix::row_major(leaf.data, leaf.dtype, rows, cols)
            })),
        }
    }
}

/// Narrows `shape` to `start..start + len` along `axis`, or says why the slice does not fit.
pub(super) fn slice_shape(
    shape: &mut [usize],
    axis: usize,
    start: usize,
    len: usize,
    total: usize,
    source: &TensorSource,
) -> Result<()> {
    let fits = axis < shape.len()
        && shape[axis] == total
        && start.checked_add(len).is_some_and(|end| end <= total);
    if !fits {
        let what = match source {
            TensorSource::Checkpoint(name) => format!("checkpoint tensor `{name}`"),
            _ => "a tensor".to_string(),
        };
        return Err(Error::Graph(format!(
            "cannot take {start}..{} along axis {axis} of {what} with shape {shape:?} \
             (expected {total} along that axis)",
            start.saturating_add(len)
        )));
    }
    shape[axis] = len;
    Ok(())
}

/// Checks that `source`, of shape `from`, can be read with shape `to` (the same size).
pub(super) fn reshaped(from: &[usize], to: &[usize], source: &TensorSource) -> Result<()> {
    let (have, want) = (from.iter().product::<usize>(), to.iter().product::<usize>());
    if have == want {
        return Ok(());
    }
    // The checkpoint tensor the values come from, through blocks and reshapes.
    let mut leaf = source;
    while let TensorSource::Slice { source, .. } | TensorSource::Reshape { source, .. } = leaf {
        leaf = source;
    }
    let what = match leaf {
        TensorSource::Checkpoint(name) => format!("a {from:?} part of checkpoint tensor `{name}`"),
        _ => format!("a tensor of shape {from:?}"),
    };
    Err(Error::Graph(format!(
        "cannot read {what} as {to:?} ({have} values, not {want}): the config's sizes do not \
         fit the checkpoint"
    )))
}

/// A quantized weight kept for its next part: the source and parameters it came from.
pub(super) struct KeptQuantization {
    pub(super) source: TensorSource,
    pub(super) dtype: DType,
    pub(super) spec: QuantParams,
    pub(super) result: Arc<Quantized>,
    /// Whether `result.values` was emptied once written (a later request for the values
    /// quantizes again).
    pub(super) values_dropped: bool,
}

/// The scales and zero points of the weight quantized by columns last, in MatMulNBits'
/// layout, kept by its values pass (which computes them anyway) for its other parts, which
/// the data file holds right after its values: written from here, they do not read and
/// convert the weight again.
pub(super) struct KeptParameters {
    pub(super) weight: TensorSource,
    pub(super) dtype: DType,
    pub(super) spec: QuantParams,
    pub(super) scales: Option<Vec<u8>>,
    pub(super) zero_points: Option<Vec<u8>>,
}
