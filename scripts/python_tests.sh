#!/usr/bin/env bash
# Build the `mobius` Python package (python/, maturin) into one wheel, install it in a
# virtualenv (.venv-py, pins in tests/python/requirements.txt: no torch, no transformers) and
# run tests/python against it and the CLI at $MOBIUS_BIN.
#
#   MOBIUS_BIN   CLI the package must agree with (default: target/debug/mobius)
#   PROFILE      cargo profile of the wheel (default: dev, which reuses the debug build of the
#                core crate; release for timings)
#   PYTHON       interpreter used to create the venv (default: python3)
#   extra arguments are passed to pytest, e.g. scripts/python_tests.sh -k seed
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MOBIUS_BIN="${MOBIUS_BIN:-target/debug/mobius}"
case "$MOBIUS_BIN" in
  /*) ;;
  *) MOBIUS_BIN="$ROOT/$MOBIUS_BIN" ;;
esac
if [[ ! -x "$MOBIUS_BIN" ]]; then
  echo "error: mobius binary not found at $MOBIUS_BIN (cargo build --bin mobius, or set MOBIUS_BIN)" >&2
  exit 1
fi
export MOBIUS_BIN

VENV="$ROOT/.venv-py"
REQ="$ROOT/tests/python/requirements.txt"
STAMP="$VENV/.requirements.sha256"
want="$(cat "$REQ" "$ROOT/tests/ort/requirements.txt" | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]]; then
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ"
  echo "$want" > "$STAMP"
fi

WHEELS="$ROOT/target/wheels-test"
rm -rf "$WHEELS"
"$VENV/bin/maturin" build --quiet --locked -m python/Cargo.toml --profile "${PROFILE:-dev}" \
  --interpreter "$VENV/bin/python" -o "$WHEELS"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$WHEELS"/*.whl

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Run from tests/python so `import mobius` is the installed wheel, not python/mobius.
cd "$ROOT/tests/python"
# tests/python/olive needs olive-ai, which imports torch: scripts/olive_test.sh runs it.
exec "$VENV/bin/python" -m pytest . -q -p no:cacheprovider --ignore=olive "$@"
