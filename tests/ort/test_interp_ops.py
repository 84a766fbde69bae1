"""Cross-check of mobius' reference interpreter (`mobius run`) against onnxruntime,
one op at a time.

Each case (see interp_cases.py) is a single-node ONNX model with deterministic random
inputs. It runs on onnxruntime's CPU execution provider (graph optimizations off) and
through `mobius run MODEL --input NAME=FILE.npy ... --output-dir DIR`; every graph output
(every output of the op that onnxruntime defines) is compared:

  f32 / f64:        max |mobius - ort| <= 1e-5 * max(1, max |ort|)
  f16:              max |mobius - ort| <= 1e-2 * max(1, max |ort|)
  integer / bool:   exactly

Shapes and element types must match too, and NaN / infinity must appear in the same
places. Where onnxruntime leaves part of an output undefined (padding slots of a
GroupQueryAttention KV cache), the case names the compared region.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from interp_cases import CASES, Case
from ort_helpers import run_mobius_unchecked

RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-5, np.dtype(np.float16): 1e-2}


def _ort_run(path: Path, case: Case) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return sess.run([n for n, _ in case.outputs], dict(case.inputs))
    except Exception as e:  # the case itself is broken: a harness bug, not a finding
        raise AssertionError(f"onnxruntime rejects the test model of {case.id}: {e}") from e


def _mobius_run(path: Path, case: Case, work: Path) -> dict[str, np.ndarray]:
    args = ["run", str(path), "--output-dir", str(work / "out")]
    for name, a in case.inputs.items():
        f = work / f"in_{name}.npy"
        np.save(f, a)  # (np.ascontiguousarray would turn 0-d into 1-d)
        args += ["--input", f"{name}={f}"]
    proc = run_mobius_unchecked(args)
    if proc.returncode != 0:
        raise AssertionError(
            f"`mobius run` failed on {case.id} (exit {proc.returncode}):\n{proc.stderr[-3000:]}{proc.stdout[-1000:]}"
        )
    return {n: np.load(work / "out" / f"{n}.npy") for n, _ in case.outputs}


def _compare(case: Case, name: str, want: np.ndarray, got: np.ndarray) -> str | None:
    """None when they agree, else a description of the disagreement."""
    if got.shape != want.shape:
        return f"{name}: shape {got.shape}, onnxruntime {want.shape}"
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype}, onnxruntime {want.dtype}"
    where = "flat index"
    if name in case.regions:
        want, got = case.regions[name](want), case.regions[name](got)
        where = "index in the compared region"
    if want.dtype.kind in "biu":
        bad = np.flatnonzero(want.ravel() != got.ravel())
        if bad.size:
            i = bad[0]
            return (f"{name}: {bad.size}/{want.size} elements differ; first at {where} {i}: "
                    f"mobius {got.ravel()[i].item()!r}, onnxruntime {want.ravel()[i].item()!r}")
        return None
    w, g = want.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    wn, gn = np.isnan(w), np.isnan(g)
    if (wn != gn).any():
        i = int(np.flatnonzero(wn != gn)[0])
        return f"{name}: NaN mismatch at {where} {i}: mobius {g[i]:.9g}, onnxruntime {w[i]:.9g}"
    wi, gi = np.isinf(w), np.isinf(g)
    if (wi != gi).any() or (w[wi] != g[wi]).any():
        i = int(np.flatnonzero((wi != gi) | (wi & (w != g)))[0])
        return f"{name}: infinity mismatch at {where} {i}: mobius {g[i]:.9g}, onnxruntime {w[i]:.9g}"
    fin = ~(wn | wi)
    if not fin.any():
        return None
    scale = max(1.0, float(np.abs(w[fin]).max()))
    bound = RTOL[want.dtype] * scale
    diff = np.zeros_like(w)
    diff[fin] = np.abs(w[fin] - g[fin])
    i = int(diff.argmax())
    if diff[i] > bound:
        return (f"{name} ({want.dtype}): max |mobius - ort| = {diff[i]:.3g} > {bound:.3g} "
                f"(= {RTOL[want.dtype]:g} * {scale:.4g}); at {where} {i}: mobius {g[i]:.9g}, "
                f"onnxruntime {w[i]:.9g}; {int((diff > bound).sum())}/{w.size} elements beyond")
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_interp_matches_ort(case: Case, tmp_path: Path):
    model = case.model()
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    want = _ort_run(path, case)
    # outputs of ops ONNX shape inference does not know (com.microsoft) get the shapes
    # onnxruntime computed, so that the model passes the checker
    for vi, w in zip(model.graph.output, want):
        if not vi.type.tensor_type.HasField("shape"):
            vi.CopyFrom(helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, w.shape))
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    got = _mobius_run(path, case, tmp_path)
    problems = [p for (n, _), w in zip(case.outputs, want) if (p := _compare(case, n, w, got[n]))]
    assert not problems, f"{case.id}: mobius run disagrees with onnxruntime\n" + "\n".join(problems)


def implemented_ops() -> set[str]:
    """The ops the interpreter evaluates, from interp_ops.txt (which a Rust test,
    interp::tests::the_cross_checked_op_list_is_the_dispatch_table, holds to the registry)."""
    lines = (Path(__file__).parent / "interp_ops.txt").read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


# Ops onnxruntime 1.32's CPU provider has no kernel for (opset 28's SwiGLU; the training
# domain's optimizer steps): ONNX's own conformance cases check them
# (tests/ort/test_onnx_conformance.py), and test_ops_without_an_onnxruntime_kernel_have_none
# keeps this list honest.
NO_ORT_KERNEL = {
    "SwiGLU": ("", 28, 2),
    "ai.onnx.preview.training.Adagrad": ("ai.onnx.preview.training", 1, 5),
    "ai.onnx.preview.training.Adam": ("ai.onnx.preview.training", 1, 6),
    "ai.onnx.preview.training.Momentum": ("ai.onnx.preview.training", 1, 5),
}


def test_cases_cover_every_op():
    """Every op the interpreter implements has a case (or no onnxruntime kernel to check it
    against), and case ids are unique."""
    required = implemented_ops() - set(NO_ORT_KERNEL)
    assert len(required) > 50, "interp_ops.txt lost its ops"
    have = {(f"{c.node.domain}.{c.op}" if c.node.domain else c.op) for c in CASES}
    assert required <= have, f"ops without a cross-check case: {sorted(required - have)}"
    assert have <= required, f"cases for ops the interpreter does not dispatch: {sorted(have - required)}"
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("key", sorted(NO_ORT_KERNEL))
def test_ops_without_an_onnxruntime_kernel_have_none(key: str):
    """Each op exempted above is one the interpreter runs and onnxruntime cannot."""
    import onnxruntime as ort

    assert key in implemented_ops()
    domain, opset, inputs = NO_ORT_KERNEL[key]
    op = key.rsplit(".", 1)[-1]
    names = [f"x{i}" for i in range(inputs)]
    node = helper.make_node(op, names, ["y"], domain=domain or None)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2])
                                        for n in names], [helper.make_tensor_value_info("y", 1, [2])])
    opsets = [helper.make_opsetid("", 28 if not domain else 24)]
    if domain:
        opsets.append(helper.make_opsetid(domain, opset))
    m = helper.make_model(g, opset_imports=opsets, ir_version=11)
    with pytest.raises(Exception):
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        sess.run(None, {n: np.ones(2, np.float32) for n in names})
