#!/bin/bash
# tests/interop/lab.sh — the private network the interop VMs live on.
#
#   lab.sh up          netns $IX_NS with bridge br0 = 10.77.0.1/24 (MTU 9000); idempotent
#   lab.sh loss PCT    drop PCT% of RoCEv2 packets (UDP dport 4791) crossing br0, both
#                      directions; VM<->VM, VM->host and host->VM are all covered
#   lab.sh loss PCT spare-acks   the same, but RC ACK packets (BTH opcode 0x11) are never dropped
#   lab.sh loss 0      remove the loss rules
#   lab.sh drops       print how many packets the loss rules dropped so far
#   lab.sh down        stop our qemu/dumpcap processes (pidfiles, checked) and delete the netns
#   lab.sh status
# Env: IX_NS (urxe-ix), IX_RUN (/tmp/urxe-interop), IX_HOST_IP (10.77.0.1/24)
set -euo pipefail
NS=${IX_NS:-urxe-ix}
RUN=${IX_RUN:-/tmp/urxe-interop}
HOST_CIDR=${IX_HOST_IP:-10.77.0.1/24}
die() { printf 'lab: ERROR: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
mkdir -p "$RUN/pids"

ns_exists() { ip netns list | awk '{print $1}' | grep -qxF "$NS"; }

# Stop a process recorded in a pidfile, only if its command line still carries our tag.
stop_pidfile() {
  local pf=$1 pid i
  pid=$(cat "$pf" 2>/dev/null || true)
  if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "urxe-ix"; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    echo "lab: stopped $(basename "$pf" .pid) (pid $pid)"
  fi
  rm -f "$pf"
}

loss_rules() {  # $1 = percent, $2 = match that exempts packets ("" = none)
  local pct=$1 m=$2
  # One random draw per packet at the point where it is already captured on br0:
  #  - bridge forward: VM <-> VM frames (promiscuous br0 captures their local copy first)
  #  - bridge output:  host -> VM frames (br0's transmit tap has seen them)
  #  - inet input:     VM -> host packets (br0's receive tap has seen them)
  # TCP (the tools' out-of-band exchange on port 18515) is never touched.
  # @th,64,8 is the first byte after the 8-byte UDP header: the BTH opcode.
  cat <<NFT
table bridge urxe_ix_loss {
  chain ix_forward { type filter hook forward priority 0; policy accept;
    udp dport 4791 $m numgen random mod 100 < $pct counter drop; }
  chain ix_output { type filter hook output priority 0; policy accept;
    udp dport 4791 $m numgen random mod 100 < $pct counter drop; }
}
table inet urxe_ix_loss {
  chain ix_input { type filter hook input priority 0; policy accept;
    udp dport 4791 $m numgen random mod 100 < $pct counter drop; }
}
NFT
}

case ${1:-} in
up)
  exec 9>"$RUN/lab.lock"
  flock -w 30 9 || die "lab lock busy"
  if ! ns_exists; then
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" link add br0 type bridge stp_state 0 forward_delay 0
    ip -n "$NS" link set br0 mtu 9000
    ip -n "$NS" addr add "$HOST_CIDR" dev br0
    ip -n "$NS" link set br0 up
    ip netns exec "$NS" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  fi
  echo "lab: up (netns $NS, br0 $HOST_CIDR)" ;;
loss)
  pct=${2:?usage: lab.sh loss PCT [spare-acks]}
  spare=
  case ${3:-} in
    '') ;;
    spare-acks) spare='@th,64,8 != 0x11' ;;
    *) die "loss: unknown option '$3'" ;;
  esac
  [[ $pct =~ ^[0-9]+$ ]] && [ "$pct" -le 100 ] || die "loss PCT must be 0..100"
  ns_exists || die "netns $NS is not up"
  for fam in bridge inet; do
    ip netns exec "$NS" nft list table "$fam" urxe_ix_loss >/dev/null 2>&1 &&
      ip netns exec "$NS" nft delete table "$fam" urxe_ix_loss
  done
  if [ "$pct" -gt 0 ]; then
    loss_rules "$pct" "$spare" | ip netns exec "$NS" nft -f -
    echo "lab: ${pct}% random loss on udp/4791${spare:+ (RC ACKs spared)}"
  else
    echo "lab: no loss"
  fi ;;
drops)
  ns_exists || die "netns $NS is not up"
  ip netns exec "$NS" nft list ruleset 2>/dev/null |
    awk '/urxe_ix_loss/ {t=1} t && /counter packets/ {for (i=1;i<=NF;i++) if ($i=="packets") s+=$(i+1)} END {print s+0}' ;;
down)
  for pf in "$RUN"/pids/*.pid; do [ -e "$pf" ] && stop_pidfile "$pf"; done
  if ns_exists; then ip netns del "$NS"; echo "lab: deleted netns $NS"; fi ;;
status)
  if ns_exists; then
    ip -n "$NS" -br addr; ip -n "$NS" -br link
    ip netns exec "$NS" nft list ruleset
  else echo "lab: netns $NS absent"; fi
  for pf in "$RUN"/pids/*.pid; do [ -e "$pf" ] && echo "running: $(basename "$pf" .pid) pid $(cat "$pf")"; done
  true ;;
*) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
