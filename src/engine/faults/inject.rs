//! Carrying out a plan's packet faults at the engine's two doors: `handle_datagram` (site
//! `rx`) and `poll_transmit` (site `tx`). Held packets (delayed, reordered, duplicated) are
//! copies kept here until they are due; nothing is allocated while no plan is set.

use super::plan::{Action, Decision, FaultPlan, Nanos, Point, Site};
use crate::engine::counters::Counters;
use crate::engine::types::{Datagram, IcrcCheck, Transmit, WcStatus};
use crate::wire::opcode::Opcode;
use std::collections::VecDeque;
use std::net::IpAddr;

/// One injected fault, for the driver's log, trace and capture comment.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Injected {
    pub at: Nanos,
    /// The fault's index in the plan.
    pub fault: usize,
    pub action: Action,
    pub site: Site,
    pub qpn: Option<u32>,
    pub psn: Option<u32>,
}

/// What the engine does with a received datagram after the plan was asked.
pub(crate) enum RxVerdict {
    /// Receive it as usual.
    Pass,
    /// Gone (dropped, or held to be received later).
    Consumed,
    /// Receive it twice.
    Twice,
    /// Receive this altered copy instead (PSN moved, ICRC recomputed as the sender would).
    Altered(Vec<u8>),
    /// Answer with an RNR NAK (`None`) or a NAK of this AETH code, without executing it.
    Answer(Option<u8>),
}

/// A received datagram kept for later.
pub(crate) struct HeldRx {
    pub due: Nanos,
    pub src: IpAddr,
    pub src_port: u16,
    pub dst: IpAddr,
    pub payload: Vec<u8>,
}

/// A packet to send kept for later.
struct HeldTx {
    due: Nanos,
    t: Transmit,
    bytes: Vec<u8>,
}

/// The plan and what it holds back.
pub(crate) struct Injector {
    pub plan: FaultPlan,
    pub log: VecDeque<Injected>,
    rx_held: Vec<HeldRx>,
    rx_reorder: Option<HeldRx>,
    tx_held: VecDeque<HeldTx>,
    tx_reorder: Option<HeldTx>,
    /// The port is down (`port-down`) until then: nothing is sent or received.
    pub port_down_until: Option<Nanos>,
    /// The action of the packet fault injected last, until the door counts it.
    pub last: Option<Action>,
}

/// At most this many injected faults wait in the log for the driver; older ones are dropped
/// (they were counted).
const LOG_MAX: usize = 1024;

fn bth_point(site: Site, payload: &[u8], peer: IpAddr) -> (Point, Option<u32>) {
    let (qpn, opcode, psn) = match payload {
        [op, _, _, _, _, q1, q2, q3, _, p1, p2, p3, ..] => {
            (Some(u32::from_be_bytes([0, *q1, *q2, *q3])), Some(*op), Some(u32::from_be_bytes([0, *p1, *p2, *p3])))
        }
        _ => (None, None, None),
    };
    let response = opcode.is_some_and(|o| Opcode(o).info().is_response());
    let peer = match peer {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    };
    (Point { site: Some(site), qpn, opcode, response, peer: Some(peer), ..Point::default() }, psn)
}

/// Counts an injected fault: in all, and by its kind.
pub(crate) fn tally(c: &mut Counters, a: &Action) {
    c.faults_injected += 1;
    let kind = match a {
        Action::Drop => &mut c.faults_drop,
        Action::Duplicate => &mut c.faults_dup,
        Action::Reorder => &mut c.faults_reorder,
        Action::Delay(_) => &mut c.faults_delay,
        Action::CorruptIcrc | Action::CorruptPsn(_) => &mut c.faults_corrupt,
        Action::RnrNak => &mut c.faults_rnr_nak,
        Action::Nak(_) => &mut c.faults_nak,
        Action::Errno(_) => &mut c.faults_errno,
        Action::WcStatus(_) => &mut c.faults_wc,
        Action::CqOverrun | Action::QpFatal | Action::PortDown(_) | Action::DeviceFatal | Action::SrqLimit => {
            &mut c.faults_device
        }
        // rdma_cm faults are librdmacm's, counted there.
        _ => return,
    };
    *kind += 1;
}

/// Moves the 24-bit PSN of a packet (BTH bytes 9..12) by `by`.
pub(crate) fn move_psn(bytes: &mut [u8], by: u32) {
    if bytes.len() >= 12 {
        let psn = u32::from_be_bytes([0, bytes[9], bytes[10], bytes[11]]).wrapping_add(by) & 0xFF_FFFF;
        bytes[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    }
}

impl Injector {
    pub fn new(plan: FaultPlan) -> Injector {
        Injector {
            plan,
            log: VecDeque::new(),
            rx_held: Vec::new(),
            rx_reorder: None,
            tx_held: VecDeque::new(),
            tx_reorder: None,
            port_down_until: None,
            last: None,
        }
    }

    fn record(&mut self, at: Nanos, d: Decision, site: Site, p: &Point, psn: Option<u32>) {
        self.last = Some(d.action);
        self.push_log(Injected { at, fault: d.fault, action: d.action, site, qpn: p.qpn, psn });
    }

    pub fn push_log(&mut self, i: Injected) {
        if self.log.len() == LOG_MAX {
            self.log.pop_front();
        }
        self.log.push_back(i);
    }

    /// Asks the plan at a verb or completion point (no packet), logging and counting a firing.
    pub fn decide_here(&mut self, now: Nanos, site: Site, qpn: Option<u32>, c: &mut Counters) -> Option<Action> {
        if !self.plan.watches(site) {
            return None;
        }
        let d = self.plan.decide(now, &Point { site: Some(site), qpn, ..Point::default() })?;
        self.push_log(Injected { at: now, fault: d.fault, action: d.action, site, qpn, psn: None });
        tally(c, &d.action);
        Some(d.action)
    }

    /// The status a fault plan gives a send completion about to be reported as a success
    /// (site `completion`); the completer then takes the error path a real one takes (the QP
    /// to ERROR, the rest flushed).
    #[cold]
    #[inline(never)]
    pub fn completion_fault(&mut self, now: Nanos, qpn: u32, c: &mut Counters) -> Option<WcStatus> {
        match self.decide_here(now, Site::Completion, Some(qpn), c)? {
            Action::WcStatus(code) => WcStatus::from_u32(code).filter(|s| *s != WcStatus::Success),
            _ => None,
        }
    }

    /// Whether the port is down now (a packet sent or received now is lost, as on a dead link).
    pub fn port_down(&self, now: Nanos) -> bool {
        self.port_down_until.is_some_and(|t| now < t)
    }

    /// Asks the plan about a received datagram.
    /// `answerable`: (RNR NAK, NAK) — whether the responder could give either answer itself.
    pub fn on_rx(&mut self, now: Nanos, d: &Datagram<'_>, answerable: (bool, bool)) -> RxVerdict {
        if !self.plan.watches(Site::Rx) {
            return RxVerdict::Pass;
        }
        let (mut p, psn) = bth_point(Site::Rx, d.payload, d.src);
        (p.rnr_answerable, p.nak_answerable) = answerable;
        let Some(dec) = self.plan.decide(now, &p) else { return RxVerdict::Pass };
        self.record(now, dec, Site::Rx, &p, psn);
        let held = |due| HeldRx { due, src: d.src, src_port: d.src_port, dst: d.dst, payload: d.payload.to_vec() };
        match dec.action {
            Action::Drop | Action::CorruptIcrc => RxVerdict::Consumed,
            Action::Duplicate => RxVerdict::Twice,
            Action::Delay(by) => {
                self.rx_held.push(held(now.saturating_add(by)));
                RxVerdict::Consumed
            }
            Action::Reorder => {
                // Received after the next datagram; a second reorder releases the first.
                if let Some(prev) = self.rx_reorder.replace(held(now)) {
                    self.rx_held.push(prev);
                }
                RxVerdict::Consumed
            }
            Action::CorruptPsn(by) => {
                let mut b = d.payload.to_vec();
                move_psn(&mut b, by);
                RxVerdict::Altered(b)
            }
            Action::RnrNak => RxVerdict::Answer(None),
            Action::Nak(code) => RxVerdict::Answer(Some(code)),
            _ => RxVerdict::Pass,
        }
    }

    /// After a datagram passed: the one held for reordering is due now.
    pub fn after_rx(&mut self) {
        if let Some(h) = self.rx_reorder.take() {
            self.rx_held.push(h);
        }
    }

    /// Received datagrams whose time has come, in the order they are due.
    pub fn due_rx(&mut self, now: Nanos) -> Vec<HeldRx> {
        if self.rx_held.iter().all(|h| h.due > now) {
            return Vec::new();
        }
        let (mut due, keep): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.rx_held).into_iter().partition(|h| h.due <= now);
        self.rx_held = keep;
        due.sort_by_key(|h| h.due);
        due
    }

    /// The ICRC check for a held or altered copy: the stored ICRC stands (the copy is what the
    /// peer sent, or what a peer sending that PSN would have hashed).
    pub fn trusted_icrc(payload: &[u8]) -> IcrcCheck {
        let n = payload.len();
        let icrc = if n >= 4 {
            u32::from_le_bytes([payload[n - 4], payload[n - 3], payload[n - 2], payload[n - 1]])
        } else {
            0
        };
        IcrcCheck::Hashed { icrc, id_known: true }
    }

    /// A packet to send that was held and is due now, copied into `buf`.
    pub fn release_tx(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if self.tx_held.front().is_none_or(|h| h.due > now) {
            return None;
        }
        let h = self.tx_held.pop_front()?;
        buf[..h.bytes.len()].copy_from_slice(&h.bytes);
        Some(h.t)
    }

    /// Asks the plan about a packet the engine made (in `buf[..t.len]`): `Some` to send it (as
    /// it is, or altered in place), `None` when it is dropped or held.
    pub fn on_tx(&mut self, now: Nanos, t: Transmit, buf: &mut [u8], rehash: impl Fn(&mut [u8])) -> Option<Transmit> {
        if let Some(h) = self.tx_reorder.take() {
            // The packet held for reordering goes right after this one.
            self.tx_held.push_front(HeldTx { due: now, ..h });
        }
        if !self.plan.watches(Site::Tx) {
            return Some(t);
        }
        let (p, psn) = bth_point(Site::Tx, &buf[..t.len], t.dst);
        let Some(dec) = self.plan.decide(now, &p) else { return Some(t) };
        self.record(now, dec, Site::Tx, &p, psn);
        let copy = |due| HeldTx { due, t, bytes: buf[..t.len].to_vec() };
        match dec.action {
            Action::Drop => None,
            Action::Duplicate => {
                self.tx_held.push_front(copy(now));
                Some(t)
            }
            Action::Delay(by) => {
                let h = copy(now.saturating_add(by));
                let at = self.tx_held.iter().position(|x| x.due > h.due).unwrap_or(self.tx_held.len());
                self.tx_held.insert(at, h);
                None
            }
            Action::Reorder => {
                self.tx_reorder = Some(copy(now));
                None
            }
            Action::CorruptIcrc => {
                if t.len >= 4 {
                    buf[t.len - 1] ^= 0xFF;
                }
                Some(t)
            }
            Action::CorruptPsn(by) => {
                move_psn(&mut buf[..t.len], by);
                rehash(&mut buf[..t.len]);
                Some(t)
            }
            _ => Some(t),
        }
    }

    /// Nothing else to send: a packet held for reordering leaves now rather than wait.
    pub fn flush_reorder(&mut self, now: Nanos) {
        if let Some(h) = self.tx_reorder.take() {
            self.tx_held.push_back(HeldTx { due: now, ..h });
        }
        if let Some(h) = self.rx_reorder.take() {
            self.rx_held.push(HeldRx { due: now, ..h });
        }
    }

    /// Whether a held packet is waiting to be sent (due or not).
    pub fn holds_tx(&self) -> bool {
        !self.tx_held.is_empty() || self.tx_reorder.is_some()
    }

    /// The earliest time a held packet falls due.
    pub fn next_due(&self) -> Option<Nanos> {
        [
            self.tx_held.iter().map(|h| h.due).min(),
            self.rx_held.iter().map(|h| h.due).min(),
            self.plan.next_device_at(),
            self.port_down_until,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
