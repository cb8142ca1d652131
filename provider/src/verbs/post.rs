//! Posting work requests: `ops.post_send`, `ops.post_recv` and `ops.post_srq_recv`.
//!
//! One walker, `walk_chain`, follows the caller's linked list for both send and receive
//! WRs: it validates each WR's SGE list and hands it on, and stops at the first error with
//! the WR that failed, which becomes `*bad_wr`. A send chain is walked inside one
//! [`glue::post_send_chain`] call: posted under one device lock and transmitted once.

use super::{dev_of, RESOLVE};
use crate::abi::*;
use crate::convert::{self, checked_sge_count};
use crate::glue;
use crate::objects::*;
use libc::c_int;
use urxe::engine::{QpType, RecvWr};

/// A work request of a caller's linked list (`ibv_send_wr` or `ibv_recv_wr`).
trait ChainedWr {
    /// The next WR of the list (NULL at the end).
    fn next(&self) -> *mut Self;
    /// The WR's `(sg_list, num_sge)`.
    fn sg_list(&self) -> (*mut ibv_sge, c_int);
}

impl ChainedWr for ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn sg_list(&self) -> (*mut ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

impl ChainedWr for ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
    fn sg_list(&self) -> (*mut ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

/// Read a WR's SGE list (validated against `max_sge`) into a slice.
///
/// # Safety
/// `sg_list` points to `num_sge` readable `ibv_sge` when non-NULL.
unsafe fn sges<'a>(sg_list: *mut ibv_sge, num_sge: c_int, max_sge: u32) -> Result<&'a [ibv_sge], i32> {
    let n = checked_sge_count(num_sge, sg_list.is_null(), max_sge)?;
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: caller contract; n validated above.
    Ok(unsafe { std::slice::from_raw_parts(sg_list, n) })
}

/// Hand every WR of the chain starting at `wr`, with its validated SGE list, to `post`, in
/// order. Stops at the first error and returns it with the WR that failed (`wr` itself when
/// the chain is empty: EINVAL).
///
/// # Safety
/// `wr` is NULL or the head of a readable NULL-terminated chain whose `sg_list`s hold
/// `num_sge` readable entries each.
unsafe fn walk_chain<W: ChainedWr>(
    wr: *mut W,
    max_sge: u32,
    mut post: impl FnMut(&W, &[ibv_sge]) -> Result<(), i32>,
) -> Result<(), (*mut W, i32)> {
    if wr.is_null() {
        return Err((wr, libc::EINVAL));
    }
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: caller contract: a readable WR of the chain.
        let w = unsafe { &*cur };
        let (sg_list, num_sge) = w.sg_list();
        // SAFETY: caller contract: the WR's sg_list has num_sge entries.
        let r = unsafe { sges(sg_list, num_sge, max_sge) }.and_then(|sg| post(w, sg));
        if let Err(e) = r {
            return Err((cur, e));
        }
        cur = w.next();
    }
    Ok(())
}

/// A failed post, the verbs way: `*bad_wr` is the first WR not posted, the errno is returned.
///
/// # Safety
/// `bad_wr` is NULL or writable.
unsafe fn fail_at<W>(bad_wr: *mut *mut W, at: *mut W, e: i32) -> Result<(), i32> {
    if !bad_wr.is_null() {
        // SAFETY: caller contract: a writable out-pointer.
        unsafe { *bad_wr = at };
    }
    Err(e)
}

crate::c_fn! {
    /// `ops.post_send`: on error `*bad_wr` is the first WR not posted.
    fn post_send_op(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
        if wr.is_null() {
            // SAFETY: caller passes a writable `bad_wr` or NULL.
            return unsafe { fail_at(bad_wr, wr, libc::EINVAL) };
        }
        // A failure outside the walk (the engine could not be reached) names the first WR.
        let mut failed = wr;
        let r = glue::post_send_chain(dev, s.qpn, |post| {
            // SAFETY: the caller's chain of readable WRs.
            unsafe {
                walk_chain(wr, s.cap.max_send_sge, |w, sg| {
                    // An XRC initiator's WR names the remote XRC SRQ in `qp_type.xrc` (a
                    // union of plain integers in the readable WR: the enclosing block's
                    // contract).
                    let srqn = (s.qp_type == QpType::XrcSend).then_some(w.qp_type.xrc.remote_srqn);
                    convert::with_sge_buf(sg.len(), |buf| {
                        convert::send_wr_from_c(w, sg, buf, s.qp_type, &RESOLVE).and_then(|ew| post(srqn, &ew))
                    })
                })
            }
            .map_err(|(at, e)| {
                failed = at;
                e
            })
        });
        // SAFETY: caller passes a writable `bad_wr` or NULL.
        r.or_else(|e| unsafe { fail_at(bad_wr, failed, e) })
    }
}

/// Post a chain of receive WRs with `post` (QP or SRQ).
///
/// # Safety
/// `wr` is NULL or a readable chain (as [`walk_chain`]); `bad_wr` NULL or writable.
unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    mut post: impl FnMut(&RecvWr<'_>) -> Result<(), i32>,
) -> Result<(), i32> {
    // SAFETY: caller contract.
    let r = unsafe {
        walk_chain(wr, max_sge, |w, sg| {
            convert::with_sge_buf(sg.len(), |buf| convert::recv_wr_from_c(w, sg, buf).and_then(|ew| post(&ew)))
        })
    };
    // SAFETY: caller contract.
    r.or_else(|(at, e)| unsafe { fail_at(bad_wr, at, e) })
}

crate::c_fn! {
    /// `ops.post_recv`: EINVAL for a QP attached to an SRQ.
    fn post_recv_op(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        if !s.ibv.qp_base.srq.is_null() {
            // SAFETY: caller passes a writable `bad_wr` or NULL.
            return unsafe { fail_at(bad_wr, wr, libc::EINVAL) };
        }
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
        let qpn = s.qpn;
        // SAFETY: caller's chain.
        unsafe { post_recv_chain(wr, bad_wr, s.cap.max_recv_sge, |w| glue::post_recv(dev, qpn, w)) }
    }
}

crate::c_fn! {
    /// `ops.post_srq_recv`.
    fn post_srq_recv_op(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.context) }?;
        let id = s.id;
        // SAFETY: caller's chain.
        unsafe { post_recv_chain(wr, bad_wr, s.max_sge, |w| glue::post_srq_recv(dev, id, w)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    #[test]
    fn one_walker_posts_in_order_and_names_the_failing_wr() {
        let mut sg = [ibv_sge { addr: 0x1000, length: 8, lkey: 1 }];
        let mut w3 = ibv_recv_wr::zeroed();
        let mut w2 = ibv_recv_wr::zeroed();
        let mut w1 = ibv_recv_wr::zeroed();
        let (p1, p2, p3) = (ptr::addr_of_mut!(w1), ptr::addr_of_mut!(w2), ptr::addr_of_mut!(w3));
        // SAFETY: three live WRs of this test, linked 1 -> 2 -> 3; `sg` outlives them.
        unsafe {
            (*p3).wr_id = 3;
            (*p2).wr_id = 2;
            (*p2).next = p3;
            (*p2).sg_list = sg.as_mut_ptr();
            (*p2).num_sge = 1;
            (*p1).wr_id = 1;
            (*p1).next = p2;
        }
        let mut seen = Vec::new();
        // SAFETY: as above, for every call below.
        let r = unsafe {
            walk_chain(p1, 1, |w, sg| {
                seen.push((w.wr_id, sg.len()));
                Ok(())
            })
        };
        assert_eq!(r, Ok(()));
        assert_eq!(seen, [(1, 0), (2, 1), (3, 0)]);
        // SAFETY: as above.
        let r = unsafe { walk_chain(p1, 1, |w, _| if w.wr_id == 2 { Err(libc::ENOMEM) } else { Ok(()) }) };
        assert_eq!(r, Err((p2, libc::ENOMEM)));
        // SAFETY: as above; WR 2 has more SGEs than max_sge 0 allows.
        let r = unsafe { walk_chain(p1, 0, |_, _| Ok(())) };
        assert_eq!(r, Err((p2, libc::EINVAL)));
        // SAFETY: an empty chain is never dereferenced.
        let r = unsafe { walk_chain::<ibv_send_wr>(ptr::null_mut(), 1, |_, _| Ok(())) };
        assert_eq!(r, Err((ptr::null_mut(), libc::EINVAL)));
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // SAFETY: `bad` is a writable out-pointer.
        assert_eq!(unsafe { fail_at(&mut bad, p2, libc::EAGAIN) }, Err(libc::EAGAIN));
        assert_eq!(bad, p2);
    }
}
