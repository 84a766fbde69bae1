"""`mobius optimize --ep cpu` on torch.onnx exports of single norms (tests/fixtures/recognize,
made by scripts/make_recognize_fixtures.py): the decomposed norm becomes RMSNormalization /
LayerNormalization, the saved model declares the opset those need, onnxruntime loads it and it
computes what the export computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from ort_helpers import FIXTURES_DIR, run_mobius

CASES = [
    ("rms_norm_dynamo.onnx", np.float32, "RMSNormalization", 23, 1e-5),
    ("rms_norm_f16_legacy.onnx", np.float16, "RMSNormalization", 23, 2e-3),
    ("layer_norm_manual_dynamo.onnx", np.float32, "LayerNormalization", 18, 1e-5),
]


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name,dtype,op,opset,tol", CASES, ids=[c[0] for c in CASES])
def test_exported_norm_is_recognised_and_runs_in_onnxruntime(tmp_path, name, dtype, op, opset, tol):
    src = FIXTURES_DIR / "recognize" / name
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", "cpu"])
    model = onnx.load(str(out / "model.onnx"))
    assert [n.op_type for n in model.graph.node] == [op]
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(dtype)
    want = _session(src).run(None, {"x": x})[0].astype(np.float64)
    got = _session(out / "model.onnx").run(None, {"x": x})[0].astype(np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=tol, rtol=tol)
