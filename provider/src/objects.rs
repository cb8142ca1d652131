//! Provider layer: the C-visible object shells.
//!
//! Every verbs object is a `#[repr(C)]` struct whose FIRST field is the public libibverbs
//! struct, so the pointer C holds is also a pointer to our shell:
//!
//! | C handle | shell | created by | freed by |
//! |---|---|---|---|
//! | `ibv_pd *` | [`UrxePd`] | `ibv_alloc_pd`, `ibv_import_pd` | `ibv_dealloc_pd`, `ibv_unimport_pd` |
//! | `ibv_mr *` | [`UrxeMr`] | `ibv_reg_mr*`, `ibv_import_mr` | `ibv_dereg_mr`, `ibv_unimport_mr` |
//! | `ibv_cq *` / `ibv_cq_ex *` | [`UrxeCq`] | `ibv_create_cq`, `create_cq_ex` | `ibv_destroy_cq` |
//! | `ibv_qp *` / `ibv_qp_ex *` | [`UrxeQp`] | `ibv_create_qp`, `create_qp_ex` | `ibv_destroy_qp` |
//! | `ibv_srq *` | [`UrxeSrq`] | `ibv_create_srq`, `create_srq_ex` | `ibv_destroy_srq` |
//! | `ibv_ah *` | [`UrxeAh`] | `ibv_create_ah`, `ibv_create_ah_from_wc` | `ibv_destroy_ah` |
//! | `ibv_mw *` | [`UrxeMw`] | `ops.alloc_mw` | `ops.dealloc_mw` |
//! | `ibv_xrcd *` | [`UrxeXrcd`] | `open_xrcd` | `close_xrcd` |
//! | `ibv_comp_channel *` | [`UrxeChannel`] | `ibv_create_comp_channel` | `ibv_destroy_comp_channel` |
//!
//! All are `Box::into_raw` on create and `Box::from_raw` exactly once on destroy, after the
//! engine agreed (the engine refuses to destroy a PD with MRs, a CQ with QPs, … with EBUSY, and
//! then the shell stays). The engine names objects by handle (`PdId`, `CqId`, QPN, …); the shell
//! keeps the handle and the C-side bookkeeping (mutex/cond, event counters, poll cursor).
//!
//! Must not: hold engine state beyond the handle.

use crate::abi::*;
use crate::export::non_null;
use libc::{c_int, c_void};
use std::ptr;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

use urxe::engine::{AhId, CqId, MrId, MwId, PdId, QpCap, QpType, Qpn, Sge, SrqId, WorkCompletion, WrKind, XrcdId};

#[repr(C)]
pub struct UrxePd {
    pub ibv: ibv_pd,
    pub id: PdId,
    /// Parent domains over this PD (`ibv_dealloc_pd` is EBUSY while any is).
    pub children: AtomicU32,
    /// Set for a parent domain (`ibv_alloc_parent_domain`): `id` is then its protection
    /// domain's engine PD, so every verb that takes a PD works on it unchanged.
    pub parent: Option<Box<ParentDomain>>,
}

impl UrxePd {
    pub fn new(context: *mut ibv_context, id: PdId) -> UrxePd {
        UrxePd { ibv: ibv_pd { context, handle: id }, id, children: AtomicU32::new(0), parent: None }
    }
}

/// What a parent domain adds to its protection domain.
pub struct ParentDomain {
    /// The protection domain (a plain PD of ours).
    pub pd: *mut ibv_pd,
    /// The thread domain, or NULL.
    pub td: *mut ibv_td,
    /// The application's allocators (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) and their
    /// context. urxe keeps no queue buffer in application memory (the queues are the
    /// engine's), so it has nothing to ask them for; they are checked and kept.
    pub alloc: Option<PdAllocFn>,
    pub free: Option<PdFreeFn>,
    pub pd_context: *mut c_void,
    /// QPs, CQs and SRQs created on it (`ibv_dealloc_pd` is EBUSY while any is).
    pub users: AtomicU32,
}

/// A thread domain.
#[repr(C)]
pub struct UrxeTd {
    pub ibv: ibv_td,
    /// Parent domains using it (`ibv_dealloc_td` is EBUSY while any is).
    pub users: AtomicU32,
}

/// Count one more (`delta` 1) or one fewer (-1) user of `pd` if it is a parent domain.
///
/// # Safety
/// `pd` is NULL or a live PD of ours.
pub unsafe fn parent_domain_use(pd: *mut ibv_pd, delta: i32) {
    // SAFETY: caller contract.
    if let Ok(p) = unsafe { shell::<_, UrxePd>(pd) } {
        if let Some(pdom) = &p.parent {
            if delta > 0 {
                pdom.users.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            } else {
                pdom.users.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            }
        }
    }
}

#[repr(C)]
pub struct UrxeMr {
    pub ibv: ibv_mr,
    pub id: MrId,
    /// Registered over device memory (`ibv_reg_dm_mr`): keeps that memory alive.
    pub dm: Option<DmUse>,
}

/// Device memory (`ibv_alloc_dm`): a zeroed, aligned block of this process's heap that the
/// engine reaches like any registered memory. Shared by the DM's shells (the allocating one
/// and `ibv_import_dm` ones) and the MRs over it; freed when the last of them goes.
pub struct DmMem {
    pub ptr: std::ptr::NonNull<u8>,
    pub layout: std::alloc::Layout,
    /// The length the application asked for (copies and MRs are checked against it).
    pub len: usize,
    /// MRs registered over it (`ibv_free_dm` is EBUSY while any is).
    pub mrs: AtomicU32,
}

// SAFETY: the block is plain bytes owned by this value; every access goes through raw
// pointers (application copies, engine accesses), as for any registered memory.
unsafe impl Send for DmMem {}
// SAFETY: as above; `mrs` is atomic.
unsafe impl Sync for DmMem {}

impl Drop for DmMem {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout by `std::alloc::alloc_zeroed`, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// An MR's hold on the device memory under it: counted in `mrs` while it lives.
pub struct DmUse(pub std::sync::Arc<DmMem>);

impl DmUse {
    pub fn new(m: std::sync::Arc<DmMem>) -> DmUse {
        m.mrs.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        DmUse(m)
    }
}

impl Drop for DmUse {
    fn drop(&mut self) {
        self.0.mrs.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A device memory shell: `ibv.handle` names the DM process-wide.
#[repr(C)]
pub struct UrxeDm {
    pub ibv: ibv_dm,
    pub mem: std::sync::Arc<DmMem>,
}

/// A CQ: always a full `ibv_cq_ex` so `ibv_cq_ex_to_cq` (a cast) and the `ibv_wc_read_*`
/// inlines work on every CQ.
#[repr(C)]
pub struct UrxeCq {
    pub ibv: ibv_cq_ex,
    pub id: CqId,
    /// Unique for the life of the process; what the completion channel carries (see
    /// [`crate::events`]).
    pub serial: u64,
    /// Completion events handed out by `ibv_get_cq_event`; `ibv_destroy_cq` waits until the
    /// application acked this many (`comp_events_completed`).
    pub comp_events_read: AtomicU32,
    /// Async events handed out by `ibv_get_async_event` for this CQ.
    pub async_events_read: AtomicU32,
    /// `wc_flags` requested at `create_cq_ex` (the `read_*` accessors are valid for these).
    pub wc_flags: u64,
    /// The completion the `ibv_cq_ex` cursor is on, between `start_poll` and `end_poll`.
    pub cur: WorkCompletion,
    /// The parent domain it was created on (IBV_CQ_INIT_ATTR_MASK_PD), or NULL.
    pub parent_domain: *mut ibv_pd,
}

/// One work request being built through the `ibv_qp_ex` `wr_*` table.
#[derive(Clone, Debug)]
pub struct PendingWr {
    pub wr_id: u64,
    pub flags: u32,
    pub kind: WrKind,
    pub sges: Vec<Sge>,
    pub ud: Option<(*mut ibv_ah, u32, u32)>,
    /// `wr_set_xrc_srqn`: the remote XRC SRQ (XRC initiators).
    pub xrc_srqn: Option<u32>,
}

/// The `wr_start` … `wr_complete`/`wr_abort` batch of an `ibv_qp_ex`. Errors while building
/// are sticky and reported by `wr_complete` (the `wr_*` setters return void).
#[derive(Debug, Default)]
pub struct WrBatch {
    pub active: bool,
    pub wrs: Vec<PendingWr>,
    pub error: c_int,
}

#[repr(C)]
pub struct UrxeQp {
    pub ibv: ibv_qp_ex,
    /// rdma-core 45's `ibv_qp_ex.wr_flush`, which its struct has right after `ibv_qp_ex` 44's
    /// end (see `abi::WrFlushFn`); asserted adjacent below.
    pub wr_flush: Option<crate::abi::WrFlushFn>,
    pub qpn: Qpn,
    pub qp_type: QpType,
    /// Created through `create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: only then does
    /// `ibv_qp_to_qp_ex` return the `ibv_qp_ex` (as rdma-core).
    pub has_qp_ex: bool,
    pub send_ops_flags: u64,
    /// Granted capacities (checked when converting posted WRs).
    pub cap: QpCap,
    pub sq_sig_all: bool,
    pub async_events_read: AtomicU32,
    /// The `ibv_qp_ex` builder state (the verbs rule is one builder thread per QP at a time;
    /// the lock makes a misbehaving application safe, not fast).
    pub batch: Mutex<WrBatch>,
}

const _: () = assert!(std::mem::offset_of!(UrxeQp, wr_flush) == std::mem::size_of::<ibv_qp_ex>());

#[repr(C)]
pub struct UrxeSrq {
    pub ibv: ibv_srq,
    pub id: SrqId,
    pub max_sge: u32,
    /// An XRC SRQ's number (`ibv_get_srq_num`).
    pub xrc_srqn: Option<u32>,
    pub async_events_read: AtomicU32,
}

#[repr(C)]
pub struct UrxeAh {
    pub ibv: ibv_ah,
    pub id: AhId,
}

#[repr(C)]
pub struct UrxeMw {
    pub ibv: ibv_mw,
    pub id: MwId,
}

#[repr(C)]
pub struct UrxeXrcd {
    pub ibv: ibv_xrcd,
    pub id: XrcdId,
    /// The (st_dev, st_ino) of the file the domain was opened with; `None` for fd -1.
    pub inode: Option<(u64, u64)>,
}

/// A completion channel: a pipe; `ibv.fd` is the read end applications poll.
#[repr(C)]
pub struct UrxeChannel {
    pub ibv: ibv_comp_channel,
    /// Write end (O_NONBLOCK: the notifier never blocks on a full pipe).
    pub write_fd: c_int,
    /// Records in the pipe: counted before each write, uncounted after each read by
    /// `ibv_get_cq_event`, so never below the true number. At 0 the pipe is empty, and a
    /// record may go straight to the socket owner waiting on the channel (`events`).
    pub queued: std::sync::atomic::AtomicU64,
}

/// View a C handle as its shell, shared.
///
/// Shells are used by several application threads at once (verbs are thread-safe), so Rust
/// only ever holds *shared* references to them. State that changes after creation is either
/// behind interior mutability (atomics, the QP's `Mutex<WrBatch>`) or a C-visible field
/// (`qp->state`, `cq->cqe`, the `ibv_cq_ex` cursor) written through the raw C handle while no
/// reference to the shell is live.
///
/// # Safety
/// `p` is NULL or a handle this library created as a `S` (the shell whose first field is the
/// C struct `p` points to) and has not freed.
pub unsafe fn shell<'a, C, S>(p: *mut C) -> Result<&'a S, i32> {
    let p = non_null(p)?;
    // SAFETY: caller contract: `p` is the first field of a live `S`.
    Ok(unsafe { &*(p as *const S) })
}

/// Initialise a pthread mutex + condition variable pair in place.
///
/// # Safety
/// Both point to writable storage that will not move until destroyed with [`destroy_sync`].
pub unsafe fn init_sync(m: *mut libc::pthread_mutex_t, c: *mut libc::pthread_cond_t) {
    // SAFETY: caller contract.
    unsafe {
        libc::pthread_mutex_init(m, ptr::null());
        libc::pthread_cond_init(c, ptr::null());
    }
}

/// # Safety
/// Both were initialised by [`init_sync`] and nobody waits on them.
pub unsafe fn destroy_sync(m: *mut libc::pthread_mutex_t, c: *mut libc::pthread_cond_t) {
    // SAFETY: caller contract.
    unsafe {
        libc::pthread_cond_destroy(c);
        libc::pthread_mutex_destroy(m);
    }
}

/// Block until `*done` (read under `m`) reaches `target`: how destroy waits for the
/// application to ack every event it was handed (`ibv_ack_cq_events`, `ibv_ack_async_event`).
///
/// # Safety
/// `m`/`c` initialised; `done` is only written under `m` (the ack functions do that).
pub unsafe fn wait_acked(
    m: *mut libc::pthread_mutex_t,
    c: *mut libc::pthread_cond_t,
    done: *const u32,
    target: impl Fn() -> u32,
) {
    // SAFETY: caller contract; pthread_cond_wait re-acquires `m` before returning.
    unsafe {
        libc::pthread_mutex_lock(m);
        while ptr::read_volatile(done) != target() {
            libc::pthread_cond_wait(c, m);
        }
        libc::pthread_mutex_unlock(m);
    }
}
