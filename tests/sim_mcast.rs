//! UD multicast in the engine (attach/detach, delivery of destination QPN 0xFFFFFF to every
//! attached UD QP, the drop rules), over simulated engines. The simulator's links are unicast,
//! so this file moves the datagrams itself: a packet to a multicast address goes to every node,
//! the sender included (IP multicast loopback, as rxe's), each copy through its own seeded loss,
//! duplication, reordering and bit flips, and arrives addressed to the group (the ICRC covers
//! that address).

mod sim;

use std::net::{IpAddr, Ipv4Addr};

use sim::*;
use urxe::engine::*;
use urxe::wire::icrc::{icrc, store_icrc, IpFields, ROCEV2_PORT};

const QKEY: u32 = 0x2468_1357;
const MSG: u32 = 64;
const GROUP: IpAddr = IpAddr::V4(Ipv4Addr::new(239, 44, 2, 1));

/// A datagram on its way to one node.
struct InFlight {
    at: u64,
    seq: u64,
    to: usize,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    data: Vec<u8>,
}

/// Moves every node's packets: multicast to all nodes, unicast to its node, each copy with the
/// link's faults; delivers in time order.
struct Fabric {
    net: Net,
    queue: Vec<InFlight>,
    seq: u64,
    flipped: u64,
    dups: u64,
}

impl Fabric {
    fn new(nodes: usize, seed: u64, link: LinkCfg) -> Fabric {
        Fabric { net: Net::new(nodes, seed, link), queue: Vec::new(), seq: 0, flipped: 0, dups: 0 }
    }

    fn pump(&mut self) {
        let mut buf = vec![0u8; MAX_PACKET];
        for from in 0..self.net.nodes.len() {
            let src = self.net.nodes[from].addr;
            while let Some(t) = self.net.nodes[from].eng.poll_transmit(self.net.now, &mut buf) {
                let to: Vec<usize> = if t.dst.is_multicast() {
                    (0..self.net.nodes.len()).collect()
                } else {
                    self.net.nodes.iter().position(|n| n.addr == t.dst).into_iter().collect()
                };
                for n in to {
                    self.put(n, src, t.dst, t.src_port, buf[..t.len].to_vec());
                }
            }
        }
    }

    fn put(&mut self, to: usize, src: IpAddr, dst: IpAddr, sport: u16, mut data: Vec<u8>) {
        let l = self.net.link;
        let rng = &mut self.net.rng;
        if rng.chance(l.loss) {
            return;
        }
        let flip = rng.chance(l.bitflip);
        if flip {
            let bit = rng.below(data.len() as u64 * 8);
            data[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        let copies = if rng.chance(l.dup) { 2 } else { 1 };
        self.dups += copies - 1;
        // Corrupted copies that arrive (a duplicate of one is corrupted too).
        self.flipped += if flip { copies } else { 0 };
        for _ in 0..copies {
            let mut at = self.net.now + l.delay;
            if rng.chance(l.reorder) {
                at += 1 + rng.below(l.reorder_window + 1);
            }
            self.seq += 1;
            self.queue.push(InFlight { at, seq: self.seq, to, src, dst, sport, data: data.clone() });
        }
    }

    /// Delivers one datagram to node `to` as the transport would: from `src`, to `dst`.
    fn deliver(&mut self, to: usize, src: IpAddr, dst: IpAddr, sport: u16, data: &[u8]) {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) else { unreachable!("IPv4 only here") };
        let dg = Datagram {
            src,
            src_port: sport,
            dst,
            icrc: IcrcCheck::Full(IpFields::v4_df(s, d)),
            payload: data,
            ce: false,
        };
        let now = self.net.now;
        self.net.nodes[to].eng.handle_datagram(now, &dg);
    }

    /// Runs until nothing is in flight (bounded).
    fn run(&mut self) {
        for _ in 0..100_000 {
            self.pump();
            if self.queue.is_empty() {
                return;
            }
            self.queue.sort_by_key(|p| (p.at, p.seq));
            let p = self.queue.remove(0);
            self.net.now = self.net.now.max(p.at);
            self.deliver(p.to, p.src, p.dst, p.sport, &p.data);
        }
        panic!("the fabric did not go idle");
    }
}

/// A UD QP in RTS with Q_Key `qkey`, `recvs` receives of MSG + 40 bytes posted.
fn ud_qp(f: &mut Fabric, node: usize, qkey: u32, recvs: u32) -> (End, u64) {
    use QpAttrMask as A;
    let o = QpOpts { ty: QpType::Ud, max_recv_wr: recvs.max(1), ..QpOpts::default() };
    let end = make_qp(&mut f.net, node, &o);
    let e = &mut f.net.nodes[node].eng;
    let a = QpAttr { qp_state: QpState::Init, port_num: 1, qkey, ..QpAttr::default() };
    e.modify_qp(end.qpn, &a, A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY).unwrap();
    e.modify_qp(end.qpn, &QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, A::STATE).unwrap();
    e.modify_qp(end.qpn, &QpAttr { qp_state: QpState::Rts, ..QpAttr::default() }, A::STATE | A::SQ_PSN).unwrap();
    let slot = u64::from(MSG + 40);
    let (addr, mr) = buffer(&mut f.net, end, slot * u64::from(recvs.max(1)));
    for i in 0..recvs {
        let s = [sge(addr + slot * u64::from(i), slot as u32, mr)];
        f.net.nodes[node].eng.post_recv(end.qpn, &RecvWr { wr_id: u64::from(i), sg_list: &s }).unwrap();
    }
    (end, addr)
}

fn pattern(msg: u32) -> Vec<u8> {
    (0..MSG).map(|i| (msg.wrapping_mul(31).wrapping_add(i * 7) ^ 0x5a) as u8).collect()
}

/// Sends messages `first..first + n` from `from` to the group (QPN 0xFFFFFF).
fn send_to_group(f: &mut Fabric, from: End, first: u32, n: u32) {
    let ah = f.net.nodes[from.node]
        .eng
        .create_ah(
            from.pd,
            &AhAttr {
                is_global: true,
                grh: GlobalRoute { dgid: gid_of(GROUP), hop_limit: 64, ..Default::default() },
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let (addr, mr) = buffer(&mut f.net, from, u64::from(MSG));
    for m in first..first + n {
        f.net.nodes[from.node].mem().set(addr, &pattern(m));
        let s = [sge(addr, MSG, mr)];
        let ud = UdDest { ah, remote_qpn: MULTICAST_QPN, remote_qkey: QKEY };
        let wr =
            SendWr { wr_id: u64::from(m), kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &s, ud: Some(ud) };
        let now = f.net.now;
        f.net.nodes[from.node].eng.post_send(now, from.qpn, &wr).unwrap();
        // One message at a time through the send buffer: put it on the wire before reuse.
        f.pump();
    }
    f.run();
}

/// The message numbers `end` received (its CQ drained), each checked: success, GRH area with
/// the group as IPv4 destination, source QPN `src_qp`, payload one of the patterns.
fn received(f: &mut Fabric, end: End, buf: u64, src_qp: Qpn) -> Vec<u32> {
    let wcs = f.net.poll_all(end.node, end.cq);
    let mut got = Vec::new();
    for wc in wcs.iter().filter(|w| w.opcode == WcOpcode::Recv) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!((wc.byte_len, wc.src_qp), (MSG + 40, src_qp), "{wc:?}");
        assert!(wc.wc_flags.contains(WcFlags::GRH));
        let at = buf + wc.wr_id * u64::from(MSG + 40);
        let bytes = f.net.nodes[end.node].mem().get(at, (MSG + 40) as usize);
        assert_eq!(&bytes[36..40], &[239, 44, 2, 1], "the GRH area names the group as destination");
        let payload = &bytes[40..];
        let m = (0..10_000).find(|&m| pattern(m) == payload).expect("payload is one of the messages sent");
        got.push(m);
    }
    got
}

#[test]
fn every_attached_qp_of_every_node_gets_each_message_once_and_others_none() {
    let mut f = Fabric::new(3, 1, LinkCfg::default());
    let (s, _) = ud_qp(&mut f, 0, QKEY, 0);
    let (r1, b1) = ud_qp(&mut f, 1, QKEY, 64);
    let (r2, b2) = ud_qp(&mut f, 1, QKEY, 64);
    let (r3, b3) = ud_qp(&mut f, 2, QKEY, 64);
    let (unattached, bu) = ud_qp(&mut f, 2, QKEY, 64);
    let (wrong_qkey, bw) = ud_qp(&mut f, 1, QKEY ^ 1, 64);
    let g = gid_of(GROUP);
    assert_eq!(f.net.nodes[1].eng.attach_mcast(r1.qpn, g), Ok(Some(GROUP)), "first QP of the group: join it");
    assert_eq!(f.net.nodes[1].eng.attach_mcast(r2.qpn, g), Ok(None));
    assert_eq!(f.net.nodes[1].eng.attach_mcast(wrong_qkey.qpn, g), Ok(None));
    assert_eq!(f.net.nodes[2].eng.attach_mcast(r3.qpn, g), Ok(Some(GROUP)));
    send_to_group(&mut f, s, 0, 40);
    let want: Vec<u32> = (0..40).collect();
    assert_eq!(received(&mut f, r1, b1, s.qpn), want);
    assert_eq!(received(&mut f, r2, b2, s.qpn), want);
    assert_eq!(received(&mut f, r3, b3, s.qpn), want);
    assert!(received(&mut f, unattached, bu, s.qpn).is_empty());
    assert!(received(&mut f, wrong_qkey, bw, s.qpn).is_empty());
    let c1 = *f.net.nodes[1].eng.counters();
    assert_eq!((c1.mcast_rcvd, c1.qkey_violations, c1.mcast_drops), (40, 40, 0));
    assert_eq!(f.net.nodes[2].eng.counters().mcast_rcvd, 40);
    // The sender's node has no QP in the group: its looped-back copies are dropped, counted.
    assert_eq!(f.net.nodes[0].eng.counters().mcast_drops, 40);
    let sent = f.net.poll_all(0, s.cq);
    assert_eq!(sent.iter().filter(|w| w.opcode == WcOpcode::Send && w.status == WcStatus::Success).count(), 40);
}

#[test]
fn detach_stops_delivery_and_the_last_detach_leaves_the_group() {
    let mut f = Fabric::new(2, 2, LinkCfg::default());
    let (s, bs) = ud_qp(&mut f, 0, QKEY, 64);
    let (r1, b1) = ud_qp(&mut f, 1, QKEY, 64);
    let (r2, b2) = ud_qp(&mut f, 1, QKEY, 64);
    let g = gid_of(GROUP);
    let e = &mut f.net.nodes[1].eng;
    e.attach_mcast(r1.qpn, g).unwrap();
    e.attach_mcast(r2.qpn, g).unwrap();
    assert_eq!(e.attach_mcast(r2.qpn, g), Ok(None), "attaching twice changes nothing");
    assert_eq!(e.destroy_qp(r2.qpn), Err(Error::Busy), "an attached QP cannot be destroyed");
    assert_eq!(e.detach_mcast(r2.qpn, g), Ok(None));
    assert_eq!(e.detach_mcast(r2.qpn, g), Err(Error::Invalid), "not attached any more");
    // The sender's own QP is attached too: its own messages come back to it.
    assert_eq!(f.net.nodes[0].eng.attach_mcast(s.qpn, g), Ok(Some(GROUP)));
    send_to_group(&mut f, s, 0, 10);
    let all: Vec<u32> = (0..10).collect();
    assert_eq!(received(&mut f, r1, b1, s.qpn), all);
    assert!(received(&mut f, r2, b2, s.qpn).is_empty(), "a detached QP gets nothing");
    assert_eq!(received(&mut f, s, bs, s.qpn), all, "the sender's attached QP gets its own messages");
}

#[test]
fn a_qp_that_blocks_its_own_loopback_misses_only_its_own_messages() {
    let mut f = Fabric::new(2, 6, LinkCfg::default());
    let (s, bs) = ud_qp(&mut f, 0, QKEY, 64);
    let (n, bn) = ud_qp(&mut f, 0, QKEY, 64);
    let (r, br) = ud_qp(&mut f, 1, QKEY, 64);
    let g = gid_of(GROUP);
    let rc = make_qp(&mut f.net, 0, &QpOpts::default());
    let e = &mut f.net.nodes[0].eng;
    assert_eq!(e.block_self_mcast_loopback(rc.qpn), Err(Error::Invalid), "UD only");
    e.block_self_mcast_loopback(s.qpn).unwrap();
    e.attach_mcast(s.qpn, g).unwrap();
    e.attach_mcast(n.qpn, g).unwrap();
    f.net.nodes[1].eng.attach_mcast(r.qpn, g).unwrap();
    send_to_group(&mut f, s, 0, 8);
    let all: Vec<u32> = (0..8).collect();
    assert!(received(&mut f, s, bs, s.qpn).is_empty(), "the sender blocks its own loopback");
    assert_eq!(received(&mut f, n, bn, s.qpn), all, "its neighbour on the same node still gets them");
    assert_eq!(received(&mut f, r, br, s.qpn), all);
    // Others' messages still reach it.
    send_to_group(&mut f, n, 100, 3);
    assert_eq!(received(&mut f, s, bs, n.qpn), vec![100, 101, 102]);
    // Detached, it may be destroyed; the setting goes with it.
    let e = &mut f.net.nodes[0].eng;
    e.detach_mcast(s.qpn, g).unwrap();
    e.destroy_qp(s.qpn).unwrap();
}

#[test]
fn the_last_detach_of_a_node_reports_the_group_gone_and_its_datagrams_are_dropped() {
    let mut f = Fabric::new(2, 3, LinkCfg::default());
    let (s, _) = ud_qp(&mut f, 0, QKEY, 0);
    let (r1, b1) = ud_qp(&mut f, 1, QKEY, 64);
    let g = gid_of(GROUP);
    f.net.nodes[1].eng.attach_mcast(r1.qpn, g).unwrap();
    assert_eq!(f.net.nodes[1].eng.mcast_groups(), vec![GROUP]);
    assert_eq!(f.net.nodes[1].eng.detach_mcast(r1.qpn, g), Ok(Some(GROUP)), "last QP: leave the group");
    assert!(f.net.nodes[1].eng.mcast_groups().is_empty());
    assert_eq!(f.net.nodes[1].eng.destroy_qp(r1.qpn), Ok(()), "detached: it may go");
    send_to_group(&mut f, s, 0, 5);
    assert!(received(&mut f, r1, b1, s.qpn).is_empty());
    assert_eq!(f.net.nodes[1].eng.counters().mcast_drops, 5);
}

#[test]
fn attach_refuses_other_qp_types_unicast_gids_other_families_and_past_the_limits() {
    let mut cfg = EngineConfig {
        local_addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        max_mtu: Mtu::Mtu4096,
        limits: Limits { max_mcast_grp: 2, max_mcast_qp_attach: 2, max_total_mcast_qp_attach: 3, ..Limits::default() },
        seed: 9,
    };
    let mut f = Fabric::new(1, 4, LinkCfg::default());
    cfg.local_addr = f.net.nodes[0].addr;
    f.net.nodes[0].eng = Engine::new(cfg, SimHost::new(0x10_0000, 1 << 20));
    let (u1, _) = ud_qp(&mut f, 0, QKEY, 0);
    let (u2, _) = ud_qp(&mut f, 0, QKEY, 0);
    let (u3, _) = ud_qp(&mut f, 0, QKEY, 0);
    let rc = make_qp(&mut f.net, 0, &QpOpts::default());
    let e = &mut f.net.nodes[0].eng;
    let g = |a: [u8; 4]| gid_of(IpAddr::V4(Ipv4Addr::from(a)));
    assert_eq!(e.attach_mcast(rc.qpn, g([239, 1, 1, 1])), Err(Error::Invalid), "RC QP");
    assert_eq!(e.attach_mcast(u1.qpn, g([10, 0, 0, 7])), Err(Error::Invalid), "unicast GID");
    assert_eq!(
        e.attach_mcast(u1.qpn, "ff0e::1".parse::<std::net::Ipv6Addr>().unwrap().octets()),
        Err(Error::Invalid),
        "IPv6 group on an IPv4 device"
    );
    assert_eq!(e.attach_mcast(0xABCDEF, g([239, 1, 1, 1])), Err(Error::NotFound), "no such QP");
    assert_eq!(e.detach_mcast(u1.qpn, g([239, 1, 1, 1])), Err(Error::Invalid), "nothing attached");
    e.attach_mcast(u1.qpn, g([239, 1, 1, 1])).unwrap();
    e.attach_mcast(u2.qpn, g([239, 1, 1, 1])).unwrap();
    assert_eq!(e.attach_mcast(u3.qpn, g([239, 1, 1, 1])), Err(Error::NoMemory), "max_mcast_qp_attach");
    e.attach_mcast(u1.qpn, g([239, 1, 1, 2])).unwrap();
    assert_eq!(e.attach_mcast(u2.qpn, g([239, 1, 1, 2])), Err(Error::NoMemory), "max_total_mcast_qp_attach");
    e.detach_mcast(u2.qpn, g([239, 1, 1, 1])).unwrap();
    assert_eq!(e.attach_mcast(u3.qpn, g([239, 1, 1, 3])), Err(Error::NoMemory), "max_mcast_grp");
    assert_eq!(e.mcast_groups().len(), 2);
}

/// Re-addresses a captured packet: new destination QPN and/or IP destination, ICRC recomputed
/// so only the rule under test can drop it.
fn readdress(data: &[u8], src: IpAddr, dst: IpAddr, sport: u16, qpn: Option<u32>) -> Vec<u8> {
    let mut d = data.to_vec();
    if let Some(q) = qpn {
        d[5..8].copy_from_slice(&q.to_be_bytes()[1..]);
    }
    let (IpAddr::V4(s), IpAddr::V4(t)) = (src, dst) else { unreachable!() };
    let n = d.len();
    let c = icrc(&IpFields::v4_df(s, t), sport, ROCEV2_PORT, &d[..n - 4]);
    store_icrc(&mut d, c);
    d
}

#[test]
fn hostile_multicast_datagrams_are_dropped_and_counted() {
    let mut f = Fabric::new(2, 5, LinkCfg::default());
    let (s, _) = ud_qp(&mut f, 0, QKEY, 0);
    let (r1, b1) = ud_qp(&mut f, 1, QKEY, 64);
    f.net.nodes[1].eng.attach_mcast(r1.qpn, gid_of(GROUP)).unwrap();
    // Capture one genuine multicast datagram.
    send_to_group(&mut f, s, 0, 1);
    assert_eq!(received(&mut f, r1, b1, s.qpn), vec![0]);
    let ah = f.net.nodes[0]
        .eng
        .create_ah(
            s.pd,
            &AhAttr {
                is_global: true,
                grh: GlobalRoute { dgid: gid_of(GROUP), ..Default::default() },
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let (addr, mr) = buffer(&mut f.net, s, u64::from(MSG));
    f.net.nodes[0].mem().set(addr, &pattern(1));
    let sg = [sge(addr, MSG, mr)];
    let wr = SendWr {
        wr_id: 9,
        kind: WrKind::Send,
        flags: SendFlags::default(),
        sg_list: &sg,
        ud: Some(UdDest { ah, remote_qpn: MULTICAST_QPN, remote_qkey: QKEY }),
    };
    let now = f.net.now;
    f.net.nodes[0].eng.post_send(now, s.qpn, &wr).unwrap();
    let mut buf = vec![0u8; MAX_PACKET];
    let t = f.net.nodes[0].eng.poll_transmit(now, &mut buf).expect("the multicast SEND");
    let pkt = buf[..t.len].to_vec();
    let (src, me) = (f.net.nodes[0].addr, f.net.nodes[1].addr);
    let other_group = IpAddr::V4(Ipv4Addr::new(239, 44, 2, 99));
    let before = *f.net.nodes[1].eng.counters();
    // To our unicast address with QPN 0xFFFFFF; to the group with r1's own QPN; to a group
    // nobody here joined.
    for (dst, qpn) in [(me, None), (GROUP, Some(r1.qpn)), (other_group, None)] {
        let d = readdress(&pkt, src, dst, t.src_port, qpn);
        f.deliver(1, src, dst, t.src_port, &d);
    }
    let after = *f.net.nodes[1].eng.counters();
    assert_eq!(after.mcast_drops - before.mcast_drops, 3);
    assert_eq!(after.mcast_rcvd, before.mcast_rcvd);
    // A corrupted copy to the group fails its ICRC.
    let mut bad = readdress(&pkt, src, GROUP, t.src_port, None);
    bad[30] ^= 0x10;
    f.deliver(1, src, GROUP, t.src_port, &bad);
    assert_eq!(f.net.nodes[1].eng.counters().icrc_errors, before.icrc_errors + 1);
    // The genuine one still arrives.
    f.deliver(1, src, GROUP, t.src_port, &pkt);
    assert_eq!(received(&mut f, r1, b1, s.qpn), vec![1]);
}

#[test]
fn lossy_links_deliver_each_message_at_most_as_often_as_the_wire_copied_it_and_never_corrupt() {
    let seeds: u64 = std::env::var("URXE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    let link =
        LinkCfg { loss: 0.1, dup: 0.05, reorder: 0.2, reorder_window: 5_000, bitflip: 0.02, ..LinkCfg::default() };
    let mut total = (0usize, 0u64, 0u64);
    for seed in 0..seeds {
        let mut f = Fabric::new(3, 1000 + seed, link);
        let (s, _) = ud_qp(&mut f, 0, QKEY, 0);
        let (r1, b1) = ud_qp(&mut f, 1, QKEY, 128);
        let (r2, b2) = ud_qp(&mut f, 2, QKEY, 128);
        let g = gid_of(GROUP);
        f.net.nodes[1].eng.attach_mcast(r1.qpn, g).unwrap();
        f.net.nodes[2].eng.attach_mcast(r2.qpn, g).unwrap();
        send_to_group(&mut f, s, 0, 50);
        for (r, b) in [(r1, b1), (r2, b2)] {
            let got = received(&mut f, r, b, s.qpn);
            let mut seen = [0u32; 50];
            for m in &got {
                seen[*m as usize] += 1;
            }
            assert!(seen.iter().all(|&c| c <= 2), "seed {seed}: a message arrived more than twice: {seen:?}");
            total.0 += got.len();
        }
        let c1 = f.net.nodes[1].eng.counters();
        let c2 = f.net.nodes[2].eng.counters();
        total.1 += c1.icrc_errors + c2.icrc_errors;
        total.2 += f.dups;
        assert!(
            c1.icrc_errors + c2.icrc_errors + f.net.nodes[0].eng.counters().icrc_errors <= f.flipped,
            "seed {seed}"
        );
    }
    eprintln!(
        "{seeds} seeds: {} deliveries of {} messages to receivers, {} copies duplicated by the wire, {} corrupted copies dropped",
        total.0,
        seeds * 100,
        total.2,
        total.1
    );
    // With 10 % loss and 5 % duplication, about 95 % of the messages arrive.
    assert!(total.0 as u64 > seeds * 100 * 80 / 100, "too few deliveries: {}", total.0);
    assert!(total.1 > 0, "the bit flips must have been caught by the ICRC somewhere");
}
