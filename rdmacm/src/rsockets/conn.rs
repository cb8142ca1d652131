//! The C calls that make and connect sockets: `rsocket`, `rbind`, `rlisten`, `raccept`,
//! `rconnect`.

use super::proto::*;
use super::stream::*;
use super::wait::*;
use crate::abi::*;
use crate::api::*;
use crate::events::*;
use libc::{c_int, c_void, sockaddr, socklen_t};
use std::ptr;
use std::sync::{Arc, Mutex};

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    let sty = ty & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(libc::EOPNOTSUPP);
    }
    if sty != libc::SOCK_STREAM || (protocol != 0 && protocol != libc::IPPROTO_TCP) {
        // Datagram rsockets (UD QPs behind a UDP socket) are not provided.
        return Err(libc::EOPNOTSUPP);
    }
    // SAFETY: no arguments.
    let ch = unsafe { rdma_create_event_channel() };
    if ch.is_null() {
        return Err(crate::export_errno());
    }
    let mut id = ptr::null_mut();
    // SAFETY: our channel; `id` is the out-parameter.
    if unsafe { rdma_create_id(ch, &mut id, ptr::null_mut(), ps::TCP) } != 0 {
        let e = crate::export_errno();
        // SAFETY: the channel just created.
        unsafe { rdma_destroy_event_channel(ch) };
        return Err(e);
    }
    let mut s = Stream::new(ch, id, None);
    s.fs_flags = if ty & libc::SOCK_NONBLOCK != 0 { libc::O_NONBLOCK } else { 0 };
    s.fd_flags = if ty & libc::SOCK_CLOEXEC != 0 { libc::FD_CLOEXEC } else { 0 };
    let index = s.index;
    table().insert(index, Arc::new(Mutex::new(s)));
    Ok(index)
}

pub(super) fn sockaddr_arg(addr: *const sockaddr, len: socklen_t) -> Result<*mut sockaddr, i32> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's sockaddr of `len` bytes.
    let fam = c_int::from(unsafe { (*addr).sa_family });
    let need = match fam {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(libc::EINVAL);
    }
    Ok(addr as *mut sockaddr)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    let h = lookup(socket)?;
    let a = sockaddr_arg(addr, addrlen)?;
    let mut s = guard(&h);
    if s.state != st::INIT {
        return Err(libc::EINVAL);
    }
    // SAFETY: our ID; the caller's address.
    errno_of(unsafe { rdma_bind_addr(s.id, a) })?;
    s.state = st::BOUND;
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    let h = lookup(socket)?;
    let mut s = guard(&h);
    if s.state == st::LISTENING {
        return Ok(0);
    }
    // SAFETY: our ID.
    errno_of(unsafe { rdma_listen(s.id, backlog) })?;
    s.state = st::LISTENING;
    Ok(0)
}

/// Accepts one CONNECT_REQUEST: a new socket with its own channel, endpoint and REP.
pub(super) fn accept_one(l: &Stream, ev: TakenEvent) -> Result<c_int, i32> {
    let nid = ev.id;
    let reject = |e: i32| {
        // SAFETY: the new ID from the request: rejected, then destroyed.
        unsafe {
            rdma_reject(nid, ptr::null(), 0);
            rdma_destroy_id(nid);
        }
        e
    };
    if ev.data.len() < CONN_DATA_LEN || ev.data[0] != 1 {
        return Err(reject(libc::ECONNABORTED));
    }
    // SAFETY: no arguments.
    let ch = unsafe { rdma_create_event_channel() };
    if ch.is_null() {
        return Err(reject(crate::export_errno()));
    }
    // SAFETY: the new ID moves to its own channel.
    if unsafe { rdma_migrate_id(nid, ch) } != 0 {
        let e = crate::export_errno();
        // SAFETY: the channel just created, unused.
        unsafe { rdma_destroy_event_channel(ch) };
        return Err(reject(e));
    }
    let mut s = Stream::new(ch, nid, Some(l));
    let r = s.create_ep().and_then(|_| s.save_conn_data(&ev.data));
    if let Err(e) = r {
        s.free_ep();
        // SAFETY: the new ID and its channel, never exposed.
        unsafe {
            rdma_reject(nid, ptr::null(), 0);
            rdma_destroy_id(nid);
            rdma_destroy_event_channel(ch);
        }
        return Err(e);
    }
    let cresp = s.format_conn_data();
    let mut param = ev.param;
    param.private_data = cresp.as_ptr() as *const c_void;
    param.private_data_len = CONN_DATA_LEN as u8;
    // SAFETY: our new ID with its QP; the REP carries our connection data.
    if unsafe { rdma_accept(nid, &mut param) } != 0 {
        let e = crate::export_errno();
        s.free_ep();
        // SAFETY: as above.
        unsafe {
            rdma_destroy_id(nid);
            rdma_destroy_event_channel(ch);
        }
        return Err(e);
    }
    // Connected once the RTU's ESTABLISHED arrives (the first call that needs it waits).
    s.state = st::ACCEPTING;
    let index = s.index;
    if s.fd_flags & libc::FD_CLOEXEC == 0 {
        // SAFETY: our channel fd: an rsocket is inherited across exec only if asked.
        unsafe { libc::fcntl(index, libc::F_SETFD, 0) };
    }
    table().insert(index, Arc::new(Mutex::new(s)));
    Ok(index)
}

pub(super) fn copy_addr(src: &libc::sockaddr_storage, addr: *mut sockaddr, addrlen: *mut socklen_t) {
    if addr.is_null() || addrlen.is_null() {
        return;
    }
    let len = match c_int::from(src.ss_family) {
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => std::mem::size_of::<libc::sockaddr_in>(),
    };
    // SAFETY: the caller's buffer of *addrlen bytes; we copy at most that and report the
    // full length, as getpeername(2).
    unsafe {
        let n = len.min(*addrlen as usize);
        ptr::copy_nonoverlapping(src as *const _ as *const u8, addr as *mut u8, n);
        *addrlen = len as socklen_t;
    }
}

/// The socket a blocking call works on: the one its number named at the call's first step.
/// Each step looks the number up again (no reference is held across a sleep, so a cancelled
/// call leaves nothing behind) and checks the stream's serial, as a kernel socket call stays
/// with the file it started on: a socket closed meanwhile fails the call with EBADF at its
/// next step (unless the close's own shutdown ended it first: 0 for a reader), and a new
/// socket given the closed one's number is not taken for it.
#[derive(Clone, Copy)]
pub(super) struct Held {
    pub(super) socket: c_int,
    /// The stream's [`Stream::serial`]; 0 before the first step.
    pub(super) serial: u64,
}

impl Held {
    pub(super) fn new(socket: c_int) -> Held {
        Held { socket, serial: 0 }
    }

    /// One step on the held socket (EBADF once it is gone).
    pub(super) fn step<T>(&mut self, f: impl FnOnce(&Handle) -> Result<T, Fail>) -> Result<T, Fail> {
        let h = lookup(self.socket)?;
        let serial = guard(&h).serial;
        if self.serial == 0 {
            self.serial = serial;
        } else if serial != self.serial {
            return Err(Fail::Errno(libc::EBADF));
        }
        f(&h)
    }
}

/// `raccept`'s arguments.
#[derive(Clone, Copy)]
pub(super) struct Accept {
    pub(super) held: Held,
    pub(super) addr: *mut sockaddr,
    pub(super) addrlen: *mut socklen_t,
}

pub(super) fn accept_step(a: &mut Accept, _woke: Woke) -> Result<c_int, Fail> {
    let (addr, addrlen) = (a.addr, a.addrlen);
    a.held.step(|h| accept_on(h, addr, addrlen))
}

pub(super) fn accept_on(h: &Handle, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Result<c_int, Fail> {
    let mut s = guard(h);
    if s.state != st::LISTENING {
        return Err(Fail::Errno(libc::EBADF));
    }
    while let Some(ev) = s.take_event() {
        if ev.event != event::CONNECT_REQUEST {
            continue;
        }
        let i = accept_one(&s, ev)?;
        if let Ok(n) = lookup(i) {
            let n = guard(&n);
            // SAFETY: the new socket's live ID.
            copy_addr(unsafe { &(*n.id).route.addr.dst_storage }, addr, addrlen);
        }
        return Ok(i);
    }
    if s.nonblocking(0) {
        return Err(Fail::Errno(libc::EAGAIN));
    }
    Err(Fail::Block(Sleep::On([s.ch_fd(), -1])))
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
    blocking("raccept", &mut Accept { held: Held::new(socket), addr, addrlen }, accept_step, -1)
}

/// `rconnect`'s arguments, and whether the connection is already asked for.
#[derive(Clone, Copy)]
pub(super) struct Connect {
    pub(super) held: Held,
    pub(super) addr: *const sockaddr,
    pub(super) addrlen: socklen_t,
    pub(super) asked: bool,
}

/// The first step resolves the address and route (local, bounded: no SA on RoCE; waited for
/// even on a non-blocking socket, as a TCP connect resolves before it returns EINPROGRESS)
/// and sends the REQ; every step then waits for the REP's outcome.
pub(super) fn connect_step(c: &mut Connect, _woke: Woke) -> Result<c_int, Fail> {
    let (addr, addrlen, asked) = (c.addr, c.addrlen, &mut c.asked);
    c.held.step(|h| {
        if !*asked {
            request_connection(h, addr, addrlen)?;
            *asked = true;
        }
        let nonblock = guard(h).nonblocking(0);
        do_connect(h, nonblock)?;
        Ok(0)
    })
}

pub(super) fn request_connection(h: &Handle, addr: *const sockaddr, addrlen: socklen_t) -> Result<(), i32> {
    let dst = sockaddr_arg(addr, addrlen)?;
    {
        let mut s = guard(h);
        match s.state {
            st::INIT | st::BOUND => {}
            st::CONNECTING | st::ACCEPTING => return Err(libc::EALREADY),
            x if x & st::CONNECTED != 0 => return Err(libc::EISCONN),
            _ => return Err(libc::EINVAL),
        }
        // SAFETY: our ID; the caller's address.
        errno_of(unsafe { rdma_resolve_addr(s.id, ptr::null_mut(), dst, 2000) })?;
        s.state = st::CONNECTING;
    }
    let fail = |e: i32| {
        let mut s = guard(h);
        s.state = st::CONNECT_ERROR;
        s.err = e;
        e
    };
    let ev = wait_event(h);
    if ev.event != event::ADDR_RESOLVED {
        return Err(fail(if ev.event == event::ADDR_ERROR { libc::EHOSTUNREACH } else { libc::ECONNREFUSED }));
    }
    {
        let s = guard(h);
        // SAFETY: our ID.
        if unsafe { rdma_resolve_route(s.id, 2000) } != 0 {
            drop(s);
            return Err(fail(crate::export_errno()));
        }
    }
    let ev = wait_event(h);
    if ev.event != event::ROUTE_RESOLVED {
        return Err(fail(libc::EHOSTUNREACH));
    }
    let mut s = guard(h);
    if let Err(e) = s.create_ep() {
        s.free_ep();
        drop(s);
        return Err(fail(e));
    }
    let creq = s.format_conn_data();
    // SAFETY: all-zero is a valid conn param.
    let mut param: rdma_conn_param = unsafe { std::mem::zeroed() };
    param.private_data = creq.as_ptr() as *const c_void;
    param.private_data_len = CONN_DATA_LEN as u8;
    param.flow_control = 1;
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    param.responder_resources = 2;
    param.initiator_depth = 2;
    // SAFETY: our ID with its QP.
    if unsafe { rdma_connect(s.id, &mut param) } != 0 {
        let e = crate::export_errno();
        drop(s);
        return Err(fail(e));
    }
    Ok(())
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    blocking("rconnect", &mut Connect { held: Held::new(socket), addr, addrlen, asked: false }, connect_step, -1)
}

/// Completes a connection still opening before data calls (EAGAIN while in progress).
pub(super) fn ensure_connected(h: &Handle, flags: c_int) -> Result<(), Fail> {
    let (opening, nonblock) = {
        let s = guard(h);
        (s.state & st::OPENING != 0, s.nonblocking(flags))
    };
    if opening {
        return do_connect(h, nonblock).map_err(|e| match e {
            Fail::Errno(libc::EINPROGRESS) => Fail::Errno(libc::EAGAIN),
            e => e,
        });
    }
    Ok(())
}

pub(super) fn peer_name(h: &Handle, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Result<(), i32> {
    if addr.is_null() || addrlen.is_null() {
        return Err(libc::EFAULT);
    }
    let s = guard(h);
    if s.state & (st::CONNECTED | st::OPENING) == 0 {
        return Err(libc::ENOTCONN);
    }
    // SAFETY: our live ID.
    copy_addr(unsafe { &(*s.id).route.addr.dst_storage }, addr, addrlen);
    Ok(())
}
