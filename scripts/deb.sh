#!/usr/bin/env bash
# Builds the Debian package target/debian/urxe_<version>-1_<arch>.deb with cargo-deb
# (installed with `cargo install cargo-deb --locked` if missing).
#
#   bash scripts/deb.sh            -> prints the .deb's path on its last line
#
# Contents ([package.metadata.deb] in cli/Cargo.toml): /usr/bin/urxe, /usr/lib/urxe/libibverbs.so.1
# and librdmacm.so.1 (a private directory: the system's rdma-core is not replaced), the man
# pages urxe.1 and urxe-<subcommand>.1, the bash completion. Install it with
# `apt install ./target/debian/urxe_*.deb`; `urxe run -- PROGRAM` works right after.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v gcc >/dev/null || { echo "deb.sh: gcc is needed (bash scripts/deps.sh)" >&2; exit 1; }
command -v cargo-deb >/dev/null || cargo install cargo-deb --locked
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
# The release build carries the libraries (build.rs); `urxe install` writes them and the man
# pages into the staging prefix the package's assets are taken from.
cargo build --release --locked --bin urxe
STAGE=$PWD/target/urxe/pkg   # the assets are named relative to the package root, cli/
rm -rf "$STAGE"
"$TARGET/release/urxe" install --prefix "$STAGE" >/dev/null
"$TARGET/release/urxe" completions bash > "$STAGE/urxe.bash"
cargo deb -p urxe-cli --no-build --locked 2>&1 | tail -n 1
