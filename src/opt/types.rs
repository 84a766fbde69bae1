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
            (a, b) => SymDim::Sym(Symbol::from(format!("{a} + {b}"))),
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
            Dim::Sym(s) => SymDim::Sym(Symbol::from(s.as_str())),
        }
    }
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
