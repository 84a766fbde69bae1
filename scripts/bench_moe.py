#!/usr/bin/env python3
"""The mixture-of-experts benchmark of `scripts/bench.sh moe`: onnxruntime CPU latency of a
Mixtral-shaped model with its MoE blocks fused (`com.microsoft::MoE`, the cpu EP) against the
same model with the dense standard-ONNX block (the cpu EP with `supports_fused_moe = false`, an
EP file; every other fusion the same).

    bench_moe.py CHECKPOINT_DIR MOBIUS_BINARY WORK_DIR [--runs N]

CHECKPOINT_DIR is a Mixtral checkpoint (scripts/make_bench_checkpoint.py --moe --layers 10
writes a ~1B-parameter one: 10 layers of 8 experts of intermediate 3584, 2 per token). Both
builds are f32 for the cpu EP. Prints `summary:` lines: the latency of one decode step after a
128-token prefill and of the 128-token prefill itself (medians of N runs, default 10, after 2
warm-ups, the two builds interleaved; intra-op threads 2), the ratio fused / dense, and the
largest difference of their logits on the prefill.
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
import onnx
import onnxruntime as ort

PREFILL = 128
DENSE_EP = """name = "cpu-dense-moe"
base = "cpu"
supports_fused_moe = false
"""


def build(binary: str, checkpoint: Path, out: Path, flags: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([binary, "build", "-q", "--config", str(checkpoint), str(out), "--overwrite", *flags], check=True)
    return time.perf_counter() - start


def op_count(out: Path, op: str) -> int:
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    return sum(1 for n in model.graph.node if n.op_type == op)


class Model:
    """One build loaded in onnxruntime, with the feeds of a prefill and of the decode step after."""

    def __init__(self, out: Path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(str(out / "model.onnx"), so, providers=["CPUExecutionProvider"])
        names = {i.name: i for i in self.sess.get_inputs()}
        self.has_positions = "position_ids" in names
        layers = sum(1 for n in names if n.startswith("past_key_values.") and n.endswith(".key"))
        shape = names["past_key_values.0.key"].shape
        empty = np.zeros((1, shape[1], 0, shape[3]), dtype=np.float32)
        self.kv = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        ids = np.random.default_rng(0).integers(0, 256, size=(1, PREFILL), dtype=np.int64)
        self.prefill = self.feed(ids, PREFILL, {k: empty for k in self.kv})
        outputs = [o.name for o in self.sess.get_outputs()]
        result = dict(zip(outputs, self.sess.run(None, self.prefill)))
        self.logits = result["logits"]
        present = {k: result[k.replace("past_key_values", "present")] for k in self.kv}
        self.step = self.feed(np.array([[7]], dtype=np.int64), PREFILL + 1, present)

    def feed(self, tokens, total, past):
        f = {"input_ids": tokens, "attention_mask": np.ones((1, total), dtype=np.int64), **past}
        if self.has_positions:
            f["position_ids"] = np.arange(total - tokens.shape[1], total, dtype=np.int64)[None]
        return f

    def time(self, feed) -> float:
        start = time.perf_counter()
        self.sess.run(["logits"], feed)
        return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("binary")
    ap.add_argument("work", type=Path)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    ep_file = args.work / "cpu-dense-moe.toml"
    ep_file.write_text(DENSE_EP)
    builds = {
        "fused": ["--ep", "cpu", "--dtype", "f32"],
        "dense": ["--ep-file", str(ep_file), "--dtype", "f32"],
    }
    models = {}
    for name, flags in builds.items():
        out = args.work / name
        seconds = build(args.binary, args.checkpoint, out, flags)
        size = (out / "model.onnx.data").stat().st_size
        moe, topk = op_count(out, "MoE"), op_count(out, "TopK")
        print(f"summary: moe build {name:5s} {seconds:6.2f} s, data {size / 2**30:6.2f} GiB, "
              f"{moe} MoE, {topk} TopK")
        if (moe == 0) == (name == "fused"):
            print(f"error: the {name} build has {moe} MoE ops", file=sys.stderr)
            return 1
        models[name] = Model(out)
    diff = float(np.abs(models["fused"].logits - models["dense"].logits).max())
    times = {(name, what): [] for name in models for what in ("decode", "prefill")}
    for i in range(args.runs + 2):
        for name, m in models.items():
            for what, feed in (("decode", m.step), ("prefill", m.prefill)):
                t = m.time(feed)
                if i >= 2:
                    times[(name, what)].append(t)
    medians = {k: statistics.median(v) for k, v in times.items()}
    for what in ("decode", "prefill"):
        fused, dense = medians[("fused", what)], medians[("dense", what)]
        print(f"summary: moe {what:7s} fused {fused * 1e3:8.1f} ms vs dense {dense * 1e3:8.1f} ms: "
              f"{fused / dense:.3f}x (median of {args.runs}, {'1 token after ' if what == 'decode' else ''}"
              f"{PREFILL} tokens, 2 threads)")
    print(f"summary: moe logits fused vs dense: max abs difference {diff:.2e} over the prefill")
    json.dump({"median_seconds": {f"{n} {w}": v for (n, w), v in medians.items()}, "logits_max_diff": diff},
              open(args.work / "bench_moe.json", "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
