#!/usr/bin/env bash
# Downloads, builds and caches the programs of tests/external/run.sh: rdma-core 56.1 (its
# example programs and pyverbs suite), perftest 25.01 and libfabric 2.1.0 with fabtests.
#
#   tests/external/fetch-build.sh          prints the cache directory on its last line
#
# Sources come through apt from Debian trixie's source packages on the archive this machine
# already uses (a private apt configuration under the cache: the system's sources are not
# touched). Each file is checked against the SHA-256 of trixie's Sources index. The mirror does
# not serve every file of a source package (several .dsc and .debian.tar.xz answer 404): only
# the upstream tarballs are needed, and what 404'd is written to $CACHE/fetch.log.
#
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/urxe-external/<package>-<version>/ with a .built
# stamp; a second run does nothing but check the stamps. Nothing here is committed.
set -euo pipefail
CACHE=${URXE_EXTERNAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/urxe-external}
MIRROR=${URXE_EXTERNAL_MIRROR:-$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/\?$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
RC_VER=56.1 PT_VER=25.01.0+0.80 LF_VER=2.1.0
JOBS=${URXE_EXTERNAL_JOBS:-$(nproc)}
mkdir -p "$CACHE/dl"
log() { echo "fetch-build: $*" >&2; }

# Build dependencies (Debian 12 package names).
PKGS=(build-essential cmake ninja-build pkg-config libnl-3-dev libnl-route-3-dev libudev-dev
      libsystemd-dev cython3 python3-dev python3-pyverbs autoconf automake libtool xz-utils
      libpci-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# apt with a private trixie deb-src list, state and cache under $CACHE/apt.
APT="$CACHE/apt"
APTO=(-o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=$APT/sources.list.d"
      -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "APT::Sandbox::User=root")
apt_ready() {
  [ -f "$APT/.updated" ] && return 0
  mkdir -p "$APT/lists/partial" "$APT/sources.list.d" "$APT/cache/archives/partial"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie main" \
    > "$APT/sources.list"
  apt-get "${APTO[@]}" update -qq
  touch "$APT/.updated"
}

# fetch PACKAGE FILE-PATTERN: downloads the source package's files matching the pattern into
# $CACHE/dl, each checked against its SHA-256; logs every file the mirror refuses.
fetch() {
  local pkg=$1 want=$2 line uri name size hash got=0
  apt_ready
  while read -r line; do
    uri=$(echo "$line" | awk '{print $1}' | tr -d "'"); name=$(echo "$line" | awk '{print $2}')
    hash=$(echo "$line" | awk '{print $4}')
    case "$name" in $want) ;; *) continue ;; esac
    if [ -f "$CACHE/dl/$name" ]; then got=1; continue; fi
    if /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$uri" "$CACHE/dl/$name" "$hash" >/dev/null 2>&1; then
      echo "$(date -u +%FT%TZ) got $uri" >> "$CACHE/fetch.log"; got=1
    else
      echo "$(date -u +%FT%TZ) FAILED $uri" >> "$CACHE/fetch.log"; log "could not download $uri"
    fi
  done < <(apt-get "${APTO[@]}" source --print-uris "$pkg=$3" 2>/dev/null | grep "^'")
  # The files that are not needed are tried once too, so the log says what the mirror serves.
  [ "$got" = 1 ] || { log "no $want for $pkg $3"; exit 1; }
}
probe_rest() {
  local pkg=$1 ver=$2 line uri name
  [ -f "$CACHE/.probed-$pkg-$ver" ] && return 0
  while read -r line; do
    uri=$(echo "$line" | awk '{print $1}' | tr -d "'"); name=$(echo "$line" | awk '{print $2}')
    case "$name" in *.orig.tar.*) continue ;; esac
    if /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$uri" "$CACHE/dl/$name" >/dev/null 2>&1; then
      echo "$(date -u +%FT%TZ) got $uri" >> "$CACHE/fetch.log"
    else
      echo "$(date -u +%FT%TZ) 404 $uri (not needed)" >> "$CACHE/fetch.log"
    fi
  done < <(apt-get "${APTO[@]}" source --print-uris "$pkg=$ver" 2>/dev/null | grep "^'")
  touch "$CACHE/.probed-$pkg-$ver"
}

# --- rdma-core 56.1: libraries, example programs, pyverbs (build tree only, no install) ---
RC="$CACHE/rdma-core-$RC_VER"
if [ ! -f "$RC/.built" ]; then
  fetch rdma-core "rdma-core_*.orig.tar.gz" "$RC_VER-1"
  probe_rest rdma-core "$RC_VER-1"
  rm -rf "$RC" && mkdir -p "$RC"
  tar -xzf "$CACHE/dl/rdma-core_$RC_VER.orig.tar.gz" -C "$RC" --strip-components=1
  log "building rdma-core $RC_VER"
  # No RPATH: the programs must load whatever LD_LIBRARY_PATH names (urxe's libraries).
  # Debian's python3 (with cython3), not a python first on PATH: pyverbs is built for it.
  (set -e; cd "$RC"; mkdir -p build; cd build
   cmake -GNinja -DNO_MAN_PAGES=1 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_SKIP_RPATH=ON \
         -DPYTHON_EXECUTABLE=/usr/bin/python3 -DPython_EXECUTABLE=/usr/bin/python3 \
         .. >"$RC/cmake.log" 2>&1
   if grep -q "cython NOT found" "$RC/cmake.log"; then echo "cython3 not found: no pyverbs"; exit 1; fi
   ninja -j"$JOBS" >"$RC/build.log" 2>&1) || { log "rdma-core build failed: $RC/cmake.log $RC/build.log"; exit 1; }
  touch "$RC/.built"
fi

# --- perftest 25.01, against rdma-core 56's headers and libraries ---
PT="$CACHE/perftest-$PT_VER"
if [ ! -f "$PT/.built" ]; then
  fetch perftest "perftest_*.orig.tar.gz" "$PT_VER-1"
  probe_rest perftest "$PT_VER-1"
  rm -rf "$PT" && mkdir -p "$PT/src"
  tar -xzf "$CACHE/dl/perftest_$PT_VER.orig.tar.gz" -C "$PT/src" --strip-components=1
  log "building perftest $PT_VER"
  (cd "$PT/src" && { [ -x configure ] || ./autogen.sh; } >"$PT/build.log" 2>&1 &&
   ./configure --prefix="$PT/install" CPPFLAGS="-I$RC/build/include" LDFLAGS="-L$RC/build/lib" \
     >>"$PT/build.log" 2>&1 &&
   make -j"$JOBS" >>"$PT/build.log" 2>&1 && make install >>"$PT/build.log" 2>&1) ||
    { log "perftest build failed: $PT/build.log"; exit 1; }
  touch "$PT/.built"
fi

# --- libfabric 2.1.0 (verbs, rxm, rxd, tcp, udp, shm providers) and its fabtests ---
LF="$CACHE/libfabric-$LF_VER"
if [ ! -f "$LF/.built" ]; then
  fetch libfabric "libfabric_*.orig.tar.xz" "$LF_VER-1.1"
  probe_rest libfabric "$LF_VER-1.1"
  rm -rf "$LF" && mkdir -p "$LF/src"
  tar -xJf "$CACHE/dl/libfabric_$LF_VER.orig.tar.xz" -C "$LF/src" --strip-components=1
  log "building libfabric $LF_VER and fabtests"
  (cd "$LF/src" && { [ -x configure ] || ./autogen.sh; } >"$LF/build.log" 2>&1 &&
   ./configure --prefix="$LF/install" --enable-verbs="$RC/build" --enable-rxm --enable-rxd \
     --enable-tcp --enable-udp --enable-shm --disable-efa --disable-psm2 --disable-psm3 \
     --disable-usnic --disable-opx --disable-ucx --disable-lpp --disable-cxi --disable-sm2 \
     --disable-mrail --disable-perf --disable-sockets \
     >>"$LF/build.log" 2>&1 &&
   make -j"$JOBS" >>"$LF/build.log" 2>&1 && make install >>"$LF/build.log" 2>&1 &&
   cd fabtests && { [ -x configure ] || ./autogen.sh; } >>"$LF/build.log" 2>&1 &&
   ./configure --prefix="$LF/install" --with-libfabric="$LF/install" >>"$LF/build.log" 2>&1 &&
   make -j"$JOBS" >>"$LF/build.log" 2>&1 && make install >>"$LF/build.log" 2>&1) ||
    { log "libfabric build failed: $LF/build.log"; exit 1; }
  touch "$LF/.built"
fi
echo "$CACHE"
