#!/usr/bin/env python3
"""The `--quant int4` benchmark of `scripts/bench.sh quant`: what an int4 build saves in disk and
decode time, measured on onnxruntime (CPU, 2 threads) in one run.

    bench_quant.py CHECKPOINT_DIR MOBIUS_BINARY WORK_DIR [--runs N]

Builds the checkpoint (scripts/make_bench_checkpoint.py writes one) with the given binary as
  f16         --dtype f16                         (the size baseline)
  f32         --ep cpu --dtype f32                (the latency baseline)
  int4        --ep cpu --dtype f32 --quant int4   (accuracy_level 4, the cpu default)
  int4+emb    the same with --quant-embeddings
and prints `summary:` lines: data file sizes and their ratio to the f16 build, and the
onnxruntime decode latency of one token after a 128-token prefill (median of N runs, default
20, after 3 warm-ups; intra-op threads 2) of the int4 builds against the f32 build. Targets
(issue 11): int4 decode <= 0.4x f32; data <= 0.5x f16 (0.35x with --quant-embeddings).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

BUILDS = {
    "f16": ["--dtype", "f16"],
    "f32": ["--ep", "cpu", "--dtype", "f32"],
    "int4": ["--ep", "cpu", "--dtype", "f32", "--quant", "int4"],
    "int4+emb": ["--ep", "cpu", "--dtype", "f32", "--quant", "int4", "--quant-embeddings"],
}
PREFILL = 128


def build(binary: str, checkpoint: Path, out: Path, flags: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([binary, "build", "-q", "--config", str(checkpoint), str(out), "--overwrite", *flags], check=True)
    return time.perf_counter() - start


def decode_latency(model_dir: Path, runs: int) -> float:
    """Median seconds of one decode step after a PREFILL-token prefill."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(model_dir / "model.onnx"), so, providers=["CPUExecutionProvider"])
    names = {i.name: i for i in sess.get_inputs()}
    layers = sum(1 for n in names if n.startswith("past_key_values.") and n.endswith(".key"))
    past_shape = names["past_key_values.0.key"].shape
    kv_heads, head_dim = past_shape[1], past_shape[3]
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, size=(1, PREFILL), dtype=np.int64)

    def feed(tokens, total, past):
        f = {"input_ids": tokens, "attention_mask": np.ones((1, total), dtype=np.int64), **past}
        if "position_ids" in names:
            f["position_ids"] = np.arange(total - tokens.shape[1], total, dtype=np.int64)[None]
        return f

    empty = np.zeros((1, kv_heads, 0, head_dim), dtype=np.float32)
    past = {f"past_key_values.{i}.{kv}": empty for i in range(layers) for kv in ("key", "value")}
    outputs = [o.name for o in sess.get_outputs()]
    result = dict(zip(outputs, sess.run(None, feed(ids, PREFILL, past))))
    present = {f"past_key_values.{i}.{kv}": result[f"present.{i}.{kv}"] for i in range(layers) for kv in ("key", "value")}
    step = feed(np.array([[7]], dtype=np.int64), PREFILL + 1, present)
    times = []
    for i in range(runs + 3):
        start = time.perf_counter()
        sess.run(["logits"], step)
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("binary")
    ap.add_argument("work", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    sizes, latency = {}, {}
    for name, flags in BUILDS.items():
        out = args.work / name.replace("+", "_")
        seconds = build(args.binary, args.checkpoint, out, flags)
        sizes[name] = (out / "model.onnx.data").stat().st_size
        print(f"summary: quant build {name:9s} {seconds:6.2f} s, data {sizes[name] / 2**20:8.1f} MiB, "
              f"{sizes[name] / sizes['f16']:.3f}x the f16 build's")
        if name != "f16":
            latency[name] = decode_latency(out, args.runs)
    for name in ("int4", "int4+emb"):
        print(f"summary: quant decode {name:9s} {latency[name] * 1e3:7.2f} ms vs f32 {latency['f32'] * 1e3:7.2f} ms: "
              f"{latency[name] / latency['f32']:.3f}x (target <= 0.4x), data {sizes[name] / sizes['f16']:.3f}x f16 "
              f"(target <= {'0.35' if name == 'int4+emb' else '0.5'}x)")
    json.dump({"sizes": sizes, "decode_seconds": latency}, open(args.work / "bench_quant.json", "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
