//! One connection (or SIDR exchange) of the CM: its state (IBTA Vol 1 §12.9, the kernel's
//! `ib_cm_state`), the peer, and the message being retransmitted.

use std::net::IpAddr;

use crate::wire::mad::MAD_LEN;

/// Nanoseconds on the driver's monotonic clock.
pub type Nanos = u64;
/// A communication ID (ours, unless named remote).
pub type CommId = u32;

/// Connection states (IBTA Vol 1 Figure 98 / §12.9.6, as the kernel's CM names them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: the peer sent MRA for our REQ: waiting longer, no more retransmissions.
    MraReqRcvd,
    /// Passive: REQ received, the user has not answered.
    ReqRcvd,
    /// Passive: we asked the peer for time (MRA) before answering its REQ.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer sent MRA for our REP.
    MraRepRcvd,
    /// Active: REP received, the user has not sent RTU.
    RepRcvd,
    /// Active: we asked for time (MRA) before answering the REP.
    MraRepSent,
    Established,
    DreqSent,
    DreqRcvd,
    /// Disconnected; the comm ID and QP wait out stray packets before reuse.
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

pub(super) struct Conn {
    pub state: State,
    pub peer: IpAddr,
    pub tid: u64,
    pub remote_comm_id: CommId,
    pub remote_qpn: u32,
    pub remote_ca_guid: u64,
    pub local_qpn: u32,
    pub service_id: u64,
    /// The message retransmitted until answered (REQ, REP, DREQ, SIDR_REQ).
    pub sent: Option<[u8; MAD_LEN]>,
    /// The last unacknowledged answer we gave (MRA, RTU, DREP), re-sent on a duplicate.
    pub last_reply: Option<[u8; MAD_LEN]>,
    pub deadline: Option<Nanos>,
    pub retry_timeout: Nanos,
    pub retries_left: u8,
    pub max_retries: u8,
    pub timewait: Nanos,
    /// Passive: how long the requester waits for our answer (the request's expiry).
    pub request_wait: Nanos,
}

impl Conn {
    pub fn new(state: State, peer: IpAddr, tid: u64) -> Conn {
        Conn {
            state,
            peer,
            tid,
            remote_comm_id: 0,
            remote_qpn: 0,
            remote_ca_guid: 0,
            local_qpn: 0,
            service_id: 0,
            sent: None,
            last_reply: None,
            deadline: None,
            retry_timeout: 0,
            retries_left: 0,
            max_retries: 0,
            timewait: 0,
            request_wait: 0,
        }
    }
}
