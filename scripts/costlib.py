"""Shared helpers of scripts/calibrate.py and scripts/cost_report.py (issue 17).

Models are llama-shaped decoders built by `mobius build --no-weights` (shapes are what the cost
model reads; onnxruntime's CPU kernels take the same time on zero weights) from configs derived
from tests/fixtures/llama, once per *variant*: an EP file starting from `cpu` with one choice
turned off, i.e. the alternative extraction would otherwise pick between. Measurements use
onnxruntime CPU with one intra-op thread (the machine is shared; one thread is what can be
reproduced) and graph optimization level BASIC (constant folding, none of onnxruntime's own
fusions: the graph mobius wrote is what runs).

Workloads are the cost model's: a prefill of N tokens (batch 1, empty cache) and one decoding
step after N cached tokens. `mobius cost` reports them for the EP's `prefill_tokens`, so each
workload is costed through an EP file that sets `prefill_tokens = N`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent

# Model sizes: (tag, hidden, intermediate, heads, kv heads, head dim, vocab).
ALL_SIZES = [
    ("h128", 128, 384, 4, 2, 32, 1000),
    ("h512", 512, 1536, 8, 4, 64, 4000),
    ("h1024", 1024, 2816, 16, 4, 64, 8000),
]
# The sizes built (scripts/cost_report.py --sizes replaces them).
SIZES = list(ALL_SIZES)

# Variants: name -> (EP-file lines after `base = "cpu"`, extra build args, what it turns off).
VARIANTS = {
    "cpu": ([], [], "the cpu EP as built in"),
    "attention": (["gqa_dtypes = []", "qkv_pack_dtypes = []"], [],
                  "opset-23 Attention instead of GroupQueryAttention"),
    "unpacked": (["qkv_pack_dtypes = []"], [], "separate Q/K/V MatMuls into GroupQueryAttention"),
    "no-skip-norm": (["supports_skip_layer_norm = false"], [],
                     "Add + RMSNormalization instead of SkipSimplifiedLayerNormalization"),
    "int4-nbits": ([], ["--quant", "int4"], "int4 weights as MatMulNBits"),
    "int4-dq": (["supports_matmul_nbits = false"], ["--quant", "int4"],
                "int4 weights as DequantizeLinear + MatMul"),
}

# The decisions extraction takes between variants: (chosen by the cpu EP, alternative).
DECISIONS = [
    ("cpu", "attention"),
    ("cpu", "unpacked"),
    ("cpu", "no-skip-norm"),
    ("int4-nbits", "int4-dq"),
]

# (name, sequence_len, past_sequence_len): prefills of N tokens, decoding steps after N.
WORKLOADS = [
    ("prefill-16", 16, 0),
    ("prefill-128", 128, 0),
    ("decode-128", 1, 128),
    ("decode-512", 1, 512),
]


def mobius_bin() -> str:
    return os.environ.get("MOBIUS_BIN", str(ROOT / "target" / "debug" / "mobius"))


def run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def make_config(work: Path, size) -> Path:
    tag, hidden, inter, heads, kv, hd, vocab = size
    cfg = json.loads((ROOT / "tests/fixtures/llama/config.json").read_text())
    cfg.update(hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
               num_key_value_heads=kv, head_dim=hd, vocab_size=vocab,
               max_position_embeddings=1024)
    d = work / f"cfg-{tag}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def ep_file(path: Path, name: str, lines: list[str], cost: dict | None = None,
            ops: dict | None = None) -> Path:
    """An EP file `name` based on cpu with `lines`, a [cost] table and [cost.ops.*] tables."""
    text = [f'name = "{name}"', 'base = "cpu"', *lines]
    if cost:
        text.append("[cost]")
        text += [f"{k} = {v!r}" for k, v in cost.items()]
    for op, corr in (ops or {}).items():
        text.append(f'[cost.ops."{op}"]')
        text += [f"{k} = {v!r}" for k, v in corr.items()]
    path.write_text("\n".join(text) + "\n")
    return path


def build_variants(work: Path, sizes: list | None = None) -> dict[tuple[str, str], Path]:
    """Every size (default: SIZES) × variant built; {(size tag, variant): model.onnx}."""
    models = {}
    for size in sizes or SIZES:
        cfg = make_config(work, size)
        for variant, (lines, args, _) in VARIANTS.items():
            out = work / f"{size[0]}-{variant}"
            f = ep_file(work / f"ep-{variant}.toml", f"v-{variant}", lines)
            if out.exists():
                shutil.rmtree(out)
            run([mobius_bin(), "-q", "build", "--no-weights", "--config", str(cfg), str(out),
                 "--ep-file", str(f), *args])
            models[(size[0], variant)] = out / "model.onnx"
    return models


def load_params(toml_path: Path | None) -> tuple[dict, dict]:
    """([cost] table, [cost.ops] tables) of a calibrated file, or empty ones (built-in cpu)."""
    if toml_path is None:
        return {}, {}
    data = tomllib.loads(toml_path.read_text())
    cost = dict(data.get("cost", {}))
    ops = cost.pop("ops", {})
    cost.pop("prefill_tokens", None)
    return cost, ops


def cost(model: Path, work: Path, workload, params: tuple[dict, dict]) -> dict:
    """`mobius cost --json` of `model` under `workload`: the cost-model row of each node
    (prefill column for a prefill, decode column for a decoding step) and the total."""
    name, seq, past = workload
    tokens = seq if past == 0 else past
    base_cost, ops = params
    f = ep_file(work / "cost-ep.toml", "costing", [],
                {**base_cost, "prefill_tokens": tokens}, ops)
    r = json.loads(run([mobius_bin(), "cost", str(model), "--ep-file", str(f), "--json"]))
    column = "prefill" if past == 0 else "decode"
    return {
        "nodes": {n["name"]: {**n[column], "op": n["op"]} for n in r["nodes"]},
        "total": r[f"total_{column}"]["time_us"],
    }


def session(model: Path, profile_dir: Path | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_dir / "prof")
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


def feeds(sess: ort.InferenceSession, seq: int, past: int) -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for i in sess.get_inputs():
        dims = []
        for d in i.shape:
            if isinstance(d, int):
                dims.append(d)
            elif "past" in d:
                dims.append(past)
            elif "total" in d or "+" in d:
                dims.append(past + seq)
            elif "batch" in d:
                dims.append(1)
            else:
                dims.append(seq)
        if i.name == "attention_mask":
            out[i.name] = np.ones((1, past + seq), dtype=np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.arange(past, past + seq, dtype=np.int64)[None, :]
        elif i.name == "input_ids":
            out[i.name] = rng.integers(0, 100, size=(1, seq), dtype=np.int64)
        elif "float16" in i.type:
            out[i.name] = rng.standard_normal(dims).astype(np.float16)
        else:
            out[i.name] = rng.standard_normal(dims).astype(np.float32)
    return out


def paired_latencies(models: dict, pairs: list, runs: int, reps: int = 3,
                     warmup: int = 3, seed: int = 0, workloads: list | None = None) -> dict:
    """Paired wall times, µs: {(key a, key b, workload name): [(a µs, b µs), ...]}, one pair
    per round. `pairs` lists (model key a, model key b, workload); every round visits every
    pair once, in a fresh random order, and runs its two models alternately `reps` times
    each (which one starts is random), keeping each model's fastest run: the two sides of a
    pair see the same machine load, and the minimum drops runs another job preempted (the
    machine is shared; preemption only ever adds time). Workload names are looked up in
    `workloads` (default WORKLOADS)."""
    rng = np.random.default_rng(seed)
    sessions, inputs = {}, {}
    for key, model in models.items():
        sessions[key] = session(model)
    wls = {w[0]: w for w in workloads or WORKLOADS}
    for a, b, wl in pairs:
        for key in (a, b):
            if (key, wl) not in inputs:
                inputs[(key, wl)] = feeds(sessions[key], wls[wl][1], wls[wl][2])
                for _ in range(warmup):
                    sessions[key].run(None, inputs[(key, wl)])
    out: dict = {(a, b, wl): [] for a, b, wl in pairs}
    for _ in range(runs):
        for i in rng.permutation(len(pairs)):
            a, b, wl = pairs[i]
            t = {a: float("inf"), b: float("inf")}
            order = (a, b) if rng.random() < 0.5 else (b, a)
            for _ in range(reps):
                for key in order:
                    s0 = time.perf_counter()
                    sessions[key].run(None, inputs[(key, wl)])
                    t[key] = min(t[key], (time.perf_counter() - s0) * 1e6)
            out[(a, b, wl)].append((t[a], t[b]))
    return out


def ratio_ci(pairs: list[tuple[float, float]], resamples: int = 4000, level: float = 0.95,
             seed: int = 1) -> tuple[float, float, float]:
    """The median of the paired ratios a/b and its bootstrap confidence interval
    (percentile, `level`): (median, low, high)."""
    r = np.log(np.array([a / b for a, b in pairs]))
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(r, size=(resamples, len(r)), replace=True), axis=1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return float(np.exp(np.median(r))), float(np.exp(lo)), float(np.exp(hi))


def kernel_times(model: Path, workload, runs: int, warmup: int = 3) -> dict[str, float]:
    """Median kernel time of each node (onnxruntime's profiler), µs, keyed by the node's first
    output name (how `mobius cost` names nodes)."""
    _, seq, past = workload
    graph = onnx.load(str(model), load_external_data=False).graph
    outputs = {n.name: n.output[0] for n in graph.node}
    with tempfile.TemporaryDirectory() as d:
        sess = session(model, Path(d))
        f = feeds(sess, seq, past)
        for _ in range(warmup):
            sess.run(None, f)
        for _ in range(runs):
            sess.run(None, f)
        prof = sess.end_profiling()
        events = json.loads(Path(prof).read_text())
    per_node: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        node = e["name"][: -len("_kernel_time")]
        per_node.setdefault(node, []).append(float(e["dur"]))
    # The first `warmup` runs of each node are the warmup.
    return {
        outputs.get(n, n): statistics.median(ts[warmup:] or ts)
        for n, ts in per_node.items()
    }


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x))
        # ties: average ranks
        xs = np.asarray(x)
        for v in np.unique(xs):
            idx = xs == v
            r[idx] = r[idx].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
