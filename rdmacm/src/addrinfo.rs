//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: the host's resolver (getaddrinfo) for the
//! address, rdma_cm's defaults for the rest (RC over the TCP port space unless the hints say
//! otherwise). Each `rdma_addrinfo` and what it points to is one calloc'd block per field,
//! freed by `rdma_freeaddrinfo`.

use crate::abi::*;

use crate::verbs::qp_type;
use libc::{c_char, c_int, c_void, sockaddr};
use std::ptr;

/// A calloc'd copy of `len` bytes.
fn dup(src: *const c_void, len: usize) -> Result<*mut c_void, i32> {
    // SAFETY: calloc; the copy reads `len` bytes the caller vouches for.
    unsafe {
        let p = libc::calloc(1, len.max(1));
        if p.is_null() {
            return Err(libc::ENOMEM);
        }
        ptr::copy_nonoverlapping(src as *const u8, p as *mut u8, len);
        Ok(p)
    }
}

/// # Safety
/// `ai` is NULL or a list this module built.
unsafe fn free_list(mut ai: *mut rdma_addrinfo) {
    while !ai.is_null() {
        // SAFETY: each node and its fields were calloc'd here (free(NULL) is a no-op).
        unsafe {
            let next = (*ai).ai_next;
            for p in [
                (*ai).ai_src_addr as *mut c_void,
                (*ai).ai_dst_addr as *mut c_void,
                (*ai).ai_src_canonname as *mut c_void,
                (*ai).ai_dst_canonname as *mut c_void,
                (*ai).ai_route,
                (*ai).ai_connect,
            ] {
                libc::free(p);
            }
            libc::free(ai as *mut c_void);
            ai = next;
        }
    }
}

/// The result of getaddrinfo: Ok(list) or Err(the EAI_* code, which rdma_getaddrinfo returns).
fn resolve(node: *const c_char, service: *const c_char, h: &rdma_addrinfo) -> Result<*mut libc::addrinfo, c_int> {
    // SAFETY: addrinfo is plain C data; all-zero is "no hints".
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = if h.ai_family != 0 { h.ai_family } else { libc::AF_UNSPEC };
    hints.ai_socktype = libc::SOCK_STREAM;
    if h.ai_flags & RAI_PASSIVE != 0 {
        hints.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        hints.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut out: *mut libc::addrinfo = ptr::null_mut();
    // SAFETY: NUL-terminated strings from the caller (or NULL), our hints and out-parameter.
    let rc = unsafe { libc::getaddrinfo(node, service, &hints, &mut out) };
    if rc != 0 {
        return Err(rc);
    }
    Ok(out)
}

fn build(node: *const c_char, service: *const c_char, h: &rdma_addrinfo) -> Result<*mut rdma_addrinfo, (c_int, i32)> {
    let passive = h.ai_flags & RAI_PASSIVE != 0;
    let list = resolve(node, service, h).map_err(|rc| (rc, 0))?;
    // SAFETY: getaddrinfo succeeded: `list` is a non-empty list we free below.
    let first = unsafe { &*list };
    let ai = dup(
        &build_head(h, passive, first.ai_family) as *const rdma_addrinfo as *const c_void,
        std::mem::size_of::<rdma_addrinfo>(),
    );
    let r = ai.and_then(|ai| {
        let ai = ai as *mut rdma_addrinfo;
        let addr = dup(first.ai_addr as *const c_void, first.ai_addrlen as usize);
        // SAFETY: `ai` is our calloc'd node.
        let n = unsafe { &mut *ai };
        match addr {
            Ok(a) if passive => {
                n.ai_src_addr = a as *mut sockaddr;
                n.ai_src_len = first.ai_addrlen;
            }
            Ok(a) => {
                n.ai_dst_addr = a as *mut sockaddr;
                n.ai_dst_len = first.ai_addrlen;
                if !h.ai_src_addr.is_null() && h.ai_src_len > 0 {
                    match dup(h.ai_src_addr as *const c_void, h.ai_src_len as usize) {
                        Ok(s) => {
                            n.ai_src_addr = s as *mut sockaddr;
                            n.ai_src_len = h.ai_src_len;
                        }
                        Err(e) => {
                            // SAFETY: our own node.
                            unsafe { free_list(ai) };
                            return Err(e);
                        }
                    }
                }
            }
            Err(e) => {
                // SAFETY: our own node.
                unsafe { free_list(ai) };
                return Err(e);
            }
        }
        Ok(ai)
    });
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(list) };
    r.map_err(|e| (-1, e))
}

fn build_head(h: &rdma_addrinfo, passive: bool, family: c_int) -> rdma_addrinfo {
    let qp = if h.ai_qp_type != 0 { h.ai_qp_type } else { qp_type::RC };
    let ps_ = if h.ai_port_space != 0 {
        h.ai_port_space
    } else if qp == qp_type::UD {
        ps::UDP
    } else {
        ps::TCP
    };
    rdma_addrinfo {
        ai_flags: h.ai_flags & (RAI_PASSIVE | RAI_NUMERICHOST | RAI_NOROUTE | RAI_FAMILY)
            | if passive { RAI_PASSIVE } else { 0 },
        ai_family: family,
        ai_qp_type: qp,
        ai_port_space: ps_,
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: ptr::null_mut(),
        ai_dst_addr: ptr::null_mut(),
        ai_src_canonname: ptr::null_mut(),
        ai_dst_canonname: ptr::null_mut(),
        ai_route_len: 0,
        ai_route: ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: ptr::null_mut(),
        ai_next: ptr::null_mut(),
    }
}

/// `rdma_getaddrinfo`: 0; a getaddrinfo failure's EAI_* code (as librdmacm returns it); or -1
/// with errno.
///
/// # Safety
/// The arguments are what rdma_getaddrinfo(3) says.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    let r = std::panic::catch_unwind(|| -> Result<c_int, i32> {
        if res.is_null() || (node.is_null() && service.is_null()) {
            return Err(libc::EINVAL);
        }
        let h = hints_of(hints);
        match build(node, service, &h) {
            Ok(ai) => {
                // SAFETY: the caller's out-parameter.
                unsafe { *res = ai };
                Ok(0)
            }
            Err((rc, 0)) => Ok(rc),
            Err((_, e)) => Err(e),
        }
    });
    crate::export::finish("rdma_getaddrinfo", r, -1)
}

/// The caller's hints, copied field by field (all zero for NULL); `build` applies rdma_cm's
/// defaults (RC, TCP port space) to what they leave open.
fn hints_of(h: *const rdma_addrinfo) -> rdma_addrinfo {
    // SAFETY: NULL or the caller's hints.
    let h = unsafe { h.as_ref() };
    rdma_addrinfo {
        ai_flags: h.map_or(0, |h| h.ai_flags),
        ai_family: h.map_or(0, |h| h.ai_family),
        ai_qp_type: h.map_or(0, |h| h.ai_qp_type),
        ai_port_space: h.map_or(0, |h| h.ai_port_space),
        ai_src_len: h.map_or(0, |h| h.ai_src_len),
        ai_dst_len: 0,
        ai_src_addr: h.map_or(ptr::null_mut(), |h| h.ai_src_addr),
        ai_dst_addr: ptr::null_mut(),
        ai_src_canonname: ptr::null_mut(),
        ai_dst_canonname: ptr::null_mut(),
        ai_route_len: 0,
        ai_route: ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: ptr::null_mut(),
        ai_next: ptr::null_mut(),
    }
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` is NULL or came from `rdma_getaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    // SAFETY: the caller's list from rdma_getaddrinfo.
    let _ = std::panic::catch_unwind(|| unsafe { free_list(res) });
}
