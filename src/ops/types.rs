//! Tensor types as the analysis knows them: dtype and a shape whose dims may be symbolic or
//! unknown.

use std::collections::BTreeMap;
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
            (SymDim::Known(a), SymDim::Known(b)) => {
                a.checked_add(*b).map_or(SymDim::Unknown, SymDim::Known)
            }
            (SymDim::Known(0), x) | (x, SymDim::Known(0)) => x.clone(),
            (SymDim::Unknown, _) | (_, SymDim::Unknown) => SymDim::Unknown,
            (a, b) => SymDim::expr(&format!("{a} + {b}")),
        }
    }

    /// `self - other`: a canonical sum when both are sums of products, else unknown.
    pub fn sub(&self, other: &SymDim) -> SymDim {
        Self::arith(self, other, |a, b| a.plus(b, -1))
    }

    /// `self * other`: a canonical sum when both are sums of products (and the product has
    /// at most a few terms), else unknown.
    pub fn mul(&self, other: &SymDim) -> SymDim {
        Self::arith(self, other, Poly::times)
    }

    /// `self / other` when the division is exact whatever the (nonzero) names stand for: `other` a
    /// nonzero number or a single term dividing every term of `self`, or equal to `self`
    /// (`4*batch*seq / 2*seq` is `2*batch`); unknown otherwise.
    pub fn div_exact(&self, other: &SymDim) -> SymDim {
        Self::arith(self, other, Poly::divided)
    }

    /// Whether the dim is certainly not negative: a number ≥ 0, or a sum of products whose
    /// coefficients are all ≥ 0 (names are dims, never negative).
    pub fn is_nonnegative(&self) -> bool {
        match self {
            SymDim::Known(v) => *v >= 0,
            SymDim::Sym(_) => Poly::of(self).is_some_and(|p| p.terms.values().all(|&c| c > 0)),
            SymDim::Unknown => false,
        }
    }

    fn arith(a: &SymDim, b: &SymDim, f: impl Fn(&Poly, &Poly) -> Option<Poly>) -> SymDim {
        match (Poly::of(a), Poly::of(b)) {
            (Some(x), Some(y)) => f(&x, &y).map_or(SymDim::Unknown, |p| p.to_dim()),
            _ => SymDim::Unknown,
        }
    }

    /// A symbolic dim from its expression, in canonical form so that equal sums and products
    /// compare equal whatever their order: `seq + past` and `past + seq` are one dim. A sum of
    /// products of names and integers (`+`, `*`) has its integer factors multiplied, its
    /// integer terms added and its like terms combined, factors and terms sorted (`2*batch + seq + 1` →
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

    /// Whether two dims can never be equal: they differ by a nonzero constant (`3` and `4`,
    /// `total` and `total + 1`). Dims that differ otherwise may coincide for some sizes.
    pub fn never_equal(&self, other: &SymDim) -> bool {
        let (Some(a), Some(b)) = (Poly::of(self), Poly::of(other)) else {
            return false;
        };
        a.plus(&b, -1)
            .is_some_and(|d| d.terms.len() == 1 && d.terms.keys().next().is_some_and(Vec::is_empty))
    }

    /// The names the dim is made of (`past` and `seq` in `past + seq`); a dim that is not a
    /// sum of products is one name, its whole text.
    pub fn names(&self) -> Vec<String> {
        match self {
            SymDim::Known(_) | SymDim::Unknown => Vec::new(),
            SymDim::Sym(s) => match Poly::of(self) {
                Some(p) => p.terms.into_keys().flatten().collect(),
                None => vec![s.as_str().to_string()],
            },
        }
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

/// Most terms a product of dims may have before it is given up on (unknown).
const MAX_TERMS: usize = 16;

/// A dim as a polynomial over dim names with integer coefficients: a sum of terms, each an
/// integer times a product of names (the empty product is the constant term). Names stand for
/// dims: never negative, and taken as nonzero where they divide (as in a Reshape's `-1`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Poly {
    /// Coefficient of each product of names (sorted names; never 0).
    terms: BTreeMap<Vec<String>, i64>,
}

impl Poly {
    fn constant(v: i64) -> Poly {
        let mut terms = BTreeMap::new();
        if v != 0 {
            terms.insert(Vec::new(), v);
        }
        Poly { terms }
    }

    /// The polynomial of a dim; `None` when unknown or not a sum of products.
    fn of(d: &SymDim) -> Option<Poly> {
        match d {
            SymDim::Known(v) => Some(Poly::constant(*v)),
            SymDim::Sym(s) => Poly::parse(s.as_str()),
            SymDim::Unknown => None,
        }
    }

    /// A sum (`+`) of products (`*`) of names and integers, or a floor division `a//b` (either
    /// side in parentheses, as torch.onnx writes `((batch*seq)//batch)`) that is exact: `b`
    /// divides every term of `a` ([`Poly::divided`]), so the floor is the quotient. `None` for
    /// anything else.
    fn parse(text: &str) -> Option<Poly> {
        let inner = unparenthesized(text.trim());
        if let Some(at) = top_level_floor_div(inner) {
            let text = inner;
            let divisor = text[at + 2..].trim();
            // `//` binds like `*` and tighter than `+`: `a + b//c` and `a//b*c` are not
            // `(…)//(…)` of the two sides.
            let whole = unparenthesized(divisor) != divisor || !divisor.contains(['*', '+']);
            if top_level(text, '+') || !whole {
                return None;
            }
            let operand = |t: &str| Poly::parse(unparenthesized(t.trim()));
            let (a, b) = (operand(&text[..at])?, operand(divisor)?);
            return a.divided(&b);
        }
        Poly::parse_sum(text)
    }

    /// [`Poly::parse`] of a sum of products (no parentheses, no division).
    fn parse_sum(text: &str) -> Option<Poly> {
        let is_name = |f: &str| {
            !f.is_empty()
                && f.chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                && !f.starts_with(|c: char| c.is_ascii_digit())
        };
        let mut sum = Poly::constant(0);
        for term in text.split('+') {
            let mut coefficient: i64 = 1;
            let mut names: Vec<String> = Vec::new();
            for factor in term.split('*').map(str::trim) {
                if let Ok(v) = factor.parse::<i64>() {
                    coefficient = coefficient.checked_mul(v)?;
                } else if is_name(factor) {
                    names.push(factor.to_string());
                } else {
                    return None;
                }
            }
            names.sort_unstable();
            sum.add_term(names, coefficient)?;
        }
        Some(sum)
    }

    fn add_term(&mut self, names: Vec<String>, coefficient: i64) -> Option<()> {
        let c = self.terms.entry(names.clone()).or_insert(0);
        *c = c.checked_add(coefficient)?;
        if *c == 0 {
            self.terms.remove(&names);
        }
        Some(())
    }

    fn plus(&self, other: &Poly, sign: i64) -> Option<Poly> {
        let mut sum = self.clone();
        for (names, &c) in &other.terms {
            sum.add_term(names.clone(), c.checked_mul(sign)?)?;
        }
        Some(sum)
    }

    fn times(&self, other: &Poly) -> Option<Poly> {
        let mut product = Poly::constant(0);
        for (a, &x) in &self.terms {
            for (b, &y) in &other.terms {
                let mut names: Vec<String> = a.iter().chain(b).cloned().collect();
                names.sort_unstable();
                product.add_term(names, x.checked_mul(y)?)?;
            }
        }
        (product.terms.len() <= MAX_TERMS).then_some(product)
    }

    /// `self / other` when `other` divides every term exactly: a nonzero constant, a single
    /// term whose names every term of `self` contains, or `self` itself.
    fn divided(&self, other: &Poly) -> Option<Poly> {
        if self == other && !self.terms.is_empty() {
            return Some(Poly::constant(1));
        }
        let [(divisor_names, &divisor)] = other.terms.iter().collect::<Vec<_>>()[..] else {
            return None;
        };
        let mut quotient = Poly::constant(0);
        for (names, &c) in &self.terms {
            if c.checked_rem(divisor)? != 0 {
                return None;
            }
            let mut rest = names.clone();
            for n in divisor_names {
                let at = rest.iter().position(|r| r == n)?;
                rest.remove(at);
            }
            quotient.add_term(rest, c.checked_div(divisor)?)?;
        }
        Some(quotient)
    }

    /// The canonical form: the number when no name is left, else its text (terms sorted by
    /// their names, the constant last).
    fn canonical(&self) -> Result<i64, String> {
        let constant = self.terms.get(&Vec::new()).copied().unwrap_or(0);
        let mut parts: Vec<String> = self
            .terms
            .iter()
            .filter(|(names, _)| !names.is_empty())
            .map(|(names, &c)| match c {
                1 => names.join("*"),
                c => format!("{c}*{}", names.join("*")),
            })
            .collect();
        if parts.is_empty() {
            return Ok(constant);
        }
        if constant != 0 {
            parts.push(constant.to_string());
        }
        Err(parts.join(" + "))
    }

    fn to_dim(&self) -> SymDim {
        match self.canonical() {
            Ok(v) => SymDim::Known(v),
            Err(form) => SymDim::Sym(Symbol::from(form)),
        }
    }
}

/// The canonical form of a sum of products (see [`SymDim::expr`]): `Ok(n)` when it is a
/// number, `Err(form)` for the canonical text, `None` when `text` is not such a sum.
/// `text` without parentheses that enclose all of it.
fn unparenthesized(mut text: &str) -> &str {
    while let Some(inner) = text.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        // `(a)//(b)` starts and ends with parentheses that do not enclose all of it.
        if depth_never_zero(inner) {
            text = inner.trim();
        } else {
            break;
        }
    }
    text
}

/// Whether parentheses in `text` stay balanced (never close more than they opened).
fn depth_never_zero(text: &str) -> bool {
    let mut depth = 0i64;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    depth == 0
}

/// Whether `c` occurs in `text` outside parentheses.
fn top_level(text: &str, c: char) -> bool {
    let mut depth = 0i64;
    text.chars().any(|x| {
        match x {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        depth == 0 && x == c
    })
}

/// The byte offset of the last `//` outside parentheses in `text` (floor division groups to
/// the left, so the last one is applied last), if any.
fn top_level_floor_div(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0i64;
    let mut found = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b'/' if depth == 0 && bytes.get(i + 1) == Some(&b'/') => {
                found = Some(i);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

fn canonical_sum(text: &str) -> Option<Result<i64, String>> {
    Poly::parse(text).map(|p| p.canonical())
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

    /// This type's dtype, its shape unknown (an op whose output shape depends on values).
    pub fn with_unknown_shape(&self) -> TensorType {
        TensorType {
            dtype: self.dtype,
            shape: None,
        }
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
    fn like_terms_combine_and_arithmetic_stays_canonical() {
        assert_eq!(d("seq + seq + 1").to_string(), "2*seq + 1");
        assert_eq!(d("seq + -1*seq + 3"), SymDim::Known(3));
        let (b, s, p) = (d("batch"), d("seq"), d("past"));
        assert_eq!(p.add(&s).sub(&s), p);
        assert_eq!(s.sub(&p).to_string(), "-1*past + seq");
        assert_eq!(b.mul(&p.add(&s)), d("batch*seq + batch*past"));
        assert_eq!(SymDim::Known(3).sub(&SymDim::Known(5)), SymDim::Known(-2));
        assert_eq!(d("(a+b)").sub(&s), SymDim::Unknown);
        assert_eq!(SymDim::Unknown.mul(&s), SymDim::Unknown);
        assert_eq!(
            SymDim::Known(i64::MAX).add(&SymDim::Known(1)),
            SymDim::Unknown
        );
    }

    #[test]
    fn only_exact_divisions_are_computed() {
        let (b, s) = (d("batch"), d("seq"));
        let bs64 = b.mul(&s).mul(&SymDim::Known(64));
        assert_eq!(
            bs64.div_exact(&b.mul(&s).mul(&SymDim::Known(16))),
            SymDim::Known(4)
        );
        assert_eq!(bs64.div_exact(&SymDim::Known(2)), d("32*batch*seq"));
        assert_eq!(
            d("past + seq").div_exact(&d("seq + past")),
            SymDim::Known(1)
        );
        assert_eq!(
            d("2*past + 2*seq").div_exact(&SymDim::Known(2)),
            d("past + seq")
        );
        assert_eq!(
            d("2*past + seq").div_exact(&SymDim::Known(2)),
            SymDim::Unknown
        );
        assert_eq!(d("batch*seq").div_exact(&d("past")), SymDim::Unknown);
        assert_eq!(d("batch*seq").div_exact(&d("past + seq")), SymDim::Unknown);
        assert_eq!(
            SymDim::Known(7).div_exact(&SymDim::Known(2)),
            SymDim::Unknown
        );
        assert_eq!(s.div_exact(&SymDim::Known(0)), SymDim::Unknown);
        assert_eq!(
            SymDim::Known(i64::MIN).div_exact(&SymDim::Known(-1)),
            SymDim::Unknown
        );
    }

    #[test]
    fn sums_of_names_with_positive_coefficients_are_never_negative() {
        assert!(d("past + seq + 1").is_nonnegative());
        assert!(SymDim::Known(0).is_nonnegative());
        assert!(!SymDim::Known(-1).is_nonnegative());
        assert!(!d("seq + -1").is_nonnegative());
        assert!(!d("-2*seq").is_nonnegative());
        assert!(!d("seq - 1").is_nonnegative());
        assert!(!SymDim::Unknown.is_nonnegative());
    }

    #[test]
    fn exact_floor_divisions_are_quotients() {
        // torch.onnx declares a view's dim as `((batch*seq)//batch)`.
        assert_eq!(d("((batch*seq)//batch)"), d("seq"));
        assert_eq!(d("(6*batch*seq)//(2*seq)"), d("3*batch"));
        assert_eq!(d("(2*a + 4*b)//2"), d("b*2 + a"));
        assert_eq!(d("a*b//a"), d("b"));
        assert_eq!(d("batch//batch"), SymDim::Known(1));
        // Not exact, or not a division of the two sides: kept as written.
        for kept in [
            "(batch*seq)//2",
            "(a + b)//a",
            "a + b//b",
            "a//b*c",
            "seq//batch",
        ] {
            assert_eq!(d(kept).to_string(), kept, "{kept}");
        }
    }

    #[test]
    fn other_expressions_are_kept_as_written() {
        assert_eq!(d(" seq - 1 ").to_string(), "seq - 1");
        assert_eq!(d("(a+b)").to_string(), "(a+b)");
        assert_eq!(d("").to_string(), "?");
    }
}
