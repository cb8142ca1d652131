//! Posting work requests: `ops.post_send`, `ops.post_recv` and `ops.post_srq_recv`.
//!
//! The hot path, in two steps that can be read top to bottom:
//! 1. convert: one walker, [`walk_chain`], follows the caller's linked list (send or receive
//!    WRs), validates each WR's SGE list and converts the WR to the engine's type. No lock is
//!    held: the C structs are read here and nowhere after. A list of one WR (what perftest,
//!    UCX and rsockets post) is converted on the stack; a longer one into a batch on the heap.
//! 2. post: ONE typed call into the device with the converted WRs ([`glue::post_sends`],
//!    [`glue::post_recvs`], [`glue::post_srq_recvs`]): one device lock, one transmit.
//!
//! The verbs contract on failure: WRs before the failing one are posted, `*bad_wr` is the first
//! WR not posted and its errno is returned, whether the conversion or the engine refused it.

use super::{dev_of, RESOLVE};
use crate::abi::*;
use crate::convert::{self, checked_sge_count};
use crate::glue;
use crate::objects::*;
use libc::c_int;
use std::ops::Range;
use urxe::engine::{QpType, RecvWr, SendWr, Sge};
use urxe::runtime::PostSend;

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

/// Hand every WR of the chain starting at `wr`, with its validated SGE list, to `each`, in
/// order. Stops at the first error and returns it with the WR that failed (`wr` itself when
/// the chain is empty: EINVAL).
///
/// # Safety
/// `wr` is NULL or the head of a readable NULL-terminated chain whose `sg_list`s hold
/// `num_sge` readable entries each.
unsafe fn walk_chain<W: ChainedWr>(
    wr: *mut W,
    max_sge: u32,
    mut each: impl FnMut(&W, &[ibv_sge]) -> Result<(), i32>,
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
        let r = unsafe { sges(sg_list, num_sge, max_sge) }.and_then(|sg| each(w, sg));
        if let Err(e) = r {
            return Err((cur, e));
        }
        cur = w.next();
    }
    Ok(())
}

/// The `i`-th WR of the chain starting at `wr` (`i` is within the chain).
///
/// # Safety
/// As [`walk_chain`], and the chain has more than `i` WRs.
unsafe fn nth<W: ChainedWr>(wr: *mut W, i: usize) -> *mut W {
    let mut cur = wr;
    for _ in 0..i {
        // SAFETY: caller contract: WRs 0..i are readable and not the last.
        cur = unsafe { (*cur).next() };
    }
    cur
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

/// A list converted for one call into the device: every WR up to the first that failed to
/// convert, its SGEs in one pool (`Range`s into `sges`), and that failure.
struct Converted<H> {
    heads: Vec<(H, Range<usize>)>,
    sges: Vec<Sge>,
    failed: Option<(usize, i32)>,
}

/// Converts the chain at `wr` with `conv` (a WR and its SGE list -> its head and engine SGEs),
/// stopping at the first WR that fails.
///
/// # Safety
/// As [`walk_chain`].
unsafe fn convert_chain<W: ChainedWr, H>(
    wr: *mut W,
    max_sge: u32,
    mut conv: impl FnMut(&W, &[ibv_sge], &mut Vec<Sge>) -> Result<H, i32>,
) -> Converted<H> {
    let mut c = Converted { heads: Vec::new(), sges: Vec::new(), failed: None };
    // SAFETY: caller contract.
    let r = unsafe {
        walk_chain(wr, max_sge, |w, sg| {
            let start = c.sges.len();
            let h = conv(w, sg, &mut c.sges)?;
            c.heads.push((h, start..c.sges.len()));
            Ok(())
        })
    };
    if let Err((_, e)) = r {
        c.failed = Some((c.heads.len(), e));
    }
    c
}

/// One send WR converted by the engine's rules for QP `s`, with the remote XRC SRQ it names
/// (an XRC initiator's WR names it in `qp_type.xrc`, a union of plain integers).
fn convert_send<'a>(s: &UrxeQp, w: &ibv_send_wr, sg: &[ibv_sge], buf: &'a mut [Sge]) -> Result<PostSend<'a>, i32> {
    // SAFETY: a union of plain integers in a readable WR.
    let srqn = (s.qp_type == QpType::XrcSend).then_some(unsafe { w.qp_type.xrc.remote_srqn });
    Ok(PostSend { srqn, wr: convert::send_wr_from_c(w, sg, buf, s.qp_type, &RESOLVE)? })
}

/// Posts what `convert_chain` converted with one call `post`, then reports the first WR not
/// posted: the one the device refused, else the one that failed to convert.
///
/// # Safety
/// `wr` is the chain `c` was converted from (as [`walk_chain`]); `bad_wr` NULL or writable.
unsafe fn post_converted<W: ChainedWr, H>(
    wr: *mut W,
    bad_wr: *mut *mut W,
    c: &Converted<H>,
    post: impl FnOnce(&Converted<H>) -> Result<(), (usize, i32)>,
) -> Result<(), i32> {
    let r = if c.heads.is_empty() { Ok(()) } else { post(c) };
    match r.err().or(c.failed) {
        None => Ok(()),
        // SAFETY: caller contract; WR `i` is in the chain (posted or failed to convert).
        Some((i, e)) => unsafe { fail_at(bad_wr, nth(wr, i), e) },
    }
}

/// `ops.post_send`: on error `*bad_wr` is the first WR not posted.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn post_send_op(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
    let max_sge = s.cap.max_send_sge;
    // SAFETY: the caller's WR, or NULL.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // One WR: converted on the stack, then one call into the device.
        let (sg_list, num_sge) = w.sg_list();
        // SAFETY: the caller's WR has `num_sge` readable SGEs.
        let r = unsafe { sges(sg_list, num_sge, max_sge) }.and_then(|sg| {
            convert::with_sge_buf(sg.len(), |buf| {
                let p = convert_send(s, w, sg, buf)?;
                glue::post_sends(dev, s.qpn, &[p]).map_err(|(_, e)| e)
            })
        });
        // SAFETY: caller passes a writable `bad_wr` or NULL.
        return r.or_else(|e| unsafe { fail_at(bad_wr, wr, e) });
    }
    // SAFETY: the caller's chain of readable WRs.
    let c = unsafe {
        convert_chain(wr, max_sge, |w, sg, pool| {
            convert::with_sge_buf(sg.len(), |buf| {
                let p = convert_send(s, w, sg, buf)?;
                pool.extend_from_slice(p.wr.sg_list);
                let w = p.wr;
                Ok((p.srqn, SendWr { wr_id: w.wr_id, kind: w.kind, flags: w.flags, sg_list: &[], ud: w.ud }))
            })
        })
    };
    // SAFETY: the chain `c` was converted from; the caller's `bad_wr`.
    unsafe {
        post_converted(wr, bad_wr, &c, |c| {
            let wrs: Vec<PostSend<'_>> = c
                .heads
                .iter()
                .map(|((srqn, w), r)| PostSend { srqn: *srqn, wr: SendWr { sg_list: &c.sges[r.clone()], ..*w } })
                .collect();
            glue::post_sends(dev, s.qpn, &wrs)
        })
    }
}

/// Converts a chain of receive WRs and posts it with one call `post` (QP or SRQ).
///
/// # Safety
/// `wr` is NULL or a readable chain (as [`walk_chain`]); `bad_wr` NULL or writable.
unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    post: impl FnOnce(&[RecvWr<'_>]) -> Result<(), (usize, i32)>,
) -> Result<(), i32> {
    // SAFETY: the caller's WR, or NULL.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // One WR: converted on the stack.
        let (sg_list, num_sge) = w.sg_list();
        // SAFETY: the caller's WR has `num_sge` readable SGEs.
        let r = unsafe { sges(sg_list, num_sge, max_sge) }.and_then(|sg| {
            convert::with_sge_buf(sg.len(), |buf| post(&[convert::recv_wr_from_c(w, sg, buf)?]).map_err(|(_, e)| e))
        });
        // SAFETY: caller contract.
        return r.or_else(|e| unsafe { fail_at(bad_wr, wr, e) });
    }
    // SAFETY: caller contract.
    let c = unsafe {
        convert_chain(wr, max_sge, |w, sg, pool| {
            convert::with_sge_buf(sg.len(), |buf| {
                let ew = convert::recv_wr_from_c(w, sg, buf)?;
                pool.extend_from_slice(ew.sg_list);
                Ok(ew.wr_id)
            })
        })
    };
    // SAFETY: caller contract.
    unsafe {
        post_converted(wr, bad_wr, &c, |c| {
            let wrs: Vec<RecvWr<'_>> =
                c.heads.iter().map(|(wr_id, r)| RecvWr { wr_id: *wr_id, sg_list: &c.sges[r.clone()] }).collect();
            post(&wrs)
        })
    }
}

/// `ops.post_recv`: EINVAL for a QP attached to an SRQ.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn post_recv_op(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
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
    unsafe { post_recv_chain(wr, bad_wr, s.cap.max_recv_sge, |wrs| glue::post_recvs(dev, qpn, wrs)) }
}

/// `ops.post_srq_recv`.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn post_srq_recv_op(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: caller passes an SRQ of ours.
    let s: &UrxeSrq = unsafe { shell(srq) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(s.ibv.context) }?;
    let id = s.id;
    // SAFETY: caller's chain.
    unsafe { post_recv_chain(wr, bad_wr, s.max_sge, |wrs| glue::post_srq_recvs(dev, id, wrs)) }
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

    #[test]
    fn a_list_is_converted_first_then_posted_in_one_call() {
        let mut sg = [ibv_sge { addr: 0x1000, length: 8, lkey: 1 }, ibv_sge { addr: 0x2000, length: 16, lkey: 2 }];
        let mut w3 = ibv_recv_wr::zeroed();
        let mut w2 = ibv_recv_wr::zeroed();
        let mut w1 = ibv_recv_wr::zeroed();
        let (p1, p2, p3) = (ptr::addr_of_mut!(w1), ptr::addr_of_mut!(w2), ptr::addr_of_mut!(w3));
        // SAFETY: three live WRs of this test, linked 1 -> 2 -> 3; `sg` outlives them. WR 3
        // has two SGEs.
        unsafe {
            (*p3).wr_id = 3;
            (*p3).sg_list = sg.as_mut_ptr();
            (*p3).num_sge = 2;
            (*p2).wr_id = 2;
            (*p2).next = p3;
            (*p2).sg_list = sg.as_mut_ptr().add(1);
            (*p2).num_sge = 1;
            (*p1).wr_id = 1;
            (*p1).next = p2;
        }
        let mut calls: Vec<Vec<(u64, Vec<u32>)>> = Vec::new();
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        // Each WR converted with its own SGEs, all in one call.
        // SAFETY: as above; `bad` is writable (for every call below).
        let r = unsafe {
            post_recv_chain(p1, &mut bad, 2, |wrs| {
                calls.push(wrs.iter().map(|w| (w.wr_id, w.sg_list.iter().map(|s| s.length).collect())).collect());
                Ok(())
            })
        };
        assert_eq!(r, Ok(()));
        let all: Vec<(u64, Vec<u32>)> = vec![(1, vec![]), (2, vec![16]), (3, vec![8, 16])];
        assert_eq!(calls, vec![all.clone()]);
        // WR 3 does not convert (two SGEs, max 1): WRs 1 and 2 are posted, `*bad_wr` is WR 3.
        calls.clear();
        // SAFETY: as above.
        let r = unsafe {
            post_recv_chain(p1, &mut bad, 1, |wrs| {
                calls.push(wrs.iter().map(|w| (w.wr_id, w.sg_list.iter().map(|s| s.length).collect())).collect());
                Ok(())
            })
        };
        assert_eq!((r, bad), (Err(libc::EINVAL), p3));
        assert_eq!(calls, vec![all[..2].to_vec()]);
        // The device refuses WR 2 (index 1): `*bad_wr` is WR 2, its errno returned.
        // SAFETY: as above.
        let r = unsafe { post_recv_chain(p1, &mut bad, 2, |_| Err((1, libc::ENOMEM))) };
        assert_eq!((r, bad), (Err(libc::ENOMEM), p2));
        // One WR: converted on the stack, one call; refused, it is `*bad_wr`.
        let mut n = 0;
        // SAFETY: as above; WR 3 alone is a list of one.
        let r = unsafe {
            post_recv_chain(p3, &mut bad, 2, |wrs| {
                n += wrs.len();
                Err((0, libc::EAGAIN))
            })
        };
        assert_eq!((r, bad, n), (Err(libc::EAGAIN), p3, 1));
    }
}
