"""Olive's MobiusBuilder pass (olive-ai 0.13.0) run unchanged on the installed `mobius` wheel.

Olive imports torch, so this runs from scripts/olive_test.sh (its own venv), not the default
suite. The pass builds the tiny llama from a local folder offline; onnxruntime-genai must then
generate transformers' greedy tokens from its output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import assert_genai_greedy, run_cli

LLAMA = Path(__file__).resolve().parents[2] / "fixtures" / "llama"


def test_capture_onnx_graph_with_mobius_builder(tmp_path):
    out = tmp_path / "olive-out"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9", OLIVE_TELEMETRY="0")
    done = subprocess.run(
        [sys.executable, "-m", "olive", "capture-onnx-graph", "-m", str(LLAMA), "--use_mobius_builder",
         "--precision", "fp32", "-o", str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    configs = sorted(out.rglob("genai_config.json"))
    assert configs, f"no genai_config.json under {out}: {sorted(p.name for p in out.rglob('*'))}"
    folder = configs[0].parent
    assert (folder / "model.onnx").is_file() and (folder / "tokenizer.json").is_file()
    # Olive asks for the CPU EP: the files are those of `mobius build --ep cpu --dtype f32`.
    cli = tmp_path / "cli"
    run_cli("build", "--config", str(LLAMA), str(cli), "--ep", "cpu", "--dtype", "f32")
    for name in ("model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json"):
        assert (folder / name).read_bytes() == (cli / name).read_bytes(), name
    assert_genai_greedy(folder, LLAMA)
