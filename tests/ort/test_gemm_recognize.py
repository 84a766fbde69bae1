"""GemmAsMatMul (rewrites/recognize/gemm.rules) against onnxruntime: how Gemm's rounding
differs from MatMul then Add (the claim in the rule file), and an exported Linear
(`Reshape(x, [-1, K])`, `Gemm`, `Reshape` back) followed by Gelu optimized for the CPU EP into
MatMul + BiasGelu that computes what the export computes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_helpers import run_mobius


def _session(model_or_path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _two_d(nodes, k, n, w, b, opset=18):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("k", [16, 64, 256, 257, 768, 1024])
def test_gemm_rounds_like_matmul_then_add_up_to_one_rounding_per_block(k):
    rng = np.random.default_rng(k)
    m, n = 37, 96
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    gemm = _two_d([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], k, n, w, b)
    matmul_add = _two_d(
        [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])], k, n, w, b
    )
    got = _session(gemm).run(None, {"x": x})[0]
    want = _session(matmul_add).run(None, {"x": x})[0]
    if k <= 256:
        # MLAS adds the bias to one block of up to 256 products: the same roundings.
        np.testing.assert_array_equal(got, want)
    else:
        # Each further block of 256 is added to a sum that already holds the bias: at most one
        # rounding of |b| + Σ|x·w| per block apart.
        blocks = -(-k // 256)
        scale = (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64) + np.abs(b)).astype(np.float32)
        bound = blocks * np.spacing(scale)
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        assert (diff <= bound).all(), float((diff / bound).max())
        assert (diff > 0).any(), "the rule file says the two differ beyond 256 products"


def test_exported_linear_then_gelu_becomes_matmul_bias_gelu(tmp_path):
    rng = np.random.default_rng(0)
    k, n = 64, 256
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.1
    b = rng.standard_normal(n).astype(np.float32)
    shape = [helper.make_node("Shape", ["x"], [f"d{i}"], start=i, end=i + 1) for i in range(2)]
    nodes = [
        helper.make_node("Constant", [], ["flat"], value=numpy_helper.from_array(np.array([-1, k], np.int64))),
        helper.make_node("Reshape", ["x", "flat"], ["rows"], allowzero=1),
        helper.make_node("Gemm", ["rows", "w", "b"], ["lin"], alpha=1.0, beta=1.0, transA=0, transB=0),
        *shape,
        helper.make_node("Constant", [], ["last"], value=numpy_helper.from_array(np.array([n], np.int64))),
        helper.make_node("Concat", ["d0", "d1", "last"], ["target"], axis=0),
        helper.make_node("Reshape", ["lin", "target"], ["h"], allowzero=1),
        helper.make_node("Gelu", ["h"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    src = tmp_path / "linear.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(src))
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", "cpu"])
    model = onnx.load(str(out / "model.onnx"))
    assert sorted(n.op_type for n in model.graph.node) == ["BiasGelu", "MatMul"]
    x = rng.standard_normal((2, 5, k)).astype(np.float32)
    want = _session(src).run(None, {"x": x})[0]
    got = _session(out / "model.onnx").run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
