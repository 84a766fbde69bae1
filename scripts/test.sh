#!/usr/bin/env bash
# The whole test suite, on a fresh machine with only Rust and Python 3.11:
#   1. lint: cargo fmt --check, cargo clippy -D warnings (all targets, benches included; the
#      fuzz targets too, a workspace of their own in fuzz/)
#   2. Rust unit + integration tests (cargo test)
#   3. onnxruntime / onnxruntime-genai parity suite (tests/ort, venv with pinned wheels)
#   3b. the `mobius` Python package: one wheel built and installed, tests/python against it
#   4. fuzz smoke run of every cargo-fuzz target (scripts/fuzz_smoke.sh)
# Any failure stops the run with a non-zero exit code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

# A one-shot run gains nothing from incremental state (gigabytes under target/): off unless set.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
step "disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free where the suite builds (it needs about 8 GiB)"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "fuzz targets: cargo fmt --check, cargo clippy -D warnings (fuzz/, its own workspace)"
cargo fmt --manifest-path fuzz/Cargo.toml --all -- --check
# Stable is enough to check them (only running them needs nightly); the main target folder
# shares the dependencies already checked above.
cargo clippy --manifest-path fuzz/Cargo.toml --target-dir target --all-targets --locked -- -D warnings

step "cargo test"
cargo test --locked

step "onnxruntime parity suite (tests/ort)"
cargo build --locked --bin mobius
MOBIUS_BIN=target/debug/mobius scripts/ort_tests.sh

step "Python package (tests/python)"
MOBIUS_BIN=target/debug/mobius scripts/python_tests.sh

step "fuzz smoke run"
scripts/fuzz_smoke.sh

step "all tests passed"
