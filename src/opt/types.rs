//! Tensor types as the analysis knows them: dtype and a shape whose dims may be symbolic or
//! unknown.

use std::fmt;

use egg::Symbol;

use crate::ir::{DType, Dim, Shape};

/// One dimension: a number, a named symbol (`batch`, `past_sequence_len + sequence_len`), or
/// unknown.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SymDim {
    /// A concrete size.
    Known(i64),
    /// A symbolic size.
    Sym(Symbol),
    /// Not inferred.
    Unknown,
}

impl SymDim {
    /// The concrete size, if known.
    pub fn known(&self) -> Option<i64> {
        match self {
            SymDim::Known(v) => Some(*v),
            _ => None,
        }
    }

    /// `self + other`, symbolically (`a + b`) when not both known.
    pub fn add(&self, other: &SymDim) -> SymDim {
        match (self, other) {
            (SymDim::Known(a), SymDim::Known(b)) => SymDim::Known(a + b),
            (SymDim::Known(0), x) | (x, SymDim::Known(0)) => x.clone(),
            (SymDim::Unknown, _) | (_, SymDim::Unknown) => SymDim::Unknown,
            (a, b) => SymDim::expr(&format!("{a} + {b}")),
        }
    }

    /// A symbolic dim from its expression, in canonical form so that equal sums and products
    /// compare equal whatever their order: `seq + past` and `past + seq` are one dim. A sum of
    /// products of names and integers (`+`, `*`) has its integer factors multiplied and its
    /// integer terms added, factors and terms sorted (`2*batch + seq + 1` →
    /// `2*batch + seq + 1`, `seq + batch*2 + 1` → the same); it becomes known when no name is
    /// left. Anything else (`-`, `/`, parentheses) is kept as written, trimmed.
    pub fn expr(text: &str) -> SymDim {
        match canonical_sum(text) {
            Some(Ok(value)) => SymDim::Known(value),
            Some(Err(form)) => SymDim::Sym(Symbol::from(form)),
            None => SymDim::Sym(Symbol::from(text.trim())),
        }
    }

    /// Whether two dims can describe the same value (unknown matches anything).
    pub fn compatible(&self, other: &SymDim) -> bool {
        matches!((self, other), (SymDim::Unknown, _) | (_, SymDim::Unknown)) || self == other
    }

    /// The better-known of two compatible dims.
    pub fn join(&self, other: &SymDim) -> SymDim {
        if *self == SymDim::Unknown {
            other.clone()
        } else {
            self.clone()
        }
    }
}

impl fmt::Display for SymDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymDim::Known(v) => write!(f, "{v}"),
            SymDim::Sym(s) => write!(f, "{s}"),
            SymDim::Unknown => f.write_str("?"),
        }
    }
}

impl From<&Dim> for SymDim {
    fn from(d: &Dim) -> SymDim {
        match d {
            Dim::Fixed(v) => SymDim::Known(*v),
            Dim::Sym(s) if s.is_empty() => SymDim::Unknown,
            Dim::Sym(s) => SymDim::expr(s),
        }
    }
}

/// The canonical form of a sum of products (see [`SymDim::expr`]): `Ok(n)` when it is a
/// number, `Err(form)` for the canonical text, `None` when `text` is not such a sum.
fn canonical_sum(text: &str) -> Option<Result<i64, String>> {
    let is_name = |f: &str| {
        !f.is_empty()
            && f.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
            && !f.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut constant: i64 = 0;
    let mut terms: Vec<String> = Vec::new();
    for term in text.split('+') {
        let mut coefficient: i64 = 1;
        let mut names: Vec<&str> = Vec::new();
        for factor in term.split('*').map(str::trim) {
            if let Ok(v) = factor.parse::<i64>() {
                coefficient = coefficient.checked_mul(v)?;
            } else if is_name(factor) {
                names.push(factor);
            } else {
                return None;
            }
        }
        if names.is_empty() {
            constant = constant.checked_add(coefficient)?;
        } else if coefficient != 0 {
            names.sort_unstable();
            let product = names.join("*");
            terms.push(if coefficient == 1 {
                product
            } else {
                format!("{coefficient}*{product}")
            });
        }
    }
    if terms.is_empty() {
        return Some(Ok(constant));
    }
    // Sorted by their names (a coefficient does not move a term).
    terms.sort_by(|a, b| {
        let key = |t: &str| {
            t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '*')
                .to_string()
        };
        key(a).cmp(&key(b)).then(a.cmp(b))
    });
    if constant != 0 {
        terms.push(constant.to_string());
    }
    Some(Err(terms.join(" + ")))
}

/// A tensor's dtype and shape; either may be unknown.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TensorType {
    /// Element type.
    pub dtype: Option<DType>,
    /// Shape; `None` when even the rank is unknown.
    pub shape: Option<Vec<SymDim>>,
}

impl TensorType {
    /// A fully known type.
    pub fn new(dtype: DType, shape: Vec<SymDim>) -> TensorType {
        TensorType {
            dtype: Some(dtype),
            shape: Some(shape),
        }
    }

    /// The type of an IR value.
    pub fn of(dtype: DType, shape: &Shape) -> TensorType {
        TensorType::new(dtype, shape.0.iter().map(SymDim::from).collect())
    }

    /// Same dtype and shape as `self` but with another dtype.
    pub fn with_dtype(&self, dtype: Option<DType>) -> TensorType {
        TensorType {
            dtype,
            shape: self.shape.clone(),
        }
    }

    /// The rank, if known.
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Vec::len)
    }

    /// All dims as numbers, if every dim is known.
    pub fn static_shape(&self) -> Option<Vec<i64>> {
        self.shape.as_ref()?.iter().map(SymDim::known).collect()
    }

    /// Whether two types can describe the same value.
    pub fn compatible(&self, other: &TensorType) -> bool {
        let dtype = match (self.dtype, other.dtype) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let shape = match (&self.shape, &other.shape) {
            (Some(a), Some(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y))
            }
            _ => true,
        };
        dtype && shape
    }

    /// The better-known of two compatible types.
    pub fn join(&self, other: &TensorType) -> TensorType {
        TensorType {
            dtype: self.dtype.or(other.dtype),
            shape: match (&self.shape, &other.shape) {
                (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(x, y)| x.join(y)).collect()),
                (a, b) => a.clone().or_else(|| b.clone()),
            },
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            Some(d) => write!(f, "{d}")?,
            None => f.write_str("?")?,
        }
        match &self.shape {
            Some(dims) => write!(
                f,
                "[{}]",
                dims.iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => f.write_str("[?]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> SymDim {
        SymDim::from(&Dim::Sym(s.to_string()))
    }

    #[test]
    fn sums_and_products_compare_equal_in_any_order() {
        assert_eq!(d("seq + past"), d("past + seq"));
        assert_eq!(
            d("past_sequence_len + sequence_len"),
            d("sequence_len+past_sequence_len")
        );
        assert_eq!(d("batch*2 + seq + 1"), d("1 + seq + 2*batch"));
        assert_eq!(d("2 + 3"), SymDim::Known(5));
        assert_eq!(d("0*batch + 4"), SymDim::Known(4));
        assert_ne!(d("seq + past"), d("seq + batch"));
        assert_eq!(d("batch").to_string(), "batch");
        assert_eq!(
            SymDim::expr("sequence_len").add(&SymDim::expr("past_sequence_len")),
            d("past_sequence_len + sequence_len")
        );
    }

    #[test]
    fn other_expressions_are_kept_as_written() {
        assert_eq!(d(" seq - 1 ").to_string(), "seq - 1");
        assert_eq!(d("(a+b)").to_string(), "(a+b)");
        assert_eq!(d("").to_string(), "?");
    }
}
