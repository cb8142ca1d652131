//! The verbs data path rsockets drives: `<infiniband/verbs.h>`'s work requests, completions and
//! MRs (the toolkit's mirrors, `urxe_cabi::verbs`, checked against the installed header by
//! tests/abi_layout.rs), and the inline calls (`ibv_post_send`, `ibv_poll_cq`, …) that
//! reach the provider through `ibv_context.ops`, as the header's inline functions do.
#![allow(non_camel_case_types)]

use libc::{c_int, c_uint, c_void};
use urxe_cabi::verbs as c;
/// The mirrors, from the toolkit both C libraries share (libibverbs.so.1 reads the same ones).
pub use urxe_cabi::verbs::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_imm_or_rkey, ibv_mr, ibv_pd, ibv_qp, ibv_recv_wr, ibv_send_wr,
    ibv_send_wr_rdma, ibv_send_wr_wr, ibv_sge, ibv_wc,
};

pub const IBV_WR_RDMA_WRITE: c_uint = c::IBV_WR_RDMA_WRITE as c_uint;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = c::IBV_WR_RDMA_WRITE_WITH_IMM as c_uint;
pub const IBV_SEND_INLINE: c_uint = c::IBV_SEND_INLINE as c_uint;
pub const IBV_WC_SUCCESS: c_uint = c::IBV_WC_SUCCESS as c_uint;
pub const IBV_WC_WITH_IMM: c_uint = c::IBV_WC_WITH_IMM as c_uint;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = c::IBV_ACCESS_LOCAL_WRITE as c_int;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = c::IBV_ACCESS_REMOTE_WRITE as c_int;

extern "C" {
    pub fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    pub fn ibv_get_cq_event(ch: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, ctx: *mut *mut c_void) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint);
}

/// The context's data-path entries (`ibv_context.ops`), as the header's inline calls reach them.
///
/// # Safety
/// `context` is the context of a live CQ or QP of urxe's libibverbs.
unsafe fn ops(context: *mut ibv_context) -> &'static c::ibv_context_ops {
    // SAFETY: the caller's live object's context, which outlives it.
    unsafe { &(*context).ops }
}

/// `ibv_poll_cq`.
///
/// # Safety
/// `cq` is a live CQ; `wc` has room for `n` entries.
pub unsafe fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller's live CQ and WC array.
    match unsafe { ops((*cq).context) }.poll_cq {
        // SAFETY: the provider's entry with the caller's live objects.
        Some(f) => unsafe { f(cq, n, wc) },
        None => -1,
    }
}

/// `ibv_req_notify_cq(cq, 0)`: 0 or an errno.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe fn req_notify_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: the caller's live CQ.
    match unsafe { ops((*cq).context) }.req_notify_cq {
        // SAFETY: the provider's entry with the caller's live objects.
        Some(f) => unsafe { f(cq, 0) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_send` of one WR: 0 or an errno.
///
/// # Safety
/// `qp` is a live QP; the WR's SGEs point at registered memory (or inline data).
pub unsafe fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: the caller's live QP and WR.
    match unsafe { ops((*qp).context) }.post_send {
        // SAFETY: the provider's entry with the caller's live objects.
        Some(f) => unsafe { f(qp, wr, &mut bad) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv` of one WR: 0 or an errno.
///
/// # Safety
/// `qp` is a live QP.
pub unsafe fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: the caller's live QP and WR.
    match unsafe { ops((*qp).context) }.post_recv {
        // SAFETY: the provider's entry with the caller's live objects.
        Some(f) => unsafe { f(qp, wr, &mut bad) },
        None => libc::EOPNOTSUPP,
    }
}
