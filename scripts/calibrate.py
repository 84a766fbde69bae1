#!/usr/bin/env python3
"""Fit the cost model's roofline parameters to onnxruntime CPU on this machine (issue 17).

    .venv/bin/python scripts/calibrate.py --ep cpu --out cpu-cost.toml [--runs 10]

What it measures: every kernel of llama-shaped decoders (two sizes, six variants: GQA or
Attention, packed or separate QKV, SkipSimplifiedLayerNormalization or Add+RMSNormalization,
MatMulNBits or DequantizeLinear+MatMul; see scripts/costlib.py) under four workloads, timed by
onnxruntime's profiler (one thread, median of --runs): each op, fused contrib ops included, at
the shapes it runs at in a decoder. Each kernel is paired with what `mobius cost` says it moves
and computes (bytes, FLOPs: the cost model's own counts, so the fit cannot drift from it). The
chains of tiny Adds are timed with and without the profiler, for the profiler's own share.

Calibration data is separate from scripts/cost_report.py's evaluation data: other sizes
(hidden 256 and 768, CAL_SIZES) and other workloads (prefill of 32 and 256 tokens, a decoding
step after 64 and 256; CAL_WORKLOADS) than the report's (hidden 128, 512, 1024; prefill 16
and 128, decoding after 128 and 512).

How it fits: least squares on log time. The global parameters (launch overhead, bandwidth, f32
peak) minimise the mean squared log error of `launch + max(bytes/bandwidth, flops/peak)` over
every kernel the cost model does not count as host shape arithmetic or folded, by a grid search
in log space refined twice around the best point. Then, with those fixed, each op type with at
least two kernels gets an `overhead_us`/`scale` correction (same loss, grid search) when that
lowers its own error by at least a quarter. Last, the profiler's own share of each recorded
kernel time (a tiny Add's profiled time less its wall time per node in a long chain of them,
timed without the profiler) is taken off the launch overhead: what a run pays per kernel is
what the cost model's launch term stands for. The f16 peak is set to
the f32 one (onnxruntime's CPU kernels run f16 no faster). `prefill_tokens` stays 128, the
built-in cpu value.

The file starts from `base = "cpu"` and is named `cpu-calibrated`; load it with
`mobius build|optimize|cost --ep-file cpu-cost.toml`. The built-in cpu parameters are not
changed by this script.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
import costlib  # noqa: E402

FITTED_BOUNDS = {"launch", "memory", "compute"}

# Calibration data is kept apart from scripts/cost_report.py's evaluation data: other model
# sizes (tag, hidden, intermediate, heads, kv heads, head dim, vocab) and other workloads
# (name, sequence_len, past_sequence_len) than costlib.SIZES / costlib.WORKLOADS.
CAL_SIZES = [
    ("c256", 256, 768, 4, 2, 64, 2000),
    ("c768", 768, 2048, 12, 4, 64, 6000),
]
CAL_WORKLOADS = [
    ("prefill-32", 32, 0),
    ("prefill-256", 256, 0),
    ("decode-64", 1, 64),
    ("decode-256", 1, 256),
]


def wall_time(model: Path, workload, runs: int, warmup: int = 3) -> float:
    """Median wall time of one run of `model` without the profiler, µs."""
    _, seq, past = workload
    sess = costlib.session(model)
    f = costlib.feeds(sess, seq, past)
    for _ in range(warmup):
        sess.run(None, f)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, f)
        ts.append((time.perf_counter() - t) * 1e6)
    return statistics.median(ts)


def chain(path: Path, n: int) -> Path:
    """A model of `n` Adds of a constant in a row on a 16-float input: all launch."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [16])
    y = onnx.helper.make_tensor_value_info(f"t{n}", onnx.TensorProto.FLOAT, [16])
    one = onnx.numpy_helper.from_array(np.ones(16, dtype=np.float32), "one")
    nodes = [onnx.helper.make_node("Add", ["x" if i == 0 else f"t{i}", "one"], [f"t{i + 1}"],
                                   name=f"add{i}") for i in range(n)]
    graph = onnx.helper.make_graph(nodes, "chain", [x], [y], [one])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]),
              str(path))
    return path


def profiler_bias(work: Path, runs: int) -> float:
    """How much longer onnxruntime's profiler says a kernel took than it costs a run, µs:
    the median profiled time of a tiny Add less the wall time per node of long chains of
    them (slope between 50 and 400 nodes, without the profiler: dispatch included). The
    profiler's own bookkeeping falls inside each kernel's recorded time; it is taken off the
    fitted launch overhead."""
    wl = ("chain", 16, 0)
    short, long_ = chain(work / "chain-50.onnx", 50), chain(work / "chain-400.onnx", 400)
    slope = (wall_time(long_, wl, runs * 5) - wall_time(short, wl, runs * 5)) / 350
    kernel = statistics.median(costlib.kernel_times(long_, wl, runs).values())
    print(f"a tiny Add: {slope:.3g} µs per node of a chain, {kernel:.3g} µs profiled",
          file=sys.stderr)
    return kernel - slope


def collect(work: Path, models: dict, runs: int) -> list[tuple[str, float, float, float]]:
    """(op, bytes, flops, measured µs) of every kernel of every model and workload."""
    rows = []
    builtin = costlib.load_params(None)
    for (size, variant), model in models.items():
        for wl in CAL_WORKLOADS:
            predicted = costlib.cost(model, work, wl, builtin)["nodes"]
            measured = costlib.kernel_times(model, wl, runs)
            for name, t in measured.items():
                p = predicted.get(name)
                if p is None or p["bound"] not in FITTED_BOUNDS:
                    continue
                rows.append((p["op"], p["bytes"], p["flops"], max(t, 0.5)))
        print(f"  measured {size} {variant}", file=sys.stderr)
    return rows


def loss(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Mean squared log error along the last axis."""
    return np.mean((np.log(pred) - np.log(meas)) ** 2, axis=-1)


def fit_global(b, f, t):
    """(launch µs, GB/s, TFLOP/s) minimising the log error: grid, then two finer grids."""
    lo = np.log10([0.05, 0.5, 0.005])
    hi = np.log10([200.0, 2000.0, 20.0])
    best = None
    for step in range(3):
        n = 25
        axes = [np.linspace(lo[i], hi[i], n) for i in range(3)]
        L, BW, P = np.meshgrid(*[10 ** a for a in axes], indexing="ij")
        L, BW, P = L.ravel()[:, None], BW.ravel()[:, None], P.ravel()[:, None]
        pred = L + np.maximum(b[None] / (BW * 1e3), f[None] / (P * 1e6))
        e = loss(pred, t[None])
        i = int(np.argmin(e))
        best = (float(L[i, 0]), float(BW[i, 0]), float(P[i, 0]), float(e[i]))
        width = (hi - lo) / (n - 1) * 2
        centre = np.log10(best[:3])
        lo, hi = centre - width, centre + width
    return best


def fit_op(b, f, t, launch, bw, peak):
    """(overhead µs, scale, error) of one op type's correction."""
    roof = np.maximum(b / (bw * 1e3), f / (peak * 1e6))
    O = np.concatenate([[0.0], np.logspace(-2, 3, 41)])[:, None, None]
    S = np.logspace(-2, 2, 49)[None, :, None]
    pred = launch + O + S * roof[None, None, :]
    e = loss(pred, t[None, None, :])
    i, j = np.unravel_index(int(np.argmin(e)), e.shape)
    return float(O[i, 0, 0]), float(S[0, j, 0]), float(e[i, j])


def fit_and_write(a, rows, bias) -> Path:
    """Fit the parameters to the kernel timings `rows` and write the EP file `a.out`."""
    ops = np.array([r[0] for r in rows])
    b, f, t = (np.array([r[i] for r in rows], dtype=float) for i in (1, 2, 3))
    launch, bw, peak, err = fit_global(b, f, t)
    base_err = float(loss(1.0 + np.maximum(b / 60e3, f / 1e6), t))
    print(f"{len(rows)} kernels; built-in cpu RMS log error {np.sqrt(base_err):.3f}, "
          f"fitted {np.sqrt(err):.3f}: launch {launch:.3g} µs, {bw:.3g} GB/s, "
          f"{peak:.3g} TFLOP/s", file=sys.stderr)
    corrections = {}
    for op in sorted(set(ops)):
        m = ops == op
        if m.sum() < 2:
            continue
        roof = np.maximum(b[m] / (bw * 1e3), f[m] / (peak * 1e6))
        before = float(loss(launch + roof, t[m]))
        o, s, after = fit_op(b[m], f[m], t[m], launch, bw, peak)
        if after < 0.75 * before and (o > 0 or s != 1.0):
            corrections[op] = {"overhead_us": round(o, 4), "scale": round(s, 4)}
            print(f"  {op}: {m.sum()} kernels, RMS log error {np.sqrt(before):.3f} -> "
                  f"{np.sqrt(after):.3f} with overhead {o:.3g} µs, scale {s:.3g}",
                  file=sys.stderr)
    header = [
        f"# Written by scripts/calibrate.py --ep {a.ep} on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC from {len(rows)} "
        "kernel timings",
        "# (onnxruntime CPU, 1 thread, optimization level BASIC). Global parameters: least",
        "# squares on log time; [cost.ops.*]: per-op corrections where they cut that op's",
        f"# error by a quarter. RMS log error: built-in cpu {np.sqrt(base_err):.3f}, "
        f"calibrated {np.sqrt(err):.3f} before corrections.",
        f"# launch_overhead_us: {launch:.4g} µs fitted to profiled kernels less the "
        f"profiler's own {bias:.4g} µs.",
    ]
    path = costlib.ep_file(
        a.out, "cpu-calibrated", [],
        {"launch_overhead_us": round(max(launch - bias, 0.01), 4),
         "memory_bandwidth_gbps": round(bw, 4),
         "peak_tflops_f32": round(peak, 5), "peak_tflops_f16": round(peak, 5),
         "prefill_tokens": 128},
        corrections,
    )
    path.write_text("\n".join(header) + "\n" + path.read_text())
    costlib.run([costlib.mobius_bin(), "list", "eps", "--ep-file", str(path)])
    return path


def check(work: Path, models: dict, path: Path, runs: int) -> None:
    """Validation on the calibration data: each decision (the two variants extraction chooses
    between) at the calibration sizes and workloads, measured as scripts/cost_report.py does
    (paired rounds, bootstrap 99% CI of the ratio; a tie when it holds 1), and how often the
    built-in and the fitted parameters order the decided pairs as measured."""
    pairs = [((s[0], d[0]), (s[0], d[1]), w[0])
             for s in CAL_SIZES for d in costlib.DECISIONS for w in CAL_WORKLOADS]
    rounds = costlib.paired_latencies(models, pairs, runs, workloads=CAL_WORKLOADS)
    wls = {w[0]: w for w in CAL_WORKLOADS}
    sets = {"built-in cpu": costlib.load_params(None), "fitted": costlib.load_params(path)}
    right = dict.fromkeys(sets, 0)
    won = 0
    for (ka, kb, wl), ts in rounds.items():
        _, lo, hi = costlib.ratio_ci(ts, level=0.99)
        if lo <= 1.0 <= hi:
            continue
        won += 1
        line = []
        for name, params in sets.items():
            ta, tb = (costlib.cost(models[k], work, wls[wl], params)["total"] for k in (ka, kb))
            right[name] += (ta < tb) == (hi < 1.0)
            line.append(f"{name} {ta / tb:.3f}{'' if (ta < tb) == (hi < 1.0) else ' (wrong)'}")
        print(f"  {ka[0]} {ka[1]} vs {kb[1]} {wl}: measured ratio [{lo:.3f}, {hi:.3f}], "
              "predicted " + ", ".join(line), file=sys.stderr)
    print(f"check on the calibration models: {won} of {len(rounds)} decisions have a measured "
          "winner; the cost model orders them as measured with "
          + ", ".join(f"{n} parameters {r}/{won}" for n, r in right.items()), file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ep", required=True, choices=["cpu"],
                    help="the EP to calibrate (onnxruntime CPU is the one measurable here)")
    ap.add_argument("--out", required=True, type=Path, help="the EP file to write")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per model and workload")
    ap.add_argument("--check-runs", type=int, default=20,
                    help="paired rounds of the decision check on the calibration models "
                    "(0: no check)")
    ap.add_argument("--work", type=Path, help="keep the built models here (default: a temp dir)")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    if a.check_runs < 0:
        ap.error("--check-runs must be at least 0")
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        models = costlib.build_variants(work, CAL_SIZES)
        rows = collect(work, models, a.runs)
        bias = profiler_bias(work, a.runs)
        path = fit_and_write(a, rows, bias)
        if a.check_runs:
            check(work, models, path, a.check_runs)
    print(f"wrote {path} in {time.time() - started:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
