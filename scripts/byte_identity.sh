#!/usr/bin/env bash
# Are two mobius binaries' builds byte-identical?  For refactors that must not change output.
#
#   scripts/byte_identity.sh BASE_BIN NEW_BIN
#
# Builds every checkpoint of tests/fixtures (a folder with config.json) with both binaries as
# `--ep default --dtype f32`, `--ep cpu --dtype f32`, `--ep cuda --dtype f16` and
# `--ep cpu --quant int4`, and tests/fixtures/llama on every built-in EP in f32 and f16, then
# compares the sha256 of every file of each pair of packages. A build both binaries refuse counts
# as equal when their exit codes and messages match. Prints one `DIFF <build>` line per
# difference and ends with `compared N, fail=F`; exits 1 when F > 0.
#
#   W     work folder (default: a fresh temporary folder; each pair is deleted once compared)
#   FIX   fixtures folder (default: tests/fixtures of this checkout)
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BASE_BIN NEW_BIN" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE=$(realpath "$1"); NEW=$(realpath "$2")
W=${W:-$(mktemp -d)}; FIX=${FIX:-$ROOT/tests/fixtures}
rm -rf "$W"; mkdir -p "$W"
n=0; fail=0

# pair TAG BUILD_ARGS...: build with both binaries, compare, forget
pair() {
  local tag=$1; shift
  for side in base new; do
    local bin=$BASE; [[ $side == new ]] && bin=$NEW
    local out="$W/$side/$tag"
    mkdir -p "$W/$side"
    "$bin" -q build "$@" "$out" >"$W/$side.$tag.log" 2>&1
    echo "rc=$?" >>"$W/$side.$tag.log"
    sed -i "s#$W/$side/#OUT/#g" "$W/$side.$tag.log"
    if [[ -d $out ]]; then
      (cd "$out" && find . -type f | sort | xargs sha256sum) >"$W/$side.$tag.sha"
    else
      : >"$W/$side.$tag.sha"
    fi
  done
  n=$((n + 1))
  if ! cmp -s "$W/base.$tag.sha" "$W/new.$tag.sha"; then
    fail=$((fail + 1)); echo "DIFF $tag"
  elif [[ ! -s "$W/base.$tag.sha" ]] && ! cmp -s "$W/base.$tag.log" "$W/new.$tag.log"; then
    fail=$((fail + 1)); echo "DIFF $tag (both refused, differently)"
  fi
  rm -rf "$W/base/$tag" "$W/new/$tag"
}

for d in "$FIX"/*/; do
  f=$(basename "$d")
  [[ -f $d/config.json ]] || continue
  pair "$f.default.f32" --config "$d" --ep default --dtype f32
  pair "$f.cpu.f32" --config "$d" --ep cpu --dtype f32
  pair "$f.cuda.f16" --config "$d" --ep cuda --dtype f16
  pair "$f.cpu.int4" --config "$d" --ep cpu --quant int4
done
for ep in default cpu cuda dml webgpu trt-rtx onnx-standard mlx openvino qnn; do
  for dt in f32 f16; do
    pair "llama.all.$ep.$dt" --config "$FIX/llama" --ep "$ep" --dtype "$dt"
  done
done
echo "compared $n, fail=$fail"
[[ $fail -eq 0 ]]
