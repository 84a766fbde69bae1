//! Reading and writing `.npy` files (format version 1.0/2.0, little-endian, C order), so the
//! interpreter can be fed and compared from Python tools.

use std::path::Path;

use super::Tensor;
use crate::ir::{DType, TensorData};
use crate::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
        DType::BF16 => return None,
    })
}

/// Serialises a tensor as `.npy` bytes (bf16 is written as f32: numpy has no bf16).
pub fn to_npy(t: &Tensor) -> Vec<u8> {
    let mut t = t.clone();
    if t.dtype == DType::BF16 {
        t.dtype = DType::F32;
    }
    let data = t.to_data();
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
        descr(data.dtype).expect("bf16 was widened")
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

/// Parses `.npy` bytes; `path` names errors.
pub fn from_npy(bytes: &[u8], path: &Path) -> Result<Tensor> {
    let err = |m: &str| Error::Onnx {
        path: path.to_path_buf(),
        message: format!("not a supported .npy file: {m}"),
    };
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(err("missing the NUMPY magic"));
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        _ => return Err(err("unknown format version")),
    };
    let header = bytes
        .get(start..start + len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| err("truncated header"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[at..].trim_start().strip_prefix(':')?.trim_start())
    };
    let d = field("descr")
        .and_then(|v| v.strip_prefix('\'')?.split('\'').next())
        .ok_or_else(|| err("no descr"))?;
    let dtype = [
        DType::F32,
        DType::F16,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::Bool,
    ]
    .into_iter()
    .find(|t| descr(*t) == Some(d) || descr(*t).map(|x| x.replace('|', "<")) == Some(d.to_string()))
    .ok_or_else(|| err(&format!("unsupported dtype {d}")))?;
    if field("fortran_order").is_some_and(|v| v.starts_with("True")) {
        return Err(err("Fortran order"));
    }
    let shape_text = field("shape")
        .and_then(|v| v.strip_prefix('(')?.split(')').next())
        .ok_or_else(|| err("no shape"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| err("bad shape")))
        .collect::<Result<Vec<_>>>()?;
    let expected = shape
        .iter()
        .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
        .ok_or_else(|| err("shape overflows"))?;
    let data = &bytes[start + len..];
    if data.len() != expected {
        return Err(err(&format!(
            "{} data bytes, expected {expected}",
            data.len()
        )));
    }
    Tensor::from_data(&TensorData {
        dtype,
        shape,
        bytes: data.to_vec(),
    })
}

/// Reads a `.npy` file.
pub fn read_npy(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    from_npy(&bytes, path)
}

/// Writes a `.npy` file.
pub fn write_npy(path: &Path, t: &Tensor) -> Result<()> {
    std::fs::write(path, to_npy(t)).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype() {
        for t in [
            Tensor::float(DType::F32, vec![2, 3], vec![1.0, -2.5, 3.0, 4.0, 5.5, -6.0]),
            Tensor::float(DType::F16, vec![3], vec![0.5, 1.0, 65504.0]),
            Tensor::int(DType::I64, vec![], vec![7]),
            Tensor::int(DType::I32, vec![1, 2], vec![-1, 2]),
            Tensor::bool(vec![2], vec![true, false]),
        ] {
            let bytes = to_npy(&t);
            assert_eq!(
                (10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize) % 64,
                0
            );
            assert_eq!(from_npy(&bytes, Path::new("t.npy")).unwrap(), t);
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(from_npy(b"nope", Path::new("x.npy")).is_err());
        let mut bytes = to_npy(&Tensor::int(DType::I64, vec![2], vec![1, 2]));
        bytes.truncate(bytes.len() - 1);
        let err = from_npy(&bytes, Path::new("x.npy"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.npy") && err.contains("data bytes"), "{err}");
    }
}
