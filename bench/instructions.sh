#!/usr/bin/env bash
# bench/instructions.sh - instructions per message on urxe's hot paths, counted by
# valgrind --tool=callgrind (repeatable: the same binary and inputs give the same count, whatever
# else the machine does). A benchmark, not a test.
#
# Engine only (tests/sim_perf.rs `engine_instructions_per_message`): two engines in one
# process exchange 64-byte SENDs or 4 KiB WRITEs in bursts of 16; callgrind collects only inside
# the requester's functions (post + transmit, then ACKs + completions) or only inside the
# responder's (receive + place + completions + ACKs). Each figure is the difference of two runs
# (N1 and N2 messages) divided by N2 - N1, so one-time costs cancel.
#
#   bench/instructions.sh            # N1=2000 N2=10000
# Prints a markdown table; exit 1 if a figure could not be measured.
set -u -o pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
N1=${N1:-2000}
N2=${N2:-10000}
OUT=${OUT:-/tmp/urxe-bench/insn-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
command -v valgrind >/dev/null || { apt-get install -y -qq valgrind >/dev/null 2>&1 || { echo "valgrind missing" >&2; exit 1; }; }

exe=$(cd "$REPO" && cargo test --release --test sim_perf --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    try: m = json.loads(l)
    except Exception: continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "sim_perf" and m.get("executable"):
        print(m["executable"])')
[ -x "$exe" ] || { echo "instructions.sh: cannot build tests/sim_perf" >&2; exit 1; }

# collected KIND N TOGGLES... -> instructions collected inside the toggled functions
collected() {
  local kind=$1 n=$2 log
  shift 2
  log=$OUT/$kind-$n-$(echo "$*" | tr -c 'a-z' _ | cut -c1-40).log
  URXE_INSN_KIND=$kind URXE_INSN_MSGS=$n timeout 900 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "$@" "$exe" --ignored --exact engine_instructions_per_message --test-threads=1 >"$log" 2>&1 ||
    { echo "error"; return; }
  grep -m1 -E '== Collected : [0-9]+' "$log" | sed -E 's/.*Collected : ([0-9]+).*/\1/'
}

per_msg() {  # KIND TOGGLES...
  local kind=$1 a b
  shift
  a=$(collected "$kind" "$N1" "$@")
  b=$(collected "$kind" "$N2" "$@")
  if [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]]; then
    awk -v a="$a" -v b="$b" -v n1="$N1" -v n2="$N2" 'BEGIN { printf "%.0f", (b - a) / (n2 - n1) }'
  else
    echo "error"
  fi
}

REQ=(--toggle-collect='sim_perf::requester_post' --toggle-collect='sim_perf::requester_complete')
RSP=(--toggle-collect='sim_perf::responder_side')
COMMIT=$(git -C "$REPO" rev-parse --short=12 HEAD)
[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ] && COMMIT="$COMMIT+dirty"
errors=0
{
  echo "## Instructions per message (callgrind), commit $COMMIT"
  echo
  echo "Engine only, two engines in one process, bursts of 16, (run of $N2 − run of $N1) / $((N2 - N1))."
  echo
  echo "| message | requester side | responder side |"
  echo "|---|---|---|"
  for kind in send64 write4k; do
    r=$(per_msg "$kind" "${REQ[@]}")
    s=$(per_msg "$kind" "${RSP[@]}")
    [ "$r" = error ] && errors=$((errors + 1))
    [ "$s" = error ] && errors=$((errors + 1))
    label=$([ "$kind" = send64 ] && echo "64-byte SEND" || echo "4 KiB RDMA WRITE")
    echo "| $label | $r | $s |"
  done
} | tee "$OUT/table.md"
echo "logs: $OUT"
[ "$errors" = 0 ]
