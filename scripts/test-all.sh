#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what it needs, checks formatting and lints,
# runs every test. Exits nonzero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export CARGO_TERM_COLOR=never
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== fuzz targets build"
(cd fuzz && cargo build --quiet)
echo "== cargo test"
cargo test --workspace 2>&1 | tee /tmp/urxe-cargo-test.log
