//! The rdma_cm ID's connection decisions (src/cm/rdma_conn.rs): conn_param → CM fields, the
//! private data limits and their errno, and the CM event → rdma_cm event transitions.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::rdma_conn::*;
use super::rdma_id::*;
use super::{reject, sidr_status, CmEvent, CommId, RepInfo, State};
use crate::wire::cm::{CmaHeader, CMA_HEADER_LEN};

const SRC: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3)), 40001);
const DST: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2)), 7471);
const PS_TCP: i32 = 0x0106;
const PS_UDP: i32 = 0x0111;
const DEV: DevicePath = DevicePath { gid: [7; 16], active_mtu: 3 };
const COMM: CommId = 0x0100_0042;

fn routed(ps: i32, qpt: i32) -> RdmaId {
    let mut id = RdmaId::new(ps, qpt);
    id.src = Some(SRC);
    id.dst = Some(DST);
    id.bound = true;
    id.state = IdState::RouteResolved;
    id
}

fn requested(qpt: i32, theirs_rr: u8, theirs_id: u8) -> RdmaId {
    let mut id = RdmaId::new(if qpt == QPT_UD { PS_UDP } else { PS_TCP }, qpt);
    id.state = IdState::RequestReceived;
    id.comm = Some(COMM);
    // What on_req records from the REQ: our responder resources may go up to their initiator
    // depth, our initiator depth up to their responder resources.
    id.agreed.responder_resources = theirs_id;
    id.agreed.initiator_depth = theirs_rr;
    id.agreed.local_psn = 0x12_3456;
    id
}

fn param(pdata: &[u8]) -> ConnParam<'_> {
    ConnParam { private_data: pdata, ..ConnParam::librdmacm_default() }
}

#[test]
fn connect_is_valid_only_with_a_resolved_route_and_changes_nothing_when_refused() {
    for s in [IdState::Idle, IdState::AddrBound, IdState::AddrResolved, IdState::Listening, IdState::Connected] {
        let mut id = routed(PS_TCP, QPT_RC);
        id.state = s;
        let before = id.clone();
        assert_eq!(id.connect(&param(&[]), Some(9), 1, &DEV, &mut NoFaults).err(), Some(libc::EINVAL), "{s:?}");
        assert_eq!(id, before);
    }
    let mut id = routed(PS_TCP, QPT_RC);
    id.dst = None;
    assert_eq!(id.connect(&param(&[]), Some(9), 1, &DEV, &mut NoFaults).err(), Some(libc::EINVAL));
}

#[test]
fn connect_private_data_fits_the_req_after_the_cma_header_else_einval() {
    // REQ: 92 bytes of room, 36 of them the CMA header: 56 for the user.
    let room = 92 - CMA_HEADER_LEN;
    let ok = vec![0xAB; room];
    let mut id = routed(PS_TCP, QPT_RC);
    let Connect::Req(req) = id.connect(&param(&ok), Some(9), 1, &DEV, &mut NoFaults).unwrap() else {
        panic!("an RC ID sends a REQ")
    };
    assert_eq!(req.private_data.len(), 92);
    assert_eq!(&req.private_data[CMA_HEADER_LEN..], &ok[..]);
    let hdr = CmaHeader::parse(&req.private_data).unwrap();
    assert_eq!((hdr.src, hdr.src_port, hdr.dst), (SRC.ip(), SRC.port(), DST.ip()));

    let too_long = vec![0xAB; room + 1];
    let mut id = routed(PS_TCP, QPT_RC);
    let before = id.clone();
    assert_eq!(id.connect(&param(&too_long), Some(9), 1, &DEV, &mut NoFaults).err(), Some(libc::EINVAL));
    assert_eq!(id, before, "a refused connect records nothing");

    // SIDR_REQ: 216 - 36 = 180.
    let mut id = routed(PS_UDP, QPT_UD);
    assert!(id.connect(&param(&[1; 180]), None, 1, &DEV, &mut NoFaults).is_ok());
    let mut id = routed(PS_UDP, QPT_UD);
    assert_eq!(id.connect(&param(&[1; 181]), None, 1, &DEV, &mut NoFaults).err(), Some(libc::EINVAL));
}

#[test]
fn connect_turns_conn_param_into_the_req_fields_clamped_to_the_device() {
    let mut id = routed(PS_TCP, QPT_RC);
    id.tos = 0x28;
    let p = ConnParam {
        private_data: &[],
        responder_resources: 200,
        initiator_depth: 255,
        retry_count: 9,
        rnr_retry_count: 12,
        srq: true,
        qp_num: 77,
    };
    let Connect::Req(req) = id.connect(&p, Some(0x11), 0xAB_CDEF, &DEV, &mut NoFaults).unwrap() else { panic!("REQ") };
    assert_eq!(req.peer, DST.ip());
    assert_eq!(req.service_id, (0x0106 << 16) | 7471);
    assert_eq!(req.local_qpn, 0x11, "the ID's QP wins over conn_param.qp_num");
    assert_eq!(req.starting_psn, 0xAB_CDEF);
    assert_eq!((req.responder_resources, req.initiator_depth), (DEVICE_MAX_RD_ATOMIC, DEVICE_MAX_RD_ATOMIC));
    assert_eq!((req.retry_count, req.rnr_retry_count), (7, 7));
    assert_eq!(req.transport_service_type, 0);
    assert!(req.srq);
    assert_eq!(req.path_mtu, DEV.active_mtu);
    assert_eq!(req.primary.traffic_class, 0x28);
    assert_eq!(req.primary.local_gid, DEV.gid);
    assert_eq!(req.primary.remote_gid, gid_of(DST.ip()));
    assert_eq!(req.primary.local_ack_timeout, PACKET_LIFE_TIME + 1);
    assert_eq!(req.primary.flow_label, flow_label(SRC.port(), DST.port()));
    assert_eq!((req.max_cm_retries, req.remote_cm_response_timeout), (MAX_CM_RETRIES, CM_RESPONSE_TIMEOUT));
    assert_eq!((id.agreed.local_psn, id.agreed.retry_count, id.agreed.path_mtu), (0xAB_CDEF, 7, 3));
    assert_eq!(id.state, IdState::RouteResolved, "sent is a separate step");
    id.connect_sent(COMM);
    assert_eq!((id.state, id.comm), (IdState::Connecting, Some(COMM)));

    // No QP: conn_param.qp_num is announced; UC says so in the REQ; ack timeout option wins.
    let mut id = routed(PS_TCP, QPT_UC);
    id.ack_timeout = Some(14);
    let Connect::Req(req) = id.connect(&p, None, 1, &DEV, &mut NoFaults).unwrap() else { panic!("REQ") };
    assert_eq!((req.local_qpn, req.transport_service_type, req.primary.local_ack_timeout), (77, 1, 14));

    // UD: a SIDR_REQ for the destination's service.
    let mut id = routed(PS_UDP, QPT_UD);
    match id.connect(&param(b"hi"), None, 1, &DEV, &mut NoFaults).unwrap() {
        Connect::Sidr { peer, service_id, timeout, max_retries, private_data } => {
            assert_eq!((peer, service_id), (DST.ip(), (0x0111 << 16) | 7471));
            assert_eq!((timeout, max_retries), (SIDR_TIMEOUT, MAX_CM_RETRIES));
            assert_eq!(&private_data[CMA_HEADER_LEN..], b"hi");
        }
        other => panic!("a UD ID sends a SIDR_REQ, not {other:?}"),
    }
}

#[test]
fn accept_negotiates_against_the_request_and_checks_the_rep_room() {
    // They offered responder resources 4, initiator depth 2.
    let mut id = requested(QPT_RC, 4, 2);
    let p = ConnParam { responder_resources: 16, initiator_depth: 16, rnr_retry_count: 9, ..param(&[5; 196]) };
    let Accept::Rep { comm, params } = id.accept(&p, Some(0x22), &mut NoFaults).unwrap() else { panic!("REP") };
    assert_eq!(comm, COMM);
    assert_eq!((params.responder_resources, params.initiator_depth), (2, 4));
    assert_eq!((params.local_qpn, params.starting_psn, params.rnr_retry_count), (0x22, 0x12_3456, 7));
    assert_eq!(params.private_data.len(), 196);
    assert_eq!((id.agreed.responder_resources, id.agreed.initiator_depth), (2, 4));
    id.accept_sent();
    assert_eq!(id.state, IdState::Accepted);

    // A requester that asked for no RDMA READ still gets responder resources of 1 at most
    // what the user offers (the kernel's CMA never sends 0 when the user offers some).
    let mut id = requested(QPT_RC, 0, 0);
    let Accept::Rep { params, .. } = id.accept(&param(&[]), None, &mut NoFaults).unwrap() else { panic!("REP") };
    assert_eq!((params.responder_resources, params.initiator_depth), (1, 0));

    let mut id = requested(QPT_RC, 4, 2);
    let before = id.clone();
    assert_eq!(id.accept(&param(&[5; 197]), None, &mut NoFaults).err(), Some(libc::EINVAL));
    assert_eq!(id, before);

    let mut id = requested(QPT_RC, 4, 2);
    id.state = IdState::Connected;
    assert_eq!(id.accept(&param(&[]), None, &mut NoFaults).err(), Some(libc::EINVAL), "answered already");
    let mut id = requested(QPT_RC, 4, 2);
    id.comm = None;
    assert_eq!(id.accept(&param(&[]), None, &mut NoFaults).err(), Some(libc::EINVAL));

    // UD: a valid SIDR_REP with the rdma_cm Q_Key; 136 bytes of room.
    let mut id = requested(QPT_UD, 0, 0);
    match id.accept(&ConnParam { qp_num: 0x33, ..param(&[1; 136]) }, None, &mut NoFaults).unwrap() {
        Accept::SidrRep { comm, qpn, qkey, private_data } => {
            assert_eq!((comm, qpn, qkey, private_data.len()), (COMM, 0x33, RDMA_UDP_QKEY, 136))
        }
        other => panic!("SIDR_REP, not {other:?}"),
    }
    id.accept_sent();
    assert_eq!((id.state, id.comm), (IdState::Connected, None));
    let mut id = requested(QPT_UD, 0, 0);
    assert_eq!(id.accept(&param(&[1; 137]), None, &mut NoFaults).err(), Some(libc::EINVAL));
}

#[test]
fn reject_sends_a_consumer_defined_rej_within_its_room() {
    let mut id = requested(QPT_RC, 1, 1);
    assert_eq!(
        id.reject(&[9; 148], &mut NoFaults),
        Ok(Reject::Rej { comm: COMM, reason: reject::CONSUMER_DEFINED, private_data: vec![9; 148] })
    );
    assert_eq!(id.reject(&[9; 149], &mut NoFaults), Err(libc::EINVAL));
    id.reject_sent();
    assert_eq!((id.state, id.comm), (IdState::Disconnected, None));
    assert_eq!(id.reject(&[], &mut NoFaults), Err(libc::EINVAL), "nothing left to reject");

    let id = requested(QPT_UD, 0, 0);
    assert_eq!(
        id.reject(b"no", &mut NoFaults),
        Ok(Reject::SidrRep { comm: COMM, status: sidr_status::REJECTED, private_data: b"no".to_vec() })
    );
    assert_eq!(id.reject(&[0; 137], &mut NoFaults), Err(libc::EINVAL));
}

fn rep() -> CmEvent {
    CmEvent::RepReceived {
        comm_id: COMM,
        rep: Box::new(RepInfo {
            remote_comm_id: 5,
            remote_qpn: 0x99,
            starting_psn: 0x77,
            responder_resources: 3,
            initiator_depth: 6,
            rnr_retry_count: 4,
            srq: false,
            remote_ca_guid: 1,
            private_data: vec![],
        }),
    }
}

#[test]
fn each_cm_event_becomes_its_rdma_cm_event_with_its_status_and_state() {
    use IdState::*;
    let post = |event, status, forget_comm| Some(Post { event, status, forget_comm });
    let cases: Vec<(CmEvent, Option<Post>, IdState)> = vec![
        (rep(), post(event::CONNECT_RESPONSE, 0, false), ResponseReceived),
        (CmEvent::Established { comm_id: COMM }, post(event::ESTABLISHED, 0, false), Connected),
        (
            CmEvent::Rejected { comm_id: COMM, reason: 8, ari: vec![], private_data: vec![] },
            post(event::REJECTED, 8, true),
            Disconnected,
        ),
        (
            CmEvent::Unreachable { comm_id: COMM, awaiting: State::ReqSent },
            post(event::UNREACHABLE, -libc::ETIMEDOUT, true),
            Disconnected,
        ),
        (
            CmEvent::DreqReceived { comm_id: COMM, private_data: vec![] },
            post(event::DISCONNECTED, 0, false),
            Disconnected,
        ),
        (
            CmEvent::Disconnected { comm_id: COMM, private_data: vec![], timed_out: false },
            post(event::DISCONNECTED, 0, false),
            Disconnected,
        ),
        (CmEvent::TimewaitExit { comm_id: COMM }, post(event::TIMEWAIT_EXIT, 0, true), Connecting),
        (
            CmEvent::SidrRepReceived {
                request_id: COMM,
                status: sidr_status::VALID,
                qpn: 1,
                qkey: 2,
                private_data: vec![],
            },
            post(event::ESTABLISHED, 0, true),
            Connected,
        ),
        (
            CmEvent::SidrRepReceived {
                request_id: COMM,
                status: sidr_status::NO_QP,
                qpn: 0,
                qkey: 0,
                private_data: vec![],
            },
            post(event::UNREACHABLE, -libc::EINVAL, true),
            Connecting,
        ),
        (CmEvent::SidrTimeout { request_id: COMM }, post(event::UNREACHABLE, -libc::ETIMEDOUT, true), Connecting),
        (CmEvent::RequestExpired { comm_id: COMM }, None, Connecting),
    ];
    for (ev, want, state) in cases {
        let mut id = routed(PS_TCP, QPT_RC);
        id.connect_sent(COMM);
        let name = format!("{ev:?}");
        assert_eq!(id.handle_cm(ev, &mut NoFaults).map(|(p, _)| p), want, "{name}");
        assert_eq!(id.state, state, "{name}");
    }
}

#[test]
fn a_rep_records_what_the_peer_agreed_crosswise() {
    let mut id = routed(PS_TCP, QPT_RC);
    id.connect_sent(COMM);
    id.handle_cm(rep(), &mut NoFaults);
    let a = id.agreed;
    assert_eq!((a.remote_qpn, a.remote_psn, a.rnr_retry_count), (0x99, 0x77, 4));
    // Their initiator depth (6) bounds our responder resources, their responder resources (3)
    // our initiator depth.
    assert_eq!((a.responder_resources, a.initiator_depth), (6, 3));
}

/// A fault plan as rdmacm's faults.rs would give: refuse calls, turn the REP into a REJ with a
/// reason, lose the RTU.
struct Script {
    refuse: Option<(Call, Errno)>,
    rej_reason: Option<u16>,
    lose_rtu: bool,
}

impl IdFaults for Script {
    fn call(&mut self, call: Call, _id: &RdmaId) -> Option<Errno> {
        self.refuse.filter(|(c, _)| *c == call).map(|(_, e)| e)
    }
    fn cm_event(&mut self, ev: CmEvent, _id: &RdmaId) -> Option<CmEvent> {
        match ev {
            CmEvent::RepReceived { comm_id, .. } if self.rej_reason.is_some() => {
                Some(CmEvent::Rejected { comm_id, reason: self.rej_reason.unwrap(), ari: vec![], private_data: vec![] })
            }
            CmEvent::Established { .. } if self.lose_rtu => None,
            ev => Some(ev),
        }
    }
}

#[test]
fn faults_are_consulted_before_any_state_changes() {
    let mut f = Script { refuse: Some((Call::Connect, libc::ENODEV)), rej_reason: None, lose_rtu: false };
    let mut id = routed(PS_TCP, QPT_RC);
    let before = id.clone();
    assert_eq!(id.connect(&param(&[]), None, 5, &DEV, &mut f).err(), Some(libc::ENODEV));
    assert_eq!(id, before, "a refused connect leaves the ID as it was");

    let mut f = Script { refuse: Some((Call::Accept, libc::ECONNREFUSED)), rej_reason: None, lose_rtu: false };
    let mut id = requested(QPT_RC, 4, 2);
    let before = id.clone();
    assert_eq!(id.accept(&param(&[]), None, &mut f).err(), Some(libc::ECONNREFUSED));
    assert_eq!(id, before);

    let mut f = Script { refuse: None, rej_reason: Some(reject::CONSUMER_DEFINED), lose_rtu: false };
    let mut id = routed(PS_TCP, QPT_RC);
    id.connect_sent(COMM);
    let (post, seen) = id.handle_cm(rep(), &mut f).expect("the REJ is posted");
    assert_eq!(post, Post { event: event::REJECTED, status: 28, forget_comm: true });
    assert!(matches!(seen, CmEvent::Rejected { reason: 28, .. }), "the C event is made from the REJ");
    assert_eq!((id.state, id.agreed.remote_qpn), (IdState::Disconnected, 0), "the REP was never seen");

    let mut f = Script { refuse: None, rej_reason: None, lose_rtu: true };
    let mut id = requested(QPT_RC, 1, 1);
    id.accept_sent();
    assert!(id.handle_cm(CmEvent::Established { comm_id: COMM }, &mut f).is_none());
    assert_eq!(id.state, IdState::Accepted, "a lost RTU leaves the passive side waiting");
}
