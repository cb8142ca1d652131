//! The CM as traces: two (or more) `Cm`s joined by a simulated network with virtual time, a
//! seeded RNG, loss, duplication and reordering.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::wire::cm::{port_space, rdma_cm_service_id, CmaHeader, CMA_HEADER_LEN};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
const MS: Nanos = 1_000_000;
const SERVICE: u64 = 0x0106_1c06;

fn gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn cm(ip: IpAddr, guid: u64, base: u32) -> Cm {
    Cm::new(CmConfig { local_gid: gid(ip), ca_guid: guid, comm_id_base: base, first_comm_id: 1, packet_life_time: 18 })
}

fn path(from: IpAddr, to: IpAddr) -> CmPath {
    CmPath {
        local_lid: 0xFFFF,
        remote_lid: 0xFFFF,
        local_gid: gid(from),
        remote_gid: gid(to),
        flow_label: 0x077b0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 19,
    }
}

fn params(qpn: u32, psn: u32) -> ConnectParams {
    ConnectParams {
        peer: B,
        service_id: SERVICE,
        local_qpn: qpn,
        starting_psn: psn,
        responder_resources: 1,
        initiator_depth: 1,
        transport_service_type: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        primary: path(A, B),
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 15,
        private_data: b"hello".to_vec(),
    }
}

fn accept_params(qpn: u32, psn: u32) -> AcceptParams {
    AcceptParams {
        local_qpn: qpn,
        starting_psn: psn,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"welcome".to_vec(),
    }
}

/// splitmix64
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

/// Two CMs, A (active) and B (passive), a network with loss/dup/reorder, and virtual time.
struct Pair {
    a: Cm,
    b: Cm,
    now: Nanos,
    /// (deliver at, to B?, mad)
    wire: Vec<(Nanos, bool, [u8; MAD_LEN])>,
    rng: Rng,
    loss: u64,
    dup: u64,
    reorder: u64,
    ev_a: Vec<CmEvent>,
    ev_b: Vec<CmEvent>,
    sent: Vec<(bool, u16)>,
}

impl Pair {
    fn new(seed: u64) -> Pair {
        let mut b = cm(B, 0x5054_00ff_fe77_0002, 0x0200_0000);
        b.listen(SERVICE, ListenQp::Any).unwrap();
        Pair {
            a: cm(A, 0x5054_00ff_fe77_0003, 0x0100_0000),
            b,
            now: 1_000 * MS,
            wire: Vec::new(),
            rng: Rng(seed),
            loss: 0,
            dup: 0,
            reorder: 0,
            ev_a: Vec::new(),
            ev_b: Vec::new(),
            sent: Vec::new(),
        }
    }

    /// Moves every queued MAD onto the wire (applying the impairments).
    fn flush(&mut self) {
        for (to_b, cm) in [(true, &mut self.a), (false, &mut self.b)] {
            while let Some(o) = cm.poll_transmit() {
                assert_eq!(o.peer, if to_b { B } else { A });
                let attr = u16::from_be_bytes([o.mad[16], o.mad[17]]);
                self.sent.push((to_b, attr));
                if self.rng.chance(self.loss) {
                    continue;
                }
                let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let delay = if self.rng.chance(self.reorder) { 1 + self.rng.next() % 50 } else { 1 } * MS / 10;
                    self.wire.push((self.now + delay, to_b, o.mad));
                }
            }
        }
        for (a, ev) in [(true, &mut self.ev_a), (false, &mut self.ev_b)] {
            let cm = if a { &mut self.a } else { &mut self.b };
            while let Some(e) = cm.poll_event() {
                ev.push(e);
            }
        }
    }

    /// Advances virtual time to the next delivery or timer, at most until `until`.
    fn step(&mut self, until: Nanos) -> bool {
        self.flush();
        let next_wire = self.wire.iter().map(|w| w.0).min();
        let next_timer = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
        let Some(t) = [next_wire, next_timer].into_iter().flatten().min() else { return false };
        if t > until {
            self.now = until;
            return false;
        }
        self.now = self.now.max(t);
        let (due, rest): (Vec<_>, Vec<_>) = self.wire.drain(..).partition(|w| w.0 <= self.now);
        self.wire = rest;
        for (_, to_b, mad) in due {
            if to_b {
                self.b.handle_mad(self.now, A, &mad);
            } else {
                self.a.handle_mad(self.now, B, &mad);
            }
        }
        for cm in [&mut self.a, &mut self.b] {
            if cm.poll_timeout().is_some_and(|d| d <= self.now) {
                cm.handle_timeout(self.now);
            }
        }
        self.flush();
        true
    }

    fn run_for(&mut self, dur: Nanos) {
        let until = self.now + dur;
        for _ in 0..100_000 {
            if !self.step(until) {
                break;
            }
        }
        self.now = self.now.max(until);
    }

    /// Runs, answering events as rdma_cm would (accept REQs, RTU on REP, DREP on DREQ).
    fn run_answering(&mut self, dur: Nanos) {
        let until = self.now + dur;
        for _ in 0..100_000 {
            let mut acted = false;
            let (na, nb) = (self.ev_a.len(), self.ev_b.len());
            let more = self.step(until);
            for i in na..self.ev_a.len() {
                let e = self.ev_a[i].clone();
                acted |= answer(&mut self.a, self.now, &e, 0x11);
            }
            for i in nb..self.ev_b.len() {
                let e = self.ev_b[i].clone();
                acted |= answer(&mut self.b, self.now, &e, 0x22);
            }
            if !more && !acted {
                break;
            }
        }
    }

    fn count(ev: &[CmEvent], f: impl Fn(&CmEvent) -> bool) -> usize {
        ev.iter().filter(|e| f(e)).count()
    }
}

fn answer(cm: &mut Cm, now: Nanos, e: &CmEvent, qpn: u32) -> bool {
    match e {
        CmEvent::ReqReceived { comm_id, .. } => cm.accept(now, *comm_id, &accept_params(qpn, 0x777)).is_ok(),
        CmEvent::RepReceived { comm_id, .. } => cm.send_rtu(*comm_id, &[]).is_ok(),
        CmEvent::DreqReceived { comm_id, .. } => cm.send_drep(now, *comm_id, &[]).is_ok(),
        _ => false,
    }
}

#[test]
fn connect_accept_rtu_then_disconnect_and_timewait() {
    let mut p = Pair::new(1);
    let id = p.a.connect(p.now, &params(0x11, 0x155a56)).unwrap();
    assert_eq!(id, 0x0100_0001, "comm IDs carry the configured base");
    assert_eq!(p.a.state(id), Some(State::ReqSent));
    p.run_for(MS);
    let CmEvent::ReqReceived { comm_id: bid, peer, req } = p.ev_b[0].clone() else { panic!("{:?}", p.ev_b) };
    assert_eq!(peer, A);
    assert_eq!((req.remote_comm_id, req.remote_qpn, req.starting_psn), (id, 0x11, 0x155a56));
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.private_data.len(), 92, "the whole REQ private data area");
    p.b.accept(p.now, bid, &accept_params(0x22, 0x777)).unwrap();
    p.run_for(MS);
    let CmEvent::RepReceived { comm_id, rep } = p.ev_a[0].clone() else { panic!("{:?}", p.ev_a) };
    assert_eq!((comm_id, rep.remote_comm_id, rep.remote_qpn, rep.starting_psn), (id, bid, 0x22, 0x777));
    assert_eq!(&rep.private_data[..7], b"welcome");
    p.a.send_rtu(id, &[]).unwrap();
    p.run_for(MS);
    assert_eq!(p.ev_b[1], CmEvent::Established { comm_id: bid });
    assert_eq!((p.a.state(id), p.b.state(bid)), (Some(State::Established), Some(State::Established)));

    p.a.disconnect(p.now, id, b"bye").unwrap();
    p.run_for(MS);
    let CmEvent::DreqReceived { comm_id, private_data } = p.ev_b[2].clone() else { panic!("{:?}", p.ev_b) };
    assert_eq!((comm_id, &private_data[..3]), (bid, &b"bye"[..]));
    p.b.send_drep(p.now, bid, &[]).unwrap();
    p.run_for(MS);
    assert!(matches!(p.ev_a[1], CmEvent::Disconnected { comm_id, timed_out: false, .. } if comm_id == id));
    assert_eq!((p.a.state(id), p.b.state(bid)), (Some(State::Timewait), Some(State::Timewait)));
    // Timewait: the path's ACK timeout 2^(19-8) ms = 2048 ms.
    p.run_for(2000 * MS);
    assert_eq!(p.a.state(id), Some(State::Timewait));
    p.run_for(100 * MS);
    assert_eq!(p.a.state(id), None);
    assert_eq!(p.ev_a.last(), Some(&CmEvent::TimewaitExit { comm_id: id }));
    assert_eq!(p.ev_b.last(), Some(&CmEvent::TimewaitExit { comm_id: bid }));
    assert!(p.a.is_empty() && p.b.is_empty());
    let attrs: Vec<u16> = p.sent.iter().map(|s| s.1).collect();
    assert_eq!(attrs, [attr::REQ, attr::REP, attr::RTU, attr::DREQ, attr::DREP]);
    assert_eq!(p.a.counters().retransmits + p.b.counters().retransmits, 0);
}

#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let mut p = Pair::new(2);
    let mut prm = params(0x11, 1);
    prm.service_id = rdma_cm_service_id(port_space::TCP, 9999);
    let id = p.a.connect(p.now, &prm).unwrap();
    p.run_for(MS);
    assert!(
        matches!(&p.ev_a[0], CmEvent::Rejected { comm_id, reason, .. } if *comm_id == id && *reason == reject::INVALID_SERVICE_ID),
        "{:?}",
        p.ev_a
    );
    assert_eq!(p.a.state(id), None, "a rejected REQ is forgotten at once");
    assert!(p.ev_b.is_empty());
}

#[test]
fn lost_req_is_retransmitted_after_the_kernels_timeout() {
    let mut p = Pair::new(3);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    let t0 = p.now;
    let _ = p.a.poll_transmit(); // the first REQ is lost
                                 // 2 × 2^(18-8) + 2^(20-8) ms = 6144 ms per try.
    assert_eq!(p.a.poll_timeout(), Some(t0 + 6144 * MS));
    p.run_answering(6000 * MS);
    assert!(p.ev_b.is_empty());
    p.run_answering(1000 * MS);
    assert_eq!(p.a.counters().retransmits, 1);
    assert_eq!(p.a.state(id), Some(State::Established));
}

#[test]
fn unanswered_req_gives_up_after_max_cm_retries_with_rej_timeout() {
    let mut p = Pair::new(4);
    p.loss = 100;
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    let t0 = p.now;
    p.run_for(16 * 6144 * MS - MS);
    assert!(p.ev_a.is_empty(), "still trying: {:?}", p.ev_a);
    p.run_for(2 * MS);
    assert_eq!(p.ev_a, [CmEvent::Unreachable { comm_id: id, awaiting: State::ReqSent }]);
    assert_eq!(p.a.counters().retransmits, 15);
    assert!(p.now >= t0 + 16 * 6144 * MS);
    let rejs: Vec<_> = p.sent.iter().filter(|s| s.1 == attr::REJ).collect();
    assert_eq!(rejs.len(), 1, "REJ(timeout) tells the peer");
    assert_eq!(p.a.state(id), None);
}

#[test]
fn mra_stops_retransmission_and_extends_the_wait() {
    let mut p = Pair::new(5);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    p.run_for(MS);
    let CmEvent::ReqReceived { comm_id: bid, .. } = p.ev_b[0] else { panic!() };
    // B asks for 2^(24-8) ms = 65.5 s.
    p.b.send_mra(p.now, bid, 24).unwrap();
    p.run_for(MS);
    assert_eq!(p.a.state(id), Some(State::MraReqRcvd));
    p.run_for(60_000 * MS);
    assert_eq!(p.a.counters().retransmits, 0, "no REQ retransmission after MRA");
    assert_eq!(p.a.state(id), Some(State::MraReqRcvd));
    p.b.accept(p.now, bid, &accept_params(0x22, 5)).unwrap();
    p.run_answering(MS);
    assert_eq!(p.a.state(id), Some(State::Established));
    assert_eq!(p.b.state(bid), Some(State::Established));
}

#[test]
fn mra_timeout_without_rep_gives_unreachable() {
    let mut p = Pair::new(6);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    p.run_for(MS);
    let CmEvent::ReqReceived { comm_id: bid, .. } = p.ev_b[0] else { panic!() };
    p.b.send_mra(p.now, bid, 14).unwrap(); // 64 ms
    p.run_for(MS);
    p.run_for(64 * MS + 2 * 1024 * MS);
    assert_eq!(p.ev_a, [CmEvent::Unreachable { comm_id: id, awaiting: State::MraReqRcvd }]);
}

#[test]
fn duplicates_are_answered_with_what_was_sent() {
    let mut p = Pair::new(7);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    let req = p.a.poll_transmit().unwrap();
    p.b.handle_mad(p.now, A, &req.mad);
    let CmEvent::ReqReceived { comm_id: bid, .. } = p.b.poll_event().unwrap() else { panic!() };
    p.b.accept(p.now, bid, &accept_params(0x22, 5)).unwrap();
    let rep = p.b.poll_transmit().unwrap();
    // A duplicate REQ while REP_SENT: the REP again, no second ReqReceived.
    p.b.handle_mad(p.now, A, &req.mad);
    assert_eq!(p.b.poll_transmit().unwrap().mad, rep.mad);
    assert_eq!(p.b.poll_event(), None);
    p.a.handle_mad(p.now, B, &rep.mad);
    assert!(matches!(p.a.poll_event(), Some(CmEvent::RepReceived { .. })));
    p.a.send_rtu(id, &[]).unwrap();
    let rtu = p.a.poll_transmit().unwrap();
    // The RTU is lost; B's REP is retransmitted: A answers with the RTU again, no new event.
    p.a.handle_mad(p.now, B, &rep.mad);
    assert_eq!(p.a.poll_transmit().unwrap().mad, rtu.mad);
    assert_eq!(p.a.poll_event(), None);
    p.b.handle_mad(p.now, A, &rtu.mad);
    assert_eq!(p.b.poll_event(), Some(CmEvent::Established { comm_id: bid }));
    p.b.handle_mad(p.now, A, &rtu.mad);
    assert_eq!(p.b.poll_event(), None, "duplicate RTU: nothing");
    assert_eq!(p.a.counters().duplicates_received, 1);
    assert_eq!(p.b.counters().duplicates_received, 2);
}

#[test]
fn a_dreq_sent_again_at_once_after_a_loss_is_answered_and_costs_no_retry() {
    // A process about to go away resends its DREQ rather than wait the CM's retry timer.
    let mut p = Pair::new(9);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    p.run_answering(10 * MS);
    assert_eq!(p.a.state(id), Some(State::Established));
    assert!(!p.a.resend_dreq(id), "only a connection waiting for its DREP");
    p.loss = u64::MAX; // the first DREQ is lost
    p.a.disconnect(p.now, id, &[]).unwrap();
    p.flush();
    p.loss = 0;
    p.run_answering(MS);
    assert_eq!(p.a.state(id), Some(State::DreqSent), "the DREQ was lost; its timer is seconds away");
    assert!(p.a.resend_dreq(id));
    p.run_answering(MS);
    assert_eq!(p.a.state(id), Some(State::Timewait), "the copy was answered with the DREP");
    assert!(matches!(p.ev_a.last(), Some(CmEvent::Disconnected { timed_out: false, .. })));
    assert_eq!(p.a.counters().retransmits, 1);
    assert!(!p.a.resend_dreq(id));
    assert!(!p.a.resend_dreq(0x0100_7777), "no such connection");
}

#[test]
fn simultaneous_disconnect_ends_in_timewait_on_both_sides() {
    let mut p = Pair::new(8);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    p.run_answering(10 * MS);
    let bid = p.ev_b.iter().find_map(|e| if let CmEvent::Established { comm_id } = e { Some(*comm_id) } else { None });
    let bid = bid.unwrap();
    p.a.disconnect(p.now, id, &[]).unwrap();
    p.b.disconnect(p.now, bid, &[]).unwrap();
    p.run_answering(10 * MS);
    assert_eq!((p.a.state(id), p.b.state(bid)), (Some(State::Timewait), Some(State::Timewait)));
    assert_eq!(Pair::count(&p.ev_a, |e| matches!(e, CmEvent::DreqReceived { .. })), 1);
    assert_eq!(Pair::count(&p.ev_b, |e| matches!(e, CmEvent::DreqReceived { .. })), 1);
    p.run_answering(3000 * MS);
    assert!(p.a.is_empty() && p.b.is_empty());
    assert_eq!(p.a.counters().retransmits + p.b.counters().retransmits, 0);
}

#[test]
fn stray_messages_get_the_kernels_answers() {
    let mut b = cm(B, 2, 0x0200_0000);
    let rep = CmMessage::Rep(Rep {
        local_comm_id: 0x0100_0009,
        remote_comm_id: 0x0200_0099,
        local_qkey: 0,
        local_qpn: 0x11,
        local_eecn: 0,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 0,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 1,
        private_data: &[],
    });
    let mut mad = [0u8; MAD_LEN];
    rep.emit(5, &mut mad).unwrap();
    b.handle_mad(0, A, &mad);
    let out = b.poll_transmit().unwrap();
    let (hdr, msg) = CmMessage::parse(&out.mad).unwrap();
    assert_eq!(hdr.transaction_id, 5, "answers carry the stray's TID");
    let CmMessage::Rej(r) = msg else { panic!("{msg:?}") };
    assert_eq!((r.reason, r.remote_comm_id, r.message_rejected), (reject::INVALID_COMM_ID, 0x0100_0009, 1));

    let dreq = CmMessage::Dreq(Dreq {
        local_comm_id: 0x0100_0009,
        remote_comm_id: 0x0200_0042,
        remote_qpn: 0x11,
        private_data: &[],
    });
    dreq.emit(6, &mut mad).unwrap();
    b.handle_mad(0, A, &mad);
    let out = b.poll_transmit().unwrap();
    let (_, msg) = CmMessage::parse(&out.mad).unwrap();
    assert!(matches!(msg, CmMessage::Drep(d) if d.local_comm_id == 0x0200_0042 && d.remote_comm_id == 0x0100_0009));

    for bytes in [&[0u8; 10][..], &[0xFFu8; MAD_LEN][..]] {
        b.handle_mad(0, A, bytes);
    }
    assert_eq!(b.counters().malformed_dropped, 2);
    assert_eq!(b.counters().stray_dropped, 2);
    assert_eq!(b.poll_transmit(), None);
    assert_eq!(b.poll_event(), None);
}

#[test]
fn a_req_from_a_qp_with_a_live_connection_is_stale() {
    let mut p = Pair::new(9);
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    p.run_answering(10 * MS);
    assert_eq!(p.a.state(id), Some(State::Established));
    // A restarts (new CM, same GUID and QPN; its comm ID counter continued) and connects
    // again: B refuses with "stale" and disconnects the old connection.
    p.a = Cm::new(CmConfig {
        local_gid: gid(A),
        ca_guid: 0x5054_00ff_fe77_0003,
        comm_id_base: 0x0100_0000,
        first_comm_id: 100,
        packet_life_time: 18,
    });
    p.ev_a.clear();
    let id2 = p.a.connect(p.now, &params(0x11, 2)).unwrap();
    p.run_for(MS);
    assert!(
        p.ev_a.iter().any(|e| matches!(e, CmEvent::Rejected { comm_id, reason, .. } if *comm_id == id2 && *reason == reject::STALE_CONN)),
        "{:?}",
        p.ev_a
    );
    assert!(p.sent.iter().any(|s| !s.0 && s.1 == attr::DREQ), "B ends the old connection");
}

#[test]
fn sidr_resolves_a_service_and_times_out_without_answer() {
    let mut p = Pair::new(10);
    let rid = p.a.sidr_request(p.now, B, SERVICE, 20, 3, b"ud").unwrap();
    p.run_for(MS);
    let CmEvent::SidrReqReceived { request_id, service_id, private_data, .. } = p.ev_b[0].clone() else { panic!() };
    assert_eq!((service_id, &private_data[..2]), (SERVICE, &b"ud"[..]));
    p.b.send_sidr_rep(request_id, sidr_status::VALID, 0x33, 0x0123_4567, &[]).unwrap();
    p.run_for(MS);
    assert!(
        matches!(&p.ev_a[0], CmEvent::SidrRepReceived { request_id, status: 0, qpn: 0x33, qkey: 0x0123_4567, .. } if *request_id == rid)
    );
    assert!(p.a.is_empty() && p.b.is_empty());

    let rid = p.a.sidr_request(p.now, B, 0x0111_0001, 12, 2, &[]).unwrap();
    p.run_for(MS);
    assert!(matches!(&p.ev_a[1], CmEvent::SidrRepReceived { request_id, status: 1, .. } if *request_id == rid));

    p.loss = 100;
    let rid = p.a.sidr_request(p.now, B, SERVICE, 12, 2, &[]).unwrap();
    p.run_for(3 * 16 * MS + MS);
    assert_eq!(p.ev_a[2], CmEvent::SidrTimeout { request_id: rid });
}

#[test]
fn commands_in_the_wrong_state_or_with_too_much_private_data_are_refused() {
    let mut p = Pair::new(11);
    assert_eq!(p.a.send_rtu(42, &[]), Err(CmError::NotFound));
    let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
    assert_eq!(p.a.send_rtu(id, &[]), Err(CmError::InvalidState(State::ReqSent)));
    assert_eq!(p.a.disconnect(p.now, id, &[]), Err(CmError::InvalidState(State::ReqSent)));
    assert_eq!(p.a.accept(p.now, id, &accept_params(1, 1)), Err(CmError::InvalidState(State::ReqSent)));
    let mut prm = params(0x12, 1);
    prm.private_data = vec![0; 93];
    assert_eq!(p.a.connect(p.now, &prm), Err(CmError::PrivateDataTooLong { len: 93, max: 92 }));
    assert_eq!(p.b.listen(SERVICE, ListenQp::Rc), Err(CmError::AddressInUse));
    assert_eq!(CmError::AddressInUse.errno(), libc::EADDRINUSE);
}

#[test]
fn our_req_equals_the_kernels_for_the_same_connection() {
    // rdma_cm.pcap frame 1: rping's REQ from 10.77.0.3 (comm ID 0x35303a54, QPN 0x11, PSN
    // 0x155a56, CMA header with source port 0x8716).
    let golden = hex(concat!(
        "010702030000000000000002543a3035001000000000000035303a54000000000000000001061c06505400fffe77000300000000000000",
        "000000110100000001000000a0155a56a7ffff37f0ffffffff00000000000000000000ffff0a4d000300000000000000000000ffff0a4d",
        "0002077b000000400098000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
        "4087160000000000000000000000000a4d00030000000000000000000000000a4d0002",
    ));
    let mut a = Cm::new(CmConfig {
        local_gid: gid(A),
        ca_guid: 0x5054_00ff_fe77_0003,
        comm_id_base: 0x3500_0000,
        first_comm_id: 0x30_3a54,
        packet_life_time: 18,
    });
    let mut prm = params(0x11, 0x155a56);
    let mut pdata = vec![0u8; CMA_HEADER_LEN];
    CmaHeader { version: 0, src_port: 0x8716, src: A, dst: B }.emit(&mut pdata);
    prm.private_data = pdata;
    let id = a.connect(0, &prm).unwrap();
    assert_eq!(id, 0x3530_3a54);
    let out = a.poll_transmit().unwrap();
    assert_eq!(out.peer, B);
    let mut want = [0u8; MAD_LEN];
    want[..golden.len()].copy_from_slice(&golden);
    // Everything but the transaction ID (the kernel's MAD agent number) is identical.
    assert_eq!(&out.mad[..8], &want[..8]);
    assert_eq!(&out.mad[16..], &want[16..]);
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Connect, then disconnect, over a network with loss, duplication and reordering: every seed
/// ends with both sides connected exactly once and then gone, each event delivered once.
#[test]
fn lossy_sweep_connects_and_disconnects_exactly_once() {
    let seeds = std::env::var("URXE_CM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300u64);
    let (mut retransmits, mut gave_up) = (0, 0);
    for seed in 0..seeds {
        let mut p = Pair::new(seed);
        (p.loss, p.dup, p.reorder) = (10, 5, 30);
        let id = p.a.connect(p.now, &params(0x11, 1)).unwrap();
        p.run_answering(600_000 * MS);
        let est_a = p.a.state(id) == Some(State::Established);
        let est_b = Pair::count(&p.ev_b, |e| matches!(e, CmEvent::Established { .. }));
        assert!(est_a, "seed {seed}: A not established: {:?}", p.ev_a);
        assert_eq!(Pair::count(&p.ev_a, |e| matches!(e, CmEvent::RepReceived { .. })), 1, "seed {seed}");
        assert_eq!(Pair::count(&p.ev_b, |e| matches!(e, CmEvent::ReqReceived { .. })), 1, "seed {seed}");
        // B may learn of it from the RTU, or (RTU lost, REP retries exhausted) not at all:
        // then B gave up with REJ(timeout) and A was told.
        if est_b == 0 {
            assert!(p.ev_b.iter().any(|e| matches!(e, CmEvent::Unreachable { .. })), "seed {seed}: {:?}", p.ev_b);
            gave_up += 1;
            continue;
        }
        p.a.disconnect(p.now, id, &[]).unwrap();
        p.run_answering(600_000 * MS);
        assert_eq!(Pair::count(&p.ev_b, |e| matches!(e, CmEvent::DreqReceived { .. })), 1, "seed {seed}");
        assert_eq!(Pair::count(&p.ev_a, |e| matches!(e, CmEvent::Disconnected { .. })), 1, "seed {seed}");
        assert!(p.a.is_empty() && p.b.is_empty(), "seed {seed}: timewait ends on both sides");
        assert_eq!(Pair::count(&p.ev_a, |e| matches!(e, CmEvent::TimewaitExit { .. })), 1, "seed {seed}");
        retransmits += p.a.counters().retransmits + p.b.counters().retransmits;
    }
    println!("{seeds} seeds: {retransmits} retransmissions, {gave_up} passive sides gave up");
    assert!(retransmits > seeds / 10, "the sweep did exercise retransmission");
}
