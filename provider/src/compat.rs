//! Provider layer: the non-default version entries of rdma-core 56's `libibverbs.map.in`.
//!
//! * The 33 `name@IBVERBS_1.0` entries. rdma-core binds them to wrappers that translate the
//!   2006 libibverbs 1.0 structures (`struct ibv_device_1_0`, …) for programs linked against
//!   that library; every program since links the `@@IBVERBS_1.1` names. urxe does not carry
//!   the 1.0 structures: the entries exist so that such a program loads and resolves, and then
//!   fails the way a library with no 1.0-era device does: `ibv_get_device_list@IBVERBS_1.0`
//!   returns NULL with errno EOPNOTSUPP (no device), every other call fails with EOPNOTSUPP in
//!   its verb's convention (NULL, a positive errno, or -1), the `void` ones do nothing.
//! * `ibv_register_driver@IBVERBS_1.1`: the legacy provider registration, a no-op in
//!   rdma-core too (kept for old out-of-tree providers).
//!
//! Each implementation is a local `urxe_compat_*` function; a `.symver` directive gives it the
//! non-default versioned name (`name@NODE`, one `@`), which provider/build.sh's version script
//! leaves global because the node lists the name (as rdma-core's map does).
//! [`COMPAT_ENTRIES`](crate::entries::COMPAT_ENTRIES) is the list; for the 33 1.0 names,
//! provider/build.sh renames the default definition `name` to `name@@IBVERBS_1.1` in the
//! archive ([`default_renames`](crate::entries::default_renames)) so that both versions coexist.

use libc::{c_char, c_int, c_void};

// The 1.0 stand-ins, one function each (written out so that its C name finds it), by
// convention: pointer-returning (NULL + EOPNOTSUPP), errno-returning, -1 + errno
// (`ibv_get_*_event`) and `void` (the acks, `ibv_free_device_list`).

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_alloc_pd() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_create_ah() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_create_cq() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_create_qp() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_create_srq() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_get_device_list() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_open_device() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_reg_mr() -> *mut c_void {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_attach_mcast() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_close_device() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_dealloc_pd() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_dereg_mr() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_destroy_ah() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_destroy_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_destroy_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_destroy_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_detach_mcast() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_modify_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_modify_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_query_device() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_query_gid() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_query_pkey() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_query_port() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_query_qp() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_query_srq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn urxe_compat_resize_cq() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_compat_get_async_event() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_compat_get_cq_event() -> c_int {
    Err(libc::EOPNOTSUPP)
}

#[urxe_cabi::export(void)]
pub unsafe extern "C" fn urxe_compat_ack_async_event() {}

#[urxe_cabi::export(void)]
pub unsafe extern "C" fn urxe_compat_ack_cq_events() {}

#[urxe_cabi::export(void)]
pub unsafe extern "C" fn urxe_compat_free_device_list() {}

/// `ibv_get_device_name@IBVERBS_1.0`: NULL + EOPNOTSUPP (there is no 1.0 device to name).
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn urxe_compat_get_device_name(device: *mut c_void) -> *const c_char {
    Err(libc::EOPNOTSUPP)
}
/// `ibv_get_device_guid@IBVERBS_1.0`: 0 (no 1.0 device).
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn urxe_compat_get_device_guid(device: *mut c_void) -> u64 {
    0
}
/// `ibv_register_driver@IBVERBS_1.1`: no-op, as in rdma-core (providers are private).
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn urxe_compat_register_driver(name: *const c_char, init: *mut c_void) {}

// The versioned names. The symbol table of the static archive carries them as
// `ibv_x@IBVERBS_1.0` aliases of the local implementations; the final link keeps them global
// and non-default in their node.

std::arch::global_asm!(
    ".symver urxe_compat_ack_async_event, ibv_ack_async_event@IBVERBS_1.0",
    ".symver urxe_compat_ack_cq_events, ibv_ack_cq_events@IBVERBS_1.0",
    ".symver urxe_compat_alloc_pd, ibv_alloc_pd@IBVERBS_1.0",
    ".symver urxe_compat_attach_mcast, ibv_attach_mcast@IBVERBS_1.0",
    ".symver urxe_compat_close_device, ibv_close_device@IBVERBS_1.0",
    ".symver urxe_compat_create_ah, ibv_create_ah@IBVERBS_1.0",
    ".symver urxe_compat_create_cq, ibv_create_cq@IBVERBS_1.0",
    ".symver urxe_compat_create_qp, ibv_create_qp@IBVERBS_1.0",
    ".symver urxe_compat_create_srq, ibv_create_srq@IBVERBS_1.0",
    ".symver urxe_compat_dealloc_pd, ibv_dealloc_pd@IBVERBS_1.0",
    ".symver urxe_compat_dereg_mr, ibv_dereg_mr@IBVERBS_1.0",
    ".symver urxe_compat_destroy_ah, ibv_destroy_ah@IBVERBS_1.0",
    ".symver urxe_compat_destroy_cq, ibv_destroy_cq@IBVERBS_1.0",
    ".symver urxe_compat_destroy_qp, ibv_destroy_qp@IBVERBS_1.0",
    ".symver urxe_compat_destroy_srq, ibv_destroy_srq@IBVERBS_1.0",
    ".symver urxe_compat_detach_mcast, ibv_detach_mcast@IBVERBS_1.0",
    ".symver urxe_compat_free_device_list, ibv_free_device_list@IBVERBS_1.0",
    ".symver urxe_compat_get_async_event, ibv_get_async_event@IBVERBS_1.0",
    ".symver urxe_compat_get_cq_event, ibv_get_cq_event@IBVERBS_1.0",
    ".symver urxe_compat_get_device_guid, ibv_get_device_guid@IBVERBS_1.0",
    ".symver urxe_compat_get_device_list, ibv_get_device_list@IBVERBS_1.0",
    ".symver urxe_compat_get_device_name, ibv_get_device_name@IBVERBS_1.0",
    ".symver urxe_compat_modify_qp, ibv_modify_qp@IBVERBS_1.0",
    ".symver urxe_compat_modify_srq, ibv_modify_srq@IBVERBS_1.0",
    ".symver urxe_compat_open_device, ibv_open_device@IBVERBS_1.0",
    ".symver urxe_compat_query_device, ibv_query_device@IBVERBS_1.0",
    ".symver urxe_compat_query_gid, ibv_query_gid@IBVERBS_1.0",
    ".symver urxe_compat_query_pkey, ibv_query_pkey@IBVERBS_1.0",
    ".symver urxe_compat_query_port, ibv_query_port@IBVERBS_1.0",
    ".symver urxe_compat_query_qp, ibv_query_qp@IBVERBS_1.0",
    ".symver urxe_compat_query_srq, ibv_query_srq@IBVERBS_1.0",
    ".symver urxe_compat_reg_mr, ibv_reg_mr@IBVERBS_1.0",
    ".symver urxe_compat_register_driver, ibv_register_driver@IBVERBS_1.1",
    ".symver urxe_compat_resize_cq, ibv_resize_cq@IBVERBS_1.0",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compat_entry_names_a_known_node_once() {
        let mut seen = std::collections::HashSet::new();
        for (name, node) in crate::entries::COMPAT_ENTRIES {
            assert!(crate::entries::VERSION_NODES.contains(node), "{name}: {node}");
            assert!(seen.insert(*name), "{name} twice");
        }
        assert_eq!(crate::entries::COMPAT_ENTRIES.len(), 34);
    }

    #[test]
    fn compat_entries_fail_cleanly() {
        // SAFETY: the stand-ins read none of their (absent) arguments.
        unsafe {
            assert!(urxe_compat_get_device_list().is_null());
            assert_eq!(crate::export::errno(), libc::EOPNOTSUPP);
            assert_eq!(urxe_compat_query_device(), libc::EOPNOTSUPP);
            assert_eq!(urxe_compat_get_cq_event(), -1);
            assert_eq!(urxe_compat_get_device_guid(std::ptr::null_mut()), 0);
        }
    }
}
