#!/usr/bin/env bash
# bench/run.sh - urxe's perftest figures beside platform ceilings measured in the same run, on the
# same machine, and the ratios against the first performance bar. A benchmark, not a test.
#
#   bench/run.sh                 # DUR=3 s per throughput figure, 100k ping-pong round trips
#   QUICK=1 bench/run.sh         # smoke run: DUR=1, 20k round trips, 2000 latency iterations
#
# Order: (1) bench/ceiling (our own tool): 64-byte messages as GSO trains (the message-rate
# ceiling of a batching UDP engine), 64-byte sendmmsg/recvmmsg rate, busy-poll UDP ping-pong
# (its round trip is also the READ ceiling), the RC ping-pong (each one-way trip two 20-byte
# datagrams, a message and the ACK of the peer's, as one GSO train: the floor of an RC engine's
# ib_send_lat / ib_write_lat over UDP; no bar), the ping-pong to a sleeping server; (2) BW_RUNS
# rounds of: iperf3 TCP loopback (one stream), UDP GSO+GRO bandwidth, and urxe's ib_write_bw
# 64 KiB, 4 KiB and 64 KiB -q 16, back to back (medians reported); (3) perftest over urxe's libibverbs.so.1
# (LD_LIBRARY_PATH=$URXE_LIB_DIR): 4 process pairs at once, ib_read_bw 64 KiB,
# ib_send_bw 64 B, ib_send_lat / ib_write_lat / ib_read_lat 2 B, and right after ib_send_lat
# the ping-pong again with each side computing for urxe's extra time per one-way (`-w`: what
# the platform alone does to the tail of a trip that long; no bar); (4) the resident memory of
# 1000 RC QPs in one process (bench/qp_rss). Then a markdown table with the bars of issue #40.
# Every command runs under `timeout`; a figure that cannot be had reads "error: <why>", the run
# goes on, and the exit status is 1.
#
# Settings (environment):
#   DUR=3            seconds of traffic per throughput figure (integer >= 1)
#   QUICK=0          1 = smoke run (defaults DUR=1 PP=20000 LAT_ITERS=2000 LAT_RUNS=BW_RUNS=1)
#   PP=100000        round trips of the UDP ping-pong
#   LAT_ITERS=10000  iterations of ib_send_lat / ib_write_lat
#   LAT_RUNS=5       runs of each latency figure (urxe's and the ping-pong ceiling alike); the
#                    run with the median typical/p50 is reported, every run is in raw.txt
#   BW_RUNS=3        rounds of the bandwidth figures (TCP and GSO+GRO ceilings, ib_write_bw
#                    64 KiB, 4 KiB, -q 16, back to back in each round); medians reported
#   URXE_LIB_DIR     directory holding urxe's libibverbs.so.1 (default <repo>/target/urxe/lib)
#   URXE_DEV=urxe0   GID_INDEX=1   device and GID index given to perftest (-d, -x)
#   PIN=1            sender/client on CPU 0, receiver/server on CPU 1 for every figure; 0 = unpinned
#   IDLE_WAIT=30     wait up to this many seconds for the machine to go idle (< 15 % busy over 2 s) before starting
#   INSTALL=1        apt-get install iperf3 perftest ibverbs-utils when a tool is missing
#   STRICT=0         1 = exit 2 when a bar check fails (errors always exit 1)
#   OUT              directory for logs and results (default /tmp/urxe-bench/run-<UTC time>)
#   IPERF_PORT=5311 PERFTEST_PORT=18615   first TCP ports tried (the next free one is used)
#   PERFTEST_DIR     directory of the ib_* programs (default: found in PATH)
#   PERFTEST_ARGS    extra arguments for every perftest run, e.g. --use_old_post_send
#   BW_TMO LAT_TMO   time limits of one perftest bandwidth / latency run (defaults DUR+27, 30+LAT_ITERS/500)
set -u -o pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  DUR=${DUR:-1} PP=${PP:-20000} LAT_ITERS=${LAT_ITERS:-2000}
else
  DUR=${DUR:-3} PP=${PP:-100000} LAT_ITERS=${LAT_ITERS:-10000}
fi
LAT_RUNS=${LAT_RUNS:-$([ "$QUICK" = 1 ] && echo 1 || echo 5)}
BW_RUNS=${BW_RUNS:-$([ "$QUICK" = 1 ] && echo 1 || echo 3)}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
URXE_DEV=${URXE_DEV:-urxe0}
GID_INDEX=${GID_INDEX:-1}
PIN=${PIN:-1}
IDLE_WAIT=${IDLE_WAIT:-30}
INSTALL=${INSTALL:-1}
STRICT=${STRICT:-0}
IPERF_PORT=${IPERF_PORT:-5311}
PERFTEST_PORT=${PERFTEST_PORT:-18615}
OUT=${OUT:-/tmp/urxe-bench/run-$(date -u +%Y%m%dT%H%M%SZ)}
PERFTEST_DIR=${PERFTEST_DIR:-}
PERFTEST_ARGS=${PERFTEST_ARGS:-}
TX_CPU=0
RX_CPU=1

for v in DUR PP LAT_ITERS LAT_RUNS IDLE_WAIT; do
  case ${!v} in '' | *[!0-9]*) echo "run.sh: $v must be a whole number, got '${!v}'" >&2; exit 2 ;; esac
done
[ "$DUR" -ge 1 ] || { echo "run.sh: DUR must be >= 1" >&2; exit 2; }
[ "$PP" -ge 1 ] || { echo "run.sh: PP must be >= 1" >&2; exit 2; }
[ "$LAT_RUNS" -ge 1 ] || { echo "run.sh: LAT_RUNS must be >= 1" >&2; exit 2; }
[ "$LAT_ITERS" -ge 5 ] || { echo "run.sh: LAT_ITERS must be >= 5 (perftest's minimum)" >&2; exit 2; }
if [ "$PIN" = 1 ] && [ "$(nproc)" -lt 2 ]; then
  echo "run.sh: fewer than 2 CPUs, running unpinned" >&2
  PIN=0
fi

mkdir -p "$OUT" || exit 1
RAW=$OUT/raw.txt
: >"$RAW"
ERRORS=0
# Background servers are started and reaped inside the step that needs them (each under
# `timeout`); Ctrl-C reaches them too, as they share the terminal's process group.
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM

note() { echo "# $*" | tee -a "$RAW" >&2; }

# median_of KEY LINE... -> the line whose KEY has the median value among lines that have it
# (the lower middle for an even count); the first line if none has it (an error line).
median_of() {
  local key=$1 l v
  shift
  local pairs=()
  for l in "$@"; do
    v=$(kv "$l" "$key")
    [ -n "$(num "$v")" ] && pairs+=("$v	$l")
  done
  if [ ${#pairs[@]} = 0 ]; then echo "$1"; return; fi
  printf '%s\n' "${pairs[@]}" | sort -g -k1,1 | sed -n "$(((${#pairs[@]} + 1) / 2))p" | cut -f2-
}
record() { echo "$*" >>"$RAW"; }

# value of KEY in a "k=v k=v" line
kv() { awk -v k="$2" '{ for (i = 1; i <= NF; i++) { n = index($i, "="); if (n > 1 && substr($i, 1, n - 1) == k) { print substr($i, n + 1); exit } } }' <<<"$1"; }
# a number, or nothing
num() { [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?$ ]] && echo "$1"; }
# last non-empty lines of a log, on one line, for an error message
tail_of() {
  grep -v -e '^[[:space:]*-]*$' -e '^[[:space:]]*\*.*\*[[:space:]]*$' "$1" 2>/dev/null | tail -n "${2:-2}" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//' |
    tr -s ' \t' ' ' | paste -sd ';' - | sed 's/;/; /g' | cut -c1-200
}

# ": <last lines of log $1>" (prefixed by $3), or nothing when the log is empty
said() { local t; t=$(tail_of "$1" "${2:-2}"); [ -n "$t" ] && echo "${3:-}: $t"; }

# port_listening, CEIL and build_ceiling
source "$BENCH/common.sh"
# first port from $1 on that nobody listens on
free_port() {
  local p
  for p in $(seq "$1" $(($1 + 40))); do port_listening "$p" || { echo "$p"; return 0; }; done
  return 1
}
# wait (at most $3 s) until port $1 listens; fails early if process $2 has exited
wait_listen() {
  local i
  for i in $(seq 1 $(($3 * 10))); do
    port_listening "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# CPU busy % over $1 s, all CPUs, from /proc/stat (idle + iowait count as idle)
busy_pct() {
  local a b
  read -r -a a < <(head -n1 /proc/stat)
  sleep "$1"
  read -r -a b < <(head -n1 /proc/stat)
  awk -v a="${a[*]}" -v b="${b[*]}" 'BEGIN { split(a, x); split(b, y); t = 0
    for (i = 2; i <= 9; i++) t += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%d\n", (t > 0 ? 100 * (t - idle) / t : 0) }'
}

# around each measurement: how busy the machine was just before it (0.5 s sample; the benchmark's
# own load would hide others' during it) and the steal time during it, into raw.txt
STEP_STAT=()
step_begin() {
  STEP_BUSY=$(busy_pct 0.5)
  read -r -a STEP_STAT < <(head -n1 /proc/stat)
}
step_end() {  # $1 name
  local b
  read -r -a b < <(head -n1 /proc/stat)
  record "# step $1: ${STEP_BUSY}% busy just before; $(awk -v a="${STEP_STAT[*]}" -v b="${b[*]}" 'BEGIN { split(a, x); split(b, y)
    t = 0; for (i = 2; i <= 9; i++) t += y[i] - x[i]
    printf "during it %d%% busy, %.1f%% steal", (t > 0 ? 100 * (t - (y[5] - x[5]) - (y[6] - x[6])) / t : 0), (t > 0 ? 100 * (y[9] - x[9]) / t : 0) }')"
  [ "$STEP_BUSY" -ge 25 ] && BUSY_STEPS="$BUSY_STEPS $1(${STEP_BUSY}%)"
}
BUSY_STEPS=
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }

# --------------------------------------------------------------------------- tools

missing_tools() {
  local m=()
  command -v iperf3 >/dev/null || m+=(iperf3)
  command -v ib_write_bw >/dev/null || m+=(perftest)
  command -v ibv_devices >/dev/null || m+=(ibverbs-utils)
  echo "${m[*]}"
}
if [ -n "$(missing_tools)" ]; then
  if [ "$INSTALL" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    note "installing Debian packages (missing: $(missing_tools))"
    timeout 300 apt-get update >"$OUT/apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y iperf3 perftest ibverbs-utils >>"$OUT/apt.log" 2>&1 ||
      note "apt-get install failed: $(tail_of "$OUT/apt.log")"
  else
    note "missing: $(missing_tools) (not installing: INSTALL=$INSTALL, uid $(id -u))"
  fi
fi

CEIL_BUILD_ERR=
note "building bench/ceiling (release)"
if ! command -v cargo >/dev/null; then
  CEIL_BUILD_ERR="cargo not found"
elif ! build_ceiling "$OUT/ceiling-build.log"; then
  CEIL_BUILD_ERR="build failed: $(tail_of "$OUT/ceiling-build.log")"
fi
[ -z "$CEIL_BUILD_ERR" ] && [ ! -x "$CEIL" ] && CEIL_BUILD_ERR="no binary at $CEIL"

# --------------------------------------------------------------------------- the run's context

COMMIT=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT+dirty"
STARTED=$(date -u +%FT%TZ)
note "urxe bench $STARTED commit=$COMMIT host=$(hostname) kernel=$(uname -r) cpus=$(nproc)"
note "DUR=$DUR PP=$PP LAT_ITERS=$LAT_ITERS PIN=$PIN URXE_LIB_DIR=$URXE_LIB_DIR PERFTEST_ARGS='$PERFTEST_ARGS' OUT=$OUT"
note "tools: $(iperf3 --version 2>/dev/null | head -n1); perftest $(dpkg-query -W -f='${Version}' perftest 2>/dev/null || echo '?')"

busy=$(busy_pct 2)
waited=0
while [ "$busy" -ge 15 ] && [ "$waited" -lt "$IDLE_WAIT" ]; do
  [ $((waited % 30)) = 0 ] && note "machine ${busy}% busy (load $(cut -d' ' -f1-3 /proc/loadavg)); waiting for idle ($waited/$IDLE_WAIT s)"
  sleep 1
  waited=$((waited + 3))
  busy=$(busy_pct 2)
done
IDLE_NOTE="${busy}% busy over 2 s before the run, load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$busy" -ge 15 ] && IDLE_NOTE="$IDLE_NOTE (NOT idle: figures are suspect)"
note "$IDLE_NOTE"

if [ "$PIN" = 1 ]; then
  CPUS="$TX_CPU,$RX_CPU"
  SRV_PIN=(taskset -c "$RX_CPU")
  CLI_PIN=(taskset -c "$TX_CPU")
  IPERF_AFF=(-A "$TX_CPU,$RX_CPU")
else
  CPUS=none
  SRV_PIN=()
  CLI_PIN=()
  IPERF_AFF=()
fi

# --------------------------------------------------------------------------- ceilings

run_iperf3() {
  command -v iperf3 >/dev/null || { echo "error=iperf3_not_installed"; return; }
  local port spid rc res
  port=$(free_port "$IPERF_PORT") || { echo "error=no_free_port_near_$IPERF_PORT"; return; }
  timeout -k 2 $((DUR + 30)) iperf3 -s -1 -p "$port" >"$OUT/iperf3.server.log" 2>&1 &
  spid=$!
  if ! wait_listen "$port" "$spid" 10; then
    kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
    echo "error=iperf3_server_did_not_listen:_$(tail_of "$OUT/iperf3.server.log" 1 | tr ' ' _)"
    return
  fi
  timeout -k 2 $((DUR + 20)) iperf3 -c 127.0.0.1 -p "$port" -t "$DUR" -J "${IPERF_AFF[@]}" \
    >"$OUT/iperf3.json" 2>"$OUT/iperf3.client.err"
  rc=$?
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  res=$(awk -f "$BENCH/parse_iperf3.awk" "$OUT/iperf3.json")
  if [ -n "$(kv "$res" tcp_gbps)" ]; then
    echo "mode=iperf3_tcp $res port=$port"
  elif [ "$rc" = 124 ]; then
    echo "error=iperf3_timed_out"
  else
    echo "error=iperf3_exit_${rc}_$(kv "$res" iperf3_error)$(kv "$res" parse_error)"
  fi
}

run_ceiling() {  # $1 mode, $2 timeout s, $3... more options of the ceiling tool
  [ -n "$CEIL_BUILD_ERR" ] && { echo "mode=$1 error=$(tr ' ' _ <<<"$CEIL_BUILD_ERR")"; return; }
  local line rc mode=$1 tmo=$2
  shift 2
  line=$(timeout -k 2 "$tmo" "$CEIL" -t "$DUR" -n "$PP" -c "$CPUS" "$@" "$mode" 2>>"$OUT/ceiling.err")
  rc=$?
  if [ -z "$line" ]; then
    [ "$rc" = 124 ] && line="mode=$mode error=timed_out_after_${tmo}s" || line="mode=$mode error=exit_$rc"
  fi
  echo "$line"
}

# ceiling_runs KEY MODE [OPTIONS...] -> the median (by KEY) of LAT_RUNS runs of a ping-pong
# mode of the ceiling tool, each run recorded
ceiling_runs() {
  local key=$1 mode=$2 i runs=()
  shift 2
  for i in $(seq 1 "$LAT_RUNS"); do
    runs+=("$(run_ceiling "$mode" $((DUR * 10 + 30)) "$@")")
    record "run $i: ${runs[-1]}"
  done
  median_of "$key" "${runs[@]}"
}

note "ceiling: 64-byte UDP messages as GSO trains of 64 + UDP_GRO receive, ${DUR}s"
step_begin
GSO64=$(run_ceiling gso64 $((DUR + 20)))
step_end gso64
record "$GSO64"
note "ceiling: 64-byte UDP sendmmsg/recvmmsg, ${DUR}s"
step_begin
MMSG=$(run_ceiling mmsg64 $((DUR + 20)))
step_end mmsg64
record "$MMSG"
note "ceiling: 64-byte busy-poll UDP ping-pong, $PP round trips, $LAT_RUNS run(s)"
step_begin
PPONG=$(ceiling_runs ow_p50_us pingpong)
step_end pingpong
record "$PPONG"
note "ceiling: the RC ping-pong (two 20-byte datagrams per one-way as one GSO train), $PP round trips, $LAT_RUNS run(s)"
step_begin
PPRC=$(ceiling_runs ow_p50_us pingpong_rc)
step_end pingpong_rc
record "$PPRC"
note "ceiling: 64-byte ping-pong to a server that sleeps in poll(), $PP round trips, $LAT_RUNS run(s)"
step_begin
PPBLK=$(ceiling_runs rtt_p50_us pingpong_srvblock)
step_end pingpong_srvblock
record "$PPBLK"
[ -n "$(kv "$PPBLK" error)" ] && ERRORS=$((ERRORS + 1))
note "ceiling: 64-byte ping-pong with both sides asleep in a blocking recv(), $PP round trips, $LAT_RUNS run(s)"
step_begin
PPSLEEP=$(ceiling_runs ow_p50_us pingpong_block)
step_end pingpong_block
record "$PPSLEEP"
[ -n "$(kv "$PPSLEEP" error)" ] && ERRORS=$((ERRORS + 1))
# The READ ceiling: a READ is a request and a response, one UDP round trip = 2 x one-way.
RTT=$(awk -v a="$(kv "$PPONG" ow_p50_us)" -v b="$(kv "$PPONG" ow_p99_us)" 'BEGIN { if (a + 0 > 0) printf "rtt_p50_us=%.2f rtt_p99_us=%.2f", 2 * a, 2 * b; else print "error=no_ping-pong_figure" }')
record "read_ceiling $RTT"
for l in "$GSO64" "$MMSG" "$PPONG" "$PPRC"; do
  [ -n "$(kv "$l" error)" ] && ERRORS=$((ERRORS + 1))
done

# --------------------------------------------------------------------------- urxe (perftest)

URXE_LIB=$URXE_LIB_DIR/libibverbs.so.1
URXE_ERR=
URXE_HINT=
pt() { if [ -n "$PERFTEST_DIR" ]; then echo "$PERFTEST_DIR/$1"; else command -v "$1"; fi; }
if [ ! -x "$(pt ib_write_bw)" ]; then
  URXE_ERR="perftest not installed"
elif [ ! -e "$URXE_LIB" ]; then
  URXE_ERR="urxe library missing: $URXE_LIB"
  URXE_HINT="Build it with provider/build.sh, or point URXE_LIB_DIR at the directory holding libibverbs.so.1."
else
  URXE_ENV=(env "LD_LIBRARY_PATH=$URXE_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  loaded=$("${URXE_ENV[@]}" timeout 10 ldd "$(pt ib_write_bw)" 2>/dev/null | awk '$1 == "libibverbs.so.1" { print $3 }')
  note "perftest loads libibverbs.so.1 from: ${loaded:-? (ldd could not tell)}"
  if [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" != "$(readlink -f "$URXE_LIB")" ]; then
    URXE_ERR="perftest would load $loaded, not $URXE_LIB"
  else
    devs=$("${URXE_ENV[@]}" timeout 10 ibv_devices 2>&1)
    record "# ibv_devices: $(tr -s ' \t\n' ' ' <<<"$devs")"
    grep -qw "$URXE_DEV" <<<"$devs" || note "warning: ibv_devices does not list $URXE_DEV: $(tr -s ' \t\n' ' ' <<<"$devs" | cut -c1-160)"
  fi
fi

# perftest_pair NAME PORT_OFFSET TIMEOUT TOOL ARGS... -> "key=value ..." from the client's
# report, or "error=...". Each pair gets its own port (PERFTEST_PORT + offset, or the next free one)
# so that no run meets the previous one's connection in TIME_WAIT.
perftest_pair() {
  local name=$1 off=$2 tmo=$3 tool=$4
  shift 4
  if [ -n "$URXE_ERR" ]; then echo "error=$URXE_ERR"; return; fi
  local port slog=$OUT/$name.server.log clog=$OUT/$name.client.log spid crc src res
  port=$(free_port $((PERFTEST_PORT + off))) || { echo "error=no free TCP port near $((PERFTEST_PORT + off))"; return; }
  local extra=()
  read -r -a extra <<<"$PERFTEST_ARGS"
  local common=(-d "$URXE_DEV" -x "$GID_INDEX" -p "$port" -F "$@" "${extra[@]}")
  record "# $name: $tool ${common[*]} [127.0.0.1]"
  tool=$(pt "$tool")
  "${URXE_ENV[@]}" timeout -k 3 "$tmo" "${SRV_PIN[@]}" "$tool" "${common[@]}" >"$slog" 2>&1 &
  spid=$!
  if ! wait_listen "$port" "$spid" 15; then
    kill "$spid" 2>/dev/null
    wait "$spid"
    src=$?
    echo "error=server did not start (exit $src)$(said "$slog")"
    return
  fi
  "${URXE_ENV[@]}" timeout -k 3 "$tmo" "${CLI_PIN[@]}" "$tool" "${common[@]}" 127.0.0.1 >"$clog" 2>&1
  crc=$?
  # the server ends by itself after the test; give it a moment, then stop it
  local i
  for i in $(seq 1 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  res=$(awk -f "$BENCH/parse_perftest.awk" "$clog")
  if [ "$crc" = 124 ] || [ "$crc" = 137 ]; then
    echo "error=timed out after ${tmo}s$(said "$clog")"
  elif [ "$crc" != 0 ]; then
    echo "error=client exit $crc$(said "$clog")$(said "$slog" 1 " / server")"
  elif [ -n "$(kv "$res" parse_error)" ]; then
    echo "error=no result in perftest output$(said "$clog")"
  else
    echo "$res"
  fi
}

# lat_runs NAME PORT_OFFSET TOOL [ARGS...] -> the median (by typical latency) of LAT_RUNS runs
# (2 B unless ARGS give -s)
lat_runs() {
  local name=$1 off=$2 tool=$3 i runs=()
  shift 3
  local size=(-s 2)
  [[ " $* " == *" -s "* ]] && size=()
  for i in $(seq 1 "$LAT_RUNS"); do
    runs+=("$(perftest_pair "${name}_run$i" "$off" "$LAT_TMO" "$tool" "${size[@]}" -n "$LAT_ITERS" "$@")")
    record "run $i: $name ${runs[-1]}"
  done
  median_of lat_typical_us "${runs[@]}"
}

BW_D=$((DUR + 2))  # perftest -D with margin -f 1: samples the middle DUR seconds
BW_TMO=${BW_TMO:-$((BW_D + 25))}
LAT_TMO=${LAT_TMO:-$((30 + LAT_ITERS / 500))}
# Bandwidth in rounds. This VM's throughput comes and goes in spells of seconds, for the
# ceilings and urxe alike (bench/README.md, "Spells"), so one run of each, a minute apart,
# compared figures from different spells. Each round measures the TCP and GSO+GRO ceilings and urxe's ib_write_bw 64 KiB,
# 4 KiB and 64 KiB -q 16 back to back; the table takes each figure's median over BW_RUNS
# rounds (every run is in raw.txt).
TCP_RUNS=() GSO_RUNS=() W64_RUNS=() W4_RUNS=() Q16_RUNS=()
for r in $(seq 1 "$BW_RUNS"); do
  note "round $r/$BW_RUNS: iperf3 TCP loopback, UDP GSO+GRO, urxe ib_write_bw 65536 B, 4096 B, 65536 B -q 16; ${DUR}s each"
  step_begin
  TCP_RUNS+=("$(run_iperf3)")
  step_end "iperf3_tcp_$r"
  record "${TCP_RUNS[-1]} round=$r"
  step_begin
  GSO_RUNS+=("$(run_ceiling gso $((DUR + 20)))")
  step_end "gso_$r"
  record "${GSO_RUNS[-1]} round=$r"
  [ -z "$URXE_ERR" ] && step_begin
  W64_RUNS+=("$(perftest_pair "write_bw_64k_$r" 0 "$BW_TMO" ib_write_bw -s 65536 -D "$BW_D" -f 1 --report_gbits)")
  [ -z "$URXE_ERR" ] && step_end "write_bw_64k_$r"
  record "round $r: urxe=ib_write_bw_64k ${W64_RUNS[-1]}"
  [ -z "$URXE_ERR" ] && step_begin
  W4_RUNS+=("$(perftest_pair "write_bw_4k_$r" 10 "$BW_TMO" ib_write_bw -s 4096 -D "$BW_D" -f 1 --report_gbits)")
  [ -z "$URXE_ERR" ] && step_end "write_bw_4k_$r"
  record "round $r: urxe=ib_write_bw_4k ${W4_RUNS[-1]}"
  [ -z "$URXE_ERR" ] && step_begin
  Q16_RUNS+=("$(perftest_pair "write_bw_64k_q16_$r" 70 "$BW_TMO" ib_write_bw -s 65536 -q 16 -D "$BW_D" -f 1 --report_gbits)")
  [ -z "$URXE_ERR" ] && step_end "write_bw_64k_q16_$r"
  record "round $r: urxe=ib_write_bw_64k_q16 ${Q16_RUNS[-1]}"
done
TCP=$(median_of tcp_gbps "${TCP_RUNS[@]}")
GSO=$(median_of gbps "${GSO_RUNS[@]}")
WBW64K=$(median_of bw_avg_gbps "${W64_RUNS[@]}")
WBW4K=$(median_of bw_avg_gbps "${W4_RUNS[@]}")
WBWQ16=$(median_of bw_avg_gbps "${Q16_RUNS[@]}")
record "median of $BW_RUNS: $TCP"
record "median of $BW_RUNS: $GSO"
record "median of $BW_RUNS: urxe=ib_write_bw_64k $WBW64K"
record "median of $BW_RUNS: urxe=ib_write_bw_4k $WBW4K"
record "median of $BW_RUNS: urxe=ib_write_bw_64k_q16 $WBWQ16"
for l in "${TCP_RUNS[@]}" "${GSO_RUNS[@]}"; do
  [ -n "$(kv "$l" error)" ] && ERRORS=$((ERRORS + 1))
done
note "urxe: ib_send_bw 64 B, ${DUR}s"
[ -z "$URXE_ERR" ] && step_begin
SBW64=$(perftest_pair send_bw_64 20 "$BW_TMO" ib_send_bw -s 64 -D "$BW_D" -f 1 --report_gbits)
[ -z "$URXE_ERR" ] && step_end send_bw_64
record "urxe=ib_send_bw_64 $SBW64"
note "urxe: ib_send_lat 2 B, $LAT_ITERS iterations, $LAT_RUNS run(s)"
[ -z "$URXE_ERR" ] && step_begin
SLAT=$(lat_runs send_lat_2 30 ib_send_lat)
[ -z "$URXE_ERR" ] && step_end send_lat_2
record "urxe=ib_send_lat_2 $SLAT"
# The platform's share of the tail: the same busy-poll ping-pong, each side computing for what
# urxe's one-way trip takes beyond the ping-pong's before it sends, so that its trips are as
# long as ib_send_lat's; whatever interrupts the CPUs now and then (timer ticks, the host) hits
# a trip that long as often as it hits urxe's.
WORK_NS=$(awk -v u="$(kv "$SLAT" lat_typical_us)" -v c="$(kv "$PPONG" ow_p50_us)" 'BEGIN { if (u + 0 > c + 0 && c + 0 > 0) printf "%d", (u - c) * 1000; else print 0 }')
note "ceiling: the busy-poll ping-pong computing ${WORK_NS} ns per one-way (ib_send_lat's typical trip), $PP round trips, $LAT_RUNS run(s)"
step_begin
PPWORK=$(ceiling_runs ow_p50_us pingpong -w "$WORK_NS")
step_end pingpong_work
record "$PPWORK"
[ -n "$(kv "$PPWORK" error)" ] && ERRORS=$((ERRORS + 1))
note "urxe: ib_write_lat 2 B, $LAT_ITERS iterations, $LAT_RUNS run(s)"
[ -z "$URXE_ERR" ] && step_begin
WLAT=$(lat_runs write_lat_2 40 ib_write_lat)
[ -z "$URXE_ERR" ] && step_end write_lat_2
record "urxe=ib_write_lat_2 $WLAT"

note "urxe: ib_read_lat 2 B, $LAT_ITERS iterations, $LAT_RUNS run(s)"
[ -z "$URXE_ERR" ] && step_begin
RLAT=$(lat_runs read_lat_2 50 ib_read_lat)
[ -z "$URXE_ERR" ] && step_end read_lat_2
record "urxe=ib_read_lat_2 $RLAT"
# The event path: programs asleep in ibv_get_cq_event. perftest's -e, and Debian's
# ibv_rc_pingpong (-e, 64 B and 4 KiB; and with its defaults: 4 KiB, polled, 1000 iterations).
note "urxe: ib_send_lat -e 2 B and ib_send_lat 4096 B, $LAT_ITERS iterations, $LAT_RUNS run(s)"
[ -z "$URXE_ERR" ] && step_begin
ELAT=$(lat_runs send_lat_e_2 32 ib_send_lat -e)
[ -z "$URXE_ERR" ] && step_end send_lat_e_2
record "urxe=ib_send_lat_e_2 $ELAT"
[ -z "$URXE_ERR" ] && step_begin
SLAT4K=$(lat_runs send_lat_4k 34 ib_send_lat -s 4096)
[ -z "$URXE_ERR" ] && step_end send_lat_4k
record "urxe=ib_send_lat_4k $SLAT4K"

# rc_pingpong NAME PORT_OFFSET ARGS... -> "usec_per_iter=... iters=..." from ibv_rc_pingpong's
# client, or "error=..."
rc_pingpong() {
  local name=$1 off=$2 port slog=$OUT/$1.server.log clog=$OUT/$1.client.log spid crc res
  shift 2
  if [ -n "$URXE_ERR" ]; then echo "error=$URXE_ERR"; return; fi
  command -v ibv_rc_pingpong >/dev/null || { echo "error=ibv_rc_pingpong not installed"; return; }
  port=$(free_port $((PERFTEST_PORT + off))) || { echo "error=no free TCP port"; return; }
  local common=(-d "$URXE_DEV" -g "$GID_INDEX" -p "$port" "$@")
  record "# $name: ibv_rc_pingpong ${common[*]} [127.0.0.1]"
  "${URXE_ENV[@]}" timeout -k 3 "$LAT_TMO" "${SRV_PIN[@]}" ibv_rc_pingpong "${common[@]}" >"$slog" 2>&1 &
  spid=$!
  if ! wait_listen "$port" "$spid" 15; then
    kill "$spid" 2>/dev/null; wait "$spid"
    echo "error=server did not start$(said "$slog")"
    return
  fi
  "${URXE_ENV[@]}" timeout -k 3 "$LAT_TMO" "${CLI_PIN[@]}" ibv_rc_pingpong "${common[@]}" 127.0.0.1 >"$clog" 2>&1
  crc=$?
  wait "$spid" 2>/dev/null
  res=$(awk '/iters in/ { for (i = 1; i <= NF; i++) if ($i == "usec/iter") u = $(i - 1); printf "usec_per_iter=%s iters=%s", u, $1 }' "$clog")
  if [ "$crc" != 0 ] || [ -z "$(kv "$res" usec_per_iter)" ]; then echo "error=client exit $crc$(said "$clog")$(said "$slog" 1 " / server")"; else echo "$res"; fi
}
# rc_pingpong_runs NAME PORT_OFFSET ARGS... -> the median (by µs per iteration) of LAT_RUNS runs
rc_pingpong_runs() {
  local name=$1 off=$2 i runs=()
  shift 2
  for i in $(seq 1 "$LAT_RUNS"); do
    runs+=("$(rc_pingpong "${name}_run$i" "$off" "$@")")
    record "run $i: $name ${runs[-1]}"
  done
  median_of usec_per_iter "${runs[@]}"
}
RC_ITERS=$(( LAT_ITERS < 5000 ? LAT_ITERS : 5000 ))
note "urxe: ibv_rc_pingpong -e 64 B and 4096 B, defaults; $RC_ITERS iterations, $LAT_RUNS run(s)"
[ -z "$URXE_ERR" ] && step_begin
RCPE64=$(rc_pingpong_runs rc_pingpong_e_64 36 -e -s 64 -n "$RC_ITERS")
RCPE4K=$(rc_pingpong_runs rc_pingpong_e_4k 38 -e -s 4096 -n "$RC_ITERS")
RCPDEF=$(rc_pingpong_runs rc_pingpong_default 42)
[ -z "$URXE_ERR" ] && step_end rc_pingpong
record "urxe=ibv_rc_pingpong_e_64 $RCPE64"
record "urxe=ibv_rc_pingpong_e_4k $RCPE4K"
record "urxe=ibv_rc_pingpong_default $RCPDEF"
# Both-asleep round trip, the limit of one rc_pingpong iteration.
PPSLEEP_RTT=$(awk -v a="$(kv "$PPSLEEP" rtt_p50_us)" 'BEGIN { if (a + 0 > 0) printf "rtt_p50_us=%.2f", a; else print "error=no_ping-pong_figure" }')

note "urxe: ib_read_bw 65536 B, ${DUR}s"
[ -z "$URXE_ERR" ] && step_begin
RBW64K=$(perftest_pair read_bw_64k 60 "$BW_TMO" ib_read_bw -s 65536 -D "$BW_D" -f 1 --report_gbits)
[ -z "$URXE_ERR" ] && step_end read_bw_64k
record "urxe=ib_read_bw_64k $RBW64K"

# four_pairs: 4 ib_write_bw 64 KiB pairs at once (servers on the receiver CPU, clients on the
# sender CPU), each its own processes; "bw_avg_gbps=<sum> pairs=4" or "error=...".
four_pairs() {
  if [ -n "$URXE_ERR" ]; then echo "error=$URXE_ERR"; return; fi
  local i pids=() res sum=0 v errs=
  for i in 0 1 2 3; do
    ( perftest_pair "write_bw_64k_pair$i" $((80 + 2 * i)) "$BW_TMO" ib_write_bw -s 65536 -D "$BW_D" -f 1 --report_gbits \
        >"$OUT/pair$i.result" ) &
    pids+=($!)
    sleep 0.3   # each server takes its own free port before the next looks for one
  done
  for i in 0 1 2 3; do wait "${pids[$i]}"; done
  for i in 0 1 2 3; do
    res=$(cat "$OUT/pair$i.result" 2>/dev/null)
    record "pair $i: $res"
    v=$(num "$(kv "$res" bw_avg_gbps)")
    if [ -n "$v" ]; then sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { printf "%.4f", a + b }'); else errs="$errs pair$i"; fi
  done
  if [ -n "$errs" ]; then echo "error=failed:$errs"; else echo "bw_avg_gbps=$sum pairs=4"; fi
}
note "urxe: 4 pairs of ib_write_bw 65536 B at once, ${DUR}s"
[ -z "$URXE_ERR" ] && step_begin
PAIRS4=$(four_pairs)
[ -z "$URXE_ERR" ] && step_end write_bw_4pairs
record "urxe=ib_write_bw_64k_4pairs $PAIRS4"

note "urxe: resident memory of 1000 RC QPs in one process"
qp_rss() {
  if [ -n "$URXE_ERR" ]; then echo "error=$URXE_ERR"; return; fi
  gcc -O2 -o "$OUT/qp_rss" "$BENCH/qp_rss/qp_rss.c" -libverbs >"$OUT/qp_rss.build.log" 2>&1 ||
    { echo "error=build failed$(said "$OUT/qp_rss.build.log")"; return; }
  local r
  r=$("${URXE_ENV[@]}" timeout 60 "$OUT/qp_rss" 1000 2>"$OUT/qp_rss.err")
  [ -n "$(kv "$r" rss_mib)" ] && echo "$r" || echo "error=qp_rss: ${r:-no output}$(said "$OUT/qp_rss.err")"
}
QPRSS=$(qp_rss)
record "urxe=qp_rss $QPRSS"

# --------------------------------------------------------------------------- table

# value of KEY in a result line, or "error: why"
value_or_error() {  # $1 result line, $2 key
  local e v
  e=$(kv "$1" error)
  if [ "${1#error=}" != "$1" ]; then e=${1#error=}; fi   # urxe lines are "error=<free text>"
  if [ -n "$e" ]; then e=${e//|//}; echo "error: ${e//_/ }"; return; fi
  v=$(num "$(kv "$1" "$2")")
  if [ -n "$v" ]; then echo "$v"; else echo "error: no $2 in result"; fi
}
fmt() { if [ -n "$(num "$1")" ]; then awk -v x="$1" -v d="$2" 'BEGIN { printf "%.*f", d, x }'; else echo "$1"; fi; }

TABLE=$OUT/table.md
BARS_FAILED=0
URXE_ERRS=0
# row METRIC URXE_LINE URXE_KEY CEILING_LABEL CEILING_LINE CEILING_KEY DECIMALS BAR
#   BAR: ">=0.5" or "<=3" (ratio urxe/ceiling against the bar of issue #40), or "" (no bar)
row() {
  local u c r verdict bar=$8 bar_txt=-
  u=$(value_or_error "$2" "$3")
  c=$(value_or_error "$5" "$6")
  r=-
  if [ -n "$(num "$u")" ] && [ -n "$(num "$c")" ]; then r=$(ratio "$u" "$c"); fi
  verdict=-
  case $bar in
    ">="*) bar_txt="≥ ${bar#>=}×" ;;
    "<="*) bar_txt="≤ ${bar#<=}×" ;;
  esac
  if [ -n "$bar" ]; then
    if [ "$r" = - ]; then
      verdict="n/a"
    elif awk -v r="$r" -v b="${bar#??}" -v op="${bar:0:2}" 'BEGIN { exit !(op == ">=" ? r >= b : r <= b) }'; then
      verdict=PASS
    else
      verdict=FAIL
      BARS_FAILED=$((BARS_FAILED + 1))
    fi
  fi
  echo "| $1 | $(fmt "$u" "$7") | $(fmt "$c" "$7") ($4) | $r | $bar_txt | $verdict |"
}
# limits -> one bullet: TCP loopback beside UDP GSO+GRO, both of this run, as a reference. Issue
# #40 sets no bar against TCP on this VM (its TCP loopback ran at 0.64-0.9x of UDP GSO+GRO): the
# bandwidth bars are against GSO+GRO, the limit any engine over UDP meets.
limits() {
  local tcp gso
  tcp=$(num "$(kv "$TCP" tcp_gbps)")
  gso=$(num "$(kv "$GSO" gbps)")
  if [ -z "$tcp" ] || [ -z "$gso" ]; then
    echo "- TCP loopback beside UDP GSO+GRO: n/a (TCP or GSO+GRO ceiling not measured)"
    return
  fi
  echo "- TCP loopback (a reference, no bar) moved $tcp Gb/s: $(ratio "$tcp" "$gso")× the UDP GSO+GRO ceiling ($gso Gb/s) of this run."
}
count_urxe_err() { local l; for l in "$@"; do [ "${l#error=}" != "$l" ] && URXE_ERRS=$((URXE_ERRS + 1)); done; }
count_urxe_err "${W64_RUNS[@]}" "${W4_RUNS[@]}" "${Q16_RUNS[@]}" "$SBW64" "$SLAT" "$WLAT" "$RLAT" "$RBW64K" "$PAIRS4" "$QPRSS" \
  "$ELAT" "$SLAT4K" "$RCPE64" "$RCPE4K" "$RCPDEF"
ERRORS=$((ERRORS + URXE_ERRS))

{
  echo "## urxe vs ceilings — $STARTED, commit $COMMIT"
  echo
  echo "Machine: $(nproc) CPUs, $(uname -r); $IDLE_NOTE. DUR=${DUR}s, ping-pong $PP round trips," \
    "latency $LAT_ITERS iterations; latency figures (urxe and ping-pong) are the median of $LAT_RUNS runs; TCP, GSO+GRO and ib_write_bw 64 KiB / 4 KiB / -q 16 the median of $BW_RUNS rounds that measure them back to back; placement: $([ "$PIN" = 1 ] && echo "sender/client CPU $TX_CPU, receiver/server CPU $RX_CPU" || echo unpinned)."
  [ -n "$BUSY_STEPS" ] && echo "Other load just before:$BUSY_STEPS — those figures are suspect; see raw.txt."
  echo
  echo "| metric | urxe | ceiling (what) | ratio urxe/ceiling | bar | result |"
  echo "|---|---|---|---|---|---|"
  row "ib_write_bw 64 KiB, Gb/s" "$WBW64K" bw_avg_gbps "TCP loopback, iperf3 1 stream" "$TCP" tcp_gbps 2 ""
  row "ib_write_bw 64 KiB, Gb/s" "$WBW64K" bw_avg_gbps "UDP GSO+GRO, RDMA payload" "$GSO" gbps 2 ">=0.85"
  row "ib_write_bw 4 KiB, Gb/s" "$WBW4K" bw_avg_gbps "TCP loopback, iperf3 1 stream" "$TCP" tcp_gbps 2 ""
  row "ib_write_bw 4 KiB, Gb/s" "$WBW4K" bw_avg_gbps "UDP GSO+GRO, RDMA payload" "$GSO" gbps 2 ">=0.6"
  row "ib_write_bw 64 KiB -q 16, Gb/s" "$WBWQ16" bw_avg_gbps "urxe ib_write_bw 64 KiB -q 1" "$WBW64K" bw_avg_gbps 2 ">=0.9"
  row "ib_write_bw 64 KiB, 4 pairs at once, Gb/s" "$PAIRS4" bw_avg_gbps "UDP GSO+GRO, RDMA payload" "$GSO" gbps 2 ""
  row "ib_read_bw 64 KiB, Gb/s" "$RBW64K" bw_avg_gbps "UDP GSO+GRO, RDMA payload" "$GSO" gbps 2 ""
  row "ib_send_bw 64 B, Mmsg/s" "$SBW64" msgrate_mpps "UDP 64 B GSO trains + GRO" "$GSO64" mmsg_per_s 3 ">=0.15"
  row "ib_send_bw 64 B, Mmsg/s" "$SBW64" msgrate_mpps "UDP 64 B sendmmsg/recvmmsg" "$MMSG" mmsg_per_s 3 ""
  row "ib_send_lat 2 B typical, µs" "$SLAT" lat_typical_us "UDP busy-poll ping-pong p50, one-way" "$PPONG" ow_p50_us 2 "<=1.6"
  row "ib_send_lat 2 B p99, µs" "$SLAT" lat_p99_us "UDP busy-poll ping-pong p99, one-way" "$PPONG" ow_p99_us 2 "<=2.5"
  row "ib_send_lat 2 B p99, µs" "$SLAT" lat_p99_us "the ping-pong computing $(kv "$PPWORK" work_ns) ns per one-way, p99" "$PPWORK" ow_p99_us 2 ""
  row "ib_send_lat 2 B typical, µs" "$SLAT" lat_typical_us "RC ping-pong p50, one-way (message + ACK per trip)" "$PPRC" ow_p50_us 2 ""
  row "ib_write_lat 2 B typical, µs" "$WLAT" lat_typical_us "UDP busy-poll ping-pong p50, one-way" "$PPONG" ow_p50_us 2 "<=1.6"
  row "ib_write_lat 2 B p99, µs" "$WLAT" lat_p99_us "UDP busy-poll ping-pong p99, one-way" "$PPONG" ow_p99_us 2 "<=2.5"
  row "ib_write_lat 2 B typical, µs" "$WLAT" lat_typical_us "RC ping-pong p50, one-way (message + ACK per trip)" "$PPRC" ow_p50_us 2 ""
  row "ib_read_lat 2 B typical, µs" "$RLAT" lat_typical_us "UDP busy-poll ping-pong p50, round trip" "$RTT" rtt_p50_us 2 ""
    row "ib_read_lat 2 B typical, µs" "$RLAT" lat_typical_us "urxe ib_send_lat 2 B typical" "$SLAT" lat_typical_us 2 ""
  row "ib_read_lat 2 B typical, µs" "$RLAT" lat_typical_us "UDP round trip to a server asleep in poll(), p50" "$PPBLK" rtt_p50_us 2 "<=1.2"
  row "ib_send_lat -e 2 B typical, µs" "$ELAT" lat_typical_us "UDP ping-pong, both asleep in recv(), one-way p50" "$PPSLEEP" ow_p50_us 2 "<=1.2"
  row "ibv_rc_pingpong -e 64 B, µs per iteration" "$RCPE64" usec_per_iter "UDP ping-pong, both asleep in recv(), round trip p50" "$PPSLEEP_RTT" rtt_p50_us 2 "<=1.2"
  row "ibv_rc_pingpong -e 4 KiB, µs per iteration" "$RCPE4K" usec_per_iter "UDP ping-pong, both asleep in recv(), round trip p50" "$PPSLEEP_RTT" rtt_p50_us 2 "<=1.2"
  row "ibv_rc_pingpong defaults (4 KiB, polled), µs per iteration" "$RCPDEF" usec_per_iter "urxe ib_send_lat 4096 B typical" "$SLAT4K" lat_typical_us 2 "<=2.6"
  row "1000 RC QPs in one process, RSS MiB" "$QPRSS" rss_mib "the wave-2 limit, 64 MiB" "limit_mib=64" limit_mib 1 "<=1"
  [ -n "$URXE_HINT" ] && { echo; echo "$URXE_HINT"; }
  echo
  echo "References (no bar):"
  echo
  limits
  echo
  echo "Ceilings measured in this run:"
  echo
  echo "| ceiling | figure | detail |"
  echo "|---|---|---|"
  echo "| TCP loopback, iperf3, one stream | $(fmt "$(value_or_error "$TCP" tcp_gbps)" 2) Gb/s | receiver side; sender $(kv "$TCP" tcp_sender_gbps) Gb/s |"
  echo "| UDP GSO 15×4136 B + UDP_GRO receive | $(fmt "$(value_or_error "$GSO" gbps)" 2) Gb/s RDMA payload | $(kv "$GSO" udp_gbps) Gb/s UDP payload, $(kv "$GSO" seg_per_s) seg/s, loss $(kv "$GSO" loss_pct)% (rcvbuf errors $(kv "$GSO" udp_rcvbuf_errors)), intact super-packets $(kv "$GSO" intact_pct)% |"
  echo "| UDP 64 B, GSO trains ×64 + UDP_GRO | $(fmt "$(value_or_error "$GSO64" mmsg_per_s)" 3) Mmsg/s | $(kv "$GSO64" seg_per_s) msg/s, loss $(kv "$GSO64" loss_pct)%, intact trains $(kv "$GSO64" intact_pct)% |"
  echo "| UDP 64 B, sendmmsg/recvmmsg ×64 | $(fmt "$(value_or_error "$MMSG" mmsg_per_s)" 3) Mmsg/s | $(kv "$MMSG" msgs_per_s) msg/s, loss $(kv "$MMSG" loss_pct)% |"
  echo "| UDP 64 B ping-pong, server asleep in poll(), round trip | $(fmt "$(value_or_error "$PPBLK" rtt_p50_us)" 2) µs p50 | the client busy-polls; the server's thread is woken for every ping (ib_read_lat's passive responder) |"
  echo "| UDP 64 B ping-pong, both sides asleep in a blocking recv(), one-way | $(fmt "$(value_or_error "$PPSLEEP" ow_p50_us)" 2) µs p50 | round trip $(kv "$PPSLEEP" rtt_p50_us) µs, p99 $(kv "$PPSLEEP" ow_p99_us) µs one-way; each trip one wake-up of a sleeping thread (an event-driven program's limit) |"
  echo "| UDP 64 B ping-pong, busy-poll, one-way | $(fmt "$(value_or_error "$PPONG" ow_p50_us)" 2) µs p50 | p99 $(kv "$PPONG" ow_p99_us) µs, avg $(kv "$PPONG" ow_avg_us) µs, min $(kv "$PPONG" ow_min_us) µs, $(kv "$PPONG" measured) round trips, lost $(kv "$PPONG" lost) |"
  echo "| RC ping-pong, busy-poll, one-way: two 20-byte datagrams per trip (the message and the ACK of the peer's) as one GSO train into a UDP_GRO receiver, unconnected sockets | $(fmt "$(value_or_error "$PPRC" ow_p50_us)" 2) µs p50 | p99 $(kv "$PPRC" ow_p99_us) µs, $(kv "$PPRC" measured) round trips, lost $(kv "$PPRC" lost); what every one-way trip of ib_send_lat / ib_write_lat must move over UDP, before any RDMA work |"
  echo "| the same, each side computing $(kv "$PPWORK" work_ns) ns before it sends (trips as long as ib_send_lat's) | $(fmt "$(value_or_error "$PPWORK" ow_p50_us)" 2) µs p50 | p99 $(kv "$PPWORK" ow_p99_us) µs, $(kv "$PPWORK" measured) round trips, lost $(kv "$PPWORK" lost); how much tail the platform gives a trip that long |"
} >"$TABLE"

echo
cat "$TABLE"
echo
echo "raw: $RAW   table: $TABLE   logs: $OUT"
if [ "$ERRORS" -gt 0 ]; then
  echo "run.sh: $ERRORS figure(s) could not be measured ($URXE_ERRS of them urxe's)" >&2
  exit 1
fi
if [ "$STRICT" = 1 ] && [ "$BARS_FAILED" -gt 0 ]; then
  echo "run.sh: $BARS_FAILED first-bar check(s) failed" >&2
  exit 2
fi
exit 0
