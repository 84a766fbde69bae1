#!/usr/bin/env bash
# Smoke-fuzz every cargo-fuzz target in fuzz/ for a few seconds, starting from its seed corpus
# (fuzz/seeds/<target>/), with real libFuzzer. Part of the test suite (scripts/test.sh).
#
#   scripts/fuzz_smoke.sh [TARGET...]      default: every target (`cargo fuzz list`)
#
#   FUZZ_SECONDS     libFuzzer -max_total_time per target (default 10)
#   FUZZ_SANITIZER   address (default) or none; cargo-fuzz's -s/--sanitizer
#   FUZZ_TOOLCHAIN   rustup toolchain to build with (default: nightly, else stable with
#                    RUSTC_BOOTSTRAP=1; see fuzz/setup.sh)
#
# Uses the nightly toolchain, installing it when missing (rustup, --profile minimal, 60 s at
# most); where rustup cannot fetch it, builds with the stable toolchain and RUSTC_BOOTSTRAP=1
# and says so. Installs cargo-fuzz (pinned, --locked) when it is missing. See fuzz/setup.sh.
#
# Exits non-zero if cargo-fuzz cannot be installed, a target fails to build, or a target
# crashes (panic, sanitizer error, timeout, out-of-memory); the crashing input is kept in
# fuzz/artifacts/<target>/ (with the run's log as smoke.log). The new corpus entries of a smoke
# run are thrown away; scripts/fuzz.sh fuzzes longer with a persistent corpus.
set -euo pipefail

SECONDS_PER_TARGET="${FUZZ_SECONDS:-10}"
SANITIZER="${FUZZ_SANITIZER:-address}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"
# shellcheck source=../fuzz/setup.sh
source setup.sh
echo "== sanitizer $SANITIZER, ${SECONDS_PER_TARGET}s per target"

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  mapfile -t targets < <("${FUZZ_CARGO[@]}" fuzz list)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "error: no fuzz targets found" >&2
  exit 1
fi

# One build for all targets; `cargo fuzz run` below then finds them up to date.
echo "== building ${targets[*]}"
build_start=$SECONDS
"${FUZZ_CARGO[@]}" fuzz build --sanitizer "$SANITIZER"
echo "   built in $((SECONDS - build_start))s"

work="$(mktemp -d "${TMPDIR:-/tmp}/mobius-fuzz-smoke.XXXXXX")"
trap 'rm -rf "$work"' EXIT

failed=()
for target in "${targets[@]}"; do
  seeds="seeds/$target"
  if [[ ! -d "$seeds" ]]; then
    echo "error: no seed corpus at fuzz/$seeds" >&2
    exit 1
  fi
  mkdir -p "$work/$target"
  log="$work/$target.log"
  echo "== fuzzing $target for ${SECONDS_PER_TARGET}s (seeds: fuzz/$seeds)"
  # The first corpus folder receives new inputs (scratch); the seeds are only read.
  if timeout "$((SECONDS_PER_TARGET + 300))" \
    "${FUZZ_CARGO[@]}" fuzz run --sanitizer "$SANITIZER" "$target" "$work/$target" "$seeds" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 >"$log" 2>&1; then
    runs="$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1 || true)"
    echo "   ok: ${runs:-finished}; corpus $(find "$work/$target" -type f | wc -l) new inputs"
  else
    mkdir -p "artifacts/$target"
    cp "$log" "artifacts/$target/smoke.log"
    echo "   FAILED: $target (full log: fuzz/artifacts/$target/smoke.log)" >&2
    # The panic message, the innermost mobius frame, then the crashing input as libFuzzer
    # reports it.
    grep -A 2 -m 3 "panicked at" "$log" >&2 || true
    grep -m 1 "in mobius::" "$log" >&2 || true
    grep -A 30 -m 1 "^SUMMARY: " "$log" >&2 || tail -n 40 "$log" >&2
    failed+=("$target")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz smoke: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}" >&2
  echo "crashing inputs are in fuzz/artifacts/<target>/" >&2
  exit 1
fi
echo "fuzz smoke: all ${#targets[@]} targets ran ${SECONDS_PER_TARGET}s without a crash"
