"""Phi-3 LongRoPE against transformers (tests/fixtures/phi3, original context 8 tokens).

transformers picks the factors per forward pass: the long ones for every position once
max(position_ids) + 1 > original_max_position_embeddings, the short ones otherwise.  The
fixture's 12-token prompt (reference.json logits and greedy tokens, checked for every build
by test_fixtures.py) uses the long factors; reference.json's short_prompt (the first 8
tokens) the short ones.  Here: the short prompt in one pass, and the same logits through the
KV cache (prefill 5 tokens, decode 3), on every build.

Not covered, because no KV-cache graph can match it: a cached decode that crosses the
boundary (transformers recomputes the whole sequence with the long factors there; the cache
holds keys and values computed with the short ones)."""

from __future__ import annotations

import numpy as np
import pytest

from ort_helpers import FIXTURES_DIR, assert_close, load_config, load_reference, max_abs_diff, model_dims
from test_fixtures import BUILDS, TOL, _ids, empty_past, run

NAME = "phi3"
per_build = pytest.mark.parametrize("ep,dtype", BUILDS, ids=_ids(BUILDS))


def dims() -> dict:
    return model_dims(load_config(FIXTURES_DIR / NAME))


def test_references_sit_on_both_sides_of_the_original_context():
    ref = load_reference(NAME)
    orig = int(load_config(FIXTURES_DIR / NAME)["rope_scaling"]["original_max_position_embeddings"])
    assert len(ref["input_ids"]) > orig
    assert len(ref["short_prompt"]["input_ids"]) == orig
    assert ref["short_prompt"]["input_ids"] == ref["input_ids"][:orig]
    # The factor sets differ enough to tell apart: the shared prefix's logits differ.
    diff = max_abs_diff(ref["short_prompt"]["logits"], ref["logits"][:orig])
    assert diff > 1e-2, diff


@per_build
def test_short_prompt_prefill(session_for, ep, dtype):
    ref = load_reference(NAME)["short_prompt"]
    d = dims()
    n = len(ref["input_ids"])
    logits, _ = run(session_for(NAME, dtype, ep), d, [ref["input_ids"]], np.ones((1, n)), np.arange(n)[None],
                    empty_past(d, dtype, 1))
    assert_close(logits[0], ref["logits"], TOL[dtype], f"--ep {ep} {dtype} short-factor prompt")


@per_build
def test_short_prompt_decode(session_for, ep, dtype):
    ref = load_reference(NAME)["short_prompt"]
    d = dims()
    sess = session_for(NAME, dtype, ep)
    ids = ref["input_ids"]
    k = 5
    logits, past = run(sess, d, [ids[:k]], np.ones((1, k)), np.arange(k)[None], empty_past(d, dtype, 1))
    assert_close(logits[0], ref["logits"][:k], TOL[dtype], f"--ep {ep} {dtype} prefill of {k}")
    for n in range(k + 1, len(ids) + 1):
        logits, past = run(sess, d, [[ids[n - 1]]], np.ones((1, n)), [[n - 1]], past)
        assert_close(logits[0, 0], ref["logits"][n - 1], TOL[dtype], f"--ep {ep} {dtype} decode at {n} tokens")
