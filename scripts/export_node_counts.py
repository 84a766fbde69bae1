#!/usr/bin/env python3
"""Node counts of the export fixtures (tests/fixtures/exports) before and after optimization,
as a markdown table: the export itself, `mobius optimize --ep cpu` (and its wall time, the
fastest of --repeat runs), the same with `--kv-cache genai` for the decoder cache exports,
`mobius build --ep cpu` of the same checkpoint, and onnxruntime's transformers optimizer
(`onnxruntime.transformers.optimizer.optimize_model`, model_type gpt2 for the decoders and bert
for BERT, num_heads / hidden_size from config.json, default opt_level; and its wall time).

Developer tool: needs onnx and onnxruntime (e.g. /work/torchvenv/bin/python). The binary is
$MOBIUS_BIN, default target/debug/mobius (times are of that build).

Usage:
    python scripts/export_node_counts.py [--dir DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
EXPORTS = FIXTURES / "exports"
# ops whose presence says what was fused (shown in the table when present)
FUSED = [
    "GroupQueryAttention", "MultiHeadAttention", "Attention", "RotaryEmbedding", "SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization", "RMSNormalization", "SkipLayerNormalization", "LayerNormalization", "BiasGelu",
    "FastGelu", "Gelu", "MatMulNBits",
]


def mobius() -> Path:
    p = Path(os.environ.get("MOBIUS_BIN", "target/debug/mobius"))
    return p if p.is_absolute() else REPO / p


def run(args: list[str], repeat: int = 1) -> float:
    """Runs the binary `repeat` times (with --overwrite after the first) and returns its
    fastest wall time in seconds; raises with its stderr on failure."""
    best = float("inf")
    for i in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([str(mobius()), *args, *(["--overwrite"] if i else [])], capture_output=True, text=True)
        best = min(best, time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return best


def ops(path_or_model) -> Counter:
    model = path_or_model if isinstance(path_or_model, onnx.ModelProto) else onnx.load(str(path_or_model), load_external_data=False)
    return Counter(n.op_type for n in model.graph.node)


def fused(counts: Counter) -> str:
    return ", ".join(f"{op} {counts[op]}" for op in FUSED if counts[op]) or "-"


def heads_hidden(family: str) -> tuple[int, int]:
    cfg = json.loads((FIXTURES / family / "config.json").read_text())
    return (cfg.get("num_attention_heads") or cfg.get("n_head") or cfg.get("n_heads") or cfg["num_heads"],
            cfg.get("hidden_size") or cfg.get("n_embd") or cfg["d_model"])


def ort_optimize(path: Path, family: str) -> tuple[Counter, float]:
    from onnxruntime.transformers.optimizer import optimize_model

    heads, hidden = heads_hidden(family)
    start = time.perf_counter()
    model = optimize_model(str(path), model_type="bert" if family == "bert" else "gpt2", num_heads=heads, hidden_size=hidden)
    took = time.perf_counter() - start
    return ops(model.model), took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="export fixture names (default: all)")
    ap.add_argument("--dir", type=Path, default=EXPORTS, help="the folder of export fixtures (default tests/fixtures/exports)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mobius optimize (the fastest is shown)")
    args = ap.parse_args()
    names = args.only or sorted(p.name for p in args.dir.iterdir() if (p / "model.onnx").is_file())
    built: dict[str, Counter | str] = {}
    rows = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for name in names:
            # the longest checkpoint directory the name starts with (falcon-alibi, not falcon)
            family = max((d.name for d in FIXTURES.iterdir() if name.startswith(d.name + "-")), key=len)
            role = "encoder" if family == "bert" else "decoder"
            src = args.dir / name / "model.onnx"
            before = ops(src)
            try:
                took = run(["optimize", str(src), str(tmp / f"opt-{name}"), "--ep", "cpu", "--role", role, "-q"], args.repeat)
                after = ops(tmp / f"opt-{name}" / "model.onnx")
                mob = f"{sum(after.values())} ({took * 1000:.0f} ms)"
                mob_fused = fused(after)
            except RuntimeError as e:
                mob, mob_fused = f"fails: {e}", "-"
            genai, genai_fused = "-", "-"
            if name.endswith("-cache"):
                try:
                    out = tmp / f"genai-{name}"
                    took = run(["optimize", str(src), str(out), "--ep", "cpu", "--kv-cache", "genai", "-q"], args.repeat)
                    after = ops(out / "model.onnx")
                    genai, genai_fused = f"{sum(after.values())} ({took * 1000:.0f} ms)", fused(after)
                except RuntimeError as e:
                    genai = f"fails: {e}"
            if family not in built:
                try:
                    run(["build", "--config", str(FIXTURES / family), str(tmp / f"build-{family}"), "--dtype", "f32", "--ep", "cpu", "-q"])
                    built[family] = ops(tmp / f"build-{family}" / "model.onnx")
                except RuntimeError as e:
                    built[family] = f"fails: {e}"
            b = built[family]
            build = str(sum(b.values())) if isinstance(b, Counter) else b
            ort_counts, ort_took = ort_optimize(src, family)
            rows.append(
                f"| {name} | {sum(before.values())} | {mob} | {genai} | {build} | {sum(ort_counts.values())} ({ort_took:.2f} s) "
                f"| {mob_fused} | {genai_fused} | {fused(ort_counts)} |"
            )
    print("| export | nodes | `mobius optimize --ep cpu` | `… --kv-cache genai` | `mobius build --ep cpu` "
          "| onnxruntime transformers optimizer | fused by mobius | fused with --kv-cache genai | fused by onnxruntime |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
