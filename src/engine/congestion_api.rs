//! The engine's DCQCN controls and readings (see `congestion`).
#![forbid(unsafe_code)]

use super::cc::{CcCounters, DcqcnParams};
use super::types::{HostMemory, Qpn};

impl<M: HostMemory> super::Engine<M> {
    /// Sets DCQCN's parameters (the transport reads them from the environment:
    /// `URXE_DCQCN`, `URXE_DCQCN_<NAME>`). QPs limited already keep their RP's parameters.
    pub fn set_dcqcn(&mut self, p: DcqcnParams) {
        self.cc.set_params(p);
    }
    pub fn dcqcn(&self) -> &DcqcnParams {
        &self.cc.params
    }
    /// The congestion counters (named as mlx5's).
    pub fn cc_counters(&self) -> CcCounters {
        self.cc.counters
    }
    /// CNPs dropped because too many were queued at once.
    pub fn cnps_dropped(&self) -> u64 {
        self.cc.cnps_dropped
    }
    /// Whether some QP has had a CNP: its packets may be paced at sub-millisecond intervals,
    /// so the driver should keep its timers that fine.
    pub fn pacing_active(&self) -> bool {
        self.cc.rps > 0
    }
    /// QP `qpn`'s DCQCN rate (bit/s), or None if it is not rate-limited (or does not exist).
    pub fn qp_rate_bps(&self, qpn: Qpn) -> Option<u64> {
        self.qp(qpn).ok().and_then(|q| q.cc.rate_bps())
    }
}
