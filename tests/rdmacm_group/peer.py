#!/usr/bin/python3
"""One rdma_cm peer for tests/rdmacm_group.rs, over pyverbs and the librdmacm.so.1 found on
LD_LIBRARY_PATH. Every step is announced on stdout; the test says `go` on stdin to take the
next one. The process ends itself after 60 s (SIGALRM) whatever happens.

  peer.py ROLE ADDR PORT [DST [udp]]   (ADDR: the peer's own address; DST: the client's
                                       destination, ADDR if not given; udp: the UDP port space,
                                       UD QPs and SIDR instead of TCP / RC)

  peer.py stray  ADDR PORT   listen on PORT ("listening"), then idle until stdin closes
  peer.py server ADDR PORT   bind ("bound"); on `go`: listen ("listening"), accept one
                             connection ("established"), wait for the disconnect
  peer.py client ADDR PORT   resolve address and route, make the QP ("resolved"); on `go`:
                             connect ("established", or "rejected" / "event N" and exit 1),
                             disconnect (RC)
"""

import signal
import sys

import pyverbs.cm_enums as ce
import pyverbs.enums as e
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.qp import QPCap, QPInitAttr


def say(*words):
    print(*words, flush=True)


def expect(ch, want):
    """The next event of `ch`, unacknowledged; exits 1 naming any other event."""
    ev = CMEvent(ch)
    if ev.event_type != want:
        kind = ev.event_type
        ev.ack_cm_event()
        say("rejected" if kind == ce.RDMA_CM_EVENT_REJECTED else f"event {kind}")
        sys.exit(1)
    return ev


def wait_go():
    if sys.stdin.readline().strip() != "go":
        sys.exit(2)


def qp_attr(udp):
    qpt = e.IBV_QPT_UD if udp else e.IBV_QPT_RC
    return QPInitAttr(qp_type=qpt, cap=QPCap(max_send_wr=1, max_recv_wr=1))


def main():
    signal.alarm(60)
    role, addr, port = sys.argv[1], sys.argv[2], sys.argv[3]
    dst = sys.argv[4] if len(sys.argv) > 4 else addr
    udp = len(sys.argv) > 5 and sys.argv[5] == "udp"
    ps = ce.RDMA_PS_UDP if udp else ce.RDMA_PS_TCP
    ch = CMEventChannel()
    cmid = CMID(creator=ch, port_space=ps)
    if role == "client":
        cmid.resolve_addr(AddrInfo(src=addr, dst=dst, dst_service=port, port_space=ps))
        expect(ch, ce.RDMA_CM_EVENT_ADDR_RESOLVED).ack_cm_event()
        cmid.resolve_route()
        expect(ch, ce.RDMA_CM_EVENT_ROUTE_RESOLVED).ack_cm_event()
        cmid.create_qp(qp_attr(udp))
        say("resolved")
        wait_go()
        cmid.connect(ConnParam())
        expect(ch, ce.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
        say("established")
        if not udp:
            cmid.disconnect()
        return
    cmid.bind_addr(AddrInfo(src=addr, src_service=port, port_space=ps, flags=ce.RAI_PASSIVE))
    if role == "server":
        say("bound")
        wait_go()
    cmid.listen()
    say("listening")
    if role == "stray":
        sys.stdin.read()
        return
    req = expect(ch, ce.RDMA_CM_EVENT_CONNECT_REQUEST)
    child = CMID(creator=req, listen_id=cmid)
    req.ack_cm_event()
    child.create_qp(qp_attr(udp))
    child.accept(ConnParam())
    if udp:
        # SIDR: the passive side has no ESTABLISHED event; its SIDR_REP answered the request.
        say("established")
        return
    expect(ch, ce.RDMA_CM_EVENT_ESTABLISHED).ack_cm_event()
    say("established")
    expect(ch, ce.RDMA_CM_EVENT_DISCONNECTED).ack_cm_event()


if __name__ == "__main__":
    main()
