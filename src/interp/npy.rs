//! Reading and writing `.npy` files (format versions 1.0–3.0, little-endian, C order), so the
//! interpreter can be fed and compared from Python tools.
//!
//! Reading is defensive: the header is parsed as the small Python dict literal numpy writes
//! (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, nothing else), the element
//! count is checked against the run's budget and against the bytes the file holds before any
//! data is read, and every problem is one error naming the file.

use std::io::Read;
use std::path::Path;

use super::run::held_bytes_per_element;
use crate::ir::{DType, TensorData};
use crate::limits::InterpLimits;
use crate::ops::Tensor;
use crate::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// The longest header accepted (numpy itself refuses headers over 10,000 bytes by default).
const MAX_HEADER: usize = 64 << 10;

/// The dtypes `.npy` files may hold, with the `descr` numpy writes for each.
const DESCRS: [(DType, &str); 12] = [
    (DType::F32, "<f4"),
    (DType::F16, "<f2"),
    (DType::F64, "<f8"),
    (DType::I64, "<i8"),
    (DType::I32, "<i4"),
    (DType::U32, "<u4"),
    (DType::U64, "<u8"),
    (DType::I16, "<i2"),
    (DType::U16, "<u2"),
    (DType::I8, "|i1"),
    (DType::U8, "|u1"),
    (DType::Bool, "|b1"),
];

fn descr(dtype: DType) -> Option<&'static str> {
    DESCRS.iter().find(|(d, _)| *d == dtype).map(|(_, s)| *s)
}

/// The dtype of a `descr` string; one-byte types take any byte-order mark.
fn dtype_of(text: &str) -> std::result::Result<DType, String> {
    let (order, code) = text.split_at(text.len().min(1));
    let found = DESCRS.iter().find(|(d, s)| {
        s[1..] == *code && (order == &s[..1] || (d.size() == 1 && "<>|=".contains(order)))
    });
    match found {
        Some((d, _)) => Ok(*d),
        None if order == ">" && DESCRS.iter().any(|(_, s)| s[1..] == *code) => Err(format!(
            "big-endian data (descr `{text}`) is not supported; save it little-endian"
        )),
        None => Err(format!(
            "unsupported dtype (descr `{text}`); supported: {}",
            DESCRS.map(|(_, s)| s).join(", ")
        )),
    }
}

/// Serialises a tensor as `.npy` bytes (bf16 is written as f32 and float8 e4m3fn as its raw
/// bytes, `u1`: numpy has neither).
pub fn to_npy(t: &Tensor) -> Vec<u8> {
    let mut t = t.clone();
    if t.dtype == DType::BF16 {
        t.dtype = DType::F32;
    }
    let mut data = t.to_data();
    if data.dtype == DType::F8E4M3FN {
        data.dtype = DType::U8;
    }
    let shape = match data.shape.len() {
        1 => format!("({},)", data.shape[0]),
        _ => format!(
            "({})",
            data.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(data.dtype).expect("bf16 was widened, float8 is bytes")
    );
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data.bytes);
    out
}

/// What a `.npy` header says.
#[derive(Debug, Clone, PartialEq)]
struct Header {
    dtype: DType,
    shape: Vec<usize>,
    /// Where the data starts.
    data_offset: usize,
}

/// One value of the header dict.
#[derive(Debug, PartialEq)]
enum Literal {
    Str(String),
    Bool(bool),
    Tuple(Vec<String>),
}

/// A cursor over the header text.
struct Cursor<'t> {
    text: &'t str,
}

impl<'t> Cursor<'t> {
    fn skip_space(&mut self) {
        self.text = self.text.trim_start();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        match self.text.strip_prefix(c) {
            Some(rest) => {
                self.text = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("header: expected `{c}` at `{}`", self.excerpt()))
        }
    }

    fn excerpt(&self) -> String {
        self.text.chars().take(20).collect()
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        self.skip_space();
        let quote = match self.text.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(format!("header: expected a string at `{}`", self.excerpt())),
        };
        let rest = &self.text[1..];
        let end = rest
            .find(quote)
            .ok_or_else(|| "header: unterminated string".to_string())?;
        self.text = &rest[end + 1..];
        Ok(rest[..end].to_string())
    }

    fn literal(&mut self) -> std::result::Result<Literal, String> {
        self.skip_space();
        for (word, value) in [("True", true), ("False", false)] {
            if let Some(rest) = self.text.strip_prefix(word) {
                self.text = rest;
                return Ok(Literal::Bool(value));
            }
        }
        if self.eat('(') {
            let mut items = Vec::new();
            loop {
                if self.eat(')') {
                    return Ok(Literal::Tuple(items));
                }
                self.skip_space();
                let len = self
                    .text
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '+'))
                    .unwrap_or(self.text.len());
                if len == 0 {
                    return Err(format!("header: bad shape at `{}`", self.excerpt()));
                }
                items.push(self.text[..len].to_string());
                self.text = &self.text[len..];
                if !self.eat(',') {
                    self.expect(')')?;
                    return Ok(Literal::Tuple(items));
                }
            }
        }
        self.string().map(Literal::Str)
    }

    /// The `{key: value, ...}` dict, followed by nothing but whitespace.
    fn dict(&mut self) -> std::result::Result<Vec<(String, Literal)>, String> {
        self.expect('{')?;
        let mut entries = Vec::new();
        loop {
            if self.eat('}') {
                break;
            }
            let key = self.string()?;
            self.expect(':')?;
            entries.push((key, self.literal()?));
            if !self.eat(',') {
                self.expect('}')?;
                break;
            }
        }
        self.skip_space();
        if !self.text.is_empty() {
            return Err(format!(
                "header: unexpected `{}` after the dict",
                self.excerpt()
            ));
        }
        Ok(entries)
    }
}

/// Parses the header text (after the length field).
fn parse_dict(text: &str) -> std::result::Result<(DType, Vec<usize>), String> {
    let entries = Cursor { text }.dict()?;
    let mut dtype = None;
    let mut fortran = None;
    let mut shape = None;
    for (key, value) in entries {
        let slot_taken = match (key.as_str(), value) {
            ("descr", Literal::Str(s)) => dtype.replace(dtype_of(&s)?).is_some(),
            ("fortran_order", Literal::Bool(b)) => fortran.replace(b).is_some(),
            ("shape", Literal::Tuple(items)) => shape.replace(items).is_some(),
            ("descr" | "fortran_order" | "shape", v) => {
                return Err(format!("header: `{key}` has an unexpected value {v:?}"))
            }
            _ => return Err(format!("header: unexpected key `{key}`")),
        };
        if slot_taken {
            return Err(format!("header: key `{key}` appears twice"));
        }
    }
    let dtype = dtype.ok_or("header: no `descr`")?;
    if fortran.ok_or("header: no `fortran_order`")? {
        return Err(
            "Fortran-ordered data (fortran_order: True) is not supported; save a C-ordered array"
                .into(),
        );
    }
    let shape = shape
        .ok_or("header: no `shape`")?
        .iter()
        .map(|d| match d.parse::<i128>() {
            Ok(n) if n < 0 => Err(format!("shape has a negative dimension {n}")),
            Ok(n) => usize::try_from(n).map_err(|_| format!("shape dimension {n} is too large")),
            Err(_) => Err(format!("shape dimension `{d}` is not an integer")),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((dtype, shape))
}

/// Parses the header at the start of `prefix` (at least the whole header; data may follow).
fn parse_header(prefix: &[u8]) -> std::result::Result<Header, String> {
    if !prefix.starts_with(MAGIC) {
        return Err("missing the \\x93NUMPY magic: not a .npy file".into());
    }
    if prefix.len() < 8 {
        return Err("truncated header (the file ends inside it)".into());
    }
    let (len, start) = match prefix[6] {
        1 if prefix.len() >= 10 => (u16::from_le_bytes([prefix[8], prefix[9]]) as usize, 10),
        2 | 3 if prefix.len() >= 12 => (
            u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]) as usize,
            12,
        ),
        1..=3 => return Err("truncated header (the file ends inside it)".into()),
        v => return Err(format!("unknown format version {v}")),
    };
    if len > MAX_HEADER {
        return Err(format!(
            "header length {len} is over the {MAX_HEADER}-byte limit"
        ));
    }
    let bytes = prefix.get(start..start + len).ok_or_else(|| {
        format!(
            "header length {len} runs past the end of the file ({} bytes)",
            prefix.len()
        )
    })?;
    let text = std::str::from_utf8(bytes)
        .ok()
        .filter(|t| t.is_ascii())
        .ok_or("the header is not ASCII text")?;
    let (dtype, shape) = parse_dict(text)?;
    Ok(Header {
        dtype,
        shape,
        data_offset: start + len,
    })
}

/// The data byte count of `header`, checked against `limits` and against the `available`
/// bytes after the header.
fn data_len(header: &Header, available: u64, limits: &InterpLimits, path: &Path) -> Result<usize> {
    let n = limits.elements(&path.display().to_string(), &header.shape)?;
    let needed = n
        .checked_mul(header.dtype.size())
        .ok_or_else(|| bad(path, "the data size overflows".into()))?;
    if needed as u64 != available {
        return Err(bad(
            path,
            format!(
                "shape {:?} of {} needs {needed} data bytes, the file holds {available}",
                header.shape, header.dtype
            ),
        ));
    }
    Ok(needed)
}

fn bad(path: &Path, message: String) -> Error {
    Error::Npy {
        path: path.to_path_buf(),
        message: format!("not a usable .npy file: {message}"),
    }
}

/// Parses `.npy` bytes within `limits`; `path` names errors.
pub fn from_npy(bytes: &[u8], path: &Path, limits: &InterpLimits) -> Result<Tensor> {
    let header = parse_header(bytes).map_err(|m| bad(path, m))?;
    let data = &bytes[header.data_offset..];
    data_len(&header, data.len() as u64, limits, path)?;
    Tensor::from_data(&TensorData {
        dtype: header.dtype,
        shape: header.shape,
        bytes: data.to_vec(),
    })
}

/// Reads a `.npy` file within `limits`: the header first, the data only once its size is
/// known to fit the budget and to match the file's length.
pub fn read_npy(path: &Path, limits: &InterpLimits) -> Result<Tensor> {
    read_npy_within(path, limits, &mut 0)
}

/// Reads a `.npy` file as one of several arrays a run holds together: `held` is what the
/// arrays read before it hold (in the interpreter's storage, see [`held_bytes_per_element`]).
/// This array's bytes are added to it and the sum is checked against
/// `limits.max_run_bytes` from the header, before the data is read.
pub fn read_npy_within(path: &Path, limits: &InterpLimits, held: &mut u64) -> Result<Tensor> {
    let io = |e| Error::io(path, e);
    let mut file = std::fs::File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut prefix = Vec::new();
    (&mut file)
        .take((12 + MAX_HEADER) as u64)
        .read_to_end(&mut prefix)
        .map_err(io)?;
    let header = parse_header(&prefix).map_err(|m| bad(path, m))?;
    let available = file_len.saturating_sub(header.data_offset as u64);
    let len = data_len(&header, available, limits, path)?;
    let elements = (len / header.dtype.size()) as u64;
    *held = held.saturating_add(elements.saturating_mul(held_bytes_per_element(header.dtype)));
    limits.run_bytes(
        &format!("{} (with the arrays read before it)", path.display()),
        *held,
    )?;
    let mut bytes = prefix.split_off(header.data_offset.min(prefix.len()));
    let have = bytes.len();
    bytes.resize(len, 0);
    if have < len {
        file.read_exact(&mut bytes[have..]).map_err(io)?;
    }
    Tensor::from_data(&TensorData {
        dtype: header.dtype,
        shape: header.shape,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy_with_header(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn error(bytes: &[u8]) -> String {
        from_npy(bytes, Path::new("x.npy"), &InterpLimits::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn round_trips_every_dtype() {
        for t in [
            Tensor::float(DType::F32, vec![2, 3], vec![1.0, -2.5, 3.0, 4.0, 5.5, -6.0]),
            Tensor::float(DType::F16, vec![3], vec![0.5, 1.0, 65504.0]),
            Tensor::int(DType::I64, vec![], vec![7]),
            Tensor::int(DType::I32, vec![1, 2], vec![-1, 2]),
            Tensor::bool(vec![2], vec![true, false]),
            Tensor::float(DType::F32, vec![0, 4], vec![]),
        ] {
            let bytes = to_npy(&t);
            assert_eq!(
                (10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize) % 64,
                0
            );
            let limits = InterpLimits::default();
            assert_eq!(from_npy(&bytes, Path::new("t.npy"), &limits).unwrap(), t);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.npy");
            std::fs::write(&path, to_npy(&t)).unwrap();
            assert_eq!(read_npy(&path, &limits).unwrap(), t);
        }
    }

    #[test]
    fn headers_numpy_writes_are_read() {
        for dict in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }      \n",
            "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,)}",
            "{'shape': (2, ), 'fortran_order': False, 'descr': '<f4'}",
        ] {
            let t = from_npy(
                &npy_with_header(dict, &[0; 8]),
                Path::new("x.npy"),
                &InterpLimits::default(),
            )
            .unwrap();
            assert_eq!((t.dtype, t.shape), (DType::F32, vec![2]), "{dict}");
        }
        assert_eq!(dtype_of("<i1"), Ok(DType::I8));
        assert_eq!(dtype_of("|b1"), Ok(DType::Bool));
    }

    #[test]
    fn hostile_files_are_clean_errors_naming_the_file() {
        let ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"nope".to_vec(), "magic"),
            (b"\x93NUMPY\x01\x00\x10".to_vec(), "truncated header"),
            (b"\x93NUMPY\x09\x00\x10\x00".to_vec(), "unknown format version 9"),
            (
                {
                    let mut b = npy_with_header(ok, &[0; 8]);
                    b[8..10].copy_from_slice(&4000u16.to_le_bytes());
                    b
                },
                "runs past the end",
            ),
            (
                {
                    let mut b = b"\x93NUMPY\x02\x00".to_vec();
                    b.extend_from_slice(&u32::MAX.to_le_bytes());
                    b
                },
                "over the 65536-byte limit",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'é': 1}",
                    &[0; 8],
                ),
                "not ASCII",
            ),
            (
                npy_with_header(
                    "{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }",
                    &[0; 40],
                ),
                "unsupported dtype (descr `<U5`)",
            ),
            (
                npy_with_header(
                    "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                    &[0; 8],
                ),
                "big-endian",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
                    &[0; 8],
                ),
                "Fortran",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
                    &[0; 8],
                ),
                "negative dimension -2",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }",
                    &[0; 8],
                ),
                "too large",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576), }",
                    &[0; 8],
                ),
                "--max-tensor-elements",
            ),
            (npy_with_header(ok, &[0; 7]), "needs 8 data bytes, the file holds 7"),
            (npy_with_header(ok, &[0; 9]), "needs 8 data bytes, the file holds 9"),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 'y'}",
                    &[0; 8],
                ),
                "unexpected key `x`",
            ),
            (
                npy_with_header("{'descr': '<f4', 'shape': (2,), }", &[0; 8]),
                "no `fortran_order`",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
                    &[0; 8],
                ),
                "appears twice",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk",
                    &[0; 8],
                ),
                "after the dict",
            ),
            (
                npy_with_header(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (2x,)}",
                    &[0; 8],
                ),
                "not an integer",
            ),
        ];
        for (bytes, needle) in cases {
            let e = from_npy(&bytes, Path::new("x.npy"), &InterpLimits::default()).unwrap_err();
            assert!(
                matches!(e, Error::Npy { .. } | Error::Limit(_)),
                "{needle}: {e:?}"
            );
            let e = error(&bytes);
            assert!(e.contains("x.npy") && e.contains(needle), "{needle}: {e}");
        }
    }

    #[test]
    fn read_npy_checks_sizes_before_reading_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge.npy");
        // Declares 2^28 f32 elements (1 GiB) but holds 8 bytes: refused from the header.
        std::fs::write(
            &path,
            npy_with_header(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (268435456,), }",
                &[0; 8],
            ),
        )
        .unwrap();
        let e = read_npy(&path, &InterpLimits::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("huge.npy") && e.contains("the file holds 8"),
            "{e}"
        );
        let tight = InterpLimits {
            max_tensor_elements: 4,
            max_run_bytes: 1 << 20,
            ..InterpLimits::default()
        };
        let e = read_npy(&path, &tight).unwrap_err().to_string();
        assert!(
            e.contains("huge.npy") && e.contains("--max-tensor-elements"),
            "{e}"
        );
    }

    #[test]
    fn arrays_read_together_are_checked_against_the_run_memory_from_their_headers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.npy");
        // 256 f32 values: 1 KiB held.
        std::fs::write(
            &path,
            to_npy(&Tensor::float(DType::F32, vec![256], vec![0.0; 256])),
        )
        .unwrap();
        let limits = InterpLimits {
            max_tensor_elements: 1 << 20,
            max_run_bytes: 2048,
            ..InterpLimits::default()
        };
        let mut held = 0;
        read_npy_within(&path, &limits, &mut held).unwrap();
        read_npy_within(&path, &limits, &mut held).unwrap();
        assert_eq!(held, 2048);
        let e = read_npy_within(&path, &limits, &mut held).unwrap_err();
        assert!(
            matches!(&e, Error::Limit(m) if m.contains("a.npy") && m.contains("--max-memory-mib")),
            "{e}"
        );
        // Integers are held as i64: 256 i32 values hold 2 KiB.
        std::fs::write(
            &path,
            to_npy(&Tensor::int(DType::I32, vec![256], vec![0; 256])),
        )
        .unwrap();
        let mut held = 1;
        assert!(matches!(
            read_npy_within(&path, &limits, &mut held),
            Err(Error::Limit(_))
        ));
        let mut held = 0;
        read_npy_within(&path, &limits, &mut held).unwrap();
        assert_eq!(held, 2048);
    }
}
