//! Shutdown and close, names, socket options, `rfcntl`, and the iomap calls (`riomap`,
//! `riounmap`, `riowrite`).

use super::buffers::*;
use super::conn::*;
use super::dp::*;
use super::io::*;
use super::proto::*;
use super::stream::*;
use super::wait::*;
use crate::abi::*;
use crate::api::*;
use crate::events::*;
use libc::{c_int, c_void, pollfd, sockaddr, socklen_t};
use std::ptr;
use std::time::Instant;

pub(super) fn shutdown(h: &Handle, how: c_int) -> Result<(), i32> {
    let ctrl_msg = {
        let mut s = guard(h);
        if s.state & st::CONNECTED == 0 {
            return if s.state & (st::DISCONNECTED | st::ERROR) != 0 { Ok(()) } else { Err(libc::ENOTCONN) };
        }
        match how {
            libc::SHUT_RDWR => {
                s.state &= !(st::READABLE | st::WRITABLE);
                Some(ctrl::DISCONNECT)
            }
            libc::SHUT_WR => {
                s.state &= !st::WRITABLE;
                Some(if s.state & st::READABLE != 0 { ctrl::SHUTDOWN } else { ctrl::DISCONNECT })
            }
            libc::SHUT_RD => {
                s.state &= !st::READABLE;
                if s.state & st::WRITABLE != 0 {
                    None
                } else {
                    Some(ctrl::DISCONNECT)
                }
            }
            _ => return Err(libc::EINVAL),
        }
    };
    let Some(c) = ctrl_msg else { return Ok(()) };
    if !guard(h).ctrl_avail() {
        drain(h, conn_can_send_ctrl);
    }
    {
        let mut s = guard(h);
        if s.state & st::CONNECTED != 0 && s.ctrl_avail() {
            s.ctrl_seqno += 1;
            if let Err(e) = s.post_msg(msg_set(op::CTRL, c)) {
                s.fail(e);
            }
        }
    }
    drain(h, conn_all_sends_done);
    let s = guard(h);
    if s.state & st::DISCONNECTED != 0 {
        // SAFETY: our ID: the CM's DREQ tells the peer's CM too.
        unsafe { rdma_disconnect(s.id) };
    }
    Ok(())
}

/// Waits for `test` as a blocking call would, for at most CLOSE_DRAIN. Not a cancellation
/// point (`rshutdown` and `rclose` run with cancellation off): the wait is bounded.
pub(super) fn drain(h: &Handle, test: fn(&Stream) -> bool) {
    let end = Instant::now() + CLOSE_DRAIN;
    while Instant::now() < end {
        match get_comp(h, true, test) {
            Err(Fail::Errno(libc::EWOULDBLOCK)) => {
                let fd = {
                    let mut s = guard(h);
                    if !s.cq_armed && !s.cq.is_null() {
                        // SAFETY: our CQ.
                        unsafe { req_notify_cq(s.cq) };
                        s.cq_armed = true;
                        continue;
                    }
                    if s.comp.is_null() {
                        return;
                    }
                    // SAFETY: our live completion channel.
                    unsafe { (*s.comp).fd }
                };
                let mut p = pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd of ours.
                unsafe { libc::poll(&mut p, 1, 50) };
                take_cq_event(&mut guard(h));
            }
            _ => return,
        }
    }
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    let h = lookup(socket)?;
    shutdown(&h, how)?;
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rclose(socket: c_int) -> c_int {
    let h = table().remove(&socket).ok_or(libc::EBADF)?;
    if guard(&h).state & st::CONNECTED != 0 {
        let _ = shutdown(&h, libc::SHUT_RDWR);
    }
    let mut s = guard(&h);
    if s.state & (st::CONNECTED | st::DISCONNECTED | st::ERROR) != 0 {
        // SAFETY: our ID (an error for one already disconnected is fine).
        unsafe { rdma_disconnect(s.id) };
    }
    s.free_ep();
    // SAFETY: our ID and channel, destroyed once; no event is outstanding (each is
    // acknowledged when taken).
    unsafe {
        rdma_destroy_id(s.id);
        rdma_destroy_event_channel(s.ch);
    }
    // A call on another thread may be inside a step on this stream: it finds no ID,
    // channel, QP or CQ from here on.
    s.id = ptr::null_mut();
    s.ch = ptr::null_mut();
    Ok(0)
}

// ---- addresses and options ----------------------------------------------------------------

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
    let h = lookup(socket)?;
    peer_name(&h, addr, addrlen)?;
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
    let h = lookup(socket)?;
    if addr.is_null() || addrlen.is_null() {
        return Err(libc::EFAULT);
    }
    let s = guard(&h);
    // SAFETY: our live ID.
    copy_addr(unsafe { &(*s.id).route.addr.src_storage }, addr, addrlen);
    Ok(0)
}

pub(super) fn int_opt(optval: *const c_void, optlen: socklen_t) -> Result<c_int, i32> {
    if optval.is_null() {
        return Err(libc::EFAULT);
    }
    if (optlen as usize) < std::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's option of at least an int.
    Ok(unsafe { ptr::read_unaligned(optval as *const c_int) })
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    let h = lookup(socket)?;
    let mut s = guard(&h);
    match (level, optname) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            let v = int_opt(optval, optlen)?;
            // SAFETY: our ID; the option is an int.
            let _ = unsafe {
                rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v as *const c_int as *mut c_void, 4)
            };
            s.reuseaddr = v != 0;
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let v = int_opt(optval, optlen)?.max(0) as u32;
            if s.rbuf.is_none() {
                s.rbuf_size = (v.min(1 << 27) << 1).max(RS_SNDLOWAT << 1);
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let v = int_opt(optval, optlen)?.max(0) as u32;
            if s.sbuf.is_none() {
                s.sbuf_size = (v.min(1 << 27) << 1).max(RS_SNDLOWAT << 1);
            }
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if optval.is_null() || (optlen as usize) < std::mem::size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the caller's struct linger.
            s.linger_off = unsafe { (*(optval as *const libc::linger)).l_onoff } == 0;
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => s.keepalive = int_opt(optval, optlen)? != 0,
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => {
            int_opt(optval, optlen)?;
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => s.nodelay = int_opt(optval, optlen)? != 0,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let v = int_opt(optval, optlen)?;
            if v <= 0 {
                return Err(libc::EINVAL);
            }
            s.keepidle = v;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION) => {}
        (libc::IPPROTO_IP, libc::IP_TOS) => {
            let v = int_opt(optval, optlen)? as u8;
            // SAFETY: our ID; the TOS option is one byte.
            errno_of(unsafe {
                rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &v as *const u8 as *mut c_void, 1)
            })?;
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            let v = int_opt(optval, optlen)?;
            // SAFETY: our ID; the option is an int.
            errno_of(unsafe {
                rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v as *const c_int as *mut c_void, 4)
            })?;
        }
        (SOL_RDMA, o) => {
            if s.state >= st::OPENING {
                return Err(libc::EINVAL);
            }
            let v = int_opt(optval, optlen)?.max(0) as u32;
            match o {
                RDMA_SQSIZE => s.sq_size = v.min(RS_QP_MAX_SIZE),
                RDMA_RQSIZE => s.rq_size = v.min(RS_QP_MAX_SIZE),
                RDMA_INLINE => s.sq_inline = v.min(RS_QP_MAX_SIZE),
                RDMA_IOMAPSIZE => s.target_iomap_size = scale_to_value(value_to_scale(v, 8) & 0xFF, 8),
                // A path record from rdma_getaddrinfo: on RoCE the route is built
                // locally, so the resolution ignores it (as librdmacm's fallback).
                RDMA_ROUTE => {}
                _ => return Err(libc::EOPNOTSUPP),
            }
        }
        _ => return Err(libc::EOPNOTSUPP),
    }
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    let h = lookup(socket)?;
    if optval.is_null() || optlen.is_null() {
        return Err(libc::EFAULT);
    }
    let mut s = guard(&h);
    let int = |v: c_int| -> Result<c_int, i32> {
        // SAFETY: the caller's buffer of *optlen bytes.
        unsafe {
            if (*optlen as usize) < 4 {
                return Err(libc::EINVAL);
            }
            ptr::write_unaligned(optval as *mut c_int, v);
            *optlen = 4;
        }
        Ok(0)
    };
    match (level, optname) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => int(s.reuseaddr as c_int),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => int(s.keepalive as c_int),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => int(s.rbuf_size as c_int),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => int(s.sbuf_size as c_int),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => int(0),
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            let e = s.err;
            s.err = 0;
            int(e)
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            // SAFETY: the caller's buffer of *optlen bytes.
            unsafe {
                if (*optlen as usize) < std::mem::size_of::<libc::linger>() {
                    return Err(libc::EINVAL);
                }
                *(optval as *mut libc::linger) = libc::linger { l_onoff: (!s.linger_off) as c_int, l_linger: 0 };
                *optlen = std::mem::size_of::<libc::linger>() as socklen_t;
            }
            Ok(0)
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => int(s.nodelay as c_int),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => int(2048),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int(s.keepidle),
        (SOL_RDMA, RDMA_SQSIZE) => int(s.sq_size as c_int),
        (SOL_RDMA, RDMA_RQSIZE) => int(s.rq_size as c_int),
        (SOL_RDMA, RDMA_INLINE) => int(s.sq_inline as c_int),
        (SOL_RDMA, RDMA_IOMAPSIZE) => int(s.target_iomap_size as c_int),
        _ => Err(libc::EOPNOTSUPP),
    }
}

/// `rfcntl(socket, cmd, ...)`: F_GETFL/F_SETFL (O_NONBLOCK) and F_GETFD/F_SETFD. Defined
/// with the one argument these commands take: on x86-64 SysV a variadic caller passes it
/// in the same register.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: c_int) -> c_int {
    let h = lookup(socket)?;
    let mut s = guard(&h);
    match cmd {
        libc::F_GETFL => Ok(s.fs_flags),
        libc::F_SETFL => {
            s.fs_flags = arg;
            Ok(0)
        }
        libc::F_GETFD => Ok(s.fd_flags),
        libc::F_SETFD => {
            s.fd_flags = arg;
            Ok(0)
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}

// ---- riomap / riowrite --------------------------------------------------------------------

/// Maps `buf` for the peer's `riowrite` (PROT_WRITE: sent into the peer's target iomap
/// before this side's next data) or registers it locally (PROT_NONE). `offset` -1 maps at
/// the buffer's address.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: usize,
    prot: c_int,
    _flags: c_int,
    offset: libc::off_t,
) -> libc::off_t {
    let h = lookup(socket)?;
    let mut s = guard(&h);
    // SAFETY: our live ID.
    let pd = unsafe { (*s.id).pd };
    if pd.is_null() || prot & !libc::PROT_WRITE != 0 || buf.is_null() || len == 0 {
        return Err(libc::EINVAL);
    }
    let write = prot & libc::PROT_WRITE != 0;
    let slot = if write { Some(s.iomaps.iter().position(Option::is_none).ok_or(libc::ENOMEM)?) } else { None };
    let access = IBV_ACCESS_LOCAL_WRITE | if write { IBV_ACCESS_REMOTE_WRITE } else { 0 };
    // SAFETY: the caller's buffer, registered with the socket's PD.
    let mr = unsafe { ibv_reg_mr(pd, buf, len, access) };
    if mr.is_null() {
        return Err(crate::export_errno());
    }
    let off = if offset == -1 { buf as libc::off_t } else { offset };
    match slot {
        Some(i) => s.iomaps[i] = Some(IoMap { mr, offset: off as u64, sent: false }),
        None => s.local_maps.push(mr),
    }
    Ok(off)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
    let h = lookup(socket)?;
    let mut s = guard(&h);
    let hit = |mr: *mut ibv_mr| {
        // SAFETY: our live MRs.
        unsafe { (*mr).addr == buf && (*mr).length == len }
    };
    if let Some(i) = s.iomaps.iter().position(|m| m.as_ref().is_some_and(|m| hit(m.mr))) {
        let m = s.iomaps[i].take().expect("slot");
        // SAFETY: our MR, deregistered once.
        unsafe { ibv_dereg_mr(m.mr) };
        return Ok(0);
    }
    if let Some(i) = s.local_maps.iter().position(|&mr| hit(mr)) {
        let mr = s.local_maps.swap_remove(i);
        // SAFETY: our MR, deregistered once.
        unsafe { ibv_dereg_mr(mr) };
        return Ok(0);
    }
    Err(libc::EINVAL)
}

/// `riowrite`'s step: writes `count` bytes straight into the peer's buffer mapped at
/// `offset` (no notification: the peer learns of it from a later message). Stops at the end
/// of the mapped range.
pub(super) fn iowrite_step(io: &mut Io, woke: Woke) -> Result<usize, Fail> {
    let mut held = io.held;
    let r = held.step(|h| iowrite_on(h, io, woke));
    io.held = held;
    r
}

pub(super) fn iowrite_on(h: &Handle, io: &mut Io, woke: Woke) -> Result<usize, Fail> {
    after_sleep(h, woke);
    let Bufs::One(v) = io.bufs else { unreachable!("riowrite has one buffer") };
    io.bufs.segs()?;
    let (count, done) = (v.iov_len, &mut io.p.off);
    let out = |done: usize, e: Fail| match e {
        Fail::Errno(_) if done > 0 => Ok(done),
        e => Err(e),
    };
    if let Err(e) = ensure_connected(h, io.flags).and_then(|_| send_iomaps(h, io.flags)) {
        return out(*done, e);
    }
    let nonblock = guard(h).nonblocking(io.flags);
    while *done < count {
        let off = io.offset as u64 + *done as u64;
        let map = {
            let s = guard(h);
            (0..s.target_iomap_size as usize)
                .map(|i| s.target_iomap(i))
                .find(|(o, sge)| off >= *o && off < *o + u64::from(sge.length))
        };
        let Some((moff, sge)) = map else {
            return out(*done, Fail::Errno(libc::EINVAL));
        };
        if let Err(e) = wait_send_space(h, nonblock) {
            return out(*done, e);
        }
        let mut s = guard(h);
        let xfer =
            io.p.chunks.next(count - *done).min(s.sbuf_bytes_avail).min((moff + u64::from(sge.length) - off) as u32);
        let addr = sge.addr + off - moff;
        s.sqe_avail -= 1;
        s.sbuf_bytes_avail -= xfer;
        // SAFETY: within the caller's `count` bytes.
        let src = unsafe { (v.iov_base as *const u8).add(*done) };
        let r = s.post_payload(src, xfer, msg_set(op::WRITE, xfer), None, addr, sge.key);
        if let Err(e) = r {
            s.fail(e);
            return out(*done, Fail::Errno(e));
        }
        *done += xfer as usize;
    }
    Ok(count)
}

/// Writes `count` bytes straight into the peer's buffer mapped at `offset` (no
/// notification: the peer learns of it from a later message). Stops at the end of the
/// mapped range.
///
/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
// `usize::MAX` is C's `(size_t)-1`, the failure value of `riowrite`.
pub unsafe extern "C-unwind" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: usize,
    offset: libc::off_t,
    flags: c_int,
) -> usize {
    blocking("riowrite", &mut Io { offset, ..Io::new(socket, Bufs::one(buf, count), flags) }, iowrite_step, usize::MAX)
}
