//! One stream rsocket ([`Stream`]): its options, verbs objects and protocol counters, and the
//! non-blocking operations on it (connection setup, posting, credits, completions, CM events);
//! the table of sockets by number.

use super::buffers::*;
use super::dp::ibv_comp_channel;
use super::dp::*;
use super::proto::*;
use crate::abi::*;
use crate::api::*;
use crate::events::*;
use crate::verbs::{
    ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_qp_init_attr,
};
use libc::{c_int, c_void, pollfd};
use std::collections::{HashMap, VecDeque};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// One stream rsocket.
pub(super) struct Stream {
    pub(super) index: c_int,
    /// This stream's number among all the process has made (from 1): tells a socket from a
    /// later one given the same number (see [`Held`]).
    pub(super) serial: u64,
    pub(super) ch: *mut rdma_event_channel,
    pub(super) id: *mut rdma_cm_id,
    pub(super) state: u32,
    pub(super) err: i32,
    pub(super) fs_flags: c_int,
    pub(super) fd_flags: c_int,
    // options
    pub(super) sbuf_size: u32,
    pub(super) rbuf_size: u32,
    pub(super) sq_inline: u32,
    pub(super) sq_size: u32,
    pub(super) rq_size: u32,
    pub(super) target_iomap_size: u32,
    pub(super) reuseaddr: bool,
    pub(super) nodelay: bool,
    pub(super) keepalive: bool,
    pub(super) keepidle: c_int,
    pub(super) linger_off: bool,
    pub(super) swap_sgl: bool,
    // verbs
    pub(super) comp: *mut ibv_comp_channel,
    pub(super) cq: *mut ibv_cq,
    pub(super) qp: *mut ibv_qp,
    pub(super) sbuf: Option<Region>,
    pub(super) rbuf: Option<Region>,
    pub(super) target: Option<Region>,
    pub(super) cq_armed: bool,
    // protocol counters (librdmacm's names)
    pub(super) ctrl_seqno: u32,
    pub(super) ctrl_max_seqno: u32,
    pub(super) sseq_no: u16,
    pub(super) sseq_comp: u16,
    pub(super) rseq_no: u16,
    pub(super) rseq_comp: u16,
    pub(super) remote_sge: u32,
    pub(super) remote_sgl: RsSge,
    pub(super) remote_iomap: RsSge,
    pub(super) target_sge: usize,
    pub(super) rbuf_bytes_avail: u32,
    pub(super) rbuf_free_offset: u32,
    pub(super) rbuf_offset: u32,
    pub(super) sbuf_bytes_avail: u32,
    /// The next free byte of the send buffer (librdmacm's `ssgl[0].addr`).
    pub(super) sbuf_next: u64,
    pub(super) sqe_avail: u32,
    /// Received data not yet read: (op, bytes left) per WRITE WITH IMMEDIATE.
    pub(super) rmsg: VecDeque<u32>,
    /// This side's mappings for the peer, by slot (the peer's iomap size).
    pub(super) iomaps: Vec<Option<IoMap>>,
    /// `riomap` mappings that need no slot (PROT_NONE): kept until `riounmap`/close.
    pub(super) local_maps: Vec<*mut ibv_mr>,
}

// SAFETY: the raw pointers are handles of this library and urxe's libibverbs, both
// thread-safe; a Stream is only used under its mutex.
unsafe impl Send for Stream {}

pub(super) type Handle = Arc<Mutex<Stream>>;

pub(super) fn table() -> MutexGuard<'static, HashMap<c_int, Handle>> {
    static T: OnceLock<Mutex<HashMap<c_int, Handle>>> = OnceLock::new();
    T.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn lookup(s: c_int) -> Result<Handle, i32> {
    table().get(&s).cloned().ok_or(libc::EBADF)
}

pub(super) fn guard(h: &Handle) -> MutexGuard<'_, Stream> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn errno_of(ret: c_int) -> Result<(), i32> {
    if ret == 0 {
        Ok(())
    } else {
        Err(crate::export_errno())
    }
}

pub(super) fn now_nonblock(fd: c_int, on: bool) {
    // SAFETY: fcntl on an fd of ours.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK });
        }
    }
}

impl Stream {
    pub(super) fn new(ch: *mut rdma_event_channel, id: *mut rdma_cm_id, inherit: Option<&Stream>) -> Stream {
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

    pub(super) fn nonblocking(&self, flags: c_int) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    /// The event channel's fd; -1 once `rclose` destroyed the channel (a call still inside a
    /// step on this stream then finds no events, and its next step fails with EBADF).
    pub(super) fn ch_fd(&self) -> c_int {
        if self.ch.is_null() {
            return -1;
        }
        // SAFETY: the socket's live channel.
        unsafe { (*self.ch).fd }
    }

    // ---- connection data --------------------------------------------------------------

    pub(super) fn target_sgl_ptr(&self, i: usize) -> *mut RsSgeRaw {
        (self.target.as_ref().expect("target buffer").ptr as *mut RsSgeRaw).wrapping_add(i)
    }

    pub(super) fn target_sgl(&self, i: usize) -> RsSge {
        // SAFETY: inside the target buffer; the peer may write it at any time: a volatile read.
        let r = unsafe { ptr::read_volatile(self.target_sgl_ptr(i)) };
        RsSge { addr: r.addr, key: r.key, length: r.length }
    }

    pub(super) fn set_target_sgl(&self, i: usize, s: RsSge) {
        // SAFETY: inside the target buffer.
        unsafe { ptr::write_volatile(self.target_sgl_ptr(i), RsSgeRaw { addr: s.addr, key: s.key, length: s.length }) };
    }

    pub(super) fn target_iomap(&self, i: usize) -> (u64, RsSge) {
        let base =
            self.target.as_ref().expect("target buffer").ptr.wrapping_add(SGE_LEN * RS_SGL_SIZE) as *const RsIomapRaw;
        // SAFETY: entry i < target_iomap_size of the target buffer; written by the peer.
        let r = unsafe { ptr::read_volatile(base.wrapping_add(i)) };
        (r.offset, RsSge { addr: r.sge.addr, key: r.sge.key, length: r.sge.length })
    }

    pub(super) fn format_conn_data(&self) -> [u8; CONN_DATA_LEN] {
        let t = self.target.as_ref().expect("target buffer");
        let r = self.rbuf.as_ref().expect("receive buffer");
        let target_sgl = RsSge { addr: t.ptr as u64, key: t.rkey(), length: RS_SGL_SIZE as u32 };
        let data_buf = RsSge { addr: r.ptr as u64, key: r.rkey(), length: self.rbuf_size >> 1 };
        ConnData::ours(self.rq_size as u16, self.target_iomap_size, target_sgl, data_buf).emit()
    }

    pub(super) fn save_conn_data(&mut self, c: &[u8]) -> Result<(), i32> {
        let d = ConnData::parse(c)?;
        self.remote_sgl = d.target_sgl;
        self.remote_sge = 1;
        self.swap_sgl = d.swapped();
        if let Some(m) = d.remote_iomap() {
            self.remote_iomap = m;
        }
        self.iomaps = (0..self.remote_iomap.length).map(|_| None).collect();
        self.set_target_sgl(0, d.data_buf);
        self.sseq_comp = d.credits;
        Ok(())
    }

    // ---- endpoint ---------------------------------------------------------------------

    /// CQ, QP, registered buffers and the receive WRs (librdmacm's rs_create_ep).
    pub(super) fn create_ep(&mut self) -> Result<(), i32> {
        self.sq_size = self.sq_size.clamp(RS_QP_MIN_SIZE.into(), RS_QP_MAX_SIZE);
        self.rq_size = self.rq_size.clamp(RS_QP_MIN_SIZE.into(), RS_QP_MAX_SIZE);
        // SAFETY: our live ID; its verbs context is urxe's device once an address is bound.
        let id = unsafe { &mut *self.id };
        if id.verbs.is_null() {
            return Err(libc::ENODEV);
        }
        // SAFETY: a live context.
        let comp = unsafe { ibv_create_comp_channel(id.verbs) };
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
            qp_type: crate::verbs::qp_type::RC as u32,
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

    pub(super) fn post_recv(&mut self) -> Result<(), i32> {
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
    pub(super) fn free_ep(&mut self) {
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

    pub(super) fn post_write(
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
            imm: ibv_imm_or_rkey { imm_data: imm.unwrap_or(0).to_be() },
            wr: ibv_send_wr_wr { rdma: ibv_send_wr_rdma { remote_addr: addr, rkey } },
            ..Default::default()
        };
        // SAFETY: our QP; the SGEs point at our send buffer (lkey) or inline data.
        match unsafe { post_send(self.qp, &mut wr) } {
            0 => Ok(()),
            e => Err(e),
        }
    }

    /// A message with no data: a zero-length WRITE WITH IMMEDIATE.
    pub(super) fn post_msg(&mut self, msg: u32) -> Result<(), i32> {
        self.post_write(&mut [], msg, Some(msg), false, 0, 0)
    }

    pub(super) fn sbuf_left(&self) -> u32 {
        let base = self.sbuf.as_ref().expect("sbuf").ptr as u64;
        (base + u64::from(self.sbuf_size) - self.sbuf_next) as u32
    }

    /// Copies `len` bytes from `src` into the send buffer ring at its next free byte and
    /// returns the 1 or 2 SGEs that cover them.
    pub(super) fn stage(&mut self, src: *const u8, len: u32) -> ([ibv_sge; 2], usize) {
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
    pub(super) fn write_data(&mut self, src: *const u8, len: u32) -> Result<(), i32> {
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
    pub(super) fn post_payload(
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

    pub(super) fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    pub(super) fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= RS_SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target.is_some()
            && self.target_sgl(self.target_sge).length != 0
    }

    pub(super) fn give_credits(&self) -> bool {
        credits_due(self.rbuf_bytes_avail, self.rbuf_size, self.rseq_no, self.rseq_comp)
            && self.ctrl_avail()
            && self.state & st::CONNECTED != 0
    }

    pub(super) fn send_credits(&mut self) {
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

    pub(super) fn update_credits(&mut self) {
        if self.give_credits() {
            self.send_credits();
        }
    }

    pub(super) fn fail(&mut self, e: i32) {
        if self.state & st::CONNECTED != 0 {
            self.state = st::ERROR;
            self.err = e;
        }
    }

    // ---- completions ------------------------------------------------------------------

    /// Takes every completion (librdmacm's rs_poll_cq) and reposts the receives consumed.
    pub(super) fn poll_cq(&mut self) {
        if self.cq.is_null() {
            return;
        }
        let mut wc = [ibv_wc::default(); 16];
        let mut rcnt = 0;
        loop {
            // SAFETY: our CQ, room for 16.
            let n = unsafe { super::dp::poll_cq(self.cq, wc.len() as c_int, wc.as_mut_ptr()) };
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
                    // SAFETY: both views of the slot are a plain u32.
                    let m = u32::from_be(unsafe { w.imm.imm_data });
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
    pub(super) fn poll_cm(&mut self) {
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
    pub(super) fn take_event(&mut self) -> Option<TakenEvent> {
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
    pub(super) fn progress_connect(&mut self) -> Result<(), i32> {
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

pub(super) struct TakenEvent {
    pub(super) event: c_int,
    pub(super) status: c_int,
    pub(super) id: *mut rdma_cm_id,
    pub(super) data: Vec<u8>,
    pub(super) param: rdma_conn_param,
}
