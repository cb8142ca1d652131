//! The engine's object commands (PD, MR, MW, AH, CQ, SRQ, XRC domains and SRQs): the
//! rdma_rxe verbs that create, query, change and destroy everything but a QP. A second `impl`
//! block of [`Engine`]; the QP commands, inputs and outputs stay in `mod.rs`.

use super::*;

impl<M: HostMemory> Engine<M> {
    // ---- commands: PD, MR, MW, AH ----------------------------------------------------

    pub fn alloc_pd(&mut self) -> Result<PdId, Error> {
        self.sh.pds.insert(Pd { refs: 0 }, self.sh.cfg.limits.max_pd).ok_or(Error::NoMemory)
    }

    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), Error> {
        let p = self.sh.pds.get(pd).ok_or(Error::NotFound)?;
        if p.refs != 0 {
            return Err(Error::Busy);
        }
        self.sh.pds.remove(pd);
        Ok(())
    }

    pub(super) fn pd_ref(&mut self, pd: PdId, delta: i32) {
        if let Some(p) = self.sh.pds.get_mut(pd) {
            p.refs = p.refs.saturating_add_signed(delta);
        }
    }

    /// Registers `len` bytes at host address `addr`, addressed by SGEs and peers at `iova`
    /// (0 with ZERO_BASED).
    pub fn reg_mr(&mut self, pd: PdId, addr: u64, len: u64, iova: u64, access: AccessFlags) -> Result<MrHandle, Error> {
        if self.sh.faults.is_some() {
            self.verb_fault(super::faults::Site::RegMr, None)?;
        }
        self.sh.pds.get(pd).ok_or(Error::NotFound)?;
        if access.unknown_bits() != 0 || len > self.sh.cfg.limits.max_mr_size || addr.checked_add(len).is_none() {
            return Err(Error::Invalid);
        }
        // No persistence domain: FLUSH to persistence is not offered (EOPNOTSUPP, as the
        // kernel answers for a device without IB_DEVICE_FLUSH_PERSISTENT).
        if access.contains(AccessFlags::FLUSH_PERSISTENT) {
            return Err(Error::NotSupported);
        }
        // Remote write or atomic access requires local write (ibv_reg_mr(3): EINVAL otherwise).
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::Invalid);
        }
        let iova = if access.contains(AccessFlags::ZERO_BASED) { 0 } else { iova };
        if iova.checked_add(len).is_none() {
            return Err(Error::Invalid);
        }
        if self.sh.keys.count() as u32 >= self.sh.cfg.limits.max_mr {
            return Err(Error::NoMemory);
        }
        let mr = Mr { pd, addr, len, iova, access, valid: true, bound_mws: 0 };
        let (id, key) = self.sh.keys.add_mr(mr).ok_or(Error::NoMemory)?;
        self.pd_ref(pd, 1);
        Ok(MrHandle { id, lkey: key, rkey: key })
    }

    /// Whether `pd` exists (`ibv_import_pd` of a PD handle).
    pub fn query_pd(&self, pd: PdId) -> Result<(), Error> {
        self.sh.pds.get(pd).map(|_| ()).ok_or(Error::NotFound)
    }

    /// A registered MR's attributes (`ibv_import_mr` of an MR handle).
    pub fn query_mr(&self, mr: MrId) -> Result<MrInfo, Error> {
        let m = self.sh.keys.mr(mr).ok_or(Error::NotFound)?;
        let key = self.sh.keys.key_of(mr);
        Ok(MrInfo { pd: m.pd, addr: m.addr, len: m.len, iova: m.iova, access: m.access, lkey: key, rkey: key })
    }

    /// The MR `key` names (`ibv_advise_mr` is given lkeys): NotFound when it names nothing
    /// (a stale or made-up key), Invalid when it names a memory window.
    pub fn mr_by_key(&self, key: u32) -> Result<MrId, Error> {
        match self.sh.keys.object_of(key) {
            Some(Ok(mr)) => Ok(mr),
            Some(Err(_)) => Err(Error::Invalid),
            None => Err(Error::NotFound),
        }
    }

    /// Re-registers MR `mr` in place (`ibv_rereg_mr(3)`): any of a new PD, a new translation
    /// (`addr`, `len`, `iova`; the iova is 0 for a ZERO_BASED MR) and new access flags. The
    /// keys stay; every change is checked before any is made, so a refused call leaves the MR
    /// as it was. Busy while memory windows are bound to it (they would outlive the range or
    /// rights they were bound with).
    pub fn rereg_mr(&mut self, mr: MrId, change: &MrChange) -> Result<(), Error> {
        let old = *self.sh.keys.mr(mr).ok_or(Error::NotFound)?;
        if old.bound_mws != 0 {
            return Err(Error::Busy);
        }
        let mut m = old;
        if let Some(pd) = change.pd {
            self.sh.pds.get(pd).ok_or(Error::NotFound)?;
            m.pd = pd;
        }
        if let Some(access) = change.access {
            if access.unknown_bits() != 0 {
                return Err(Error::Invalid);
            }
            if access.contains(AccessFlags::FLUSH_PERSISTENT) {
                return Err(Error::NotSupported);
            }
            m.access = access;
        }
        if m.access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !m.access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::Invalid);
        }
        if let Some((addr, len, iova)) = change.translation {
            if len == 0 || len > self.sh.cfg.limits.max_mr_size || addr.checked_add(len).is_none() {
                return Err(Error::Invalid);
            }
            m.addr = addr;
            m.len = len;
            m.iova = iova;
        }
        if m.access.contains(AccessFlags::ZERO_BASED) {
            m.iova = 0;
        }
        if m.iova.checked_add(m.len).is_none() {
            return Err(Error::Invalid);
        }
        let slot = self.sh.keys.mr_mut(mr).ok_or(Error::NotFound)?;
        *slot = m;
        if m.pd != old.pd {
            self.pd_ref(old.pd, -1);
            self.pd_ref(m.pd, 1);
        }
        Ok(())
    }

    pub fn dereg_mr(&mut self, mr: MrId) -> Result<(), Error> {
        let m = *self.sh.keys.mr(mr).ok_or(Error::NotFound)?;
        if m.bound_mws != 0 {
            return Err(Error::Busy);
        }
        self.sh.keys.remove(mr);
        self.pd_ref(m.pd, -1);
        Ok(())
    }

    /// Allocates a memory window; returns its handle and initial rkey.
    pub fn alloc_mw(&mut self, pd: PdId, ty: MwType) -> Result<(MwId, u32), Error> {
        self.sh.pds.get(pd).ok_or(Error::NotFound)?;
        let r = self.sh.keys.add_mw(pd, ty).ok_or(Error::NoMemory)?;
        self.pd_ref(pd, 1);
        Ok(r)
    }

    pub fn dealloc_mw(&mut self, mw: MwId) -> Result<(), Error> {
        let w = *self.sh.keys.mw(mw).ok_or(Error::NotFound)?;
        if let Some(b) = w.bound {
            if let Some(m) = self.sh.keys.mr_mut(b.mr) {
                m.bound_mws = m.bound_mws.saturating_sub(1);
            }
        }
        self.sh.keys.remove(mw);
        self.pd_ref(w.pd, -1);
        Ok(())
    }

    /// `ibv_bind_mw` for a type 1 window: posts a BIND_MW work request on `qpn` with the
    /// window's next rkey and returns that rkey (the bind takes effect, and completes, in
    /// send-queue order).
    pub fn bind_mw(&mut self, now: Nanos, qpn: Qpn, wr_id: u64, flags: SendFlags, bind: &MwBind) -> Result<u32, Error> {
        let w = *self.sh.keys.mw(bind.mw).ok_or(Error::NotFound)?;
        if w.ty != MwType::Type1 {
            return Err(Error::Invalid);
        }
        let rkey = self.sh.keys.next_window_key(w.rkey);
        let b = MwBind { rkey, ..*bind };
        self.post_send(now, qpn, &SendWr { wr_id, kind: WrKind::BindMw(b), flags, sg_list: &[], ud: None })?;
        Ok(rkey)
    }

    pub fn create_ah(&mut self, pd: PdId, attr: &AhAttr) -> Result<AhId, Error> {
        self.sh.pds.get(pd).ok_or(Error::NotFound)?;
        if !attr.is_global {
            return Err(Error::Invalid);
        }
        let dst = qp::gid_to_ip(attr.grh.dgid);
        let id = self.sh.ahs.insert(Ah { pd, attr: *attr, dst }, self.sh.cfg.limits.max_ah).ok_or(Error::NoMemory)?;
        self.pd_ref(pd, 1);
        Ok(id)
    }

    pub fn query_ah(&self, ah: AhId) -> Result<AhAttr, Error> {
        self.sh.ahs.get(ah).map(|a| a.attr).ok_or(Error::NotFound)
    }

    pub fn destroy_ah(&mut self, ah: AhId) -> Result<(), Error> {
        let a = self.sh.ahs.remove(ah).ok_or(Error::NotFound)?;
        self.pd_ref(a.pd, -1);
        Ok(())
    }

    // ---- commands: CQ, SRQ -------------------------------------------------------------

    /// Creates a CQ of at least `cqe` entries; returns its handle and actual size.
    pub fn create_cq(&mut self, cqe: u32) -> Result<(CqId, u32), Error> {
        if cqe == 0 || cqe > self.sh.cfg.limits.max_cqe {
            return Err(Error::Invalid);
        }
        let id = self.sh.cqs.insert(Cq::new(cqe as usize), self.sh.cfg.limits.max_cq).ok_or(Error::NoMemory)?;
        Ok((id, cqe))
    }

    /// `ibv_resize_cq`: a new capacity of at least `cqe` that still holds every completion
    /// queued now (EINVAL otherwise); returns the actual size.
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> Result<u32, Error> {
        if cqe == 0 || cqe > self.sh.cfg.limits.max_cqe {
            return Err(Error::Invalid);
        }
        self.sh.cqs.get_mut(cq).ok_or(Error::NotFound)?.resize(cqe as usize)?;
        Ok(cqe)
    }

    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), Error> {
        let c = self.sh.cqs.get(cq).ok_or(Error::NotFound)?;
        if c.refs != 0 {
            return Err(Error::Busy);
        }
        self.sh.cqs.remove(cq);
        Ok(())
    }

    /// How many completions CQ `cq` holds (0 for a CQ that does not exist).
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.sh.cqs.get(cq).map_or(0, |c| c.len())
    }

    /// Moves up to `out.len()` completions into `out`, oldest first.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        Ok(self.sh.cqs.get_mut(cq).ok_or(Error::NotFound)?.poll(out))
    }

    /// Arms the CQ: the next completion (or next solicited/error one) raises
    /// `Event::Completion` once.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), Error> {
        self.sh.cqs.get_mut(cq).ok_or(Error::NotFound)?.armed = Some(solicited_only);
        Ok(())
    }

    pub fn create_srq(&mut self, pd: PdId, attr: &SrqAttr) -> Result<(SrqId, SrqAttr), Error> {
        self.insert_srq(pd, attr, None)
    }

    // ---- commands: XRC -----------------------------------------------------------------

    /// Allocates an XRC domain (`ibv_open_xrcd`; sharing a domain between opens of the same
    /// file is the provider's business).
    pub fn alloc_xrcd(&mut self) -> Result<XrcdId, Error> {
        self.sh.xrcds.insert(Xrcd { refs: 0 }, self.sh.cfg.limits.max_srq).ok_or(Error::NoMemory)
    }

    /// Frees an XRC domain; EBUSY while XRC SRQs or target QPs are in it.
    pub fn dealloc_xrcd(&mut self, xrcd: XrcdId) -> Result<(), Error> {
        let x = self.sh.xrcds.get(xrcd).ok_or(Error::NotFound)?;
        if x.refs != 0 {
            return Err(Error::Busy);
        }
        self.sh.xrcds.remove(xrcd);
        Ok(())
    }

    pub(super) fn xrcd_ref(&mut self, xrcd: XrcdId, delta: i32) {
        if let Some(x) = self.sh.xrcds.get_mut(xrcd) {
            x.refs = x.refs.saturating_add_signed(delta);
        }
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ in domain `xrcd` whose receives
    /// complete on `cq`; peers name it by its number ([`Engine::srq_num`]).
    pub fn create_xrc_srq(
        &mut self,
        pd: PdId,
        xrcd: XrcdId,
        cq: CqId,
        attr: &SrqAttr,
    ) -> Result<(SrqId, SrqAttr), Error> {
        self.sh.xrcds.get(xrcd).ok_or(Error::NotFound)?;
        self.sh.cqs.get(cq).ok_or(Error::NotFound)?;
        let r = self.insert_srq(pd, attr, Some(XrcSrq { xrcd, cq }))?;
        self.xrcd_ref(xrcd, 1);
        if let Some(c) = self.sh.cqs.get_mut(cq) {
            c.refs += 1;
        }
        if r.0 > 0xFF_FFFF {
            // Its number would not fit an XRCETH (only with a max_srq above 2^24).
            self.destroy_srq(r.0)?;
            return Err(Error::NoMemory);
        }
        Ok(r)
    }

    /// `ibv_get_srq_num`: the 24-bit number an XRCETH names this XRC SRQ by (EINVAL for an
    /// ordinary SRQ).
    pub fn srq_num(&self, srq: SrqId) -> Result<u32, Error> {
        let s = self.sh.srqs.get(srq).ok_or(Error::NotFound)?;
        if s.xrc.is_none() {
            return Err(Error::Invalid);
        }
        // Handles are small (at most `max_srq` of them), so the handle is the number.
        Ok(srq & 0xFF_FFFF)
    }

    /// `ibv_create_qp_ex` of an `IBV_QPT_XRC_RECV` QP: a target QP in domain `xrcd`, with no
    /// send or receive queue and no CQ.
    pub fn create_xrc_recv_qp(&mut self, xrcd: XrcdId) -> Result<Qpn, Error> {
        self.sh.xrcds.get(xrcd).ok_or(Error::NotFound)?;
        if self.nqps >= self.sh.cfg.limits.max_qp {
            return Err(Error::NoMemory);
        }
        let qpn = self.alloc_qpn()?;
        let init = QpInitAttr::xrc_target();
        let mut q = Qp::new(qpn, &init, QpCap::default(), self.sh.cfg.limits.max_srq_sge.max(1));
        q.xrcd = Some(xrcd);
        self.qps[self.qspace.idx(qpn)] = Some(Box::new(q));
        self.nqps += 1;
        self.xrcd_ref(xrcd, 1);
        Ok(qpn)
    }

    /// `ibv_open_qp`: another handle on target QP `qpn` of domain `xrcd` (ENOENT if there is
    /// no such QP, EINVAL if it is not an XRC target of that domain). Each open is closed by
    /// one `destroy_qp`; the QP goes when the last handle does.
    pub fn open_xrc_qp(&mut self, xrcd: XrcdId, qpn: Qpn) -> Result<(), Error> {
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { return Err(Error::NotFound) };
        if q.ty != QpType::XrcRecv || q.xrcd != Some(xrcd) {
            return Err(Error::Invalid);
        }
        q.xrc_opens += 1;
        Ok(())
    }

    /// The XRC domain of target QP `qpn`.
    pub fn qp_xrcd(&self, qpn: Qpn) -> Result<Option<XrcdId>, Error> {
        Ok(self.qp(qpn)?.xrcd)
    }

    fn insert_srq(&mut self, pd: PdId, attr: &SrqAttr, xrc: Option<XrcSrq>) -> Result<(SrqId, SrqAttr), Error> {
        self.sh.pds.get(pd).ok_or(Error::NotFound)?;
        let l = &self.sh.cfg.limits;
        if attr.max_wr == 0
            || attr.max_wr > l.max_srq_wr
            || attr.max_sge > l.max_srq_sge
            || attr.srq_limit > attr.max_wr
        {
            return Err(Error::Invalid);
        }
        let srq =
            Srq { pd, ring: RecvRing::new(attr.max_wr, attr.max_sge.max(1)), limit: attr.srq_limit, refs: 0, xrc };
        let got = srq.attr();
        let id = self.sh.srqs.insert(srq, l.max_srq).ok_or(Error::NoMemory)?;
        self.pd_ref(pd, 1);
        Ok((id, got))
    }

    /// `ibv_modify_srq`: MAX_WR grows the queue (shrinking is EINVAL), LIMIT arms the limit
    /// event.
    pub fn modify_srq(&mut self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> Result<(), Error> {
        let max = self.sh.cfg.limits.max_srq_wr;
        let s = self.sh.srqs.get_mut(srq).ok_or(Error::NotFound)?;
        if mask.unknown_bits() != 0 {
            return Err(Error::Invalid);
        }
        if mask.contains(SrqAttrMask::MAX_WR) && (attr.max_wr < s.ring.cap || attr.max_wr > max) {
            return Err(Error::Invalid);
        }
        let cap = if mask.contains(SrqAttrMask::MAX_WR) { attr.max_wr } else { s.ring.cap };
        if mask.contains(SrqAttrMask::LIMIT) && attr.srq_limit > cap {
            return Err(Error::Invalid);
        }
        if mask.contains(SrqAttrMask::MAX_WR) {
            s.ring.grow(attr.max_wr);
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            s.limit = attr.srq_limit;
        }
        Ok(())
    }

    pub fn query_srq(&self, srq: SrqId) -> Result<SrqAttr, Error> {
        self.sh.srqs.get(srq).map(|s| s.attr()).ok_or(Error::NotFound)
    }

    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), Error> {
        let s = self.sh.srqs.get(srq).ok_or(Error::NotFound)?;
        if s.refs != 0 {
            return Err(Error::Busy);
        }
        let (pd, xrc) = (s.pd, s.xrc);
        self.sh.srqs.remove(srq);
        self.pd_ref(pd, -1);
        if let Some(x) = xrc {
            self.xrcd_ref(x.xrcd, -1);
            if let Some(c) = self.sh.cqs.get_mut(x.cq) {
                c.refs = c.refs.saturating_sub(1);
            }
        }
        Ok(())
    }

    pub fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<(), Error> {
        if self.sh.faults.is_some() {
            self.verb_fault(super::faults::Site::PostRecv, None)?;
        }
        let s = self.sh.srqs.get_mut(srq).ok_or(Error::NotFound)?;
        if wr.sg_list.len() > s.ring.max_sge as usize {
            return Err(Error::Invalid);
        }
        if !s.ring.push(wr) {
            return Err(Error::NoMemory);
        }
        Ok(())
    }
}
