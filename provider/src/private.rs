//! Provider layer: the IBVERBS_PRIVATE_34 exports.
//!
//! They exist so that libmlx5.so.1 and libefa.so.1 (which perftest and pyverbs link, BIND_NOW)
//! load against urxe's libibverbs. Those libraries reach the `ibv_cmd_*` family only from
//! their own contexts, which never exist here (they only adopt devices whose
//! `verbs_device.ops` is their table), so every command stub fails cleanly:
//! `ibv_cmd_*` return EOPNOTSUPP (their convention: 0 or a positive errno; `ibv_cmd_poll_cq`:
//! -1 + errno), pointer-returning ones NULL + EOPNOTSUPP. `verbs_register_driver_34` (called by
//! the constructors of libmlx5/libefa at load) is a harmless no-op.
//!
//! The command stubs are defined without their (unused) parameters: on x86-64 SysV the caller
//! owns argument registers and stack, so a callee that ignores them is ABI-compatible.

use crate::abi::*;
use crate::events::channel_ref;
use crate::objects::init_sync;
use libc::{c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::atomic::AtomicBool;

/// rdma-core's `bool verbs_allow_disassociate_destroy` (1-byte OBJECT; providers may write it,
/// so it must live in writable memory: AtomicBool has the layout of bool).
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

// The kernel command wrappers of rdma-core's provider ABI: EOPNOTSUPP (no kernel). One
// function each, written out so that its C name finds it.

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_advise_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_alloc_dm() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_alloc_mw() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_alloc_pd() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_attach_mcast() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_close_xrcd() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_ah() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_counters() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_cq_ex() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_cq_ex2() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_flow() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_flow_action_esp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_qp_ex() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_qp_ex2() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_rwq_ind_table() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_srq_ex() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_create_wq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_dealloc_mw() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_dealloc_pd() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_dereg_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_ah() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_counters() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_flow() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_flow_action() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_rwq_ind_table() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_destroy_wq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_detach_mcast() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_free_dm() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_get_context() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_modify_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_modify_flow_action_esp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_modify_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_modify_qp_ex() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_modify_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_modify_wq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_open_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_open_xrcd() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_post_recv() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_post_send() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_post_srq_recv() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_context() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_device() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_device_any() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_port() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_query_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_read_counters() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_reg_dm_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_reg_dmabuf_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_reg_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_req_notify_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_rereg_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_cmd_resize_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

/// `ibv_cmd_poll_cq`: -1 + EOPNOTSUPP.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_cmd_poll_cq(ibcq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int {
    Err(libc::EOPNOTSUPP)
}

/// `execute_ioctl`: 0 or errno; EOPNOTSUPP.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn execute_ioctl(context: *mut ibv_context, cmd: *mut c_void) -> c_int {
    Err(libc::EOPNOTSUPP)
}

/// `__ioctl_final_num_attrs`: the attribute count, unchanged.
#[urxe_cabi::export(value(num_attrs))]
pub unsafe extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, link: *mut c_void) -> c_uint {
    num_attrs
}

/// `__verbs_log(ctx, level, fmt, ...)`: provider debug logging; ignored (the variadic
/// arguments are never read).
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn __verbs_log(ctx: *mut verbs_context, level: u32, fmt: *const c_char) {}

/// `_verbs_init_and_alloc_context`: providers allocate contexts through it; NULL + EOPNOTSUPP.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn _verbs_init_and_alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    alloc_size: usize,
    context_offset: *mut verbs_context,
    driver_id: u32,
) -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

/// `verbs_open_device`: NULL + EOPNOTSUPP (applications use ibv_open_device).
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn verbs_open_device(device: *mut ibv_device, private_data: *mut c_void) -> *mut ibv_context {
    Err(libc::EOPNOTSUPP)
}

/// `verbs_register_driver_34`: called by libmlx5/libefa constructors; no-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn verbs_register_driver_34(ops: *const c_void) {}

/// `verbs_set_ops`: only for provider contexts; no-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn verbs_set_ops(vctx: *mut verbs_context, ops: *const c_void) {}

/// `verbs_uninit_context`: only for provider contexts; no-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn verbs_uninit_context(context: *mut verbs_context) {}

/// `verbs_init_cq`: initialise the common `ibv_cq` fields of a provider CQ.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn verbs_init_cq(
    cq: *mut ibv_cq,
    context: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    if cq.is_null() {
        return;
    }
    // SAFETY: the caller passes a writable CQ whose storage will not move.
    unsafe {
        (*cq).context = context;
        (*cq).channel = channel;
        (*cq).cq_context = cq_context;
        (*cq).comp_events_completed = 0;
        (*cq).async_events_completed = 0;
        init_sync(ptr::addr_of_mut!((*cq).mutex), ptr::addr_of_mut!((*cq).cond));
        let _ = channel_ref(channel, 1);
    }
}

/// `ibv_read_ibdev_sysfs_file`: there is no sysfs device; -1 + ENOENT.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_read_ibdev_sysfs_file(
    buf: *mut c_char,
    size: usize,
    sysfs_dev: *mut c_void,
    fnfmt: *const c_char,
) -> c_int {
    Err(libc::ENOENT)
}
