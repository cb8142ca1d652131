#!/usr/bin/env bash
# The one test command (README, .ci/run): installs what it needs, checks the documents'
# shape, formatting and lints,
# builds the drop-in library, runs every test: unit, property, simulator, capture verifier,
# ABI, unmodified Debian binaries and our C programs over urxe, the benchmark script's
# self-check, rdma-core's own suite, and the interop matrix against the Linux kernel's rdma_rxe.
# Exits nonzero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export CARGO_TERM_COLOR=never
# Release builds of the `urxe` binary embed the two libraries (cli/build.rs, for `cargo install`);
# the tests use target/urxe/lib, so only the install step below builds the bundle.
export URXE_BUNDLE=0
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }

step "documents: no commit hash outside history files, README length, the unsafe table (scripts/check-docs.sh)"
bash scripts/check-docs.sh
step "the house: no import circle, no arrow back up the layers, no source file over 900 lines (scripts/house_check.py)"
python3 scripts/house_check.py --self-test >/dev/null || python3 scripts/house_check.py --self-test
python3 scripts/house_check.py
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
step "fuzz targets build"
(cd fuzz && cargo build --quiet)
step "build the drop-in libibverbs.so.1 (release)"
bash provider/build.sh --release
# The rdma_cm retry-budget test waits out the CM's 15 retries (98 s of kernel timers, no work):
# it runs beside the rest of cargo test (built first, so the two only run) and must pass; its
# log is printed when it is waited for. Stopped with the script if that stops first.
BG=()
trap 'for p in "${BG[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
REPORTS=target/urxe/reports
mkdir -p "$REPORTS"
waitfor() { # pid log what
  if wait "$1"; then tail -n "${4:-5}" "$2"; else cat "$2"; echo "FAILED: $3 (log $2)"; exit 1; fi
}
CM_RETRY=lost_reqs_end_in_unreachable_etimedout_after_the_cms_retries
step "cargo test (release: the application tests time real traffic); tests/faults_cm.rs $CM_RETRY beside it"
cargo test --release --workspace --no-run
cargo test --release --workspace --test faults_cm "$CM_RETRY" -- --exact >"$REPORTS/cm-retry.log" 2>&1 &
BG+=($!)
CM_RETRY_PID=$!
cargo test --release --workspace -- --skip "$CM_RETRY"
step "tests/faults_cm.rs $CM_RETRY (run beside cargo test)"
waitfor "$CM_RETRY_PID" "$REPORTS/cm-retry.log" "$CM_RETRY" 4
grep -q "test result: ok. 1 passed" "$REPORTS/cm-retry.log" || { echo "FAILED: $CM_RETRY did not run (renamed?)"; exit 1; }
step "the benchmark's own checks (bench/run.sh with stand-ins, the ceiling tool's tests, brief real ceilings)"
bash bench/selftest.sh
step "rdma-core's pyverbs test suite against urxe"
# The suite's huge-page tests (parent domain, ODP) need reserved 2 MiB pages: reserve 16
# (32 MiB) if fewer are there. Root only; the host's setting is raised, never lowered.
if [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/nr_hugepages ] && \
   [ "$(cat /proc/sys/vm/nr_hugepages)" -lt 16 ]; then
  echo 16 > /proc/sys/vm/nr_hugepages
  echo "reserved $(cat /proc/sys/vm/nr_hugepages) huge pages of 2 MiB for the suite"
fi
/usr/bin/python3 scripts/rdma_core_suite.py --lib target/urxe/lib \
  --out target/urxe/reports/rdma-core-suite.md --log target/urxe/reports/rdma-core-suite.log
step "programs we did not write: rdma-core 56, its pyverbs suite, perftest 25.01, fabtests 2.1 (tests/external)"
bash tests/external/run.sh -o target/urxe/reports
step "interoperability with the kernel's rdma_rxe (qemu VMs, both directions, 5% loss rows)"
IX_SKIP_BUILD=1 bash tests/interop/ci.sh -o target/interop/ci
step "one address, many processes: 4 urxe processes on 10.77.0.1 with kernel rxe at once, both directions"
bash tests/interop/group.sh -o target/interop/group
step "urxe conform: scripted RoCEv2 scenarios against urxe (second process) and kernel rxe (VM)"
bash tests/conform/run.sh self
bash tests/conform/run.sh rxe
step "install: cargo install into an empty prefix, the Debian package with apt, the CI recipe (tests/install/run.sh)"
env -u URXE_BUNDLE bash tests/install/run.sh all
step "done"
