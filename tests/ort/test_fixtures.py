"""Build every tests/fixtures/<name> checkpoint with `mobius build` and check the
result with onnx, onnxruntime and onnxruntime-genai against reference.json
(written by scripts/make_fixtures.py from the transformers model)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from ort_helpers import (
    FIXTURES_DIR,
    MIN_FIXTURES,
    NP_DTYPES,
    fixture_names,
    load_config,
    load_reference,
    model_dims,
)
from contract import check_model_file, contract_errors

NAMES = fixture_names()
DTYPES = ["f32", "f16"]
# max |logit - reference| allowed per build dtype
TOL = {"f32": 1e-4, "f16": 2e-2}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def dims_of(name: str) -> dict:
    return model_dims(load_config(FIXTURES_DIR / name))


def pad_id(name: str) -> int:
    cfg = load_config(FIXTURES_DIR / name)
    p = cfg.get("pad_token_id")
    return 0 if p is None else int(p)


def empty_past(dims: dict, dtype: str, batch: int) -> dict:
    z = np.zeros((batch, dims["kv_heads"], 0, dims["head_dim"]), dtype=NP_DTYPES[dtype])
    feed = {}
    for i in range(dims["layers"]):
        feed[f"past_key_values.{i}.key"] = z
        feed[f"past_key_values.{i}.value"] = z
    return feed


def run(sess, dims: dict, ids, mask, pos, past: dict):
    feed = {
        "input_ids": np.asarray(ids, dtype=np.int64),
        "attention_mask": np.asarray(mask, dtype=np.int64),
        "position_ids": np.asarray(pos, dtype=np.int64),
        **past,
    }
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(None, feed)))
    presents = {}
    for i in range(dims["layers"]):
        presents[f"past_key_values.{i}.key"] = outs[f"present.{i}.key"]
        presents[f"past_key_values.{i}.value"] = outs[f"present.{i}.value"]
    return outs["logits"], presents


def assert_close(got, want, tol: float, what: str) -> None:
    got = np.asarray(got, dtype=np.float32)
    want = np.asarray(want, dtype=np.float32)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite logits"
    err = float(np.abs(got - want).max())
    assert err <= tol, f"{what}: max abs error {err:.3g} > {tol:g}"


def test_enough_fixtures():
    assert len(NAMES) >= MIN_FIXTURES, (
        f"expected at least {MIN_FIXTURES} fixtures with reference.json under {FIXTURES_DIR}, found {NAMES}"
    )


def test_reference_files_are_consistent():
    for name in NAMES:
        ref = load_reference(name)
        dims = dims_of(name)
        assert ref["dtype"] in ("f32", "bf16"), name
        assert len(ref["logits"]) == len(ref["input_ids"]), name
        assert all(len(row) == dims["vocab"] for row in ref["logits"]), name
        assert len(ref["greedy_tokens"]) >= 24, name
        assert int(np.argmax(ref["logits"][-1])) == ref["greedy_tokens"][0], name


# ---------------------------------------------------------------- structure
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_onnx_checker(built, name, dtype):
    check_model_file(built("fixture", name, dtype) / "model.onnx")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_graph_contract(built, name, dtype):
    model = onnx.load(str(built("fixture", name, dtype) / "model.onnx"), load_external_data=False)
    errs = contract_errors(model, dims_of(name), dtype)
    assert not errs, "\n".join(errs)


@pytest.mark.parametrize("name", NAMES)
def test_package_files(built, name):
    out = built("fixture", name, "f32")
    for f in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (out / f).is_file(), f"{f} missing from {out}: {sorted(p.name for p in out.iterdir())}"
    for f in TOKENIZER_FILES:
        if (FIXTURES_DIR / name / f).is_file():
            assert (out / f).is_file(), f"tokenizer file {f} not copied into {out}"
            assert (out / f).read_bytes() == (FIXTURES_DIR / name / f).read_bytes(), f"{f} differs from the fixture's"
    gc = json.loads((out / "genai_config.json").read_text())
    dims = dims_of(name)
    cfg = load_config(FIXTURES_DIR / name)
    dec = gc["model"]["decoder"]
    assert dec["filename"] == "model.onnx"
    assert dec["num_hidden_layers"] == dims["layers"]
    assert dec["num_key_value_heads"] == dims["kv_heads"]
    assert dec["num_attention_heads"] == dims["heads"]
    assert dec["head_size"] == dims["head_dim"]
    assert dec["hidden_size"] == dims["hidden"]
    assert gc["model"]["vocab_size"] == dims["vocab"]
    eos = gc["model"]["eos_token_id"]
    assert cfg["eos_token_id"] in (eos if isinstance(eos, list) else [eos])


# ---------------------------------------------------------------- onnxruntime
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_prefill_logits(session_for, name, dtype):
    ref = load_reference(name)
    dims = dims_of(name)
    ids = np.array([ref["input_ids"]])
    n = ids.shape[1]
    logits, presents = run(
        session_for(name, dtype), dims, ids, np.ones((1, n)), np.arange(n)[None], empty_past(dims, dtype, 1)
    )
    assert logits.dtype == NP_DTYPES[dtype]
    assert_close(logits[0], ref["logits"], TOL[dtype], f"{name} {dtype} prefill")
    for k, v in presents.items():
        assert v.shape == (1, dims["kv_heads"], n, dims["head_dim"]), (k, v.shape)
        assert v.dtype == NP_DTYPES[dtype], (k, v.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_decode_step(session_for, name, dtype):
    """Prefill n-1 tokens, then decode the last one from the returned cache."""
    ref = load_reference(name)
    dims = dims_of(name)
    sess = session_for(name, dtype)
    ids = ref["input_ids"]
    n = len(ids)
    _, past = run(sess, dims, [ids[:-1]], np.ones((1, n - 1)), np.arange(n - 1)[None], empty_past(dims, dtype, 1))
    logits, presents = run(sess, dims, [[ids[-1]]], np.ones((1, n)), [[n - 1]], past)
    assert logits.shape == (1, 1, dims["vocab"]), logits.shape
    assert_close(logits[0, 0], ref["logits"][-1], TOL[dtype], f"{name} {dtype} decode step")
    for v in presents.values():
        assert v.shape == (1, dims["kv_heads"], n, dims["head_dim"]), v.shape


def left_padded_batch(ref: dict, pad: int, n_pad: int = 2):
    """Row 0: the prompt left-padded by n_pad; row 1: prompt + first n_pad greedy
    tokens (no padding).  Position ids as transformers computes them."""
    ids = ref["input_ids"]
    row0 = [pad] * n_pad + ids
    row1 = ids + ref["greedy_tokens"][:n_pad]
    mask = np.array([[0] * n_pad + [1] * len(ids), [1] * len(row1)], dtype=np.int64)
    pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    return np.array([row0, row1]), mask, pos


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_batch_left_padded(session_for, name, dtype):
    ref = load_reference(name)
    dims = dims_of(name)
    n = len(ref["input_ids"])
    ids, mask, pos = left_padded_batch(ref, pad_id(name))
    logits, _ = run(session_for(name, dtype), dims, ids, mask, pos, empty_past(dims, dtype, 2))
    assert logits.shape == (2, n + 2, dims["vocab"]), logits.shape
    assert_close(logits[0, 2:], ref["logits"], TOL[dtype], f"{name} {dtype} left-padded row")
    assert_close(logits[1, :n], ref["logits"], TOL[dtype], f"{name} {dtype} unpadded row of padded batch")
    if dtype == "f32":
        assert int(np.argmax(logits[1, n])) == ref["greedy_tokens"][1]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_batch_left_padded_decode(session_for, name, dtype):
    """Padded prefill of the prompt minus its last token, then one decode step."""
    ref = load_reference(name)
    dims = dims_of(name)
    sess = session_for(name, dtype)
    n = len(ref["input_ids"])
    ids, mask, pos = left_padded_batch(ref, pad_id(name))
    # prefill everything but the last column, decode the last column
    _, past = run(sess, dims, ids[:, :-1], mask[:, :-1], pos[:, :-1], empty_past(dims, dtype, 2))
    logits, _ = run(sess, dims, ids[:, -1:], mask, pos[:, -1:], past)
    assert logits.shape == (2, 1, dims["vocab"]), logits.shape
    assert_close(logits[0, 0], ref["logits"][-1], TOL[dtype], f"{name} {dtype} padded decode row")
    if dtype == "f32":
        assert int(np.argmax(logits[1, 0])) == ref["greedy_tokens"][2]


# ---------------------------------------------------------------- onnxruntime-genai
@pytest.mark.parametrize("name", NAMES)
def test_genai_tokenizer(built, name):
    import onnxruntime_genai as og

    ref = load_reference(name)
    model = og.Model(str(built("fixture", name, "f32")))
    tok = og.Tokenizer(model)
    assert tok.encode(ref["prompt"]).tolist() == ref["input_ids"]


@pytest.mark.parametrize("name", NAMES)
def test_genai_greedy(built, name):
    import onnxruntime_genai as og

    ref = load_reference(name)
    ids = ref["input_ids"]
    want = ref["greedy_tokens"]
    total = len(ids) + len(want)
    model = og.Model(str(built("fixture", name, "f32")))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(ids, dtype=np.int32))
    steps = 0
    while not gen.is_done():
        gen.generate_next_token()
        steps += 1
        assert steps <= len(want), "generator did not stop at max_length"
    seq = gen.get_sequence(0).tolist()
    assert seq[: len(ids)] == ids
    assert seq[len(ids):] == want
