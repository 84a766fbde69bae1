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
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
mkdir -p target
log="target/bench-build.log"

cargo bench --bench build -- "$@" 2>&1 | tee "$log"
echo
echo "== summary"
if ! grep '^summary:' "$log"; then
  echo "error: the bench printed no summary lines (see $log)" >&2
  exit 1
fi
