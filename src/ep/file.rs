//! Loading EP capabilities from a TOML file (`mobius build --ep-file my-ep.toml`).

use std::path::Path;

use super::capabilities::EpCapabilities;
use super::file_spec::EpFileSpec;
use super::registry::get_ep;
use crate::error::{Error, Result};

/// Reads EP capabilities from the TOML file at `path` and validates them.
///
/// Keys are the [`EpCapabilities`] field names; `name` is required; dtypes are names
/// (`"f16"`, `"bfloat16"`, …); a `[cost]` table overrides [`super::CostParams`] fields. An
/// optional `base = "<registered EP>"` starts from that EP's values (cost included);
/// otherwise unset fields take the spec defaults and unset cost fields the `default` EP's.
/// Set keys replace the starting value whole (`provider_options` included).
///
/// Unknown keys, wrong types, unknown dtypes and unknown bases fail with [`Error::EpFile`]
/// giving the line and column and naming the key; broken capability rules
/// ([`EpCapabilities::validate`]) fail the same way, pointing at the offending key when
/// the file sets it (line and column 0 otherwise).
pub fn load_ep_file(path: &Path) -> Result<EpCapabilities> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
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
