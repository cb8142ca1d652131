#!/usr/bin/env python3
"""bench/oneway/analyze.py DIR LABEL - where a busy-polling ping-pong's one-way trips go, from
the per-thread files bench/oneway/shim.c wrote into DIR (each thread labelled with the CPU of
its first socket call).

For each thread that made at least MIN_TRIPS sends, a trip on that thread is: a receive call
that returned data, then the thread's own time until it enters its next send call, then that
send call (which on loopback also carries the datagram into the peer's socket). Printed per
such thread, as one markdown table row: trips, and the medians of the receive call that found
data, of the own time, of the send call, and of an empty receive call (a busy poller's look
that found nothing) with the period between two such looks (their cost plus the poll loop's
own between them). The first and last 10 % of a thread's records are left out (start-up,
teardown).
"""
import glob
import os
import statistics
import struct
import sys

MAGIC = 0x5941574F454E4F31
KIND_SEND, KIND_RECV = 1, 2
MIN_TRIPS = 1000
HEADER = 32


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER:
        return None
    magic, ticks_per_us, count, cpu = struct.unpack_from("<QdQq", data, 0)
    if magic != MAGIC or ticks_per_us <= 0:
        return None
    n = min(count, (len(data) - HEADER) // 24)
    recs = [struct.unpack_from("<QQii", data, HEADER + 24 * i) for i in range(n)]
    return cpu, ticks_per_us, recs


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def analyze(ticks_per_us, recs):
    cut = len(recs) // 10
    recs = recs[cut:len(recs) - cut]
    us = lambda t: t / ticks_per_us
    recv_ok, recv_empty, sends, own, period = [], [], [], [], []
    pending = None  # return time of the last receive that found data
    prev_empty_start = None
    for t0, t1, kind, ret in recs:
        if kind == KIND_RECV:
            if ret > 0:
                recv_ok.append(us(t1 - t0))
                pending = t1
                prev_empty_start = None
            else:
                recv_empty.append(us(t1 - t0))
                if prev_empty_start is not None:
                    period.append(us(t0 - prev_empty_start))
                prev_empty_start = t0
        elif kind == KIND_SEND:
            sends.append(us(t1 - t0))
            if pending is not None:
                own.append(us(t0 - pending))
                pending = None
            prev_empty_start = None
    return {
        "sends": len(sends),
        "trips": len(own),
        "recv": med(recv_ok),
        "own": med(own),
        "send": med(sends),
        "empty": med(recv_empty),
        "period": med(period),
    }


def main():
    if len(sys.argv) != 3:
        print("usage: analyze.py DIR LABEL", file=sys.stderr)
        return 2
    d, label = sys.argv[1], sys.argv[2]
    rows = 0
    for path in sorted(glob.glob(os.path.join(d, "*.bin"))):
        got = load(path)
        if got is None:
            continue
        cpu, ticks_per_us, recs = got
        r = analyze(ticks_per_us, recs)
        if r["sends"] < MIN_TRIPS or r["trips"] < MIN_TRIPS:
            continue
        rows += 1
        tid = os.path.basename(path)[: -len(".bin")]
        total = r["recv"] + r["own"] + r["send"]
        print(
            f"| {label}, CPU {cpu} (thread {tid}) | {r['trips']} | {r['recv']:.2f} | {r['own']:.2f} | "
            f"{r['send']:.2f} | {total:.2f} | {r['empty']:.2f} / {r['period']:.2f} |"
        )
    if rows == 0:
        print(f"| {label} | error: no thread with {MIN_TRIPS} trips in {d} | | | | | |")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
