#!/usr/bin/env python3
"""How well does the cost model predict onnxruntime CPU? (issue 17)

    .venv/bin/python scripts/cost_report.py [--calibrated cpu-cost.toml] [--runs 20]

Builds the variants of scripts/costlib.py (two llama sizes × GQA/Attention, packed/separate QKV,
SkipSimplifiedLayerNormalization/Add+RMSNormalization, MatMulNBits/DequantizeLinear+MatMul),
measures each whole model with onnxruntime CPU (1 thread, optimization level BASIC, median of
--runs rounds, the variants interleaved) under four workloads (prefill 16 and 128 tokens, a decoding step after 128 and 512),
and prints, for the built-in cpu parameters and (with --calibrated) the calibrated ones:

- Spearman rank correlation between `mobius cost`'s total and the measured latency, over all
  models and workloads;
- pairwise agreement: for each decision (the two variants extraction chooses between) and
  workload, whether the cost model orders the two as the measurement does;
- extraction's choice: what `mobius build` picks with those parameters (built-in: `--ep cpu`;
  calibrated: `--ep-file`), and how often that was the measured-faster variant, on the prefill
  workload extraction weighs and on every workload; also counted on the decisions with a
  clear winner only (one variant faster in at least 80% of the paired rounds: the others are
  within this machine's noise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import costlib  # noqa: E402


def choice(model: Path, decision: tuple[str, str]) -> str:
    """Which variant of `decision` the built `model` is, by its ops."""
    nodes = onnx.load(str(model), load_external_data=False).graph.node
    ops = {n.op_type for n in nodes}
    chosen, alt = decision
    if alt == "attention":
        return chosen if "GroupQueryAttention" in ops else alt
    if alt == "unpacked":
        gqa = [n for n in nodes if n.op_type == "GroupQueryAttention"]
        packed = all(len(n.input) < 2 or n.input[1] == "" for n in gqa)
        return chosen if gqa and packed else alt
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
    ap.add_argument("--runs", type=int, default=20, help="timed runs per model and workload")
    ap.add_argument("--work", type=Path, help="keep the built models here (default: a temp dir)")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs must be at least 1")
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        models = costlib.build_variants(work)
        rounds = costlib.latencies(models, a.runs)
        measured = {k: statistics.median(v) for k, v in rounds.items()}
        param_sets = [("built-in cpu", None)]
        if a.calibrated:
            param_sets.append((f"calibrated ({a.calibrated.name})", a.calibrated))
        print(f"onnxruntime CPU, 1 thread, level BASIC, median of {a.runs} runs; "
              f"{len(models)} models × {len(costlib.WORKLOADS)} workloads\n")
        print(f"{'model':<22}" + "".join(f"{w[0]:>14}" for w in costlib.WORKLOADS)
              + "   (measured µs)")
        for key in models:
            print(f"{key[0] + ' ' + key[1]:<22}"
                  + "".join(f"{measured[key + (w[0],)]:>14.0f}" for w in costlib.WORKLOADS))
        for label, path in param_sets:
            params = costlib.load_params(path)
            predicted = {}
            for key, model in models.items():
                for wl in costlib.WORKLOADS:
                    predicted[key + (wl[0],)] = costlib.cost(model, work, wl, params)["total"]
            keys = sorted(measured)
            rho = costlib.spearman([predicted[k] for k in keys], [measured[k] for k in keys])
            per_wl = {
                w[0]: costlib.spearman(
                    [predicted[k] for k in keys if k[2] == w[0]],
                    [measured[k] for k in keys if k[2] == w[0]])
                for w in costlib.WORKLOADS
            }
            picks = extraction_choices(work, path)
            agree = total = 0
            right_prefill = right_all = n_prefill = n_all = 0
            clear_right = clear_n = clear_right_p = clear_n_p = 0
            lines = []
            for size in costlib.SIZES:
                for d in costlib.DECISIONS:
                    pick = picks[(size[0], d)]
                    other = d[1] if pick == d[0] else d[0]
                    for w in costlib.WORKLOADS:
                        m_pick = measured[(size[0], pick, w[0])]
                        m_other = measured[(size[0], other, w[0])]
                        p_pick = predicted[(size[0], pick, w[0])]
                        p_other = predicted[(size[0], other, w[0])]
                        total += 1
                        agree += (p_pick < p_other) == (m_pick < m_other)
                        ok = m_pick <= m_other
                        # Paired by round: the share of rounds in which the pick ran faster.
                        wins = sum(x < y for x, y in zip(rounds[(size[0], pick, w[0])],
                                                         rounds[(size[0], other, w[0])]))
                        share = wins / a.runs
                        clear = share >= 0.8 or share <= 0.2
                        if clear:
                            clear_n += 1
                            clear_right += ok
                            if w[0] == "prefill-128":
                                clear_n_p += 1
                                clear_right_p += ok
                        n_all += 1
                        right_all += ok
                        if w[0] == "prefill-128":
                            n_prefill += 1
                            right_prefill += ok
                        lines.append(
                            f"  {size[0]:<5} {d[0]:>10} vs {d[1]:<12} {w[0]:<12} picks "
                            f"{pick:<12} measured {m_pick:>8.0f} vs {m_other:>8.0f} µs "
                            f"({'faster' if ok else 'SLOWER'} in {share:4.0%} of rounds"
                            f"{'' if clear else ', a tie'}), predicted {p_pick:>8.0f} vs "
                            f"{p_other:>8.0f}")
            print(f"\n== {label}")
            print(f"Spearman rank correlation, predicted vs measured: {rho:.3f} "
                  f"(all {len(keys)}); per workload: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in per_wl.items()))
            print(f"pairwise order agreement (cost model vs measurement): {agree}/{total} "
                  f"= {agree / total:.0%}")
            print(f"extraction picked the measured-faster variant: {right_prefill}/{n_prefill} "
                  f"= {right_prefill / n_prefill:.0%} on prefill-128 (the workload it weighs), "
                  f"{right_all}/{n_all} = {right_all / n_all:.0%} on all workloads")
            print(f"  on the decisions with a clear measured winner (one variant faster in at "
                  f"least 80% of the paired rounds): {clear_right_p}/{clear_n_p} on "
                  f"prefill-128, {clear_right}/{clear_n} on all workloads")
            print("\n".join(lines))
    print(f"\n({time.time() - started:.0f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
