#!/usr/bin/env bash
# Olive's MobiusBuilder pass on our wheel (tests/python/olive). Not part of scripts/test.sh:
# olive-ai imports torch, which the test suite never needs otherwise. Creates .venv-olive with
# olive-ai 0.13.0 (torch and transformers come with it) and the onnxruntime pins, builds and
# installs the wheel, and runs the test offline.
#
#   PROFILE   cargo profile of the wheel (default: dev)
#   PYTHON    interpreter used to create the venv (default: python3)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv-olive"
if [[ ! -x "$VENV/bin/olive" ]]; then
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q \
    -r tests/python/requirements.txt olive-ai==0.13.0
fi
WHEELS="$ROOT/target/wheels-olive"
rm -rf "$WHEELS"
"$VENV/bin/maturin" build --quiet --locked -m python/Cargo.toml --profile "${PROFILE:-dev}" \
  --interpreter "$VENV/bin/python" -o "$WHEELS"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$WHEELS"/*.whl

export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
cd "$ROOT/tests/python"
export MOBIUS_BIN="${MOBIUS_BIN:-$ROOT/target/debug/mobius}"
exec "$VENV/bin/python" -m pytest olive -q -p no:cacheprovider "$@"
