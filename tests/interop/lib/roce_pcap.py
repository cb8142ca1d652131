#!/usr/bin/env python3
"""usage: roce_pcap.py [--quiet] FILE.pcap [...]

Independent (stdlib-only) verifier for RoCEv2 captures made by the interop matrix.
For every UDP/4791 packet it checks:
  * IPv4 header: version, IHL, total length, header checksum, DF set (RoCEv2 must not
    fragment); IPv6 payload length
  * UDP length agrees with the IP length
  * BTH: TVer 0, opcode defined for its transport, headers + pad + ICRC fit the packet
  * ICRC: CRC-32 over 8 x 0xff, the IP header with its variant fields (IPv4 TOS, TTL,
    checksum; IPv6 traffic class, flow label, hop limit) set to ones, the UDP header with
    checksum 0xffff, the BTH with byte 4 = 0xff and the rest up to the ICRC (little-endian)
and counts, per capture:
  packets, bad packets, retransmitted request packets (a request whose PSN does not
  advance its flow = source, destination, destination QP), NAKs, RNR NAKs, and
  retransmissions whose payload differs from the first transmission (counted as bad).
Last line per file: "FILE: packets=N bad=N retrans=N naks=N rnr=N" ; exit 1 if any bad.
"""
import struct
import sys
import zlib
from collections import Counter

# ---- opcode table: low 5 bits -> (name, extra headers after the BTH) -----------------
RETH, AETH, DETH, IMM, IETH, ATOM, ATOMACK = 16, 4, 8, 4, 4, 28, 8
RC_OPS = {
    0x00: ("SEND_FIRST", ()), 0x01: ("SEND_MIDDLE", ()), 0x02: ("SEND_LAST", ()),
    0x03: ("SEND_LAST_IMM", (IMM,)), 0x04: ("SEND_ONLY", ()), 0x05: ("SEND_ONLY_IMM", (IMM,)),
    0x06: ("WRITE_FIRST", (RETH,)), 0x07: ("WRITE_MIDDLE", ()), 0x08: ("WRITE_LAST", ()),
    0x09: ("WRITE_LAST_IMM", (IMM,)), 0x0A: ("WRITE_ONLY", (RETH,)),
    0x0B: ("WRITE_ONLY_IMM", (RETH, IMM)), 0x0C: ("READ_REQUEST", (RETH,)),
    0x0D: ("READ_RESP_FIRST", (AETH,)), 0x0E: ("READ_RESP_MIDDLE", ()),
    0x0F: ("READ_RESP_LAST", (AETH,)), 0x10: ("READ_RESP_ONLY", (AETH,)),
    0x11: ("ACK", (AETH,)), 0x12: ("ATOMIC_ACK", (AETH, ATOMACK)),
    0x13: ("CMP_SWAP", (ATOM,)), 0x14: ("FETCH_ADD", (ATOM,)),
    0x16: ("SEND_LAST_INV", (IETH,)), 0x17: ("SEND_ONLY_INV", (IETH,)),
}
UC_OK = set(range(0x00, 0x0C))
UD_OK = {0x04, 0x05}
RESPONSES = set(range(0x0D, 0x13))


def opcode_info(op):
    """-> (transport, name, header sizes, is_response) or None if undefined."""
    tr, low = op >> 5, op & 0x1F
    if tr == 0 and low in RC_OPS:                         # RC
        name, hdrs = RC_OPS[low]
        return "RC", name, hdrs, low in RESPONSES
    if tr == 1 and low in UC_OK:                          # UC
        name, hdrs = RC_OPS[low]
        return "UC", name, hdrs, False
    if tr == 3 and low in UD_OK:                          # UD
        name, hdrs = RC_OPS[low]
        return "UD", name, (DETH,) + hdrs, False
    if tr == 5 and (low in RC_OPS):                       # XRC: XRCETH (4) first
        name, hdrs = RC_OPS[low]
        return "XRC", name, (4,) + hdrs, low in RESPONSES
    if op == 0x81:                                        # CNP
        return "CNP", "CNP", (16,), False
    return None


def icrc(ip: bytes, v6: bool, udp_off: int) -> int:
    b = bytearray(ip[:-4])
    if v6:
        b[0] |= 0x0F
        b[1:4] = b"\xff\xff\xff"
        b[7] = 0xFF
    else:
        b[1] = 0xFF
        b[8] = 0xFF
        b[10:12] = b"\xff\xff"
    b[udp_off + 6:udp_off + 8] = b"\xff\xff"
    b[udp_off + 12] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(b))


def ipv4_csum_ok(h: bytes) -> bool:
    s = sum(struct.unpack("!%dH" % (len(h) // 2), h))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def read_pcap(path):
    with open(path, "rb") as f:
        gh = f.read(24)
        if len(gh) < 24:
            raise ValueError("not a pcap file (short header)")
        magic = gh[:4]
        if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            e = "<"
        elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
            e = ">"
        else:
            raise ValueError("not a classic pcap file (pcapng? capture with dumpcap -P)")
        link = struct.unpack(e + "I", gh[20:24])[0]
        if link != 1:
            raise ValueError(f"link type {link}, expected Ethernet (1)")
        n = 0
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                return
            _, _, incl, orig = struct.unpack(e + "IIII", rh)
            n += 1
            yield n, f.read(incl), orig


def psn_lt(a, b):
    """serial comparison in the 24-bit PSN space: a before b"""
    return ((a - b) & 0xFFFFFF) >= 0x800000


class Capture:
    def __init__(self, path, quiet=False):
        self.path, self.quiet = path, quiet
        self.packets = self.bad = self.retrans = self.naks = self.rnr = 0
        self.ops = Counter()
        self.problems = []

    def problem(self, frame, msg):
        self.bad += 1
        if len(self.problems) < 20:
            self.problems.append(f"frame {frame}: {msg}")

    def parse(self, frame, data, orig):
        """-> dict for a RoCEv2 packet, None for other traffic; records problems."""
        if len(data) != orig:
            self.problem(frame, f"truncated capture ({len(data)} of {orig} bytes)")
            return None
        off, et = 12, struct.unpack_from("!H", data, 12)[0]
        while et in (0x8100, 0x88A8):
            off += 4
            et = struct.unpack_from("!H", data, off)[0]
        ip = data[off + 2:]
        if et == 0x0800:
            v6 = False
            if len(ip) < 20 or ip[0] >> 4 != 4:
                return None
            ihl = (ip[0] & 0xF) * 4
            tot = struct.unpack_from("!H", ip, 2)[0]
            if ip[9] != 17 or len(ip) < ihl + 8:
                return None
            src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
        elif et == 0x86DD:
            v6, ihl = True, 40
            if len(ip) < 48 or ip[6] != 17:
                return None
            tot = 40 + struct.unpack_from("!H", ip, 4)[0]
            src, dst = ip[8:24].hex(), ip[24:40].hex()
        else:
            return None
        sport, dport, ulen = struct.unpack_from("!HHH", ip, ihl)
        if dport != 4791:
            return None
        self.packets += 1
        if tot > len(ip):
            self.problem(frame, f"IP length {tot} exceeds frame")
            return None
        ip = ip[:tot]                                # drop Ethernet padding
        if not v6:
            if ihl < 20 or not ipv4_csum_ok(ip[:ihl]):
                self.problem(frame, "IPv4 header checksum/IHL wrong")
            if not (ip[6] & 0x40):
                self.problem(frame, "IPv4 DF not set")
            if struct.unpack_from("!H", ip, 6)[0] & 0x3FFF:
                self.problem(frame, "IPv4 fragment")
        if ulen != tot - ihl:
            self.problem(frame, f"UDP length {ulen} != IP payload {tot - ihl}")
            return None
        bth = ip[ihl + 8:]
        if len(bth) < 12 + 4:
            self.problem(frame, "shorter than BTH + ICRC")
            return None
        op = bth[0]
        pad = (bth[1] >> 4) & 3
        tver = bth[1] & 0xF
        dqpn = struct.unpack_from("!I", bth, 4)[0] & 0xFFFFFF
        psn = struct.unpack_from("!I", bth, 8)[0] & 0xFFFFFF
        if tver != 0:
            self.problem(frame, f"BTH TVer {tver}")
        want = icrc(ip, v6, ihl)
        got = struct.unpack_from("<I", ip, tot - 4)[0]
        if want != got:
            self.problem(frame, f"ICRC {got:08x}, computed {want:08x} ({src}->{dst} op 0x{op:02x} psn {psn})")
        info = opcode_info(op)
        if info is None:
            self.problem(frame, f"undefined opcode 0x{op:02x}")
            return None
        tr, name, hdrs, is_resp = info
        hlen = 12 + sum(hdrs)
        plen = len(bth) - hlen - 4 - pad
        if plen < 0:
            self.problem(frame, f"{tr} {name}: {len(bth)} bytes cannot hold headers + pad + ICRC")
            return None
        self.ops[f"{tr}_{name}"] += 1
        p = dict(frame=frame, src=src, dst=dst, dqpn=dqpn, psn=psn, tr=tr, name=name,
                 resp=is_resp, payload=bytes(bth[hlen:hlen + plen]), hdr=bytes(bth[12:hlen]))
        if name in ("ACK", "ATOMIC_ACK", "READ_RESP_FIRST", "READ_RESP_LAST", "READ_RESP_ONLY"):
            syn = bth[12] if tr != "XRC" else bth[16]
            if syn >> 5 == 3:
                self.naks += 1
            elif syn >> 5 == 1:
                self.rnr += 1
        if name == "READ_REQUEST":
            p["dmalen"] = struct.unpack_from("!I", bth, 12 + 12)[0]
        return p

    def run(self):
        pkts = []
        for frame, data, orig in read_pcap(self.path):
            p = self.parse(frame, data, orig)
            if p:
                pkts.append(p)
        # path MTU, for the PSN span of RDMA READ requests: size of full-sized middle packets
        full = [len(p["payload"]) for p in pkts if p["name"].endswith(("_FIRST", "_MIDDLE"))]
        pmtu = max(full) if full else 4096
        nxt, seen = {}, {}
        for p in pkts:
            if p["resp"] or p["tr"] == "CNP":
                continue
            flow = (p["src"], p["dst"], p["dqpn"])
            span = 1
            if p["name"] == "READ_REQUEST":
                span = max(1, -(-p["dmalen"] // pmtu))
            key = flow + (p["psn"], p["name"])
            if flow in nxt and psn_lt(p["psn"], nxt[flow]):
                self.retrans += 1
                first = seen.get(key)
                if first is not None and first != p["payload"]:
                    self.problem(p["frame"], f"retransmitted {p['name']} psn {p['psn']} differs from the original")
                end = (p["psn"] + span) & 0xFFFFFF
                if psn_lt(nxt[flow], end):
                    nxt[flow] = end
            else:
                nxt[flow] = (p["psn"] + span) & 0xFFFFFF
            seen.setdefault(key, p["payload"])
        return self


def main(argv):
    quiet = "--quiet" in argv
    files = [a for a in argv if a != "--quiet"]
    if not files:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rc = 0
    for path in files:
        try:
            c = Capture(path, quiet).run()
        except (OSError, ValueError, struct.error) as e:
            print(f"{path}: ERROR {e}")
            rc = 1
            continue
        if not quiet:
            for msg in c.problems:
                print(f"  {msg}")
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(c.ops.items()))
            print(f"  opcodes: {ops or 'none'}")
        print(f"{path}: packets={c.packets} bad={c.bad} retrans={c.retrans} naks={c.naks} rnr={c.rnr}")
        if c.bad or c.packets == 0:
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
