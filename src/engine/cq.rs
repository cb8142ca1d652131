//! Completion queues (rxe_cq.c): a preallocated ring of completions, one-shot notification
//! arming, and overflow -> CQ error.

use std::collections::VecDeque;

use super::types::{WcStatus, WorkCompletion};

pub(crate) struct Cq {
    pub cap: usize,
    ring: VecDeque<WorkCompletion>,
    /// `Some(solicited_only)` while armed by `req_notify_cq`.
    pub armed: Option<bool>,
    /// Set once the CQ overflowed: it reports IBV_EVENT_CQ_ERR and accepts nothing more.
    pub overflowed: bool,
    /// QPs and SRQs referencing this CQ (destroy is EBUSY while non-zero).
    pub refs: u32,
}

/// What pushing a completion caused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PushOutcome {
    Stored {
        notify: bool,
    },
    /// The CQ was full: the completion is lost and the CQ is in error.
    Overflow {
        first: bool,
    },
}

impl Cq {
    pub fn new(cap: usize) -> Cq {
        Cq { cap, ring: VecDeque::with_capacity(cap), armed: None, overflowed: false, refs: 0 }
    }

    /// Stores a completion. `solicited` is the SE bit of a receive completion.
    pub fn push(&mut self, wc: WorkCompletion, solicited: bool) -> PushOutcome {
        if self.overflowed || self.ring.len() >= self.cap {
            let first = !self.overflowed;
            self.overflowed = true;
            return PushOutcome::Overflow { first };
        }
        self.ring.push_back(wc);
        let notify = match self.armed {
            Some(only_solicited) => !only_solicited || solicited || wc.status != WcStatus::Success,
            None => false,
        };
        if notify {
            self.armed = None;
        }
        PushOutcome::Stored { notify }
    }

    /// Stores a successful send completion the caller checked there is room for (not
    /// overflowed, below `cap`); true if it fires the armed notification.
    #[inline]
    pub fn push_room(&mut self, wc: WorkCompletion) -> bool {
        self.ring.push_back(wc);
        // A success is solicited for no one: only an unconditional arming fires.
        if self.armed == Some(false) {
            self.armed = None;
            return true;
        }
        false
    }

    /// Changes the capacity; refused if the completions queued now would not fit.
    pub fn resize(&mut self, cap: usize) -> Result<(), super::types::Error> {
        if cap < self.ring.len() {
            return Err(super::types::Error::Invalid);
        }
        self.cap = cap;
        self.ring.reserve(cap.saturating_sub(self.ring.len()));
        Ok(())
    }

    /// Drops the queued completions of QP `qpn` from its send queue (`recv` false) or its
    /// receive queue (`recv` true).
    pub fn purge_qp(&mut self, qpn: u32, recv: bool) {
        // Receive opcodes (IBV_WC_RECV and up) have bit 7 set.
        self.ring.retain(|wc| wc.qp_num != qpn || ((wc.opcode as u32) & 0x80 != 0) != recv);
    }

    /// Completions queued.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        let n = out.len().min(self.ring.len());
        // Copied as (at most) two slices of the ring, then dropped from it.
        let (a, b) = self.ring.as_slices();
        let na = n.min(a.len());
        out[..na].copy_from_slice(&a[..na]);
        out[na..n].copy_from_slice(&b[..n - na]);
        self.ring.drain(..n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_is_reported_once_and_keeps_old_entries() {
        let mut cq = Cq::new(2);
        let wc = WorkCompletion::default();
        assert_eq!(cq.push(wc, false), PushOutcome::Stored { notify: false });
        assert_eq!(cq.push(wc, false), PushOutcome::Stored { notify: false });
        assert_eq!(cq.push(wc, false), PushOutcome::Overflow { first: true });
        assert_eq!(cq.push(wc, false), PushOutcome::Overflow { first: false });
        let mut out = [WorkCompletion::default(); 4];
        assert_eq!(cq.poll(&mut out), 2);
    }

    #[test]
    fn resize_keeps_entries_and_refuses_to_shrink_below_them() {
        let mut cq = Cq::new(2);
        let wc = WorkCompletion::default();
        cq.push(wc, false);
        cq.push(wc, false);
        assert!(cq.resize(1).is_err());
        cq.resize(4).unwrap();
        assert_eq!(cq.push(wc, false), PushOutcome::Stored { notify: false });
        let mut out = [WorkCompletion::default(); 8];
        assert_eq!(cq.poll(&mut out), 3);
    }

    #[test]
    fn solicited_only_arming_ignores_unsolicited_success() {
        let mut cq = Cq::new(8);
        cq.armed = Some(true);
        let wc = WorkCompletion::default();
        assert_eq!(cq.push(wc, false), PushOutcome::Stored { notify: false });
        assert_eq!(cq.push(wc, true), PushOutcome::Stored { notify: true });
        // One-shot: disarmed now.
        assert_eq!(cq.push(wc, true), PushOutcome::Stored { notify: false });
    }
}
