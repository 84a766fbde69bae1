//! Comparing one output of two models, element by element, without letting NaN or infinity
//! hide a difference: NaN equals only NaN, an infinity equals only the same infinity, and the
//! relative tolerance scales with the reference's largest *finite* magnitude.

use crate::ir::DType;
use crate::{Error, Result};

/// Default `(atol, rtol)` for an output dtype.
pub fn default_tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (2e-2, 1e-2),
        DType::BF16 => (1e-1, 5e-2),
        DType::F32 | DType::F64 => (1e-4, 1e-5),
        _ => (0.0, 0.0),
    }
}

/// Checks a tolerance given by the user: finite and not negative. `flag` names it in the error.
pub fn check_tolerance(flag: &str, value: f64) -> Result<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(Error::Usage(format!(
            "{flag} {value}: a tolerance must be a finite number ≥ 0"
        )))
    }
}

/// The comparison of one output over all samples.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputDiff {
    /// Output name.
    pub name: String,
    /// Largest absolute difference over positions where neither side is NaN (∞ when an
    /// infinity meets a different value).
    pub max_abs: f64,
    /// `max_abs` divided by the reference's largest finite magnitude.
    pub max_rel: f64,
    /// Positions (over all samples) where exactly one side is NaN.
    pub nan_one_side: u64,
    /// Absolute tolerance applied.
    pub atol: f64,
    /// Relative tolerance applied.
    pub rtol: f64,
    /// Whether every sample was within `atol + rtol · max|reference|` (a finite difference)
    /// with no NaN on one side only.
    pub within: bool,
}

impl OutputDiff {
    /// A comparison not yet fed any sample.
    pub fn new(name: &str, atol: f64, rtol: f64) -> OutputDiff {
        OutputDiff {
            name: name.to_string(),
            max_abs: 0.0,
            max_rel: 0.0,
            nan_one_side: 0,
            atol,
            rtol,
            within: true,
        }
    }

    /// Adds one sample: the reference's and the candidate's values (same length).
    pub fn add(&mut self, reference: &[f64], candidate: &[f64]) {
        let scale = reference
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f64, |m, v| m.max(v.abs()));
        let mut max_abs = 0f64;
        for (&p, &q) in reference.iter().zip(candidate) {
            let diff = match (p.is_nan(), q.is_nan()) {
                (true, true) => continue,
                (true, false) | (false, true) => {
                    self.nan_one_side += 1;
                    continue;
                }
                // Equal values (the same infinity included) differ by nothing; ∞ − ∞ would be NaN.
                _ if p == q => 0.0,
                _ => (p - q).abs(),
            };
            max_abs = max_abs.max(diff);
        }
        self.max_abs = self.max_abs.max(max_abs);
        self.max_rel = self.max_rel.max(max_abs / scale.max(f64::MIN_POSITIVE));
        // An infinite difference is never within tolerance, even when `rtol · scale` overflows.
        self.within &= self.nan_one_side == 0
            && max_abs.is_finite()
            && max_abs <= self.atol + self.rtol * scale;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compare(a: &[f64], b: &[f64]) -> OutputDiff {
        let mut d = OutputDiff::new("y", 1e-4, 1e-5);
        d.add(a, b);
        d
    }

    #[test]
    fn nan_equals_only_nan() {
        let nan = f64::NAN;
        let d = compare(&[nan, 1.0], &[nan, 1.0]);
        assert!(d.within && d.nan_one_side == 0 && d.max_abs == 0.0, "{d:?}");
        for (a, b) in [([nan, 1.0], [0.0, 1.0]), ([0.0, 1.0], [nan, 1.0])] {
            let d = compare(&a, &b);
            assert!(!d.within, "{a:?} vs {b:?}");
            assert_eq!(d.nan_one_side, 1);
            assert!(!d.max_abs.is_nan());
        }
        // A NaN position does not hide a difference elsewhere.
        let d = compare(&[nan, 1.0], &[0.0, 5.0]);
        assert_eq!((d.nan_one_side, d.max_abs), (1, 4.0));
        // A later sample without NaN does not clear the verdict.
        let mut d = compare(&[nan], &[0.0]);
        d.add(&[0.0], &[0.0]);
        assert!(!d.within);
    }

    #[test]
    fn infinities_equal_only_the_same_infinity() {
        let inf = f64::INFINITY;
        assert!(compare(&[inf, -inf], &[inf, -inf]).within);
        for (a, b) in [(inf, -inf), (inf, 1.0), (1.0, -inf)] {
            let d = compare(&[a, 0.5], &[b, 0.5]);
            assert!(!d.within && d.max_abs == inf, "{a} vs {b}: {d:?}");
        }
        // An infinite reference does not make the relative tolerance infinite.
        let d = compare(&[inf, 1.0], &[inf, 2.0]);
        assert!(!d.within && d.max_abs == 1.0, "{d:?}");
        // Nor does a tolerance that overflows to infinity let an infinite difference pass.
        let mut d = OutputDiff::new("y", 0.0, 1e300);
        d.add(&[f64::MAX, 1.0], &[f64::MAX, inf]);
        assert!(d.max_abs == inf && !d.within, "{d:?}");
    }

    #[test]
    fn tolerances_scale_with_the_reference() {
        let mut d = OutputDiff::new("y", 0.0, 0.1);
        d.add(&[10.0, 0.0], &[10.5, 0.9]);
        assert!(d.within && (d.max_rel - 0.09).abs() < 1e-12, "{d:?}");
        d.add(&[10.0, 0.0], &[10.0, 1.1]);
        assert!(!d.within);
    }

    #[test]
    fn tolerances_must_be_finite_and_not_negative() {
        assert_eq!(check_tolerance("--atol", 0.5).unwrap(), 0.5);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = check_tolerance("--atol", bad).unwrap_err();
            assert!(matches!(e, Error::Usage(_)) && e.to_string().contains("--atol"));
        }
    }
}
