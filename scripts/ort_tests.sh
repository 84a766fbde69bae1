#!/usr/bin/env bash
# Run the onnxruntime / onnxruntime-genai test suite (tests/ort) against the
# mobius binary.  Creates (or reuses) a virtualenv at .venv in the repo root
# with the pins in tests/ort/requirements.txt -- no torch, no transformers.
#
#   MOBIUS_BIN   binary under test (default: target/debug/mobius)
#   PYTHON       interpreter used to create the venv (default: python3)
#   extra arguments are passed to pytest, e.g. scripts/ort_tests.sh -k llama
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MOBIUS_BIN="${MOBIUS_BIN:-target/debug/mobius}"
case "$MOBIUS_BIN" in
  /*) BIN_PATH="$MOBIUS_BIN" ;;
  *)  BIN_PATH="$ROOT/$MOBIUS_BIN" ;;
esac
if [[ ! -x "$BIN_PATH" ]]; then
  echo "error: mobius binary not found or not executable at $BIN_PATH" >&2
  echo "       build it first (cargo build) or set MOBIUS_BIN" >&2
  exit 1
fi
export MOBIUS_BIN="$BIN_PATH"

VENV="$ROOT/.venv"
REQ="$ROOT/tests/ort/requirements.txt"
STAMP="$VENV/.ort-requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]]; then
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ"
  echo "$want" > "$STAMP"
fi

# Single-threaded numerics keep results reproducible and the 2-core CI calm.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec "$VENV/bin/python" -m pytest tests/ort -q -p no:cacheprovider "$@"
