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

/// The `addrinfo` hints getaddrinfo gets for rdma_cm hints: the flags and family it knows,
/// the socket type of the QP type, the protocol of the port space (what librdmacm asks).
fn host_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: addrinfo is plain C data; all-zero is "no hints".
    let mut a: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags & RAI_PASSIVE != 0 {
        a.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        a.ai_flags |= libc::AI_NUMERICHOST;
    }
    if h.ai_family != libc::AF_IB {
        a.ai_family = h.ai_family;
    }
    a.ai_socktype = match h.ai_qp_type {
        qp_type::RC | qp_type::UC | qp_type::XRC_SEND | qp_type::XRC_RECV => libc::SOCK_STREAM,
        qp_type::UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    a.ai_protocol = match (h.ai_port_space, a.ai_socktype) {
        (ps::TCP, _) | (ps::IB, libc::SOCK_STREAM) => libc::IPPROTO_TCP,
        (ps::UDP | ps::IPOIB, _) | (ps::IB, libc::SOCK_DGRAM) => libc::IPPROTO_UDP,
        _ => 0,
    };
    a
}

/// The first address getaddrinfo gives for `node`/`service`, as an `rdma_addrinfo`: QP type
/// and port space from the hints or else from the socket type and protocol found; the
/// address is the source of a passive result and the destination of an active one.
/// Err(Ok(EAI_*)) for a resolver failure, Err(Err(errno)) otherwise.
fn from_resolver(
    node: *const c_char,
    service: *const c_char,
    h: &rdma_addrinfo,
    n: &mut rdma_addrinfo,
) -> Result<(), Result<c_int, i32>> {
    if h.ai_family == libc::AF_IB && h.ai_flags & RAI_FAMILY != 0 && h.ai_flags & RAI_NUMERICHOST != 0 {
        // An AF_IB address was asked for: urxe's IDs take IPv4 and IPv6 addresses only.
        return Err(Err(libc::EAFNOSUPPORT));
    }
    let hints = host_hints(h);
    let mut list: *mut libc::addrinfo = ptr::null_mut();
    // SAFETY: NUL-terminated strings from the caller (or NULL), our hints and out-parameter.
    let rc = unsafe { libc::getaddrinfo(node, service, &hints, &mut list) };
    if rc != 0 {
        return Err(Ok(rc));
    }
    // SAFETY: getaddrinfo succeeded: `list` is a non-empty list, freed below.
    let ai = unsafe { &*list };
    n.ai_qp_type = match (h.ai_qp_type, ai.ai_socktype) {
        (0, libc::SOCK_STREAM) => qp_type::RC,
        (0, libc::SOCK_DGRAM) => qp_type::UD,
        (q, _) => q,
    };
    n.ai_port_space = match (h.ai_port_space, ai.ai_protocol) {
        (0, libc::IPPROTO_TCP) => ps::TCP,
        (0, libc::IPPROTO_UDP) => ps::UDP,
        (p, _) => p,
    };
    n.ai_family = ai.ai_family;
    let addr = dup(ai.ai_addr as *const c_void, ai.ai_addrlen as usize);
    if let Ok(a) = addr {
        if ai.ai_flags & libc::AI_PASSIVE != 0 {
            n.ai_flags = RAI_PASSIVE;
            n.ai_src_addr = a as *mut sockaddr;
            n.ai_src_len = ai.ai_addrlen;
        } else {
            n.ai_dst_addr = a as *mut sockaddr;
            n.ai_dst_len = ai.ai_addrlen;
        }
    }
    // SAFETY: the list getaddrinfo returned, freed once.
    unsafe { libc::freeaddrinfo(list) };
    addr.map(|_| ()).map_err(Err)
}

/// One `rdma_addrinfo` (librdmacm's rules): with a node or a service, what the resolver
/// finds; with neither, the hints' flags, family, QP type, port space and destination as
/// they are (libfabric passes its endpoint's addresses this way). Either way the hints'
/// source fills an empty source. The node is calloc'd; on error it is freed here.
fn build(
    node: *const c_char,
    service: *const c_char,
    h: &rdma_addrinfo,
) -> Result<*mut rdma_addrinfo, Result<c_int, i32>> {
    let ai = dup(&empty() as *const rdma_addrinfo as *const c_void, std::mem::size_of::<rdma_addrinfo>())
        .map_err(Err)? as *mut rdma_addrinfo;
    // SAFETY: `ai` is our calloc'd node, not yet shared.
    let n = unsafe { &mut *ai };
    let mut r = if !node.is_null() || !service.is_null() {
        from_resolver(node, service, h, n)
    } else {
        n.ai_flags = h.ai_flags;
        n.ai_family = h.ai_family;
        n.ai_qp_type = h.ai_qp_type;
        n.ai_port_space = h.ai_port_space;
        copy_addr(h.ai_dst_addr, h.ai_dst_len, &mut n.ai_dst_addr, &mut n.ai_dst_len).map_err(Err)
    };
    if r.is_ok() && n.ai_src_len == 0 {
        r = copy_addr(h.ai_src_addr, h.ai_src_len, &mut n.ai_src_addr, &mut n.ai_src_len).map_err(Err);
    }
    match r {
        Ok(()) => Ok(ai),
        Err(e) => {
            // SAFETY: our own node.
            unsafe { free_list(ai) };
            Err(e)
        }
    }
}

/// Copies a caller's address (`len` bytes; nothing for NULL or 0) into a calloc'd block.
fn copy_addr(
    src: *const sockaddr,
    len: libc::socklen_t,
    dst: &mut *mut sockaddr,
    dst_len: &mut libc::socklen_t,
) -> Result<(), i32> {
    if src.is_null() || len == 0 {
        return Ok(());
    }
    *dst = dup(src as *const c_void, len as usize)? as *mut sockaddr;
    *dst_len = len;
    Ok(())
}

fn empty() -> rdma_addrinfo {
    rdma_addrinfo {
        ai_flags: 0,
        ai_family: 0,
        ai_qp_type: 0,
        ai_port_space: 0,
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

/// `rdma_getaddrinfo`: 0; a getaddrinfo failure's EAI_* code (as librdmacm 44 returns it);
/// or -1 with errno (EINVAL when node, service and hints are all NULL).
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
        if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: NULL or the caller's hints, read for the length of this call.
        let h = unsafe { hints.as_ref() }.copied().unwrap_or_else(empty);
        match build(node, service, &h) {
            Ok(ai) => {
                // SAFETY: the caller's out-parameter.
                unsafe { *res = ai };
                Ok(0)
            }
            Err(Ok(rc)) => Ok(rc),
            Err(Err(e)) => Err(e),
        }
    });
    crate::export::finish("rdma_getaddrinfo", r, -1)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn sin(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
        libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
            sin_zero: [0; 8],
        }
    }

    /// # Safety
    /// `sa` is NULL or a sockaddr_in.
    unsafe fn ip_port(sa: *const sockaddr) -> Option<(Ipv4Addr, u16)> {
        // SAFETY: per the contract.
        unsafe { (sa as *const libc::sockaddr_in).as_ref() }
            .map(|s| (Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)), u16::from_be(s.sin_port)))
    }

    const SIN_LEN: libc::socklen_t = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;

    #[test]
    fn hints_alone_carry_the_endpoints_addresses() {
        // libfabric's verbs provider (vrb_create_ep) asks with neither node nor service: the
        // result is the hints' flags, family, QP type, port space and both addresses.
        let (mut src, mut dst) = (sin(Ipv4Addr::new(127, 42, 0, 1), 0), sin(Ipv4Addr::new(127, 42, 0, 2), 7471));
        let mut h = empty();
        h.ai_flags = RAI_FAMILY;
        h.ai_family = libc::AF_INET;
        h.ai_qp_type = qp_type::RC;
        h.ai_port_space = ps::TCP;
        h.ai_src_addr = &mut src as *mut _ as *mut sockaddr;
        h.ai_src_len = SIN_LEN;
        h.ai_dst_addr = &mut dst as *mut _ as *mut sockaddr;
        h.ai_dst_len = SIN_LEN;
        let mut res = ptr::null_mut();
        // SAFETY: our hints (their addresses live on this stack) and out-parameter; freed below.
        unsafe {
            assert_eq!(rdma_getaddrinfo(ptr::null(), ptr::null(), &h, &mut res), 0);
            let r = &*res;
            assert_eq!(
                (r.ai_flags, r.ai_family, r.ai_qp_type, r.ai_port_space),
                (RAI_FAMILY, libc::AF_INET, 2, ps::TCP)
            );
            assert_eq!((r.ai_src_len, r.ai_dst_len), (SIN_LEN, SIN_LEN));
            assert_ne!(r.ai_src_addr, h.ai_src_addr, "the result owns copies");
            assert_eq!(ip_port(r.ai_src_addr), Some((Ipv4Addr::new(127, 42, 0, 1), 0)));
            assert_eq!(ip_port(r.ai_dst_addr), Some((Ipv4Addr::new(127, 42, 0, 2), 7471)));
            rdma_freeaddrinfo(res);

            // A passive endpoint: the source only, RAI_PASSIVE kept.
            h.ai_flags |= RAI_PASSIVE;
            h.ai_dst_addr = ptr::null_mut();
            h.ai_dst_len = 0;
            assert_eq!(rdma_getaddrinfo(ptr::null(), ptr::null(), &h, &mut res), 0);
            assert_eq!((*res).ai_flags & RAI_PASSIVE, RAI_PASSIVE);
            assert!((*res).ai_dst_addr.is_null() && (*res).ai_dst_len == 0);
            assert_eq!(ip_port((*res).ai_src_addr), Some((Ipv4Addr::new(127, 42, 0, 1), 0)));
            rdma_freeaddrinfo(res);

            // Only all three NULL is EINVAL.
            assert_eq!(rdma_getaddrinfo(ptr::null(), ptr::null(), ptr::null(), &mut res), -1);
            assert_eq!(errno(), libc::EINVAL);
        }
    }

    #[test]
    fn resolver_results_keep_the_hints_source_and_take_types_from_the_socket() {
        let mut src = sin(Ipv4Addr::new(127, 42, 0, 3), 0);
        let mut h = empty();
        h.ai_qp_type = qp_type::UD;
        h.ai_src_addr = &mut src as *mut _ as *mut sockaddr;
        h.ai_src_len = SIN_LEN;
        let mut res = ptr::null_mut();
        // SAFETY: literals, our hints and out-parameter; freed below.
        unsafe {
            assert_eq!(rdma_getaddrinfo(c"127.42.0.4".as_ptr(), c"7174".as_ptr(), &h, &mut res), 0);
            let r = &*res;
            // UD asks for a datagram socket, whose protocol (UDP) gives the port space.
            assert_eq!((r.ai_flags, r.ai_qp_type, r.ai_port_space), (0, qp_type::UD, ps::UDP));
            assert_eq!(ip_port(r.ai_dst_addr), Some((Ipv4Addr::new(127, 42, 0, 4), 7174)));
            assert_eq!(ip_port(r.ai_src_addr), Some((Ipv4Addr::new(127, 42, 0, 3), 0)));
            rdma_freeaddrinfo(res);

            // libfabric's interface scan: a numeric passive address is the source.
            let mut p = empty();
            p.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
            assert_eq!(rdma_getaddrinfo(c"127.42.0.5".as_ptr(), ptr::null(), &p, &mut res), 0);
            assert_eq!(((*res).ai_flags, (*res).ai_qp_type, (*res).ai_port_space), (RAI_PASSIVE, qp_type::RC, ps::TCP));
            assert_eq!(ip_port((*res).ai_src_addr), Some((Ipv4Addr::new(127, 42, 0, 5), 0)));
            assert!((*res).ai_dst_addr.is_null());
            rdma_freeaddrinfo(res);
        }
    }

    #[test]
    fn numeric_af_ib_addresses_are_not_offered() {
        let mut h = empty();
        h.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
        h.ai_family = libc::AF_IB;
        let mut res = ptr::null_mut();
        // SAFETY: a literal, our hints and out-parameter.
        unsafe {
            assert_eq!(rdma_getaddrinfo(c"fe80::1".as_ptr(), ptr::null(), &h, &mut res), -1);
        }
        assert_eq!(errno(), libc::EAFNOSUPPORT);
        assert!(res.is_null());
    }
}
