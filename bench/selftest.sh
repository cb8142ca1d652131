#!/usr/bin/env bash
# bench/selftest.sh - checks of the benchmark's own machinery, without an RDMA device or urxe:
#   1. parse_perftest.awk / parse_iperf3.awk against hand-written perftest reports and saved
#      iperf3 JSON in bench/testdata (each X.txt / X.json has its expected line in X.expect);
#   2. the ceiling tool's unit tests (cargo test), and that bench/insn/insn.c builds;
#   2c. bench/oneway.sh's timing shim builds, and its analysis of the ceiling tool's RC ping-pong
#      run under it gives a row per side (an empty result is an error);
#   3. run.sh end to end with stand-in perftest programs (small scripts that listen/connect on the
#      -p port like perftest and print the testdata reports): a figure is parsed into the table with
#      its ratio and verdict, a failing client and a hanging client become "error: ..." and the run
#      still ends, with exit status 1; the bandwidth figures come from three rounds. This part
#      also runs the real ceilings, briefly (DUR=1).
# Prints "N passed, M failed" last; exit status 0 only if nothing failed.
set -u
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TD=$BENCH/testdata
# build_ceiling, CEIL
source "$BENCH/common.sh"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# ---- 1. parsers
for f in "$TD"/*.txt; do
  got=$(awk -f "$BENCH/parse_perftest.awk" "$f")
  want=$(cat "${f%.txt}.expect")
  [ "$got" = "$want" ] && ok "parse_perftest $(basename "$f")" || bad "parse_perftest $(basename "$f"): got '$got' want '$want'"
done
for f in "$TD"/*.json; do
  got=$(awk -f "$BENCH/parse_iperf3.awk" "$f")
  want=$(cat "${f%.json}.expect")
  [ "$got" = "$want" ] && ok "parse_iperf3 $(basename "$f")" || bad "parse_iperf3 $(basename "$f"): got '$got' want '$want'"
done

# ---- 2. ceiling tool unit tests
if command -v cargo >/dev/null; then
  if out=$(timeout 900 cargo test --release --quiet --manifest-path "$BENCH/ceiling/Cargo.toml" \
    --target-dir "$BENCH/ceiling/target" 2>&1); then
    ok "ceiling cargo test"
  else
    bad "ceiling cargo test: $(tail -n 5 <<<"$out")"
  fi
else
  bad "ceiling cargo test: cargo not found"
fi

# ---- 2b. bench/instructions.sh's whole-process program builds (it runs over urxe there)
if out=$(gcc -O2 -Wall -Wextra -Werror -o /tmp/urxe-bench-insn.$$ "$BENCH/insn/insn.c" -libverbs 2>&1); then
  ok "bench/insn/insn.c builds without warnings"
else
  bad "bench/insn/insn.c: $(tail -n 3 <<<"$out")"
fi
rm -f /tmp/urxe-bench-insn.$$

# ---- 2d. the two-process ping-pong bench/hosts.sh runs between namespaces (here over
# loopback): plain and in an RC engine's trip shape (-r: two 20-byte segments per trip)
PPW=$(mktemp -d /tmp/urxe-bench-pair.XXXXXX)
if build_ceiling "$PPW/build.log"; then
  for shape in "" -r; do
    "$CEIL" pp-server 127.0.0.1:47931 -t 20 $shape >"$PPW/srv$shape.txt" 2>&1 &
    sleep 0.3
    line=$(timeout 30 "$CEIL" pp-client 127.0.0.1:47931 -n 2000 -t 15 $shape 2>&1)
    wait
    mode=pp_pair; [ -n "$shape" ] && mode=pp_pair_rc
    if [[ $line =~ ^mode=$mode\ trips=2000\ lost=0\ half_rtt_typical_us=[0-9]+\.[0-9]+ ]] &&
      grep -qE "^mode=pp_server echoed=3000( joined=3000)?$" "$PPW/srv$shape.txt" &&
      { [ -z "$shape" ] || grep -q "joined=3000" "$PPW/srv$shape.txt"; }; then
      ok "ceiling $mode: 2000 trips (and 1000 warm-up), none lost, each echoed once${shape:+, both segments of every trip in one read}"
    else
      bad "ceiling $mode: ${line:-nothing}; server: $(cat "$PPW/srv$shape.txt")"
    fi
  done
else
  bad "ceiling did not build: $(tail -n 3 "$PPW/build.log")"
fi
rm -rf "$PPW"

# ---- 2c. bench/oneway.sh's timing shim: builds without warnings; over the ceiling tool's RC
# ping-pong its analysis finds both sides' trips; an empty directory is an error
OW=$(mktemp -d /tmp/urxe-bench-oneway.XXXXXX)
if out=$(gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$OW/shim.so" "$BENCH/oneway/shim.c" -ldl 2>&1); then
  ok "bench/oneway/shim.c builds without warnings"
  mkdir -p "$OW/rc"
  # (2 ran the ceiling's tests; its binary is built here, as run.sh and oneway.sh build it.)
  if ! build_ceiling "$OW/ceiling-build.log"; then
    bad "bench/oneway: the ceiling tool did not build: $(tail -n 3 "$OW/ceiling-build.log")"
  elif ONEWAY_DIR=$OW/rc LD_PRELOAD=$OW/shim.so timeout 120 "$CEIL" -n 3000 -c 0,1 pingpong_rc >"$OW/rc.out" 2>&1 &&
    rows=$(python3 "$BENCH/oneway/analyze.py" "$OW/rc" "RC ping-pong") &&
    [ "$(grep -cE '^\| RC ping-pong, CPU [01] \(thread [0-9]+\.[0-9]+\) \| [0-9]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ / [0-9.]+ \|$' <<<"$rows")" = 2 ]; then
    ok "bench/oneway: the RC ping-pong under the shim gives a row per side"
  else
    bad "bench/oneway: RC ping-pong rows: ${rows:-none}; $(tail -n 2 "$OW/rc.out")"
  fi
  mkdir -p "$OW/empty"
  if rows=$(python3 "$BENCH/oneway/analyze.py" "$OW/empty" "none"); then
    bad "bench/oneway: an empty directory passed: $rows"
  elif grep -q '^| none | error: no thread with' <<<"$rows"; then
    ok "bench/oneway: an empty directory is an error row and exit 1"
  else
    bad "bench/oneway: an empty directory gave: $rows"
  fi
else
  bad "bench/oneway/shim.c: $(tail -n 3 <<<"$out")"
fi
rm -rf "$OW"

# ---- 3. run.sh with stand-in perftest programs
if ! command -v python3 >/dev/null; then
  bad "run.sh end to end: python3 (used by the stand-ins) not found"
else
  W=$(mktemp -d /tmp/urxe-bench-selftest.XXXXXX)
  mkdir -p "$W/bin" "$W/lib"
  : >"$W/lib/libibverbs.so.1"   # run.sh only checks that it exists; the stand-ins do not load it
  cat >"$W/bin/stub" <<EOF
#!/usr/bin/env bash
# stand-in for a perftest program: server = listen on -p and accept once; client = connect, print a report
tool=\$(basename "\$0") port= size= last=
while [ \$# -gt 0 ]; do
  case \$1 in -p) port=\$2; shift ;; -s) size=\$2; shift ;; esac
  last=\$1; shift
done
if [ "\$last" != 127.0.0.1 ]; then
  exec python3 -c 'import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.recv(1); print("server done")' "\$port"
fi
python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5).close()' "\$port" || exit 1
case \$tool-\$size in
  ib_write_bw-65536) cat "$TD/write_bw_64k_gbits.txt" ;;
  ib_write_bw-4096) echo " Couldn't post send: stand-in failure"; exit 1 ;;
  ib_send_bw-64) cat "$TD/send_bw_64_mib.txt" ;;
  ib_send_lat-2) cat "$TD/send_lat_2_slow.txt" ;;
  ib_write_lat-2) exec sleep 60 ;;
  *) echo "stand-in: unexpected \$tool -s \$size"; exit 1 ;;
esac
EOF
  chmod +x "$W/bin/stub"
  for t in ib_write_bw ib_send_bw ib_send_lat ib_write_lat; do ln -s stub "$W/bin/$t"; done
  t0=$(date +%s)
  out=$(DUR=1 PP=2000 LAT_ITERS=100 LAT_TMO=3 IDLE_WAIT=0 INSTALL=0 PERFTEST_DIR="$W/bin" \
    URXE_LIB_DIR="$W/lib" OUT="$W/out" timeout 120 "$BENCH/run.sh" 2>"$W/stderr")
  rc=$?
  took=$(($(date +%s) - t0))
  [ "$rc" = 1 ] && ok "run.sh exit status 1 when figures are missing" || bad "run.sh exit status $rc, want 1 (stderr: $(tail -n 3 "$W/stderr"))"
  [ "$took" -lt 90 ] && ok "run.sh ended in ${took}s" || bad "run.sh took ${took}s"
  chk() {  # $1 description, $2 fixed string that must be in the output
    grep -qF -- "$2" <<<"$out" && ok "$1" || bad "$1: no '$2' in run.sh output"
  }
  chk "write_bw 64 KiB figure in the table" "| ib_write_bw 64 KiB, Gb/s | 12.61 |"
  chk "send_bw 64 B message rate in the table" "| ib_send_bw 64 B, Mmsg/s | 0.344 |"
  chk "send_lat typical in the table" "| ib_send_lat 2 B typical, µs | 43.70 |"
  chk "send_lat p99 in the table" "| ib_send_lat 2 B p99, µs | 70.50 |"
  chk "failing client reported" "| ib_write_bw 4 KiB, Gb/s | error: client exit 1: Couldn't post send: stand-in failure"
  chk "hanging client reported" "| ib_write_lat 2 B typical, µs | error: timed out after 3s"
  row=$(grep -F "| ib_write_bw 64 KiB, Gb/s | 12.61 |" <<<"$out" | grep -F "UDP GSO+GRO")
  if [[ $row =~ \|\ ([0-9]+\.[0-9]+)\ \|\ ≥\ 0\.85×\ \|\ (PASS|FAIL)\ \| ]]; then
    ok "write_bw ratio ${BASH_REMATCH[1]} and verdict ${BASH_REMATCH[2]}"
  else
    bad "write_bw row has no ratio/verdict: $row"
  fi
  row=$(grep -F "| ib_write_bw 64 KiB, Gb/s | 12.61 |" <<<"$out" | grep -F "TCP loopback")
  [[ $row =~ \|\ [0-9]+\.[0-9]+\ \|\ -\ \|\ -\ \|$ ]] && ok "write_bw against TCP loopback (ratio, no bar)" || bad "write_bw row against TCP: ${row:-missing}"
  row=$(grep -F "| ib_send_lat 2 B typical, µs | 43.70 |" <<<"$out")
  [[ $row =~ \|\ [0-9]+\.[0-9]+\ \|\ ≤\ 1\.6×\ \|\ (PASS|FAIL)\ \| ]] && ok "send_lat ratio and verdict" || bad "send_lat row: $row"
  # The ping-pong computing for urxe's extra time per one-way: the stand-in's 43.70 µs typical
  # less the ping-pong's p50, so a positive amount of work, and a p99 row against it. (The
  # stand-in's report is send_lat_2.txt slowed tenfold: with its 4.37 µs, a real ping-pong
  # as slow as 4.37 µs, as on a busy CI machine, left no work to measure and failed here.)
  work=$(grep -o "^mode=pingpong .*work_ns=[1-9][0-9]*" "$W/out/raw.txt" | head -n 1 | sed 's/.*work_ns=//')
  [ -n "$work" ] && ok "ping-pong with $work ns of work per one-way measured" || bad "no ping-pong with work in raw.txt"
  row=$(grep -F "| ib_send_lat 2 B p99, µs | 70.50 | " <<<"$out" | grep -F "the ping-pong computing ${work:-?} ns per one-way, p99")
  [[ $row =~ \|\ [0-9]+\.[0-9]+\ \|\ -\ \|\ -\ \|$ ]] && ok "send_lat p99 against the ping-pong with work (ratio, no bar)" || bad "send_lat p99 row against the ping-pong with work: ${row:-missing}"
  row=$(grep -F "| ib_send_lat 2 B typical, µs | 43.70 |" <<<"$out" | grep -F "RC ping-pong p50")
  [[ $row =~ \|\ [0-9]+\.[0-9]+\ \|\ -\ \|\ -\ \|$ ]] && ok "send_lat against the RC ping-pong (ratio, no bar)" || bad "send_lat row against the RC ping-pong: ${row:-missing}"
  grep -q "^mode=pingpong_rc .*msg_bytes=40 segs=2 " "$W/out/raw.txt" && ok "RC ping-pong trips are two 20-byte segments" || bad "RC ping-pong: $(grep "mode=pingpong_rc" "$W/out/raw.txt" | head -n 1)"
  # TCP loopback beside the GSO+GRO ceiling, a reference without a bar (issue #40).
  tcp=$(sed -n -E 's/^\| TCP loopback, iperf3, one stream \| ([0-9.]+) Gb\/s.*/\1/p' <<<"$out")
  gso=$(sed -n -E 's/^\| UDP GSO 15×4136 B \+ UDP_GRO receive \| ([0-9.]+) Gb\/s.*/\1/p' <<<"$out")
  want=$(awk -v t="${tcp:-0}" -v g="${gso:-0}" 'BEGIN { printf "moved %s Gb/s: %.2f× the UDP GSO+GRO ceiling (%s Gb/s)", t, (g > 0 ? t / g : 0), g }')
  [ -n "$tcp" ] && [ -n "$gso" ] && chk "TCP loopback set beside the GSO+GRO ceiling" "$want" || bad "no TCP ($tcp) or GSO+GRO ($gso) figure in the ceilings table"
  for m in gso mmsg64 pingpong pingpong_rc iperf3_tcp; do
    grep -q "^mode=$m .*" "$W/out/raw.txt" && ! grep -q "^mode=$m .*error=" "$W/out/raw.txt" &&
      ok "ceiling $m measured" || bad "ceiling $m: $(grep "mode=$m\|error" "$W/out/raw.txt" | head -n 2)"
  done
  # BW_RUNS (default 3) rounds of the bandwidth figures, each ceiling and urxe run recorded,
  # and the medians the table uses.
  n=$(grep -c "^mode=gso .*round=[123]$" "$W/out/raw.txt")
  m=$(grep -c "^round [123]: urxe=ib_write_bw_64k " "$W/out/raw.txt")
  [ "$n" = 3 ] && [ "$m" = 3 ] && grep -q "^median of 3: urxe=ib_write_bw_64k .*bw_avg_gbps=12.61" "$W/out/raw.txt" &&
    ok "three bandwidth rounds and their medians" || bad "bandwidth rounds: $n GSO runs, $m urxe 64 KiB runs in raw.txt"
  if pgrep -f "$W/bin" >/dev/null; then bad "stand-in processes left running"; else ok "no stand-in left running"; fi
  printf "%s\n" "$out" >"$W/out/stdout.txt"
  if [ "$fail" = 0 ] && [ "${KEEP:-0}" != 1 ]; then rm -rf "$W"; else echo "kept $W for inspection"; fi
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
