"""Llama with dynamic NTK RoPE against transformers (tests/fixtures/llama-dynamic: factor 2 over an
original context of 32 = max_position_embeddings).

transformers takes a pass's length L = max(position_ids) + 1 and, once L > 32, rotates every
position of that pass with the base theta * (2 * L / 32 - 1) ** (d / (d - 2)).  mobius computes
the cos/sin tables in the graph from each pass's position_ids, so the package runs to
genai_config's context_length, 2 x 32 = 64.  reference.json holds, besides the 12-token prompt
(checked for every build by test_fixtures.py): long_prompt, one forward of 64 tokens; and
generation_logits, the logits of each step of transformers' KV-cache generate of the 32 greedy
tokens (to 43 positions).  Past 32 positions those steps differ from one forward over the same
tokens: each step rotates its new queries and keys with the base of its own length while the
cache keeps the rotations it was given.  Here: the 64-token forward and that decode on every
build, and onnxruntime-genai's greedy tokens across position 32."""

from __future__ import annotations

import numpy as np
import pytest

from ort_helpers import FIXTURES_DIR, load_config, load_reference, model_dims
from test_fixtures import (
    BUILDS,
    GENAI_BUILDS,
    TOL,
    _ids,
    assert_close,
    empty_past,
    genai_config,
    genai_greedy,
    genai_model,
    run,
)

NAME = "llama-dynamic"
per_build = pytest.mark.parametrize("ep,dtype", BUILDS, ids=_ids(BUILDS))
per_genai_build = pytest.mark.parametrize("ep,dtype", GENAI_BUILDS, ids=_ids(GENAI_BUILDS))


def dims() -> dict:
    return model_dims(load_config(FIXTURES_DIR / NAME))


def original_context() -> int:
    cfg = load_config(FIXTURES_DIR / NAME)
    assert cfg["rope_parameters"]["rope_type"] == "dynamic", cfg["rope_parameters"]
    assert cfg["rope_parameters"]["factor"] == 2.0, cfg["rope_parameters"]
    return int(cfg["max_position_embeddings"])


def test_references_cross_the_original_context():
    ref = load_reference(NAME)
    n = original_context()
    assert len(ref["long_prompt"]["input_ids"]) == 2 * n
    assert len(ref["input_ids"]) < n < len(ref["input_ids"]) + len(ref["greedy_tokens"])
    steps = np.array(ref["generation_logits"])
    assert steps.shape == (len(ref["greedy_tokens"]), ref["vocab_size"])
    assert (steps.argmax(-1) == ref["greedy_tokens"]).all()
    assert_close(steps[0], ref["logits"][-1], 1e-5, "the first step against the prompt's last logits")


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
    ref = load_reference(NAME)
    d = dims()
    sess = session_for(NAME, dtype, ep)
    ids, tokens, want = ref["input_ids"], ref["greedy_tokens"], ref["generation_logits"]
    k = len(ids)
    logits, past = run(sess, d, [ids], np.ones((1, k)), np.arange(k)[None], empty_past(d, dtype, 1))
    assert_close(logits[0, -1], want[0], TOL[dtype], f"--ep {ep} {dtype} prefill of {k}")
    for i, t in enumerate(tokens[:-1], start=1):
        n = k + i
        logits, past = run(sess, d, [[t]], np.ones((1, n)), [[n - 1]], past)
        assert_close(logits[0, 0], want[i], TOL[dtype], f"--ep {ep} {dtype} decode at {n} tokens")


@per_genai_build
def test_genai_greedy_across_the_original_context(built, ep, dtype):
    ref = load_reference(NAME)
    out = built("fixture", NAME, dtype, ep)
    assert genai_config(out)["model"]["context_length"] == 2 * original_context()
    want = ref["greedy_tokens"]
    got = genai_greedy(genai_model(out, ep), ref["input_ids"], len(want))
    if got != want:
        i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        top2 = np.sort(np.array(ref["generation_logits"][i]))[-2:]
        pytest.fail(f"--ep {ep} {dtype}: greedy token {i} (position {len(ref['input_ids']) + i}) is {got[i]}, "
                    f"transformers' {want[i]} (its top-2 margin there {top2[1] - top2[0]:.3g}): {got} != {want}")
