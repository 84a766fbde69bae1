"""A model whose graph outputs are declared with a type and no shape (ONNX's checker asks for
one, onnxruntime runs it without): `mobius run`, `optimize` and `verify` take it, and the
optimized model keeps the outputs as declared. onnxruntime is the truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ort_helpers import assert_close, run_mobius


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"]),
        helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0),
    ]
    g = helper.make_graph(
        nodes,
        "unshaped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_unshaped_outputs_run_optimize_and_verify(tmp_path: Path):
    import onnxruntime as ort

    src = tmp_path / "model.onnx"
    onnx.save(_model(), str(src))
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    want = dict(zip(["y", "s"], ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})))

    run_mobius(["run", str(src), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")])
    for name, w in want.items():
        assert_close(np.load(tmp_path / "out" / f"{name}.npy"), w, 1e-5, f"run {name}", rtol=1e-5)

    run_mobius(["optimize", str(src), str(tmp_path / "opt"), "--ep", "cpu"])
    optimized = onnx.load(str(tmp_path / "opt" / "model.onnx"))
    assert [(o.name, o.type.tensor_type.HasField("shape")) for o in optimized.graph.output] == [
        ("y", False),
        ("s", False),
    ]
    got = ort.InferenceSession(str(tmp_path / "opt" / "model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    for (name, w), g in zip(want.items(), got):
        assert_close(g, w, 1e-5, f"optimized {name}", rtol=1e-5)

    run_mobius(["verify", str(src), str(tmp_path / "opt" / "model.onnx")])
