//! The engine's doors with a fault plan set: `handle_datagram` and `poll_transmit` ask the
//! [`Injector`] first. A third `impl` block of [`Engine`]; without a plan the engine never
//! comes here.

use super::inject::Injected;
use super::inject::{tally, HeldRx, Injector, RxVerdict};
use super::plan::{Action, FaultPlan, Site};
use crate::engine::comp::enter_error;
use crate::engine::qp::Qp;
use crate::engine::resp::{queue_ack, report, RespError};
use crate::engine::shared::EngineShared;
use crate::engine::types::{AsyncElement, AsyncEventType, Datagram, Error, HostMemory, QpState, QpType, Transmit};
use crate::engine::{recv, Engine, Nanos};
use crate::wire::aeth::{NakCode, Syndrome};
use crate::wire::icrc::{store_icrc, ROCEV2_PORT};
use crate::wire::opcode::{HeaderSet, OpKind, Opcode, Position};
use crate::wire::Parsed;

/// Packets `poll_transmit` may drop or hold in one call before it gives up for this call (a
/// plan that drops everything must not keep the caller in a loop).
const TX_TRIES: usize = 64;

impl<M: HostMemory> Engine<M> {
    /// Sets (or, with `None`, clears) the fault plan whose packet faults the engine carries
    /// out. Packets it holds are dropped with it.
    pub fn set_fault_plan(&mut self, plan: Option<FaultPlan>) {
        self.sh.faults = plan.map(|p| Box::new(Injector::new(p)));
    }

    /// The plan in force, with each fault's firing count.
    pub fn fault_plan(&self) -> Option<&FaultPlan> {
        self.sh.faults.as_ref().map(|f| &f.plan)
    }

    /// The next injected fault not yet taken, for the driver's log.
    pub fn poll_injected(&mut self) -> Option<Injected> {
        self.sh.faults.as_mut()?.log.pop_front()
    }

    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn handle_datagram_faulted(&mut self, now: Nanos, d: &Datagram<'_>) {
        self.release_held_rx(now);
        if self.sh.faults.as_ref().is_some_and(|f| f.port_down(now)) {
            self.sh.counters.faults_injected += 1;
            self.sh.counters.faults_port_down_drops += 1;
            return;
        }
        let answerable = self.answerable(d.payload);
        let Some(f) = self.sh.faults.as_mut() else { return };
        let verdict = f.on_rx(now, d, answerable);
        if let Some(a) = f.last.take() {
            tally(&mut self.sh.counters, &a);
        }
        match verdict {
            RxVerdict::Pass => self.receive(now, d),
            RxVerdict::Consumed => return,
            RxVerdict::Twice => {
                self.receive(now, d);
                self.receive(now, d);
            }
            RxVerdict::Altered(b) => {
                let icrc = Injector::trusted_icrc(&b);
                self.receive(now, &Datagram { icrc, payload: &b, ..*d });
            }
            RxVerdict::Answer(nak) => {
                if !self.answer(now, d, nak) {
                    self.receive(now, d);
                }
            }
        }
        if let Some(f) = self.sh.faults.as_mut() {
            f.after_rx();
        }
    }

    /// Carries out the device faults that are due, and brings a downed port back up.
    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn device_faults(&mut self, now: Nanos) {
        // Taken out while the engine's state changes, put back at the end.
        let Some(mut f) = self.sh.faults.take() else { return };
        if f.port_down_until.is_some_and(|t| now >= t) {
            f.port_down_until = None;
            self.sh.async_event(AsyncEventType::PortActive, AsyncElement::Port(1));
        }
        let due = f.plan.due_device(now);
        for (fault, action, qpn) in due {
            f.push_log(Injected { at: now, fault, action, site: Site::Device, qpn, psn: None });
            tally(&mut self.sh.counters, &action);
            match action {
                Action::QpFatal | Action::DeviceFatal => {
                    if action == Action::DeviceFatal {
                        self.sh.async_event(AsyncEventType::DeviceFatal, AsyncElement::Device);
                    }
                    for q in self.qps.iter_mut().flatten() {
                        if qpn.is_some_and(|n| n != q.qpn) || matches!(q.state, QpState::Reset | QpState::Err) {
                            continue;
                        }
                        // A fatal QP error: the event, then the QP in ERROR with its WRs
                        // flushed (a device fatal error takes every QP down, with the one
                        // device event).
                        if action == Action::QpFatal {
                            self.sh.async_event(AsyncEventType::QpFatal, AsyncElement::Qp(q.qpn));
                        }
                        enter_error(q, &mut self.sh);
                    }
                }
                Action::CqOverrun => {
                    let cqs: Vec<u32> = self.sh.cqs.ids().collect();
                    for c in cqs {
                        self.sh.async_event(AsyncEventType::CqErr, AsyncElement::Cq(c));
                    }
                }
                Action::SrqLimit => {
                    let srqs: Vec<u32> = self.sh.srqs.ids().collect();
                    for id in srqs {
                        // Only an armed SRQ reports its limit, and it disarms, as a real one.
                        let Some(srq) = self.sh.srqs.get_mut(id) else { continue };
                        if srq.limit > 0 {
                            srq.limit = 0;
                            self.sh.async_event(AsyncEventType::SrqLimitReached, AsyncElement::Srq(id));
                        }
                    }
                }
                Action::PortDown(d) => {
                    f.port_down_until = Some(now.saturating_add(d));
                    self.sh.async_event(AsyncEventType::PortErr, AsyncElement::Port(1));
                }
                _ => {}
            }
        }
        self.sh.faults = Some(f);
    }

    /// A verb's fault (site `post-send`, `post-recv`, `reg-mr`): the errno the plan gives this
    /// call, if any. The call then does nothing else, as a provider that refuses it.
    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn verb_fault(&mut self, site: Site, qpn: Option<u32>) -> Result<(), Error> {
        let Some(f) = self.sh.faults.as_deref_mut() else { return Ok(()) };
        let now = self.sh.clock;
        match f.decide_here(now, site, qpn, &mut self.sh.counters) {
            Some(Action::Errno(e)) => Err(Error::Injected(e)),
            _ => Ok(()),
        }
    }

    /// Whether the port is up: false while a `port-down` fault holds it down.
    pub fn port_active(&self, now: Nanos) -> bool {
        !self.sh.faults.as_ref().is_some_and(|f| f.port_down(now))
    }

    /// Receives the held datagrams that are due.
    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn release_held_rx(&mut self, now: Nanos) {
        let Some(f) = self.sh.faults.as_mut() else { return };
        for h in f.due_rx(now) {
            let HeldRx { src, src_port, dst, payload, .. } = h;
            let icrc = Injector::trusted_icrc(&payload);
            self.receive(now, &Datagram { src, src_port, dst, icrc, payload: &payload, ce: false });
        }
    }

    /// Whether the responder could answer this datagram with an RNR NAK, and with a NAK, by
    /// itself (see [`Point::rnr_answerable`](super::plan::Point)): read from the BTH and the
    /// QP, before any check.
    fn answerable(&self, payload: &[u8]) -> (bool, bool) {
        let [op, _, _, _, _, q1, q2, q3, _, p1, p2, p3, ..] = *payload else { return (false, false) };
        let qpn = u32::from_be_bytes([0, q1, q2, q3]);
        let Some(Some(q)) = self.qps.get(self.qspace.idx(qpn)) else { return (false, false) };
        let info = Opcode(op).info();
        let connected = matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe);
        let psn = u32::from_be_bytes([0, p1, p2, p3]);
        let nak =
            connected && matches!(q.ty, QpType::Rc | QpType::XrcRecv) && info.request && psn == q.resp.epsn.value();
        let starts = matches!(info.position, Some(Position::First | Position::Only) | None);
        let consumes =
            info.kind == OpKind::Send || (info.kind == OpKind::Write && info.headers.contains(HeaderSet::IMMDT));
        (nak && starts && consumes, nak)
    }

    /// Answers a received request as the plan says instead of executing it; false when the
    /// packet is not one such an answer exists for (it is then received as usual).
    fn answer(&mut self, now: Nanos, d: &Datagram<'_>, nak: Option<u8>) -> bool {
        self.sh.tick(now);
        let Some(p) = recv::check_packet(&mut self.sh.counters, d) else { return true };
        let qpn = p.headers.bth.dest_qp;
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { return false };
        if !recv::check_qp(&mut self.sh.counters, q, d, &p) {
            return true;
        }
        let done = inject_answer(q, &mut self.sh, &p, nak);
        if done {
            self.touch(qpn);
        }
        done
    }

    #[cold]
    #[inline(never)]
    pub(in crate::engine) fn poll_transmit_faulted(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.sh.faults.as_mut().and_then(|f| f.release_tx(now, buf)) {
            return Some(t);
        }
        for _ in 0..TX_TRIES {
            let Some(t) = self.transmit(now, buf) else {
                // Nothing new: a packet held for reordering leaves now.
                let f = self.sh.faults.as_mut()?;
                f.flush_reorder(now);
                return f.release_tx(now, buf);
            };
            let ip = self.sh.tx_ip(t.dst);
            let f = self.sh.faults.as_mut()?;
            if f.port_down(now) {
                self.sh.counters.faults_injected += 1;
                self.sh.counters.faults_port_down_drops += 1;
                continue;
            }
            let rehash = |b: &mut [u8]| {
                if let (Some(ip), Some(n)) = (ip, b.len().checked_sub(4)) {
                    let c = crate::wire::icrc::icrc(&ip, t.src_port, ROCEV2_PORT, &b[..n]);
                    store_icrc(b, c);
                }
            };
            let out = f.on_tx(now, t, buf, rehash);
            if let Some(a) = f.last.take() {
                tally(&mut self.sh.counters, &a);
            }
            if out.is_some() {
                return out;
            }
        }
        None
    }
}

/// What the responder does when it meets the condition itself: an RNR NAK for a request that
/// would consume a receive WQE at the start of a message; a PSN sequence error NAK for the
/// expected PSN; the fatal NAKs through the responder's one error path (the WQE's completion,
/// the async event, the QP to ERROR). Only in-sequence requests of a connected RC or XRC
/// target QP; false for any other packet.
fn inject_answer<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>, nak: Option<u8>) -> bool {
    let connected = matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe);
    let psn = p.headers.bth.psn;
    if !connected || !matches!(q.ty, QpType::Rc | QpType::XrcRecv) || !p.info.request || psn.distance(q.resp.epsn) != 0
    {
        return false;
    }
    match nak {
        None => {
            let starts = matches!(p.info.position, Some(Position::First | Position::Only) | None);
            let consumes = p.info.kind == OpKind::Send || (p.info.kind == OpKind::Write && p.headers.immdt.is_some());
            if !(starts && consumes) {
                return false;
            }
            report(q, sh, RespError::RnrNoWqe, psn);
        }
        Some(0) => {
            sh.counters.psn_seq_errs += 1;
            let e = q.resp.epsn;
            queue_ack(q, Syndrome::Nak(NakCode::PsnSequenceError), e);
        }
        Some(1) => report(q, sh, RespError::InvalidRequest, psn),
        Some(2) => report(q, sh, RespError::RemoteAccess, psn),
        Some(_) => report(q, sh, RespError::RemoteOp, psn),
    }
    true
}
