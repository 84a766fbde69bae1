#!/usr/bin/env python3
"""Scale benchmark of `mobius build --no-weights` (run by `scripts/bench.sh scale`).

Builds Llama-3.2-1B's config with more layers, by default and for `--ep cuda --dtype f16`. The
runs of the sizes are interleaved (so a change of load hits every size alike); each size
reports its best wall time, its best CPU time (user + system, from getrusage), its largest max
RSS and, when they can be counted, the instructions of one run, then its ratios to the smallest
size. Instructions are deterministic and what grows linearly; time also pays for the working
set leaving the CPU caches.

Instructions are counted with `perf stat -e instructions:u` where the CPU's counters can be
read, else not at all, unless `--instructions valgrind` (cachegrind: exact, ~30x slower).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = Path("tests/data/configs/llama-3.2-1b/config.json")
TARGETS = (("default", []), ("cuda f16", ["--ep", "cuda", "--dtype", "f16"]))


def build_args(binary, config_dir, out, flags):
    return [binary, "build", "--config", str(config_dir), str(out), "--no-weights", "-q", *flags]


def timed_run(binary, config_dir, out, flags):
    """Wall seconds, CPU seconds and max RSS (KiB) of one build."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.Popen(build_args(binary, config_dir, out, flags), stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        sys.exit(f"error: {' '.join(build_args(binary, config_dir, out, flags))} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def perf_works():
    if not shutil.which("perf"):
        return False
    probe = subprocess.run(
        ["perf", "stat", "-x,", "-e", "instructions:u", "true"], capture_output=True, text=True
    )
    return re.search(r"^\d+,", probe.stderr, re.M) is not None


def instructions(counter, binary, config_dir, out, flags):
    """User-space instructions of one build, or None."""
    shutil.rmtree(out, ignore_errors=True)
    if counter == "perf":
        cmd = ["perf", "stat", "-x,", "-e", "instructions:u", *build_args(binary, config_dir, out, flags)]
        result = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        found = re.search(r"^(\d+),[^,]*,instructions", result.stderr, re.M)
    elif counter == "valgrind":
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        result = subprocess.run(
            cmd + build_args(binary, config_dir, out, flags),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    else:
        return None
    return int(found.group(1).replace(",", "")) if found else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="target/release/mobius")
    parser.add_argument("--layers", type=int, nargs="+", default=[100, 1000, 2000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--instructions", choices=["auto", "perf", "valgrind", "none"], default="auto")
    args = parser.parse_args()
    counter = args.instructions
    if counter == "auto":
        counter = "perf" if perf_works() else "none"
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        text = CONFIG.read_text()
        for n in args.layers:
            (scratch / f"l{n}").mkdir()
            config = re.sub(r'"num_hidden_layers": *\d+', f'"num_hidden_layers": {n}', text)
            (scratch / f"l{n}" / "config.json").write_text(config)
        out = scratch / "out"
        print(
            f"== scale: mobius build --no-weights, Llama-3.2-1B with more layers "
            f"(best of {args.runs}, instructions: {counter})",
            flush=True,
        )
        for name, flags in TARGETS:
            best = {n: [float("inf"), float("inf"), 0] for n in args.layers}
            for _ in range(args.runs):
                for n in args.layers:
                    wall, cpu, rss = timed_run(args.bin, scratch / f"l{n}", out, flags)
                    b = best[n]
                    b[0], b[1], b[2] = min(b[0], wall), min(b[1], cpu), max(b[2], rss)
            counts = {n: instructions(counter, args.bin, scratch / f"l{n}", out, flags) for n in args.layers}
            n0 = args.layers[0]
            for n in args.layers:
                wall, cpu, rss = best[n]
                ins = counts[n]
                ins_text = f"{ins / 1e6:.1f}M" if ins else "-"
                ratio = f"x{ins / counts[n0]:.2f}" if ins and counts[n0] else "-"
                print(
                    f"summary: scale {name:<8} {n:5d} layers: wall {wall:6.3f} s, CPU {cpu:6.3f} s, "
                    f"max RSS {rss // 1024:4d} MiB, instructions {ins_text:>8}; "
                    f"x{n / n0:g} layers: wall x{wall / nonzero(best[n0][0]):.1f}, "
                    f"CPU x{cpu / nonzero(best[n0][1]):.1f}, instructions {ratio}",
                    flush=True,
                )


def nonzero(seconds):
    return seconds if seconds > 0 else 1e-3


if __name__ == "__main__":
    main()
