//! Loading EP capabilities from a TOML file (`mobius build --ep-file my-ep.toml`).

use std::io::Read;
use std::path::Path;

use super::builtins::builtin_eps;
use super::capabilities::EpCapabilities;
use super::file_spec::EpFileSpec;
use super::registry::{ep_registry, get_ep, register_ep};
use crate::error::{Error, Result};

pub use crate::limits::MAX_EP_FILE_BYTES;

/// Reads EP capabilities from the TOML file at `path` and validates them.
///
/// Keys are the [`EpCapabilities`] field names; `name` is required; dtypes are names
/// (`"f16"`, `"bfloat16"`, …); a `[cost]` table overrides [`super::CostParams`] fields. An
/// optional `base = "<registered EP>"` starts from that EP's values (cost included);
/// otherwise unset fields take the defaults of [`EpCapabilities::new`] and unset cost fields the `default` EP's.
/// Set keys replace the starting value whole (`provider_options` included). The
/// `mobius-onnx` keys that change nothing in a mobius build (`max_buffer_size`,
/// `requires_graph_capture_rewrite`, `supports_packed_multi_head_attention`) are accepted with
/// a warning saying so.
///
/// Unknown keys, wrong types, unknown dtypes and unknown bases fail with [`Error::EpFile`]
/// giving the line and column and naming the key; broken capability rules
/// ([`EpCapabilities::validate`]) fail the same way, pointing at the offending key when
/// the file sets it (line and column 0 otherwise). A path that is not a regular file (links
/// followed), a file over [`MAX_EP_FILE_BYTES`] and text that is not UTF-8 fail the same way,
/// before anything is parsed.
pub fn load_ep_file(path: &Path) -> Result<EpCapabilities> {
    let text = read_ep_file(path)?;
    let at = |offset: Option<usize>, message: String| {
        let (line, column) = offset.map_or((0, 0), |o| line_column(&text, o));
        Error::EpFile {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    };
    let spec: EpFileSpec = toml::from_str(&text)
        .map_err(|e| at(e.span().map(|s| s.start), describe_toml_error(&e)))?;
    let start = match &spec.base {
        Some(base) => get_ep(base.get_ref())
            .map_err(|e| at(Some(base.span().start), format!("field `base`: {e}")))?,
        None => EpCapabilities {
            cost: get_ep("default")?.cost,
            ..EpCapabilities::new(spec.name.clone())
        },
    };
    for key in spec.without_effect() {
        tracing::warn!(
            "{}: `{key}` has no effect in mobius (accepted for compatibility with mobius-onnx \
             EP files)",
            path.display()
        );
    }
    let caps = spec.apply(start);
    match caps.violation() {
        None => Ok(caps),
        Some(v) => {
            let offset = v.fields.iter().find_map(|f| key_offset(&text, f));
            let message = format!("execution provider `{}`: {}", caps.name, v.message);
            Err(at(offset, message))
        }
    }
}

/// The EP a command targets (`--ep NAME`, `--ep-file FILE`; the Python package's
/// `execution_provider` and `ep_file`): the EP of `ep_file` is registered first
/// ([`register_ep_file`]) and is the target unless `name` names another; `default` without
/// either. Fails before any model is read.
pub fn target_ep(name: Option<&str>, ep_file: Option<&Path>) -> Result<EpCapabilities> {
    let from_file = ep_file.map(register_ep_file).transpose()?.map(|c| c.name);
    let name = name.map(str::to_string).or(from_file);
    get_ep(name.as_deref().unwrap_or("default"))
}

/// Loads the EP file at `path` ([`load_ep_file`]) and registers its EP; returns it.
///
/// A `name` already registered fails with [`Error::EpFile`] pointing at the `name` key and
/// saying whether a built-in EP holds it: an EP file cannot replace a registered EP.
pub fn register_ep_file(path: &Path) -> Result<EpCapabilities> {
    let caps = load_ep_file(path)?;
    if ep_registry().contains(&caps.name) {
        let holder = if builtin_eps().iter().any(|b| b.name == caps.name) {
            "a built-in execution provider"
        } else {
            "an execution provider registered before"
        };
        let text = read_ep_file(path)?;
        let (line, column) = key_offset(&text, "name").map_or((0, 0), |o| line_column(&text, o));
        return Err(Error::EpFile {
            path: path.to_path_buf(),
            line,
            column,
            message: format!(
                "field `name`: `{}` is taken by {holder}; give the EP file another name (use \
                 `base = \"{}\"` to start from that EP's values)",
                caps.name, caps.name
            ),
        });
    }
    register_ep(caps.clone(), false)?;
    Ok(caps)
}

/// The text of the EP file at `path`: a regular file (links followed) of at most
/// [`MAX_EP_FILE_BYTES`], in UTF-8. Checked before opening, so a FIFO or device is never read.
fn read_ep_file(path: &Path) -> Result<String> {
    let refuse = |message: String| Error::EpFile {
        path: path.to_path_buf(),
        line: 0,
        column: 0,
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(refuse(
            "the EP file is not a regular file (a folder, FIFO or device cannot be read as one)"
                .into(),
        ));
    }
    let too_big = || {
        refuse(format!(
            "the EP file is larger than {MAX_EP_FILE_BYTES} bytes (1 MiB), the most mobius reads"
        ))
    };
    if meta.len() > MAX_EP_FILE_BYTES {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_EP_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > MAX_EP_FILE_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        refuse(format!(
            "the EP file is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The toml error's message, prefixed with the dotted key it concerns when known.
fn describe_toml_error(err: &toml::de::Error) -> String {
    // Without its input, the error displays as "<message>\nin `<key path>`\n".
    let mut bare = err.clone();
    bare.set_input(None);
    let shown = bare.to_string();
    let key = shown
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("in `")?.strip_suffix('`'));
    match key {
        Some(key) => format!("field `{key}`: {}", err.message()),
        None => err.message().to_string(),
    }
}

/// The byte offset of the key at dotted path `path` (`cost.prefill_tokens`) in `text`.
fn key_offset(text: &str, path: &str) -> Option<usize> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let mut table = doc.get_ref();
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let (key, value) = table.iter().find(|(k, _)| k.get_ref().as_ref() == part)?;
        if parts.peek().is_none() {
            return Some(key.span().start);
        }
        table = value.get_ref().as_table()?;
    }
    None
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The largest char boundary of `text` at or below `offset`.
fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut i = offset.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_from_one() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 9), (2, 3));
        assert_eq!(line_column(text, 8), (2, 2));
        assert_eq!(line_column(text, 100), (3, 1));
    }

    #[test]
    fn key_offset_finds_nested_keys() {
        let text = "name = \"x\"\n[cost]\nprefill_tokens = 0\n";
        assert_eq!(key_offset(text, "name"), Some(0));
        assert_eq!(key_offset(text, "cost.prefill_tokens"), Some(18));
        assert_eq!(key_offset(text, "cost.missing"), None);
    }
}
