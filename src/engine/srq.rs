//! Receive queues (rxe_srq.c and the RQ half of rxe_qp.c): a ring of receive WQEs whose SGE
//! lists live in one preallocated array, shared by a QP's own RQ and by SRQs.

use std::collections::VecDeque;

use super::types::{CqId, PdId, RecvWr, Sge, SrqAttr, XrcdId};

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    /// Slot in the SGE array.
    slot: u32,
    pub num_sge: u32,
    /// The SGEs' total length (summed once, at post).
    total: u64,
}

/// A receive WQE taken off its queue by a responder (copied, so SRQ slots can be reused).
#[derive(Clone, Debug, Default)]
pub(crate) struct TakenWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
    /// The SGEs' total length.
    total: u64,
}

impl TakenWqe {
    pub fn with_capacity(n: usize) -> TakenWqe {
        TakenWqe { wr_id: 0, sges: Vec::with_capacity(n), total: 0 }
    }
    pub fn total_len(&self) -> u64 {
        self.total
    }
}

pub(crate) struct RecvRing {
    pub cap: u32,
    pub max_sge: u32,
    wqes: VecDeque<RecvWqe>,
    sges: Vec<Sge>,
    free_slots: Vec<u32>,
}

impl RecvRing {
    pub fn new(cap: u32, max_sge: u32) -> RecvRing {
        RecvRing {
            cap,
            max_sge,
            wqes: VecDeque::with_capacity(cap as usize),
            sges: vec![Sge::default(); (cap as usize) * (max_sge as usize)],
            free_slots: (0..cap).rev().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.wqes.len()
    }

    /// `false` when the ring is full or the WR has too many SGEs (checked by the caller).
    pub fn push(&mut self, wr: &RecvWr<'_>) -> bool {
        if wr.sg_list.len() > self.max_sge as usize {
            return false;
        }
        let Some(slot) = self.free_slots.pop() else { return false };
        let base = slot as usize * self.max_sge as usize;
        let total = if let [one] = wr.sg_list {
            // The common receive: one SGE stored as a value, no memcpy call and no sum loop.
            self.sges[base] = *one;
            one.length as u64
        } else {
            self.sges[base..base + wr.sg_list.len()].copy_from_slice(wr.sg_list);
            wr.sg_list.iter().map(|s| s.length as u64).sum()
        };
        self.wqes.push_back(RecvWqe { wr_id: wr.wr_id, slot, num_sge: wr.sg_list.len() as u32, total });
        true
    }

    /// Moves the oldest WQE into `out` (reusing its allocation).
    pub fn pop_into(&mut self, out: &mut TakenWqe) -> bool {
        let Some(w) = self.wqes.pop_front() else { return false };
        let base = w.slot as usize * self.max_sge as usize;
        out.wr_id = w.wr_id;
        out.total = w.total;
        out.sges.clear();
        // One SGE (the common receive) is moved as a value: `extend_from_slice` of any length
        // calls memcpy (about 20 instructions per message with its setup, callgrind).
        if w.num_sge == 1 {
            out.sges.push(self.sges[base]);
        } else {
            out.sges.extend_from_slice(&self.sges[base..base + w.num_sge as usize]);
        }
        self.free_slots.push(w.slot);
        true
    }

    /// Removes every WQE, calling `f(wr_id)` in order (flush).
    pub fn drain(&mut self, mut f: impl FnMut(u64)) {
        while let Some(w) = self.wqes.pop_front() {
            self.free_slots.push(w.slot);
            f(w.wr_id);
        }
    }

    /// Grows the ring (SRQ resize). Never shrinks below the current fill.
    pub fn grow(&mut self, cap: u32) {
        if cap <= self.cap {
            return;
        }
        let mut sges = vec![Sge::default(); cap as usize * self.max_sge as usize];
        sges[..self.sges.len()].copy_from_slice(&self.sges);
        self.sges = sges;
        self.free_slots.extend(self.cap..cap);
        self.wqes.reserve(cap as usize - self.wqes.len());
        self.cap = cap;
    }
}

pub(crate) struct Srq {
    pub pd: PdId,
    pub ring: RecvRing,
    /// Armed limit (0 = not armed). When the fill drops below it the SRQ reports
    /// IBV_EVENT_SRQ_LIMIT_REACHED once and disarms.
    pub limit: u32,
    /// QPs attached (destroy is EBUSY while non-zero).
    pub refs: u32,
    /// An XRC SRQ: its domain and the CQ its receives complete on.
    pub xrc: Option<XrcSrq>,
}

/// What makes an SRQ an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct XrcSrq {
    pub xrcd: XrcdId,
    pub cq: CqId,
}

impl Srq {
    pub fn attr(&self) -> SrqAttr {
        SrqAttr { max_wr: self.ring.cap, max_sge: self.ring.max_sge, srq_limit: self.limit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_reuses_slots_and_keeps_order() {
        let mut r = RecvRing::new(2, 2);
        let s = [Sge { addr: 1, length: 2, lkey: 3 }];
        assert!(r.push(&RecvWr { wr_id: 1, sg_list: &s }));
        assert!(r.push(&RecvWr { wr_id: 2, sg_list: &[] }));
        assert!(!r.push(&RecvWr { wr_id: 3, sg_list: &[] }));
        let mut t = TakenWqe::with_capacity(2);
        assert!(r.pop_into(&mut t));
        assert_eq!((t.wr_id, t.sges.as_slice()), (1, &s[..]));
        assert!(r.push(&RecvWr { wr_id: 4, sg_list: &s }));
        let mut ids = vec![];
        r.drain(|id| ids.push(id));
        assert_eq!(ids, vec![2, 4]);
    }

    /// WQEs that wrapped past the ring's end keep their SGEs and order across a grow, and the
    /// grown ring fills to its new capacity, one- and two-SGE WQEs mixed.
    #[test]
    fn grow_keeps_wrapped_wqes_and_their_sges() {
        let sge = |i: u64| Sge { addr: 0x1000 * i, length: i as u32, lkey: 7 + i as u32 };
        let lists: Vec<Vec<Sge>> = (0..9u64).map(|i| (0..1 + i % 2).map(|k| sge(10 * i + k)).collect()).collect();
        let mut r = RecvRing::new(3, 2);
        let mut t = TakenWqe::with_capacity(2);
        for i in 0..3 {
            assert!(r.push(&RecvWr { wr_id: i, sg_list: &lists[i as usize] }));
        }
        assert!(r.pop_into(&mut t));
        assert_eq!((t.wr_id, t.sges.as_slice(), t.total_len()), (0, &lists[0][..], 0));
        assert!(r.push(&RecvWr { wr_id: 3, sg_list: &lists[3] }), "takes the slot the pop freed");
        assert!(!r.push(&RecvWr { wr_id: 99, sg_list: &lists[4] }), "full at 3");
        r.grow(5);
        for i in 4..6 {
            assert!(r.push(&RecvWr { wr_id: i, sg_list: &lists[i as usize] }));
        }
        assert!(!r.push(&RecvWr { wr_id: 99, sg_list: &lists[6] }), "full at 5");
        for i in 1..6u64 {
            assert!(r.pop_into(&mut t));
            let want: u64 = lists[i as usize].iter().map(|s| s.length as u64).sum();
            assert_eq!((t.wr_id, t.sges.as_slice(), t.total_len()), (i, &lists[i as usize][..], want), "WQE {i}");
        }
        assert!(!r.pop_into(&mut t));
    }
}
