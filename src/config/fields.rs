//! Checking config.json values, in one place: every size, count and number a config holds goes
//! through one of these checks, which name config.json, the field and what was expected.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{Error, Result};

/// What a number field must be, besides finite (in f64 and in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sign {
    /// `> 0` (RoPE bases and factors, soft-caps, scalars).
    Positive,
    /// `>= 0` (normalisation epsilons).
    NonNegative,
    /// `!= 0` (Granite multipliers, which may be negative).
    NonZero,
}

impl Sign {
    fn holds(self, v: f64) -> bool {
        match self {
            Sign::Positive => v > 0.0,
            Sign::NonNegative => v >= 0.0,
            Sign::NonZero => v != 0.0,
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Sign::Positive => "a finite number > 0",
            Sign::NonNegative => "a finite number >= 0",
            Sign::NonZero => "a finite, non-zero number",
        }
    }
}

/// Reads and checks config.json values, naming the file and the field in every error.
pub struct Fields<'a> {
    /// The config file.
    pub path: &'a Path,
}

impl Fields<'_> {
    /// An error naming the config file and `field`.
    pub fn err(&self, field: &str, message: &str) -> Error {
        Error::ConfigField {
            path: PathBuf::from(self.path),
            field: field.to_string(),
            message: message.to_string(),
        }
    }

    /// A required size or count: present, in `1..=max`. `max` comes from
    /// [`crate::limits::config`].
    pub fn positive(&self, field: &str, value: Option<i64>, max: usize) -> Result<usize> {
        match value {
            None => Err(self.err(field, "missing (expected a positive integer)")),
            Some(v) => self.count(field, v, max),
        }
    }

    /// A size or count that is present: in `1..=max`.
    pub fn count(&self, field: &str, v: i64, max: usize) -> Result<usize> {
        if v <= 0 {
            return Err(self.err(field, &format!("must be a positive integer, found {v}")));
        }
        match usize::try_from(v) {
            Ok(n) if n <= max => Ok(n),
            _ => Err(self.err(
                field,
                &format!("{v} is larger than mobius supports (at most {max})"),
            )),
        }
    }

    /// A layer index or other count that may be 0: in `0..=max`.
    pub fn index(&self, field: &str, v: i64, max: usize) -> Result<usize> {
        if v == 0 {
            Ok(0)
        } else if v < 0 {
            Err(self.err(field, &format!("must be an integer ≥ 0, found {v}")))
        } else {
            self.count(field, v, max)
        }
    }

    /// An optional size or count: `default` when absent, else in `1..=max` (as
    /// [`Fields::count`] checks).
    pub fn optional_count(
        &self,
        field: &str,
        value: Option<i64>,
        default: usize,
        max: usize,
    ) -> Result<usize> {
        match value {
            None => Ok(default),
            Some(v) => self.count(field, v, max),
        }
    }

    /// An optional number: `default` when absent, else finite (also once rounded to f32) and of
    /// the given sign.
    pub fn number(&self, field: &str, value: Option<f64>, default: f64, sign: Sign) -> Result<f32> {
        let v = value.unwrap_or(default);
        let narrow = v as f32;
        if v.is_finite() && narrow.is_finite() && sign.holds(v) && sign.holds(narrow as f64) {
            Ok(narrow)
        } else {
            Err(self.err(
                field,
                &format!("{} (expected {})", show(v), sign.expected()),
            ))
        }
    }

    /// A required number (RoPE scaling parameters): present and as [`Fields::number`] checks.
    pub fn required_number(&self, field: &str, value: Option<f64>, sign: Sign) -> Result<f32> {
        match value {
            None => Err(self.err(field, &format!("missing (expected {})", sign.expected()))),
            Some(v) => self.number(field, Some(v), v, sign),
        }
    }

    /// A JSON value that must be a number when present (`null` counts as absent).
    pub fn json_number(&self, field: &str, value: Option<&Value>) -> Result<Option<f64>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(field, &format!("{v} (expected a number)"))),
        }
    }

    /// A JSON value that must be an integer when present (`null` counts as absent).
    pub fn json_integer(&self, field: &str, value: Option<&Value>) -> Result<Option<i64>> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.err(field, &format!("{v} (expected an integer)"))),
        }
    }
}

/// `v` as written in JSON: plain for everyday magnitudes, with an exponent for huge or tiny
/// ones (`1e39`, not forty digits).
fn show(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-6..1e16).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// The JSON error of config.json `bytes`, with the field being read named when it can be found
/// (serde reports a line and column but not the key, e.g. for `"rope_theta": 1e400`).
pub(super) fn json_error(bytes: &[u8], path: &Path, err: &serde_json::Error) -> Error {
    let e = Error::json(path, err);
    match e {
        Error::Json {
            path,
            line,
            column,
            message,
        } => {
            let message = match key_before(bytes, line, column) {
                Some(key) => format!("field `{key}`: {message}"),
                None => message,
            };
            Error::Json {
                path,
                line,
                column,
                message,
            }
        }
        other => other,
    }
}

/// The last object key (`"key":`) before 1-based `line`/`column` of `bytes`, on that line.
fn key_before(bytes: &[u8], line: usize, column: usize) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let row = text.lines().nth(line.checked_sub(1)?)?;
    let upto = row.get(..column.min(row.len()))?;
    let colon = upto.rfind("\":")?;
    let open = upto[..colon].rfind('"')?;
    let key = &upto[open + 1..colon];
    (!key.is_empty() && !key.contains(['{', '}', ',', ':'])).then(|| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_finite_in_f32_and_of_the_right_sign() {
        let f = Fields {
            path: Path::new("config.json"),
        };
        assert_eq!(f.number("x", None, 2.0, Sign::Positive).unwrap(), 2.0);
        assert_eq!(
            f.number("x", Some(0.0), 1.0, Sign::NonNegative).unwrap(),
            0.0
        );
        for (v, sign) in [
            (0.0, Sign::Positive),
            (-1.0, Sign::Positive),
            (-1e-9, Sign::NonNegative),
            (0.0, Sign::NonZero),
            (1e39, Sign::Positive),
            (f64::NAN, Sign::NonZero),
            (1e-50, Sign::Positive),
        ] {
            let e = f.number("x", Some(v), 1.0, sign).unwrap_err().to_string();
            assert!(e.contains("config.json: field `x`"), "{e}");
        }
        assert!(f.count("n", 0, 10).is_err());
        assert!(f
            .count("n", 11, 10)
            .unwrap_err()
            .to_string()
            .contains("at most 10"));
        assert_eq!(f.count("n", 10, 10).unwrap(), 10);
    }

    #[test]
    fn overflowing_json_numbers_name_their_field() {
        let bytes = b"{\n  \"model_type\": \"llama\",\n  \"rope_theta\": 1e400\n}";
        let err = serde_json::from_slice::<Value>(bytes).unwrap_err();
        let e = json_error(bytes, Path::new("config.json"), &err).to_string();
        assert!(
            e.contains("config.json:3:") && e.contains("field `rope_theta`"),
            "{e}"
        );
    }
}
