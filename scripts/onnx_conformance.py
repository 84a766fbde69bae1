#!/usr/bin/env python3
"""ONNX's backend node conformance cases through `mobius run` (the reference interpreter).

The cases come from the installed `onnx` package (`onnx.backend.test.case.node`, generated in
memory: no network, no data folder). Each case's model and inputs are written to a scratch folder
as model.onnx and .npy files, `mobius run` computes the outputs, and they are compared with the
case's expected outputs at the case's own rtol/atol (NaN equal to NaN, infinities equal by sign,
dtypes and shapes exact).

Every case gets one status:
  pass         outputs match
  mismatch     mobius ran and an output differs (wrong value, shape or dtype)
  refused      mobius exited 1 with an error (an operator, type or attribute it does not run)
  crash        mobius panicked, aborted or was killed (exit code other than 0/1): a bug, always
  npy          an input or output a .npy file cannot hold (sequences, optionals, strings):
               excepted and counted, as the issue asks

Usage: onnx_conformance.py --mobius target/debug/mobius [--json OUT.json] [--markdown OUT.md]
       [-k SUBSTRING] [--jobs N]
Prints a summary line; exits 1 when any case crashed.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

STATUSES = ("pass", "mismatch", "refused", "crash", "npy")


def collect(substring: str | None):
    """The node cases of the installed onnx package, filtered by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            from onnx.backend.test.case.node import collect_testcases

            cases = collect_testcases(None)
    return [c for c in cases if not substring or substring in c.name]


def as_array(value):
    """A case's input or output as a numpy value: tensors and numpy scalars as arrays; other
    values (sequences, optionals) as they are."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def npy_holds(value) -> bool:
    """Whether `value` is an array of a type a standard .npy file holds: numbers and booleans,
    not strings, objects, or the 8-bit/4-bit floats and bfloat16 numpy lacks."""
    standard = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128)
    return isinstance(value, np.ndarray) and value.dtype.type in standard


def operators(cases) -> dict[str, str]:
    """The operator each case tests: its single node's type; for a function's expansion
    (`..._expanded`), the operator of the case it expands; else its first node's type."""
    single = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}
    ops = {}
    for c in cases:
        base = c.name.split("_expanded")[0]
        nodes = c.model.graph.node
        ops[c.name] = single.get(c.name) or single.get(base) or (nodes[0].op_type if nodes else "?")
    return ops


def same(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when `got` matches `expected`, else what differs."""
    if expected.dtype != got.dtype:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if expected.shape != got.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if expected.dtype.kind in "fc":
        e, g = expected.astype(np.float64), got.astype(np.float64)
        nan_e, nan_g = np.isnan(e), np.isnan(g)
        if (nan_e != nan_g).any():
            return "NaN where the expected value is not (or the reverse)"
        inf_e, inf_g = np.isinf(e), np.isinf(g)
        if (inf_e != inf_g).any() or (e[inf_e] != g[inf_g]).any():
            return "an infinity differs"
        fin = ~(nan_e | inf_e)
        diff = np.abs(e[fin] - g[fin])
        bound = atol + rtol * np.abs(e[fin])
        if (diff > bound).any():
            return f"max abs diff {diff.max():.3g}"
        return None
    if not np.array_equal(expected, got):
        return "values differ"
    return None


def run_case(case, mobius: str, scratch: str) -> tuple[str, str]:
    """(status, detail) of one case."""
    import onnx

    folder = tempfile.mkdtemp(dir=scratch)
    model_path = os.path.join(folder, "model.onnx")
    onnx.save(case.model, model_path)
    graph = case.model.graph
    initializer_names = {i.name for i in graph.initializer}
    input_names = [i.name for i in graph.input if i.name not in initializer_names]
    output_names = [o.name for o in graph.output]
    worst: tuple[str, str] = ("pass", "")
    for n, (inputs, outputs) in enumerate(case.data_sets):
        inputs, outputs = [as_array(v) for v in inputs], [as_array(v) for v in outputs]
        if not all(npy_holds(v) for v in list(inputs) + list(outputs)):
            return "npy", "a sequence, optional, string, bfloat16, float8 or 4-bit value"
        args = [mobius, "-q", "run", model_path, "--output-dir", os.path.join(folder, f"out{n}")]
        for i, (name, value) in enumerate(zip(input_names, inputs)):
            path = os.path.join(folder, f"in{n}_{i}.npy")
            np.save(path, value)
            args += ["--input", f"{name}={path}"]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "crash", "timed out after 120 s"
        if done.returncode == 1:
            return "refused", done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        if done.returncode != 0:
            return "crash", f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
        for name, expected in zip(output_names, outputs):
            path = os.path.join(folder, f"out{n}", f"{name}.npy")
            if not os.path.exists(path):
                return "mismatch", f"no output {name}"
            differs = same(np.asarray(expected), np.load(path), case.rtol, case.atol)
            if differs:
                worst = ("mismatch", f"{name}: {differs}")
    return worst


def markdown(records: list[dict]) -> str:
    """A table per operator: cases, then one column per status."""
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        per_op[r["op"]][r["status"]] += 1
    total = collections.Counter(r["status"] for r in records)
    held = len(records) - total["npy"]
    lines = [
        f"{total['pass']} of {held} cases pass ({100 * total['pass'] / max(held, 1):.1f}%); "
        f"{total['npy']} excepted (values a .npy file cannot hold); {total['crash']} crash.",
        "",
        "| operator | cases | " + " | ".join(STATUSES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in STATUSES) + " |",
    ]
    for op in sorted(per_op, key=str.lower):
        c = per_op[op]
        row = " | ".join(str(c[s]) if c[s] else "" for s in STATUSES)
        lines.append(f"| {op} | {sum(c.values())} | {row} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mobius", required=True, help="the mobius binary")
    ap.add_argument("--json", help="write every case's status and detail here")
    ap.add_argument("--markdown", help="write the per-operator table here")
    ap.add_argument("-k", help="only the cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    mobius = os.path.abspath(args.mobius)
    cases = collect(args.k)
    op_of = operators(collect(None) if args.k else cases)
    records = []
    with tempfile.TemporaryDirectory() as scratch:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(run_case, c, mobius, scratch): c for c in cases}
            for fut in concurrent.futures.as_completed(futures):
                c = futures[fut]
                status, detail = fut.result()
                records.append({"case": c.name, "op": op_of[c.name], "status": status, "detail": detail})
    records.sort(key=lambda r: r["case"])
    total = collections.Counter(r["status"] for r in records)
    held = len(records) - total["npy"]
    print(
        f"onnx {__import__('onnx').__version__}: {len(records)} node cases; "
        + ", ".join(f"{s} {total[s]}" for s in STATUSES)
        + f"; pass rate {100 * total['pass'] / max(held, 1):.1f}% of the {held} a .npy file holds"
    )
    for r in records:
        if r["status"] == "crash":
            print(f"CRASH {r['case']}: {r['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": dict(total), "records": records}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(records))
    return 1 if total["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
