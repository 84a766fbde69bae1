"""`mobius optimize --ep cpu` on the head layout torch.onnx exports write around attention: 3-D
projections q/k/v [batch, seq, H·D] split into heads by Reshape (target computed from Shape, with
−1 heads) and Transpose [0, 2, 1, 3], the opset-23 RotaryEmbedding (q, k) and Attention (GQA
heads, float mask, KV cache) on the 4-D views, the output merged back by Transpose and Reshape.
The optimized graph runs the 3-D RotaryEmbedding (num_heads) and Attention
(q_num_heads/kv_num_heads) on the projections themselves, with no Transpose left, and
onnxruntime computes on it what it computed on the original (its 4-D kernels), for symbolic
sizes fed at two values. Near misses keep their views.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_helpers import run_mobius

HQ, HKV, D = 4, 2, 16


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class _Graph:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, value):
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        return name

    def op(self, op, inputs, outputs=None, **attrs):
        self.n += 1
        outputs = outputs or [f"{op.lower()}_{self.n}"]
        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))
        return outputs[0]

    def target(self, x, tail):
        """[batch, seq] of x (read with Shape) ++ tail, as the dynamo exporter writes it."""
        batch = self.op("Shape", [x], start=0, end=1)
        seq = self.op("Shape", [x], start=1, end=2)
        return self.op("Concat", [batch, seq, self.const(tail)], axis=0)

    def view(self, x, perm=(0, 2, 1, 3)):
        split = self.op("Reshape", [x, self.target(x, [-1, D])])
        return self.op("Transpose", [split], perm=list(perm))


def _model(path: Path, *, rotary_heads=None, perm=(0, 2, 1, 3)):
    g = _Graph()
    rotary = {} if rotary_heads is None else {"num_heads": rotary_heads}
    q = g.op("RotaryEmbedding", [g.view("q", perm), "cos", "sin"], **rotary)
    k = g.op("RotaryEmbedding", [g.view("k", perm), "cos", "sin"])
    g.op("Attention", [q, k, g.view("v", perm), "mask", "past_key", "past_value"],
         ["y4", "present_key", "present_value"], scale=0.25)
    back = g.op("Transpose", ["y4"], perm=[0, 2, 1, 3])
    g.op("Reshape", [back, g.target("q", [-1])], ["y"])
    f32 = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("q", f32, ["batch", "seq", HQ * D]),
        helper.make_tensor_value_info("k", f32, ["batch", "seq", HKV * D]),
        helper.make_tensor_value_info("v", f32, ["batch", "seq", HKV * D]),
        helper.make_tensor_value_info("cos", f32, ["batch", "seq", D // 2]),
        helper.make_tensor_value_info("sin", f32, ["batch", "seq", D // 2]),
        helper.make_tensor_value_info("mask", f32, ["batch", 1, "seq", "past + seq"]),
        helper.make_tensor_value_info("past_key", f32, ["batch", HKV, "past", D]),
        helper.make_tensor_value_info("past_value", f32, ["batch", HKV, "past", D]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", f32, ["batch", "seq", HQ * D]),
        helper.make_tensor_value_info("present_key", f32, ["batch", HKV, "past + seq", D]),
        helper.make_tensor_value_info("present_value", f32, ["batch", HKV, "past + seq", D]),
    ]
    graph = helper.make_graph(g.nodes, "heads", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.save(model, str(path))


CASES = {
    # name: (model arguments, whether the views are absorbed)
    "export_layout": ({}, True),
    "rotary_num_heads_set": ({"rotary_heads": HQ}, True),
    "near_miss_rotary_num_heads_disagree": ({"rotary_heads": 2 * HQ}, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_head_views_absorbed_in_onnxruntime(tmp_path, name):
    kwargs, absorbed = CASES[name]
    src = tmp_path / "heads.onnx"
    _model(src, **kwargs)
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", "cpu"])
    model = onnx.load(str(out / "model.onnx"))
    ops = [n.op_type for n in model.graph.node]
    attention = [n for n in model.graph.node if n.op_type == "Attention"]
    assert len(attention) == 1, ops
    attrs = {a.name: a.i for a in attention[0].attribute if a.type == onnx.AttributeProto.INT}
    if absorbed:
        assert "Transpose" not in ops and "Reshape" not in ops, ops
        assert attrs.get("q_num_heads") == HQ and attrs.get("kv_num_heads") == HKV
        assert attention[0].input[2] == "v"
        rotary = [n for n in model.graph.node if n.op_type == "RotaryEmbedding"]
        assert sorted(n.input[0] for n in rotary) == ["k", "q"]
        heads = sorted({a.name: a.i for a in n.attribute}["num_heads"] for n in rotary)
        assert heads == [HKV, HQ]
    else:
        # q keeps its view (and so does the Attention); k's rotary alone is absorbed.
        assert "Transpose" in ops, ops
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(0)
    for batch, seq, past in [(2, 5, 3), (1, 1, 4)]:
        total = past + seq
        feeds = {
            "q": rng.standard_normal((batch, seq, HQ * D)),
            "k": rng.standard_normal((batch, seq, HKV * D)),
            "v": rng.standard_normal((batch, seq, HKV * D)),
            "cos": rng.uniform(-1, 1, (batch, seq, D // 2)),
            "sin": rng.uniform(-1, 1, (batch, seq, D // 2)),
            "mask": rng.uniform(-2, 0, (batch, 1, seq, total)),
            "past_key": rng.standard_normal((batch, HKV, past, D)),
            "past_value": rng.standard_normal((batch, HKV, past, D)),
        }
        feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
        want = _session(src).run(None, feeds)
        got = _session(out / "model.onnx").run(None, feeds)
        for w, o in zip(want, got):
            assert o.shape == w.shape
            np.testing.assert_allclose(o, w, atol=1e-5, rtol=1e-5)
