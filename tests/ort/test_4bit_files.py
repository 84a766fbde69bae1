"""4-bit (int4 / uint4) initializers in ONNX files: onnx packs them two per byte (low
nibble first), inline and in external data. mobius reads both (`mobius run`) and writes them
back packed (`mobius optimize`), and onnxruntime loads what mobius wrote.

The model dequantizes each initializer (DequantizeLinear, per tensor), so its outputs show
every value; sizes are odd and even, inline and external.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ort_helpers import run_mobius

# name, type, shape: inline (odd, even) and external (odd, even) once saved with a 100-byte
# threshold
SPECS = [
    ("i4_inline_odd", ml_dtypes.int4, (5,)),
    ("u4_inline_even", ml_dtypes.uint4, (2, 3)),
    ("i4_external_odd", ml_dtypes.int4, (601,)),
    ("u4_external_even", ml_dtypes.uint4, (40, 25)),
]
EXTERNAL = {"i4_external_odd", "u4_external_even"}


def _model(folder: Path) -> Path:
    r = np.random.default_rng(4)
    nodes, inits, outs = [], [], []
    for name, dt, shape in SPECS:
        info = ml_dtypes.iinfo(dt)
        values = r.integers(int(info.min), int(info.max), shape, endpoint=True).astype(dt)
        inits += [numpy_helper.from_array(values, name), numpy_helper.from_array(np.float32(0.5), f"{name}_scale")]
        nodes.append(helper.make_node("DequantizeLinear", [name, f"{name}_scale"], [f"{name}_y"]))
        outs.append(helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "four_bit", [], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=11)
    folder.mkdir()
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=100)
    return path


def _run_ort(path: Path) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {})


def _initializers(path: Path) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in onnx.load(str(path), load_external_data=False).graph.initializer}


def test_source_model_has_packed_inline_and_external_4bit(tmp_path):
    """The premise of the other tests: onnx wrote what the names say."""
    inits = _initializers(_model(tmp_path / "src"))
    for name, _, shape in SPECS:
        t = inits[name]
        packed = (int(np.prod(shape)) + 1) // 2
        if name in EXTERNAL:
            assert t.data_location == TensorProto.EXTERNAL
            assert {e.key: e.value for e in t.external_data}["length"] == str(packed)
        else:
            assert t.data_location == TensorProto.DEFAULT and len(t.raw_data) == packed


def test_mobius_run_reads_inline_and_external_4bit(tmp_path):
    src = _model(tmp_path / "src")
    out = tmp_path / "out"
    run_mobius(["run", str(src), "--output-dir", str(out)])
    for (name, _, _), want in zip(SPECS, _run_ort(src)):
        got = np.load(out / f"{name}_y.npy")
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_mobius_writes_4bit_packed_and_onnxruntime_loads_it(tmp_path):
    src = _model(tmp_path / "src")
    dst = tmp_path / "dst"
    run_mobius(["optimize", str(src), str(dst), "--ep", "cpu"])
    written = dst / "model.onnx"
    for want, got in zip(_run_ort(src), _run_ort(written)):
        np.testing.assert_array_equal(got, want)
    before, after = _initializers(src), _initializers(written)
    for name, _, shape in SPECS:
        t = after[name]
        assert t.data_type == before[name].data_type, name
        packed = (int(np.prod(shape)) + 1) // 2
        if t.data_location == TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in t.external_data}
            assert entries["length"] == str(packed), (name, entries)
            data = (dst / entries["location"]).read_bytes()
            offset = int(entries["offset"])
            raw = data[offset:offset + packed]
        else:
            raw = t.raw_data
        assert len(raw) == packed, name
        ref = before[name]
        if ref.data_location == TensorProto.EXTERNAL:
            e = {x.key: x.value for x in ref.external_data}
            ref_raw = (src.parent / e["location"]).read_bytes()[int(e["offset"]):][:packed]
        else:
            ref_raw = ref.raw_data
        assert raw == ref_raw, f"{name}: packed bytes differ from onnx's"
