"""`mobius build --features prune-lm-head`: the LM head sees the last position only.

Checked against onnxruntime: for several decoder fixtures x EPs the pruned build's
`logits` ([batch, 1, vocab]) equal the full build's logits at the last position, on a
prefill of a left-padded batch and on a decode step; onnxruntime-genai generates the same
greedy tokens from both builds.  With right padding the pruned logits of a short row are
those of its last (pad) position, as `--help` says: the test pins that too.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ort_helpers import FIXTURES_DIR, load_config, load_reference, model_dims, run_mobius

NAMES = ["llama", "qwen2", "gemma2", "phi", "gpt2", "granite", "qwen3_moe"]
EPS = ["default", "cpu", "onnx-standard", "qnn"]
TOL = 1e-5


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    cache = {}

    def get(name: str, ep: str | None, prune: bool):
        key = (name, ep, prune)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{name}-{ep}-{'pruned' if prune else 'full'}")
            args = ["build", "--config", str(FIXTURES_DIR / name), str(out), "--dtype", "f32", "-q", "--overwrite"]
            if ep is not None:
                args += ["--ep", ep]
            if prune:
                args += ["--features", "prune-lm-head"]
            run_mobius(args)
            cache[key] = out
        return cache[key]

    return get


def session(out):
    return ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])


def forward(sess, dims, ids, mask, past):
    """One pass; positions from the mask (left padding), fed when the graph declares them."""
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.asarray(mask, dtype=np.int64)
    pos = np.maximum(np.cumsum(mask, axis=1) - 1, 0)[:, -ids.shape[1]:]
    feed = {"input_ids": ids, "attention_mask": mask, **past}
    if any(i.name == "position_ids" for i in sess.get_inputs()):
        feed["position_ids"] = pos
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(None, feed)))
    present = {}
    for i in range(dims["layers"]):
        present[f"past_key_values.{i}.key"] = outs[f"present.{i}.key"]
        present[f"past_key_values.{i}.value"] = outs[f"present.{i}.value"]
    return outs["logits"], present


def empty_past(dims, batch):
    z = np.zeros((batch, dims["kv_heads"], 0, dims["head_dim"]), dtype=np.float32)
    return {f"past_key_values.{i}.{kv}": z for i in range(dims["layers"]) for kv in ("key", "value")}


def prompt_batch(name):
    """The reference prompt and a shorter row left-padded to its length."""
    ids = load_reference(name)["input_ids"]
    short = ids[2:]
    rows = [ids, [0, 0] + short]
    mask = [[1] * len(ids), [0, 0] + [1] * len(short)]
    return rows, mask


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("name", NAMES)
def test_pruned_logits_are_the_last_position(build, name, ep):
    dims = model_dims(load_config(FIXTURES_DIR / name))
    full, pruned = session(build(name, ep, False)), session(build(name, ep, True))
    declared = onnx.load(str(build(name, ep, True) / "model.onnx"), load_external_data=False)
    shape = next(o for o in declared.graph.output if o.name == "logits").type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in shape] == ["batch", 1, dims["vocab"]]

    ids, mask = prompt_batch(name)
    want, past_full = forward(full, dims, ids, mask, empty_past(dims, 2))
    got, past_pruned = forward(pruned, dims, ids, mask, empty_past(dims, 2))
    assert got.shape == (2, 1, dims["vocab"])
    np.testing.assert_allclose(got[:, 0], want[:, -1], rtol=0, atol=TOL, err_msg=f"{name} --ep {ep} prefill")
    for k in past_full:
        np.testing.assert_array_equal(past_pruned[k], past_full[k], err_msg=f"{name} --ep {ep} {k}")

    step = np.argmax(want[:, -1], axis=-1)[:, None]
    mask2 = np.concatenate([np.asarray(mask), np.ones((2, 1), dtype=np.int64)], axis=1)
    want2, _ = forward(full, dims, step, mask2, past_full)
    got2, _ = forward(pruned, dims, step, mask2, past_pruned)
    assert got2.shape == (2, 1, dims["vocab"])
    np.testing.assert_allclose(got2[:, 0], want2[:, -1], rtol=0, atol=TOL, err_msg=f"{name} --ep {ep} decode")


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_right_padded_row_gets_its_pad_position(build, name):
    """Documented limit: with right padding the last position of a short row is a pad, so the
    pruned logits are the full build's at that pad position, not at the row's last token."""
    dims = model_dims(load_config(FIXTURES_DIR / name))
    full, pruned = session(build(name, "cpu", False)), session(build(name, "cpu", True))
    ids = load_reference(name)["input_ids"]
    rows = [ids, ids[:-2] + [0, 0]]
    mask = [[1] * len(ids), [1] * (len(ids) - 2) + [0, 0]]
    feed_past = empty_past(dims, 2)
    pos = np.tile(np.arange(len(ids)), (2, 1))
    feeds = {"input_ids": np.array(rows, dtype=np.int64), "attention_mask": np.array(mask, dtype=np.int64), **feed_past}
    if any(i.name == "position_ids" for i in full.get_inputs()):
        feeds["position_ids"] = pos
    want = full.run(["logits"], feeds)[0]
    got = pruned.run(["logits"], feeds)[0]
    np.testing.assert_allclose(got[:, 0], want[:, -1], rtol=0, atol=TOL)
    assert not np.allclose(got[1, 0], want[1, len(ids) - 3], atol=1e-3), "the pad position's logits should differ"


@pytest.mark.parametrize("ep", [None, "cpu", "onnx-standard"])
@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma2", "phi3"])
def test_genai_greedy_matches_the_full_build(build, name, ep):
    import onnxruntime_genai as og

    ids = load_reference(name)["input_ids"]
    count = 16
    tokens = []
    for prune in (False, True):
        model = og.Model(str(build(name, ep, prune)))
        total = len(ids) + count
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        gen = og.Generator(model, params)
        gen.append_tokens(np.array(ids, dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
        tokens.append(gen.get_sequence(0).tolist()[len(ids):])
    assert len(tokens[1]) == count
    assert tokens[1] == tokens[0], f"{name} --ep {ep}: pruned {tokens[1]} vs full {tokens[0]}"
