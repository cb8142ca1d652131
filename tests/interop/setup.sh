#!/bin/bash
# tests/interop/setup.sh — prepare everything the rxe interop matrix needs on a fresh
# Debian 12 (amd64, root): host packages, and a tiny VM image (Debian's own kernel +
# a busybox initramfs carrying the kernel rdma_rxe modules and Debian's unmodified
# rdma-core / perftest binaries).
#
# Output (cached; re-running only rebuilds what is stale):
#   $IX_CACHE/vmlinuz (+ vmlinux: the same kernel uncompressed, PVH entry)
#   $IX_CACHE/initrd.gz  $IX_CACHE/kernel-version
# IX_CACHE defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/urxe-interop.
# Env: IX_SKIP_APT=1 skips apt-get update/install (offline re-runs).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IX_CACHE=${IX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/urxe-interop}
say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (apt, netns, tap devices)"
[ "$(dpkg --print-architecture)" = amd64 ] || die "amd64 host required"
mkdir -p "$IX_CACHE/debs"

# ---------------------------------------------------------------- host packages
HOST_PKGS=(qemu-system-x86 busybox-static cpio kmod iproute2 ibverbs-providers
           ibverbs-utils perftest rdmacm-utils tshark nftables python3 gzip util-linux)
if [ "${IX_SKIP_APT:-0}" != 1 ]; then
  say "apt-get update"
  apt-get update -qq
  say "installing: ${HOST_PKGS[*]}"
  # tshark asks whether non-root users may capture: answer no, non-interactively
  echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${HOST_PKGS[@]}" >/dev/null
fi
for t in qemu-system-x86_64 busybox cpio depmod modprobe ip nft dumpcap tshark python3 \
         ibv_rc_pingpong ib_send_bw; do
  command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || [ -x "/sbin/$t" ] || die "missing tool: $t"
done

# ---------------------------------------------------------------- kernel package
# The kernel linux-image-amd64 points at (bookworm: 6.1.x), fetched with apt-get download.
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
[ -n "$kpkg" ] || die "cannot resolve linux-image-amd64 (apt-get update needed?)"
kver=${kpkg#linux-image-}
deb=$(find "$IX_CACHE/debs" -maxdepth 1 -name "${kpkg}_*.deb" | sort | tail -n1)
if [ -z "$deb" ]; then
  say "downloading $kpkg"
  (cd "$IX_CACHE/debs" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >/dev/null)
  deb=$(find "$IX_CACHE/debs" -maxdepth 1 -name "${kpkg}_*.deb" | sort | tail -n1)
  [ -n "$deb" ] || die "apt-get download $kpkg produced no .deb"
fi

# ---------------------------------------------------------------- staleness
# Rebuild when the kernel .deb, the guest scripts, this script or the host binaries change.
GUEST_BINS=(ibv_devinfo ibv_devices ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong
            ibv_srq_pingpong ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_write_lat
            ib_read_lat ib_send_lat ib_atomic_lat rdma)
stamp_src() {
  sha256sum "$deb" "$0" "$HERE"/guest/* "$HERE"/lib/pvh_vmlinux.py | cut -d' ' -f1
  for b in "${GUEST_BINS[@]}"; do p=$(command -v "$b"); stat -c '%n %s %Y' "$(readlink -f "$p")"; done
  dpkg-query -W -f='${Package} ${Version}\n' ibverbs-providers libibverbs1 perftest busybox-static 2>/dev/null
}
want=$(stamp_src | sha256sum | cut -d' ' -f1)
if [ -f "$IX_CACHE/initrd.gz" ] && [ -f "$IX_CACHE/vmlinuz" ] && \
   [ "$(cat "$IX_CACHE/stamp" 2>/dev/null)" = "$want" ]; then
  say "up to date: $IX_CACHE (kernel $(cat "$IX_CACHE/kernel-version"))"
  exit 0
fi

WORK=$(mktemp -d /tmp/urxe-interop-setup.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
say "unpacking $(basename "$deb")"
dpkg-deb -x "$deb" "$WORK/k"
[ -f "$WORK/k/boot/vmlinuz-$kver" ] || die "no vmlinuz-$kver in $deb"
depmod -b "$WORK/k" "$kver"

ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,root,share,lib/modules/"$kver"}
ln -s lib "$ROOT/lib64"

# ---------------------------------------------------------------- modules
# modprobe --show-depends gives the dependency closure in load order ("insmod PATH").
MODS=(crc32_generic virtio_pci virtio_net 9pnet_virtio 9p rdma_rxe ib_uverbs)
: >"$ROOT/etc/modules.order"
for m in "${MODS[@]}"; do
  modprobe -d "$WORK/k" -S "$kver" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}' |
  while read -r ko; do
    rel=${ko#"$WORK/k"/lib/modules/$kver/}
    grep -qxF "$rel" "$ROOT/etc/modules.order" && continue
    mkdir -p "$ROOT/lib/modules/$kver/$(dirname "$rel")"
    cp "$ko" "$ROOT/lib/modules/$kver/$rel"
    echo "$rel" >>"$ROOT/etc/modules.order"
  done
done
grep -q 'rdma_rxe' "$ROOT/etc/modules.order" || die "rdma_rxe module not found in $kpkg"
say "modules: $(xargs -n1 basename <"$ROOT/etc/modules.order" | sed 's/\.ko.*//' | tr '\n' ' ')"

# ---------------------------------------------------------------- userspace
install_host_file() {  # same path inside the image, links resolved
  local src=$1
  mkdir -p "$ROOT$(dirname "$src")"
  cp -L "$src" "$ROOT$src"
}
install_elf() {        # a binary or library plus every shared library it loads
  local f=$1 dep
  install_host_file "$f"
  while read -r dep; do
    [ -e "$ROOT$dep" ] || install_host_file "$dep"
  done < <(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | sort -u)
}
cp /bin/busybox "$ROOT/bin/busybox"
for applet in $("$ROOT/bin/busybox" --list); do
  [ -e "$ROOT/bin/$applet" ] || ln -s busybox "$ROOT/bin/$applet"
done
for b in "${GUEST_BINS[@]}"; do install_elf "$(readlink -f "$(command -v "$b")")"; done
# install under the PATH name too (readlink -f may resolve to another directory)
for b in "${GUEST_BINS[@]}"; do
  p=$(command -v "$b"); [ -e "$ROOT$p" ] || { mkdir -p "$ROOT$(dirname "$p")"; cp -L "$p" "$ROOT$p"; }
done
prov=$(find /usr/lib/x86_64-linux-gnu/libibverbs -name 'librxe-rdmav*.so' | head -n1)
[ -n "$prov" ] || die "rxe provider (ibverbs-providers) not installed"
install_elf "$prov"
install_host_file /etc/libibverbs.d/rxe.driver
for l in /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libgcc_s.so.1; do
  [ -e "$l" ] && { install_host_file "$l"; break; }
done
[ -d /etc/libnl-3 ] && cp -a /etc/libnl-3 "$ROOT/etc/"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"
printf '127.0.0.1 localhost\n' >"$ROOT/etc/hosts"
install -m 0755 "$HERE/guest/init" "$ROOT/init"
install -m 0755 "$HERE/guest/oob-retry" "$ROOT/bin/oob-retry"

(cd "$ROOT" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$IX_CACHE/initrd.gz.new"
cp "$WORK/k/boot/vmlinuz-$kver" "$IX_CACHE/vmlinuz"
# Prefer booting the uncompressed kernel through its PVH entry (much faster under TCG).
rm -f "$IX_CACHE/vmlinux"
python3 "$HERE/lib/pvh_vmlinux.py" "$IX_CACHE/vmlinuz" "$IX_CACHE/vmlinux.new" >&2 &&
  mv "$IX_CACHE/vmlinux.new" "$IX_CACHE/vmlinux" || say "no PVH kernel: VMs boot the bzImage (slower)"
mv "$IX_CACHE/initrd.gz.new" "$IX_CACHE/initrd.gz"
echo "$kver" >"$IX_CACHE/kernel-version"
echo "$want" >"$IX_CACHE/stamp"
say "built $IX_CACHE/initrd.gz ($(du -h "$IX_CACHE/initrd.gz" | cut -f1)) + vmlinuz $kver"
