"""`mobius optimize --ep cpu` on rotate-half RoPE graphs in the spelling torch.onnx exports
(`x * cos + rotate_half(x) * sin`, the tables `Cos(Concat(f, f))` unsqueezed on axis 1): the
chain becomes ONNX RotaryEmbedding (4-D input, [batch, seq, D/2] caches, no position_ids), the
saved model declares opset 23+, and onnxruntime computes what it computed on the original graph,
for symbolic batch / sequence sizes fed at two different values. Near misses stay as they are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_helpers import run_mobius

H, D = 3, 16
I64_MAX = np.iinfo(np.int64).max


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class _Graph:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, value, dtype=np.int64):
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op, inputs, **attrs):
        self.n += 1
        out = f"{op.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out


def _rope(g: _Graph, x: str, f: str, d: int, *, scale=None, cast_to=None, swapped=False, other=None):
    """x * cos + rotate_half(x) * sin over x [B, H, S, d] and angles f [B, S, d/2]."""
    tables = []
    for op in ("Cos", "Sin"):
        t = g.op(op, [g.op("Concat", [f, other or f], axis=-1)])
        if scale is not None:
            t = g.op("Mul", [t, g.const(scale, np.float32)])
        if cast_to is not None:
            t = g.op("Cast", [t], to=cast_to)
        tables.append(g.op("Unsqueeze", [t, g.const([1])]))
    cos, sin = tables
    lo = g.op("Slice", [x, g.const([0]), g.const([d // 2]), g.const([3]), g.const([1])])
    hi = g.op("Slice", [x, g.const([d // 2]), g.const([I64_MAX]), g.const([3]), g.const([1])])
    rot = g.op("Concat", [g.op("Neg", [lo]), hi] if swapped else [g.op("Neg", [hi]), lo], axis=-1)
    return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rot, sin])])


def _model(path: Path, build, x_type=TensorProto.FLOAT, partial=None):
    g = _Graph()
    y = build(g)
    width = (partial or D) // 2
    inputs = [
        helper.make_tensor_value_info("x", x_type, ["batch", H, "seq", D]),
        helper.make_tensor_value_info("f", TensorProto.FLOAT, ["batch", "seq", width]),
        helper.make_tensor_value_info("o", TensorProto.FLOAT, ["batch", "seq", width]),
    ]
    out = [helper.make_tensor_value_info(y, x_type, ["batch", H, "seq", D])]
    graph = helper.make_graph(g.nodes, "rope", inputs, out, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(path))


def _partial(g: _Graph, r: int):
    rot = g.op("Slice", ["x", g.const([0]), g.const([r]), g.const([-1]), g.const([1])])
    rest = g.op("Slice", ["x", g.const([r]), g.const([I64_MAX]), g.const([-1]), g.const([1])])
    return g.op("Concat", [_rope(g, rot, "f", r), rest], axis=-1)


CASES = {
    # name: (build, x dtype, partial width, RotaryEmbedding count, tolerance)
    "dynamo": (lambda g: _rope(g, "x", "f", D), TensorProto.FLOAT, None, 1, 1e-5),
    "legacy_scale_cast": (lambda g: _rope(g, "x", "f", D, scale=1.0, cast_to=TensorProto.FLOAT),
                          TensorProto.FLOAT, None, 1, 1e-5),
    "attention_scaling": (lambda g: _rope(g, "x", "f", D, scale=0.8), TensorProto.FLOAT, None, 1, 1e-5),
    "f16_cast_tables": (lambda g: _rope(g, "x", "f", D, cast_to=TensorProto.FLOAT16),
                        TensorProto.FLOAT16, None, 1, 2e-3),
    "partial_8_of_16": (lambda g: _partial(g, 8), TensorProto.FLOAT, 8, 1, 1e-5),
    "near_miss_swapped_halves": (lambda g: _rope(g, "x", "f", D, swapped=True), TensorProto.FLOAT, None, 0, 0),
    "near_miss_unequal_halves": (lambda g: _rope(g, "x", "f", D, other="o"), TensorProto.FLOAT, None, 0, 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rotate_half_rope_in_onnxruntime(tmp_path, name):
    build, x_type, partial, want_rotary, tol = CASES[name]
    src = tmp_path / "rope.onnx"
    _model(src, build, x_type, partial)
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", "cpu"])
    model = onnx.load(str(out / "model.onnx"))
    rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == want_rotary, [n.op_type for n in model.graph.node]
    if rotary:
        assert len(rotary[0].input) == 3 and rotary[0].input[0] == "x"
        assert {o.domain: o.version for o in model.opset_import}[""] >= 23
        assert "Neg" not in {n.op_type for n in model.graph.node}
        rd = {a.name: a.i for a in rotary[0].attribute}.get("rotary_embedding_dim", 0)
        assert rd == (partial or 0)
    onnx.checker.check_model(model, full_check=True)
    x_dtype = helper.tensor_dtype_to_np_dtype(x_type)
    width = (partial or D) // 2
    rng = np.random.default_rng(0)
    for batch, seq in [(2, 5), (1, 1)]:
        feeds = {
            "x": rng.standard_normal((batch, H, seq, D)).astype(x_dtype),
            "f": rng.uniform(-50, 50, (batch, seq, width)).astype(np.float32),
            "o": rng.uniform(-50, 50, (batch, seq, width)).astype(np.float32),
        }
        want = _session(src).run(None, feeds)[0].astype(np.float64)
        got = _session(out / "model.onnx").run(None, {k: v for k, v in feeds.items()
                                                      if k in {i.name for i in model.graph.input}})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want, atol=tol, rtol=tol)
