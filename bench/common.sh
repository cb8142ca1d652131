# bench/common.sh - helpers the bench scripts share (sourced; BENCH must be set).

# is a TCP port in LISTEN state on this machine (IPv4 or IPv6)?
port_listening() {
  awk -v p=":$(printf '%04X' "$1")" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# The ceiling tool's binary (built by build_ceiling).
CEIL=$BENCH/ceiling/target/release/urxe-ceiling

# build_ceiling LOG: builds bench/ceiling (release) into $CEIL, cargo's output in LOG; cargo's
# status.
build_ceiling() {
  timeout 900 cargo build --release --quiet --manifest-path "$BENCH/ceiling/Cargo.toml" \
    --target-dir "$BENCH/ceiling/target" >"$1" 2>&1
}
