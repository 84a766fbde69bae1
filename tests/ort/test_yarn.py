"""Qwen2 with YaRN RoPE against transformers (tests/fixtures/qwen2-yarn: factor 4, original
context 32 of 128 positions).

YaRN's frequencies and cos/sin scale do not depend on the sequence length, so one table
serves every position and a KV-cache decode may cross the original context.  reference.json
holds the prompt (12 tokens, checked for every build by test_fixtures.py, whose greedy
continuation runs to 44 positions) and long_prompt: the prompt and its 32 greedy tokens in one
transformers forward.  Here: long_prompt in one pass, and the same logits through the KV cache
(prefill 28 tokens, then one token at a time across position 32), on every build."""

from __future__ import annotations

import numpy as np
import pytest

from ort_helpers import FIXTURES_DIR, assert_close, load_config, load_reference, model_dims
from test_fixtures import BUILDS, TOL, _ids, empty_past, run

NAME = "qwen2-yarn"
PREFILL = 28
per_build = pytest.mark.parametrize("ep,dtype", BUILDS, ids=_ids(BUILDS))


def dims() -> dict:
    return model_dims(load_config(FIXTURES_DIR / NAME))


def original_context() -> int:
    rope = load_config(FIXTURES_DIR / NAME)["rope_parameters"]
    assert rope["rope_type"] == "yarn", rope
    return int(rope["original_max_position_embeddings"])


def test_long_prompt_crosses_the_original_context():
    ref = load_reference(NAME)
    long = ref["long_prompt"]
    assert PREFILL < original_context() < len(long["input_ids"])
    assert long["input_ids"] == ref["input_ids"] + ref["greedy_tokens"]
    n = len(ref["input_ids"])
    assert_close(long["logits"][:n], ref["logits"], 1e-5, "long_prompt's prefix against the prompt's logits")


@per_build
def test_long_prompt_prefill(session_for, ep, dtype):
    ref = load_reference(NAME)["long_prompt"]
    d = dims()
    n = len(ref["input_ids"])
    logits, _ = run(session_for(NAME, dtype, ep), d, [ref["input_ids"]], np.ones((1, n)), np.arange(n)[None],
                    empty_past(d, dtype, 1))
    assert_close(logits[0], ref["logits"], TOL[dtype], f"--ep {ep} {dtype} {n}-token prompt")


@per_build
def test_decode_across_the_original_context(session_for, ep, dtype):
    ref = load_reference(NAME)["long_prompt"]
    d = dims()
    sess = session_for(NAME, dtype, ep)
    ids = ref["input_ids"]
    k = PREFILL
    logits, past = run(sess, d, [ids[:k]], np.ones((1, k)), np.arange(k)[None], empty_past(d, dtype, 1))
    assert_close(logits[0], ref["logits"][:k], TOL[dtype], f"--ep {ep} {dtype} prefill of {k}")
    for n in range(k + 1, len(ids) + 1):
        logits, past = run(sess, d, [[ids[n - 1]]], np.ones((1, n)), [[n - 1]], past)
        assert_close(logits[0, 0], ref["logits"][n - 1], TOL[dtype], f"--ep {ep} {dtype} decode at {n} tokens")
