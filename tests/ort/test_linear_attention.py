"""The Gated DeltaNet fusion in onnxruntime (rewrites/fusion/linear_attention.rules and its
inverse, rewrites/inline/linear_attention.rules; docs/recurrent.md).

For each Gated DeltaNet fixture (qwen3_next, qwen3_5_text, qwen3_5_moe_text): the cpu build runs
each layer's recurrence as `com.microsoft::LinearAttention` and no `Scan`; a build for an EP file
based on cpu without `supports_linear_attention` keeps the `Scan`s and no LinearAttention; and the
fused model, `mobius optimize`d for that EP, has its LinearAttention calls back as `Scan`s. On
random inputs (a prompt of 3 tokens from a random state and cache, then one decode step), the
three models' outputs agree within 1e-4 (f32) in onnxruntime's CPU provider.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import pytest

from ort_helpers import FIXTURES_DIR, assert_close, run_mobius

FIXTURES = ["qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"]
TOL = 1e-4


def _ops(path: Path) -> collections.Counter:
    m = onnx.load(str(path), load_external_data=False)
    return collections.Counter(n.op_type for n in m.graph.node)


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _feeds(sess, past: int, tokens: int, vocab: int, rng: np.random.Generator) -> dict:
    dims = {"batch": 2, "sequence_len": tokens, "past_sequence_len": past, "past_seq_len + seq_len": past + tokens}
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims[d] for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, vocab, shape, dtype=np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones(shape, np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.broadcast_to(np.arange(past, past + tokens), shape).astype(np.int64)
        else:
            feeds[i.name] = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", FIXTURES)
def test_fused_standard_and_inlined_builds_agree(name: str, tmp_path: Path) -> None:
    src = FIXTURES_DIR / name
    ep_file = tmp_path / "cpu-scan.toml"
    ep_file.write_text('name = "cpu-scan"\nbase = "cpu"\nsupports_linear_attention = false\n')
    fused, scan, inlined = tmp_path / "fused", tmp_path / "scan", tmp_path / "inlined"
    run_mobius(["build", "--config", str(src), "--ep", "cpu", "--dtype", "f32", str(fused)])
    run_mobius(["build", "--config", str(src), "--ep-file", str(ep_file), "--dtype", "f32", str(scan)])
    run_mobius(["optimize", str(fused / "model.onnx"), str(inlined), "--ep-file", str(ep_file)])

    counts = {k: _ops(p / "model.onnx") for k, p in [("fused", fused), ("scan", scan), ("inlined", inlined)]}
    assert counts["fused"]["LinearAttention"] > 0 and counts["fused"]["Scan"] == 0, counts["fused"]
    assert counts["scan"]["Scan"] == counts["fused"]["LinearAttention"], counts["scan"]
    assert counts["scan"]["LinearAttention"] == 0
    assert counts["inlined"]["Scan"] == counts["fused"]["LinearAttention"], counts["inlined"]
    assert counts["inlined"]["LinearAttention"] == 0

    sessions = {k: _session(p / "model.onnx") for k, p in [("fused", fused), ("scan", scan), ("inlined", inlined)]}
    vocab = onnx.load(str(fused / "model.onnx"), load_external_data=False).graph.output[0].type.tensor_type.shape.dim[-1].dim_value
    rng = np.random.default_rng(0)
    for past, tokens in [(0, 3), (4, 1)]:
        feeds = _feeds(sessions["scan"], past, tokens, vocab, rng)
        want = dict(zip([o.name for o in sessions["scan"].get_outputs()], sessions["scan"].run(None, feeds)))
        for kind in ("fused", "inlined"):
            sess = sessions[kind]
            got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            assert got.keys() == want.keys()
            for out, value in want.items():
                assert_close(got[out], value, TOL, f"{name} {kind} {out} (past {past}, {tokens} tokens)")
