"""pytest fixtures for the onnxruntime / onnxruntime-genai tests of `mobius build`.

Builds are cached for the whole session so every (source, dtype, ep) triple is
converted once; see ort_helpers.py for the binary lookup ($MOBIUS_BIN).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ort_helpers import ACHIEVED, CONFIGS_DIR, FIXTURES_DIR, list_eps, run_mobius


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """built(kind, name, dtype, ep=None, extra=()) -> output folder of `mobius build` (cached).

    kind "fixture": tests/fixtures/<name>, with weights.
    kind "config":  tests/data/configs/<name>, with --no-weights.
    ep None: no --ep flag (the CLI default); otherwise `--ep <ep>`.
    extra: further flags (e.g. ("--quant", "int4")).
    A failed build is cached too, so it is reported once per test, fast.
    """
    cache: dict[tuple, Path | AssertionError] = {}
    root = tmp_path_factory.mktemp("builds")

    def get(kind: str, name: str, dtype: str, ep: str | None = None, extra: tuple[str, ...] = ()) -> Path:
        key = (kind, name, dtype, ep, tuple(extra))
        if key not in cache:
            suffix = "".join(f"-{a.lstrip('-')}" for a in extra)
            out = root / f"{kind}-{name}-{dtype}-{ep or 'noflag'}{suffix}" / "out"
            out.parent.mkdir(parents=True)
            if kind == "fixture":
                src = FIXTURES_DIR / name
                args = ["build", "--config", str(src), str(out), "--dtype", dtype]
            elif kind == "config":
                src = CONFIGS_DIR / name
                args = ["build", "--config", str(src), str(out), "--dtype", dtype, "--no-weights"]
            else:
                raise ValueError(kind)
            if ep is not None:
                args += ["--ep", ep]
            args += list(extra)
            try:
                run_mobius(args)
                if not (out / "model.onnx").is_file():
                    raise AssertionError(f"build of {src} wrote no model.onnx into {out}: {sorted(os.listdir(out)) if out.exists() else 'no folder'}")
                cache[key] = out
            except (AssertionError, subprocess.TimeoutExpired) as e:
                cache[key] = AssertionError(str(e))
        v = cache[key]
        if isinstance(v, AssertionError):
            raise v
        return v

    return get


@pytest.fixture(scope="session")
def session_for(built):
    """session_for(name, dtype, ep=None) -> cached onnxruntime CPU InferenceSession
    of the fixture built for `ep` (every EP's graph must run on ORT CPU)."""
    import onnxruntime as ort

    cache = {}

    def get(name: str, dtype: str, ep: str | None = None):
        key = (name, dtype, ep)
        if key not in cache:
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            path = built("fixture", name, dtype, ep) / "model.onnx"
            cache[key] = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return cache[key]

    return get


@pytest.fixture(scope="session")
def ep_caps() -> dict[str, dict]:
    """name -> capability record, from `mobius list eps --json` (registration order)."""
    return list_eps()


# Nothing in tests/ort is skipped: a check that does not apply is left out at collection with
# its reason (test_fixtures.LEFT_OUT), so a skip is news and fails the run.
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report):
    """Collects the skipped tests."""
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    """Fails a run that skipped a test."""
    if _SKIPPED and exitstatus == 0:
        session.exitstatus = 1


_AGREEMENT: list[tuple[str, int, int, int]] = []


@pytest.fixture
def record_agreement():
    """Records (build, common prefix, equal tokens, length) of an f16 genai greedy run."""

    def record(build: str, prefix: int, equal: int, length: int) -> None:
        _AGREEMENT.append((build, prefix, equal, length))

    return record


_MOE_MARGINS: list[tuple[str, float]] = []


@pytest.fixture
def record_moe_margin():
    """Records (build, smallest router margin) of a MoE fixture (test_moe.py)."""

    def record(build: str, margin: float) -> None:
        _MOE_MARGINS.append((build, margin))

    return record


def pytest_terminal_summary(terminalreporter):
    """Prints the f16 greedy agreement table (test_genai_greedy_f16), the MoE router
    margins (test_moe.py) and the achieved figures the tests record (ort_helpers.ACHIEVED);
    names the skipped tests, which fail the run."""
    if _SKIPPED:
        terminalreporter.section("skipped tests (a skip fails the run: leave a check out at collection, with its reason)")
        for nodeid in _SKIPPED:
            terminalreporter.write_line(nodeid)
    for table, rows in sorted(ACHIEVED.items()):
        terminalreporter.section(table)
        for build, figure in sorted(rows):
            terminalreporter.write_line(f"{build:60s} {figure:.6g}")
    if _MOE_MARGINS:
        terminalreporter.section("MoE router margins: smallest k-th minus (k+1)-th probability")
        for build, margin in sorted(_MOE_MARGINS):
            terminalreporter.write_line(f"{build:40s} {margin:.3e}")
    if not _AGREEMENT:
        return
    terminalreporter.section("f16 builds: onnxruntime-genai greedy agreement with transformers (f32)")
    for build, prefix, equal, length in sorted(_AGREEMENT):
        terminalreporter.write_line(f"{build:40s} common prefix {prefix:2d}/{length}, equal tokens {equal:2d}/{length}")
