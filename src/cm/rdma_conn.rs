//! The rdma_cm ID's connection decisions, sans-IO (part of [`crate::cm::rdma_id`], which
//! re-exports everything here): what `rdma_connect` / `rdma_accept` / `rdma_reject` send
//! (`struct rdma_conn_param` → the CM's REQ, REP, REJ and SIDR fields: responder resources,
//! initiator depth, retry and RNR retry counts, private data limits and their errno), and
//! which rdma_cm event (with which status) each CM event on the ID becomes, and the state it
//! leaves the ID in.
//!
//! The C shim converts the C struct into a [`ConnParam`], asks [`RdmaId`] for a plan, does the
//! I/O the plan names (a QP transition, the CM call), then tells the ID it was done
//! (`*_sent`). For CM events it hands [`RdmaId::handle_cm`] the event and posts the [`Post`]
//! it returns.
//!
//! Fault injection (rdmacm's faults.rs) plugs in through [`IdFaults`]: consulted at each plan
//! (`connect`, `accept`) and at each CM event, before any state changes.

use std::net::IpAddr;

use super::rdma_id::{request_private_data, request_user_room, room, Errno, IdState, RdmaId, QPT_UC, QPT_UD};
use super::{reject, sidr_status, AcceptParams, CmEvent, CommId, ConnectParams};
use crate::wire::cm::{rdma_cm_service_id, CmPath};

/// The kernel's CMA on RoCE: packet life time 18, CM response timeout 20, 15 CM retries.
pub const PACKET_LIFE_TIME: u8 = 18;
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
pub const MAX_CM_RETRIES: u8 = 15;
/// SIDR_REQ timeout exponent (the kernel's `CMA_CM_RESPONSE_TIMEOUT`; 15 tries).
pub const SIDR_TIMEOUT: u8 = 20;
pub const HOP_LIMIT: u8 = 64;
/// The device's `max_qp_rd_atom` / `max_qp_init_rd_atom`: what a connection's responder
/// resources and initiator depth are clamped to, and librdmacm's default for both.
pub const DEVICE_MAX_RD_ATOMIC: u8 = 128;
/// `RDMA_UDP_QKEY`: the Q_Key of every rdma_cm UD QP.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// The largest retry and RNR retry count (3 bits; 7 is "infinite" for RNR).
pub const MAX_RETRY: u8 = 7;

/// `enum rdma_cm_event_type`: the values of `<rdma/rdma_cma.h>` (tests/rdmacm_layout.rs checks
/// them through rdmacm's layout report).
pub mod event {
    pub const ADDR_RESOLVED: i32 = 0;
    pub const ADDR_ERROR: i32 = 1;
    pub const ROUTE_RESOLVED: i32 = 2;
    pub const ROUTE_ERROR: i32 = 3;
    pub const CONNECT_REQUEST: i32 = 4;
    pub const CONNECT_RESPONSE: i32 = 5;
    pub const CONNECT_ERROR: i32 = 6;
    pub const UNREACHABLE: i32 = 7;
    pub const REJECTED: i32 = 8;
    pub const ESTABLISHED: i32 = 9;
    pub const DISCONNECTED: i32 = 10;
    pub const DEVICE_REMOVAL: i32 = 11;
    pub const MULTICAST_JOIN: i32 = 12;
    pub const MULTICAST_ERROR: i32 = 13;
    pub const ADDR_CHANGE: i32 = 14;
    pub const TIMEWAIT_EXIT: i32 = 15;
}

/// `struct rdma_conn_param`, converted: the private data as the bytes the C pointer and length
/// name (any length up to 255; the room is checked here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnParam<'a> {
    pub private_data: &'a [u8],
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The QP number to announce when the ID has no QP (`rdma_conn_param.qp_num`).
    pub qp_num: u32,
}

impl ConnParam<'static> {
    /// What librdmacm uses for a NULL `conn_param`: the device's most RDMA READs/atomics each
    /// way, retry and RNR retry 7, no private data.
    pub fn librdmacm_default() -> ConnParam<'static> {
        ConnParam {
            private_data: &[],
            responder_resources: DEVICE_MAX_RD_ATOMIC,
            initiator_depth: DEVICE_MAX_RD_ATOMIC,
            retry_count: MAX_RETRY,
            rnr_retry_count: MAX_RETRY,
            srq: false,
            qp_num: 0,
        }
    }
}

/// What the one device contributes to a path: its GID and active MTU (`enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePath {
    pub gid: [u8; 16],
    pub active_mtu: u8,
}

/// What `rdma_connect` sends.
#[derive(Clone, Debug)]
pub enum Connect {
    /// A UD ID: a SIDR_REQ for the destination's service.
    Sidr { peer: IpAddr, service_id: u64, timeout: u8, max_retries: u8, private_data: Vec<u8> },
    /// An RC or UC ID: a REQ.
    Req(Box<ConnectParams>),
}

/// What `rdma_accept` sends.
#[derive(Clone, Debug)]
pub enum Accept {
    /// A UD ID: a SIDR_REP "valid" with our QP and the rdma_cm Q_Key.
    SidrRep { comm: CommId, qpn: u32, qkey: u32, private_data: Vec<u8> },
    /// An RC or UC ID: a REP (after the caller moved an existing QP to RTS).
    Rep { comm: CommId, params: AcceptParams },
}

/// What `rdma_reject` sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    SidrRep { comm: CommId, status: u8, private_data: Vec<u8> },
    Rej { comm: CommId, reason: u16, private_data: Vec<u8> },
}

/// The rdma_cm event a CM event on an ID becomes: its type ([`event`]), its status, and
/// whether the ID is done with its comm ID (the caller forgets the mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    pub event: i32,
    pub status: i32,
    pub forget_comm: bool,
}

/// The call a fault may fail ([`IdFaults::call`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Connect,
    Accept,
    Reject,
}

/// The hook fault injection plugs into. Every method's default is "no fault"; [`NoFaults`] is
/// the production value.
pub trait IdFaults {
    /// Fail `call` on `id` with an errno before anything is sent or changed.
    fn call(&mut self, _call: Call, _id: &RdmaId) -> Option<Errno> {
        None
    }
    /// Replace (or, with `None`, swallow: a lost message) a CM event before the ID sees it.
    fn cm_event(&mut self, ev: CmEvent, _id: &RdmaId) -> Option<CmEvent> {
        Some(ev)
    }
}

/// No fault injected.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoFaults;

impl IdFaults for NoFaults {}

/// The flow label of a RoCE path between two rdma_cm ports, as the kernel computes it.
pub fn flow_label(sport: u16, dport: u16) -> u32 {
    (u32::from(sport).wrapping_mul(31).wrapping_add(u32::from(dport))) & 0xF_FFFF
}

/// The user's private data of a message with `max` bytes of room: EINVAL if it does not fit.
pub fn user_private_data(p: &[u8], max: usize) -> Result<Vec<u8>, Errno> {
    if p.len() > max {
        return Err(libc::EINVAL);
    }
    Ok(p.to_vec())
}

impl RdmaId {
    /// `rdma_connect`: valid with a resolved route; the private data must fit the request's
    /// room after the CMA header (EINVAL). `qp` is the ID's QP number if it has a QP; `psn`
    /// the starting PSN the caller drew. Records what the connection will use (`agreed`).
    pub fn connect(
        &mut self,
        p: &ConnParam<'_>,
        qp: Option<u32>,
        psn: u32,
        dev: &DevicePath,
        faults: &mut dyn IdFaults,
    ) -> Result<Connect, Errno> {
        self.state.connect()?;
        let (src, dst) = (self.src.ok_or(libc::EINVAL)?, self.dst.ok_or(libc::EINVAL)?);
        let ud = self.qp_type == QPT_UD;
        let user = user_private_data(p.private_data, request_user_room(ud))?;
        if let Some(e) = faults.call(Call::Connect, self) {
            return Err(e);
        }
        let private_data = request_private_data(src, dst, &user, ud)?;
        let service_id = rdma_cm_service_id(self.ps as u16, dst.port());
        if ud {
            return Ok(Connect::Sidr {
                peer: dst.ip(),
                service_id,
                timeout: SIDR_TIMEOUT,
                max_retries: MAX_CM_RETRIES,
                private_data,
            });
        }
        self.agreed.local_psn = psn;
        self.agreed.retry_count = p.retry_count.min(MAX_RETRY);
        self.agreed.path_mtu = dev.active_mtu;
        Ok(Connect::Req(Box::new(ConnectParams {
            peer: dst.ip(),
            service_id,
            local_qpn: qp.unwrap_or(p.qp_num),
            starting_psn: psn,
            responder_resources: p.responder_resources.min(DEVICE_MAX_RD_ATOMIC),
            initiator_depth: p.initiator_depth.min(DEVICE_MAX_RD_ATOMIC),
            transport_service_type: u8::from(self.qp_type == QPT_UC),
            retry_count: p.retry_count.min(MAX_RETRY),
            rnr_retry_count: p.rnr_retry_count.min(MAX_RETRY),
            path_mtu: dev.active_mtu,
            srq: p.srq,
            primary: CmPath {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: dev.gid,
                remote_gid: gid_of(dst.ip()),
                flow_label: flow_label(src.port(), dst.port()),
                packet_rate: 0,
                traffic_class: self.tos,
                hop_limit: HOP_LIMIT,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: self.ack_timeout.unwrap_or(PACKET_LIFE_TIME + 1),
            },
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            max_cm_retries: MAX_CM_RETRIES,
            private_data,
        })))
    }

    /// The REQ or SIDR_REQ of [`RdmaId::connect`] went out as `comm`.
    pub fn connect_sent(&mut self, comm: CommId) {
        self.comm = Some(comm);
        self.state = IdState::Connecting;
    }

    /// `rdma_accept`: valid for a request delivered and not answered. The private data must
    /// fit a REP (SIDR_REP for UD). RC/UC: our responder resources are what the user offers up
    /// to what the requester's initiator depth allows (at least 1), our initiator depth what
    /// the user asks up to the requester's responder resources.
    pub fn accept(&mut self, p: &ConnParam<'_>, qp: Option<u32>, faults: &mut dyn IdFaults) -> Result<Accept, Errno> {
        self.state.answer()?;
        let comm = self.comm.ok_or(libc::EINVAL)?;
        let ud = self.qp_type == QPT_UD;
        let qpn = qp.unwrap_or(p.qp_num);
        let private_data = user_private_data(p.private_data, if ud { room::SIDR_REP } else { room::REP })?;
        if let Some(e) = faults.call(Call::Accept, self) {
            return Err(e);
        }
        if ud {
            return Ok(Accept::SidrRep { comm, qpn, qkey: RDMA_UDP_QKEY, private_data });
        }
        let a = &mut self.agreed;
        a.responder_resources = p.responder_resources.min(a.responder_resources.max(1));
        a.initiator_depth = p.initiator_depth.min(a.initiator_depth);
        Ok(Accept::Rep {
            comm,
            params: AcceptParams {
                local_qpn: qpn,
                starting_psn: a.local_psn,
                responder_resources: a.responder_resources,
                initiator_depth: a.initiator_depth,
                target_ack_delay: 0,
                rnr_retry_count: p.rnr_retry_count.min(MAX_RETRY),
                srq: p.srq,
                private_data,
            },
        })
    }

    /// The answer of [`RdmaId::accept`] went out: a UD ID is done with the request (and
    /// connected: it has the peer's address), an RC/UC ID waits for the RTU.
    pub fn accept_sent(&mut self) {
        if self.qp_type == QPT_UD {
            self.comm = None;
            self.state = IdState::Connected;
        } else {
            self.state = IdState::Accepted;
        }
    }

    /// `rdma_reject`: valid while the ID has a request (or a REP) to answer; the private data
    /// must fit a REJ (SIDR_REP for UD). Consumer-defined reason (28) as librdmacm's.
    pub fn reject(&self, private_data: &[u8], faults: &mut dyn IdFaults) -> Result<Reject, Errno> {
        let comm = self.comm.ok_or(libc::EINVAL)?;
        let ud = self.qp_type == QPT_UD;
        let private_data = user_private_data(private_data, if ud { room::SIDR_REP } else { room::REJ })?;
        if let Some(e) = faults.call(Call::Reject, self) {
            return Err(e);
        }
        Ok(if ud {
            Reject::SidrRep { comm, status: sidr_status::REJECTED, private_data }
        } else {
            Reject::Rej { comm, reason: reject::CONSUMER_DEFINED, private_data }
        })
    }

    /// The REJ of [`RdmaId::reject`] went out: the ID is done with its comm ID.
    pub fn reject_sent(&mut self) {
        self.comm = None;
        self.state = IdState::Disconnected;
    }

    /// A CM event for this ID (the caller found the ID by the event's comm ID): the state it
    /// moves to, and the rdma_cm event to post, with the CM event it was made from (the one a
    /// fault may have put in the received one's place: its payload fills the C event).
    /// `None`: nothing to post (an event that is not
    /// an ID's own, e.g. a request for a listener, or one a fault swallowed).
    ///
    /// The transitions, as the kernel's CMA reports them: REP → CONNECT_RESPONSE (the user
    /// moves the QP and sends the RTU); RTU → ESTABLISHED; REJ → REJECTED with the REJ's
    /// reason as status; no answer → UNREACHABLE (-ETIMEDOUT); DREQ or DREP → DISCONNECTED;
    /// timewait over → TIMEWAIT_EXIT; SIDR_REP valid → ESTABLISHED, otherwise UNREACHABLE
    /// (-EINVAL); SIDR timeout → UNREACHABLE (-ETIMEDOUT).
    pub fn handle_cm(&mut self, ev: CmEvent, faults: &mut dyn IdFaults) -> Option<(Post, CmEvent)> {
        let ev = faults.cm_event(ev, self)?;
        let post = self.transition(&ev)?;
        Some((post, ev))
    }

    fn transition(&mut self, ev: &CmEvent) -> Option<Post> {
        let keep = |event, status| Some(Post { event, status, forget_comm: false });
        let forget = |event, status| Some(Post { event, status, forget_comm: true });
        match ev {
            CmEvent::RepReceived { rep, .. } => {
                let a = &mut self.agreed;
                a.remote_qpn = rep.remote_qpn;
                a.remote_psn = rep.starting_psn;
                // Their initiator depth bounds our responder resources and vice versa.
                a.responder_resources = rep.initiator_depth;
                a.initiator_depth = rep.responder_resources;
                a.rnr_retry_count = rep.rnr_retry_count;
                self.state = IdState::ResponseReceived;
                keep(event::CONNECT_RESPONSE, 0)
            }
            CmEvent::Established { .. } => {
                self.state = IdState::Connected;
                keep(event::ESTABLISHED, 0)
            }
            CmEvent::Rejected { reason, .. } => {
                self.state = IdState::Disconnected;
                forget(event::REJECTED, i32::from(*reason))
            }
            CmEvent::Unreachable { .. } => {
                self.state = IdState::Disconnected;
                forget(event::UNREACHABLE, -libc::ETIMEDOUT)
            }
            CmEvent::DreqReceived { .. } | CmEvent::Disconnected { .. } => {
                self.state = IdState::Disconnected;
                keep(event::DISCONNECTED, 0)
            }
            CmEvent::TimewaitExit { .. } => forget(event::TIMEWAIT_EXIT, 0),
            CmEvent::SidrRepReceived { status, .. } if *status != sidr_status::VALID => {
                forget(event::UNREACHABLE, -libc::EINVAL)
            }
            CmEvent::SidrRepReceived { .. } => {
                self.state = IdState::Connected;
                forget(event::ESTABLISHED, 0)
            }
            CmEvent::SidrTimeout { .. } => forget(event::UNREACHABLE, -libc::ETIMEDOUT),
            CmEvent::ReqReceived { .. } | CmEvent::SidrReqReceived { .. } | CmEvent::RequestExpired { .. } => None,
        }
    }
}

/// The GID of an IP address (IPv4 as v4-mapped IPv6).
pub fn gid_of(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}
