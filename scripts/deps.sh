#!/usr/bin/env bash
# Installs the Debian packages urxe's build, demo and tests use. Idempotent; apt-get update first.
set -euo pipefail
PKGS=(gcc libc6-dev libibverbs-dev librdmacm-dev ibverbs-utils ibverbs-providers perftest rdmacm-utils rdma-core
      python3-pyverbs tshark tcpdump nftables iperf3 clang sockperf iproute2 valgrind
      ucx-utils openmpi-bin libopenmpi-dev util-linux iptables libnetfilter-queue-dev)
PKGS+=(libfabric-bin)  # fi_info, fi_pingpong (tests/libfabric.rs)
PKGS+=(fio librpma-dev qperf strace)  # fio rdma engine, librpma programs, qperf -cm1, strace (tests/rdmacm_programs.rs)
PKGS+=(iputils-ping)  # bench/congestion.sh resolves the neighbours before a run
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # tshark asks whether non-root users may capture; answer it up front.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
