"""`mobius optimize` on graphs exported by torch.onnx (tests/fixtures/exports, made by
scripts/make_export_fixtures.py): every export x EP is optimized once, run on onnxruntime CPU
and compared with transformers' own outputs stored beside the export (reference.npz).

Each fixture is first checked on its own (the export as written, in onnxruntime, against
transformers), so an export problem is not blamed on mobius.  Compared, in f32 with max abs
error <= 1e-4:
  prefill  batch 2 x seq 5 (row 0 right-padded): logits / last_hidden_state and the presents
           at the positions whose attention_mask is 1 (padded positions carry no meaning);
  decode   cache exports only: one token per row fed with the model's OWN prefill presents as
           past; logits of both rows and the presents at the positions whose mask is 1.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from contract import check_model_file
from ort_helpers import FIXTURES_DIR, run_mobius

EXPORTS_DIR = FIXTURES_DIR / "exports"
EPS = ["default", "cpu", "cuda", "onnx-standard", "qnn"]
TOL = 1e-4
# outputs compared per token: [batch, seq, ...]; every other output is a present [batch, heads, seq, dim]
TOKEN_OUTPUTS = {"logits", "last_hidden_state"}
ENCODER_OUTPUT = "last_hidden_state"


def export_names() -> list[str]:
    if not EXPORTS_DIR.is_dir():
        return []
    return sorted(p.name for p in EXPORTS_DIR.iterdir() if (p / "model.onnx").is_file() and (p / "reference.npz").is_file())


NAMES = export_names()


def test_export_fixtures_present():
    """The fixture set this suite is parametrized over: 4 decoder families x 3 kinds + BERT x 2."""
    families = {"llama", "qwen2", "mistral", "gpt2"}
    want = {f"{f}-{k}" for f in families for k in ("dynamo-cache", "dynamo", "legacy-cache")}
    want |= {"bert-dynamo", "bert-legacy"}
    assert set(NAMES) == want, f"missing {sorted(want - set(NAMES))}, unexpected {sorted(set(NAMES) - want)}"


def reference(name: str) -> dict[str, dict[str, np.ndarray]]:
    """stage ("prefill" / "decode") -> {tensor name: array}, inputs and outputs together."""
    stages: dict[str, dict[str, np.ndarray]] = {}
    with np.load(EXPORTS_DIR / name / "reference.npz") as npz:
        for key in npz.files:
            stage, tensor = key.split(".", 1)
            stages.setdefault(stage, {})[tensor] = npz[key]
    return stages


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # No onnxruntime graph optimizations: the graph runs as written.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def run(sess, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [i.name for i in sess.get_inputs()]
    missing = [n for n in names if n not in feeds]
    assert not missing, f"graph inputs without a reference value: {missing}"
    outs = sess.run(None, {n: feeds[n] for n in names})
    return dict(zip((o.name for o in sess.get_outputs()), outs))


def max_err(name: str, got: np.ndarray, want: np.ndarray, mask: np.ndarray) -> float:
    """Max abs error over the positions where mask [batch, tokens] is 1."""
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    keep = mask.astype(bool)
    if name in TOKEN_OUTPUTS:  # [batch, seq, ...]: the last seq positions of the mask
        sel_got, sel_want = got[keep[:, -got.shape[1]:]], want[keep[:, -want.shape[1]:]]
    else:  # present [batch, heads, total, dim]
        sel_got, sel_want = got.transpose(0, 2, 1, 3)[keep], want.transpose(0, 2, 1, 3)[keep]
    return float(np.abs(sel_got.astype(np.float64) - sel_want.astype(np.float64)).max())


def compare(sess, name: str, label: str) -> list[str]:
    """Runs prefill (and decode with the session's own presents) and returns the failures."""
    ref = reference(name)
    failures = []
    outputs = [o.name for o in sess.get_outputs()]
    pre = ref["prefill"]
    got = run(sess, pre)
    mask = pre["attention_mask"]
    for out in outputs:
        err = max_err(out, got[out], pre[out], mask)
        if not err <= TOL:
            failures.append(f"{label} prefill {out}: max abs error {err:.3g} > {TOL}")
    if "decode" in ref:
        dec = dict(ref["decode"])
        for past in [n for n in dec if n.startswith("past_key_values.")]:
            dec[past] = got[past.replace("past_key_values.", "present.")]
        got = run(sess, dec)
        mask = dec["attention_mask"]
        for out in outputs:
            err = max_err(out, got[out], ref["decode"][out], mask)
            if not err <= TOL:
                failures.append(f"{label} decode {out}: max abs error {err:.3g} > {TOL}")
    return failures


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """optimized(name, ep) -> folder of `mobius optimize --ep ep` of the export (cached; a
    failure is cached too and re-raised for the test that asks)."""
    root = tmp_path_factory.mktemp("exports")
    cache: dict[tuple[str, str], Path | AssertionError] = {}

    def get(name: str, ep: str) -> Path:
        key = (name, ep)
        if key not in cache:
            out = root / f"{name}-{ep}"
            role = "encoder" if name.startswith("bert-") else "decoder"
            try:
                run_mobius(["optimize", str(EXPORTS_DIR / name / "model.onnx"), str(out), "--ep", ep, "--role", role, "-q"])
                cache[key] = out
            except (AssertionError, subprocess.TimeoutExpired) as e:
                cache[key] = AssertionError(str(e))
        v = cache[key]
        if isinstance(v, AssertionError):
            raise v
        return v

    return get


@pytest.mark.parametrize("name", NAMES)
def test_export_matches_transformers(name):
    """The fixture itself: the export, run as written by onnxruntime, matches transformers."""
    ref = reference(name)
    assert "prefill" in ref and ("decode" in ref) == name.endswith("-cache"), sorted(ref)
    failures = compare(session(EXPORTS_DIR / name / "model.onnx"), name, f"{name} (export)")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("name", NAMES)
def test_optimized_matches_transformers(optimized, name, ep):
    out = optimized(name, ep)
    path = out / "model.onnx"
    check_model_file(path)
    before = onnx.load(str(EXPORTS_DIR / name / "model.onnx"), load_external_data=False)
    after = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in after.graph.initializer}
    assert [i.name for i in after.graph.input if i.name not in inits] == [i.name for i in before.graph.input]
    assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]
    failures = compare(session(path), name, f"{name} --ep {ep}")
    assert not failures, "\n".join(failures)
