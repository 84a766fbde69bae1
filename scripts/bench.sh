#!/usr/bin/env bash
# Run the criterion benchmarks of benches/build.rs and print their summary lines at the end:
# graph build time (Llama-3.2-1B, Llama-3-70B), the whole `mobius build --no-weights` for 1B,
# and weight streaming (bf16 -> f16 through onnx::export::save) against std::fs::copy as a ratio.
#
#   scripts/bench.sh [CRITERION ARGS...]   e.g. scripts/bench.sh --save-baseline main
#
#   MOBIUS_BENCH_STREAM_MB   size of the generated bf16 checkpoint in MiB (default 256)
#
# Needs ~2x that size free in the temporary folder ($TMPDIR or /tmp); takes about a minute once
# built. The full log is kept in target/bench-build.log.
#
# Then the scale benchmark (scripts/bench_scale.py): the release CLI builds `--no-weights`
# Llama-3.2-1B configs with more layers (default EP, and --ep cuda --dtype f16), runs of the
# sizes interleaved, reporting the best wall time, the best CPU time (user + system), the
# largest max RSS and, when they can be counted, the instructions of one run; then each size's
# ratios to the smallest. Instructions are what scales linearly (a fixed cost of a few layers'
# worth keeps the 100 -> 1,000 ratio under 10); time also pays for the working set leaving the
# CPU caches, and on a loaded machine best-of-3 is noisy: 20 runs settle it (see
# docs/performance.md).
#
#   scripts/bench.sh scale                 only the scale benchmark
#   MOBIUS_BENCH_SCALE_LAYERS="100 1000"   layer counts (default "100 1000 2000"; at most
#                                          limits::config::MAX_LAYERS)
#   MOBIUS_BENCH_SCALE_RUNS=N              runs per size (default 3)
#   MOBIUS_BENCH_SCALE_INSTRUCTIONS=M      how to count instructions: `auto` (default: perf
#                                          where the CPU's counters can be read, else none),
#                                          `perf` (perf stat -e instructions:u), `valgrind`
#                                          (cachegrind: exact, ~30x slower) or `none`
#
# The weights benchmark (not part of the default run: it needs ~4 GB of disk and a few
# minutes): the release CLI's whole `mobius build` (f16, bf16, f32, --quant int4) of a generated
# ~300M-parameter bf16 Llama (606 MB; one file, then 4 shards) against `cp` of the same files
# (an in-kernel copy_file_range) and `cat SRC > DST` (a read + write copy), warm page cache,
# medians of 5, interleaved; peak RSS (getrusage) and peak anonymous memory
# (RssAnon of /proc/PID/status, sampled every millisecond). See scripts/bench_weights.py.
#
#   scripts/bench.sh weights               only the weights benchmark
#   MOBIUS_BENCH_WEIGHTS_DIR               where the checkpoints are generated and kept
#                                          (default target/bench-weights)
#   MOBIUS_BENCH_PYTHON                    a Python with numpy, to generate them (default
#                                          .venv/bin/python if present, else python3)
#   MOBIUS_BENCH_COLD=1                    drop the page cache before every timed run instead
#                                          (needs root)
#
# The quantization benchmark (`scripts/bench.sh quant`, needs onnxruntime: the .venv of
# scripts/ort_tests.sh): on the same generated checkpoint (one file), the data file of
# `--quant int4` (and with `--quant-embeddings`) against the f16 build's, and onnxruntime's CPU
# decode latency (one token after 128, 2 threads, median of 20) of the int4 cpu build against
# the f32 cpu build. See scripts/bench_quant.py. Build time and memory of `--quant int4` against
# the f16 build are in the weights benchmark.
#
# The mixture-of-experts benchmark (`scripts/bench.sh moe`, needs onnxruntime: the .venv of
# scripts/ort_tests.sh): a generated ~1B-parameter bf16 Mixtral (10 layers of 8 experts of 3584,
# 2 per token; scripts/make_bench_checkpoint.py --moe --layers 10, 2 GB) built f32 for the cpu
# EP with its MoE blocks fused (com.microsoft::MoE) and with the dense standard-ONNX block (an
# EP file: cpu with supports_fused_moe = false): onnxruntime's CPU latency of one decode step
# after 128 tokens and of the 128-token prefill (2 threads, medians of 10, interleaved). Needs
# ~10 GB of disk and ~9 GB of memory. See scripts/bench_moe.py.
#
# The exports benchmark (`scripts/bench.sh exports`, needs torch + transformers + onnxscript +
# onnxruntime: MOBIUS_BENCH_TORCH_PYTHON, default python3): a random ~58M-parameter Llama exported
# with torch.onnx (dynamo, KV cache), `mobius optimize --ep cpu` of it against `mobius build --ep
# cpu` of the same checkpoint, the export itself and onnxruntime's transformers optimizer:
# onnxruntime CPU latency of a 128-token prefill and one decode step after 128 (2 threads,
# medians, interleaved). See scripts/bench_exports.py.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p target
log="target/bench-build.log"

scale() {
  cargo build --release --quiet --bin mobius
  local layers=(${MOBIUS_BENCH_SCALE_LAYERS:-100 1000 2000})
  python3 scripts/bench_scale.py --bin target/release/mobius --layers "${layers[@]}" \
    --runs "${MOBIUS_BENCH_SCALE_RUNS:-3}" --instructions "${MOBIUS_BENCH_SCALE_INSTRUCTIONS:-auto}"
}

weights() {
  cargo build --release --quiet
  local py="${MOBIUS_BENCH_PYTHON:-}"
  if [[ -z "$py" ]]; then
    if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
  fi
  local cold=()
  [[ "${MOBIUS_BENCH_COLD:-}" == "1" ]] && cold=(--cold)
  python3 scripts/bench_weights.py --bin target/release/mobius \
    --work "${MOBIUS_BENCH_WEIGHTS_DIR:-target/bench-weights}" --python "$py" "${cold[@]}"
}

quant() {
  cargo build --release --quiet
  local dir="${MOBIUS_BENCH_WEIGHTS_DIR:-target/bench-weights}"
  if [[ ! -f "$dir/one/config.json" ]]; then
    .venv/bin/python scripts/make_bench_checkpoint.py "$dir/one"
  fi
  .venv/bin/python scripts/bench_quant.py "$dir/one" target/release/mobius "$dir/quant"
}

if [[ "${1:-}" == "weights" ]]; then
  weights | tee target/bench-weights.log
  exit 0
fi

moe() {
  cargo build --release --quiet
  local dir="${MOBIUS_BENCH_WEIGHTS_DIR:-target/bench-weights}"
  if [[ ! -f "$dir/moe-1b/config.json" ]]; then
    .venv/bin/python scripts/make_bench_checkpoint.py "$dir/moe-1b" --moe --layers 10
  fi
  .venv/bin/python scripts/bench_moe.py "$dir/moe-1b" target/release/mobius "$dir/moe"
}

if [[ "${1:-}" == "moe" ]]; then
  moe | tee target/bench-moe.log
  exit 0
fi

if [[ "${1:-}" == "quant" ]]; then
  quant | tee target/bench-quant.log
  exit 0
fi

exports() {
  cargo build --release --quiet
  "${MOBIUS_BENCH_TORCH_PYTHON:-python3}" scripts/bench_exports.py --bin target/release/mobius \
    --work "${MOBIUS_BENCH_EXPORTS_DIR:-target/bench-exports}"
}

if [[ "${1:-}" == "exports" ]]; then
  exports | tee target/bench-exports.log
  exit 0
fi

if [[ "${1:-}" == "scale" ]]; then
  scale
  exit 0
fi

cargo bench --bench build -- "$@" 2>&1 | tee "$log"
scale | tee -a "$log"
echo
echo "== summary"
if ! grep '^summary:' "$log"; then
  echo "error: the bench printed no summary lines (see $log)" >&2
  exit 1
fi
