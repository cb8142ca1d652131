#!/usr/bin/env bash
# bench/instructions.sh - instructions per message on urxe's hot paths, counted by
# valgrind --tool=callgrind (repeatable: the same binary and inputs give the same count, whatever
# else the machine does). A benchmark, not a test.
#
# Engine only (tests/sim_perf.rs `engine_instructions_per_message`): two engines in one
# process exchange 64-byte SENDs, 4 KiB WRITEs or 16 KiB READs at MTU 1024 (a path over
# 1500-byte Ethernet: 16 response packets per READ) in bursts of 16; callgrind collects only inside
# the requester's functions (post + transmit, then ACKs + completions) or only inside the
# responder's (receive + place + completions + ACKs). Each figure is the difference of two runs
# (N1 and N2 messages) divided by N2 - N1, so one-time costs cancel.
#
# Whole process (bench/insn/insn.c over urxe's libibverbs.so.1): a requester and a responder
# process, one RC QP each, 64-byte SENDs or 4 KiB WRITEs in bursts of 16 with blocking waits
# (completion channel), each process under callgrind; every user-space instruction of the
# process counts (application, provider, transport, engine, libc; every thread, the progress
# thread included), the kernel's do not. The same difference of two runs (W1 and W2 messages),
# each the median of three (waits make the counts vary by a few percent).
#
#   bench/instructions.sh            # N1=2000 N2=10000 W1=640 W2=3200
#   URXE_LIB_DIR=/path/to/lib        # where libibverbs.so.1 is (default <repo>/target/urxe/lib)
# Prints markdown tables; exit 1 if a figure could not be measured.
set -u -o pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
N1=${N1:-2000}
N2=${N2:-10000}
W1=${W1:-640}
W2=${W2:-3200}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
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

# per_msg A B N1 N2 -> (B - A) / (N2 - N1), the instructions one message adds, or "error"
per_msg() {
  if [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ ]]; then
    awk -v a="$1" -v b="$2" -v n1="$3" -v n2="$4" 'BEGIN { printf "%.0f", (b - a) / (n2 - n1) }'
  else
    echo "error"
  fi
}

# whole_collected KIND N ROLE -> the median over three runs of the instructions callgrind
# collected in ROLE's process (requester or responder) of `insn KIND N`
whole_collected() {
  local kind=$1 n=$2 role=$3 i log pid v vals=()
  for i in 1 2 3; do
    log=$OUT/insn-$kind-$n-$i.log
    LD_LIBRARY_PATH="$URXE_LIB_DIR" timeout 600 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      "$OUT/insn" "$kind" "$n" >"$log" 2>&1 || { echo error; return; }
    pid=$(sed -n -E "s/^$role pid ([0-9]+).*/\1/p" "$log")
    v=$(sed -n -E "s/^==$pid== Collected : ([0-9]+).*/\1/p" "$log")
    [[ $pid =~ ^[0-9]+$ && $v =~ ^[0-9]+$ ]] || { echo error; return; }
    vals+=("$v")
  done
  printf '%s\n' "${vals[@]}" | sort -n | sed -n 2p
}

REQ=(--toggle-collect='sim_perf::requester_post' --toggle-collect='sim_perf::requester_complete')
RSP=(--toggle-collect='sim_perf::responder_side')
COMMIT=$(git -C "$REPO" rev-parse --short=12 HEAD)
[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ] && COMMIT="$COMMIT+dirty"
{
  echo "## Instructions per message (callgrind), commit $COMMIT"
  echo
  echo "Engine only, two engines in one process, bursts of 16, (run of $N2 − run of $N1) / $((N2 - N1))."
  echo
  echo "| message | requester side | responder side |"
  echo "|---|---|---|"
  for kind in send64 write4k read16k; do
    r=$(per_msg "$(collected "$kind" "$N1" "${REQ[@]}")" "$(collected "$kind" "$N2" "${REQ[@]}")" "$N1" "$N2")
    s=$(per_msg "$(collected "$kind" "$N1" "${RSP[@]}")" "$(collected "$kind" "$N2" "${RSP[@]}")" "$N1" "$N2")
    case $kind in
      send64) label="64-byte SEND" ;;
      write4k) label="4 KiB RDMA WRITE" ;;
      *) label="16 KiB RDMA READ, MTU 1024 (per READ: 16 responses)" ;;
    esac
    echo "| $label | $r | $s |"
  done
  echo
  echo "Whole process: requester and responder processes over urxe's libibverbs.so.1 (bench/insn),"
  echo "bursts of 16, blocking waits; user-space instructions of every thread, not the kernel's;"
  echo "(run of $W2 − run of $W1) / $((W2 - W1)), each run the median of three. callgrind counts every"
  echo "byte a \`rep movsb\` moves as one instruction: the guarded copy of a 4 KiB payload (one"
  echo "\`rep movsb\` to the CPU) counts about 4,100 in each side's WRITE figure."
  echo
  echo "| message | requester process | responder process |"
  echo "|---|---|---|"
  insn_err=
  if [ ! -e "$URXE_LIB_DIR/libibverbs.so.1" ]; then
    insn_err="no $URXE_LIB_DIR/libibverbs.so.1 (provider/build.sh builds it)"
  elif ! gcc -O2 -Wall -o "$OUT/insn" "$BENCH/insn/insn.c" -libverbs >"$OUT/insn-build.log" 2>&1; then
    insn_err="bench/insn/insn.c did not build: $(tail -n 1 "$OUT/insn-build.log")"
  fi
  for kind in send64 write4k; do
    label=$([ "$kind" = send64 ] && echo "64-byte SEND" || echo "4 KiB RDMA WRITE")
    if [ -n "$insn_err" ]; then
      echo "| $label | error: $insn_err | error |"
      continue
    fi
    r=$(per_msg "$(whole_collected "$kind" "$W1" requester)" "$(whole_collected "$kind" "$W2" requester)" "$W1" "$W2")
    s=$(per_msg "$(whole_collected "$kind" "$W1" responder)" "$(whole_collected "$kind" "$W2" responder)" "$W1" "$W2")
    echo "| $label | $r | $s |"
  done
} | tee "$OUT/table.md"
echo "logs: $OUT"
[ "$(grep -c "error" "$OUT/table.md")" = 0 ]
