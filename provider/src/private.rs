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

macro_rules! cmd_stubs {
    ($($name:ident,)*) => {
        $(export! {
            /// Kernel command wrapper of rdma-core's provider ABI: EOPNOTSUPP (no kernel).
            fn $name() -> c_int as errno {
                Err(libc::EOPNOTSUPP)
            }
        })*
    };
}

cmd_stubs! {
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_cq_ex2,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
}

export! {
    /// `ibv_cmd_poll_cq`: -1 + EOPNOTSUPP.
    fn ibv_cmd_poll_cq(ibcq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int as neg1 {
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `execute_ioctl`: 0 or errno; EOPNOTSUPP.
    fn execute_ioctl(context: *mut ibv_context, cmd: *mut c_void) -> c_int as errno {
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `__ioctl_final_num_attrs`: the attribute count, unchanged.
    fn __ioctl_final_num_attrs(num_attrs: c_uint, link: *mut c_void) -> c_uint as value(num_attrs) {
        num_attrs
    }
}

export! {
    /// `__verbs_log(ctx, level, fmt, ...)`: provider debug logging; ignored (the variadic
    /// arguments are never read).
    fn __verbs_log(ctx: *mut verbs_context, level: u32, fmt: *const c_char) as void {}
}

export! {
    /// `_verbs_init_and_alloc_context`: providers allocate contexts through it; NULL + EOPNOTSUPP.
    fn _verbs_init_and_alloc_context(device: *mut ibv_device, cmd_fd: c_int, alloc_size: usize, context_offset: *mut verbs_context, driver_id: u32) -> *mut c_void as ptr {
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `verbs_open_device`: NULL + EOPNOTSUPP (applications use ibv_open_device).
    fn verbs_open_device(device: *mut ibv_device, private_data: *mut c_void) -> *mut ibv_context as ptr {
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `verbs_register_driver_34`: called by libmlx5/libefa constructors; no-op.
    fn verbs_register_driver_34(ops: *const c_void) as void {}
}

export! {
    /// `verbs_set_ops`: only for provider contexts; no-op.
    fn verbs_set_ops(vctx: *mut verbs_context, ops: *const c_void) as void {}
}

export! {
    /// `verbs_uninit_context`: only for provider contexts; no-op.
    fn verbs_uninit_context(context: *mut verbs_context) as void {}
}

export! {
    /// `verbs_init_cq`: initialise the common `ibv_cq` fields of a provider CQ.
    fn verbs_init_cq(cq: *mut ibv_cq, context: *mut ibv_context, channel: *mut ibv_comp_channel, cq_context: *mut c_void) as void {
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
}

export! {
    /// `ibv_read_ibdev_sysfs_file`: there is no sysfs device; -1 + ENOENT.
    fn ibv_read_ibdev_sysfs_file(buf: *mut c_char, size: usize, sysfs_dev: *mut c_void, fnfmt: *const c_char) -> c_int as neg1 {
        Err(libc::ENOENT)
    }
}
