#!/usr/bin/env bash
# The main job: build urxe and verify every packet of the bundled kernel-rxe captures.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release --quiet
./target/release/urxe check --quiet --flows tests/captures/*.pcap
