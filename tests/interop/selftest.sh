#!/bin/bash
# tests/interop/selftest.sh — fast checks of the harness itself (no root, no VMs, ~1 s):
# syntax of every script, the scenario list, and lib/roce_pcap.py against the golden rxe
# captures in tests/captures (must pass) and against damaged copies of them (must fail).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GOLD=$HERE/../captures
TMP=$(mktemp -d /tmp/urxe-interop-selftest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail=0
ok() { printf 'selftest: ok   %s\n' "$*"; }
bad() { printf 'selftest: FAIL %s\n' "$*"; fail=1; }

for f in "$HERE"/*.sh; do bash -n "$f" && ok "bash -n $(basename "$f")" || bad "bash -n $(basename "$f")"; done
for f in "$HERE"/guest/*; do sh -n "$f" && ok "sh -n guest/$(basename "$f")" || bad "sh -n guest/$(basename "$f")"; done
python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' "$HERE"/lib/*.py &&
  ok "python syntax lib/*.py" || bad "python syntax lib/*.py"
n=$("$HERE/matrix.sh" --list | wc -l)
[ "$n" = 15 ] && ok "matrix.sh --list: 15 scenarios" || bad "matrix.sh --list: $n scenarios, expected 15"

shopt -s nullglob
gold=("$GOLD"/*.pcap)
[ ${#gold[@]} -gt 0 ] || bad "no golden captures in $GOLD"
if python3 "$HERE/lib/roce_pcap.py" --quiet "${gold[@]}" >"$TMP/gold.txt"; then
  ok "roce_pcap.py: ${#gold[@]} golden rxe captures pass ($(awk -F'packets=' '{split($2,a," "); s+=a[1]} END {print s}' "$TMP/gold.txt") packets)"
else
  bad "roce_pcap.py rejects golden captures:"; cat "$TMP/gold.txt"
fi

# damage one byte at a time in different places of rc_send.pcap; each copy must fail
src=$GOLD/rc_send.pcap
if [ -f "$src" ]; then
  # 24-byte file header + 16-byte record header + 14 Ethernet + offsets into the IP packet:
  # TTL (masked out of the ICRC: only the IP checksum catches it), IP ID, BTH opcode,
  # payload, ICRC
  for spec in "ttl:8" "ip-id:4" "bth-opcode:28" "payload:100" "icrc:1067"; do
    name=${spec%%:*} off=$((24 + 16 + 14 + ${spec#*:}))
    python3 - "$src" "$TMP/$name.pcap" "$off" <<'PY'
import sys
d = bytearray(open(sys.argv[1], "rb").read()); d[int(sys.argv[3])] ^= 0x01
open(sys.argv[2], "wb").write(d)
PY
    if python3 "$HERE/lib/roce_pcap.py" --quiet "$TMP/$name.pcap" >/dev/null; then
      bad "roce_pcap.py accepted a capture with a damaged $name"
    else
      ok "roce_pcap.py rejects a damaged $name"
    fi
  done
fi
[ "$fail" = 0 ] && echo "selftest: all ok" || echo "selftest: FAILED"
exit "$fail"
