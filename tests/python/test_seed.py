"""The seed's quick start (EP-aware building), its code blocks run verbatim against the installed
package, offline, with meta-llama/Llama-3.2-1B in the Hugging Face cache being the tiny llama.

Each saved package must load in onnxruntime and be byte-identical to `mobius build` with the
same arguments; the `[EP Trace]` records must reach Python logging.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import onnxruntime as ort
import pytest

import mobius
from conftest import SEED_ID, assert_same_files, run_cli

SEED = Path(__file__).parent / "seed"
# The (execution_provider, dtype) of each build in the seed's section 1 (dtype None: not given).
SECTION1 = [
    ("default", None),
    ("cuda", "f16"),
    ("webgpu", "f16"),
    ("dml", "f16"),
    ("trt-rtx", "f16"),
    ("onnx-standard", None),
]


def block(n: int) -> str:
    return (SEED / f"block{n}.py").read_text()


def ort_loads(folder: Path) -> None:
    """onnxruntime (CPU) makes a session of the package's model.onnx."""
    ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])


def cli_build(out: Path, ep: str, dtype: str | None, *extra: str) -> Path:
    args = ["build", "--model", SEED_ID, str(out), "--ep", ep, *extra]
    if dtype is not None:
        args += ["--dtype", dtype]
    run_cli(*args)
    return out


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory, hub_cache):
    """Sections 1, 3 and 4 run in order in one namespace (as in one notebook), in a fresh
    working folder; returns (namespace, working folder, what section 3 printed)."""
    work = tmp_path_factory.mktemp("seed")
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub_cache), HF_ENDPOINT="http://127.0.0.1:9")
    namespace: dict = {"__name__": "__seed__"}
    printed = io.StringIO()
    try:
        os.chdir(work)
        exec(compile(block(1), "block1.py", "exec"), namespace)
        with contextlib.redirect_stdout(printed):
            exec(compile(block(3), "block3.py", "exec"), namespace)
        exec(compile(block(4), "block4.py", "exec"), namespace)
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
    return namespace, work, printed.getvalue()


def test_section1_saves_what_the_cli_writes(seed_run, tmp_path):
    _, work, _ = seed_run
    saved = work / "output" / "llama"
    assert (saved / "model.onnx").is_file()
    assert_same_files(saved, cli_build(tmp_path / "cli", "onnx-standard", None))
    ort_loads(saved)
    onnx_model = mobius.build(SEED_ID, execution_provider="onnx-standard")["model"]
    assert all(n.domain in ("", "ai.onnx") for n in onnx_model.graph), "onnx-standard has no custom-domain op"


@pytest.mark.parametrize("ep,dtype", SECTION1, ids=[f"{e}-{d or 'nodtype'}" for e, d in SECTION1])
def test_section1_build_matches_the_cli(ep, dtype, tmp_path):
    kwargs = {"execution_provider": ep} | ({} if dtype is None else {"dtype": dtype})
    pkg = mobius.build(SEED_ID, **kwargs)
    pkg.save(tmp_path / "py")
    assert_same_files(tmp_path / "py", cli_build(tmp_path / "cli", ep, dtype))
    ort_loads(tmp_path / "py")


def test_section2_trace_reaches_logging(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="mobius._optimizations")
    namespace: dict = {"__name__": "__seed__"}
    exec(compile(block(2), "block2.py", "exec"), namespace)
    records = [r for r in caplog.records if r.name == "mobius._optimizations"]
    lines = [r.getMessage() for r in records]
    assert all(r.levelno == logging.INFO for r in records)
    assert lines and all(line.startswith("[EP Trace]") for line in lines), lines[:3]
    assert lines[0] == "[EP Trace] Target: cuda, dtype: FLOAT16, role: decoder"
    gqa = [line for line in lines if "GQAFusion" in line]
    assert gqa and "+2 com.microsoft::GroupQueryAttention" in gqa[0], gqa
    # The same report as `mobius build --trace` (timings aside).
    cli = run_cli("build", "--model", SEED_ID, str(tmp_path / "o"), "--ep", "cuda", "--dtype", "f16", "--no-weights", "--trace")
    cli_lines = [line for line in cli.stderr.splitlines() if line.startswith("[EP Trace]")]
    untimed = lambda ls: [line for line in ls if " ms" not in line]  # noqa: E731
    assert untimed(lines) == untimed(cli_lines)
    assert namespace["pkg"].execution_provider == "cuda"


def test_section2_basicconfig_shows_the_trace():
    done = subprocess.run([sys.executable, "-c", block(2)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "INFO:mobius._optimizations:[EP Trace] Target: cuda, dtype: FLOAT16, role: decoder" in done.stderr
    assert "INFO:mobius._optimizations:[EP Trace] Stage 2: Fusion" in done.stderr


def test_section3_prints_the_registry(seed_run):
    _, _, printed = seed_run
    lines = printed.splitlines()
    names = eval(lines[0])  # the printed sorted list
    assert set(names) >= {"cpu", "cuda", "default", "dml", "onnx-standard", "trt-rtx", "webgpu"}
    assert names == sorted(names)
    members = lambda line: set(line.removeprefix("frozenset({").removesuffix("})").split(", "))  # noqa: E731
    assert members(lines[1]) == {"FLOAT16", "BFLOAT16"}, lines[1]
    assert members(lines[2]) == {"FLOAT", "FLOAT16", "BFLOAT16"}, lines[2]
    assert lines[3] == "True"
    assert eval(lines[4]) == mobius.get_ep("cuda").provider_options


def test_section4_custom_ep_builds_as_its_capabilities_say(seed_run, tmp_path):
    namespace, _, _ = seed_run
    pkg = namespace["pkg"]
    assert pkg.execution_provider == "my-ep"
    ops = [n.op_type for n in pkg["model"].graph]
    assert "GroupQueryAttention" in ops, "gqa_dtypes={FLOAT16}: attention fused for an f16 build"
    # The same EP as a TOML file gives the CLI build the same bytes.
    ep_file = tmp_path / "my-ep2.toml"
    ep_file.write_text(
        'name = "my-ep2"\ngqa_dtypes = ["f16"]\nqkv_pack_dtypes = ["f16"]\nsupports_fused_rope = true\n'
        '[provider_options]\nsome_option = "value"\n'
    )
    pkg.save(tmp_path / "py")
    cli = tmp_path / "cli"
    run_cli("build", "--model", SEED_ID, str(cli), "--ep-file", str(ep_file), "--dtype", "f16")
    assert (tmp_path / "py" / "model.onnx").read_bytes() == (cli / "model.onnx").read_bytes()
    assert (tmp_path / "py" / "model.onnx.data").read_bytes() == (cli / "model.onnx.data").read_bytes()
    # Without f16 in gqa_dtypes the same EP keeps the portable attention.
    plain = mobius.EpCapabilities(name="my-ep-nogqa", provider_options={"some_option": "value"})
    mobius.register_ep(plain)
    ops = [n.op_type for n in mobius.build(SEED_ID, execution_provider="my-ep-nogqa", dtype="f16")["model"].graph]
    assert "GroupQueryAttention" not in ops and "Attention" in ops
