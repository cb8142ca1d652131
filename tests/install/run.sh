#!/usr/bin/env bash
# The slow install checks of #43, run as root on Debian 12 (they install and remove a package):
#
#   bash tests/install/run.sh [cargo|deb|ci|all]      (default: all)
#
# cargo: `cargo install --path cli --locked --root EMPTY`, then EMPTY/bin/urxe runs an rping
#        server and client (`urxe run -- rping ...`) with PATH=/usr/bin:/bin, no
#        LD_LIBRARY_PATH, no URXE_* setting and an empty HOME: the binary's own copy of the
#        libraries is all it has.
# deb:   scripts/deb.sh builds the package, `apt-get install ./target/debian/urxe_*.deb`
#        installs it, `urxe run -- ibv_rc_pingpong` server + client pass, `apt-get purge urxe`
#        removes it, and the system's libibverbs1 / librdmacm1 files are byte for byte what
#        they were before (checksums of `dpkg -L`), still installed.
# ci:    scripts/ci-urxe.sh (docs/ci.md): `packages` and `install` as root, then `run` as uid
#        65534 with a HOME of its own: installing and running need no root.
# Each run happens in a network namespace of its own (cli-inst-<pid>). Prints
# "N passed, N failed" last; exit 0 only if everything passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
WHAT=${1:-all}
NS=cli-inst-$$
WORK=$(mktemp -d /tmp/urxe-install-XXXXXX)
PASS=0; FAIL=0
ok() { echo "PASS: $*"; PASS=$((PASS + 1)); }
bad() { echo "FAIL: $*"; FAIL=$((FAIL + 1)); }
cleanup() { ip netns del "$NS" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
ip netns add "$NS" && ip -n "$NS" link set lo up || { echo "cannot create network namespace $NS" >&2; exit 1; }
bash scripts/deps.sh

# pair NAME SERVER_CMD... :: CLIENT_CMD... : both in the namespace, bounded to 60 s; the
# server is given 1 s to listen. Each command runs under `env -i` with the minimal environment.
pair() {
  local name=$1; shift
  local srv=() cli=()
  while [ "$1" != :: ]; do srv+=("$1"); shift; done; shift
  cli=("$@")
  local base=(env -i PATH=/usr/bin:/bin HOME="$WORK/home" URXE_RUNTIME_DIR="$WORK/rt")
  mkdir -p "$WORK/home" "$WORK/rt"
  ip netns exec "$NS" timeout 60 "${base[@]}" "${srv[@]}" > "$WORK/$name.srv" 2>&1 &
  local spid=$!
  sleep 1
  ip netns exec "$NS" timeout 60 "${base[@]}" "${cli[@]}" > "$WORK/$name.cli" 2>&1
  local crc=$?
  wait "$spid"; local src=$?
  echo "--- $name server (exit $src):"; tail -n 4 "$WORK/$name.srv"
  echo "--- $name client (exit $crc):"; tail -n 4 "$WORK/$name.cli"
  [ "$src" = 0 ] && [ "$crc" = 0 ]
}

if [ "$WHAT" = cargo ] || [ "$WHAT" = all ]; then
  EMPTY=$WORK/prefix
  t0=$(date +%s)
  if cargo install --path cli --locked --root "$EMPTY" >"$WORK/cargo-install.log" 2>&1; then
    ok "cargo install --path cli --root EMPTY ($(( $(date +%s) - t0 )) s): $(ls "$EMPTY/bin")"
  else
    tail -n 20 "$WORK/cargo-install.log"; bad "cargo install --path cli"
  fi
  [ -z "$(ls "$EMPTY" | grep -v '^bin$\|^\.crates')" ] && ok "the prefix holds only bin/ (and cargo's records)" || bad "prefix: $(ls -A "$EMPTY")"
  if pair rping "$EMPTY/bin/urxe" run -- rping -s -v -C 10 :: "$EMPTY/bin/urxe" run -- rping -c -a 127.0.0.1 -v -V -C 10 \
     && grep -q "ping data" "$WORK/rping.cli"; then
    ok "EMPTY/bin/urxe run -- rping: server and client, 10 verified pings, nothing else set"
  else
    bad "urxe run -- rping from the cargo-installed urxe"
  fi
  ls "$WORK/home/.cache/urxe/"*/libibverbs.so.1 >/dev/null 2>&1 && ok "the libraries came from the binary's own copy (unpacked into HOME/.cache/urxe)" \
    || bad "no unpacked copy in $WORK/home/.cache/urxe"
fi

if [ "$WHAT" = deb ] || [ "$WHAT" = all ]; then
  sums() { for p in libibverbs1 librdmacm1 ibverbs-providers; do dpkg -L "$p" 2>/dev/null; done | sort -u | while read -r f; do [ -f "$f" ] && md5sum "$f"; done; }
  sums > "$WORK/before.md5"
  t0=$(date +%s)
  DEB=$(bash scripts/deb.sh | tail -n 1)
  if [ -f "$DEB" ]; then ok "scripts/deb.sh built $(basename "$DEB") ($(( $(date +%s) - t0 )) s)"; else bad "scripts/deb.sh: no package"; fi
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$DEB" >"$WORK/apt.log" 2>&1; then ok "apt-get install ./$(basename "$DEB")"; else tail "$WORK/apt.log"; bad "apt-get install"; fi
  [ -x /usr/bin/urxe ] && [ -f /usr/lib/urxe/libibverbs.so.1 ] && [ -f /usr/share/man/man1/urxe.1.gz ] \
    && ok "/usr/bin/urxe, /usr/lib/urxe/libibverbs.so.1, man page urxe.1" || bad "package files missing"
  ldconfig -p | grep -q /usr/lib/urxe && bad "/usr/lib/urxe is on the loader's path" || ok "/usr/lib/urxe is not on the loader's path"
  if pair pingpong /usr/bin/urxe run -- ibv_rc_pingpong -g 1 -n 100 :: /usr/bin/urxe run -- ibv_rc_pingpong -g 1 -n 100 127.0.0.1 \
     && grep -q "100 iters" "$WORK/pingpong.cli"; then
    ok "urxe run -- ibv_rc_pingpong server + client (100 iters) right after apt install"
  else
    bad "urxe run -- ibv_rc_pingpong after apt install"
  fi
  ip netns exec "$NS" env -i PATH=/usr/bin:/bin urxe doctor > "$WORK/doctor.txt"
  grep -q '^\[ok\] urxe libraries: /usr/bin/../lib/urxe' "$WORK/doctor.txt" \
    && ok "urxe doctor: the libraries beside /usr/bin/urxe" || bad "urxe doctor does not find /usr/lib/urxe"
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq urxe >/dev/null 2>&1 && ok "apt-get purge urxe" || bad "apt-get purge urxe"
  [ ! -e /usr/bin/urxe ] && [ ! -e /usr/lib/urxe ] && ok "nothing of urxe left in /usr" || bad "urxe files left"
  sums > "$WORK/after.md5"
  if [ -s "$WORK/before.md5" ] && cmp -s "$WORK/before.md5" "$WORK/after.md5" \
     && dpkg-query -W -f='${Status}\n' libibverbs1 librdmacm1 | grep -vq 'ok installed' ; then
    bad "rdma-core packages changed state"
  elif [ -s "$WORK/before.md5" ] && cmp -s "$WORK/before.md5" "$WORK/after.md5"; then
    ok "rdma-core untouched: $(wc -l < "$WORK/after.md5") files of libibverbs1/librdmacm1/ibverbs-providers identical, still installed"
  else
    bad "rdma-core files changed"; diff "$WORK/before.md5" "$WORK/after.md5" | head
  fi
fi
if [ "$WHAT" = ci ] || [ "$WHAT" = all ]; then
  CIP=$WORK/ci-prefix
  mkdir -p "$WORK/ci-home" && chown 65534:65534 "$WORK/ci-home" && chmod 755 "$WORK"
  if bash scripts/ci-urxe.sh packages >/dev/null && URXE_PREFIX=$CIP bash scripts/ci-urxe.sh install >"$WORK/ci-install.log" 2>&1; then
    ok "scripts/ci-urxe.sh packages + install"
  else
    tail "$WORK/ci-install.log"; bad "scripts/ci-urxe.sh install"
  fi
  if ip netns exec "$NS" timeout 120 setpriv --reuid=65534 --regid=65534 --clear-groups \
       env -i PATH=/usr/bin:/bin HOME="$WORK/ci-home" URXE_PREFIX="$CIP" bash scripts/ci-urxe.sh run >"$WORK/ci-run.log" 2>&1 \
     && grep -q "ibv_rc_pingpong over urxe passed" "$WORK/ci-run.log"; then
    ok "scripts/ci-urxe.sh run as uid 65534: $(grep -c iters "$WORK/ci-run.log") pingpong sides passed"
  else
    tail -n 20 "$WORK/ci-run.log"; bad "scripts/ci-urxe.sh run as uid 65534"
  fi
fi
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
