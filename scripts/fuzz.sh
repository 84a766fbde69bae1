#!/usr/bin/env bash
# Fuzzes each cargo-fuzz target in fuzz/ for N minutes, one after the other, with a persistent
# corpus, then prints a table: target, executions, exec/s, corpus size, crashes.
#
#   scripts/fuzz.sh --minutes N [--jobs J] [TARGET...]    default: every target
#
#   --minutes N   fuzzing time per target (may be fractional: 0.5 = 30 s)
#   --jobs J      libFuzzer worker processes per target (-fork=J; default 1, one core)
#
#   FUZZ_SANITIZER   address (default) or none; cargo-fuzz's -s/--sanitizer
#   FUZZ_TOOLCHAIN   rustup toolchain to build with (default: nightly, else stable with
#                    RUSTC_BOOTSTRAP=1; see fuzz/setup.sh)
#
# Each target starts from fuzz/corpus/<target>/ (created and grown by the run, git-ignored) and
# its seeds fuzz/seeds/<target>/ (only read). libFuzzer runs in fork mode and keeps going after
# a crash, so one run collects every crashing input it finds within its time: they are saved in
# fuzz/artifacts/<target>/ (crash-*, oom-*, timeout-*; git-ignored) and listed with the first
# line of their panic or sanitizer report. Full logs: fuzz/logs/<target>.log (git-ignored).
#
# Exits 0 when no target crashed, 1 when one did (or a target failed to build or run), 2 on a
# usage error.
set -euo pipefail

# The usage lines of the comment above, to stderr, and exit 2 (bad usage); --help: stdout, 0.
usage() {
  sed -n '4,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

minutes=""
jobs=1
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes="${2:-}"; shift 2 || usage ;;
    --jobs) jobs="${2:-}"; shift 2 || usage ;;
    -h | --help) sed -n '4,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "error: unknown option $1" >&2; usage ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ! [[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "error: --minutes N is required (a positive number of minutes per target)" >&2
  usage
fi
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: --jobs takes a positive whole number, got \`$jobs\`" >&2
  usage
fi
seconds="$(awk -v m="$minutes" 'BEGIN { s = int(m * 60 + 0.5); print (s < 1 ? 1 : s) }')"
SANITIZER="${FUZZ_SANITIZER:-address}"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"
# shellcheck source=../fuzz/setup.sh
source setup.sh

if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <("${FUZZ_CARGO[@]}" fuzz list)
fi
for target in "${targets[@]}"; do
  if [[ ! -d "seeds/$target" ]]; then
    echo "error: unknown target \`$target\` (no seed corpus at fuzz/seeds/$target)" >&2
    exit 2
  fi
done

echo "== building ${targets[*]} (sanitizer $SANITIZER)"
"${FUZZ_CARGO[@]}" fuzz build --sanitizer "$SANITIZER"

mkdir -p logs
rows=()
causes=()
crashed=0
for target in "${targets[@]}"; do
  corpus="corpus/$target"
  artifacts="artifacts/$target"
  log="logs/$target.log"
  mkdir -p "$corpus" "$artifacts"
  marker="$(mktemp)"
  echo "== fuzzing $target for ${seconds}s, $jobs job(s) (corpus: fuzz/$corpus, seeds: fuzz/seeds/$target)"
  start=$SECONDS
  status=0
  timeout "$((seconds + 600))" \
    "${FUZZ_CARGO[@]}" fuzz run --sanitizer "$SANITIZER" "$target" "$corpus" "seeds/$target" -- \
    -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -fork="$jobs" \
    -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 -print_final_stats=1 \
    >"$log" 2>&1 || status=$?
  elapsed=$((SECONDS - start))
  # Fork mode reports the total executions so far on each status line: `#<runs>: cov: ...`.
  runs="$(grep -oE '^#[0-9]+: cov:' "$log" | tail -n 1 | tr -dc '0-9' || true)"
  runs="${runs:-0}"
  rate=$((runs / (elapsed > 0 ? elapsed : 1)))
  size="$(find "$corpus" -type f | wc -l)"
  mapfile -t found < <(find "$artifacts" -type f -newer "$marker" \
    \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | sort)
  rm -f "$marker"
  if [[ ${#found[@]} -gt 0 ]]; then
    crashed=1
    rows+=("$target|$runs|$rate|$size|${#found[@]}: fuzz/$artifacts/")
    # The cause of each crashing input (the first 20): rerun it once and keep the panic
    # message, or the sanitizer's or libFuzzer's summary, and the innermost mobius frame.
    for input in "${found[@]:0:20}"; do
      out="$(timeout 120 "${FUZZ_CARGO[@]}" fuzz run --sanitizer "$SANITIZER" "$target" \
        "$input" -- -timeout=30 -rss_limit_mb=4096 2>&1 || true)"
      cause="$(grep -m 1 -A 1 'panicked at' <<<"$out" | sed -n 2p || true)"
      [[ -n "$cause" ]] || cause="$(grep -m 1 -E '^SUMMARY: |ERROR: libFuzzer: ' <<<"$out" || true)"
      frame="$(grep -m 1 -oE 'in mobius::[^ ]+ [^ ]+' <<<"$out" | sed 's/^in //' || true)"
      causes+=("fuzz/$input: ${cause:-(did not reproduce)}${frame:+ -- at $frame}")
    done
  elif [[ $status -ne 0 ]]; then
    crashed=1
    rows+=("$target|$runs|$rate|$size|run failed (exit $status), see fuzz/$log")
  else
    rows+=("$target|$runs|$rate|$size|0")
  fi
done

echo
printf '%-20s %14s %9s %8s  %s\n' target executions exec/s corpus crashes
for row in "${rows[@]}"; do
  IFS='|' read -r t r e c x <<<"$row"
  printf '%-20s %14s %9s %8s  %s\n' "$t" "$r" "$e" "$c" "$x"
done
echo "(${seconds}s per target, $jobs job(s), sanitizer $SANITIZER)"
if [[ ${#causes[@]} -gt 0 ]]; then
  echo
  echo "crashing inputs:"
  printf '  %s\n' "${causes[@]}"
fi
exit "$crashed"
