#!/bin/bash
# Build urxe's drop-in librdmacm.so.1 next to its libibverbs.so.1.
#
#   rdmacm/build.sh [--release|--debug]      (default: --release)
#
# As provider/build.sh: cargo builds the urxe-rdmacm staticlib, the version script is printed
# from the crate's entry table (rdmacm/src/entries.rs: RDMACM_1.0 .. RDMACM_1.3), and gcc links
# the archive into librdmacm.so.1 with DT_NEEDED libibverbs.so.1: every verb it calls goes
# through the libibverbs.so.1 the application loaded (urxe's), never a second copy.
#
# Output: $TARGET/urxe/lib/librdmacm.so.1 (URXE_OUT=<dir> puts it elsewhere); it links against
# the libibverbs.so.1 already built there.
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
[ -e "$OUT/libibverbs.so.1" ] || { echo "$0: build libibverbs.so.1 first (provider/build.sh)" >&2; exit 1; }
cargo build -q -p urxe-rdmacm --lib "${FLAGS[@]}"
cargo run -q -p urxe-rdmacm --example rdmacm_version_script "${FLAGS[@]}" > "$OUT/librdmacm.map.tmp"
mv "$OUT/librdmacm.map.tmp" "$OUT/librdmacm.map"
gcc -shared -o "$OUT/librdmacm.so.1.tmp" \
  -Wl,--whole-archive "$TARGET/$PROFILE/liburxe_rdmacm.a" -Wl,--no-whole-archive \
  -Wl,--version-script="$OUT/librdmacm.map" -Wl,-soname,librdmacm.so.1 \
  -Wl,-z,now -Wl,-z,relro -Wl,--gc-sections \
  -L"$OUT" -l:libibverbs.so.1 \
  -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
mv "$OUT/librdmacm.so.1.tmp" "$OUT/librdmacm.so.1"
echo "$OUT/librdmacm.so.1"
