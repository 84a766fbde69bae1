#!/usr/bin/env bash
# The slow checks scripts/test.sh leaves out: every test marked #[ignore = "slow: ..."] (they
# show as "ignored" in `cargo test`). Release mode: the f32 -> f16 sweep converts all 4 G f32
# patterns. docs/testing.md records when this last ran and what it found.
#   extra arguments go to the test binaries, e.g. scripts/slow_tests.sh --nocapture
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "every f32 pattern through the f32 -> f16 kernel (src/weights/convert.rs)"
cargo test --release --locked --lib weights::convert -- --ignored "$@"

step "greedy vs exact extraction on the largest fixture e-graphs (tests/extract_gap.rs)"
cargo test --release --locked --test extract_gap -- --ignored "$@"

step "slow tests passed"
