//! Memory-mapped safetensors files (single or sharded) with tensor lookup by name.
//!
//! Files are mapped, never read whole: only the header pages are touched when opening, and a
//! tensor's bytes are paged in when its [`TensorRef::data`] is read.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use serde::Deserialize;

use crate::ir::DType;
use crate::paths::check_file_inside;
use crate::source::index::ShardIndex;
use crate::source::unique_keys::UniqueKeys;
use crate::source::WeightFiles;
use crate::{Error, Result};

/// The largest header mobius accepts, in bytes (the limit the safetensors format sets).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The header key holding free-form string metadata rather than a tensor.
const METADATA_KEY: &str = "__metadata__";

/// One tensor described by a safetensors header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderEntry {
    /// The tensor name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Whether its values are float8 e4m3 (safetensors `F8_E4M3`), held as `dtype` U8 bytes:
    /// only a block-scaled FP8 weight source reads them.
    pub float8_e4m3: bool,
    /// Its dimensions.
    pub shape: Vec<usize>,
    /// Its bytes, as a range of offsets from the start of the file.
    pub data: Range<usize>,
}

/// A header entry as written in the file.
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Parses and validates the header of the safetensors file whose complete contents are
/// `bytes`; `path` only names the file in errors.
///
/// Checks the length prefix against the file size and the 100 MB limit, that the header is a
/// UTF-8 JSON object naming each tensor once, that every dtype is known, and that every tensor's byte range lies inside
/// the data section and matches its shape, and that the byte ranges, in offset order, follow one
/// another without gap or overlap and cover the data section exactly (as the `safetensors`
/// package requires). The `__metadata__` entry is skipped. Entries come sorted by name. Never
/// panics, whatever the input.
pub fn parse_header(bytes: &[u8], path: &Path) -> Result<Vec<HeaderEntry>> {
    let fail = |message: String| Error::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let Some(prefix) = bytes.first_chunk::<8>() else {
        return Err(fail(format!(
            "truncated: file has {} bytes, but a safetensors file starts with an 8-byte header \
             length",
            bytes.len()
        )));
    };
    let header_len = u64::from_le_bytes(*prefix);
    if header_len > MAX_HEADER_BYTES {
        return Err(fail(format!(
            "header length {header_len} exceeds the limit of {MAX_HEADER_BYTES} bytes (100 MB)"
        )));
    }
    // Cannot overflow: header_len is at most 100 MB.
    let header_end = 8 + header_len as usize;
    let Some(header) = bytes.get(8..header_end) else {
        return Err(fail(format!(
            "truncated: file has {} bytes, header declares {header_end} (8 + a {header_len}-byte \
             header)",
            bytes.len()
        )));
    };
    let header =
        std::str::from_utf8(header).map_err(|e| fail(format!("header is not valid UTF-8: {e}")))?;
    let map: UniqueKeys<serde_json::Value> = serde_json::from_str(header).map_err(|e| {
        fail(
            if e.is_data() && e.to_string().contains("is listed twice") {
                format!("header: tensor {e}")
            } else {
                format!("header is not a JSON object: {e}")
            },
        )
    })?;
    let data_len = bytes.len() - header_end;
    let mut entries = map
        .0
        .into_iter()
        .filter(|(name, _)| name != METADATA_KEY)
        .map(|(name, value)| parse_entry(name, value, header_end, data_len).map_err(&fail))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    check_layout(&mut entries, header_end, bytes.len()).map_err(fail)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// Checks that the entries' byte ranges, sorted by offset, tile `header_end..file_len` exactly:
/// each starts where the previous one ends, the first at the data section's start, the last at
/// the end of the file. Sorts `entries` by offset.
fn check_layout(
    entries: &mut [HeaderEntry],
    header_end: usize,
    file_len: usize,
) -> std::result::Result<(), String> {
    entries.sort_by_key(|e| (e.data.start, e.data.end));
    let mut pos = header_end;
    let mut previous: Option<&HeaderEntry> = None;
    for entry in entries.iter() {
        if entry.data.start != pos {
            let (begin, end) = (entry.data.start - header_end, entry.data.end - header_end);
            return Err(match previous {
                Some(p) if entry.data.start < pos => format!(
                    "tensor `{}`: data_offsets [{begin}, {end}] overlap those of tensor `{}`",
                    entry.name, p.name
                ),
                Some(p) => format!(
                    "tensor `{}`: data_offsets [{begin}, {end}] leave a gap after tensor `{}`, \
                     which ends at {}",
                    entry.name,
                    p.name,
                    pos - header_end
                ),
                None => format!(
                    "tensor `{}`: data_offsets [{begin}, {end}] leave a gap at the start of the \
                     data section (the first tensor must start at 0)",
                    entry.name
                ),
            });
        }
        pos = entry.data.end;
        previous = Some(entry);
    }
    if pos != file_len {
        return Err(format!(
            "the tensors cover {} bytes of the data section, but it has {} (trailing bytes)",
            pos - header_end,
            file_len - header_end
        ));
    }
    Ok(())
}

/// Validates one header entry; the error is the message only.
fn parse_entry(
    name: String,
    value: serde_json::Value,
    header_end: usize,
    data_len: usize,
) -> std::result::Result<HeaderEntry, String> {
    let raw: RawEntry = serde_json::from_value(value).map_err(|e| {
        format!("tensor `{name}`: {e} (expected {{\"dtype\", \"shape\", \"data_offsets\"}})")
    })?;
    let float8_e4m3 = raw.dtype == "F8_E4M3";
    let dtype = match float8_e4m3 {
        true => DType::U8,
        false => DType::from_safetensors(&raw.dtype).ok_or_else(|| {
            format!(
                "tensor `{name}`: unsupported dtype `{}` (expected one of F32, F16, BF16, F64, \
                 I64, I32, I8, U8, BOOL, F8_E4M3)",
                raw.dtype
            )
        })?,
    };
    let shape = raw
        .shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| {
            format!(
                "tensor `{name}`: shape {:?} does not fit in memory",
                raw.shape
            )
        })?;
    let needed = dtype
        .bytes_for(&shape)
        .ok_or_else(|| format!("tensor `{name}`: shape {shape:?} overflows the address space"))?;
    let [begin, end] = raw.data_offsets;
    if begin > end || end > data_len as u64 {
        return Err(format!(
            "tensor `{name}`: data_offsets [{begin}, {end}] lie outside the data section of \
             {data_len} bytes"
        ));
    }
    // Both offsets are at most data_len, so they fit in usize and cannot overflow below.
    let (begin, end) = (begin as usize, end as usize);
    if end - begin != needed {
        return Err(format!(
            "tensor `{name}`: data_offsets [{begin}, {end}] span {} bytes, but shape {shape:?} \
             of {dtype} needs {needed}",
            end - begin
        ));
    }
    Ok(HeaderEntry {
        name,
        dtype,
        float8_e4m3,
        shape,
        data: header_end + begin..header_end + end,
    })
}

/// One mapped safetensors file.
struct MappedFile {
    path: PathBuf,
    map: Mmap,
}

impl MappedFile {
    /// Maps the file at `path` read-only.
    fn open(path: &Path) -> Result<MappedFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the mapping is read-only and owned by the store, so the slices handed out
        // never outlive it. mobius never writes checkpoint files; like every mmap-based
        // safetensors reader, it relies on no other process truncating or rewriting the file
        // while it is open.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        #[cfg(unix)]
        if let Err(e) = map.advise(memmap2::Advice::Sequential) {
            tracing::debug!("madvise(SEQUENTIAL) on {} failed: {e}", path.display());
        }
        Ok(MappedFile {
            path: path.to_path_buf(),
            map,
        })
    }
}

/// Where one tensor lives.
#[derive(Debug)]
struct Slot {
    file: usize,
    dtype: DType,
    float8_e4m3: bool,
    shape: Vec<usize>,
    data: Range<usize>,
}

/// The tensors of a checkpoint, looked up by name in memory-mapped safetensors files.
pub struct TensorStore {
    files: Vec<MappedFile>,
    tensors: BTreeMap<String, Slot>,
}

/// A borrowed view of one tensor of a [`TensorStore`].
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    /// The tensor name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: DType,
    /// Whether its bytes are float8 e4m3 values (see [`HeaderEntry::float8_e4m3`]).
    pub float8_e4m3: bool,
    /// Its dimensions.
    pub shape: &'a [usize],
    /// Its raw little-endian bytes (not necessarily aligned to the element size).
    pub data: &'a [u8],
    /// The safetensors file holding it.
    pub path: &'a Path,
}

impl fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorRef")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &self.data.len())
            .field("path", &self.path)
            .finish()
    }
}

impl fmt::Debug for TensorStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TensorStore")
            .field(
                "files",
                &self.files.iter().map(|m| &m.path).collect::<Vec<_>>(),
            )
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl TensorStore {
    /// Maps the checkpoint's safetensors files and reads their headers.
    ///
    /// For a sharded checkpoint, every shard the index lists must exist next to the index, and
    /// every tensor of `weight_map` must be in the shard it names; only those tensors are
    /// visible.
    pub fn open(files: &WeightFiles) -> Result<TensorStore> {
        let mut store = TensorStore {
            files: Vec::new(),
            tensors: BTreeMap::new(),
        };
        match files {
            WeightFiles::Single(path) => {
                let entries = store.add_file(path)?;
                for entry in entries {
                    store.insert(entry);
                }
            }
            WeightFiles::Sharded { index, root } => store.add_shards(index, root)?,
        }
        Ok(store)
    }

    /// Maps `path` and returns its header entries; they refer to the file just added.
    fn add_file(&mut self, path: &Path) -> Result<Vec<HeaderEntry>> {
        let mapped = MappedFile::open(path)?;
        let entries = parse_header(&mapped.map, path)?;
        self.files.push(mapped);
        Ok(entries)
    }

    /// Records `entry` as a tensor of the most recently added file.
    fn insert(&mut self, entry: HeaderEntry) {
        let slot = Slot {
            file: self.files.len() - 1,
            dtype: entry.dtype,
            float8_e4m3: entry.float8_e4m3,
            shape: entry.shape,
            data: entry.data,
        };
        self.tensors.insert(entry.name, slot);
    }

    /// Adds the shards of the index at `index_path` and the tensors its weight map assigns them.
    /// Every shard must resolve, links followed, to a file inside `root`.
    fn add_shards(&mut self, index_path: &Path, root: &Path) -> Result<()> {
        let index = ShardIndex::load(index_path)?;
        let folder = index_path.parent().unwrap_or(Path::new("."));
        let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (tensor, shard) in &index.weight_map {
            by_shard.entry(shard).or_default().push(tensor);
        }
        for (shard, tensors) in by_shard {
            let path = folder.join(shard);
            let what = format!("shard `{shard}` listed in {}", index_path.display());
            // The path is checked before anything else asks the file system about it, and the
            // checked (resolved) path is the one read.
            let real = check_file_inside(root, &path, &what).map_err(|e| match e {
                Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    Error::Source(format!(
                        "{what} is missing: expected the file {}",
                        path.display()
                    ))
                }
                e => e,
            })?;
            let mut entries: BTreeMap<String, HeaderEntry> = self
                .add_file(&real)?
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect();
            for tensor in tensors {
                let entry = entries.remove(tensor).ok_or_else(|| Error::MissingTensor {
                    name: tensor.to_string(),
                    searched: format!(
                        "{}, the shard {} assigns it to",
                        path.display(),
                        index_path.display()
                    ),
                })?;
                self.insert(entry);
            }
        }
        Ok(())
    }

    /// The tensor called `name`, if the checkpoint has it.
    pub fn get(&self, name: &str) -> Option<TensorRef<'_>> {
        let (name, slot) = self.tensors.get_key_value(name)?;
        let file = &self.files[slot.file];
        Some(TensorRef {
            name,
            dtype: slot.dtype,
            float8_e4m3: slot.float8_e4m3,
            shape: &slot.shape,
            // In bounds: parse_header checked the range against this very mapping.
            data: &file.map[slot.data.clone()],
            path: &file.path,
        })
    }

    /// Renames every tensor with `rename` (`None` drops it): how a model family maps its
    /// checkpoints' spellings onto the names its builder reads. Two tensors renamed to the
    /// same name is an error naming both.
    pub fn renamed(mut self, rename: impl Fn(&str) -> Option<String>) -> Result<TensorStore> {
        let mut origin: BTreeMap<String, String> = BTreeMap::new();
        for (name, slot) in std::mem::take(&mut self.tensors) {
            let Some(new) = rename(&name) else { continue };
            if let Some(first) = origin.insert(new.clone(), name.clone()) {
                return Err(Error::Source(format!(
                    "checkpoint tensors `{first}` and `{name}` are both read as `{new}`"
                )));
            }
            self.tensors.insert(new, slot);
        }
        Ok(self)
    }

    /// The mapped files.
    pub(super) fn maps(&self) -> impl Iterator<Item = &Mmap> {
        self.files.iter().map(|f| &f.map)
    }

    /// All tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// How many tensors the checkpoint has.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the checkpoint has no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_named_twice_in_the_header_is_refused() {
        let header = r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[1, 2]);
        let e = parse_header(&bytes, Path::new("x.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.safetensors") && e.contains("tensor `w` is listed twice"),
            "{e}"
        );
    }
}
