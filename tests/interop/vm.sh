#!/bin/bash
# tests/interop/vm.sh — boot one rxe VM on the lab bridge, run a job in it, power off.
#
#   vm.sh NAME IP[/NN] 'SHELL COMMANDS'   run the commands in the guest (busybox sh, cwd =
#                                          the 9p share), print their output, exit with
#                                          their status (124: VM timed out, 98: the guest
#                                          never got ready = the command never ran, 99: no status)
#   vm.sh NAME IP[/NN]                     interactive serial console (debugging)
#
# The guest has rxe0 on eth0 (GID index 1 = ::ffff:IP), Debian's ibv_* / perftest tools
# and oob-retry. The host side of the 9p share is $IX_RUN/vm-NAME/share.
# Env: IX_VM_MTU (1500; 9000 gives RoCE active MTU 4096), IX_VM_TIMEOUT (180 s, whole VM),
#      IX_VM_MEM (384 MiB), IX_CACHE, IX_RUN, IX_NS
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IX_CACHE=${IX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/urxe-interop}
RUN=${IX_RUN:-/tmp/urxe-interop}
NS=${IX_NS:-urxe-ix}
die() { printf 'vm: ERROR: %s\n' "$*" >&2; exit 2; }
[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
NAME=$1 IP=$2; shift 2
[[ $NAME =~ ^[a-z0-9]{1,8}$ ]] || die "VM name must be 1-8 of [a-z0-9]"
[[ $IP == */* ]] || IP=$IP/24
[ -f "$IX_CACHE/initrd.gz" ] && [ -f "$IX_CACHE/vmlinuz" ] || die "no VM image in $IX_CACHE: run tests/interop/setup.sh"
KERNEL=$IX_CACHE/vmlinuz
[ -f "$IX_CACHE/vmlinux" ] && KERNEL=$IX_CACHE/vmlinux   # PVH entry: no self-decompression
MTU=${IX_VM_MTU:-1500}
LIMIT=${IX_VM_TIMEOUT:-180}
"$HERE/lab.sh" up >/dev/null

DIR=$RUN/vm-$NAME
SHARE=$DIR/share
PIDF=$RUN/pids/vm-$NAME.pid
TAP=ixt-$NAME
rm -rf "$SHARE"; mkdir -p "$SHARE"
rm -f "$DIR/serial.log"
[ $# -gt 0 ] && printf '%s\n' "$*" >"$SHARE/job.sh"

ip -n "$NS" link del "$TAP" 2>/dev/null || true
ip -n "$NS" tuntap add dev "$TAP" mode tap
cleanup() {
  local pid
  pid=$(cat "$PIDF" 2>/dev/null || true)
  if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "urxe-ix-$NAME"; then
    kill "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDF"
  ip -n "$NS" link del "$TAP" 2>/dev/null || true
}
trap cleanup EXIT
trap 'cat "$SHARE/job.out" 2>/dev/null || true; echo "vm $NAME: stopped by a signal"; exit 130' INT TERM
ip -n "$NS" link set "$TAP" mtu "$MTU" master br0 up

octets=${IP%/*}
MAC=$(printf '52:54:00:4d:00:%02x' "${octets##*.}")
CONSOLE="file:$DIR/serial.log"
[ $# -eq 0 ] && CONSOLE=mon:stdio
QEMU=(ip netns exec "$NS" qemu-system-x86_64 -name "urxe-ix-$NAME"
  -machine pc -accel tcg -cpu max -smp 1 -m "${IX_VM_MEM:-384}"
  -nodefaults -no-user-config -nographic -no-reboot -serial "$CONSOLE"
  -kernel "$KERNEL" -initrd "$IX_CACHE/initrd.gz"
  -append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off no_timer_check ixname=$NAME ixip=$IP ixmtu=$MTU"
  -netdev "tap,id=net0,ifname=$TAP,script=no,downscript=no"
  -device "virtio-net-pci,netdev=net0,mac=$MAC,romfile="
  -virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=share"
  -pidfile "$PIDF")
if [ $# -eq 0 ]; then "${QEMU[@]}"; exit 0; fi

# qemu runs in the background so that a TERM to vm.sh is handled at once (trap -> cleanup)
qrc=0
timeout -k 5 "$LIMIT" "${QEMU[@]}" </dev/null >"$DIR/qemu.log" 2>&1 &
wait $! || qrc=$?
cat "$SHARE/job.out" 2>/dev/null || true
if [ -f "$SHARE/job.rc" ]; then
  rc=$(cat "$SHARE/job.rc")
elif [ ! -f "$SHARE/ready" ]; then
  echo "vm $NAME: the guest never got ready (qemu rc $qrc); serial log tail:"
  tail -n 15 "$DIR/serial.log" 2>/dev/null || true
  rc=98
elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "vm $NAME: TIMEOUT after ${LIMIT}s; serial log tail:"; tail -n 15 "$DIR/serial.log" 2>/dev/null || true
  rc=124
else
  echo "vm $NAME: no exit status (qemu rc $qrc); qemu/serial log tail:"
  tail -n 5 "$DIR/qemu.log" 2>/dev/null || true; tail -n 15 "$DIR/serial.log" 2>/dev/null || true
  rc=99
fi
exit "$rc"
