//! The one way the integration tests compare numbers (see docs/testing.md).
//!
//! The rule: shapes must be equal; a finite pair is equal when `|got − want| ≤ atol + rtol·|want|`;
//! a non-finite value (NaN, ±∞) equals only the same non-finite value at the same position (NaN
//! meets NaN, +∞ meets +∞), so NaN or an infinity on one side only always fails. A failure names
//! the worst element: its index, both values and the difference.
//!
//! It is written here, apart from `mobius::verify` (the product's own comparison), so that the
//! tests judge mobius with code mobius does not ship.

use mobius::ops::Tensor;

/// Tolerance of a comparison: `|got − want| ≤ atol + rtol·|want|`, element by element.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    /// Absolute part.
    pub atol: f64,
    /// Part relative to each expected element.
    pub rtol: f64,
}

/// An absolute tolerance.
pub fn atol(atol: f64) -> Tol {
    Tol { atol, rtol: 0.0 }
}

/// What a comparison found (shapes already equal).
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Largest `|got − want|`; ∞ when a non-finite value meets a different value.
    pub max_abs: f64,
    /// Elements out of tolerance (non-finite mismatches included).
    pub failed: usize,
    /// Elements compared.
    pub len: usize,
    /// Flat index of the worst element: the first non-finite mismatch, else the largest
    /// difference beyond tolerance (else the largest difference); `None` when empty.
    pub worst: Option<usize>,
}

/// Compares `got` with `want` element by element under `tol` (shapes must be equal).
pub fn diff(
    want_shape: &[usize],
    want: &[f64],
    got_shape: &[usize],
    got: &[f64],
    tol: Tol,
) -> Result<Diff, String> {
    if want_shape != got_shape || want.len() != got.len() {
        return Err(format!(
            "shape {got_shape:?} ({} values), expected {want_shape:?} ({} values)",
            got.len(),
            want.len()
        ));
    }
    let mut d = Diff {
        max_abs: 0.0,
        failed: 0,
        len: want.len(),
        worst: None,
    };
    // (is a non-finite mismatch, excess over tolerance, difference) of the worst element so far.
    let mut worst_key = (false, f64::NEG_INFINITY, f64::NEG_INFINITY);
    for (i, (&w, &g)) in want.iter().zip(got).enumerate() {
        let (mismatch, diff, excess) = if w.is_finite() && g.is_finite() {
            let diff = (g - w).abs();
            (false, diff, diff - (tol.atol + tol.rtol * w.abs()))
        } else if w == g || (w.is_nan() && g.is_nan()) {
            (false, 0.0, f64::NEG_INFINITY)
        } else {
            (true, f64::INFINITY, f64::INFINITY)
        };
        d.max_abs = d.max_abs.max(diff);
        if mismatch || excess > 0.0 {
            d.failed += 1;
        }
        let key = (mismatch, excess, diff);
        let better = match (key.0, worst_key.0) {
            (true, false) => true,
            (false, true) | (true, true) => false,
            (false, false) => (key.1, key.2) > (worst_key.1, worst_key.2),
        };
        if d.worst.is_none() || better {
            worst_key = key;
            d.worst = Some(i);
        }
    }
    Ok(d)
}

/// `Ok(largest |got − want|)` when every element is within `tol`, else a message naming `what`,
/// how many elements failed and the worst one.
pub fn compare(
    what: &str,
    (want_shape, want): (&[usize], &[f64]),
    (got_shape, got): (&[usize], &[f64]),
    tol: Tol,
) -> Result<f64, String> {
    let d = diff(want_shape, want, got_shape, got, tol).map_err(|e| format!("{what}: {e}"))?;
    if d.failed == 0 {
        return Ok(d.max_abs);
    }
    let i = d.worst.expect("a failed element exists");
    let difference = if want[i].is_finite() && got[i].is_finite() {
        (got[i] - want[i]).abs()
    } else {
        f64::INFINITY
    };
    Err(format!(
        "{what}: {} of {} elements out of tolerance (atol {:e}, rtol {:e}); worst at {:?}: \
         got {}, expected {} (|difference| {:e})",
        d.failed,
        d.len,
        tol.atol,
        tol.rtol,
        unflatten(i, want_shape),
        got[i],
        want[i],
        difference,
    ))
}

/// Largest `|got − want|` of two tensors of one shape: ∞ when NaN or an infinity meets a
/// different value (for checks that two results *differ*).
pub fn max_abs_diff(want: &Tensor, got: &Tensor) -> f64 {
    diff(
        &want.shape,
        &want.as_f64(),
        &got.shape,
        &got.as_f64(),
        atol(0.0),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .max_abs
}

/// Panics unless tensor `got` equals `want` under `tol`; returns the largest difference.
pub fn assert_tensors_close(what: &str, want: &Tensor, got: &Tensor, tol: Tol) -> f64 {
    compare(
        what,
        (&want.shape, &want.as_f64()),
        (&got.shape, &got.as_f64()),
        tol,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Panics unless flat values `got` equal `want` (same length) under `tol`; returns the largest
/// difference.
pub fn assert_close<W: Copy + Into<f64>, G: Copy + Into<f64>>(
    what: &str,
    want: &[W],
    got: &[G],
    tol: Tol,
) -> f64 {
    let want: Vec<f64> = want.iter().map(|&v| v.into()).collect();
    let got: Vec<f64> = got.iter().map(|&v| v.into()).collect();
    compare(what, (&[want.len()], &want), (&[got.len()], &got), tol)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The multi-dimensional index of flat (row-major) index `i` in `shape`.
fn unflatten(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut at = vec![0; shape.len()];
    for (a, &n) in at.iter_mut().zip(shape).rev() {
        if n > 0 {
            *a = i % n;
            i /= n;
        }
    }
    at
}
