//! The InfiniBand communication manager (IBTA Vol 1 ch. 12) as a sans-IO state machine, the
//! way the engine is one: no sockets, no clock, no threads; time comes in as an argument.
//! It sits beside the engine and uses only [`crate::wire`] (the MAD codec).
//!
//! What it does: connection establishment (REQ → REP → RTU, with MRA to ask for time, REJ to
//! refuse), disconnection (DREQ → DREP, then timewait), and service ID resolution for UD
//! (SIDR_REQ → SIDR_REP). Each sent message that expects an answer is retransmitted on a
//! timer until answered or out of retries; duplicates are answered as the spec says (a
//! duplicate REQ re-sends our MRA or REP, a duplicate REP re-sends the RTU, a DREQ in
//! timewait re-sends the DREP); stray messages for unknown comm IDs get the answers the
//! kernel gives (REJ "invalid comm ID" to a REP, DREP to a DREQ) or are dropped, and counted.
//!
//! Call order for a driver (the transport's GSI QP, or the simulator):
//! ```text
//! commands: listen / connect / accept / reject / send_rtu / send_mra / disconnect / ...
//! for each received CM MAD: cm.handle_mad(now, peer_addr, mad_bytes)
//! if now >= cm.poll_timeout(): cm.handle_timeout(now)
//! while let Some(out) = cm.poll_transmit() { send out.mad to QP1 of out.peer }
//! while let Some(ev) = cm.poll_event() { deliver ev to the connection manager's user }
//! ```
//! Comm IDs are `config.comm_id_base | n` (n 24 bits, never 0): a process that owns slot i of
//! a shared address uses base `i << 24`, so every comm ID is unique across the address.
#![forbid(unsafe_code)]

mod conn;
pub mod rdma_conn;
pub mod rdma_id;
pub mod rdma_resolve;
mod recv;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hostile;
#[cfg(test)]
mod tests_rdma_conn;
#[cfg(test)]
mod tests_rdma_id;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

pub use crate::wire::cm::{attr, CmPath};
use crate::wire::cm::{CmMessage, CommIds, Dreq, Mra, Rej, Rep, Req, SidrRep, SidrReq};
use crate::wire::mad::MAD_LEN;
use conn::Conn;
pub use conn::{CommId, Nanos, State};

/// Reasons of a REJ (IBTA Vol 1 Table 103), as the kernel's `ib_cm_rej_reason`.
pub mod reject {
    pub const NO_QP: u16 = 1;
    pub const NO_RESOURCES: u16 = 3;
    pub const TIMEOUT: u16 = 4;
    pub const UNSUPPORTED: u16 = 5;
    pub const INVALID_COMM_ID: u16 = 6;
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    pub const STALE_CONN: u16 = 10;
    pub const INVALID_GID: u16 = 12;
    pub const INVALID_MTU: u16 = 26;
    pub const CONSUMER_DEFINED: u16 = 28;
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

/// Which message a REJ or MRA refers to (2-bit field).
pub mod message_kind {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// SIDR_REP status values (IBTA Vol 1 §12.11.2).
pub mod sidr_status {
    pub const VALID: u8 = 0;
    pub const SERVICE_ID_NOT_SUPPORTED: u8 = 1;
    pub const REJECTED: u8 = 2;
    pub const NO_QP: u8 = 3;
}

/// `4.096 µs · 2^t` rounded the way the kernel's CM does for its timers: `2^(t-8)` ms
/// (t ≤ 8 gives 1 ms), in nanoseconds.
pub fn cm_timeout_nanos(t: u8) -> Nanos {
    (1u64 << u32::from(t.saturating_sub(8)).min(31)) * 1_000_000
}

/// How long a received SIDR_REQ waits for the user's answer before it is released: the
/// longest a kernel rdma_cm requester waits for the SIDR_REP (16 tries of `4.096 µs · 2^20`,
/// its `CMA_CM_RESPONSE_TIMEOUT` and `CMA_MAX_CM_RETRIES`); a SIDR_REQ carries no timeout.
pub const SIDR_REQ_RCVD_WAIT: Nanos = 16 * (1 << (20 - 8)) * 1_000_000;

/// Which requests a listener takes (the kernel's `cma_check_req_qp_type`: the listener's QP
/// type; `Any` is an ID with no QP type, as RDMA_PS_IB's before it has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenQp {
    Any,
    /// REQs for RC (transport service type 0).
    Rc,
    /// REQs for UC (transport service type 1).
    Uc,
    /// SIDR_REQs.
    Ud,
}

impl ListenQp {
    fn takes_req(self, transport_service_type: u8) -> bool {
        match self {
            ListenQp::Any => true,
            ListenQp::Rc => transport_service_type == 0,
            ListenQp::Uc => transport_service_type == 1,
            ListenQp::Ud => false,
        }
    }

    fn takes_sidr(self) -> bool {
        matches!(self, ListenQp::Any | ListenQp::Ud)
    }
}

/// Device-wide settings.
#[derive(Clone, Copy, Debug)]
pub struct CmConfig {
    /// Our port GID (the IPv4-mapped address on RoCE).
    pub local_gid: [u8; 16],
    /// Our CA GUID (sent in REQ/REP; a peer keys stale-connection checks on it).
    pub ca_guid: u64,
    /// High 8 bits of every comm ID and SIDR request ID we hand out.
    pub comm_id_base: u32,
    /// Low 24 bits of the first comm ID (a new owner of a slot continues its counter).
    pub first_comm_id: u32,
    /// Packet life time exponent of our paths (RoCE: the kernel uses 18).
    pub packet_life_time: u8,
}

/// What [`Cm::connect`] needs: the REQ's contents.
#[derive(Clone, Debug)]
pub struct ConnectParams {
    pub peer: IpAddr,
    pub service_id: u64,
    pub local_qpn: u32,
    /// The PSN we expect to receive first.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 0 RC, 1 UC.
    pub transport_service_type: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path_mtu: u8,
    pub srq: bool,
    pub primary: CmPath,
    /// How long the peer may take to answer (5-bit exponent; the kernel's CMA uses 20).
    pub remote_cm_response_timeout: u8,
    /// How long we take to answer (5-bit exponent).
    pub local_cm_response_timeout: u8,
    pub max_cm_retries: u8,
    pub private_data: Vec<u8>,
}

/// What [`Cm::accept`] needs: the REP's contents.
#[derive(Clone, Debug)]
pub struct AcceptParams {
    pub local_qpn: u32,
    /// The PSN we expect to receive first.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub private_data: Vec<u8>,
}

/// A received REQ, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqInfo {
    pub remote_comm_id: CommId,
    pub service_id: u64,
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub transport_service_type: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path_mtu: u8,
    pub srq: bool,
    pub primary: CmPath,
    pub local_cm_response_timeout: u8,
    pub private_data: Vec<u8>,
}

/// A received REP, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepInfo {
    pub remote_comm_id: CommId,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub remote_ca_guid: u64,
    pub private_data: Vec<u8>,
}

/// What happened, for the connection manager's user (librdmacm).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service we listen on. Answer with accept / reject (or send_mra first).
    ReqReceived { comm_id: CommId, peer: IpAddr, req: Box<ReqInfo> },
    /// Our REQ was answered. Bring the QP to RTR/RTS, then `send_rtu` (or reject).
    RepReceived { comm_id: CommId, rep: Box<RepInfo> },
    /// Passive side: the RTU arrived (or `establish` was called on first data).
    Established { comm_id: CommId },
    /// The peer refused (or gave up on) the connection at any stage before it was up.
    Rejected { comm_id: CommId, reason: u16, ari: Vec<u8>, private_data: Vec<u8> },
    /// Our REQ or REP was never answered (retries exhausted): a REJ "timeout" was sent.
    Unreachable { comm_id: CommId, awaiting: State },
    /// The peer asked to disconnect. Answer with `send_drep`.
    DreqReceived { comm_id: CommId, private_data: Vec<u8> },
    /// Our DREQ was answered (or never: retries exhausted). The connection is in timewait.
    Disconnected { comm_id: CommId, private_data: Vec<u8>, timed_out: bool },
    /// Timewait is over: the QP may be reused.
    TimewaitExit { comm_id: CommId },
    /// A SIDR_REQ for a service we listen on. Answer with `send_sidr_rep`.
    SidrReqReceived { request_id: CommId, peer: IpAddr, service_id: u64, pkey: u16, private_data: Vec<u8> },
    /// Our SIDR_REQ was answered.
    SidrRepReceived { request_id: CommId, status: u8, qpn: u32, qkey: u32, private_data: Vec<u8> },
    /// Our SIDR_REQ was never answered.
    SidrTimeout { request_id: CommId },
    /// A received REQ or SIDR_REQ the user did not answer while its requester waited: it is
    /// forgotten (`ReqReceived` / `SidrReqReceived` named it).
    RequestExpired { comm_id: CommId },
}

/// A MAD to send to QP1 of `peer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    pub peer: IpAddr,
    pub mad: [u8; MAD_LEN],
}

/// Why a command was refused: maps to an errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmError {
    /// No such comm ID / request ID.
    NotFound,
    /// The connection is not in a state where this command is valid.
    InvalidState(State),
    /// The service ID already has a listener.
    AddressInUse,
    /// Private data longer than the message carries.
    PrivateDataTooLong { len: usize, max: usize },
    /// All 2^24 comm IDs of our base are in use.
    Exhausted,
}

impl CmError {
    pub fn errno(&self) -> i32 {
        match self {
            CmError::NotFound => libc::ENOENT,
            CmError::InvalidState(_) => libc::EINVAL,
            CmError::AddressInUse => libc::EADDRINUSE,
            CmError::PrivateDataTooLong { .. } => libc::EINVAL,
            CmError::Exhausted => libc::ENOMEM,
        }
    }
}

impl std::fmt::Display for CmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmError::NotFound => f.write_str("no such connection"),
            CmError::InvalidState(s) => write!(f, "not valid in state {s:?}"),
            CmError::AddressInUse => f.write_str("service ID already has a listener"),
            CmError::PrivateDataTooLong { len, max } => write!(f, "{len} bytes of private data (at most {max})"),
            CmError::Exhausted => f.write_str("no free comm ID"),
        }
    }
}

impl std::error::Error for CmError {}

/// Counters (the kernel's cm_counters names where they exist).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    pub mads_sent: u64,
    pub mads_received: u64,
    pub retransmits: u64,
    pub duplicates_received: u64,
    /// MADs that are not CM messages we handle (bad class, version, attribute, truncated).
    pub malformed_dropped: u64,
    /// Well-formed messages for no connection of ours, or in a state that ignores them.
    pub stray_dropped: u64,
    pub rejects_sent: u64,
    pub rejects_received: u64,
    pub timeouts: u64,
    /// MADs of the CM class whose method is not SEND (a GET, SET or response): dropped.
    pub bad_method_dropped: u64,
    /// DREQs whose remote QPN is not our QP's (the kernel's cm_dreq_handler ignores them).
    pub dreq_wrong_qpn: u64,
    /// Requests for a listener of another QP type (cma_check_req_qp_type): REJ or SIDR_REP
    /// "rejected".
    pub qp_type_rejected: u64,
    /// Requests refused because the listener's backlog was full ([`Cm::refuse_request`]).
    pub backlog_refused: u64,
    /// Received requests released unanswered once their requester stopped waiting.
    pub requests_expired: u64,
}

impl CmCounters {
    /// How many counters there are.
    pub const COUNT: usize = 14;

    /// Every counter with its name, in declaration order (`urxe stat` prints them).
    pub fn named(&self) -> [(&'static str, u64); Self::COUNT] {
        [
            ("mads_sent", self.mads_sent),
            ("mads_received", self.mads_received),
            ("retransmits", self.retransmits),
            ("duplicates_received", self.duplicates_received),
            ("malformed_dropped", self.malformed_dropped),
            ("stray_dropped", self.stray_dropped),
            ("rejects_sent", self.rejects_sent),
            ("rejects_received", self.rejects_received),
            ("timeouts", self.timeouts),
            ("bad_method_dropped", self.bad_method_dropped),
            ("dreq_wrong_qpn", self.dreq_wrong_qpn),
            ("qp_type_rejected", self.qp_type_rejected),
            ("backlog_refused", self.backlog_refused),
            ("requests_expired", self.requests_expired),
        ]
    }
}

/// The connection manager of one port.
pub struct Cm {
    config: CmConfig,
    next_id: u32,
    conns: HashMap<CommId, Conn>,
    /// (peer, remote comm ID) → our comm ID, for duplicate REQs.
    by_remote: HashMap<(IpAddr, CommId), CommId>,
    /// (peer, remote QPN, remote CA GUID) → the latest connection with that QP, for the
    /// stale-connection check of a REQ.
    by_qp: HashMap<(IpAddr, u32, u64), CommId>,
    /// Every armed timer as (deadline, comm ID): the earliest is the first.
    timers: BTreeSet<(Nanos, CommId)>,
    listeners: HashMap<u64, ListenQp>,
    out: VecDeque<Outgoing>,
    events: VecDeque<CmEvent>,
    counters: CmCounters,
}

impl Cm {
    pub fn new(config: CmConfig) -> Cm {
        Cm {
            config,
            next_id: config.first_comm_id.clamp(1, 0xFF_FFFF),
            conns: HashMap::new(),
            by_remote: HashMap::new(),
            by_qp: HashMap::new(),
            timers: BTreeSet::new(),
            listeners: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    // ---- getters --------------------------------------------------------------------------

    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// The state of a connection (or SIDR exchange).
    pub fn state(&self, id: CommId) -> Option<State> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// The low 24 bits of the next comm ID (to persist a slot's counter).
    pub fn next_comm_id(&self) -> u32 {
        self.next_id
    }

    /// Connections not yet forgotten (timewait included).
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    // ---- commands -------------------------------------------------------------------------

    /// Accept requests for `service_id`: REQs for `qp`'s transport, or SIDR_REQs (see
    /// [`ListenQp`]); the others are refused as the kernel refuses them.
    pub fn listen(&mut self, service_id: u64, qp: ListenQp) -> Result<(), CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::AddressInUse);
        }
        self.listeners.insert(service_id, qp);
        Ok(())
    }

    pub fn unlisten(&mut self, service_id: u64) -> Result<(), CmError> {
        self.listeners.remove(&service_id).map(|_| ()).ok_or(CmError::NotFound)
    }

    /// Sends a REQ; the answer comes as `RepReceived`, `Rejected` or `Unreachable`.
    pub fn connect(&mut self, now: Nanos, p: &ConnectParams) -> Result<CommId, CmError> {
        check_len(&p.private_data, crate::wire::cm::private_len::REQ)?;
        let id = self.alloc_id()?;
        let req = CmMessage::Req(Req {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.config.ca_guid,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.transport_service_type,
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: 0xFFFF,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary: p.primary,
            alternate: CmPath::default(),
            private_data: &p.private_data,
        });
        // The kernel: 2 × packet life time + the peer's response time, per try.
        let life = cm_timeout_nanos(self.config.packet_life_time);
        let timeout = 2 * life + cm_timeout_nanos(p.remote_cm_response_timeout);
        let mut conn = Conn::new(State::ReqSent, p.peer, transaction_id(id));
        conn.local_qpn = p.local_qpn;
        conn.timewait = cm_timeout_nanos(p.primary.local_ack_timeout.max(self.config.packet_life_time));
        conn.retry_timeout = timeout;
        conn.retries_left = p.max_cm_retries;
        conn.max_retries = p.max_cm_retries;
        self.conns.insert(id, conn);
        self.send_tracked(now, id, &req);
        Ok(id)
    }

    /// Answers a received REQ with a REP. `RtuReceived` / `Established` follows.
    pub fn accept(&mut self, now: Nanos, id: CommId, p: &AcceptParams) -> Result<(), CmError> {
        check_len(&p.private_data, crate::wire::cm::private_len::REP)?;
        let c = self.conns.get_mut(&id).ok_or(CmError::NotFound)?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CmError::InvalidState(c.state));
        }
        c.local_qpn = p.local_qpn;
        let rep = CmMessage::Rep(Rep {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.config.ca_guid,
            private_data: &p.private_data,
        });
        c.state = State::RepSent;
        c.retries_left = c.max_retries;
        self.send_tracked(now, id, &rep);
        Ok(())
    }

    /// Refuses a received REQ or REP (or gives up on our REQ before its REP).
    pub fn reject(&mut self, id: CommId, reason: u16, private_data: &[u8]) -> Result<(), CmError> {
        check_len(private_data, crate::wire::cm::private_len::REJ)?;
        let c = self.conns.get(&id).ok_or(CmError::NotFound)?;
        let kind = match c.state {
            State::ReqRcvd | State::MraReqSent => message_kind::REQ,
            State::RepRcvd | State::MraRepSent => message_kind::REP,
            State::ReqSent | State::MraReqRcvd => message_kind::OTHER,
            s => return Err(CmError::InvalidState(s)),
        };
        let (peer, remote, tid) = (c.peer, c.remote_comm_id, c.tid);
        self.send_rej(peer, tid, id, remote, kind, reason, private_data);
        self.forget(id);
        Ok(())
    }

    /// Asks the peer for more time to answer its REQ (or REP): `service_timeout` is the
    /// 5-bit exponent of the time we need.
    pub fn send_mra(&mut self, now: Nanos, id: CommId, service_timeout: u8) -> Result<(), CmError> {
        let life = cm_timeout_nanos(self.config.packet_life_time);
        let c = self.conns.get_mut(&id).ok_or(CmError::NotFound)?;
        let kind = match c.state {
            State::ReqRcvd => {
                c.state = State::MraReqSent;
                // The requester now waits as long as we asked (and the path's round trip)
                // before it tries again; its request waits as long.
                c.request_wait = c.request_wait.max(cm_timeout_nanos(service_timeout) + 2 * life);
                message_kind::REQ
            }
            State::RepRcvd => {
                c.state = State::MraRepSent;
                message_kind::REP
            }
            s => return Err(CmError::InvalidState(s)),
        };
        let mra = CmMessage::Mra(Mra {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            message_mraed: kind,
            service_timeout,
            private_data: &[],
        });
        let (peer, tid, wait) = (c.peer, c.tid, c.request_wait);
        let mad = self.emit(tid, &mra);
        // Kept so that a duplicate REQ/REP can be answered with it again.
        if let Some(c) = self.conns.get_mut(&id) {
            c.last_reply = Some(mad);
        }
        if kind == message_kind::REQ {
            self.set_deadline(id, Some(now + wait));
        }
        self.push(peer, mad);
        Ok(())
    }

    /// Active side: the REP is acceptable and the QP is ready: send the RTU.
    pub fn send_rtu(&mut self, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        check_len(private_data, crate::wire::cm::private_len::RTU)?;
        let c = self.conns.get_mut(&id).ok_or(CmError::NotFound)?;
        if !matches!(c.state, State::RepRcvd | State::MraRepSent) {
            return Err(CmError::InvalidState(c.state));
        }
        let rtu = CmMessage::Rtu(CommIds { local_comm_id: id, remote_comm_id: c.remote_comm_id, private_data });
        c.state = State::Established;
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.emit(tid, &rtu);
        if let Some(c) = self.conns.get_mut(&id) {
            c.last_reply = Some(mad);
        }
        self.push(peer, mad);
        Ok(())
    }

    /// Passive side: data arrived before the RTU (the QP saw a packet in RTR): the
    /// connection is established as if the RTU had come (IBTA "communication established").
    pub fn establish(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id).ok_or(CmError::NotFound)?;
        match c.state {
            State::RepSent | State::MraRepRcvd => {
                c.state = State::Established;
                c.sent = None;
                self.set_deadline(id, None);
                self.events.push_back(CmEvent::Established { comm_id: id });
                Ok(())
            }
            State::Established => Ok(()),
            s => Err(CmError::InvalidState(s)),
        }
    }

    /// Sends a DREQ; `Disconnected` follows (the DREP, or our retries running out).
    pub fn disconnect(&mut self, now: Nanos, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        check_len(private_data, crate::wire::cm::private_len::DREQ)?;
        let c = self.conns.get_mut(&id).ok_or(CmError::NotFound)?;
        if c.state != State::Established {
            return Err(CmError::InvalidState(c.state));
        }
        let dreq = CmMessage::Dreq(Dreq {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            private_data,
        });
        c.state = State::DreqSent;
        c.retries_left = c.max_retries;
        self.send_tracked(now, id, &dreq);
        Ok(())
    }

    /// Answers a received DREQ: the connection enters timewait.
    pub fn send_drep(&mut self, now: Nanos, id: CommId, private_data: &[u8]) -> Result<(), CmError> {
        check_len(private_data, crate::wire::cm::private_len::DREP)?;
        let c = self.conns.get_mut(&id).ok_or(CmError::NotFound)?;
        if c.state != State::DreqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let drep = CmMessage::Drep(CommIds { local_comm_id: id, remote_comm_id: c.remote_comm_id, private_data });
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.emit(tid, &drep);
        self.push(peer, mad);
        self.enter_timewait(now, id, Some(mad));
        Ok(())
    }

    /// Sends the DREQ of a connection in DREQ_SENT once more, now, without touching its
    /// retry count or timer: a process about to go away (a userspace CM dies with it, where the
    /// kernel's keeps retrying) makes its DREQ survive a lost datagram. A duplicate DREQ is
    /// answered with the DREP again by the peer (IBTA 12.9.7: DREQ in TimeWait). False if the
    /// connection is not waiting for a DREP.
    pub fn resend_dreq(&mut self, id: CommId) -> bool {
        let Some(c) = self.conns.get(&id) else { return false };
        match (c.state, c.sent) {
            (State::DreqSent, Some(mad)) => {
                let peer = c.peer;
                self.counters.retransmits += 1;
                self.push(peer, mad);
                true
            }
            _ => false,
        }
    }

    /// Forgets a connection at once, whatever its state (rdma_destroy_id): a connection that
    /// was up gets a DREQ first (sent once, not retried), as the kernel does.
    pub fn destroy(&mut self, id: CommId) {
        let Some(c) = self.conns.get(&id) else { return };
        match c.state {
            State::Established => {
                let dreq = CmMessage::Dreq(Dreq {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    private_data: &[],
                });
                let (peer, tid) = (c.peer, c.tid);
                let mad = self.emit(tid, &dreq);
                self.push(peer, mad);
            }
            State::ReqRcvd | State::MraReqSent | State::RepSent | State::MraRepRcvd => {
                let (peer, tid, remote) = (c.peer, c.tid, c.remote_comm_id);
                self.send_rej(peer, tid, id, remote, message_kind::REQ, reject::CONSUMER_DEFINED, &[]);
            }
            State::ReqSent | State::MraReqRcvd | State::RepRcvd | State::MraRepSent => {
                let (peer, tid, remote) = (c.peer, c.tid, c.remote_comm_id);
                self.send_rej(peer, tid, id, remote, message_kind::OTHER, reject::CONSUMER_DEFINED, &[]);
            }
            _ => {}
        }
        self.forget(id);
    }

    /// Refuses a received request because its listener's backlog is full, as the kernel's
    /// ucma does beyond `rdma_listen`'s backlog: a REQ is forgotten without an answer (the
    /// kernel's CM does not reject an -ENOMEM "to allow future retries": the requester's next
    /// try may find room), a SIDR_REQ gets SIDR_REP "rejected".
    pub fn refuse_request(&mut self, id: CommId) -> Result<(), CmError> {
        let c = self.conns.get(&id).ok_or(CmError::NotFound)?;
        match c.state {
            State::ReqRcvd => {}
            State::SidrReqRcvd => {
                let (peer, tid, remote, service) = (c.peer, c.tid, c.remote_comm_id, c.service_id);
                self.send_sidr_status(peer, tid, remote, service, sidr_status::REJECTED);
            }
            s => return Err(CmError::InvalidState(s)),
        }
        self.counters.backlog_refused += 1;
        self.forget(id);
        Ok(())
    }

    /// Sends a SIDR_REQ; `SidrRepReceived` or `SidrTimeout` follows.
    pub fn sidr_request(
        &mut self,
        now: Nanos,
        peer: IpAddr,
        service_id: u64,
        timeout_exp: u8,
        max_retries: u8,
        private_data: &[u8],
    ) -> Result<CommId, CmError> {
        check_len(private_data, crate::wire::cm::private_len::SIDR_REQ)?;
        let id = self.alloc_id()?;
        let req = CmMessage::SidrReq(SidrReq { request_id: id, pkey: 0xFFFF, service_id, private_data });
        let mut c = Conn::new(State::SidrReqSent, peer, transaction_id(id));
        c.retry_timeout = cm_timeout_nanos(timeout_exp);
        c.retries_left = max_retries;
        c.max_retries = max_retries;
        self.conns.insert(id, c);
        self.send_tracked(now, id, &req);
        Ok(id)
    }

    /// Answers a received SIDR_REQ.
    pub fn send_sidr_rep(
        &mut self,
        request_id: CommId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_len(private_data, crate::wire::cm::private_len::SIDR_REP)?;
        let c = self.conns.get(&request_id).ok_or(CmError::NotFound)?;
        if c.state != State::SidrReqRcvd {
            return Err(CmError::InvalidState(c.state));
        }
        let rep = CmMessage::SidrRep(SidrRep {
            request_id: c.remote_comm_id,
            status,
            additional_info_length: 0,
            qpn,
            service_id: c.service_id,
            qkey,
            class_port_info: &[],
            private_data,
        });
        let (peer, tid) = (c.peer, c.tid);
        let mad = self.emit(tid, &rep);
        self.push(peer, mad);
        self.forget(request_id);
        Ok(())
    }

    // ---- outputs --------------------------------------------------------------------------

    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first().map(|&(at, _)| at)
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    // ---- helpers --------------------------------------------------------------------------

    fn alloc_id(&mut self) -> Result<CommId, CmError> {
        for _ in 0..0x100_0000u32 {
            let n = self.next_id;
            self.next_id = if n >= 0xFF_FFFF { 1 } else { n + 1 };
            let id = (self.config.comm_id_base & 0xFF00_0000) | n;
            if !self.conns.contains_key(&id) {
                return Ok(id);
            }
        }
        Err(CmError::Exhausted)
    }

    fn emit(&mut self, tid: u64, msg: &CmMessage<'_>) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        // Lengths were checked by the command (check_len) or are empty: emit cannot fail.
        if msg.emit(tid, &mut mad).is_err() {
            debug_assert!(false, "private data length checked before emit");
        }
        mad
    }

    fn push(&mut self, peer: IpAddr, mad: [u8; MAD_LEN]) {
        self.counters.mads_sent += 1;
        self.out.push_back(Outgoing { peer, mad });
    }

    /// Sends a message that expects an answer, and arms its retransmission timer.
    fn send_tracked(&mut self, now: Nanos, id: CommId, msg: &CmMessage<'_>) {
        let Some(tid) = self.conns.get(&id).map(|c| c.tid) else { return };
        let mad = self.emit(tid, msg);
        let Some(c) = self.conns.get_mut(&id) else { return };
        c.sent = Some(mad);
        let (peer, at) = (c.peer, now + c.retry_timeout);
        self.set_deadline(id, Some(at));
        self.push(peer, mad);
    }

    /// A duplicate arrived for `id`: if it is in one of `states`, send again what we last sent
    /// for it (the MRA, REP, RTU or DREP).
    fn answer_duplicate(&mut self, id: CommId, states: &[State]) {
        let Some(c) = self.conns.get(&id) else { return };
        if !states.contains(&c.state) {
            return;
        }
        let mad = match c.state {
            State::RepSent | State::MraRepRcvd => c.sent,
            _ => c.last_reply,
        };
        if let Some(mad) = mad {
            let peer = c.peer;
            self.push(peer, mad);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej(
        &mut self,
        peer: IpAddr,
        tid: u64,
        local: CommId,
        remote: CommId,
        kind: u8,
        reason: u16,
        private_data: &[u8],
    ) {
        let rej = CmMessage::Rej(Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: kind,
            reject_info_length: 0,
            reason,
            ari: &[],
            private_data,
        });
        let mad = self.emit(tid, &rej);
        self.counters.rejects_sent += 1;
        self.push(peer, mad);
    }

    fn enter_timewait(&mut self, now: Nanos, id: CommId, reply: Option<[u8; MAD_LEN]>) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::Timewait;
            c.sent = None;
            if reply.is_some() {
                c.last_reply = reply;
            }
            let at = now + c.timewait;
            self.set_deadline(id, Some(at));
        }
    }

    /// Arms (or with None disarms) the one timer of a connection, in the timer index too.
    fn set_deadline(&mut self, id: CommId, at: Option<Nanos>) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        if let Some(old) = c.deadline {
            self.timers.remove(&(old, id));
        }
        c.deadline = at;
        if let Some(t) = at {
            self.timers.insert((t, id));
        }
    }

    fn forget(&mut self, id: CommId) {
        if let Some(c) = self.conns.remove(&id) {
            if let Some(at) = c.deadline {
                self.timers.remove(&(at, id));
            }
            if self.by_remote.get(&(c.peer, c.remote_comm_id)) == Some(&id) {
                self.by_remote.remove(&(c.peer, c.remote_comm_id));
            }
            let qp = (c.peer, c.remote_qpn, c.remote_ca_guid);
            if self.by_qp.get(&qp) == Some(&id) {
                self.by_qp.remove(&qp);
            }
        }
    }

    /// Answers a SIDR_REQ that gets no connection with `status` (and no QP).
    fn send_sidr_status(&mut self, peer: IpAddr, tid: u64, request_id: CommId, service_id: u64, status: u8) {
        let rep = CmMessage::SidrRep(SidrRep {
            request_id,
            status,
            additional_info_length: 0,
            qpn: 0,
            service_id,
            qkey: 0,
            class_port_info: &[],
            private_data: &[],
        });
        let mad = self.emit(tid, &rep);
        self.push(peer, mad);
    }
}

/// The transaction ID of a connection we start: the kernel uses its MAD agent's high 32 bits
/// and the comm ID; we use a fixed agent value of 1 and the comm ID.
fn transaction_id(id: CommId) -> u64 {
    1u64 << 32 | u64::from(id)
}

fn check_len(pdata: &[u8], max: usize) -> Result<(), CmError> {
    if pdata.len() > max {
        return Err(CmError::PrivateDataTooLong { len: pdata.len(), max });
    }
    Ok(())
}
