#!/usr/bin/env python3
"""The Python package against the CLI, in one run (a benchmark, not a test).

    bench_python.py --bin target/release/mobius --work DIR [--runs 7]

Run it with a Python that has the wheel installed (built with `--release`, as the CLI).
Commands run interleaved (run 1 of each, then run 2, ...); medians of --runs, after one untimed
run of each:

  graph    Llama-3.2-1B's config (tests/data/configs/llama-3.2-1b), no weights, for `default`
           and for `cuda` f16:
             cli          the `mobius build --no-weights` process (fork to exit)
             py.build     `mobius.build(..., load_weights=False)` in this process
             py.build+save  the same plus `pkg.save` (the files the CLI writes)
  weights  the bench checkpoint (scripts/make_bench_checkpoint.py: ~303M parameters, bf16),
           `--dtype f16`:
             cli          the `mobius build` process
             py.save      `pkg.save` of a package built in this process (untimed build)
             py.build+save  both

Prints the medians and the ratios the issue asks for (py.build / cli for graphs, py.save / cli
for weights). mobius-onnx is compared when it imports (`--reference-python PY` with it
installed); it needs torch, and the line says so when it cannot run.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import mobius

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIG_1B = os.path.join(REPO, "tests", "data", "configs", "llama-3.2-1b")


def process_seconds(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + system, all threads) seconds of the process running `cmd`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"error: {' '.join(cmd)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def call_seconds(fn) -> tuple[float, float]:
    """Wall and CPU (user + system, all threads of this process) seconds of `fn()`."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fn()
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def fresh(out: str) -> None:
    shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="the release CLI")
    ap.add_argument("--work", required=True, help="a folder for the bench checkpoint and outputs")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--reference-python", help="a Python with mobius-onnx (and torch) installed")
    ap.add_argument("--only", choices=["graph", "weights"], help="measure one kind of case only")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    out = os.path.join(args.work, "out")
    ckpt = os.path.join(args.work, "bench-bf16")
    if not os.path.exists(os.path.join(ckpt, "config.json")):
        print(f"generating {ckpt} ...", flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "make_bench_checkpoint.py"), ckpt], check=True)

    def py_build(src, **kw):
        return lambda: mobius.build(src, **kw)

    def py_build_save(src, **kw):
        def run():
            fresh(out)
            mobius.build(src, **kw).save(out)

        return run

    cases: dict[str, dict[str, object]] = {}
    for ep, dtype in (("default", None), ("cuda", "f16")):
        flags = ["--ep", ep] + (["--dtype", dtype] if dtype else [])
        kw = {"execution_provider": ep, "load_weights": False} | ({"dtype": dtype} if dtype else {})
        cases[f"graph {ep}{'-' + dtype if dtype else ''}"] = {
            "cli": [args.bin, "build", "--config", CONFIG_1B, out, "-q", "--no-weights", *flags],
            "py.build": py_build(CONFIG_1B, **kw),
            "py.build+save": py_build_save(CONFIG_1B, **kw),
        }
    weights_pkg = {}

    def py_save():
        fresh(out)
        weights_pkg["pkg"].save(out)

    cases["weights f16"] = {
        "cli": [args.bin, "build", "--config", ckpt, out, "-q", "--dtype", "f16"],
        "py.save": py_save,
        "py.build+save": py_build_save(ckpt, dtype="f16"),
    }

    if args.only:
        cases = {k: v for k, v in cases.items() if k.startswith(args.only)}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in range(args.runs + 1):
        for case, commands in cases.items():
            if case.startswith("weights"):
                weights_pkg["pkg"] = mobius.build(ckpt, dtype="f16")
            for name, cmd in commands.items():
                fresh(out)
                subprocess.run(["sync"], check=True)
                seconds = process_seconds(cmd) if isinstance(cmd, list) else call_seconds(cmd)
                if run > 0:
                    times.setdefault((case, name), []).append(seconds)
    print(f"mobius {mobius.__version__} ({mobius.__file__}), CLI {args.bin}, {args.runs} runs, medians")
    for case, commands in cases.items():
        for i, kind in ((0, "wall"), (1, "CPU")):
            med = {name: statistics.median(t[i] for t in times[(case, name)]) for name in commands}
            line = ", ".join(f"{name} {med[name] * 1e3:.1f} ms" for name in commands)
            first_py = next(n for n in commands if n != "cli")
            print(f"{case} ({kind}): {line}; {first_py} / cli = {med[first_py] / med['cli']:.2f}, "
                  f"py.build+save / cli = {med['py.build+save'] / med['cli']:.2f}")
    if args.reference_python and args.only != "weights":
        reference(args)
    else:
        print("mobius-onnx: not measured (needs --reference-python: a Python with mobius-onnx and torch)")


REFERENCE = r"""
import sys, time, shutil
import mobius
src, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ts = []
for i in range(runs + 1):
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    pkg = mobius.build(src, load_weights=False)
    pkg.save(out, check_weights=False, progress_bar=False)
    ts.append(time.perf_counter() - t0)
first, warm = ts[0], sorted(ts[1:])
print(first, warm[len(warm) // 2])
"""


def reference(args) -> None:
    """mobius-onnx's build + save of Llama-3.2-1B's config (no weights) against ours, each in a
    fresh Python of its own (the reference's first call pays for its caches): first call, and
    the median of the warm calls after it."""
    times = {}
    for name, python in (("mobius-onnx", args.reference_python), ("ours", sys.executable)):
        out = os.path.join(args.work, f"out-{name}")
        done = subprocess.run([python, "-c", REFERENCE, CONFIG_1B, out, str(args.runs)], capture_output=True, text=True)
        if done.returncode != 0:
            why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode
            print(f"{name}: could not run ({why})")
            return
        times[name] = [float(x) for x in done.stdout.split()[-2:]]
    (ref_first, ref_warm), (first, warm) = times["mobius-onnx"], times["ours"]
    print(f"graph default, build+save in a fresh process: mobius-onnx first {ref_first * 1e3:.0f} ms, warm "
          f"{ref_warm * 1e3:.0f} ms; ours first {first * 1e3:.1f} ms, warm {warm * 1e3:.1f} ms; ratio first "
          f"{ref_first / first:.0f}x, warm {ref_warm / warm:.0f}x")


if __name__ == "__main__":
    main()
