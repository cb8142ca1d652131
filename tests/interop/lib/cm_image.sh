# tests/interop/lib/cm_image.sh — sourced by mcast.sh and rdmacm.sh: the VM image of setup.sh
# plus the kernel's rdma_cm (rdma_ucm and what it needs) and Debian's rdmacm-utils tools
# (CM_TOOLS) with their libraries, and iproute2's tc with netem, ifb and the u32 classifier
# (the guest delays incoming CM MADs where a case needs it: rdmacm.sh, the perftest rows), as a second initramfs archive appended to the image's (the
# kernel unpacks both), cached in $IX_RUN/cm-cache; setup.sh's image stays as it is.
#
# needs: BASE_CACHE (setup.sh's cache), IX_RUN, die, say; sets CM_CACHE.
CM_TOOLS="mckey rping ucmatose udaddy rstream riostream"
CM_CACHE=$IX_RUN/cm-cache

cm_image_build() {
  local kver deb work root ko rel f t
  kver=$(cat "$BASE_CACHE/kernel-version")
  deb=$(ls "$BASE_CACHE"/debs/linux-image-"$kver"_*.deb 2>/dev/null | head -n1)
  [ -n "$deb" ] || die "no kernel package for $kver in $BASE_CACHE/debs"
  work=$(mktemp -d); root=$work/root
  mkdir -p "$root/etc" "$work/k"
  dpkg-deb -x "$deb" "$work/k"
  depmod -b "$work/k" "$kver"
  gzip -dc "$BASE_CACHE/initrd.gz" | (cd "$work" && cpio -i --quiet --to-stdout etc/modules.order) >"$root/etc/modules.order"
  [ -s "$root/etc/modules.order" ] || die "the base image has no etc/modules.order"
  while read -r ko; do
    rel=${ko#"$work/k"/lib/modules/$kver/}
    grep -qxF "$rel" "$root/etc/modules.order" && continue
    mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"
    cp "$ko" "$root/lib/modules/$kver/$rel"
    echo "$rel" >>"$root/etc/modules.order"
  done < <(for m in rdma_ucm sch_netem sch_ingress cls_u32 act_mirred ifb; do
    modprobe -d "$work/k" -S "$kver" --show-depends "$m" | awk '$1=="insmod"{print $2}'
  done)
  grep -q rdma_ucm "$root/etc/modules.order" || die "rdma_ucm not found in $deb"
  # The tools and the libraries they load, Debian's (not urxe's: LD_LIBRARY_PATH is dropped).
  mkdir -p "$root/usr/bin"
  for t in $CM_TOOLS; do
    command -v "$t" >/dev/null || die "$t missing (rdmacm-utils)"
    for f in "$(readlink -f "$(command -v "$t")")" $(env -u LD_LIBRARY_PATH ldd "$(command -v "$t")" | grep -o '/[^ ]*' | sort -u); do
      mkdir -p "$root$(dirname "$f")"; cp -L "$f" "$root$f"
    done
    cp -L "$(command -v "$t")" "$root/usr/bin/$t"
  done
  # iproute2's tc as /usr/sbin/tc (busybox's has no netem; the guest's sh prefers its own applets,
  # so callers name the path).
  t=$(command -v tc) || die "tc missing (iproute2)"
  for f in $(env -u LD_LIBRARY_PATH ldd "$t" | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$root$(dirname "$f")"; cp -L "$f" "$root$f"
  done
  mkdir -p "$root/usr/sbin"; cp -L "$t" "$root/usr/sbin/tc"
  for m in sch_netem ifb act_mirred; do grep -q "/$m.ko" "$root/etc/modules.order" || die "$m not found in $deb"; done
  mkdir -p "$CM_CACHE"
  (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) | gzip -1 >"$work/extra.gz"
  cat "$BASE_CACHE/initrd.gz" "$work/extra.gz" >"$CM_CACHE/initrd.gz"
  for f in vmlinuz vmlinux kernel-version; do
    [ -e "$BASE_CACHE/$f" ] && ln -sf "$BASE_CACHE/$f" "$CM_CACHE/$f"
  done
  cm_image_stamp >"$CM_CACHE/stamp"
  say "image: modules $(sed 's/\.ko.*//;s,.*/,,' "$root/etc/modules.order" | tr '\n' ' '); tools $CM_TOOLS"
  rm -rf "$work"
}

cm_image_stamp() {
  sha256sum "$BASE_CACHE/initrd.gz" "${BASH_SOURCE[0]}" | cut -d' ' -f1
}

# Builds the image unless the cached one was built from the same inputs.
cm_image() {
  if [ "$(cat "$CM_CACHE/stamp" 2>/dev/null)" != "$(cm_image_stamp)" ] || [ ! -f "$CM_CACHE/initrd.gz" ]; then
    say "building the VM image with rdma_cm in $CM_CACHE"
    cm_image_build
  fi
}
