//! Copying the checkpoint's tokenizer and generation files into the package, bounded in size,
//! with errors that tell a failed read (naming the source) from a failed write (naming the
//! output file).

use std::io::{Read, Write};
use std::path::Path;

use crate::{Error, Result};

pub use crate::limits::MAX_AUX_FILE_BYTES;

/// Copies `source`, a regular file of at most [`MAX_AUX_FILE_BYTES`], to `dest`.
///
/// A larger source fails before anything is written; read errors name `source`, write errors
/// name `dest`.
pub fn copy_aux_file(source: &Path, dest: &Path) -> Result<()> {
    let too_big = || {
        Error::Source(format!(
            "{} is larger than {MAX_AUX_FILE_BYTES} bytes (1 GiB), the most mobius copies into a \
         package",
            source.display()
        ))
    };
    let meta = std::fs::metadata(source).map_err(|e| Error::io(source, e))?;
    if !meta.is_file() {
        return Err(Error::Source(format!(
            "{} is not a regular file",
            source.display()
        )));
    }
    if meta.len() > MAX_AUX_FILE_BYTES {
        return Err(too_big());
    }
    let mut reader = std::fs::File::open(source).map_err(|e| Error::io(source, e))?;
    let mut writer = std::fs::File::create(dest).map_err(|e| Error::io(dest, e))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut copied = 0u64;
    loop {
        let n = reader.read(&mut buf).map_err(|e| Error::io(source, e))?;
        if n == 0 {
            break;
        }
        copied += n as u64;
        if copied > MAX_AUX_FILE_BYTES {
            return Err(too_big());
        }
        writer
            .write_all(&buf[..n])
            .map_err(|e| Error::io(dest, e))?;
    }
    writer.flush().map_err(|e| Error::io(dest, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_the_bytes() {
        let t = tempfile::tempdir().unwrap();
        let (src, dest) = (t.path().join("a.json"), t.path().join("b.json"));
        std::fs::write(&src, b"{\"x\": 1}").unwrap();
        copy_aux_file(&src, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"{\"x\": 1}");
    }

    #[test]
    fn a_write_error_names_the_output_file() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("tokenizer.json");
        std::fs::write(&src, b"{}").unwrap();
        let dest = t.path().join("missing-folder").join("tokenizer.json");
        let err = copy_aux_file(&src, &dest).unwrap_err().to_string();
        assert!(err.contains("missing-folder"), "{err}");
    }

    #[test]
    fn a_source_over_the_limit_is_refused_before_writing() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("tokenizer.json");
        // Sparse: takes no disk space.
        std::fs::File::create(&src)
            .unwrap()
            .set_len(MAX_AUX_FILE_BYTES + 1)
            .unwrap();
        let dest = t.path().join("out.json");
        let err = copy_aux_file(&src, &dest).unwrap_err().to_string();
        assert!(
            err.contains("tokenizer.json") && err.contains("1 GiB"),
            "{err}"
        );
        assert!(!dest.exists());
    }
}
