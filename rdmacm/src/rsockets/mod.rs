//! rsockets: the socket calls of `<rdma/rsocket.h>` (`rsocket`, `rconnect`, `rsend`, `rpoll`,
//! `riomap`, …) over an RC QP, speaking rdma-core's rsockets protocol on the wire so that a
//! urxe rsocket talks to one of Debian's librdmacm as well as to another urxe process.
//!
//! The protocol (as rdma-core's librdmacm defines it):
//! - The connection is rdma_cm over the TCP port space; REQ and REP carry a 40-byte
//!   `rs_conn_data`: version 1, flags (IOMAP; NET when the host is big-endian), the receive
//!   queue depth as send credits, the scaled size of the target iomap, and two SGEs (address,
//!   rkey, length; big-endian): the peer's *target SGL* (where this side writes updates of its
//!   receive-buffer grants) and the first half of its receive buffer.
//! - Data goes by RDMA WRITE WITH IMMEDIATE into the granted half of the peer's receive buffer;
//!   the immediate is `op << 29 | value` (op 0 data with its length, 4 SGL with a new credit
//!   sequence, 6 IOMAP_SGL with an index, 7 control: 0 disconnect, 1 keepalive, 2 shutdown).
//!   Each consumes one receive WR (posted with no SGE), which the receiver reposts.
//! - As the receiver drains its buffer it grants the next half by an RDMA WRITE of an SGE into
//!   the sender's target SGL (2 entries, used in turn) with immediate SGL(credits); when no
//!   half is free it sends the credits alone (a zero-length WRITE WITH IMMEDIATE).
//! - `riomap` registers a buffer and sends `{offset, sge}` into the peer's target iomap;
//!   `riowrite` then RDMA WRITEs (no immediate) straight into the mapped buffer.
//!
//! Stream sockets only: `rsocket(…, SOCK_DGRAM, …)` (rsockets over UD with its UDP helper
//! service) fails with EOPNOTSUPP, as does AF_IB. rdma-core's datagram rsockets make an address
//! handle to the socket's own QP from the port's LID, without a GRH (`ds_add_qp_dest`), and do
//! not run on RoCE: Debian's `udpong` fails in `rconnect` on kernel rxe, so there is no RoCE
//! peer to speak that protocol with. Keepalive is accepted and reported by `rgetsockopt` but
//! sends no probes (the RC transport's retries detect a dead peer).
//!
//! An rsocket's number is the fd of its own rdma_cm event channel (as in librdmacm), so it is
//! a real, unique fd number that select/poll sets can hold. Each rsocket is a
//! `Mutex<Stream>` in one table; blocking calls wait in `poll(2)` on the socket's completion
//! channel and event channel with the lock released, so `rsend` and `rrecv` on one socket
//! can wait in two threads at once, and a waiting thread can be cancelled (see [`blocking`]).

pub mod dp;

use crate::abi::*;
use crate::api::*;
use crate::cm_export;
use crate::verbs::{
    ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_qp_init_attr,
};
use dp::ibv_comp_channel;
use dp::*;
use libc::{c_int, c_void, iovec, msghdr, nfds_t, pollfd, sockaddr, socklen_t, ssize_t};
use std::collections::{HashMap, VecDeque};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use urxe::transport::sys::cancellable_poll;

const RS_OLAP_START_SIZE: u32 = 2048;
const RS_MAX_TRANSFER: u32 = 65536;
const RS_SNDLOWAT: u32 = 2048;
const RS_QP_MIN_SIZE: u16 = 16;
const RS_QP_MAX_SIZE: u32 = 0xFFFE;
const RS_QP_CTRL_SIZE: u32 = 4;
const RS_SGL_SIZE: usize = 2;
const RS_CONN_FLAG_NET: u8 = 1;
const RS_CONN_FLAG_IOMAP: u8 = 2;
const CONN_DATA_LEN: usize = 40;
const SGE_LEN: usize = 16;
/// `sizeof(struct rs_iomap)`: a u64 offset and an `rs_sge`.
const IOMAP_LEN: usize = 24;
const RECV_FLAG: u64 = 1 << 63;

const DEF_INLINE: u16 = 64;
const DEF_SQSIZE: u16 = 384;
const DEF_RQSIZE: u16 = 384;
const DEF_MEM: u32 = 1 << 17;
const DEF_WMEM: u32 = 1 << 17;
/// How long a blocking call spins on the CQ before it sleeps (librdmacm's polling_time).
const POLL_SPIN: Duration = Duration::from_micros(10);
/// The longest single sleep of a blocking call (it re-checks the socket after each).
const WAKE_INTERVAL_MS: c_int = 500;
/// How long closing a connected socket waits for its last sends (a vanished peer ends it
/// sooner, by the QP's retry errors).
const CLOSE_DRAIN: Duration = Duration::from_secs(2);

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;
pub const RDMA_ROUTE: c_int = 4;

mod op {
    pub const DATA: u32 = 0;
    pub const WRITE: u32 = 2;
    pub const SGL: u32 = 4;
    pub const IOMAP_SGL: u32 = 6;
    pub const CTRL: u32 = 7;
}
mod ctrl {
    pub const DISCONNECT: u32 = 0;
    pub const SHUTDOWN: u32 = 2;
}

fn msg_set(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}
fn msg_op(m: u32) -> u32 {
    m >> 29
}
fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// The scaled 8-bit encoding of the iomap size in the connection data.
fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}
fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

/// Socket states as librdmacm orders them: passive, opening, connected, closed.
mod st {
    pub const INIT: u32 = 0;
    pub const BOUND: u32 = 0x0001;
    pub const LISTENING: u32 = 0x0002;
    pub const OPENING: u32 = 0x0004;
    pub const CONNECTING: u32 = OPENING | 0x0040;
    pub const ACCEPTING: u32 = OPENING | 0x0080;
    pub const CONNECTED: u32 = 0x0100;
    pub const WRITABLE: u32 = 0x0200;
    pub const READABLE: u32 = 0x0400;
    pub const CONNECT_RDWR: u32 = CONNECTED | READABLE | WRITABLE;
    pub const CONNECT_ERROR: u32 = 0x0800;
    pub const DISCONNECTED: u32 = 0x1000;
    pub const ERROR: u32 = 0x2000;
}

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct RsSge {
    addr: u64,
    key: u32,
    length: u32,
}

/// A buffer this side mapped with `riomap(PROT_WRITE)`: its slot in the peer's target iomap.
struct IoMap {
    mr: *mut ibv_mr,
    offset: u64,
    sent: bool,
}

/// Memory the peer writes into (receive buffer, target SGL/iomap) or the QP reads from (send
/// buffer): allocated here, registered, freed after deregistration. Accessed through raw
/// pointers only: the remote side writes into it at any time.
struct Region {
    ptr: *mut u8,
    len: usize,
    mr: *mut ibv_mr,
}

impl Region {
    fn new(pd: *mut c_void, len: usize, access: c_int) -> Result<Region, i32> {
        let layout = std::alloc::Layout::from_size_align(len.max(8), 64).map_err(|_| libc::ENOMEM)?;
        // SAFETY: a non-zero-sized layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(libc::ENOMEM);
        }
        // SAFETY: our allocation of `len` bytes, registered with the socket's PD.
        let mr = unsafe { ibv_reg_mr(pd, ptr as *mut c_void, len, access) };
        if mr.is_null() {
            let e = crate::export_errno();
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
            return Err(e);
        }
        Ok(Region { ptr, len, mr })
    }
    fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the MR is ours and its QP is gone or never touches it again; then the memory
        // is freed with the layout it was allocated with.
        unsafe {
            ibv_dereg_mr(self.mr);
            std::alloc::dealloc(self.ptr, std::alloc::Layout::from_size_align_unchecked(self.len.max(8), 64));
        }
    }
}

/// One stream rsocket.
struct Stream {
    index: c_int,
    /// This stream's number among all the process has made (from 1): tells a socket from a
    /// later one given the same number (see [`Held`]).
    serial: u64,
    ch: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
    state: u32,
    err: i32,
    fs_flags: c_int,
    fd_flags: c_int,
    // options
    sbuf_size: u32,
    rbuf_size: u32,
    sq_inline: u32,
    sq_size: u32,
    rq_size: u32,
    target_iomap_size: u32,
    reuseaddr: bool,
    nodelay: bool,
    keepalive: bool,
    keepidle: c_int,
    linger_off: bool,
    swap_sgl: bool,
    // verbs
    comp: *mut ibv_comp_channel,
    cq: *mut c_void,
    qp: *mut c_void,
    sbuf: Option<Region>,
    rbuf: Option<Region>,
    target: Option<Region>,
    cq_armed: bool,
    // protocol counters (librdmacm's names)
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    sseq_no: u16,
    sseq_comp: u16,
    rseq_no: u16,
    rseq_comp: u16,
    remote_sge: u32,
    remote_sgl: RsSge,
    remote_iomap: RsSge,
    target_sge: usize,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,
    sbuf_bytes_avail: u32,
    /// The next free byte of the send buffer (librdmacm's `ssgl[0].addr`).
    sbuf_next: u64,
    sqe_avail: u32,
    /// Received data not yet read: (op, bytes left) per WRITE WITH IMMEDIATE.
    rmsg: VecDeque<u32>,
    /// This side's mappings for the peer, by slot (the peer's iomap size).
    iomaps: Vec<Option<IoMap>>,
    /// `riomap` mappings that need no slot (PROT_NONE): kept until `riounmap`/close.
    local_maps: Vec<*mut ibv_mr>,
}

// SAFETY: the raw pointers are handles of this library and urxe's libibverbs, both
// thread-safe; a Stream is only used under its mutex.
unsafe impl Send for Stream {}

type Handle = Arc<Mutex<Stream>>;

fn table() -> MutexGuard<'static, HashMap<c_int, Handle>> {
    static T: OnceLock<Mutex<HashMap<c_int, Handle>>> = OnceLock::new();
    T.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

fn lookup(s: c_int) -> Result<Handle, i32> {
    table().get(&s).cloned().ok_or(libc::EBADF)
}

fn guard(h: &Handle) -> MutexGuard<'_, Stream> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

fn errno_of(ret: c_int) -> Result<(), i32> {
    if ret == 0 {
        Ok(())
    } else {
        Err(crate::export_errno())
    }
}

fn now_nonblock(fd: c_int, on: bool) {
    // SAFETY: fcntl on an fd of ours.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK });
        }
    }
}

impl Stream {
    fn new(ch: *mut rdma_event_channel, id: *mut rdma_cm_id, inherit: Option<&Stream>) -> Stream {
        // SAFETY: a live channel.
        let index = unsafe { (*ch).fd };
        static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let mut s = Stream {
            index,
            serial: SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            ch,
            id,
            state: st::INIT,
            err: 0,
            fs_flags: 0,
            fd_flags: 0,
            sbuf_size: DEF_WMEM,
            rbuf_size: DEF_MEM,
            sq_inline: DEF_INLINE.into(),
            sq_size: DEF_SQSIZE.into(),
            rq_size: DEF_RQSIZE.into(),
            target_iomap_size: 0,
            reuseaddr: false,
            nodelay: false,
            keepalive: false,
            keepidle: 7200,
            linger_off: false,
            swap_sgl: false,
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            sbuf: None,
            rbuf: None,
            target: None,
            cq_armed: false,
            ctrl_seqno: 0,
            ctrl_max_seqno: RS_QP_CTRL_SIZE,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: 0,
            remote_sge: 0,
            remote_sgl: RsSge::default(),
            remote_iomap: RsSge::default(),
            target_sge: 0,
            rbuf_bytes_avail: 0,
            rbuf_free_offset: 0,
            rbuf_offset: 0,
            sbuf_bytes_avail: 0,
            sbuf_next: 0,
            sqe_avail: 0,
            rmsg: VecDeque::new(),
            iomaps: Vec::new(),
            local_maps: Vec::new(),
        };
        if let Some(p) = inherit {
            s.sbuf_size = p.sbuf_size;
            s.rbuf_size = p.rbuf_size;
            s.sq_inline = p.sq_inline;
            s.sq_size = p.sq_size;
            s.rq_size = p.rq_size;
            s.target_iomap_size = p.target_iomap_size;
            s.fs_flags = p.fs_flags;
            s.fd_flags = p.fd_flags;
            s.nodelay = p.nodelay;
            s.keepalive = p.keepalive;
            s.keepidle = p.keepidle;
        }
        s
    }

    fn nonblocking(&self, flags: c_int) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    /// The event channel's fd; -1 once `rclose` destroyed the channel (a call still inside a
    /// step on this stream then finds no events, and its next step fails with EBADF).
    fn ch_fd(&self) -> c_int {
        if self.ch.is_null() {
            return -1;
        }
        // SAFETY: the socket's live channel.
        unsafe { (*self.ch).fd }
    }

    // ---- connection data --------------------------------------------------------------

    fn target_sgl_ptr(&self, i: usize) -> *mut RsSgeRaw {
        (self.target.as_ref().expect("target buffer").ptr as *mut RsSgeRaw).wrapping_add(i)
    }

    fn target_sgl(&self, i: usize) -> RsSge {
        // SAFETY: inside the target buffer; the peer may write it at any time: a volatile read.
        let r = unsafe { ptr::read_volatile(self.target_sgl_ptr(i)) };
        RsSge { addr: r.addr, key: r.key, length: r.length }
    }

    fn set_target_sgl(&self, i: usize, s: RsSge) {
        // SAFETY: inside the target buffer.
        unsafe { ptr::write_volatile(self.target_sgl_ptr(i), RsSgeRaw { addr: s.addr, key: s.key, length: s.length }) };
    }

    fn target_iomap(&self, i: usize) -> (u64, RsSge) {
        let base =
            self.target.as_ref().expect("target buffer").ptr.wrapping_add(SGE_LEN * RS_SGL_SIZE) as *const RsIomapRaw;
        // SAFETY: entry i < target_iomap_size of the target buffer; written by the peer.
        let r = unsafe { ptr::read_volatile(base.wrapping_add(i)) };
        (r.offset, RsSge { addr: r.sge.addr, key: r.sge.key, length: r.sge.length })
    }

    fn format_conn_data(&self) -> [u8; CONN_DATA_LEN] {
        let mut c = [0u8; CONN_DATA_LEN];
        c[0] = 1;
        c[1] = RS_CONN_FLAG_IOMAP | if cfg!(target_endian = "big") { RS_CONN_FLAG_NET } else { 0 };
        c[2..4].copy_from_slice(&(self.rq_size as u16).to_be_bytes());
        c[7] = value_to_scale(self.target_iomap_size, 8) as u8;
        let t = self.target.as_ref().expect("target buffer");
        c[8..16].copy_from_slice(&(t.ptr as u64).to_be_bytes());
        c[16..20].copy_from_slice(&t.rkey().to_be_bytes());
        c[20..24].copy_from_slice(&(RS_SGL_SIZE as u32).to_be_bytes());
        let r = self.rbuf.as_ref().expect("receive buffer");
        c[24..32].copy_from_slice(&(r.ptr as u64).to_be_bytes());
        c[32..36].copy_from_slice(&r.rkey().to_be_bytes());
        c[36..40].copy_from_slice(&(self.rbuf_size >> 1).to_be_bytes());
        c
    }

    fn save_conn_data(&mut self, c: &[u8]) -> Result<(), i32> {
        if c.len() < CONN_DATA_LEN || c[0] != 1 {
            return Err(libc::EOPNOTSUPP);
        }
        let be64 = |o: usize| u64::from_be_bytes(c[o..o + 8].try_into().expect("8 bytes"));
        let be32 = |o: usize| u32::from_be_bytes(c[o..o + 4].try_into().expect("4 bytes"));
        self.remote_sgl = RsSge { addr: be64(8), key: be32(16), length: be32(20) };
        if self.remote_sgl.length == 0 {
            return Err(libc::EPROTO);
        }
        self.remote_sge = 1;
        let net = c[1] & RS_CONN_FLAG_NET != 0;
        self.swap_sgl = net != cfg!(target_endian = "big");
        if c[1] & RS_CONN_FLAG_IOMAP != 0 {
            self.remote_iomap = RsSge {
                addr: self.remote_sgl.addr + (SGE_LEN as u64) * u64::from(self.remote_sgl.length),
                length: scale_to_value(c[7].into(), 8),
                key: self.remote_sgl.key,
            };
        }
        self.iomaps = (0..self.remote_iomap.length).map(|_| None).collect();
        self.set_target_sgl(0, RsSge { addr: be64(24), key: be32(32), length: be32(36) });
        self.sseq_comp = u16::from_be_bytes([c[2], c[3]]);
        Ok(())
    }

    // ---- endpoint ---------------------------------------------------------------------

    /// CQ, QP, registered buffers and the receive WRs (librdmacm's rs_create_ep).
    fn create_ep(&mut self) -> Result<(), i32> {
        self.sq_size = self.sq_size.clamp(RS_QP_MIN_SIZE.into(), RS_QP_MAX_SIZE);
        self.rq_size = self.rq_size.clamp(RS_QP_MIN_SIZE.into(), RS_QP_MAX_SIZE);
        // SAFETY: our live ID; its verbs context is urxe's device once an address is bound.
        let id = unsafe { &mut *self.id };
        if id.verbs.is_null() {
            return Err(libc::ENODEV);
        }
        // SAFETY: a live context.
        let comp = unsafe { ibv_create_comp_channel(id.verbs) } as *mut ibv_comp_channel;
        if comp.is_null() {
            return Err(crate::export_errno());
        }
        self.comp = comp;
        // SAFETY: our completion channel's fd.
        now_nonblock(unsafe { (*comp).fd }, true);
        let cqe = (self.sq_size + self.rq_size) as c_int;
        // SAFETY: a live context and channel.
        let cq = unsafe { ibv_create_cq(id.verbs, cqe, self.id as *mut c_void, comp as *mut _, 0) };
        if cq.is_null() {
            return Err(crate::export_errno());
        }
        self.cq = cq;
        id.recv_cq_channel = comp as *mut _;
        id.send_cq_channel = comp as *mut _;
        id.recv_cq = cq;
        id.send_cq = cq;
        let mut attr = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: ptr::null_mut(),
            cap: crate::verbs::ibv_qp_cap {
                max_send_wr: self.sq_size,
                max_recv_wr: self.rq_size,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: self.sq_inline,
            },
            qp_type: crate::verbs::qp_type::RC,
            sq_sig_all: 1,
        };
        // SAFETY: our ID and attributes.
        errno_of(unsafe { rdma_create_qp(self.id, ptr::null_mut(), &mut attr) })?;
        self.qp = id.qp;
        self.sq_inline = attr.cap.max_inline_data;
        let pd = id.pd;
        let mut sbuf_total = self.sbuf_size as usize;
        if (self.sq_inline as usize) < SGE_LEN {
            sbuf_total += SGE_LEN * RS_QP_CTRL_SIZE as usize;
        }
        self.sbuf = Some(Region::new(pd, sbuf_total, IBV_ACCESS_LOCAL_WRITE)?);
        let tlen = SGE_LEN * RS_SGL_SIZE + IOMAP_LEN * self.target_iomap_size as usize;
        self.target = Some(Region::new(pd, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)?);
        self.rbuf = Some(Region::new(pd, self.rbuf_size as usize, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)?);
        self.sbuf_next = self.sbuf.as_ref().expect("sbuf").ptr as u64;
        self.sbuf_bytes_avail = self.sbuf_size;
        self.rbuf_free_offset = self.rbuf_size >> 1;
        self.rbuf_bytes_avail = self.rbuf_size >> 1;
        self.sqe_avail = self.sq_size - self.ctrl_max_seqno;
        self.rseq_comp = (self.rq_size >> 1) as u16;
        // Armed from the start, as librdmacm, so the first completion wakes a poller.
        // SAFETY: our CQ.
        unsafe { req_notify_cq(cq) };
        for _ in 0..self.rq_size {
            self.post_recv()?;
        }
        Ok(())
    }

    fn post_recv(&mut self) -> Result<(), i32> {
        if self.qp.is_null() {
            return Err(libc::EBADF);
        }
        let mut wr = ibv_recv_wr { wr_id: RECV_FLAG, next: ptr::null_mut(), sg_list: ptr::null_mut(), num_sge: 0 };
        // SAFETY: our QP; no SGE.
        match unsafe { post_recv(self.qp, &mut wr) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// Frees the endpoint (QP first, then the memory it could touch, then the CQ).
    fn free_ep(&mut self) {
        if !self.qp.is_null() {
            // SAFETY: our ID's QP.
            unsafe { rdma_destroy_qp(self.id) };
            self.qp = ptr::null_mut();
        }
        for m in self.iomaps.iter_mut().filter_map(Option::take) {
            // SAFETY: our MR.
            unsafe { ibv_dereg_mr(m.mr) };
        }
        for mr in self.local_maps.drain(..) {
            // SAFETY: our MR.
            unsafe { ibv_dereg_mr(mr) };
        }
        self.sbuf = None;
        self.rbuf = None;
        self.target = None;
        if !self.cq.is_null() {
            // SAFETY: our CQ; every event was acknowledged when taken.
            unsafe { ibv_destroy_cq(self.cq) };
            self.cq = ptr::null_mut();
        }
        if !self.comp.is_null() {
            // SAFETY: our channel, its CQ gone.
            unsafe { ibv_destroy_comp_channel(self.comp as *mut _) };
            self.comp = ptr::null_mut();
        }
        if !self.id.is_null() {
            // SAFETY: our ID.
            let id = unsafe { &mut *self.id };
            id.recv_cq = ptr::null_mut();
            id.send_cq = ptr::null_mut();
            id.recv_cq_channel = ptr::null_mut();
            id.send_cq_channel = ptr::null_mut();
        }
    }

    // ---- posting ----------------------------------------------------------------------

    fn post_write(
        &mut self,
        sgl: &mut [ibv_sge],
        wr_id: u32,
        imm: Option<u32>,
        inline: bool,
        addr: u64,
        rkey: u32,
    ) -> Result<(), i32> {
        if self.qp.is_null() {
            return Err(libc::EBADF);
        }
        let mut wr = ibv_send_wr {
            wr_id: wr_id.into(),
            sg_list: if sgl.is_empty() { ptr::null_mut() } else { sgl.as_mut_ptr() },
            num_sge: sgl.len() as c_int,
            opcode: if imm.is_some() { IBV_WR_RDMA_WRITE_WITH_IMM } else { IBV_WR_RDMA_WRITE },
            send_flags: if inline { IBV_SEND_INLINE } else { 0 },
            imm_data: imm.unwrap_or(0).to_be(),
            remote_addr: addr,
            rkey,
            ..Default::default()
        };
        // SAFETY: our QP; the SGEs point at our send buffer (lkey) or inline data.
        match unsafe { post_send(self.qp, &mut wr) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// A message with no data: a zero-length WRITE WITH IMMEDIATE.
    fn post_msg(&mut self, msg: u32) -> Result<(), i32> {
        self.post_write(&mut [], msg, Some(msg), false, 0, 0)
    }

    fn sbuf_left(&self) -> u32 {
        let base = self.sbuf.as_ref().expect("sbuf").ptr as u64;
        (base + u64::from(self.sbuf_size) - self.sbuf_next) as u32
    }

    /// Copies `len` bytes from `src` into the send buffer ring at its next free byte and
    /// returns the 1 or 2 SGEs that cover them.
    fn stage(&mut self, src: *const u8, len: u32) -> ([ibv_sge; 2], usize) {
        let (base, lkey) = {
            let s = self.sbuf.as_ref().expect("sbuf");
            (s.ptr as u64, s.lkey())
        };
        let left = self.sbuf_left();
        let mut sg = [ibv_sge::default(); 2];
        // SAFETY: `src` has `len` readable bytes (the caller's); the send buffer ring has
        // `sbuf_size` bytes from `base`, of which `len` ≤ sbuf_bytes_avail are free.
        unsafe {
            if len <= left {
                ptr::copy_nonoverlapping(src, self.sbuf_next as *mut u8, len as usize);
                sg[0] = ibv_sge { addr: self.sbuf_next, length: len, lkey };
                self.sbuf_next = if len < left { self.sbuf_next + u64::from(len) } else { base };
                (sg, 1)
            } else {
                ptr::copy_nonoverlapping(src, self.sbuf_next as *mut u8, left as usize);
                ptr::copy_nonoverlapping(src.add(left as usize), base as *mut u8, (len - left) as usize);
                sg[0] = ibv_sge { addr: self.sbuf_next, length: left, lkey };
                sg[1] = ibv_sge { addr: base, length: len - left, lkey };
                self.sbuf_next = base + u64::from(len - left);
                (sg, 2)
            }
        }
    }

    /// Sends `len` bytes from `src` as data into the peer's granted buffer.
    fn write_data(&mut self, src: *const u8, len: u32) -> Result<(), i32> {
        let mut t = self.target_sgl(self.target_sge);
        let (addr, rkey) = (t.addr, t.key);
        t.addr += u64::from(len);
        t.length -= len;
        self.set_target_sgl(self.target_sge, t);
        if t.length == 0 {
            self.target_sge = (self.target_sge + 1) % RS_SGL_SIZE;
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let msg = msg_set(op::DATA, len);
        self.post_payload(src, len, msg, Some(msg), addr, rkey)
    }

    /// RDMA-WRITEs `len` bytes from `src` to the peer's `addr`: inline when they fit, else
    /// staged in the send buffer ring.
    fn post_payload(
        &mut self,
        src: *const u8,
        len: u32,
        wr_id: u32,
        imm: Option<u32>,
        addr: u64,
        rkey: u32,
    ) -> Result<(), i32> {
        if len <= self.sq_inline {
            let mut sg = [ibv_sge { addr: src as u64, length: len, lkey: 0 }];
            self.post_write(&mut sg, wr_id, imm, true, addr, rkey)
        } else {
            let (mut sg, n) = self.stage(src, len);
            self.post_write(&mut sg[..n], wr_id, imm, false, addr, rkey)
        }
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= RS_SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target.is_some()
            && self.target_sgl(self.target_sge).length != 0
    }

    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= self.rbuf_size >> 1 || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.state & st::CONNECTED != 0
    }

    fn send_credits(&mut self) {
        self.ctrl_seqno += 1;
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size >> 1) as u16);
        let credits = u32::from(self.rseq_no.wrapping_add(self.rq_size as u16));
        let msg = msg_set(op::SGL, credits);
        let r = if self.rbuf_bytes_avail >= self.rbuf_size >> 1 {
            let (rptr, rkey) = {
                let r = self.rbuf.as_ref().expect("rbuf");
                (r.ptr as u64, r.rkey())
            };
            let sge = RsSge { addr: rptr + u64::from(self.rbuf_free_offset), key: rkey, length: self.rbuf_size >> 1 };
            let raw = if self.swap_sgl {
                RsSgeRaw { addr: sge.addr.swap_bytes(), key: sge.key.swap_bytes(), length: sge.length.swap_bytes() }
            } else {
                RsSgeRaw { addr: sge.addr, key: sge.key, length: sge.length }
            };
            let dst = self.remote_sgl.addr + u64::from(self.remote_sge) * SGE_LEN as u64;
            let r = if self.sq_inline as usize >= SGE_LEN {
                let mut sg = [ibv_sge { addr: &raw as *const RsSgeRaw as u64, length: SGE_LEN as u32, lkey: 0 }];
                self.post_write(&mut sg, msg, Some(msg), true, dst, self.remote_sgl.key)
            } else {
                // A control slot past the send buffer's data ring.
                let s = self.sbuf.as_ref().expect("sbuf");
                let slot = s.ptr as u64
                    + u64::from(self.sbuf_size)
                    + SGE_LEN as u64 * u64::from(self.ctrl_seqno & (RS_QP_CTRL_SIZE - 1));
                // SAFETY: the slot is inside the send buffer (sized for RS_QP_CTRL_SIZE slots).
                unsafe { ptr::write_unaligned(slot as *mut RsSgeRaw, raw) };
                let mut sg = [ibv_sge { addr: slot, length: SGE_LEN as u32, lkey: s.lkey() }];
                self.post_write(&mut sg, msg, Some(msg), false, dst, self.remote_sgl.key)
            };
            self.rbuf_bytes_avail -= self.rbuf_size >> 1;
            self.rbuf_free_offset += self.rbuf_size >> 1;
            if self.rbuf_free_offset >= self.rbuf_size {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge += 1;
            if self.remote_sge == self.remote_sgl.length {
                self.remote_sge = 0;
            }
            r
        } else {
            self.post_msg(msg)
        };
        if let Err(e) = r {
            self.fail(e);
        }
    }

    fn update_credits(&mut self) {
        if self.give_credits() {
            self.send_credits();
        }
    }

    fn fail(&mut self, e: i32) {
        if self.state & st::CONNECTED != 0 {
            self.state = st::ERROR;
            self.err = e;
        }
    }

    // ---- completions ------------------------------------------------------------------

    /// Takes every completion (librdmacm's rs_poll_cq) and reposts the receives consumed.
    fn poll_cq(&mut self) {
        if self.cq.is_null() {
            return;
        }
        let mut wc = [ibv_wc::default(); 16];
        let mut rcnt = 0;
        loop {
            // SAFETY: our CQ, room for 16.
            let n = unsafe { dp::poll_cq(self.cq, wc.len() as c_int, wc.as_mut_ptr()) };
            if n <= 0 {
                break;
            }
            for w in &wc[..n as usize] {
                if w.wr_id & RECV_FLAG != 0 {
                    if w.status != IBV_WC_SUCCESS {
                        continue;
                    }
                    rcnt += 1;
                    if w.wc_flags & IBV_WC_WITH_IMM == 0 {
                        continue;
                    }
                    let m = u32::from_be(w.imm_data);
                    match msg_op(m) {
                        op::SGL => self.sseq_comp = msg_data(m) as u16,
                        op::IOMAP_SGL => {}
                        op::CTRL => match msg_data(m) {
                            ctrl::DISCONNECT => self.state = st::DISCONNECTED,
                            ctrl::SHUTDOWN => {
                                if self.state & st::WRITABLE != 0 {
                                    self.state &= !st::READABLE;
                                } else {
                                    self.state = st::DISCONNECTED;
                                }
                            }
                            _ => {}
                        },
                        op::WRITE => {}
                        _ => {
                            // Data: bounded by what the peer may have in flight (the
                            // receive queue), so this queue never outgrows rq_size.
                            if msg_data(m) > 0 {
                                self.rmsg.push_back(msg_data(m));
                            }
                        }
                    }
                } else {
                    let d = w.wr_id as u32;
                    match msg_op(d) {
                        op::SGL => self.ctrl_max_seqno += 1,
                        op::CTRL => {
                            self.ctrl_max_seqno += 1;
                            if msg_data(d) == ctrl::DISCONNECT {
                                self.state = st::DISCONNECTED;
                            }
                        }
                        op::IOMAP_SGL => {
                            self.sqe_avail += 1;
                            self.sbuf_bytes_avail += IOMAP_LEN as u32;
                        }
                        _ => {
                            self.sqe_avail += 1;
                            self.sbuf_bytes_avail += msg_data(d);
                        }
                    }
                    if w.status != IBV_WC_SUCCESS && self.state & st::CONNECTED != 0 {
                        self.state = st::ERROR;
                        self.err = libc::EIO;
                    }
                }
            }
        }
        if self.state & st::CONNECTED != 0 {
            for _ in 0..rcnt {
                if let Err(e) = self.post_recv() {
                    self.state = st::ERROR;
                    self.err = e;
                    break;
                }
            }
        }
    }

    /// The socket's CM events, without blocking: a disconnect from the peer ends the
    /// connection (the rsockets DISCONNECT message usually came first).
    fn poll_cm(&mut self) {
        if self.state & (st::CONNECTED | st::DISCONNECTED | st::ERROR) == 0 {
            return;
        }
        while let Some(ev) = self.take_event() {
            if (ev.event == event::DISCONNECTED || ev.event == event::DEVICE_REMOVAL) && self.state & st::CONNECTED != 0
            {
                self.state = st::DISCONNECTED;
            }
        }
    }

    /// One event of the socket's channel if there is one (copied, then acknowledged).
    fn take_event(&mut self) -> Option<TakenEvent> {
        let fd = self.ch_fd();
        if fd < 0 {
            return None;
        }
        let mut p = pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours.
        if unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
            return None;
        }
        let was = {
            // SAFETY: fcntl on our channel fd.
            let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            now_nonblock(fd, true);
            fl
        };
        let mut ev = ptr::null_mut();
        // SAFETY: our channel.
        let r = unsafe { rdma_get_cm_event(self.ch, &mut ev) };
        // SAFETY: restoring the flags read above.
        unsafe { libc::fcntl(fd, libc::F_SETFL, was) };
        if r != 0 {
            return None;
        }
        // SAFETY: the event just retrieved, acknowledged right after copying it.
        unsafe {
            let e = &*ev;
            let pd = e.param.conn.private_data as *const u8;
            let len = usize::from(e.param.conn.private_data_len);
            let data = if pd.is_null() || len == 0 { Vec::new() } else { std::slice::from_raw_parts(pd, len).to_vec() };
            let t = TakenEvent { event: e.event, status: e.status, id: e.id, data, param: e.param.conn };
            rdma_ack_cm_event(ev);
            Some(t)
        }
    }

    // ---- connection -------------------------------------------------------------------

    /// Advances a connecting or accepting socket with the events that are there (librdmacm's
    /// rs_do_connect for the states after the route): Ok when connected, EINPROGRESS while
    /// waiting, else the connection's error.
    fn progress_connect(&mut self) -> Result<(), i32> {
        match self.state {
            st::CONNECTING | st::ACCEPTING => {}
            st::CONNECT_ERROR | st::DISCONNECTED | st::ERROR => return Err(libc::ENOTCONN),
            s if s & st::CONNECTED != 0 => return Ok(()),
            _ => return Err(libc::EINVAL),
        }
        while let Some(ev) = self.take_event() {
            match ev.event {
                event::ESTABLISHED => {
                    if self.state == st::CONNECTING {
                        if let Err(e) = self.save_conn_data(&ev.data) {
                            self.state = st::CONNECT_ERROR;
                            self.err = e;
                            return Err(e);
                        }
                    }
                    self.state = st::CONNECT_RDWR;
                    return Ok(());
                }
                event::CONNECT_RESPONSE => {}
                e => {
                    let err = match e {
                        event::REJECTED => libc::ECONNREFUSED,
                        event::UNREACHABLE | event::ADDR_ERROR | event::ROUTE_ERROR => {
                            if ev.status == -libc::ETIMEDOUT {
                                libc::ETIMEDOUT
                            } else {
                                libc::EHOSTUNREACH
                            }
                        }
                        event::DISCONNECTED => libc::ECONNRESET,
                        _ => libc::ECONNREFUSED,
                    };
                    self.state = st::CONNECT_ERROR;
                    self.err = err;
                    return Err(err);
                }
            }
        }
        Err(libc::EINPROGRESS)
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RsSgeRaw {
    addr: u64,
    key: u32,
    length: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RsIomapRaw {
    offset: u64,
    sge: RsSgeRaw,
}

const _: () = assert!(std::mem::size_of::<RsIomapRaw>() == IOMAP_LEN && std::mem::size_of::<RsSgeRaw>() == SGE_LEN);

struct TakenEvent {
    event: c_int,
    status: c_int,
    id: *mut rdma_cm_id,
    data: Vec<u8>,
    param: rdma_conn_param,
}

// ---- waiting ------------------------------------------------------------------------------
//
// A blocking call is a loop of non-blocking attempts ("steps") and sleeps between them. Each
// step runs with the thread's cancellation off, under the panic guard ([`blocking`]); it either
// finishes the call or says where to sleep ([`Fail::Block`]), having saved its progress in the
// call's state (`Copy`: nothing to drop). The sleep is a `poll` declared `C-unwind` in
// [`blocking`]'s own frame, which holds nothing to drop there: a thread cancelled while it
// sleeps unwinds through that frame and the exported function to its own cleanup handlers, as
// a librdmacm rsocket's waits in poll(2) and in the completion channel's read are cancellation
// points. Unwound through a step instead, it would meet the panic guard, which aborts.

/// Where a blocking call sleeps until its next step.
#[derive(Clone, Copy)]
enum Sleep {
    /// Readable on one of the socket's fds (a negative one is ignored), for at most
    /// WAKE_INTERVAL_MS: every step re-checks the socket.
    On([c_int; 2]),
    /// The caller's set for `rpoll`/`rselect`: the thread's [`POLL_SET`] (pointer, count) for
    /// `ms` milliseconds.
    Set(*mut pollfd, nfds_t, c_int),
}

/// Why a step did not finish the call: an errno, or it has to sleep first.
enum Fail {
    Errno(i32),
    Block(Sleep),
}

impl From<i32> for Fail {
    fn from(e: i32) -> Fail {
        Fail::Errno(e)
    }
}

/// How the sleep before a step ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Woke {
    /// The call's first step: no sleep yet.
    First,
    /// poll(2) returned (an fd is ready, or the interval ran out).
    Slept,
    /// poll(2) failed with this errno (EINTR: a signal handler ran).
    Failed(i32),
}

/// Runs a blocking call: `step` until it finishes, sleeping where it says between steps. See
/// the section's comment for why the sleep is here. `state` and `failed` are `Copy`, so this
/// frame and the exported function's hold nothing to drop while the thread sleeps.
fn blocking<S: Copy, T: Copy>(name: &str, state: &mut S, step: fn(&mut S, Woke) -> Result<T, Fail>, failed: T) -> T {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let mut woke = Woke::First;
    loop {
        let sleep = {
            let _off = urxe::transport::sys::CancelOff::begin();
            match catch_unwind(AssertUnwindSafe(|| step(state, woke))) {
                Ok(Err(Fail::Block(s))) => s,
                Ok(Ok(v)) => return crate::export::finish(name, Ok(Ok(v)), failed),
                Ok(Err(Fail::Errno(e))) => return crate::export::finish(name, Ok(Err(e)), failed),
                Err(p) => return crate::export::finish(name, Err(p), failed),
            }
        };
        let mut two = [pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 2];
        let (fds, n, ms) = match sleep {
            Sleep::On(fds) => {
                two[0].fd = fds[0];
                two[1].fd = fds[1];
                (two.as_mut_ptr(), 2, WAKE_INTERVAL_MS)
            }
            Sleep::Set(p, n, ms) => (p, n, ms),
        };
        // SAFETY: `n` valid pollfds: ours, or the thread's poll set, which only the next step
        // of this call touches.
        let r = unsafe { cancellable_poll(fds, n, ms) };
        woke = if r < 0 {
            // SAFETY: this thread's errno slot.
            Woke::Failed(unsafe { *libc::__errno_location() })
        } else {
            Woke::Slept
        };
    }
}

/// What a step does first after a sleep on one socket: takes the completion event it may
/// have slept for, so the next sleep arms the CQ again.
fn after_sleep(h: &Handle, woke: Woke) {
    if woke != Woke::First {
        take_cq_event(&mut guard(h));
    }
}

/// Waits until `test` holds on the socket (librdmacm's rs_get_comp): polls the CQ and spins
/// briefly, then arms the CQ and asks to sleep on the completion and event channels (the
/// caller's step returns the [`Fail::Block`]). EWOULDBLOCK for a non-blocking call.
///
/// Every step spins anew, after each wake-up too: the completions of a stream come in runs,
/// and one wake-up usually has the next within microseconds. (Spinning only before the first
/// sleep of a call, as before the steps, halves rstream's blocking 1 MB transfers here: 4.8–5.2
/// against 7.7–8.1 Gb/s, alternating runs.)
fn get_comp(h: &Handle, nonblock: bool, test: fn(&Stream) -> bool) -> Result<(), Fail> {
    let start = Instant::now();
    loop {
        let mut s = guard(h);
        s.update_credits();
        s.poll_cq();
        s.poll_cm();
        if test(&s) {
            s.update_credits();
            return Ok(());
        }
        if s.state & st::ERROR != 0 {
            return Err(Fail::Errno(if s.err != 0 { s.err } else { libc::EIO }));
        }
        if nonblock {
            return Err(Fail::Errno(libc::EWOULDBLOCK));
        }
        if start.elapsed() < POLL_SPIN {
            continue;
        }
        if !s.cq_armed && !s.cq.is_null() {
            // SAFETY: our CQ.
            unsafe { req_notify_cq(s.cq) };
            s.cq_armed = true;
            continue;
        }
        s.update_credits();
        // SAFETY: our live completion channel.
        let comp_fd = if s.comp.is_null() { -1 } else { unsafe { (*s.comp).fd } };
        return Err(Fail::Block(Sleep::On([comp_fd, s.ch_fd()])));
    }
}

/// Consumes a completion event if one is there (the channel is non-blocking) and disarms.
fn take_cq_event(s: &mut Stream) {
    if s.comp.is_null() {
        return;
    }
    let (mut cq, mut ctx) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: our non-blocking completion channel; each event is acknowledged at once.
    if unsafe { ibv_get_cq_event(s.comp, &mut cq, &mut ctx) } == 0 {
        // SAFETY: the CQ the event was for (ours).
        unsafe { ibv_ack_cq_events(cq, 1) };
        s.cq_armed = false;
    }
}

fn have_rdata(s: &Stream) -> bool {
    !s.rmsg.is_empty()
}
fn conn_have_rdata(s: &Stream) -> bool {
    have_rdata(s) || s.state & st::READABLE == 0
}
fn conn_can_send(s: &Stream) -> bool {
    s.can_send() || s.state & st::WRITABLE == 0
}
fn conn_can_send_ctrl(s: &Stream) -> bool {
    s.ctrl_avail() || s.state & st::CONNECTED == 0
}
fn conn_all_sends_done(s: &Stream) -> bool {
    (s.ctrl_max_seqno - s.ctrl_seqno) + s.sqe_avail == s.sq_size || s.state & st::CONNECTED == 0
}

/// Moves an opening socket on by the CM events that came: Ok once connected; for a blocking
/// call still in progress, sleep on the event channel; EINPROGRESS for a non-blocking one.
fn do_connect(h: &Handle, nonblock: bool) -> Result<(), Fail> {
    let mut s = guard(h);
    match s.progress_connect() {
        Err(libc::EINPROGRESS) if !nonblock => Err(Fail::Block(Sleep::On([s.ch_fd(), -1]))),
        r => r.map_err(Fail::Errno),
    }
}

/// Waits for the next event of a socket's channel while it resolves its address and route.
/// Not a cancellation point: the wait is bounded by the resolution's own timeout (2 s), and
/// runs inside `rconnect`'s first step.
fn wait_event(h: &Handle) -> TakenEvent {
    loop {
        let fd = {
            let mut s = guard(h);
            if let Some(e) = s.take_event() {
                return e;
            }
            s.ch_fd()
        };
        let mut p = pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours (cancellation is off: not a cancellation point here).
        unsafe { libc::poll(&mut p, 1, WAKE_INTERVAL_MS) };
    }
}

/// Exports a blocking rsockets call: its state (built from the arguments, `Copy`) and its
/// step, run by [`blocking`]; -1 with errno on failure.
macro_rules! blocking_export {
    ($(#[$m:meta])* fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $r:ty { $state:expr, $step:expr }) => {
        $(#[$m])*
        ///
        /// A cancellation point while it sleeps (see [`blocking`]).
        ///
        /// # Safety
        /// The pointer arguments are what librdmacm's man page says they are.
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name($($a: $t),*) -> $r {
            let mut state = $state;
            blocking(stringify!($name), &mut state, $step, (-1isize) as $r)
        }
    };
}

// ---- entry points -------------------------------------------------------------------------

cm_export! {
    fn rsocket(domain: c_int, ty: c_int, protocol: c_int) -> c_int as int {
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
}

fn sockaddr_arg(addr: *const sockaddr, len: socklen_t) -> Result<*mut sockaddr, i32> {
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

cm_export! {
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int as int {
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
}

cm_export! {
    fn rlisten(socket: c_int, backlog: c_int) -> c_int as int {
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
}

/// Accepts one CONNECT_REQUEST: a new socket with its own channel, endpoint and REP.
fn accept_one(l: &Stream, ev: TakenEvent) -> Result<c_int, i32> {
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

fn copy_addr(src: &libc::sockaddr_storage, addr: *mut sockaddr, addrlen: *mut socklen_t) {
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
struct Held {
    socket: c_int,
    /// The stream's [`Stream::serial`]; 0 before the first step.
    serial: u64,
}

impl Held {
    fn new(socket: c_int) -> Held {
        Held { socket, serial: 0 }
    }

    /// One step on the held socket (EBADF once it is gone).
    fn step<T>(&mut self, f: impl FnOnce(&Handle) -> Result<T, Fail>) -> Result<T, Fail> {
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
struct Accept {
    held: Held,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
}

fn accept_step(a: &mut Accept, _woke: Woke) -> Result<c_int, Fail> {
    let (addr, addrlen) = (a.addr, a.addrlen);
    a.held.step(|h| accept_on(h, addr, addrlen))
}

fn accept_on(h: &Handle, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Result<c_int, Fail> {
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

blocking_export! {
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
        Accept { held: Held::new(socket), addr, addrlen },
        accept_step
    }
}

/// `rconnect`'s arguments, and whether the connection is already asked for.
#[derive(Clone, Copy)]
struct Connect {
    held: Held,
    addr: *const sockaddr,
    addrlen: socklen_t,
    asked: bool,
}

/// The first step resolves the address and route (local, bounded: no SA on RoCE; waited for
/// even on a non-blocking socket, as a TCP connect resolves before it returns EINPROGRESS)
/// and sends the REQ; every step then waits for the REP's outcome.
fn connect_step(c: &mut Connect, _woke: Woke) -> Result<c_int, Fail> {
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

fn request_connection(h: &Handle, addr: *const sockaddr, addrlen: socklen_t) -> Result<(), i32> {
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

blocking_export! {
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
        Connect { held: Held::new(socket), addr, addrlen, asked: false },
        connect_step
    }
}

/// Completes a connection still opening before data calls (EAGAIN while in progress).
fn ensure_connected(h: &Handle, flags: c_int) -> Result<(), Fail> {
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

/// Copies from the receive buffer ring at `rbuf_offset` into `dst`, advancing it.
fn copy_out(s: &mut Stream, dst: *mut u8, len: u32, consume: bool) {
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
fn recv_into(h: &Handle, buf: *mut u8, len: usize, flags: c_int, done: &mut usize) -> Result<(), Fail> {
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
fn send_from(
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
fn wait_send_space(h: &Handle, nonblock: bool) -> Result<(), Fail> {
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
struct Chunks(u32);

impl Default for Chunks {
    fn default() -> Self {
        Chunks(RS_OLAP_START_SIZE)
    }
}

impl Chunks {
    /// The next transfer's size with `left` bytes to go (before the buffer limits).
    fn next(&mut self, left: usize) -> u32 {
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
fn send_iomaps(h: &Handle, flags: c_int) -> Result<(), Fail> {
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
enum Bufs {
    /// One buffer (`rrecv`, `rsend`, `riowrite`, …): base and length.
    One(iovec),
    /// An iovec array (`rreadv`, `rwritev`).
    Vec(*const iovec, c_int),
    /// A msghdr's iovecs (`rrecvmsg`, `rsendmsg`): control data is refused.
    Msg(*mut msghdr),
}

impl Bufs {
    fn one(base: *const c_void, len: usize) -> Bufs {
        Bufs::One(iovec { iov_base: base as *mut c_void, iov_len: len })
    }

    /// The segments, checked as the man pages say (EFAULT, EINVAL, EOPNOTSUPP).
    fn segs(&self) -> Result<&[iovec], i32> {
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
struct Progress {
    seg: usize,
    off: usize,
    total: usize,
    chunks: Chunks,
}

/// A data call's arguments and progress.
#[derive(Clone, Copy)]
struct Io {
    held: Held,
    bufs: Bufs,
    flags: c_int,
    /// `rrecvfrom`'s source address out-arguments (null: not asked).
    src: *mut sockaddr,
    srclen: *mut socklen_t,
    /// `riowrite`'s offset in the peer's mapped space.
    offset: libc::off_t,
    p: Progress,
}

impl Io {
    fn new(socket: c_int, bufs: Bufs, flags: c_int) -> Io {
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

fn iov_list<'a>(iov: *const iovec, cnt: c_int) -> Result<&'a [iovec], i32> {
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
fn recv_step(io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
    let mut held = io.held;
    let r = held.step(|h| recv_on(h, io, woke));
    io.held = held;
    r
}

fn recv_on(h: &Handle, io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
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

fn readv(h: &Handle, iov: &[iovec], flags: c_int, p: &mut Progress) -> Result<usize, Fail> {
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
fn send_step(io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
    let mut held = io.held;
    let r = held.step(|h| send_on(h, io, woke));
    io.held = held;
    r
}

fn send_on(h: &Handle, io: &mut Io, woke: Woke) -> Result<ssize_t, Fail> {
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

fn writev(h: &Handle, iov: &[iovec], flags: c_int, p: &mut Progress) -> Result<usize, Fail> {
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

blocking_export! {
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> ssize_t {
        Io::new(socket, Bufs::one(buf, len), flags),
        recv_step
    }
}

blocking_export! {
    /// On a stream socket the source is the peer (as recvfrom(2) on TCP leaves it).
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src: *mut sockaddr, srclen: *mut socklen_t) -> ssize_t {
        Io { src, srclen, ..Io::new(socket, Bufs::one(buf, len), flags) },
        recv_step
    }
}

blocking_export! {
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> ssize_t {
        Io::new(socket, Bufs::one(buf, count), 0),
        recv_step
    }
}

blocking_export! {
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
        Io::new(socket, Bufs::Vec(iov, iovcnt), 0),
        recv_step
    }
}

blocking_export! {
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
        Io::new(socket, Bufs::Msg(msg), flags),
        recv_step
    }
}

blocking_export! {
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> ssize_t {
        Io::new(socket, Bufs::one(buf, len), flags),
        send_step
    }
}

blocking_export! {
    /// On a connected stream socket the destination is ignored (sendto(2) on TCP); EISCONN
    /// is not raised, as librdmacm.
    fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, _dst: *const sockaddr, _dstlen: socklen_t) -> ssize_t {
        Io::new(socket, Bufs::one(buf, len), flags),
        send_step
    }
}

blocking_export! {
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> ssize_t {
        Io::new(socket, Bufs::one(buf, count), 0),
        send_step
    }
}

blocking_export! {
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
        Io::new(socket, Bufs::Vec(iov, iovcnt), 0),
        send_step
    }
}

blocking_export! {
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
        Io::new(socket, Bufs::Msg(msg as *mut msghdr), flags),
        send_step
    }
}

// ---- poll and select ----------------------------------------------------------------------

/// The socket's readiness now (librdmacm's rs_poll_rs with a non-blocking check), and the fd
/// to sleep on when it has none.
fn poll_one(h: &Handle, events: i16) -> (i16, c_int) {
    {
        let s = guard(h);
        if s.state & st::OPENING != 0 {
            drop(s);
            let _ = do_connect(h, true);
        }
    }
    let mut s = guard(h);
    if s.state & st::CONNECTED != 0 || s.state == st::DISCONNECTED || s.state & st::ERROR != 0 {
        s.update_credits();
        s.poll_cq();
        s.poll_cm();
        s.update_credits();
        let io = |s: &Stream| {
            let r = if events & libc::POLLIN != 0 && conn_have_rdata(s) { libc::POLLIN } else { 0 };
            r | if events & libc::POLLOUT != 0 && s.can_send() { libc::POLLOUT } else { 0 }
        };
        let mut rev = io(&s);
        // A peer that sent its last data and closed: that data is read first (POLLIN without
        // POLLHUP, as a TCP socket with data before its FIN), else programs that treat HUP as
        // the end (rstream) would lose the reply that came with the close.
        if s.state & st::CONNECTED == 0 && !(s.state == st::DISCONNECTED && have_rdata(&s)) {
            rev |= if s.state == st::DISCONNECTED { libc::POLLHUP } else { libc::POLLERR };
        }
        if rev == 0 && !s.cq_armed && !s.cq.is_null() {
            // Armed before sleeping; a completion that raced the arm is seen next round.
            // SAFETY: our CQ.
            unsafe { req_notify_cq(s.cq) };
            s.cq_armed = true;
            s.poll_cq();
            rev |= io(&s);
        }
        // SAFETY: our live completion channel.
        let fd = if s.comp.is_null() { s.ch_fd() } else { unsafe { (*s.comp).fd } };
        return (rev, fd);
    }
    if s.state == st::LISTENING {
        let mut p = pollfd { fd: s.ch_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours.
        unsafe { libc::poll(&mut p, 1, 0) };
        return (if p.revents & libc::POLLIN != 0 { events & libc::POLLIN } else { 0 }, s.ch_fd());
    }
    if s.state == st::CONNECT_ERROR {
        return ((events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR, s.ch_fd());
    }
    (0, s.ch_fd())
}

thread_local! {
    /// The fds a thread's `rpoll`/`rselect` sleeps on: each rsocket's completion (or event)
    /// channel, each other fd as asked. Kept between a call's steps: the sleep fills in the
    /// revents the next step reads.
    static POLL_SET: std::cell::RefCell<Vec<pollfd>> = const { std::cell::RefCell::new(Vec::new()) };
    /// `rselect`'s fd sets as pollfds, rebuilt at each step.
    static SELECT_SET: std::cell::RefCell<Vec<pollfd>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One step of `rpoll` over `fds`: the number ready, or a sleep on the thread's poll set.
/// `start` is the call's start (set by its first step), for the spin and the timeout.
fn poll_step(fds: &mut [pollfd], timeout: c_int, start: &mut Option<Instant>, woke: Woke) -> Result<c_int, Fail> {
    let start = *start.get_or_insert_with(Instant::now);
    let deadline = (timeout >= 0).then(|| start + Duration::from_millis(timeout as u64));
    POLL_SET.with(|set| {
        let mut sleep = set.borrow_mut();
        match woke {
            Woke::First => {}
            Woke::Failed(e) => return Err(Fail::Errno(e)),
            Woke::Slept => {
                for (p, q) in fds.iter().zip(sleep.iter()) {
                    if q.revents != 0 {
                        if let Ok(h) = lookup(p.fd) {
                            take_cq_event(&mut guard(&h));
                        }
                    }
                }
            }
        }
        loop {
            let mut ready = 0;
            sleep.clear();
            for p in fds.iter_mut() {
                p.revents = 0;
                if p.fd < 0 {
                    sleep.push(pollfd { fd: -1, events: 0, revents: 0 });
                    continue;
                }
                match lookup(p.fd) {
                    Ok(h) => {
                        let (rev, fd) = poll_one(&h, p.events);
                        p.revents = rev;
                        sleep.push(pollfd { fd, events: libc::POLLIN, revents: 0 });
                    }
                    Err(_) => {
                        let mut q = pollfd { fd: p.fd, events: p.events, revents: 0 };
                        // SAFETY: one pollfd (zero timeout; cancellation is off).
                        unsafe { libc::poll(&mut q, 1, 0) };
                        p.revents = q.revents;
                        sleep.push(pollfd { fd: p.fd, events: p.events, revents: 0 });
                    }
                }
                if p.revents != 0 {
                    ready += 1;
                }
            }
            if ready > 0 || timeout == 0 {
                return Ok(ready);
            }
            if start.elapsed() < POLL_SPIN {
                continue;
            }
            let ms = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(0);
                    }
                    (left.as_millis() as c_int).clamp(1, WAKE_INTERVAL_MS)
                }
                None => WAKE_INTERVAL_MS,
            };
            return Err(Fail::Block(Sleep::Set(sleep.as_mut_ptr(), sleep.len() as nfds_t, ms)));
        }
    })
}

/// `rpoll`'s arguments and start.
#[derive(Clone, Copy)]
struct Poll {
    fds: *mut pollfd,
    nfds: nfds_t,
    timeout: c_int,
    start: Option<Instant>,
}

fn rpoll_step(p: &mut Poll, woke: Woke) -> Result<c_int, Fail> {
    if p.fds.is_null() && p.nfds > 0 {
        return Err(Fail::Errno(libc::EFAULT));
    }
    let fds = if p.nfds == 0 {
        &mut []
    } else {
        // SAFETY: the caller's array of `nfds` pollfds.
        unsafe { std::slice::from_raw_parts_mut(p.fds, p.nfds as usize) }
    };
    poll_step(fds, p.timeout, &mut p.start, woke)
}

blocking_export! {
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
        Poll { fds, nfds, timeout, start: None },
        rpoll_step
    }
}

/// `rselect`'s arguments and start.
#[derive(Clone, Copy)]
struct Select {
    nfds: c_int,
    sets: [*mut libc::fd_set; 3],
    timeout: *mut libc::timeval,
    start: Option<Instant>,
}

/// `rselect`: the fd sets as pollfds ([`SELECT_SET`]), polled as `rpoll`; the sets are
/// rewritten once it is done.
fn select_step(x: &mut Select, woke: Woke) -> Result<c_int, Fail> {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&x.nfds) {
        return Err(Fail::Errno(libc::EINVAL));
    }
    let [readfds, writefds, exceptfds] = x.sets;
    let ms = if x.timeout.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { &*x.timeout };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            return Err(Fail::Errno(libc::EINVAL));
        }
        (t.tv_sec * 1000 + t.tv_usec / 1000).min(i64::from(c_int::MAX)) as c_int
    };
    SELECT_SET.with(|fds| {
        let mut fds = fds.borrow_mut();
        fds.clear();
        // SAFETY: the caller's fd sets (NULL = not asked).
        let is = |set: *mut libc::fd_set, fd: c_int| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
        for fd in 0..x.nfds {
            let mut ev = 0;
            if is(readfds, fd) {
                ev |= libc::POLLIN;
            }
            if is(writefds, fd) {
                ev |= libc::POLLOUT;
            }
            if is(exceptfds, fd) {
                ev |= libc::POLLPRI;
            }
            if ev != 0 {
                fds.push(pollfd { fd, events: ev, revents: 0 });
            }
        }
        poll_step(&mut fds, ms, &mut x.start, woke)?;
        // SAFETY: the caller's fd sets, rewritten with what is ready.
        unsafe {
            for set in x.sets {
                if !set.is_null() {
                    libc::FD_ZERO(set);
                }
            }
            let mut count = 0;
            for p in fds.iter() {
                if !readfds.is_null()
                    && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                    && p.events & libc::POLLIN != 0
                {
                    libc::FD_SET(p.fd, readfds);
                    count += 1;
                }
                if !writefds.is_null()
                    && p.revents & (libc::POLLOUT | libc::POLLERR) != 0
                    && p.events & libc::POLLOUT != 0
                {
                    libc::FD_SET(p.fd, writefds);
                    count += 1;
                }
                if !exceptfds.is_null() && p.revents & libc::POLLPRI != 0 {
                    libc::FD_SET(p.fd, exceptfds);
                    count += 1;
                }
            }
            Ok(count)
        }
    })
}

blocking_export! {
    fn rselect(nfds: c_int, readfds: *mut libc::fd_set, writefds: *mut libc::fd_set, exceptfds: *mut libc::fd_set, timeout: *mut libc::timeval) -> c_int {
        Select { nfds, sets: [readfds, writefds, exceptfds], timeout, start: None },
        select_step
    }
}

// ---- shutdown and close -------------------------------------------------------------------

fn shutdown(h: &Handle, how: c_int) -> Result<(), i32> {
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
fn drain(h: &Handle, test: fn(&Stream) -> bool) {
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

cm_export! {
    fn rshutdown(socket: c_int, how: c_int) -> c_int as int {
        let h = lookup(socket)?;
        shutdown(&h, how)?;
        Ok(0)
    }
}

cm_export! {
    fn rclose(socket: c_int) -> c_int as int {
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
}

// ---- addresses and options ----------------------------------------------------------------

cm_export! {
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int as int {
        let h = lookup(socket)?;
        peer_name(&h, addr, addrlen)?;
        Ok(0)
    }
}

fn peer_name(h: &Handle, addr: *mut sockaddr, addrlen: *mut socklen_t) -> Result<(), i32> {
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

cm_export! {
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int as int {
        let h = lookup(socket)?;
        if addr.is_null() || addrlen.is_null() {
            return Err(libc::EFAULT);
        }
        let s = guard(&h);
        // SAFETY: our live ID.
        copy_addr(unsafe { &(*s.id).route.addr.src_storage }, addr, addrlen);
        Ok(0)
    }
}

fn int_opt(optval: *const c_void, optlen: socklen_t) -> Result<c_int, i32> {
    if optval.is_null() {
        return Err(libc::EFAULT);
    }
    if (optlen as usize) < std::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's option of at least an int.
    Ok(unsafe { ptr::read_unaligned(optval as *const c_int) })
}

cm_export! {
    fn rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: socklen_t) -> c_int as int {
        let h = lookup(socket)?;
        let mut s = guard(&h);
        match (level, optname) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
                let v = int_opt(optval, optlen)?;
                // SAFETY: our ID; the option is an int.
                let _ = unsafe { rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v as *const c_int as *mut c_void, 4) };
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
                errno_of(unsafe { rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &v as *const u8 as *mut c_void, 1) })?;
            }
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                let v = int_opt(optval, optlen)?;
                // SAFETY: our ID; the option is an int.
                errno_of(unsafe { rdma_set_option(s.id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v as *const c_int as *mut c_void, 4) })?;
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
}

cm_export! {
    fn rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut socklen_t) -> c_int as int {
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
}

cm_export! {
    /// `rfcntl(socket, cmd, ...)`: F_GETFL/F_SETFL (O_NONBLOCK) and F_GETFD/F_SETFD. Defined
    /// with the one argument these commands take: on x86-64 SysV a variadic caller passes it
    /// in the same register.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_int) -> c_int as int {
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
}

// ---- riomap / riowrite --------------------------------------------------------------------

cm_export! {
    /// Maps `buf` for the peer's `riowrite` (PROT_WRITE: sent into the peer's target iomap
    /// before this side's next data) or registers it locally (PROT_NONE). `offset` -1 maps at
    /// the buffer's address.
    fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, _flags: c_int, offset: libc::off_t) -> libc::off_t as int {
        let h = lookup(socket)?;
        let mut s = guard(&h);
        // SAFETY: our live ID.
        let pd = unsafe { (*s.id).pd };
        if pd.is_null() || prot & !libc::PROT_WRITE != 0 || buf.is_null() || len == 0 {
            return Err(libc::EINVAL);
        }
        let write = prot & libc::PROT_WRITE != 0;
        let slot = if write {
            Some(s.iomaps.iter().position(Option::is_none).ok_or(libc::ENOMEM)?)
        } else {
            None
        };
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
}

cm_export! {
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int as int {
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
}

/// `riowrite`'s step: writes `count` bytes straight into the peer's buffer mapped at
/// `offset` (no notification: the peer learns of it from a later message). Stops at the end
/// of the mapped range.
fn iowrite_step(io: &mut Io, woke: Woke) -> Result<usize, Fail> {
    let mut held = io.held;
    let r = held.step(|h| iowrite_on(h, io, woke));
    io.held = held;
    r
}

fn iowrite_on(h: &Handle, io: &mut Io, woke: Woke) -> Result<usize, Fail> {
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

blocking_export! {
    /// Writes `count` bytes straight into the peer's buffer mapped at `offset` (no
    /// notification: the peer learns of it from a later message). Stops at the end of the
    /// mapped range.
    fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: libc::off_t, flags: c_int) -> usize {
        Io { offset, ..Io::new(socket, Bufs::one(buf, count), flags) },
        iowrite_step
    }
}
