"""`mobius optimize` on ONNX models that mobius did not build: hand-made graphs
written with onnx.helper, saved with external data, optimized, then checked
with the onnx checker and onnxruntime against the input model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from contract import check_model_file, external_locations
from ort_helpers import assert_close, run_mobius, run_mobius_unchecked

OPSET = 24
IR_VERSION = 11
HIDDEN = 64  # W is HIDDEN x HIDDEN f32 = 16 KiB, well above the external-data threshold
EXTERNAL_THRESHOLD = 1024


def _save(model: onnx.ModelProto, folder: Path, name: str = "in.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{name}.data",
        size_threshold=EXTERNAL_THRESHOLD,
    )
    onnx.checker.check_model(str(path), full_check=True)
    return path


def _session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # No ORT graph optimizations: compare the two graphs as written.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _io(model: onnx.ModelProto) -> tuple[list, list]:
    inits = {t.name for t in model.graph.initializer}
    sig = lambda vi: (vi.name, vi.type.SerializeToString())  # noqa: E731  name + full type (elem type, shape)
    return [sig(v) for v in model.graph.input if v.name not in inits], [sig(v) for v in model.graph.output]


def handmade_model() -> onnx.ModelProto:
    """x[batch,3,H] -> MatMul W -> Add B -> Identity -> Transpose(1,2,0) ->
    Transpose(2,0,1) (the inverse: the pair cancels) -> Relu -> Cast(to FLOAT,
    a no-op) -> Softsign (an op mobius has no rule for) -> y.
    A second output z = HardSigmoid(x) keeps a graph input feeding two chains."""
    rng = np.random.default_rng(1234)
    w = numpy_helper.from_array(rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((HIDDEN,)).astype(np.float32), "B")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "B"], ["biased"], name="add"),
        helper.make_node("Identity", ["biased"], ["same"], name="identity"),
        helper.make_node("Transpose", ["same"], ["t1"], name="transpose_a", perm=[1, 2, 0]),
        helper.make_node("Transpose", ["t1"], ["t2"], name="transpose_b", perm=[2, 0, 1]),
        helper.make_node("Relu", ["t2"], ["relu"], name="relu"),
        helper.make_node("Cast", ["relu"], ["cast"], name="noop_cast", to=TensorProto.FLOAT),
        helper.make_node("Softsign", ["cast"], ["y"], name="softsign"),
        helper.make_node("HardSigmoid", ["x"], ["z"], name="hardsigmoid", alpha=0.3, beta=0.4),
    ]
    graph = helper.make_graph(
        nodes,
        "handmade",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, HIDDEN])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, HIDDEN]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 3, HIDDEN]),
        ],
        [w, b],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="handmade"
    )


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """(input path, output folder, `mobius optimize --ep cpu` process)."""
    root = tmp_path_factory.mktemp("optimize")
    src = _save(handmade_model(), root / "src")
    assert external_locations(onnx.load(str(src), load_external_data=False)) == {"in.onnx.data"}
    out = root / "out"
    proc = run_mobius(["optimize", str(src), str(out), "--ep", "cpu"])
    return src, out, proc


def test_optimize_output_passes_full_check(optimized):
    _, out, _ = optimized
    assert (out / "model.onnx").is_file(), sorted(p.name for p in out.iterdir())
    check_model_file(out / "model.onnx")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert model.ir_version == IR_VERSION
    assert {o.domain or "ai.onnx": o.version for o in model.opset_import}.get("ai.onnx") == OPSET
    # the 16 KiB weight stays external, in the output folder
    locs = external_locations(model)
    assert locs, "no initializer stored as external data"
    for loc in locs:
        assert (out / loc).is_file(), f"external data {loc} missing from {out}"


def test_optimize_keeps_graph_io(optimized):
    src, out, _ = optimized
    before = onnx.load(str(src), load_external_data=False)
    after = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert _io(after) == _io(before), "graph input/output names, order or types changed"


def test_optimize_cleanup_fired_and_unknown_ops_survive(optimized):
    _, out, _ = optimized
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops = [(n.domain or "", n.op_type) for n in model.graph.node]
    assert ("", "Identity") not in ops, ops
    assert ("", "Transpose") not in ops, f"the cancelling Transpose pair survived: {ops}"
    # every value in this graph is FLOAT, so any Cast to FLOAT left is a no-op
    assert ("", "Cast") not in ops, f"the no-op Cast survived: {ops}"
    for op in ("MatMul", "Add", "Relu", "Softsign", "HardSigmoid"):
        assert ops.count(("", op)) == 1, f"{op} should be carried through exactly once: {ops}"
    assert len(ops) == 5, ops


def test_optimize_preserves_numerics(optimized):
    src, out, _ = optimized
    ref, got = _session(src), _session(out / "model.onnx")
    rng = np.random.default_rng(7)
    for batch in (1, 2, 5):
        x = rng.standard_normal((batch, 3, HIDDEN)).astype(np.float32) * 3
        want = ref.run(None, {"x": x})
        have = got.run(None, {"x": x})
        assert len(have) == len(want)
        for name, w, h in zip(("y", "z"), want, have):
            assert h.shape == w.shape and h.dtype == w.dtype, (name, h.shape, h.dtype, w.shape, w.dtype)
            assert_close(h, w, 1e-6, f"output {name} batch {batch}")


def test_optimize_keeps_output_names_fed_by_removed_nodes(tmp_path):
    """Graph outputs produced by an Identity or a no-op Cast keep their names
    (the rewrite may not simply rename the producer's value)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("Cast", ["x"], ["z"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    src = _save(model, tmp_path / "src")
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", "cpu"])
    check_model_file(out / "model.onnx")
    after = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert _io(after) == _io(model)
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    for w, h in zip(_session(src).run(None, {"x": x}), _session(out / "model.onnx").run(None, {"x": x})):
        np.testing.assert_array_equal(h, w)


def test_optimize_onnx_standard_refuses_contrib_ops(tmp_path):
    """--ep onnx-standard cannot run com.microsoft ops and no rule lowers
    QuickGelu: clear error naming the op, and no output folder."""
    graph = helper.make_graph(
        [helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft")],
        "contrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)],
        ir_version=IR_VERSION,
    )
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "out"
    proc = run_mobius_unchecked(["optimize", str(src), str(out), "--ep", "onnx-standard"])
    assert proc.returncode != 0, f"exited 0\n{proc.stdout}\n{proc.stderr}"
    err = proc.stderr
    assert "onnx-standard" in err and "com.microsoft::QuickGelu" in err, err
    assert not out.exists(), f"failed optimize left {out}"
    # the same model is fine for an EP that runs contrib ops
    run_mobius(["optimize", str(src), str(tmp_path / "cpu"), "--ep", "cpu"])
    assert (tmp_path / "cpu" / "model.onnx").is_file()


def test_optimize_qnn_splits_rank4_rmsnorm(tmp_path):
    """A per-head RMSNormalization over [batch, seq, heads, head_dim] (the q/k norm of
    Qwen3-style graphs) has no rank-4 form on qnn: `mobius optimize --ep qnn` reshapes it
    to rank 3 and back (HtpRank4RMSNorm), and the result matches on onnxruntime."""
    heads, dim = 4, 8
    w = np.random.default_rng(5).standard_normal(dim).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-6)],
        "rank4_norm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", heads, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", heads, dim])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    src = _save(model, tmp_path / "src")
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", "qnn"])
    check_model_file(out / "model.onnx")
    after = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert _io(after) == _io(model)
    assert [n.op_type for n in after.graph.node] == ["Reshape", "RMSNormalization", "Reshape"]
    x = np.random.default_rng(6).standard_normal((2, 3, heads, dim)).astype(np.float32)
    want = _session(src).run(None, {"x": x})[0]
    got = _session(out / "model.onnx").run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _biased_gelus(fused: bool) -> onnx.ModelProto:
    """y_exact = GELU(x + b), y_tanh = tanh-GELU(x + b): as contrib ops (BiasGelu, FastGelu)
    when `fused`, else as Add + Gelu; b a [4] initializer."""
    rng = np.random.default_rng(5)
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    if fused:
        nodes = [
            helper.make_node("BiasGelu", ["x", "b"], ["y_exact"], domain="com.microsoft"),
            helper.make_node("FastGelu", ["x", "b"], ["y_tanh"], domain="com.microsoft"),
        ]
    else:
        nodes = [
            helper.make_node("Add", ["x", "b"], ["s"]),
            helper.make_node("Gelu", ["s"], ["y_exact"]),
            helper.make_node("Gelu", ["s"], ["y_tanh"], approximate="tanh"),
        ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in ("y_exact", "y_tanh")]
    graph = helper.make_graph(
        nodes, "gelus", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])], outs, [bias]
    )
    imports = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if fused else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION)


@pytest.mark.parametrize("fused,ep", [(False, "cpu"), (True, "onnx-standard")])
def test_optimize_biased_gelus_match_onnxruntime(tmp_path, fused, ep):
    """The BiasGelu/FastGelu fusions (cpu) and their standard bodies (onnx-standard) compute
    what onnxruntime computes for the original graph: BiasGelu is the exact GELU, FastGelu
    the tanh one."""
    src = tmp_path / "in.onnx"
    onnx.save(_biased_gelus(fused), str(src))
    out = tmp_path / "out"
    run_mobius(["optimize", str(src), str(out), "--ep", ep])
    after = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops = sorted(f"{n.domain}::{n.op_type}" for n in after.graph.node)
    want = ["::Add", "::Gelu", "::Gelu"] if fused else ["com.microsoft::BiasGelu", "com.microsoft::FastGelu"]
    assert ops == want, ops
    x = (np.random.default_rng(6).standard_normal((3, 4)) * 3).astype(np.float32)
    for w, h in zip(_session(src).run(None, {"x": x}), _session(out / "model.onnx").run(None, {"x": x})):
        np.testing.assert_allclose(h, w, rtol=0, atol=1e-5)
