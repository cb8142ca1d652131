//! RDMA WRITE with immediate that reaches a responder with no receive posted: the message's
//! last packet (or its only one) is RNR NAKed, nothing of it completes, and its retry after the
//! application posted a receive lands: the data in memory, one receive completion with the
//! immediate, the WR successful, the QP still in RTS. Before the fix, a one-packet WRITE with
//! immediate that met an RNR left the responder "inside" the message, so its retry (a message's
//! first packet again) failed the opcode sequence check: NAK Invalid Request, both QPs in
//! error (libfabric's fi_cq_data -o writedata under load, where the server posts its receive
//! late). Each case runs with the short paths on and off.

mod sim;

use sim::*;
use urxe::engine::*;

const MS: u64 = 1_000_000;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// A WRITE with immediate of `len` bytes (MTU 1024) to a responder that posts its receive only
/// after its RNR NAK; then a second one, with a receive already posted.
fn write_imm_after_rnr(len: usize, short: bool) {
    let mut net = Net::new(2, 31 + len as u64, LinkCfg::default());
    for n in &mut net.nodes {
        n.eng.set_short_paths(short);
    }
    let o = QpOpts { min_rnr_timer: 1, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 2 * len as u64);
    let (dst, dmr) = buffer(&mut net, b, 2 * len as u64);
    let (rbuf, rmr) = buffer(&mut net, b, 64);
    let data = [pattern(len, 1), pattern(len, 2)];
    net.nodes[0].mem().set(src, &data[0]);
    net.nodes[0].mem().set(src + len as u64, &data[1]);
    let wr = |i: u64| {
        let kind =
            WrKind::RdmaWriteWithImm { remote_addr: dst + i * len as u64, rkey: dmr.rkey, imm_data: 0x1000 + i as u32 };
        (kind, [sge(src + i * len as u64, len as u32, smr)])
    };
    let (k0, s0) = wr(0);
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, k0, &s0)).unwrap();
    // No receive yet: at least one RNR NAK, nothing completes.
    net.run_until(2 * MS, |n| n.nodes[1].eng.counters().rnr_naks_sent > 0);
    assert!(net.nodes[1].eng.counters().rnr_naks_sent > 0, "len {len} short {short}: no RNR NAK");
    assert!(net.poll_all(0, a.cq).is_empty() && net.poll_all(1, b.cq).is_empty());
    for id in [10, 11] {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: id, sg_list: &[sge(rbuf, 64, rmr)] }).unwrap();
    }
    net.run_idle(50 * MS);
    let (k1, s1) = wr(1);
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, k1, &s1)).unwrap();
    net.run_idle(50 * MS);
    let wa: Vec<_> = net.poll_all(0, a.cq).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wa, vec![(1, WcStatus::Success), (2, WcStatus::Success)], "len {len} short {short}");
    let wb: Vec<_> =
        net.poll_all(1, b.cq).iter().map(|w| (w.wr_id, w.status, w.opcode, w.imm_data, w.byte_len)).collect();
    assert_eq!(
        wb,
        vec![
            (10, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0x1000, len as u32),
            (11, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0x1001, len as u32)
        ],
        "len {len} short {short}"
    );
    assert!(net.nodes[1].mem().get(dst, len) == data[0], "len {len} short {short}: first WRITE");
    assert!(net.nodes[1].mem().get(dst + len as u64, len) == data[1], "len {len} short {short}: second WRITE");
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.naks_sent, c.length_errors), (0, 0), "len {len} short {short}: {c:?}");
    for (node, end) in [(0, a), (1, b)] {
        assert_eq!(net.nodes[node].eng.query_qp(end.qpn).unwrap().0.qp_state, QpState::Rts);
    }
}

#[test]
fn one_packet_write_with_immediate_lands_after_an_rnr_nak() {
    for short in [true, false] {
        write_imm_after_rnr(1000, short);
        write_imm_after_rnr(0, short);
    }
}

#[test]
fn multi_packet_write_with_immediate_lands_after_an_rnr_nak_on_its_last_packet() {
    for short in [true, false] {
        write_imm_after_rnr(3000, short);
    }
}
