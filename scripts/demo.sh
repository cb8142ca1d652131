#!/usr/bin/env bash
# The main job: install deps, build urxe and its drop-in libibverbs.so.1, then run Debian's
# unmodified ibv_rc_pingpong server and client over urxe (two processes, no configuration),
# and verify a capture of the traffic with `urxe check`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release --quiet
bash provider/build.sh --release >/dev/null
URXE=./target/release/urxe
out=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$out"' EXIT
echo "== capture loopback UDP 4791 while the pingpong runs"
tcpdump -q -i lo -w "$out/pingpong.pcap" udp port 4791 2>/dev/null &
sleep 1
echo "== ibv_rc_pingpong server and client over urxe (unmodified Debian binaries)"
URXE_GSO=0 timeout 60 $URXE run -- ibv_rc_pingpong -g 1 -n 1000 -c > "$out/server.txt" 2>&1 &
server=$!
sleep 1
URXE_GSO=0 timeout 60 $URXE run -- ibv_rc_pingpong -g 1 -n 1000 -c 127.0.0.1
wait $server
echo "-- server:"
cat "$out/server.txt"
sleep 1
kill %1 2>/dev/null || true
wait 2>/dev/null || true
echo "== urxe check on the capture"
$URXE check --quiet --flows "$out/pingpong.pcap"
