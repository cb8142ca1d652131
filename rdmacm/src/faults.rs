//! The rdma_cm faults of a fault plan (`URXE_FAULTS`, site `cm`), carried out here; what each
//! one means is decided in `urxe::engine::faults` (`CmEffect`, with the kernel's facts).
//!
//! The plan is read once, at the first rdma_cm step that asks; its clock starts then. Without a
//! plan (or one with no CM fault) every hook is one test of a `OnceLock`'s `None`.
//!
//! Hooks: address and route resolution ([`resolution_fails`]), `rdma_connect`
//! ([`on_connect`], [`lose_req`]), a received REQ ([`reject`]), every MAD sent ([`Lib::fault_drops`]: the
//! REQs of a connection whose REQ is lost, the first RTU of a connection whose RTU is lost),
//! and the CM's flush ([`Lib::fault_due`]: `disconnect`, `device-removal` at their time).

use crate::abi::event;
use crate::core::{now, IdState, Lib};
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock};
use urxe::cm::{CommId, Nanos, State};
use urxe::engine::faults::{CmEffect, CmStep, FaultPlan, Site, CM_FAULT_KINDS};
use urxe::wire::cm::{attr, CmMessage};

struct Faults {
    plan: FaultPlan,
    start: Nanos,
    /// Connections whose every REQ is lost.
    lost_req: HashSet<CommId>,
    /// Connections whose first RTU was decided on (lost or not): the ones sent again pass.
    rtu_seen: HashSet<CommId>,
    /// CM faults injected, per kind (`CM_FAULT_KINDS`).
    counts: [u64; KINDS],
    /// Whether `counts` changed since `urxe stat` last got them.
    unreported: bool,
}

/// How many kinds are counted.
const KINDS: usize = CM_FAULT_KINDS.len();

fn faults() -> Option<MutexGuard<'static, Faults>> {
    static F: OnceLock<Option<Mutex<Faults>>> = OnceLock::new();
    let m = F.get_or_init(|| {
        // A plan that does not parse stops the device (the provider says why); here it is
        // simply absent.
        let plan = urxe::runtime::fault_setting().ok().flatten()?;
        plan.watches(Site::Cm).then(|| {
            Mutex::new(Faults {
                plan,
                start: now(),
                lost_req: HashSet::new(),
                rtu_seen: HashSet::new(),
                counts: [0; KINDS],
                unreported: false,
            })
        })
    });
    m.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
}

impl Faults {
    /// The plan at `step` of the ID created `cm_id`-th.
    fn at(&mut self, step: CmStep, cm_id: u64) -> Option<CmEffect> {
        let t = now().saturating_sub(self.start);
        let (i, e) = self.plan.decide_cm(t, step, cm_id)?;
        self.injected(t, i, e);
        Some(e)
    }

    fn injected(&mut self, t: Nanos, fault: usize, e: CmEffect) {
        self.counts[e.kind()] += 1;
        self.unreported = true;
        let name = self.plan.faults.get(fault).map_or("", |f| f.name.as_str());
        let line = format!("urxe: fault injected: {name} -> {e:?} at Cm (t={t} ns)");
        if urxe_cabi::export::traced() {
            eprintln!("{line}");
        }
        // Noted in the URXE_PCAP capture beside the packets, as the engine's faults are.
        crate::verbs::fault_note(&line);
    }
}

/// Address (`ResolveAddr`) or route (`ResolveRoute`) resolution: true when the plan fails it;
/// the ADDR_ERROR / ROUTE_ERROR event with the planned status is then queued for `id`.
pub(crate) fn resolution_fails(lib: &mut Lib, id: usize, step: CmStep) -> bool {
    let Some(mut f) = faults() else { return false };
    let Some(cm_id) = lib.ids.get(&id).map(|st| st.created) else { return false };
    let (ev, status) = match f.at(step, cm_id) {
        Some(CmEffect::AddrError(s)) => (event::ADDR_ERROR, s),
        Some(CmEffect::RouteError(s)) => (event::ROUTE_ERROR, s),
        _ => return false,
    };
    drop(f);
    lib.post(id, 0, ev, status, |_| {});
    lib.report_counters();
    true
}

/// `rdma_connect` of an RC or UC ID (created `cm_id`-th), before its REQ: the errno the plan
/// fails the call with, or whether the connection's REQs are all to be lost ([`lose_req`] with
/// its comm ID).
pub(crate) fn on_connect(cm_id: u64) -> Result<bool, i32> {
    let Some(mut f) = faults() else { return Ok(false) };
    match f.at(CmStep::Connect, cm_id) {
        Some(CmEffect::ConnectFails(e)) => Err(e),
        Some(CmEffect::LoseReq) => Ok(true),
        _ => Ok(false),
    }
}

/// Every REQ of `comm` is lost from now on.
pub(crate) fn lose_req(comm: CommId) {
    if let Some(mut f) = faults() {
        f.lost_req.insert(comm);
    }
}

/// A received REQ for the listener created `cm_id`-th: the REJ reason the plan answers it with.
pub(crate) fn reject(cm_id: u64) -> Option<u16> {
    match faults()?.at(CmStep::RequestReceived, cm_id)? {
        CmEffect::Reject(r) => Some(r),
        _ => None,
    }
}

impl Lib {
    /// A MAD about to be sent: true when it is lost. `created` gives the creation number of a
    /// connection's ID.
    pub(crate) fn fault_drops(mad: &[u8], created: impl Fn(CommId) -> Option<u64>) -> bool {
        let Some(mut f) = faults() else { return false };
        let Ok((_, m)) = CmMessage::parse(mad) else { return false };
        let comm = m.local_id();
        match m.attribute_id() {
            attr::REQ => f.lost_req.contains(&comm),
            attr::RTU if f.rtu_seen.insert(comm) => {
                let Some(cm_id) = created(comm) else { return false };
                f.at(CmStep::Rtu, cm_id) == Some(CmEffect::LoseRtu)
            }
            _ => false,
        }
    }

    /// When the next timed CM fault falls due, on the CM's clock (CLOCK_MONOTONIC).
    pub(crate) fn fault_next_at() -> Option<Nanos> {
        let f = faults()?;
        Some(f.start.saturating_add(f.plan.next_cm_at()?))
    }
}

/// The CM faults injected per kind (`CM_FAULT_KINDS` order), for `urxe stat`, if they changed
/// since the last call (marked reported).
pub(crate) fn unreported_counts() -> Option<[u64; KINDS]> {
    let mut f = faults()?;
    std::mem::take(&mut f.unreported).then_some(f.counts)
}

/// The CM faults injected per kind (all zero without a plan).
pub(crate) fn counts() -> [u64; KINDS] {
    faults().map_or([0; KINDS], |f| f.counts)
}

/// Carries out the timed CM faults that are due: `disconnect` (every established connection:
/// its QP to ERROR, flushing its WRs, and a DREQ, as `rdma_disconnect`), `device-removal`
/// (`RDMA_CM_EVENT_DEVICE_REMOVAL` for every ID bound to the device, its QP to ERROR).
impl Lib {
    pub(crate) fn fault_due(&mut self) {
        let lib = self;
        let Some(mut f) = faults() else { return };
        let t = now();
        let rel = t.saturating_sub(f.start);
        if f.plan.next_cm_at().is_none_or(|at| at > rel) {
            return;
        }
        let cm_state = |lib: &Lib, c: CommId| lib.cm.as_ref().and_then(|cm| cm.state(c));
        let established: Vec<(usize, CommId, u64)> = lib
            .ids
            .iter()
            .filter_map(|(&k, st)| Some((k, st.comm?, st.created)))
            .filter(|&(_, c, _)| cm_state(lib, c) == Some(State::Established))
            .collect();
        let bound: Vec<(usize, u64)> =
            lib.ids.iter().filter(|(_, st)| st.state != IdState::Idle).map(|(&k, st)| (k, st.created)).collect();
        // A fault scoped to an ID (`cm-id=`) acts on that ID only, and waits for it.
        let of = |want: Option<u64>, id: u64| want.is_none_or(|w| w == id);
        let ready = |e: CmEffect, want: Option<u64>| match e {
            CmEffect::Disconnect => established.iter().any(|&(_, _, id)| of(want, id)),
            _ => want.is_none() || bound.iter().any(|&(_, id)| of(want, id)),
        };
        for (i, e, want) in f.plan.due_cm(rel, ready) {
            f.injected(rel, i, e);
            match e {
                CmEffect::Disconnect => {
                    for &(k, c, _) in established.iter().filter(|&&(_, _, id)| of(want, id)) {
                        lib.qp_to_err(k);
                        if let Some(cm) = lib.cm.as_mut() {
                            let _ = cm.disconnect(t, c, &[]);
                        }
                    }
                }
                CmEffect::DeviceRemoval => {
                    for &(k, _) in bound.iter().filter(|&&(_, id)| of(want, id)) {
                        lib.qp_to_err(k);
                        lib.post(k, 0, event::DEVICE_REMOVAL, 0, |_| {});
                    }
                }
                _ => {}
            }
        }
    }
}
