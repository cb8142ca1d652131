//! The verbs this library calls, through the application's libibverbs.so.1 (urxe's): the few
//! `<infiniband/verbs.h>` structs it fills or reads, mirrored `#[repr(C)]` (checked by
//! tests/rdmacm_layout.rs like the rest), and the exported functions it links against.
//!
//! The GSI calls (`urxe_gsi_*@URXE_PRIVATE_1`) are looked up with `dlvsym` at run time rather
//! than linked: under another libibverbs (Debian's) they are absent and this library reports
//! ENODEV instead of failing to load.
#![allow(non_camel_case_types)]

use crate::abi::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_srq};
use libc::{c_char, c_int, c_void};
use std::sync::OnceLock;
/// Mirrors shared with libibverbs.so.1's side, from the toolkit.
pub use urxe_cabi::verbs::{ibv_qp_cap, ibv_srq_attr};

pub type ibv_device = c_void;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    pub qp_state: c_int,
    pub cur_qp_state: c_int,
    pub path_mtu: c_int,
    pub path_mig_state: c_int,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// The head of `struct ibv_qp` (what this library reads: its context and number).
#[repr(C)]
pub struct ibv_qp_head {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_int,
    pub qp_type: c_int,
}

/// The head of `struct ibv_pd` / `struct ibv_cq` / `struct ibv_srq`: their context.
#[repr(C)]
pub struct ibv_object_head {
    pub context: *mut ibv_context,
}

/// `struct ibv_port_attr` up to the fields read here; the rest is room the library fills.
#[repr(C)]
pub struct ibv_port_attr_head {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub rest: [u64; 8],
}

pub mod qp_state {
    pub const RESET: i32 = 0;
    pub const INIT: i32 = 1;
    pub const RTR: i32 = 2;
    pub const RTS: i32 = 3;
    pub const ERR: i32 = 6;
}

pub mod qp_type {
    pub const RC: i32 = 2;
    pub const UC: i32 = 3;
    pub const UD: i32 = 4;
    pub const XRC_SEND: i32 = 9;
    pub const XRC_RECV: i32 = 10;
}

pub mod mask {
    pub const STATE: i32 = 1 << 0;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const DEST_QPN: i32 = 1 << 20;
}

pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
    pub const REMOTE_ATOMIC: u32 = 8;
}

/// `IBV_QP_INIT_ATTR_PD`.
pub const QP_INIT_ATTR_PD: u32 = 1;

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_get_device_guid(dev: *mut ibv_device) -> u64;
    pub fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_close_device(ctx: *mut ibv_context) -> c_int;
    pub fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr_head) -> c_int;
    pub fn ibv_query_gid(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
    pub fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
}

/// `create_qp_ex` of `struct verbs_context` (rdma-core's `<infiniband/verbs.h>`).
pub type CreateQpExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// The end of `struct verbs_context`, the ops right in front of the `struct ibv_context` an
/// application holds (from `open_qp` to `sz`, as rdma-core lays them out).
#[repr(C)]
pub struct verbs_context_tail {
    pub open_qp: *mut c_void,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: *mut c_void,
    pub create_srq_ex: *mut c_void,
    pub open_xrcd: *mut c_void,
    pub close_xrcd: *mut c_void,
    pub abi_placeholder3: u64,
    /// The size of the whole `verbs_context` (ops in front of the context, and the context).
    pub sz: usize,
}

/// The context's `create_qp_ex` op, if its `verbs_context` is big enough to have one (as
/// `verbs_get_ctx_op` checks).
///
/// # Safety
/// `ctx` is a context of a libibverbs.so.1 whose contexts sit at the end of a
/// `verbs_context` (urxe's always do).
pub unsafe fn verbs_context_op_create_qp_ex(ctx: *mut ibv_context) -> Option<CreateQpExFn> {
    // SAFETY: caller contract: the tail lies right in front of the context.
    let tail = unsafe { &*(ctx as *const verbs_context_tail).sub(1) };
    let needed = std::mem::size_of::<verbs_context_tail>() - std::mem::offset_of!(verbs_context_tail, create_qp_ex);
    if tail.sz < needed {
        return None;
    }
    tail.create_qp_ex
}

/// urxe's private GSI API in libibverbs.so.1 (provider/src/gsi.rs documents each call).
#[derive(Clone, Copy)]
pub struct GsiApi {
    /// `int urxe_gsi_fd(void)`: readable (eventfd) while MADs may be queued.
    pub fd: unsafe extern "C" fn() -> c_int,
    /// `int urxe_gsi_recv(uint8_t peer[16], uint8_t mad[256])`: 0 (a MAD), 1 (none queued),
    /// or -1 + errno.
    pub recv: unsafe extern "C" fn(*mut u8, *mut u8) -> c_int,
    /// `int urxe_gsi_send(const uint8_t peer[16], const uint8_t mad[256])`: 0 or -1 + errno.
    pub send: unsafe extern "C" fn(*const u8, *const u8) -> c_int,
    /// `uint32_t urxe_gsi_comm_id_base(void)`: the high byte of this process's comm IDs.
    pub comm_id_base: unsafe extern "C" fn() -> u32,
    /// `int urxe_gsi_listen(uint64_t)` / `urxe_gsi_unlisten`: CM steering at a shared address.
    pub listen: unsafe extern "C" fn(u64) -> c_int,
    pub unlisten: unsafe extern "C" fn(u64) -> c_int,
    /// `int urxe_gsi_cm_counters(const uint64_t *values, uint32_t n)`: the CM's counters
    /// (`urxe::cm::CmCounters::named` order) for `urxe stat`. None from an older library.
    pub counters: Option<unsafe extern "C" fn(*const u64, u32) -> c_int>,
}

fn lookup(name: &[u8]) -> Option<*mut c_void> {
    // SAFETY: both strings are NUL-terminated literals; dlvsym only reads them.
    let p = unsafe { libc::dlvsym(libc::RTLD_DEFAULT, name.as_ptr() as *const c_char, c"URXE_PRIVATE_1".as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The GSI API of the loaded libibverbs.so.1, or None if it is not urxe's.
pub fn gsi() -> Option<GsiApi> {
    static API: OnceLock<Option<GsiApi>> = OnceLock::new();
    *API.get_or_init(|| {
        let fd = lookup(b"urxe_gsi_fd\0")?;
        let recv = lookup(b"urxe_gsi_recv\0")?;
        let send = lookup(b"urxe_gsi_send\0")?;
        let base = lookup(b"urxe_gsi_comm_id_base\0")?;
        let listen = lookup(b"urxe_gsi_listen\0")?;
        let unlisten = lookup(b"urxe_gsi_unlisten\0")?;
        // SAFETY: each symbol is the function of the documented signature in urxe's
        // libibverbs.so.1 (bound to URXE_PRIVATE_1, which nothing else defines).
        unsafe {
            Some(GsiApi {
                fd: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(fd),
                recv: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut u8, *mut u8) -> c_int>(recv),
                send: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const u8, *const u8) -> c_int>(send),
                comm_id_base: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> u32>(base),
                listen: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u64) -> c_int>(listen),
                unlisten: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u64) -> c_int>(unlisten),
                counters: lookup(b"urxe_gsi_cm_counters\0")
                    .map(|p| std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const u64, u32) -> c_int>(p)),
            })
        }
    })
}
