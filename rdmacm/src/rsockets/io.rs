//! The C calls that move data: `rrecv`, `rread(v)`, `rrecvmsg`, `rsend`, `rwrite(v)`,
//! `rsendmsg` and their helpers.

use super::buffers::*;
use super::conn::*;
use super::proto::*;
use super::stream::*;
use super::wait::*;
use libc::{c_int, c_void, iovec, msghdr, sockaddr, socklen_t, ssize_t};
use std::ptr;

/// Copies from the receive buffer ring at `rbuf_offset` into `dst`, advancing it.
pub(super) fn copy_out(s: &mut Stream, dst: *mut u8, len: u32, consume: bool) {
    let rb = s.rbuf.as_ref().expect("rbuf").ptr;
    let mut off = s.rbuf_offset;
    let mut done = 0u32;
    while done < len {
        let n = (len - done).min(s.rbuf_size - off);
        // SAFETY: `off + n` ≤ rbuf_size inside our receive buffer; `dst` has `len` bytes.
        unsafe { ptr::copy_nonoverlapping(rb.add(off as usize), dst.add(done as usize), n as usize) };
        done += n;
        off += n;
        if off == s.rbuf_size {
            off = 0;
        }
    }
    if consume {
        s.rbuf_offset = off;
        s.rbuf_bytes_avail += len;
    }
}

/// Receives into `buf[*done..len]`, adding what it copies to `*done` (kept across a blocking
/// call's steps). Ok once the call is satisfied (fewer than `len` bytes unless MSG_WAITALL);
/// an error only if nothing was received.
pub(super) fn recv_into(h: &Handle, buf: *mut u8, len: usize, flags: c_int, done: &mut usize) -> Result<(), Fail> {
    ensure_connected(h, flags)?;
    let nonblock = guard(h).nonblocking(flags);
    loop {
        if !have_rdata(&guard(h)) {
            match get_comp(h, nonblock, conn_have_rdata) {
                Ok(()) => {}
                Err(Fail::Errno(_)) if *done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        let mut s = guard(h);
        if flags & libc::MSG_PEEK != 0 {
            let mut off = s.rbuf_offset;
            let mut got = 0usize;
            let sizes: Vec<u32> = s.rmsg.iter().copied().collect();
            for sz in sizes {
                if got == len {
                    break;
                }
                let n = (sz as usize).min(len - got);
                let save = s.rbuf_offset;
                s.rbuf_offset = off;
                // SAFETY: `buf` has `len` bytes.
                copy_out(&mut s, unsafe { buf.add(got) }, n as u32, false);
                off = (off + n as u32) % s.rbuf_size;
                s.rbuf_offset = save;
                got += n;
            }
            *done = got;
            return Ok(());
        }
        while *done < len {
            let left = len - *done;
            let Some(&front) = s.rmsg.front() else { break };
            let n = if (left as u64) < u64::from(front) {
                *s.rmsg.front_mut().expect("front") -= left as u32;
                left as u32
            } else {
                s.rseq_no = s.rseq_no.wrapping_add(1);
                s.rmsg.pop_front();
                front
            };
            // SAFETY: `buf` has `len` bytes, `*done` are filled.
            copy_out(&mut s, unsafe { buf.add(*done) }, n, true);
            *done += n as usize;
        }
        if !(*done < len && flags & libc::MSG_WAITALL != 0 && s.state & st::READABLE != 0) {
            break;
        }
    }
    // Hand the space back now rather than at the next call.
    let mut s = guard(h);
    s.update_credits();
    Ok(())
}

/// Sends `buf[*done..len]`, adding what it posts to `*done` (kept across a blocking call's
/// steps, as the transfer sizes in `chunks` are). Ok once all is sent, or with what was sent
/// when an error stops it; an error only if nothing was sent.
pub(super) fn send_from(
    h: &Handle,
    buf: *const u8,
    len: usize,
    flags: c_int,
    done: &mut usize,
    chunks: &mut Chunks,
) -> Result<usize, Fail> {
    let out = |done: usize, e: Fail| match e {
        Fail::Errno(_) if done > 0 => Ok(done),
        e => Err(e),
    };
    if let Err(e) = ensure_connected(h, flags).and_then(|_| send_iomaps(h, flags)) {
        return out(*done, e);
    }
    let nonblock = guard(h).nonblocking(flags);
    while *done < len {
        if let Err(e) = wait_send_space(h, nonblock) {
            return out(*done, e);
        }
        let mut s = guard(h);
        let xfer = chunks.next(len - *done).min(s.sbuf_bytes_avail).min(s.target_sgl(s.target_sge).length);
        // SAFETY: within the caller's `len` bytes.
        if let Err(e) = s.write_data(unsafe { buf.add(*done) }, xfer) {
            s.fail(e);
            return out(*done, Fail::Errno(e));
        }
        *done += xfer as usize;
    }
    Ok(len)
}

/// Waits (or EWOULDBLOCK) until the socket may send; ECONNRESET once it may not send at all.
pub(super) fn wait_send_space(h: &Handle, nonblock: bool) -> Result<(), Fail> {
    if !guard(h).can_send() {
        get_comp(h, nonblock, conn_can_send)?;
        if guard(h).state & st::WRITABLE == 0 {
            return Err(Fail::Errno(libc::ECONNRESET));
        }
    }
    Ok(())
}

/// Transfer sizes of one send call, as librdmacm: 2 KiB first, doubling up to 64 KiB, so a
/// long send starts moving before its whole size is staged.
#[derive(Clone, Copy)]
pub(super) struct Chunks(u32);

impl Default for Chunks {
    fn default() -> Self {
        Chunks(RS_OLAP_START_SIZE)
    }
}

impl Chunks {
    /// The next transfer's size with `left` bytes to go (before the buffer limits).
    pub(super) fn next(&mut self, left: usize) -> u32 {
        if (self.0 as usize) >= left {
            return left as u32;
        }
        let x = self.0;
        if self.0 < RS_MAX_TRANSFER {
            self.0 <<= 1;
        }
        x
    }
}

/// Sends pending `riomap` mappings into the peer's target iomap (before any data after them).
pub(super) fn send_iomaps(h: &Handle, flags: c_int) -> Result<(), Fail> {
    loop {
        let pending = {
            let s = guard(h);
            s.iomaps.iter().position(|m| m.as_ref().is_some_and(|m| !m.sent))
        };
        let Some(i) = pending else { return Ok(()) };
        let nonblock = guard(h).nonblocking(flags);
        wait_send_space(h, nonblock)?;
        let mut s = guard(h);
        let (offset, mr) = {
            let m = s.iomaps[i].as_mut().expect("pending map");
            m.sent = true;
            (m.offset, m.mr)
        };
        // SAFETY: our live MR.
        let (addr, length, key) = unsafe { ((*mr).addr as u64, (*mr).length as u32, (*mr).rkey) };
        let raw = if s.swap_sgl {
            RsIomapRaw {
                offset: offset.swap_bytes(),
                sge: RsSgeRaw { addr: addr.swap_bytes(), key: key.swap_bytes(), length: length.swap_bytes() },
            }
        } else {
            RsIomapRaw { offset, sge: RsSgeRaw { addr, key, length } }
        };
        s.sseq_no = s.sseq_no.wrapping_add(1);
        s.sqe_avail -= 1;
        s.sbuf_bytes_avail -= IOMAP_LEN as u32;
        let dst = s.remote_iomap.addr + i as u64 * IOMAP_LEN as u64;
        let key_r = s.remote_iomap.key;
        let msg = msg_set(op::IOMAP_SGL, i as u32);
        let r = s.post_payload(&raw as *const RsIomapRaw as *const u8, IOMAP_LEN as u32, msg, Some(msg), dst, key_r);
        if let Err(e) = r {
            s.fail(e);
            return Err(Fail::Errno(e));
        }
    }
}

/// The buffers of a data call.
#[derive(Clone, Copy)]
pub(super) enum Bufs {
    /// One buffer (`rrecv`, `rsend`, `riowrite`, …): base and length.
    One(iovec),
    /// An iovec array (`rreadv`, `rwritev`).
    Vec(*const iovec, c_int),
    /// A msghdr's iovecs (`rrecvmsg`, `rsendmsg`): control data is refused.
    Msg(*mut msghdr),
}

impl Bufs {
    pub(super) fn one(base: *const c_void, len: usize) -> Bufs {
        Bufs::One(iovec { iov_base: base as *mut c_void, iov_len: len })
    }

    /// The segments, checked as the man pages say (EFAULT, EINVAL, EOPNOTSUPP).
    pub(super) fn segs(&self) -> Result<&[iovec], i32> {
        match self {
            Bufs::One(v) => {
                if v.iov_base.is_null() && v.iov_len > 0 {
                    return Err(libc::EFAULT);
                }
                Ok(std::slice::from_ref(v))
            }
            Bufs::Vec(iov, cnt) => iov_list(*iov, *cnt),
            Bufs::Msg(m) => {
                if m.is_null() {
                    return Err(libc::EFAULT);
                }
                // SAFETY: the caller's msghdr.
                let m = unsafe { &**m };
                if !m.msg_control.is_null() && m.msg_controllen > 0 {
                    return Err(libc::EOPNOTSUPP);
                }
                iov_list(m.msg_iov, m.msg_iovlen as c_int)
            }
        }
    }
}

/// How far a data call has come: the segment, the bytes done in it, the bytes done before
/// it, and the current segment's transfer sizes.
#[derive(Clone, Copy, Default)]
pub(super) struct Progress {
    pub(super) seg: usize,
    pub(super) off: usize,
    pub(super) total: usize,
    pub(super) chunks: Chunks,
}

/// A data call's arguments and progress.
#[derive(Clone, Copy)]
pub(super) struct Io {
    pub(super) held: Held,
    pub(super) bufs: Bufs,
    pub(super) flags: c_int,
    /// `rrecvfrom`'s source address out-arguments (null: not asked).
    pub(super) src: *mut sockaddr,
    pub(super) srclen: *mut socklen_t,
    /// `riowrite`'s offset in the peer's mapped space.
    pub(super) offset: libc::off_t,
    pub(super) p: Progress,
}

impl Io {
    pub(super) fn new(socket: c_int, bufs: Bufs, flags: c_int) -> Io {
        Io {
            held: Held::new(socket),
            bufs,
            flags,
            src: ptr::null_mut(),
            srclen: ptr::null_mut(),
            offset: 0,
            p: Progress::default(),
        }
    }
}

pub(super) fn iov_list<'a>(iov: *const iovec, cnt: c_int) -> Result<&'a [iovec], i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's array of `cnt` iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

/// A receive call's step. One buffer is [`recv_into`] as is; segments are filled in turn,
/// the later ones only with what is already there.
pub(super) fn recv_step(io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
    let mut held = io.held;
    let r = held.step(|h| recv_on(h, io, woke));
    io.held = held;
    r
}

pub(super) fn recv_on(h: &Handle, io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
    after_sleep(h, woke);
    let n = match io.bufs {
        Bufs::One(v) => {
            io.bufs.segs()?;
            recv_into(h, v.iov_base as *mut u8, v.iov_len, io.flags, &mut io.p.off)?;
            io.p.off
        }
        _ => readv(h, io.bufs.segs()?, io.flags, &mut io.p)?,
    };
    if let Bufs::Msg(m) = io.bufs {
        // SAFETY: the caller's msghdr (checked by `segs`).
        unsafe { (*m).msg_flags = 0 };
    }
    if !io.src.is_null() && !io.srclen.is_null() {
        // On a stream socket the source is the peer (as recvfrom(2) on TCP leaves it); a
        // socket with no peer leaves them.
        let _ = peer_name(h, io.src, io.srclen);
    }
    Ok(n as ssize_t)
}

pub(super) fn readv(h: &Handle, iov: &[iovec], flags: c_int, p: &mut Progress) -> Result<usize, Fail> {
    while let Some(v) = iov.get(p.seg) {
        if v.iov_len == 0 {
            p.seg += 1;
            continue;
        }
        let f = if p.seg > 0 && p.total > 0 { flags | libc::MSG_DONTWAIT } else { flags };
        match recv_into(h, v.iov_base as *mut u8, v.iov_len, f, &mut p.off) {
            Ok(()) => {
                p.total += p.off;
                let full = p.off == v.iov_len;
                p.seg += 1;
                p.off = 0;
                if !full {
                    break;
                }
            }
            Err(Fail::Errno(_)) if p.total > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(p.total)
}

/// A send call's step: one buffer is [`send_from`] as is; segments are sent in turn.
pub(super) fn send_step(io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
    let mut held = io.held;
    let r = held.step(|h| send_on(h, io, woke));
    io.held = held;
    r
}

pub(super) fn send_on(h: &Handle, io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
    after_sleep(h, woke);
    let n = match io.bufs {
        Bufs::One(v) => {
            io.bufs.segs()?;
            send_from(h, v.iov_base as *const u8, v.iov_len, io.flags, &mut io.p.off, &mut io.p.chunks)?
        }
        _ => writev(h, io.bufs.segs()?, io.flags, &mut io.p)?,
    };
    Ok(n as ssize_t)
}

pub(super) fn writev(h: &Handle, iov: &[iovec], flags: c_int, p: &mut Progress) -> Result<usize, Fail> {
    while let Some(v) = iov.get(p.seg) {
        if v.iov_len == 0 {
            p.seg += 1;
            continue;
        }
        match send_from(h, v.iov_base as *const u8, v.iov_len, flags, &mut p.off, &mut p.chunks) {
            Ok(n) => {
                p.total += n;
                p.seg += 1;
                p.off = 0;
                p.chunks = Chunks::default();
                if n < v.iov_len {
                    break;
                }
            }
            Err(Fail::Errno(_)) if p.total > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(p.total)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> ssize_t {
    blocking("rrecv", &mut Io::new(socket, Bufs::one(buf, len), flags), recv_step, -1)
}

/// On a stream socket the source is the peer (as recvfrom(2) on TCP leaves it).
///
/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src: *mut sockaddr,
    srclen: *mut socklen_t,
) -> ssize_t {
    blocking("rrecvfrom", &mut Io { src, srclen, ..Io::new(socket, Bufs::one(buf, len), flags) }, recv_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rread(socket: c_int, buf: *mut c_void, count: usize) -> ssize_t {
    blocking("rread", &mut Io::new(socket, Bufs::one(buf, count), 0), recv_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    blocking("rreadv", &mut Io::new(socket, Bufs::Vec(iov, iovcnt), 0), recv_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    blocking("rrecvmsg", &mut Io::new(socket, Bufs::Msg(msg), flags), recv_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> ssize_t {
    blocking("rsend", &mut Io::new(socket, Bufs::one(buf, len), flags), send_step, -1)
}

/// On a connected stream socket the destination is ignored (sendto(2) on TCP); EISCONN
/// is not raised, as librdmacm.
///
/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    _dst: *const sockaddr,
    _dstlen: socklen_t,
) -> ssize_t {
    blocking("rsendto", &mut Io::new(socket, Bufs::one(buf, len), flags), send_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> ssize_t {
    blocking("rwrite", &mut Io::new(socket, Bufs::one(buf, count), 0), send_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    blocking("rwritev", &mut Io::new(socket, Bufs::Vec(iov, iovcnt), 0), send_step, -1)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    blocking("rsendmsg", &mut Io::new(socket, Bufs::Msg(msg as *mut msghdr), flags), send_step, -1)
}

// ---- poll and select ----------------------------------------------------------------------
