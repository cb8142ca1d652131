#!/usr/bin/python3
"""Runs rdma-core's own pyverbs test suite against a libibverbs.so.1 and classifies every result.

Debian ships the suite in /usr/share/doc/rdma-core/tests with some modules gzipped; it is copied
to a temporary directory, gunzipped and run with Debian's python (which has pyverbs) and
LD_LIBRARY_PATH pointing at the library under test.

The suite runs under `urxe run` in a private network namespace whose loopback is urxe's
address (127.0.0.1): the RDMA-CM tests find a device's IP as the first address of the
interface named in /sys/class/infiniband/<dev>/device/net/, which `urxe run`'s private view
provides (`lo`), and that address must be the device's. Where no network namespace can be made
(no root and no user namespaces), the suite runs as before without the view and the RDMA-CM
tests skip ("doesn't have net interface"); the report says so.

Every test ends up ok, skipped (with the suite's own reason), failed or errored. Tests of
modules specific to mlx5 or efa are "exempt": they are reported but do not decide the exit
status. The exit status is 0 only if no other test failed or errored, the run finished in
time, and the counts add up to the suite's own "Ran N tests" line.
"""

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

EXEMPT = re.compile(r"^tests\.(test_mlx5\w*|test_efa\w*)\.")
# urxe's address inside the private network namespace: the first address of its loopback.
NETNS_ADDR = "127.0.0.1"
HEAD = re.compile(r"^(test\w*) \((tests\.[\w.]+)\)")
STATUS = re.compile(r"(?: \.\.\. |^)(ok|FAIL|ERROR|expected failure|unexpected success|skipped (['\"])(.*)\2)$")


def parse(output):
    """Returns {test id: (status, reason)} from unittest -v output, and the Ran/summary line."""
    results = {}
    pending = None
    ran = None
    for line in output.splitlines():
        m = HEAD.match(line)
        if m:
            pending = m.group(2)
        s = STATUS.search(line)
        if s and pending:
            word = s.group(1)
            if word.startswith("skipped"):
                results[pending] = ("skipped", s.group(3))
            else:
                results[pending] = (word, "")
            pending = None
        r = re.match(r"^Ran (\d+) tests? in", line)
        if r:
            ran = int(r.group(1))
    return results, ran


def netns_wrapper(lib, urxe):
    """The command prefix that runs a program in a private network namespace (lo up, nothing
    else) under `urxe run --addr NETNS_ADDR`, or (None, why) if that cannot be done here."""
    if urxe is None:
        guess = os.path.normpath(os.path.join(lib, "..", "..", "release", "urxe"))
        urxe = guess if os.access(guess, os.X_OK) else shutil.which("urxe")
    if not urxe or not os.access(urxe, os.X_OK):
        return None, "no urxe binary (cargo build --release, or --urxe PATH)"
    if not shutil.which("unshare") or not shutil.which("ip"):
        return None, "unshare (util-linux) or ip (iproute2) missing"
    # Not root: a user namespace mapping us to root owns the network namespace.
    unshare = ["unshare", "--net"] + (["--map-root-user"] if os.geteuid() != 0 else []) + ["--"]
    wrap = unshare + ["/bin/sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                      urxe, "run", "--lib", lib, "--addr", NETNS_ADDR, "--"]
    try:
        probe = subprocess.run(wrap + ["/bin/sh", "-c", "ls /sys/class/infiniband/urxe0/device/net"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"no private network namespace with urxe's view here: {e}"
    if probe.returncode != 0 or probe.stdout.split() != ["lo"]:
        return None, "no private network namespace with urxe's view here: " + " ".join(probe.stdout.split())[:200]
    return wrap, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="directory holding libibverbs.so.1 to test")
    ap.add_argument("--dev", default="urxe0")
    ap.add_argument("--src", default="/usr/share/doc/rdma-core/tests")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds for the whole run")
    ap.add_argument("--out", help="write a markdown report here")
    ap.add_argument("--log", help="write the raw suite output here")
    ap.add_argument("extra", nargs="*", help="passed to run_tests.py (e.g. -k test_cq)")
    ap.add_argument("--urxe", help="the urxe binary (default: release/urxe beside the library's target dir)")
    ap.add_argument("--no-netns", action="store_true",
                    help="run on the host without urxe run's view (the RDMA-CM tests then skip)")
    a = ap.parse_args()

    lib = os.path.realpath(a.lib)
    if not os.path.isfile(os.path.join(lib, "libibverbs.so.1")):
        print(f"rdma-core suite: no libibverbs.so.1 in {lib}", file=sys.stderr)
        return 2
    if not os.path.isdir(a.src):
        print(f"rdma-core suite: {a.src} missing (install rdma-core)", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="urxe-rdma-core-tests.")
    try:
        tests = os.path.join(work, "tests")
        shutil.copytree(a.src, tests)
        for name in os.listdir(tests):
            if name.endswith(".gz"):
                p = os.path.join(tests, name)
                with gzip.open(p, "rb") as fi, open(p[:-3], "wb") as fo:
                    shutil.copyfileobj(fi, fo)
                os.unlink(p)
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        cmd = ["/usr/bin/python3", os.path.join(tests, "run_tests.py"), "--dev", a.dev, "-v"] + a.extra
        mode = "on the host, no sysfs view (RDMA-CM tests skip)"
        if not a.no_netns:
            wrap, why = netns_wrapper(lib, a.urxe)
            if wrap:
                cmd = wrap + cmd
                env.pop("URXE_ADDR", None)
                mode = f"in a private network namespace: urxe on lo {NETNS_ADDR}, device/net/lo from urxe run's view"
            else:
                mode += f": {why}"
        timed_out = False
        try:
            p = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=a.timeout, text=True, errors="replace")
            out, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc, timed_out = -1, True
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.log:
        with open(a.log, "w") as f:
            f.write(out)

    results, ran = parse(out)
    counts = {}
    for status, _ in results.values():
        counts[status] = counts.get(status, 0) + 1
    bad = sorted(t for t, (s, _) in results.items() if s in ("FAIL", "ERROR", "unexpected success") and not EXEMPT.match(t))
    exempt_bad = sorted(t for t, (s, _) in results.items() if s in ("FAIL", "ERROR") and EXEMPT.match(t))
    skips = sorted((t, r) for t, (s, r) in results.items() if s == "skipped")

    lines = []
    lines.append(f"rdma-core test suite against {lib} (device {a.dev}) {mode}")
    lines.append(f"ran {ran if ran is not None else '?'}; parsed {len(results)}: " +
                 ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    lines.append(f"failing outside mlx5/efa: {len(bad)}; failing mlx5/efa (exempt): {len(exempt_bad)}")
    for t in bad:
        lines.append(f"  FAILED {t}: {results[t][0]}")
    for t in exempt_bad:
        lines.append(f"  exempt {t}: {results[t][0]}")
    reasons = {}
    for t, r in skips:
        reasons.setdefault(r, []).append(t)
    lines.append(f"skipped: {len(skips)} ({len(reasons)} distinct reasons)")
    for r, ts in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(ts):3d} x {r}")
    if timed_out:
        lines.append(f"TIMED OUT after {a.timeout} s")
    if ran is not None and ran != len(results):
        lines.append(f"WARNING: suite says it ran {ran} tests but {len(results)} results were parsed")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write("```\n" + text + "\n```\n\n| test | result | reason |\n|---|---|---|\n")
            for t in sorted(results):
                s, r = results[t]
                f.write(f"| {t} | {s} | {r} |\n")
    ok = not bad and not timed_out and ran is not None and ran == len(results)
    print("rdma-core suite: " + ("PASS" if ok else "FAIL") + f" (rc {rc})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
