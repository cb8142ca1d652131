//! The rdma_cm faults: what each one means at its step, decided here (sans-IO) and carried out
//! by librdmacm (`rdmacm/src/faults.rs`) with the events and statuses the kernel's CMA gives.
//!
//! Facts (Linux `drivers/infiniband/core/cma.c`, `cm.c`):
//! - a failed address resolution is `RDMA_CM_EVENT_ADDR_ERROR` with the resolver's negative
//!   errno (`-ETIMEDOUT` when no neighbour answers, `-EHOSTUNREACH`, `-ENETUNREACH`); a failed
//!   route resolution `RDMA_CM_EVENT_ROUTE_ERROR` with its negative errno;
//! - a REQ nobody answers is sent `max_cm_retries + 1` times, each try waiting
//!   `2 × packet life + remote CM response time`; then `IB_CM_REQ_ERROR`, which the CMA turns
//!   into `RDMA_CM_EVENT_UNREACHABLE` with status `-ETIMEDOUT`;
//! - a REJ is `RDMA_CM_EVENT_REJECTED` with the REJ's reason as the status;
//! - a DREQ from this side (`rdma_disconnect`) first moves the QP to ERROR (its WRs flush); the
//!   peer gets `RDMA_CM_EVENT_DISCONNECTED` on the DREQ, this side on the DREP;
//! - a lost RTU leaves the passive side in REP_SENT: its REP is sent again after the REP's
//!   timeout, the active side answers the duplicate REP with the RTU again (`cm_dup_rep_handler`)
//!   and the passive side is ESTABLISHED then — or earlier, when the first data packet raises
//!   `IBV_EVENT_COMM_EST` and the application calls `rdma_notify` (the kernel's "comm
//!   established" path, `ib_cm_notify`);
//! - a device that goes away gives every ID on it `RDMA_CM_EVENT_DEVICE_REMOVAL`, status 0.

use super::plan::{Action, CmStep, FaultPlan, Nanos, Point, Site};

/// What librdmacm does for a CM fault that fired.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmEffect {
    /// `rdma_resolve_addr` ends in `RDMA_CM_EVENT_ADDR_ERROR` with this (negative) status.
    AddrError(i32),
    /// `rdma_resolve_route` ends in `RDMA_CM_EVENT_ROUTE_ERROR` with this (negative) status.
    RouteError(i32),
    /// Every REQ of this connection is lost: `RDMA_CM_EVENT_UNREACHABLE`, `-ETIMEDOUT`, after
    /// the CM's retries.
    LoseReq,
    /// `rdma_connect` fails at once with this errno (the CM could not send the REQ).
    ConnectFails(i32),
    /// The REQ is answered with a REJ of this reason instead of a CONNECT_REQUEST.
    Reject(u16),
    /// The first RTU of this connection is lost.
    LoseRtu,
    /// This side disconnects an established connection: QP to ERROR, DREQ.
    Disconnect,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL` for every ID.
    DeviceRemoval,
}

/// The counters of the CM faults injected, one per kind, as `urxe stat` names them (in the
/// `CmCounters` block, after the CM's own); [`CmEffect::kind`] indexes it.
pub const CM_FAULT_KINDS: [&str; 8] = [
    "faults_cm_addr_error",
    "faults_cm_route_error",
    "faults_cm_connect_error",
    "faults_cm_unreachable",
    "faults_cm_reject",
    "faults_cm_lose_rtu",
    "faults_cm_disconnect",
    "faults_cm_device_removal",
];

impl CmEffect {
    /// Its counter's index in [`CM_FAULT_KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            CmEffect::AddrError(_) => 0,
            CmEffect::RouteError(_) => 1,
            CmEffect::ConnectFails(_) => 2,
            CmEffect::LoseReq => 3,
            CmEffect::Reject(_) => 4,
            CmEffect::LoseRtu => 5,
            CmEffect::Disconnect => 6,
            CmEffect::DeviceRemoval => 7,
        }
    }
}

/// The step each CM action acts at unless the fault says otherwise, and the steps it can act at.
pub fn cm_steps(a: &Action) -> (CmStep, &'static [CmStep]) {
    use CmStep::*;
    match a {
        Action::CmError(_) => (ResolveAddr, &[ResolveAddr, ResolveRoute, Connect]),
        Action::Reject(_) => (RequestReceived, &[RequestReceived]),
        Action::LoseRtu => (Rtu, &[Rtu]),
        Action::Disconnect | Action::DeviceRemoval => (Established, &[Established]),
        _ => (Established, &[]),
    }
}

/// Whether a CM action happens once at its time (`at=`), as device faults do, rather than at
/// a step's points.
pub fn cm_timed(a: &Action) -> bool {
    matches!(a, Action::Disconnect | Action::DeviceRemoval)
}

/// The effect of `a` at `step`, if it has one there.
pub fn cm_effect(step: CmStep, a: Action) -> Option<CmEffect> {
    Some(match (step, a) {
        (CmStep::ResolveAddr, Action::CmError(e)) => CmEffect::AddrError(-e.abs()),
        (CmStep::ResolveRoute, Action::CmError(e)) => CmEffect::RouteError(-e.abs()),
        (CmStep::Connect, Action::CmError(e)) if e.abs() == libc::ETIMEDOUT => CmEffect::LoseReq,
        (CmStep::Connect, Action::CmError(e)) => CmEffect::ConnectFails(e.abs()),
        (CmStep::RequestReceived, Action::Reject(r)) => CmEffect::Reject(r),
        (CmStep::Rtu, Action::LoseRtu) => CmEffect::LoseRtu,
        (_, Action::Disconnect) => CmEffect::Disconnect,
        (_, Action::DeviceRemoval) => CmEffect::DeviceRemoval,
        _ => return None,
    })
}

impl FaultPlan {
    /// Asks the plan at an rdma_cm step of the ID `cm_id` (its creation number, the `cm-id=`
    /// scope): the fault (its index) and its effect, if one fires.
    pub fn decide_cm(&mut self, now: Nanos, step: CmStep, cm_id: u64) -> Option<(usize, CmEffect)> {
        if !self.watches(Site::Cm) {
            return None;
        }
        let p = Point { site: Some(Site::Cm), cm_step: Some(step), cm_id: Some(cm_id), ..Point::default() };
        let d = self.decide(now, &p)?;
        Some((d.fault, cm_effect(step, d.action)?))
    }

    /// The timed CM faults (`disconnect`, `device-removal`) due at `now`, each once, with the
    /// ID they are scoped to (`cm-id=`, None: every ID). One fires only when `ready` says there
    /// is something to act on (a `disconnect` waits for a connection of its IDs).
    pub fn due_cm(
        &mut self,
        now: Nanos,
        ready: impl Fn(CmEffect, Option<u64>) -> bool,
    ) -> Vec<(usize, CmEffect, Option<u64>)> {
        let mut out = Vec::new();
        for (i, f) in self.faults.iter_mut().enumerate() {
            let timed = f.scope.site == Some(Site::Cm) && cm_timed(&f.action) && f.fired() == 0;
            if !timed || now < f.schedule.at.unwrap_or(0) {
                continue;
            }
            let Some(e) = cm_effect(CmStep::Established, f.action) else { continue };
            if ready(e, f.scope.cm_id) {
                f.mark_fired(now);
                out.push((i, e, f.scope.cm_id));
            }
        }
        out
    }

    /// When the next timed CM fault falls due.
    pub fn next_cm_at(&self) -> Option<Nanos> {
        self.faults
            .iter()
            .filter(|f| f.scope.site == Some(Site::Cm) && cm_timed(&f.action) && f.fired() == 0)
            .map(|f| f.schedule.at.unwrap_or(0))
            .min()
    }
}
