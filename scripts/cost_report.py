#!/usr/bin/env python3
"""How well does the cost model predict onnxruntime CPU? (issue 17)

    .venv/bin/python scripts/cost_report.py [--calibrated cpu-cost.toml] [--runs 40]

Builds the variants of scripts/costlib.py (llama decoders of hidden 128, 512 and 1024 ×
GQA/Attention, packed/separate QKV, SkipSimplifiedLayerNormalization/Add+RMSNormalization,
MatMulNBits/DequantizeLinear+MatMul) and measures each decision extraction takes (the two
variants it chooses between) under four workloads (prefill of 16 and 128 tokens, a decoding
step after 128 and 512) with onnxruntime CPU (1 thread, optimization level BASIC): --runs
paired rounds, every round visiting the decisions in a fresh random order and running the two
variants alternately --reps times each, the fastest run of each side counting (the machine is
shared: preemption only adds time, and both sides see the same load).

The measured winner of a decision: the median over the rounds of the paired ratio (first ÷
second variant) and its bootstrap 99% confidence interval; a variant wins when the interval
lies wholly on its side of 1. Otherwise the decision is a *tie* (no measurable winner): ties
are counted and listed apart, never as right or wrong.

It prints, for the built-in cpu parameters and (with --calibrated) the calibrated ones: what
extraction picks (one pick per size and decision: the variant the cost model rates cheaper under
the prefill of 128 tokens extraction weighs, checked against what `mobius build --ep cpu` /
`--ep-file` built where its graph holds that decision), how many decisions with a measured
winner that pick is, whether the cost model orders each decided pair as measured, and the
Spearman rank correlation between `mobius cost`'s total and the measured latency (median of all
of a model's runs) over every model and workload.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import costlib  # noqa: E402


# The confidence level of the paired ratio's interval (48 decisions: about 0.5 false
# winners expected among true ties).
LEVEL = 0.99
# The workload extraction weighs: a prefill of `prefill_tokens` = 128 tokens (both the
# built-in cpu parameters and calibrate.py's files).
EXTRACTION_WORKLOAD = "prefill-128"


def choice(model: Path, decision: tuple[str, str]) -> str | None:
    """Which variant of `decision` the built `model` is, by its ops; None when the model does
    not hold that decision (packed or separate QKV when extraction chose Attention)."""
    nodes = onnx.load(str(model), load_external_data=False).graph.node
    ops = {n.op_type for n in nodes}
    chosen, alt = decision
    if alt == "attention":
        return chosen if "GroupQueryAttention" in ops else alt
    if alt == "unpacked":
        gqa = [n for n in nodes if n.op_type == "GroupQueryAttention"]
        packed = all(len(n.input) < 2 or n.input[1] == "" for n in gqa)
        return None if not gqa else chosen if packed else alt
    if alt == "no-skip-norm":
        return chosen if "SkipSimplifiedLayerNormalization" in ops else alt
    if alt == "int4-dq":
        return chosen if "MatMulNBits" in ops else alt
    raise ValueError(decision)


def extraction_choices(work: Path, calibrated: Path | None) -> dict:
    """{(size, decision): the variant `mobius build` picks} with those parameters."""
    out = {}
    for size in costlib.SIZES:
        cfg = costlib.make_config(work, size)
        for quant in (False, True):
            dest = work / f"pick-{size[0]}-{'q' if quant else 'f'}-{'cal' if calibrated else 'cpu'}"
            ep = ["--ep-file", str(calibrated)] if calibrated else ["--ep", "cpu"]
            costlib.run([costlib.mobius_bin(), "-q", "build", "--no-weights", "--overwrite",
                         "--config", str(cfg), str(dest), *ep,
                         *(["--quant", "int4"] if quant else [])])
            for d in costlib.DECISIONS:
                if (d[1] == "int4-dq") == quant:
                    out[(size[0], d)] = choice(dest / "model.onnx", d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrated", type=Path, help="an EP file from scripts/calibrate.py")
    ap.add_argument("--runs", type=int, default=40, help="paired rounds per decision and workload")
    ap.add_argument("--reps", type=int, default=3,
                    help="runs of each model per round, alternating; its fastest counts")
    ap.add_argument("--sizes", default=",".join(s[0] for s in costlib.SIZES),
                    help="model sizes to build (comma list of "
                    + ", ".join(s[0] for s in costlib.ALL_SIZES) + ")")
    ap.add_argument("--save", type=Path,
                    help="write the paired rounds (µs) of every decision here as JSON")
    ap.add_argument("--work", type=Path, help="keep the built models here (default: a temp dir)")
    a = ap.parse_args()
    if a.runs < 5:
        ap.error("--runs must be at least 5")
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    known = {s[0]: s for s in costlib.ALL_SIZES}
    tags = [t for t in a.sizes.split(",") if t]
    if not tags or any(t not in known for t in tags):
        ap.error(f"--sizes: expected a comma list of {', '.join(known)}, got {a.sizes!r}")
    costlib.SIZES[:] = [known[t] for t in tags]
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        models = costlib.build_variants(work)
        pairs = [((size[0], d[0]), (size[0], d[1]), w[0])
                 for size in costlib.SIZES for d in costlib.DECISIONS for w in costlib.WORKLOADS]
        rounds = costlib.paired_latencies(models, pairs, a.runs, a.reps)
        if a.save:
            a.save.write_text(json.dumps([
                {"size": ka[0], "first": ka[1], "second": kb[1], "workload": wl,
                 "rounds_us": ts} for (ka, kb, wl), ts in rounds.items()], indent=1))
        # Whole-model latency of each (model, workload): the median of all its runs.
        runs: dict = {}
        for (ka, kb, wl), ts in rounds.items():
            runs.setdefault(ka + (wl,), []).extend(t for t, _ in ts)
            runs.setdefault(kb + (wl,), []).extend(t for _, t in ts)
        measured = {k: statistics.median(v) for k, v in runs.items()}
        # The measured winner of each decision: the paired ratio's bootstrap CI.
        verdict = {}
        for (ka, kb, wl), ts in rounds.items():
            med, lo, hi = costlib.ratio_ci(ts, level=LEVEL)
            winner = ka[1] if hi < 1.0 else kb[1] if lo > 1.0 else None
            verdict[(ka[0], (ka[1], kb[1]), wl)] = (med, lo, hi, winner)
        param_sets = [("built-in cpu", None)]
        if a.calibrated:
            param_sets.append((f"calibrated ({a.calibrated.name})", a.calibrated))
        print(f"onnxruntime CPU, 1 thread, level BASIC; {a.runs} paired rounds per decision "
              f"and workload (each side the fastest of {a.reps} alternating runs); "
              f"{len(models)} models × {len(costlib.WORKLOADS)} workloads\n")
        print(f"{'model':<22}" + "".join(f"{w[0]:>14}" for w in costlib.WORKLOADS)
              + "   (measured µs, median)")
        for key in models:
            print(f"{key[0] + ' ' + key[1]:<22}"
                  + "".join(f"{measured[key + (w[0],)]:>14.0f}" for w in costlib.WORKLOADS))
        keys = sorted(measured)
        results = []
        for label, path in param_sets:
            params = costlib.load_params(path)
            predicted = {}
            for key, model in models.items():
                for wl in costlib.WORKLOADS:
                    predicted[key + (wl[0],)] = costlib.cost(model, work, wl, params)["total"]
            rho = costlib.spearman([predicted[k] for k in keys], [measured[k] for k in keys])
            # The pick of a decision: the variant the cost model rates cheaper under the
            # workload extraction weighs (what extraction picks in that e-class, the rest of
            # the graph as in the two variants), checked against `mobius build`'s graph.
            picks = {}
            for size in costlib.SIZES:
                for d in costlib.DECISIONS:
                    ta, tb = (predicted[(size[0], v, EXTRACTION_WORKLOAD)] for v in d)
                    picks[(size[0], d)] = d[0] if ta <= tb else d[1]
            built = extraction_choices(work, path)
            differ = [(k, built[k]) for k in picks
                      if built[k] is not None and built[k] != picks[k]]
            results.append((label, rho, predicted, picks, built, differ))
        print(f"\nPer decision: measured time ratio (first ÷ second variant; median of the "
              f"paired rounds, bootstrap {LEVEL:.0%} CI), the measured winner ('tie' when the "
              "CI holds 1), and each parameter set's pick (* = the measured winner).")
        print(f"  {'size':<6}{'decision':<26}{'workload':<13}{'ratio':>7} {f'{LEVEL:.0%} CI':<15}"
              f"{'winner':<14}" + "".join(f"{r[0][:20]:<22}" for r in results))
        for size in costlib.SIZES:
            for d in costlib.DECISIONS:
                for w in costlib.WORKLOADS:
                    med, lo, hi, winner = verdict[(size[0], d, w[0])]
                    cells = []
                    for _, _, _, picks, _, _ in results:
                        pick = picks[(size[0], d)]
                        cells.append(f"{pick}{'*' if pick == winner else ''}")
                    print(f"  {size[0]:<6}{d[0] + ' vs ' + d[1]:<26}{w[0]:<13}{med:>7.3f} "
                          f"[{lo:.3f}, {hi:.3f}] {winner or 'tie':<14}"
                          + "".join(f"{c:<22}" for c in cells))
        n = len(verdict)
        won = [k for k, v in verdict.items() if v[3] is not None]
        print(f"\n{len(won)} of {n} decisions have a measured winner; {n - len(won)} are ties "
              f"(the {LEVEL:.0%} CI of the ratio holds 1: not counted as right or wrong).")
        for label, rho, predicted, picks, built, differ in results:
            right = sum(picks[(k[0], k[1])] == verdict[k][3] for k in won)
            won_p = [k for k in won if k[2] == EXTRACTION_WORKLOAD]
            right_p = sum(picks[(k[0], k[1])] == verdict[k][3] for k in won_p)
            # The cost model's own ordering of each decided pair, per workload.
            order = sum((predicted[(k[0], k[1][0], k[2])] < predicted[(k[0], k[1][1], k[2])])
                        == (verdict[k][3] == k[1][0]) for k in won)
            per_wl = {
                w[0]: costlib.spearman(
                    [predicted[k] for k in keys if k[2] == w[0]],
                    [measured[k] for k in keys if k[2] == w[0]])
                for w in costlib.WORKLOADS
            }
            print(f"\n== {label}")
            print(f"extraction's pick is the measured winner: {right}/{len(won)}"
                  f"{f' = {right / len(won):.0%}' if won else ''} of the decisions with one "
                  f"({right_p}/{len(won_p)} on prefill-128, the workload extraction weighs)")
            print(f"cost model orders the decided pairs as measured (each under its own "
                  f"workload): {order}/{len(won)}")
            held = sum(v is not None for v in built.values())
            print(f"`mobius build` holds {held} of the {len(built)} decisions in its graph and "
                  f"picks as the cost comparison there in {held - len(differ)}"
                  + "".join(f"; differs on {k[0]} {k[1][0]} vs {k[1][1]} ({v})"
                            for k, v in differ))
            print(f"Spearman rank correlation, predicted vs measured: {rho:.3f} "
                  f"(all {len(keys)}); per workload: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in per_wl.items()))
    print(f"\n({time.time() - started:.0f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
