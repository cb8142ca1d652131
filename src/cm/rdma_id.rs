//! The rdma_cm ID above the IB CM, sans-IO like the rest of [`crate::cm`]: what librdmacm's C
//! shims used to decide inside themselves (issue #36 step 4). No sockets, no clock, no C
//! structs: the shims convert C arguments, ask this module, then do the I/O it names.
//!
//! - [`IdState`] and its transitions: which call is valid in which state (EINVAL otherwise, as
//!   the kernel's ucma), and what a call needs first (an implicit bind).
//! - The private data of a request: the 36-byte CMA header (IP version, source port, source
//!   and destination address) in front of the user's bytes, the size limits of each message,
//!   and what a listener learns from a received header ([`request_private_data`],
//!   [`parse_request`]).
//! - [`Rng`]: the PSNs a connection starts with (random, as the kernel's CMA picks them) and
//!   ephemeral ports.
//!
//! - [`crate::cm::rdma_resolve`]: `rdma_resolve_addr` / `rdma_resolve_route`: the query in
//!   flight, its deadline, and the event each outcome produces.
//! - [`crate::cm::rdma_conn`]: `rdma_connect` / `rdma_accept` / `rdma_reject` parameters → CM
//!   messages, and CM events → rdma_cm events and state.
//!
//! A fault hook (a REJ, a lost RTU, a device removal injected by a test) sits between these
//! decisions and the shim's I/O: `rdma_conn::IdFaults`, consulted by every plan and every CM
//! event; every decision is a value the caller can inspect or replace.

use std::net::{IpAddr, SocketAddr};

use super::{CommId, Nanos};
use crate::wire::cm::{rdma_cm_service_id, CmaHeader, CmaHeaderError, CMA_HEADER_LEN};

/// An errno value (positive), what the C shims return through errno.
pub type Errno = i32;

/// `IBV_QPT_RC` / `IBV_QPT_UC` / `IBV_QPT_UD`: the QP types an ID connects ([`RdmaId::qp_type`]).
pub const QPT_RC: i32 = 2;
pub const QPT_UC: i32 = 3;
pub const QPT_UD: i32 = 4;

/// Where an ID is in its life (the kernel's `rdma_cm_state`, reduced to what is branched on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdState {
    Idle,
    AddrBound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active: REQ or SIDR_REQ sent.
    Connecting,
    /// Passive: CONNECT_REQUEST delivered, the user has not answered.
    RequestReceived,
    /// Passive: REP sent.
    Accepted,
    /// Active: REP received, no QP: waiting for `rdma_establish`.
    ResponseReceived,
    Connected,
    Disconnected,
}

/// What a call must do before its own step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Before {
    /// Nothing: the ID is bound already.
    Nothing,
    /// Bind to the wildcard address, port 0 (an ephemeral port), first.
    BindAny,
}

impl IdState {
    /// `rdma_bind_addr`: an ID that is idle and holds no port.
    pub fn bind(self, bound: bool) -> Result<(), Errno> {
        if bound || self != IdState::Idle {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// `rdma_resolve_addr`: from idle (bind first) or bound.
    pub fn resolve_addr(self) -> Result<Before, Errno> {
        match self {
            IdState::Idle => Ok(Before::BindAny),
            IdState::AddrBound => Ok(Before::Nothing),
            _ => Err(libc::EINVAL),
        }
    }

    /// `rdma_resolve_route`: only after the address is resolved; moves to RouteResolved.
    pub fn resolve_route(&mut self) -> Result<(), Errno> {
        if *self != IdState::AddrResolved {
            return Err(libc::EINVAL);
        }
        *self = IdState::RouteResolved;
        Ok(())
    }

    /// `rdma_listen`, first part: from idle (bind first) or bound.
    pub fn listen(self) -> Result<Before, Errno> {
        match self {
            IdState::Idle => Ok(Before::BindAny),
            IdState::AddrBound => Ok(Before::Nothing),
            _ => Err(libc::EINVAL),
        }
    }

    /// `rdma_connect`: only with a resolved route.
    pub fn connect(self) -> Result<(), Errno> {
        if self != IdState::RouteResolved {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// `rdma_accept` / `rdma_reject`: only for a request delivered and not answered.
    pub fn answer(self) -> Result<(), Errno> {
        if self != IdState::RequestReceived {
            return Err(libc::EINVAL);
        }
        Ok(())
    }
}

/// Where an ID's resolution is ([`RdmaId::resolution`]; the transitions are in [`super::rdma_resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Resolution {
    /// No query asked yet.
    #[default]
    Idle,
    /// `rdma_resolve_addr` asked; the outcome is due by `deadline`.
    AddrQuery {
        deadline: Nanos,
    },
    AddrResolved,
    AddrError,
    /// `rdma_resolve_route` asked; the outcome is due by `deadline`.
    RouteQuery {
        deadline: Nanos,
    },
    RouteResolved,
    RouteError,
}

/// The sans-IO part of one rdma_cm ID: its state, addresses, connection and listener
/// figures. The C library keeps the C-side objects (channel, QP attributes, path record) beside
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaId {
    /// Port space (`RDMA_PS_*`).
    pub ps: i32,
    /// libibverbs' QP type the ID connects (RC, UC or UD).
    pub qp_type: i32,
    pub state: IdState,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub comm: Option<CommId>,
    pub listen_service: Option<u64>,
    /// A service steered to this process before `rdma_listen` (none today: steering at
    /// `rdma_bind_addr` made a REQ that came before `rdma_listen` get this process's REJ 8
    /// instead of waiting at the group's default slot for the listener, tests/rdmacm_group.rs).
    pub steered: Option<u64>,
    pub agreed: Agreed,
    pub tos: u8,
    pub ack_timeout: Option<u8>,
    pub reuseaddr: bool,
    /// `src` holds a port this ID reserved (bind, resolve_addr).
    pub bound: bool,
    /// A listener: the most CONNECT_REQUESTs it holds undelivered, and how many it holds.
    pub backlog: u32,
    pub pending: u32,
    /// Address and route resolution ([`super::rdma_resolve`]).
    pub resolution: Resolution,
}

impl RdmaId {
    /// A new, idle ID of port space `ps` for QPs of type `qp_type`.
    pub fn new(ps: i32, qp_type: i32) -> RdmaId {
        RdmaId {
            ps,
            qp_type,
            state: IdState::Idle,
            src: None,
            dst: None,
            comm: None,
            listen_service: None,
            steered: None,
            agreed: Agreed::default(),
            tos: 0,
            ack_timeout: None,
            reuseaddr: false,
            bound: false,
            backlog: MAX_BACKLOG,
            pending: 0,
            resolution: Resolution::Idle,
        }
    }

    /// The service ID a listener on this ID serves: its port space and bound port.
    pub fn service_id(&self) -> u64 {
        rdma_cm_service_id(self.ps as u16, self.src.map_or(0, |s| s.port()))
    }

    /// `rdma_listen`, second part (the ID is bound): takes the backlog as the kernel's ucma and
    /// names the service to listen on. The caller registers it (the CM, the group's steering
    /// table), then calls [`RdmaId::listening`].
    pub fn listen(&mut self, backlog: i32) -> Result<u64, Errno> {
        if self.state != IdState::AddrBound {
            return Err(libc::EINVAL);
        }
        self.backlog = listen_backlog(backlog);
        Ok(self.service_id())
    }

    /// The service is registered: the ID listens on it.
    pub fn listening(&mut self, service: u64) {
        self.listen_service = Some(service);
        self.state = IdState::Listening;
    }
}

/// The most CONNECT_REQUESTs a listener holds undelivered: the kernel's ucma takes
/// `rdma_listen`'s backlog up to its `max_backlog` sysctl, 1024 by default (and 1024 for a
/// backlog of 0 or less).
pub const MAX_BACKLOG: u32 = 1024;

/// A listener's backlog as the kernel's ucma takes it: 0 or less, or `MAX_BACKLOG` and above,
/// are `MAX_BACKLOG`.
pub fn listen_backlog(backlog: i32) -> u32 {
    u32::try_from(backlog).ok().filter(|&b| b > 0 && b < MAX_BACKLOG).unwrap_or(MAX_BACKLOG)
}

/// What a connection agreed: the values the QP's RTR/RTS come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Agreed {
    pub remote_qpn: u32,
    /// The PSN the peer expects to receive first (our sq_psn).
    pub remote_psn: u32,
    /// The PSN we expect to receive first (our rq_psn).
    pub local_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path_mtu: u8,
}

/// Private data room of each CM message (IBTA Vol 1 ch. 12.6): REQ 92, SIDR_REQ 216, REP 196,
/// SIDR_REP 136, REJ 148 bytes. A request's room holds the CMA header too.
pub mod room {
    pub const REQ: usize = 92;
    pub const SIDR_REQ: usize = 216;
    pub const REP: usize = 196;
    pub const SIDR_REP: usize = 136;
    pub const REJ: usize = 148;
}

/// The user's room in a request (REQ, or SIDR_REQ for `ud`): what the CMA header leaves.
pub fn request_user_room(ud: bool) -> usize {
    (if ud { room::SIDR_REQ } else { room::REQ }) - CMA_HEADER_LEN
}

/// The private data of a REQ (or SIDR_REQ for `ud`) from `src` to `dst`: the CMA header, then
/// `user`. EINVAL if `user` does not fit.
pub fn request_private_data(src: SocketAddr, dst: SocketAddr, user: &[u8], ud: bool) -> Result<Vec<u8>, Errno> {
    if user.len() > request_user_room(ud) {
        return Err(libc::EINVAL);
    }
    let mut pdata = vec![0u8; CMA_HEADER_LEN];
    CmaHeader { version: 0, src_port: src.port(), src: src.ip(), dst: dst.ip() }.emit(&mut pdata);
    pdata.extend_from_slice(user);
    Ok(pdata)
}

/// What a listener learns from a received request's private data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestAddrs<'a> {
    /// Our side: the device's address (or the header's destination) and the service's port.
    pub local: SocketAddr,
    /// The requester: the header's source (the sender's address if the header leaves it
    /// unspecified) and source port.
    pub remote: SocketAddr,
    /// The user's bytes after the header.
    pub user: &'a [u8],
}

/// Parses a request (REQ or SIDR_REQ) for `service_id` from `peer`, received by a device at
/// `dev_addr`: the CMA header must be valid (a request without one is refused).
pub fn parse_request(
    pdata: &[u8],
    peer: IpAddr,
    service_id: u64,
    dev_addr: Option<IpAddr>,
) -> Result<RequestAddrs<'_>, CmaHeaderError> {
    let hdr = CmaHeader::parse(pdata)?;
    let local = SocketAddr::new(dev_addr.unwrap_or(hdr.dst), (service_id & 0xFFFF) as u16);
    let remote = SocketAddr::new(if hdr.src.is_unspecified() { peer } else { hdr.src }, hdr.src_port);
    Ok(RequestAddrs { local, remote, user: &pdata[CMA_HEADER_LEN..] })
}

/// xorshift64*: PSNs and ephemeral ports, not secrets. The seed comes from the caller (the
/// shim mixes the clock and the pid in), so tests are deterministic.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A starting PSN (24 bits): random, as the kernel's CMA picks it.
    pub fn psn(&mut self) -> u32 {
        (self.next_u64() as u32) & 0xFF_FFFF
    }
}
