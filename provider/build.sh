#!/bin/bash
# Build urxe's drop-in libibverbs.so.1.
#
#   provider/build.sh [--release|--debug]      (default: --release)
#
# 1. cargo builds the provider crate as a staticlib (liburxe_provider.a);
# 2. the version script is generated from the crate's one entry-point table
#    (provider/src/entries.rs, printed by the version_script example);
# 3. gcc links the archive (--whole-archive) into a shared object with that script and
#    soname libibverbs.so.1, which gives every export its exact name@@IBVERBS_x version
#    (a Rust cdylib would leave the symbols unversioned; see docs/DESIGN.md).
#
# Output: $TARGET/urxe/lib/libibverbs.so.1 (+ libibverbs.map next to it) and librdmacm.so.1, where TARGET is
# $CARGO_TARGET_DIR or <workspace>/target; URXE_OUT=<dir> puts it elsewhere (the tests use
# $TARGET/urxe/test-lib). Use it with LD_LIBRARY_PATH=$TARGET/urxe/lib.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=release
case "${1:-}" in
  ""|--release) PROFILE=release ;;
  --debug) PROFILE=debug ;;
  *) echo "usage: $0 [--release|--debug]" >&2; exit 2 ;;
esac
FLAGS=(); [ "$PROFILE" = release ] && FLAGS=(--release)
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
OUT=${URXE_OUT:-$TARGET/urxe/lib}
mkdir -p "$OUT"
cargo build -q -p urxe-provider --lib "${FLAGS[@]}"
cargo run -q -p urxe-provider --example version_script "${FLAGS[@]}" > "$OUT/libibverbs.map.tmp"
mv "$OUT/libibverbs.map.tmp" "$OUT/libibverbs.map"
# Native libraries Rust's std needs (rustc --print native-static-libs for a staticlib on
# x86_64-linux-gnu): gcc_s util rt pthread m dl c.
# The 33 names that also have a name@IBVERBS_1.0 compat entry (provider/src/compat.rs) get their
# default version by name in a copy of the archive (name -> name@@IBVERBS_1.1), as rdma-core's
# .symver does: a plain definition listed in the script would hide the compat one.
cargo run -q -p urxe-provider --example version_script "${FLAGS[@]}" -- --renames > "$OUT/renames.tmp"
objcopy --redefine-syms="$OUT/renames.tmp" "$TARGET/$PROFILE/liburxe_provider.a" "$OUT/liburxe_provider.a.tmp"
rm -f "$OUT/renames.tmp"
gcc -shared -o "$OUT/libibverbs.so.1.tmp" \
  -Wl,--whole-archive "$OUT/liburxe_provider.a.tmp" -Wl,--no-whole-archive \
  -Wl,--version-script="$OUT/libibverbs.map" -Wl,-soname,libibverbs.so.1 \
  -Wl,-z,now -Wl,-z,relro -Wl,--gc-sections \
  -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
rm -f "$OUT/liburxe_provider.a.tmp"
mv "$OUT/libibverbs.so.1.tmp" "$OUT/libibverbs.so.1"
echo "$OUT/libibverbs.so.1"
# librdmacm.so.1 (rdmacm/build.sh) goes next to it, linked against this libibverbs.so.1.
bash rdmacm/build.sh "--$PROFILE"
