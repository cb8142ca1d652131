//! Golden interop: the engine, given the same QPNs, PSNs, addresses and data as the kernel rxe
//! peers in `tests/captures`, emits byte-identical packets (BTH, extension headers, payload,
//! pad — and the same ICRC once computed with the capture's IPv4 ID), and accepts rxe's
//! packets and answers them as rxe did.

// The engine simulator of the urxe package's tests.
#[path = "../../tests/sim/mod.rs"]
mod sim;

use std::net::IpAddr;
use std::path::Path;

use sim::*;
use urxe::engine::*;
use urxe::wire::icrc::{icrc, IpFields, ICRC_LEN};
use urxe::wire::opcode::{op, OpKind};
use urxe_cli::check::capture::{decode, Capture, Decoded};

/// One captured RoCEv2 datagram.
#[derive(Clone, Debug)]
struct Cap {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    ip: IpFields,
    payload: Vec<u8>,
}

impl Cap {
    fn opcode(&self) -> u8 {
        self.payload[0]
    }
    fn psn(&self) -> u32 {
        u32::from_be_bytes([0, self.payload[9], self.payload[10], self.payload[11]])
    }
}

fn load(name: &str) -> Vec<Cap> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures").join(name);
    let mut c = Capture::open(&path).unwrap();
    let mut out = Vec::new();
    while let Some(f) = c.next_frame() {
        let f = f.unwrap();
        if let Decoded::Udp(u) = decode(&f) {
            if u.dport != 4791 {
                continue;
            }
            let ip = match (u.src, u.dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => IpFields::V4 {
                    src: s.octets(),
                    dst: d.octets(),
                    id: u16::from_be_bytes([u.ip_header[4], u.ip_header[5]]),
                    flags_frag: u16::from_be_bytes([u.ip_header[6], u.ip_header[7]]),
                },
                (IpAddr::V6(s), IpAddr::V6(d)) => IpFields::v6(s, d),
                _ => continue,
            };
            out.push(Cap { src: u.src, dst: u.dst, sport: u.sport, ip, payload: u.payload.to_vec() });
        }
    }
    out
}

/// Two engines at the capture's addresses (node 0 = requester, node 1 = responder), QPN 0x11
/// on both as rxe's first QP, connected with the capture's PSNs.
fn pair(req: &Cap, resp_psn: u32, mtu: Mtu) -> (Net, End, End) {
    let mut net = Net::with_addrs(&[req.src, req.dst], 1, LinkCfg::default(), 1 << 20);
    net.trace = Some(Vec::new());
    let o = QpOpts { mtu, a_psn: req.psn(), b_psn: resp_psn, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    assert_eq!((a.qpn, b.qpn), (0x11, 0x11), "first QPN is 0x11 as in rxe");
    (net, a, b)
}

/// Our packet equals the captured one: same bytes before the ICRC, and the same ICRC when
/// computed over the capture's IP header (whose ID the kernel chose).
fn assert_same(ours: &Packet, theirs: &Cap, what: &str) {
    let n = ours.data.len();
    assert_eq!(n, theirs.payload.len(), "{what}: length");
    assert_eq!(&ours.data[..n - ICRC_LEN], &theirs.payload[..n - ICRC_LEN], "{what}: headers + payload");
    assert_eq!(ours.src_port, theirs.sport, "{what}: UDP source port");
    let c = icrc(&theirs.ip, ours.src_port, 4791, &ours.data[..n - ICRC_LEN]);
    assert_eq!(c.to_le_bytes(), theirs.payload[n - ICRC_LEN..], "{what}: ICRC under the captured IP header");
}

fn ours(net: &Net, from: usize) -> Vec<Packet> {
    net.trace.as_ref().unwrap().iter().filter(|(_, p)| p.from == from).map(|(_, p)| p.clone()).collect()
}

#[test]
fn rc_send_message_and_ack_are_byte_identical_to_rxe() {
    let cap = load("rc_send.pcap");
    let first = cap.iter().position(|c| c.opcode() == op::RC_SEND_FIRST).unwrap();
    let client = cap[first].src;
    // The first message: FIRST .. LAST from the client, and the server's ACK for it.
    let msg: Vec<Cap> = cap[first..]
        .iter()
        .filter(|c| c.src == client)
        .take_while(|c| c.opcode() != op::RC_SEND_FIRST || c.psn() == cap[first].psn())
        .take(16)
        .cloned()
        .collect();
    let last = msg.iter().position(|c| c.opcode() == op::RC_SEND_LAST).unwrap();
    let msg = &msg[..=last];
    let ack =
        cap.iter().find(|c| c.src != client && c.opcode() == op::RC_ACKNOWLEDGE && c.psn() == msg[last].psn()).unwrap();
    let data: Vec<u8> = msg.iter().flat_map(|c| urxe::wire::parse(&c.payload).unwrap().payload.to_vec()).collect();
    let (mut net, a, b) = pair(&msg[0], 0, Mtu::Mtu1024);
    let (src, smr) = buffer(&mut net, a, data.len() as u64);
    let (dst, dmr) = buffer(&mut net, b, data.len() as u64);
    net.nodes[0].mem().set(src, &data);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &[sge(dst, data.len() as u32, dmr)] }).unwrap();
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, data.len() as u32, smr)])).unwrap();
    net.run_idle(1_000_000);
    let sent = ours(&net, 0);
    assert_eq!(sent.len(), msg.len());
    for (i, (o, t)) in sent.iter().zip(msg).enumerate() {
        assert_same(o, t, &format!("request packet {i}"));
    }
    let acks = ours(&net, 1);
    assert_eq!(acks.len(), 1);
    assert_same(&acks[0], ack, "ACK");
    assert_eq!(net.nodes[1].mem().get(dst, data.len()), data);
}

#[test]
fn rxe_requests_are_accepted_and_answered_as_rxe_answered() {
    // Feed rxe's own packets (with their real IP IDs, so the ICRC is fully verified) into our
    // responder, and compare our answers with what rxe's responder sent.
    for (file, mtu) in [("rc_send.pcap", Mtu::Mtu1024), ("rdma_read.pcap", Mtu::Mtu1024), ("atomic.pcap", Mtu::Mtu1024)]
    {
        let cap = load(file);
        let client = cap[0].src;
        let reqs: Vec<&Cap> = cap.iter().filter(|c| c.src == client).collect();
        let (mut net, _a, b) = pair(reqs[0], 0, mtu);
        // Registered memory on our responder at the VA and rkey rxe used is not possible
        // (keys differ), so only SEND answers are compared byte for byte; READ and atomic
        // requests must be checked and NAKed as remote access errors, not crash or write.
        let (dst, dmr) = buffer(&mut net, b, 1 << 16);
        for i in 0..64 {
            net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst, 1 << 16, dmr)] }).unwrap();
        }
        let mut answered = 0;
        for c in &cap {
            if c.src != client {
                continue;
            }
            let d = Datagram {
                src: c.src,
                src_port: c.sport,
                dst: c.dst,
                icrc: IcrcCheck::Full(c.ip),
                payload: &c.payload,
                ce: false,
            };
            net.nodes[1].eng.handle_datagram(net.now, &d);
            net.pump_tx();
            let kind = urxe::wire::parse(&c.payload).unwrap().info.kind;
            if kind == OpKind::Send {
                answered += 1;
            }
            if net.nodes[1].eng.query_qp(b.qpn).unwrap().0.qp_state == QpState::Err {
                break;
            }
        }
        let c = net.nodes[1].eng.counters();
        assert_eq!(c.icrc_errors, 0, "{file}: rxe's ICRCs verify");
        assert_eq!(c.length_errors + c.opcode_errors, 0, "{file}");
        if file == "rc_send.pcap" {
            assert!(answered > 0);
            // ibv_rc_pingpong sends both ways; compare rxe's ACKs only.
            let rxe_acks: Vec<&Cap> =
                cap.iter().filter(|c| c.src != client && c.opcode() == op::RC_ACKNOWLEDGE).collect();
            let our_acks = ours(&net, 1);
            assert_eq!(our_acks.len(), rxe_acks.len(), "one ACK per AckReq, as rxe");
            for (i, (o, t)) in our_acks.iter().zip(rxe_acks).enumerate() {
                assert_same(o, t, &format!("{file} ACK {i}"));
            }
        } else {
            // Their rkey means nothing to us: a remote access NAK for the first request.
            let nak = ours(&net, 1).into_iter().next().expect("an answer");
            assert_eq!(nak.opcode(), op::RC_ACKNOWLEDGE);
            assert_eq!(nak.syndrome(), Some(0x62), "{file}: NAK remote access error");
            assert_eq!(net.nodes[1].mem().get(dst, 64), vec![0; 64]);
        }
    }
}

#[test]
fn rdma_write_read_and_atomic_requests_are_byte_identical_to_rxe() {
    for (file, opc) in [
        ("rdma_write.pcap", op::RC_RDMA_WRITE_FIRST),
        ("rdma_read.pcap", op::RC_RDMA_READ_REQUEST),
        ("atomic.pcap", op::RC_FETCH_ADD),
        ("atomic_cmp_swap.pcap", op::RC_COMPARE_SWAP),
    ] {
        let cap = load(file);
        let i = cap.iter().position(|c| c.opcode() == opc).unwrap();
        let first = &cap[i];
        let p = urxe::wire::parse(&first.payload).unwrap();
        let client = first.src;
        let (mut net, a, _b) = pair(first, 0, Mtu::Mtu1024);
        let (loc, lmr) = buffer(&mut net, a, 1 << 16);
        let (kind, len) = match opc {
            op::RC_RDMA_WRITE_FIRST => {
                let r = p.headers.reth.unwrap();
                // The whole message's payload, in order.
                let data: Vec<u8> = cap[i..]
                    .iter()
                    .filter(|c| c.src == client)
                    .take(r.dma_len.div_ceil(1024) as usize)
                    .flat_map(|c| urxe::wire::parse(&c.payload).unwrap().payload.to_vec())
                    .collect();
                net.nodes[0].mem().set(loc, &data);
                (WrKind::RdmaWrite { remote_addr: r.va, rkey: r.rkey }, r.dma_len)
            }
            op::RC_RDMA_READ_REQUEST => {
                let r = p.headers.reth.unwrap();
                (WrKind::RdmaRead { remote_addr: r.va, rkey: r.rkey }, r.dma_len)
            }
            op::RC_FETCH_ADD => {
                let x = p.headers.atomic_eth.unwrap();
                (WrKind::AtomicFetchAdd { remote_addr: x.va, rkey: x.rkey, add: x.swap_add }, 8)
            }
            _ => {
                let x = p.headers.atomic_eth.unwrap();
                (WrKind::AtomicCmpSwp { remote_addr: x.va, rkey: x.rkey, compare: x.compare, swap: x.swap_add }, 8)
            }
        };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, kind, &[sge(loc, len, lmr)])).unwrap();
        // Only the requester's packets are compared: take them straight from the engine.
        let npkts = if opc == op::RC_RDMA_WRITE_FIRST { len.div_ceil(1024) as usize } else { 1 };
        let mut theirs = cap[i..].iter().filter(|c| c.src == client);
        let mut buf = vec![0u8; MAX_PACKET];
        for k in 0..npkts {
            let t = net.nodes[0].eng.poll_transmit(net.now, &mut buf).unwrap();
            let o = Packet { from: 0, to: 1, src_port: t.src_port, data: buf[..t.len].to_vec() };
            assert_same(&o, theirs.next().unwrap(), &format!("{file} packet {k}"));
        }
    }
}

#[test]
fn ud_send_is_byte_identical_to_rxe() {
    use QpAttrMask as A;
    let cap = load("ud_send.pcap");
    let t = &cap[0];
    let p = urxe::wire::parse(&t.payload).unwrap();
    let deth = p.headers.deth.unwrap();
    let mut net = Net::with_addrs(&[t.src, t.dst], 1, LinkCfg::default(), 1 << 20);
    let o = QpOpts { ty: QpType::Ud, ..QpOpts::default() };
    let a = make_qp(&mut net, 0, &o);
    assert_eq!(a.qpn, deth.src_qp);
    let e = &mut net.nodes[0].eng;
    let attr = QpAttr { qp_state: QpState::Init, port_num: 1, qkey: deth.qkey, sq_psn: t.psn(), ..QpAttr::default() };
    e.modify_qp(a.qpn, &attr, A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY).unwrap();
    e.modify_qp(a.qpn, &QpAttr { qp_state: QpState::Rtr, ..attr }, A::STATE).unwrap();
    e.modify_qp(a.qpn, &QpAttr { qp_state: QpState::Rts, ..attr }, A::STATE | A::SQ_PSN).unwrap();
    let dgid = gid_of(t.dst);
    let ah = e
        .create_ah(
            a.pd,
            &AhAttr {
                is_global: true,
                grh: GlobalRoute { dgid, ..Default::default() },
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let (src, smr) = buffer(&mut net, a, 4096);
    net.nodes[0].mem().set(src, p.payload);
    // The high-bit Q_Key rule: ask for the QP's own Q_Key.
    let ud = UdDest { ah, remote_qpn: p.headers.bth.dest_qp, remote_qkey: 0x8000_0000 };
    let sg = [sge(src, p.payload.len() as u32, smr)];
    let wr = SendWr { wr_id: 1, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &sg, ud: Some(ud) };
    net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
    let mut buf = vec![0u8; MAX_PACKET];
    let tx = net.nodes[0].eng.poll_transmit(net.now, &mut buf).unwrap();
    let o = Packet { from: 0, to: 1, src_port: tx.src_port, data: buf[..tx.len].to_vec() };
    assert_same(&o, t, "UD SEND_ONLY");
}
