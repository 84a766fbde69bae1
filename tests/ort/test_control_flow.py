"""Models with control flow (`If`, `Loop`, `Scan`) through `mobius run`, `optimize` and `verify`.

Hand-made with onnx.helper: subgraphs that read values of the enclosing graph (one of them a
duplicate the optimizer merges away, so the subgraph must be renamed), an initializer inside a
subgraph (hoisted to the main graph), a nested `If` reading a value two scopes out, a `Loop`
with a trip count and a scan output, a `Scan` over rows. onnxruntime is the truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_helpers import assert_close, run_mobius, run_mobius_unchecked

OPSET = 21
H = 64
F = TensorProto.FLOAT


def _vi(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def control_flow_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32) / 8, "W")
    trips = numpy_helper.from_array(np.array(3, dtype=np.int64), "trips")
    state0 = numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "state0")

    # Nested branch: reads `a` from the main graph, two scopes out.
    inner_then = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["inner_out_t"])], "inner_then", [], [_vi("inner_out_t", F, [2, H])]
    )
    inner_else = helper.make_graph(
        [helper.make_node("Abs", ["a"], ["inner_out_e"])], "inner_else", [], [_vi("inner_out_e", F, [2, H])]
    )
    bias = numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "bias")
    then_branch = helper.make_graph(
        [
            helper.make_node("Add", ["b2", "bias"], ["t1"]),
            helper.make_node("If", ["c2"], ["t2"], then_branch=inner_then, else_branch=inner_else),
            helper.make_node("Add", ["t1", "t2"], ["then_out"]),
        ],
        "then",
        [],
        [_vi("then_out", F, [2, H])],
        [bias],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["b", "x"], ["else_out"])], "else", [], [_vi("else_out")]
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["v_in", "b2"], ["v_sum"]),
            helper.make_node("Cast", ["iter"], ["iter_f"], to=F),
            helper.make_node("Mul", ["v_sum", "iter_f"], ["v_out"]),
            helper.make_node("ReduceSum", ["v_out"], ["v_scan"], keepdims=0),
        ],
        "body",
        [_vi("iter", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("v_in", F, [2, H])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("v_out", F, [2, H]), _vi("v_scan", F, [])],
    )
    scan_body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "row"], ["s_out"]),
            helper.make_node("Relu", ["s_out"], ["row_out"]),
        ],
        "scan_body",
        [_vi("s_in", F, [H]), _vi("row", F, [H])],
        [_vi("s_out", F, [H]), _vi("row_out", F, [H])],
    )
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        # A duplicate of `b`: the optimizer merges the two, and the subgraphs read `b2`.
        helper.make_node("Relu", ["a"], ["b2"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Loop", ["trips", "", "x"], ["v_final", "v_sums"], body=body),
        helper.make_node("Scan", ["state0", "b"], ["s_final", "rows"], body=scan_body, num_scan_inputs=1),
    ]
    graph = helper.make_graph(
        nodes,
        "control_flow",
        [_vi("x", F, [2, H]), _vi("c", TensorProto.BOOL, []), _vi("c2", TensorProto.BOOL, [])],
        [
            _vi("y", F, [2, H]),
            _vi("v_final", F, [2, H]),
            _vi("v_sums", F, [3]),
            _vi("s_final", F, [H]),
            _vi("rows", F, [2, H]),
        ],
        [w, trips, state0],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def _save(model: onnx.ModelProto, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "in.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="in.onnx.data", size_threshold=1024)
    return path


def _ort(path: Path, feeds: dict) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def _feeds(c: bool, c2: bool) -> dict:
    x = np.random.default_rng(3).standard_normal((2, H)).astype(np.float32)
    return {"x": x, "c": np.array(c), "c2": np.array(c2)}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    return _save(control_flow_model(), tmp_path_factory.mktemp("cf"))


@pytest.mark.parametrize("c,c2", [(True, True), (True, False), (False, True)])
def test_run_matches_onnxruntime(saved, tmp_path, c, c2):
    feeds = _feeds(c, c2)
    args = ["run", str(saved), "--output-dir", str(tmp_path / "out")]
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    run_mobius(args)
    want = _ort(saved, feeds)
    for name, value in want.items():
        assert_close(np.load(tmp_path / "out" / f"{name}.npy"), value, 1e-5, f"output {name}", rtol=1e-5)


@pytest.fixture(scope="module")
def optimized(saved, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cf_opt") / "opt"
    run_mobius(["optimize", str(saved), str(out), "--ep", "cpu"])
    return out / "model.onnx"


def test_optimize_keeps_subgraphs_valid_and_merges_the_duplicate(optimized):
    onnx.checker.check_model(str(optimized), full_check=True)
    m = onnx.load(str(optimized))
    ops = [n.op_type for n in m.graph.node]
    assert sorted(op for op in ops if op in ("If", "Loop", "Scan")) == ["If", "Loop", "Scan"], ops
    assert ops.count("Relu") == 1, f"the duplicate Relu survived: {ops}"
    # The subgraph initializer moved to the main graph.
    assert "bias" in {t.name for t in m.graph.initializer}


@pytest.mark.parametrize("c,c2", [(True, True), (True, False), (False, False)])
def test_optimized_matches_the_input_in_onnxruntime(saved, optimized, c, c2):
    feeds = _feeds(c, c2)
    want, got = _ort(saved, feeds), _ort(optimized, feeds)
    for name, value in want.items():
        assert_close(got[name], value, 1e-5, f"output {name}", rtol=1e-5)


def test_verify_takes_control_flow(saved, optimized):
    proc = run_mobius_unchecked(["verify", str(saved), str(optimized)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_endless_loop_stops_at_the_iteration_bound(tmp_path):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["v"], ["v_out"])],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("v", F, [1])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("v_out", F, [1])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["", "", "x"], ["y"], body=body)], "endless", [_vi("x", F, [1])], [_vi("y", F, [1])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    path = _save(model, tmp_path)
    np.save(tmp_path / "x.npy", np.ones(1, np.float32))
    args = ["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "o")]
    proc = run_mobius_unchecked([*args, "--max-loop-iterations", "1000"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ran 1000 iterations" in proc.stderr and "--max-loop-iterations" in proc.stderr, proc.stderr
    assert "panicked" not in proc.stderr
    assert not (tmp_path / "o" / "y.npy").exists()
