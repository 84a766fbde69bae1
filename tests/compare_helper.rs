//! The integration tests' comparison helper (tests/common/compare.rs) itself: NaN or an infinity
//! on one side fails, the same non-finite value at the same position is equal, shapes must
//! match, and a failure names the worst element.

mod common;

use common::compare::{assert_close, atol, compare, diff, max_abs_diff, Tol};
use mobius::ir::DType;
use mobius::ops::Tensor;

fn check(want: &[f64], got: &[f64], tol: Tol) -> Result<f64, String> {
    compare("y", (&[want.len()], want), (&[got.len()], got), tol)
}

#[test]
fn nan_on_either_side_fails() {
    let nan = f64::NAN;
    for (want, got) in [([nan, 1.0], [0.0, 1.0]), ([0.0, 1.0], [nan, 1.0])] {
        let e = check(&want, &got, atol(1e9)).unwrap_err();
        assert!(e.contains("1 of 2") && e.contains("worst at [0]"), "{e}");
    }
    // An all-NaN output against finite values: every element fails.
    let e = check(&[1.0, 2.0, 3.0], &[nan; 3], atol(1.0)).unwrap_err();
    assert!(e.contains("3 of 3"), "{e}");
    // NaN on both sides at the same position is equal; at different positions it is not.
    assert_eq!(check(&[nan, 1.0], &[nan, 1.0], atol(0.0)), Ok(0.0));
    assert!(check(&[nan, 1.0], &[1.0, nan], atol(1e9)).is_err());
}

#[test]
fn an_infinity_equals_only_the_same_infinity() {
    let inf = f64::INFINITY;
    assert_eq!(check(&[inf, -inf], &[inf, -inf], atol(0.0)), Ok(0.0));
    for (w, g) in [(inf, -inf), (inf, 1.0), (1.0, -inf), (inf, f64::NAN)] {
        let e = check(&[w, 0.5], &[g, 0.5], atol(1e300)).unwrap_err();
        assert!(e.contains("worst at [0]"), "{w} vs {g}: {e}");
    }
    // A relative tolerance against an infinite expectation does not let a finite value pass.
    assert!(check(
        &[inf],
        &[1.0],
        Tol {
            atol: 0.0,
            rtol: 1.0
        }
    )
    .is_err());
}

#[test]
fn a_non_finite_mismatch_does_not_hide_behind_a_larger_finite_one() {
    // The first non-finite mismatch is the worst element, whatever the finite differences.
    let d = diff(
        &[3],
        &[0.0, 1.0, 2.0],
        &[3],
        &[100.0, 1.0, f64::NAN],
        atol(1e-3),
    )
    .unwrap();
    assert_eq!((d.failed, d.worst, d.max_abs), (2, Some(2), f64::INFINITY));
}

#[test]
fn shapes_must_match() {
    let e = compare("y", (&[2, 3], &[0.0; 6]), (&[3, 2], &[0.0; 6]), atol(1.0)).unwrap_err();
    assert!(
        e.contains("shape [3, 2]") && e.contains("expected [2, 3]"),
        "{e}"
    );
    assert!(check(&[0.0; 3], &[0.0; 2], atol(1.0)).is_err());
}

#[test]
fn the_worst_element_is_named_by_its_index() {
    let want = [0.0; 6];
    let got = [0.0, 0.1, 0.0, 0.0, 0.0, -0.5];
    let e = compare("logits", (&[2, 3], &want), (&[2, 3], &got), atol(0.05)).unwrap_err();
    assert!(e.starts_with("logits: 2 of 6"), "{e}");
    assert!(e.contains("worst at [1, 2]: got -0.5, expected 0"), "{e}");
    assert_eq!(check(&want, &got, atol(0.5)), Ok(0.5));
}

#[test]
fn the_relative_part_scales_with_each_expected_element() {
    let tol = Tol {
        atol: 0.0,
        rtol: 0.1,
    };
    assert!(check(&[10.0, 1.0], &[10.9, 1.0], tol).is_ok());
    let e = check(&[10.0, 1.0], &[10.0, 1.2], tol).unwrap_err();
    assert!(e.contains("worst at [1]"), "{e}");
}

#[test]
#[should_panic(expected = "a: 1 of 2 elements out of tolerance")]
fn assert_close_panics_on_nan() {
    assert_close("a", &[1f32, 2.0], &[1f32, f32::NAN], atol(1.0));
}

#[test]
fn max_abs_diff_is_infinite_on_a_one_sided_nan() {
    let a = Tensor::float(DType::F32, vec![2], vec![1.0, 2.0]);
    let b = Tensor::float(DType::F32, vec![2], vec![1.0, f32::NAN]);
    assert_eq!(max_abs_diff(&a, &b), f64::INFINITY);
    assert_eq!(max_abs_diff(&b, &b), 0.0);
}
