"""The suite's comparison helper itself (ort_helpers.assert_close, max_abs_diff): NaN or an
infinity on one side fails, the same non-finite value at the same position is equal, shapes must
match, and a failure names the worst element."""

from __future__ import annotations

import numpy as np
import pytest

from ort_helpers import assert_close, max_abs_diff

NAN, INF = np.nan, np.inf


@pytest.mark.parametrize("got,want", [([NAN, 1.0], [0.0, 1.0]), ([0.0, 1.0], [NAN, 1.0])], ids=["got", "want"])
def test_nan_on_either_side_fails(got, want):
    with pytest.raises(AssertionError, match=r"1 of 2 elements .* worst at \(0,\)"):
        assert_close(got, want, 1e9, "y")
    assert max_abs_diff(got, want) == INF


def test_an_all_nan_output_fails_everywhere():
    with pytest.raises(AssertionError, match="3 of 3"):
        assert_close(np.full(3, NAN, np.float32), np.ones(3, np.float32), 1.0, "y")


def test_the_same_non_finite_value_at_the_same_position_is_equal():
    assert assert_close([NAN, INF, -INF, 1.0], [NAN, INF, -INF, 1.0], 0.0, "y") == 0.0
    for got, want in [([NAN, 1.0], [1.0, NAN]), ([INF], [-INF]), ([INF], [NAN]), ([INF], [1e308])]:
        with pytest.raises(AssertionError):
            assert_close(got, want, 1e300, "y")


def test_shapes_must_match():
    with pytest.raises(AssertionError, match=r"y: shape \(3, 2\), expected \(2, 3\)"):
        assert_close(np.zeros((3, 2)), np.zeros((2, 3)), 1.0, "y")


def test_the_worst_element_is_named_and_the_largest_difference_returned():
    got = np.array([[0.0, 0.1, 0.0], [0.0, 0.0, -0.5]])
    with pytest.raises(AssertionError, match=r"logits: 2 of 6 .* worst at \(1, 2\): got -0.5, expected 0.0"):
        assert_close(got, np.zeros((2, 3)), 0.05, "logits")
    assert assert_close(got, np.zeros((2, 3)), 0.5, "logits") == 0.5


def test_the_relative_part_scales_with_each_expected_element():
    assert_close([10.9, 1.0], [10.0, 1.0], 0.0, "y", rtol=0.1)
    with pytest.raises(AssertionError, match=r"worst at \(1,\)"):
        assert_close([10.0, 1.2], [10.0, 1.0], 0.0, "y", rtol=0.1)
