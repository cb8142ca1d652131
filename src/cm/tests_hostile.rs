//! The CM against requests nobody answers, forged fields and messages of the wrong kind
//! (issue 37 items 1, 6, 8): what the kernel's CM and CMA do with them.

use std::net::{IpAddr, Ipv4Addr};

use super::*;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
const MS: Nanos = 1_000_000;
const SECOND: Nanos = 1_000 * MS;
const RC_SERVICE: u64 = 0x0106_1c06;
const UD_SERVICE: u64 = 0x0111_1c07;

fn cm(ip: IpAddr, base: u32) -> Cm {
    let gid = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    };
    Cm::new(CmConfig {
        local_gid: gid,
        ca_guid: u64::from(base),
        comm_id_base: base,
        first_comm_id: 1,
        packet_life_time: 18,
    })
}

fn listener() -> Cm {
    let mut b = cm(B, 0x0200_0000);
    b.listen(RC_SERVICE, ListenQp::Rc).unwrap();
    b.listen(UD_SERVICE, ListenQp::Ud).unwrap();
    b
}

/// A REQ from A's QP `qpn` for `service` (transport type `tst`, 1 + `retries` tries of
/// 2 × 1.024 s + 2^(`timeout`-8) ms each), as bytes.
fn req(a: &mut Cm, service: u64, qpn: u32, tst: u8, timeout: u8, retries: u8) -> [u8; MAD_LEN] {
    let p = ConnectParams {
        peer: B,
        service_id: service,
        local_qpn: qpn,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        transport_service_type: tst,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        primary: CmPath::default(),
        remote_cm_response_timeout: timeout,
        local_cm_response_timeout: timeout,
        max_cm_retries: retries,
        private_data: Vec::new(),
    };
    a.connect(0, &p).unwrap();
    a.poll_transmit().unwrap().mad
}

fn sidr_req(a: &mut Cm, service: u64) -> [u8; MAD_LEN] {
    a.sidr_request(0, B, service, 20, 15, &[]).unwrap();
    a.poll_transmit().unwrap().mad
}

fn drain(b: &mut Cm) -> (Vec<CmEvent>, Vec<CmMessage<'static>>) {
    let ev = std::iter::from_fn(|| b.poll_event()).collect();
    let out: Vec<Outgoing> = std::iter::from_fn(|| b.poll_transmit()).collect();
    let msgs = out
        .into_iter()
        .map(|o| {
            let mad: &'static [u8; MAD_LEN] = Box::leak(Box::new(o.mad));
            CmMessage::parse(mad).unwrap().1
        })
        .collect();
    (ev, msgs)
}

#[test]
fn an_unanswered_req_is_released_when_its_requester_stops_waiting() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    // 1 + 15 tries of 2 × 1.024 s + 4.096 s: the requester waits 98.3 s.
    let t0 = 5 * SECOND;
    b.handle_mad(t0, A, &req(&mut a, RC_SERVICE, 0x11, 0, 20, 15));
    let (ev, _) = drain(&mut b);
    let [CmEvent::ReqReceived { comm_id, .. }] = ev[..] else { panic!("{ev:?}") };
    let wait = 16 * (2 * 1024 + 4096) * MS;
    assert_eq!(b.poll_timeout(), Some(t0 + wait));
    b.handle_timeout(t0 + wait - 1);
    assert_eq!(b.state(comm_id), Some(State::ReqRcvd));
    b.handle_timeout(t0 + wait);
    assert_eq!(drain(&mut b).0, [CmEvent::RequestExpired { comm_id }]);
    assert!(b.is_empty() && b.poll_timeout().is_none());
    assert_eq!(b.counters().requests_expired, 1);
    assert_eq!(b.accept(t0 + wait, comm_id, &accept(0x22)), Err(CmError::NotFound));
}

fn accept(qpn: u32) -> AcceptParams {
    AcceptParams {
        local_qpn: qpn,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 0,
        rnr_retry_count: 7,
        srq: false,
        private_data: Vec::new(),
    }
}

#[test]
fn an_mra_extends_the_wait_to_what_it_asked_for_and_a_duplicate_req_restarts_it() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    // 1 + 2 tries of 2.048 s + 256 ms = 6.9 s, then the MRA asks for 2^16 ms.
    let mad = req(&mut a, RC_SERVICE, 0x11, 0, 16, 2);
    b.handle_mad(0, A, &mad);
    let (ev, _) = drain(&mut b);
    let [CmEvent::ReqReceived { comm_id, .. }] = ev[..] else { panic!("{ev:?}") };
    b.send_mra(0, comm_id, 24).unwrap();
    drain(&mut b);
    let wait = (1 << 16) * MS + 2 * 1024 * MS;
    assert_eq!(b.poll_timeout(), Some(wait));
    // The requester tries again after the MRA's time: the wait starts over.
    b.handle_mad(wait - MS, A, &mad);
    let (_, out) = drain(&mut b);
    assert!(matches!(out[..], [CmMessage::Mra(_)]), "the MRA again: {out:?}");
    b.handle_timeout(wait);
    assert_eq!(b.state(comm_id), Some(State::MraReqSent));
    b.handle_timeout(2 * wait - MS);
    assert_eq!(drain(&mut b).0, [CmEvent::RequestExpired { comm_id }]);
    assert!(b.is_empty());
}

#[test]
fn an_unanswered_sidr_req_is_released_after_the_kernels_longest_sidr_wait() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    b.handle_mad(0, A, &sidr_req(&mut a, UD_SERVICE));
    let (ev, _) = drain(&mut b);
    let [CmEvent::SidrReqReceived { request_id, .. }] = ev[..] else { panic!("{ev:?}") };
    b.handle_timeout(SIDR_REQ_RCVD_WAIT - 1);
    assert_eq!(b.state(request_id), Some(State::SidrReqRcvd));
    b.handle_timeout(SIDR_REQ_RCVD_WAIT);
    assert_eq!(drain(&mut b).0, [CmEvent::RequestExpired { comm_id: request_id }]);
    assert!(b.is_empty());
}

#[test]
fn ten_thousand_unanswered_requests_all_expire_and_timers_stay_ordered() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    for i in 0..10_000u32 {
        let mad = if i % 2 == 0 { req(&mut a, RC_SERVICE, 0x100 + i, 0, 16, 0) } else { sidr_req(&mut a, UD_SERVICE) };
        b.handle_mad(u64::from(i) * 1000, A, &mad);
    }
    assert_eq!(b.len(), 10_000);
    // The earliest timer is the first REQ's: 2.048 s + 256 ms after it came.
    assert_eq!(b.poll_timeout(), Some((2 * 1024 + 256) * MS));
    b.handle_timeout(SIDR_REQ_RCVD_WAIT + 10 * SECOND);
    assert!(b.is_empty() && b.poll_timeout().is_none());
    assert_eq!(b.counters().requests_expired, 10_000);
}

#[test]
fn refused_for_backlog_a_req_is_forgotten_unanswered_and_a_sidr_req_rejected() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    let mad = req(&mut a, RC_SERVICE, 0x11, 0, 20, 15);
    b.handle_mad(0, A, &mad);
    let (ev, _) = drain(&mut b);
    let [CmEvent::ReqReceived { comm_id, .. }] = ev[..] else { panic!("{ev:?}") };
    b.refuse_request(comm_id).unwrap();
    assert!(drain(&mut b).1.is_empty(), "no REJ: the requester's next try may find room");
    assert!(b.is_empty());
    // Its retransmission is a new request, not a duplicate of a forgotten one.
    b.handle_mad(SECOND, A, &mad);
    assert!(matches!(drain(&mut b).0[..], [CmEvent::ReqReceived { .. }]));

    b.handle_mad(0, A, &sidr_req(&mut a, UD_SERVICE));
    let (ev, _) = drain(&mut b);
    let [CmEvent::SidrReqReceived { request_id, .. }] = ev[..] else { panic!("{ev:?}") };
    b.refuse_request(request_id).unwrap();
    let (_, out) = drain(&mut b);
    assert!(matches!(out[..], [CmMessage::SidrRep(r)] if r.status == sidr_status::REJECTED), "{out:?}");
    assert_eq!(b.counters().backlog_refused, 2);
}

#[test]
fn requests_for_another_qp_type_than_the_listeners_are_refused_as_the_kernel_does() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    // UC REQ to an RC listener; RC REQ to a UD listener: REJ "consumer defined".
    for (service, tst) in [(RC_SERVICE, 1), (UD_SERVICE, 0)] {
        b.handle_mad(0, A, &req(&mut a, service, 0x11, tst, 20, 15));
        let (ev, out) = drain(&mut b);
        assert!(ev.is_empty(), "{ev:?}");
        assert!(matches!(out[..], [CmMessage::Rej(r)] if r.reason == reject::CONSUMER_DEFINED), "{out:?}");
    }
    // SIDR_REQ to an RC (TCP port space) listener: SIDR_REP "rejected", never shown.
    b.handle_mad(0, A, &sidr_req(&mut a, RC_SERVICE));
    let (ev, out) = drain(&mut b);
    assert!(ev.is_empty(), "{ev:?}");
    assert!(matches!(out[..], [CmMessage::SidrRep(r)] if r.status == sidr_status::REJECTED), "{out:?}");
    assert_eq!(b.counters().qp_type_rejected, 3);
    assert!(b.is_empty());
    // A UC REQ to a UC listener is taken.
    b.listen(0x0106_0001, ListenQp::Uc).unwrap();
    b.handle_mad(0, A, &req(&mut a, 0x0106_0001, 0x12, 1, 20, 15));
    assert!(matches!(drain(&mut b).0[..], [CmEvent::ReqReceived { .. }]));
}

#[test]
fn cm_mads_whose_method_is_not_send_are_dropped_and_counted() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    // GET (1), SET (2), GET response (0x81), a response-bit SEND (0x83).
    for method in [0x01u8, 0x02, 0x81, 0x83] {
        let mut mad = req(&mut a, RC_SERVICE, 0x11, 0, 20, 15);
        mad[3] = method;
        b.handle_mad(0, A, &mad);
        let mut mad = sidr_req(&mut a, UD_SERVICE);
        mad[3] = method;
        b.handle_mad(0, A, &mad);
    }
    let (ev, out) = drain(&mut b);
    assert!(ev.is_empty() && out.is_empty(), "{ev:?} {out:?}");
    assert_eq!(b.counters().bad_method_dropped, 8);
    assert!(b.is_empty());
}

#[test]
fn a_dreq_naming_another_qp_is_ignored() {
    let (mut a, mut b) = (cm(A, 0x0100_0000), listener());
    b.handle_mad(0, A, &req(&mut a, RC_SERVICE, 0x11, 0, 20, 15));
    let (ev, _) = drain(&mut b);
    let [CmEvent::ReqReceived { comm_id, ref req, .. }] = ev[..] else { panic!("{ev:?}") };
    let a_id = req.remote_comm_id;
    b.accept(0, comm_id, &accept(0x22)).unwrap();
    b.handle_mad(MS, A, &rtu(a_id, comm_id));
    assert_eq!(b.state(comm_id), Some(State::Established));
    drain(&mut b);
    // Right comm IDs, wrong QPN: ignored (no DREP, no event), counted.
    b.handle_mad(2 * MS, A, &dreq(a_id, comm_id, 0x23));
    let (ev, out) = drain(&mut b);
    assert!(ev.is_empty() && out.is_empty(), "{ev:?} {out:?}");
    assert_eq!(b.state(comm_id), Some(State::Established));
    assert_eq!(b.counters().dreq_wrong_qpn, 1);
    // Our QPN: the disconnection goes ahead.
    b.handle_mad(3 * MS, A, &dreq(a_id, comm_id, 0x22));
    assert!(matches!(drain(&mut b).0[..], [CmEvent::DreqReceived { .. }]));
}

fn rtu(local: CommId, remote: CommId) -> [u8; MAD_LEN] {
    let mut mad = [0u8; MAD_LEN];
    CmMessage::Rtu(CommIds { local_comm_id: local, remote_comm_id: remote, private_data: &[] })
        .emit(9, &mut mad)
        .unwrap();
    mad
}

fn dreq(local: CommId, remote: CommId, qpn: u32) -> [u8; MAD_LEN] {
    let mut mad = [0u8; MAD_LEN];
    CmMessage::Dreq(Dreq { local_comm_id: local, remote_comm_id: remote, remote_qpn: qpn, private_data: &[] })
        .emit(9, &mut mad)
        .unwrap();
    mad
}
