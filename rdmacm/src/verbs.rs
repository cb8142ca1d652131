//! The verbs this library calls, through the application's libibverbs.so.1 (urxe's): the few
//! `<infiniband/verbs.h>` structs it fills or reads, mirrored `#[repr(C)]` (checked by
//! tests/rdmacm_layout.rs like the rest), and the exported functions it links against.
//!
//! The GSI calls (`urxe_gsi_*@URXE_PRIVATE_1`) are looked up with `dlvsym` at run time rather
//! than linked: under another libibverbs (Debian's) they are absent and this library reports
//! ENODEV instead of failing to load.
#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void};
use std::sync::OnceLock;
use urxe_cabi::verbs as c;
/// The mirrors, from the toolkit both C libraries share (libibverbs.so.1 reads the same ones).
pub use urxe_cabi::verbs::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_gid, ibv_pd, ibv_port_attr, ibv_qp,
    ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr, ibv_qp_init_attr_ex, ibv_rx_hash_conf, ibv_srq, ibv_srq_attr,
    ibv_srq_init_attr, verbs_context, CreateQpExFn, Zeroable,
};

/// `enum ibv_qp_state`, as the `c_uint` `ibv_qp_attr.qp_state` holds.
pub mod qp_state {
    use super::c;
    pub const RESET: u32 = c::IBV_QPS_RESET as u32;
    pub const INIT: u32 = c::IBV_QPS_INIT as u32;
    pub const RTR: u32 = c::IBV_QPS_RTR as u32;
    pub const RTS: u32 = c::IBV_QPS_RTS as u32;
    pub const ERR: u32 = c::IBV_QPS_ERR as u32;
}

/// `enum ibv_qp_type`, as `rdma_cm_id.qp_type` (`int`) holds it.
pub mod qp_type {
    use super::c;
    pub const RC: i32 = c::IBV_QPT_RC as i32;
    pub const UC: i32 = c::IBV_QPT_UC as i32;
    pub const UD: i32 = c::IBV_QPT_UD as i32;
    pub const XRC_SEND: i32 = c::IBV_QPT_XRC_SEND as i32;
    pub const XRC_RECV: i32 = c::IBV_QPT_XRC_RECV as i32;
}

/// `enum ibv_qp_attr_mask`, as `ibv_modify_qp` takes it.
pub mod mask {
    use super::c;
    pub const STATE: i32 = c::IBV_QP_STATE as i32;
    pub const ACCESS_FLAGS: i32 = c::IBV_QP_ACCESS_FLAGS as i32;
    pub const PKEY_INDEX: i32 = c::IBV_QP_PKEY_INDEX as i32;
    pub const PORT: i32 = c::IBV_QP_PORT as i32;
    pub const QKEY: i32 = c::IBV_QP_QKEY as i32;
    pub const AV: i32 = c::IBV_QP_AV as i32;
    pub const PATH_MTU: i32 = c::IBV_QP_PATH_MTU as i32;
    pub const TIMEOUT: i32 = c::IBV_QP_TIMEOUT as i32;
    pub const RETRY_CNT: i32 = c::IBV_QP_RETRY_CNT as i32;
    pub const RNR_RETRY: i32 = c::IBV_QP_RNR_RETRY as i32;
    pub const RQ_PSN: i32 = c::IBV_QP_RQ_PSN as i32;
    pub const MAX_QP_RD_ATOMIC: i32 = c::IBV_QP_MAX_QP_RD_ATOMIC as i32;
    pub const MIN_RNR_TIMER: i32 = c::IBV_QP_MIN_RNR_TIMER as i32;
    pub const SQ_PSN: i32 = c::IBV_QP_SQ_PSN as i32;
    pub const MAX_DEST_RD_ATOMIC: i32 = c::IBV_QP_MAX_DEST_RD_ATOMIC as i32;
    pub const DEST_QPN: i32 = c::IBV_QP_DEST_QPN as i32;
}

/// `enum ibv_access_flags`.
pub mod access {
    use super::c;
    pub const LOCAL_WRITE: u32 = c::IBV_ACCESS_LOCAL_WRITE as u32;
    pub const REMOTE_WRITE: u32 = c::IBV_ACCESS_REMOTE_WRITE as u32;
    pub const REMOTE_READ: u32 = c::IBV_ACCESS_REMOTE_READ as u32;
    pub const REMOTE_ATOMIC: u32 = c::IBV_ACCESS_REMOTE_ATOMIC as u32;
}

/// `IBV_QP_INIT_ATTR_PD`.
pub const QP_INIT_ATTR_PD: u32 = c::IBV_QP_INIT_ATTR_PD as u32;

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_get_device_guid(dev: *mut ibv_device) -> u64;
    pub fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_close_device(ctx: *mut ibv_context) -> c_int;
    pub fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
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

/// The context's `create_qp_ex` op, if its `verbs_context` is big enough to have one (as
/// `verbs_get_ctx_op` checks: `sz` covers the op and everything after it).
///
/// # Safety
/// `ctx` is a context of a libibverbs.so.1 whose contexts sit at the end of a
/// `verbs_context` (urxe's always do).
pub unsafe fn verbs_context_op_create_qp_ex(ctx: *mut ibv_context) -> Option<CreateQpExFn> {
    let ctx_off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: caller contract: the context is the `context` member of a live `verbs_context`;
    // only the members in front of it (from `create_qp_ex` to `sz`) are read, which every
    // `verbs_context` has whatever its size.
    let vctx = unsafe { (ctx as *const u8).sub(ctx_off) as *const verbs_context };
    // SAFETY: as above: `sz` lies in front of the context.
    let sz = unsafe { std::ptr::addr_of!((*vctx).sz).read() };
    let needed = ctx_off - std::mem::offset_of!(verbs_context, create_qp_ex);
    if sz < needed {
        return None;
    }
    // SAFETY: as above; `sz` says the op is there.
    unsafe { std::ptr::addr_of!((*vctx).create_qp_ex).read() }
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
    /// `int urxe_gsi_fault_note(const char *text)`: an injected rdma_cm fault, noted in the
    /// `URXE_PCAP` capture. None from an older library.
    pub fault_note: Option<unsafe extern "C" fn(*const c_char) -> c_int>,
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
                fault_note: lookup(b"urxe_gsi_fault_note\0")
                    .map(|p| std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char) -> c_int>(p)),
            })
        }
    })
}

/// Notes an injected rdma_cm fault in the device's `URXE_PCAP` capture (`urxe_gsi_fault_note`);
/// nothing with an older library or a line holding a NUL.
pub fn fault_note(line: &str) {
    let (Some(note), Ok(text)) = (gsi().and_then(|g| g.fault_note), std::ffi::CString::new(line)) else { return };
    // SAFETY: the library's function of the documented signature; a NUL-terminated string that
    // lives across the call, which only reads it.
    unsafe { note(text.as_ptr()) };
}
