//! The verbs data path rsockets drives: `<infiniband/verbs.h>`'s work requests, completions and
//! MRs mirrored `#[repr(C)]` (checked against the installed header by tests/rdmacm_layout.rs
//! through [`crate::layout`]), and the inline calls (`ibv_post_send`, `ibv_poll_cq`, …) that
//! reach the provider through `ibv_context.ops`, as the header's inline functions do.
#![allow(non_camel_case_types)]

use crate::abi::{ibv_context, ibv_cq, ibv_qp};
use libc::{c_int, c_uint, c_void};
/// The SGE is the toolkit's mirror (the same struct libibverbs.so.1 reads).
pub use urxe_cabi::verbs::ibv_sge;

pub const IBV_WR_RDMA_WRITE: c_int = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_int = 1;
pub const IBV_SEND_INLINE: c_uint = 8;
pub const IBV_WC_SUCCESS: c_int = 0;
pub const IBV_WC_WITH_IMM: c_uint = 1 << 1;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;

/// `struct ibv_send_wr` with the `wr.rdma` view of its `wr` union (the rest of the union and
/// the trailing unions are padding here: rsockets posts RDMA WRITEs only).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: c_uint,
    /// `__be32 imm_data`.
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub _wr_rest: [u32; 5],
    pub _qp_type: [u32; 2],
    pub _bind_mw_tso: [u64; 6],
}

impl Default for ibv_send_wr {
    fn default() -> Self {
        // SAFETY: plain integers and pointers, valid all-zero.
        unsafe { std::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_int,
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `__be32 imm_data`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut c_void,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// The head of `struct ibv_cq` / `struct ibv_qp`: both start with their context.
#[repr(C)]
pub struct ibv_object_head {
    pub context: *mut ibv_context,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
type PostSendFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context` up to the data-path entries of its `ops` (the device pointer, then
/// `struct ibv_context_ops`: 11 entries before `poll_cq`, 25 before `post_send`).
#[repr(C)]
pub struct ibv_context_head {
    pub device: *mut c_void,
    pub _ops_before_poll_cq: [*mut c_void; 11],
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub _ops_between: [*mut c_void; 12],
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
}

extern "C" {
    pub fn ibv_reg_mr(pd: *mut c_void, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
    pub fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int;
    pub fn ibv_get_cq_event(ch: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, ctx: *mut *mut c_void) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint);
}

/// # Safety
/// `obj` is a live CQ or QP of urxe's libibverbs.
unsafe fn ctx(obj: *mut c_void) -> &'static ibv_context_head {
    // SAFETY: the caller's live object; its context outlives it.
    unsafe { &*((*(obj as *mut ibv_object_head)).context as *const ibv_context_head) }
}

/// `ibv_poll_cq`.
///
/// # Safety
/// `cq` is a live CQ; `wc` has room for `n` entries.
pub unsafe fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller's live CQ and WC array.
    match unsafe { ctx(cq) }.poll_cq {
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
    match unsafe { ctx(cq) }.req_notify_cq {
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
    match unsafe { ctx(qp) }.post_send {
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
    match unsafe { ctx(qp) }.post_recv {
        // SAFETY: the provider's entry with the caller's live objects.
        Some(f) => unsafe { f(qp, wr, &mut bad) },
        None => libc::EOPNOTSUPP,
    }
}
