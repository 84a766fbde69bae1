//! Symbolic tensor shapes.

use std::fmt;

/// One dimension of a tensor shape: a known size or a named symbolic size.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A concrete size.
    Fixed(i64),
    /// A symbolic size such as `batch` or `past_sequence_len + sequence_len`.
    Sym(String),
}

impl Dim {
    /// A symbolic dimension with the given name.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(name.to_string())
    }
}

impl From<i64> for Dim {
    fn from(v: i64) -> Dim {
        Dim::Fixed(v)
    }
}

impl From<usize> for Dim {
    fn from(v: usize) -> Dim {
        Dim::Fixed(v as i64)
    }
}

impl From<&str> for Dim {
    fn from(v: &str) -> Dim {
        Dim::Sym(v.to_string())
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(v) => write!(f, "{v}"),
            Dim::Sym(s) => write!(f, "{s}"),
        }
    }
}

/// A tensor shape: one [`Dim`] per axis.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// Builds a shape from anything convertible into dims.
    pub fn new<D: Into<Dim>>(dims: impl IntoIterator<Item = D>) -> Shape {
        Shape(dims.into_iter().map(Into::into).collect())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
