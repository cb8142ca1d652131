//! Congestion control like a RoCE NIC's (engine layer, sans-IO: time is an argument; no
//! clock, no sockets, no threads). DCQCN (Zhu et al., "Congestion Control for Large-Scale
//! RDMA Deployments", SIGCOMM 2015) in its two per-QP halves:
//!
//! - [`Np`], the notification point (the receiver): a packet that arrives with ECN CE set
//!   makes a CNP (BTH opcode 0x81, `wire::cnp`) due to the sending QP, at most one per QP per
//!   `min_time_between_cnps`.
//! - [`Rp`], the reaction point (the sender): a rate limiter with current rate Rc, target rate
//!   Rt and the congestion estimate alpha, cut by CNPs and recovered by a timer and a byte
//!   counter (fast recovery, additive increase, hyper increase); it paces the QP's packets
//!   ([`Rp::earliest_send`]) so the driver waits on a timer, never in a spinning thread.
//!
//! [`DcqcnParams`] carries the parameters under the names mlx5 gives them per port
//! (`ecn/roce_rp/*`, `ecn/roce_np/*`), with ConnectX's defaults ([`DcqcnParams::connectx`]) and urxe's
//! ([`DcqcnParams::soft_roce`], the default); [`DcqcnParams::from_env`]
//! takes overrides (`URXE_DCQCN=0`, `URXE_DCQCN_<NAME>=value`) as a pure function.
//! [`CcCounters`] are named as mlx5's. See docs/congestion.md.
#![forbid(unsafe_code)]

mod np;
mod params;
mod rp;

pub use np::Np;
pub use params::{DcqcnParams, ParamError, ENV_PREFIX};
pub use rp::{Rp, Stage};

use super::types::Nanos;

/// The congestion counters, named as mlx5 names them (`/sys/class/infiniband/*/ports/*/hw_counters`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CcCounters {
    /// RoCE packets that arrived with ECN CE set (the NP saw congestion).
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs the NP made due (each one is sent to the marked packet's source QP).
    pub np_cnp_sent: u64,
    /// CNPs the RP processed (a rate cut, or coalesced into the cut of the same
    /// `rate_reduce_monitor_period`).
    pub rp_cnp_handled: u64,
    /// CNPs received and ignored (DCQCN switched off).
    pub rp_cnp_ignored: u64,
}

/// A QP's congestion state.
#[derive(Clone, Debug, Default)]
pub struct QpCc {
    pub np: Np,
    pub rp: Option<Box<Rp>>,
    /// The QP waits for its rate limiter until then.
    pub pace_at: Option<Nanos>,
}

impl QpCc {
    /// The QP's current DCQCN rate (bit/s), if it is limited.
    pub fn rate_bps(&self) -> Option<u64> {
        self.rp.as_ref().and_then(|r| r.rate_bps())
    }
}
