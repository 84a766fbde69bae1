#!/usr/bin/env python3
"""`scripts/bench.sh weights`: whole `mobius build` processes against `cp`, on a generated
~300M-parameter bf16 Llama (scripts/make_bench_checkpoint.py), one file and 4 shards.

    bench_weights.py --bin target/release/mobius --work DIR --python PY [--runs 5] [--cold]

For each checkpoint, in one run, interleaved (run 1 of every command, then run 2, ...):
  cp       `cp` of the safetensors files into an empty folder
  cp2x     `cp` of a file twice the checkpoint's size (the size of an f32 build's data file)
  cat, cat2x  the same copies through user space (`cat SRC > DST`: read and write): GNU cp
           copies in the kernel (copy_file_range), which no process writing data it computed
           can do, so the ratios are given against both
  f16, bf16, f32, int4   `mobius build --config CKPT OUT -q --dtype D` (int4: `--dtype f16
           --quant int4`)
Times are wall times of the whole process (fork to exit), median of --runs, and its CPU time
(user + system, all threads, from wait4; median), which a loaded machine inflates less; the page cache is
warm (every input is read once and every command runs once untimed first), and `sync` runs
(untimed) before each timed run. With --cold, the
page cache is dropped (echo 1 > /proc/sys/vm/drop_caches, needs root) before every timed run
instead.

Memory, per build: peak RSS is the process's ru_maxrss (getrusage of the child, = VmHWM) of
the timed runs, the largest printed per build and the medians' int4 - f16 difference with
every run's value; it counts the pages of the memory-mapped checkpoint mapped at the time
(a build unmaps each tensor's once written: what stays is the largest matrix being
transposed) and the writer's blocks (16 MiB). Peak anonymous memory (heap, stacks, buffers: what the process allocates, without
the mapped checkpoint's page-cache pages) is the largest RssAnon of /proc/PID/status, sampled
every millisecond during --runs extra, untimed runs (interleaved); the median is printed, and
the int4 build's difference to the f16 build's in KiB with every run's value.

Prints one `summary:` line per command and checkpoint.
"""

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time


def timed(cmd):
    """Runs `cmd`; returns (wall seconds, CPU seconds (user + system), peak RSS in KiB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"error: {' '.join(cmd)} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def peak_anon(cmd):
    """Runs `cmd` sampling /proc/PID/status; returns the largest RssAnon seen, in KiB."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = 0
    path = f"/proc/{proc.pid}/status"
    while proc.poll() is None:
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        peak = max(peak, int(line.split()[1]))
                        break
        except (FileNotFoundError, ProcessLookupError, ValueError):
            pass
        time.sleep(0.001)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed")
    return peak


def read_all(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", required=True, help="a Python with numpy, for the generator")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold", action="store_true")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    if args.cold and not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        sys.exit("error: --cold needs write access to /proc/sys/vm/drop_caches (root)")

    checkpoints = {"one": [], "sharded": ["--shards", "4"]}
    for name, flags in checkpoints.items():
        ckpt = os.path.join(args.work, name)
        if not os.path.exists(os.path.join(ckpt, "config.json")):
            print(f"generating {ckpt} ...", flush=True)
            gen = os.path.join(here, "make_bench_checkpoint.py")
            subprocess.run([args.python, gen, ckpt, *flags], check=True)

    out = os.path.join(args.work, "out")
    for name in checkpoints:
        ckpt = os.path.join(args.work, name)
        files = sorted(os.path.join(ckpt, f) for f in os.listdir(ckpt) if f.endswith(".safetensors"))
        size = sum(os.path.getsize(f) for f in files)
        double = os.path.join(args.work, f"{name}.2x")
        if not os.path.exists(double) or os.path.getsize(double) != 2 * size:
            with open(double, "wb") as d:
                for _ in range(2):
                    for f in files:
                        with open(f, "rb") as s:
                            shutil.copyfileobj(s, d, 16 << 20)
        build = [args.bin, "build", "--config", ckpt, out, "-q", "--overwrite"]
        commands = {
            "cp": ["cp", *files, out],
            "cp2x": ["cp", double, out],
            "cat": ["sh", "-c", "; ".join(
                f"cat {shlex.quote(f)} > {shlex.quote(os.path.join(out, os.path.basename(f)))}"
                for f in files)],
            "cat2x": ["sh", "-c", f"cat {shlex.quote(double)} > {shlex.quote(os.path.join(out, 'x'))}"],
            "f16": build + ["--dtype", "f16"],
            "bf16": build + ["--dtype", "bf16"],
            "f32": build + ["--dtype", "f32"],
            "int4": build + ["--dtype", "f16", "--quant", "int4"],
        }

        def fresh():
            # Not timed: the previous output's dirty pages are flushed, so that every run
            # starts with the same amount of writeback pending (none).
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out, exist_ok=True)
            subprocess.run(["sync"], check=True)

        read_all(files + [double])
        times = {k: [] for k in commands}
        cpu = {k: [] for k in commands}
        rss_runs = {k: [] for k in commands}
        for k, cmd in commands.items():  # warm-up
            fresh()
            timed(cmd)
        for _ in range(args.runs):
            for k, cmd in commands.items():
                fresh()
                if args.cold:
                    drop_caches()
                wall, used, kb = timed(cmd)
                times[k].append(wall)
                cpu[k].append(used)
                rss_runs[k].append(kb)
        anon_runs = {k: [] for k in ("f16", "bf16", "f32", "int4")}
        for _ in range(args.runs):
            for k in anon_runs:
                fresh()
                anon_runs[k].append(peak_anon(commands[k]))
        anon = {k: statistics.median(v) for k, v in anon_runs.items()}
        shutil.rmtree(out, ignore_errors=True)

        med = {k: statistics.median(v) for k, v in times.items()}
        rss = {k: max(v) for k, v in rss_runs.items()}
        mcpu = {k: statistics.median(v) for k, v in cpu.items()}
        cache = "cold" if args.cold else "warm"
        mib = size / (1 << 20)
        print(f"summary: weights {name} ({mib:.0f} MiB bf16, {len(files)} file(s), {cache} cache, "
              f"median of {args.runs}): cp {med['cp']:.3f} s, cp of a 2x file {med['cp2x']:.3f} s, "
              f"cat {med['cat']:.3f} s, cat of the 2x file {med['cat2x']:.3f} s; CPU (user + "
              f"system): cp {mcpu['cp']:.3f} s, cp2x {mcpu['cp2x']:.3f} s, cat {mcpu['cat']:.3f} s, "
              f"cat2x {mcpu['cat2x']:.3f} s")
        for k in ("f16", "bf16", "f32", "int4"):
            base, user = ("cp2x", "cat2x") if k == "f32" else ("cp", "cat")
            extra = f", {med[k] / med['f16']:.2f}x f16" if k == "int4" else ""
            print(f"summary: weights {name} {k:>4}: {med[k]:.3f} s, {med[k] / med[base]:.2f}x {base}, "
                  f"{med[k] / med[user]:.2f}x {user}{extra}; CPU {mcpu[k]:.3f} s, "
                  f"{mcpu[k] / mcpu[base]:.2f}x {base}'s; peak RSS {rss[k] // 1024} MiB, "
                  f"peak anon {anon[k] / 1024:.2f} MiB")
        print(f"summary: weights {name} peak anon int4 - f16: {anon['int4'] - anon['f16']:+.0f} KiB "
              f"(medians of {args.runs}; int4 runs {sorted(anon_runs['int4'])} KiB, "
              f"f16 runs {sorted(anon_runs['f16'])} KiB)")
        rss_med = {k: statistics.median(rss_runs[k]) for k in ("f16", "int4")}
        print(f"summary: weights {name} peak RSS int4 - f16: {rss_med['int4'] - rss_med['f16']:+.0f} KiB "
              f"(medians of {args.runs}; int4 runs {sorted(rss_runs['int4'])} KiB, "
              f"f16 runs {sorted(rss_runs['f16'])} KiB)")


if __name__ == "__main__":
    main()
