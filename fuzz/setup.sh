# Sourced by scripts/fuzz_smoke.sh and scripts/fuzz.sh (bash): picks the toolchain that builds
# the fuzz targets and makes sure cargo-fuzz is installed. Afterwards `"${FUZZ_CARGO[@]}" ARGS`
# runs cargo with that toolchain (`"${FUZZ_CARGO[@]}" fuzz build`, `... fuzz run ...`).
#
# cargo-fuzz passes nightly-only flags to rustc (-Zsanitizer=address, -Cpasses=sancov-module).
#   1. FUZZ_TOOLCHAIN set: that rustup toolchain (with RUSTC_BOOTSTRAP=1 unless it is a nightly);
#   2. else a nightly rustup toolchain, installed (`rustup toolchain install nightly --profile
#      minimal`, at most FUZZ_RUSTUP_TIMEOUT seconds, default 60) when it is missing;
#   3. else the default toolchain with RUSTC_BOOTSTRAP=1, which makes stable rustc accept the
#      -Z flags; stable's rust-std ships the ASan runtime for x86_64 Linux, so ASan works too.
# Machines that reach package registries but not rustup's servers end in case 3, and say so.
#
# cargo-fuzz itself is installed from crates.io (pinned, --locked) when `cargo fuzz` is missing.
# libfuzzer-sys compiles libFuzzer from C++, so a C++ compiler (g++ or clang++) is needed.

FUZZ_CARGO_FUZZ_VERSION=0.13.2

fuzz_toolchain=""
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then
  fuzz_toolchain="$FUZZ_TOOLCHAIN"
  [[ "$fuzz_toolchain" == nightly* ]] || export RUSTC_BOOTSTRAP=1
elif command -v rustup >/dev/null 2>&1; then
  if rustup run nightly rustc --version >/dev/null 2>&1; then
    fuzz_toolchain=nightly
  else
    echo "== no nightly toolchain; trying: rustup toolchain install nightly --profile minimal"
    if timeout "${FUZZ_RUSTUP_TIMEOUT:-60}" rustup toolchain install nightly --profile minimal \
      >/dev/null 2>&1 && rustup run nightly rustc --version >/dev/null 2>&1; then
      fuzz_toolchain=nightly
    fi
  fi
fi
if [[ -z "$fuzz_toolchain" && -z "${FUZZ_TOOLCHAIN:-}" ]]; then
  echo "== nightly is not available (rustup could not install it): building with the default" \
    "toolchain and RUSTC_BOOTSTRAP=1, which lets stable rustc accept cargo-fuzz's -Z flags"
  export RUSTC_BOOTSTRAP=1
fi

# cargo with the chosen toolchain, as a command line (an array, so `timeout` can run it too).
FUZZ_CARGO=(cargo)
if [[ -n "$fuzz_toolchain" ]]; then
  FUZZ_CARGO+=("+$fuzz_toolchain")
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz $FUZZ_CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$FUZZ_CARGO_FUZZ_VERSION" --locked
fi
echo "== $(cargo fuzz --version), $(rustc ${fuzz_toolchain:+"+$fuzz_toolchain"} --version)" \
  "${RUSTC_BOOTSTRAP:+(RUSTC_BOOTSTRAP=1)}"
