//! Memory regions and memory windows (rxe_mr.c, rxe_mw.c): the key scheme and every check that
//! stands between a key on the wire (or in an SGE) and host memory.
//!
//! Keys are `(index << 8) | generation`. MRs and MWs share one index space, and a freed index
//! goes to the back of a FIFO free list with its generation bumped, so a stale key does not
//! name a new object until its index has come round 256 times.
//! This module never touches memory; it only translates and checks.

use std::collections::VecDeque;

use super::types::{AccessFlags, MrId, MwBind, MwId, MwType, PdId, Qpn};

/// Why a key lookup or a bounds/access check failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KeyError {
    /// No valid object behind the key (freed, wrong generation, invalidated, unbound MW).
    BadKey,
    /// The object belongs to another PD.
    WrongPd,
    /// The object does not grant the access.
    Access,
    /// The range is outside the object.
    Bounds,
    /// A type 2 MW is bound to another QP.
    WrongQp,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Mr {
    pub pd: PdId,
    /// Host address of the first byte.
    pub addr: u64,
    pub len: u64,
    /// Address the peer and SGEs use for the first byte (0 for ZERO_BASED).
    pub iova: u64,
    pub access: AccessFlags,
    /// Valid until local/remote invalidation (only reachable through the verbs for MRs we
    /// registered ourselves: invalidation of an MR rkey is allowed as for FRMRs).
    pub valid: bool,
    /// MWs currently bound to this MR.
    pub bound_mws: u32,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Mw {
    pub pd: PdId,
    pub ty: MwType,
    /// Current rkey (changes on each bind).
    pub rkey: u32,
    pub bound: Option<MwBinding>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct MwBinding {
    pub mr: MrId,
    /// Window start as the peer addresses it (0 for a zero-based window).
    pub va: u64,
    /// Window start in the MR's address space.
    pub mr_va: u64,
    pub len: u64,
    pub access: AccessFlags,
    /// Type 2 windows belong to the QP that bound them.
    pub qpn: Option<Qpn>,
}

#[derive(Clone, Copy, Debug)]
enum Slot {
    Free,
    Mr(Mr),
    Mw(Mw),
}

/// The result of a successful check: the host address of the first byte.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Resolved {
    pub host: u64,
    /// The MR actually backing the access (for MWs, the bound MR).
    pub mr: MrId,
}

pub(crate) struct KeyTable {
    slots: Vec<(u8, Slot)>,
    free: VecDeque<u32>,
    max: u32,
    live: usize,
}

/// Index 0 is never used so that key 0 (a common uninitialised value) is always invalid.
const FIRST_INDEX: u32 = 1;
/// Keys are 32 bits: 24 bits of index.
const MAX_INDEX: u32 = 0x00FF_FFFF;

impl KeyTable {
    pub fn new(max: u32) -> KeyTable {
        KeyTable { slots: vec![(0, Slot::Free)], free: VecDeque::new(), max: max.min(MAX_INDEX), live: 0 }
    }

    fn alloc(&mut self, make: impl FnOnce(u32) -> Slot) -> Option<u32> {
        // Reuse a freed index only when enough others are free, so keys are not reused soon.
        let idx = if self.free.len() > 64 || (self.slots.len() as u32) > self.max {
            self.free.pop_front()?
        } else {
            let i = self.slots.len() as u32;
            self.slots.push((0, Slot::Free));
            i
        };
        debug_assert!(idx >= FIRST_INDEX);
        let gen = self.slots[idx as usize].0;
        let key = (idx << 8) | gen as u32;
        self.slots[idx as usize].1 = make(key);
        self.live += 1;
        Some(idx)
    }

    fn release(&mut self, idx: u32) {
        if let Some(s) = self.slots.get_mut(idx as usize) {
            s.0 = s.0.wrapping_add(1);
            s.1 = Slot::Free;
            self.free.push_back(idx);
            self.live = self.live.saturating_sub(1);
        }
    }

    /// MRs + MWs alive.
    pub fn count(&self) -> usize {
        self.live
    }

    pub fn add_mr(&mut self, mr: Mr) -> Option<(MrId, u32)> {
        let idx = self.alloc(|_| Slot::Mr(mr))?;
        Some((idx, self.key_of(idx)))
    }

    pub fn add_mw(&mut self, pd: PdId, ty: MwType) -> Option<(MwId, u32)> {
        let idx = self.alloc(|key| Slot::Mw(Mw { pd, ty, rkey: key, bound: None }))?;
        Some((idx, self.key_of(idx)))
    }

    /// The generation byte of slot `idx` (the low byte of its keys).
    pub fn generation(&self, idx: u32) -> u8 {
        self.slots.get(idx as usize).map(|s| s.0).unwrap_or(0)
    }

    fn key_of(&self, idx: u32) -> u32 {
        (idx << 8) | self.slots[idx as usize].0 as u32
    }

    pub fn mr(&self, id: MrId) -> Option<&Mr> {
        match self.slots.get(id as usize) {
            Some((_, Slot::Mr(m))) => Some(m),
            _ => None,
        }
    }

    pub fn mr_mut(&mut self, id: MrId) -> Option<&mut Mr> {
        match self.slots.get_mut(id as usize) {
            Some((_, Slot::Mr(m))) => Some(m),
            _ => None,
        }
    }

    pub fn mw(&self, id: MwId) -> Option<&Mw> {
        match self.slots.get(id as usize) {
            Some((_, Slot::Mw(m))) => Some(m),
            _ => None,
        }
    }

    pub fn mw_mut(&mut self, id: MwId) -> Option<&mut Mw> {
        match self.slots.get_mut(id as usize) {
            Some((_, Slot::Mw(m))) => Some(m),
            _ => None,
        }
    }

    /// Removes an MR or MW; `false` if `id` is not one.
    pub fn remove(&mut self, id: u32) -> bool {
        if matches!(self.slots.get(id as usize), Some((_, Slot::Mr(_) | Slot::Mw(_)))) {
            self.release(id);
            true
        } else {
            false
        }
    }

    /// Checks an lkey for a local access of `len` bytes at `va` by a QP of PD `pd`.
    pub fn check_lkey(&self, lkey: u32, pd: PdId, va: u64, len: u64, need: AccessFlags) -> Result<Resolved, KeyError> {
        let idx = lkey >> 8;
        let (gen, slot) = self.slots.get(idx as usize).ok_or(KeyError::BadKey)?;
        match slot {
            Slot::Mr(mr) if *gen == lkey as u8 && mr.valid => {
                if mr.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                if !mr.access.contains(need) {
                    return Err(KeyError::Access);
                }
                Ok(Resolved { host: translate(mr.addr, mr.iova, mr.len, va, len)?, mr: idx })
            }
            _ => Err(KeyError::BadKey),
        }
    }

    /// Checks an rkey for a remote access of `len` bytes at `va` by QP `qpn` of PD `pd`.
    pub fn check_rkey(
        &self,
        rkey: u32,
        pd: PdId,
        qpn: Qpn,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<Resolved, KeyError> {
        let idx = rkey >> 8;
        let (gen, slot) = self.slots.get(idx as usize).ok_or(KeyError::BadKey)?;
        match slot {
            Slot::Mr(mr) if *gen == rkey as u8 && mr.valid => {
                if mr.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                if !mr.access.contains(need) {
                    return Err(KeyError::Access);
                }
                Ok(Resolved { host: translate(mr.addr, mr.iova, mr.len, va, len)?, mr: idx })
            }
            Slot::Mw(mw) if mw.rkey == rkey => {
                let b = mw.bound.ok_or(KeyError::BadKey)?;
                if mw.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                if let Some(owner) = b.qpn {
                    if owner != qpn {
                        return Err(KeyError::WrongQp);
                    }
                }
                if !b.access.contains(need) {
                    return Err(KeyError::Access);
                }
                // Window bounds first, then the MR's own translation.
                let end = va.checked_add(len).ok_or(KeyError::Bounds)?;
                if va < b.va || end > b.va + b.len {
                    return Err(KeyError::Bounds);
                }
                let mr = self.mr(b.mr).filter(|m| m.valid).ok_or(KeyError::BadKey)?;
                let mr_va = b.mr_va + (va - b.va);
                Ok(Resolved { host: translate(mr.addr, mr.iova, mr.len, mr_va, len)?, mr: b.mr })
            }
            _ => Err(KeyError::BadKey),
        }
    }

    /// Invalidates the object named by `rkey` (SEND with Invalidate, LOCAL_INV). MWs of type 2
    /// become unbound; MRs become invalid until re-registration. Type 1 MWs cannot be
    /// invalidated (IBTA 10.6.7.2.5).
    pub fn invalidate(&mut self, rkey: u32, pd: PdId, remote_qpn: Option<Qpn>) -> Result<(), KeyError> {
        let idx = rkey >> 8;
        let gen = self.slots.get(idx as usize).map(|s| s.0).ok_or(KeyError::BadKey)?;
        let mut unbind_mr = None;
        match self.slots.get_mut(idx as usize).map(|s| &mut s.1) {
            Some(Slot::Mr(mr)) if gen == rkey as u8 && mr.valid => {
                if mr.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                if mr.bound_mws != 0 {
                    return Err(KeyError::Access);
                }
                mr.valid = false;
            }
            Some(Slot::Mw(mw)) if mw.rkey == rkey && mw.bound.is_some() => {
                if mw.ty == MwType::Type1 || mw.pd != pd {
                    return Err(KeyError::Access);
                }
                let b = mw.bound.unwrap_or_else(|| unreachable!());
                if let (Some(owner), Some(q)) = (b.qpn, remote_qpn) {
                    if owner != q {
                        return Err(KeyError::WrongQp);
                    }
                }
                mw.bound = None;
                unbind_mr = Some(b.mr);
            }
            _ => return Err(KeyError::BadKey),
        }
        if let Some(m) = unbind_mr.and_then(|m| self.mr_mut(m)) {
            m.bound_mws = m.bound_mws.saturating_sub(1);
        }
        Ok(())
    }

    /// Binds (or, with length 0 for type 1, unbinds) a window (IBTA 10.6.7.2). `new_rkey` is the
    /// window's next key: its index must be the window's, only the low byte changes.
    pub fn bind_mw(&mut self, b: &MwBind, qp_pd: PdId, qpn: Qpn) -> Result<u32, KeyError> {
        let MwBind { mw: mw_id, rkey: new_rkey, mr: mr_id, addr: va, length: len, access } = *b;
        if new_rkey >> 8 != mw_id {
            return Err(KeyError::BadKey);
        }
        let mw = *self.mw(mw_id).ok_or(KeyError::BadKey)?;
        if mw.ty == MwType::Type2 && mw.bound.is_some() {
            // A type 2 window must be invalidated before it is bound again.
            return Err(KeyError::Access);
        }
        if mw.pd != qp_pd && mw.ty == MwType::Type2 {
            return Err(KeyError::WrongPd);
        }
        let old_mr = mw.bound.map(|b| b.mr);
        let new_binding = if len == 0 && mw.ty == MwType::Type1 {
            None
        } else {
            let mr = self.mr(mr_id).filter(|m| m.valid).ok_or(KeyError::BadKey)?;
            if mr.pd != qp_pd {
                return Err(KeyError::WrongPd);
            }
            if !mr.access.contains(AccessFlags::MW_BIND) {
                return Err(KeyError::Access);
            }
            // Remote write/atomic through a window needs local write on the MR (the window
            // cannot grant more than the region allows locally).
            if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
                && !mr.access.contains(AccessFlags::LOCAL_WRITE)
            {
                return Err(KeyError::Access);
            }
            translate(mr.addr, mr.iova, mr.len, va, len)?;
            let zero_based = access.contains(AccessFlags::ZERO_BASED);
            Some(MwBinding {
                mr: mr_id,
                va: if zero_based { 0 } else { va },
                mr_va: va,
                len,
                access,
                qpn: (mw.ty == MwType::Type2).then_some(qpn),
            })
        };
        if let Some(m) = old_mr.and_then(|m| self.mr_mut(m)) {
            m.bound_mws = m.bound_mws.saturating_sub(1);
        }
        if let Some(m) = new_binding.and_then(|b| self.mr_mut(b.mr)) {
            m.bound_mws += 1;
        }
        let w = self.mw_mut(mw_id).ok_or(KeyError::BadKey)?;
        w.bound = new_binding;
        w.rkey = new_rkey;
        Ok(new_rkey)
    }
}

/// Translates `va..va+len` inside an object starting at `iova` of `obj_len` bytes at host
/// address `addr`.
fn translate(addr: u64, iova: u64, obj_len: u64, va: u64, len: u64) -> Result<u64, KeyError> {
    let off = va.checked_sub(iova).ok_or(KeyError::Bounds)?;
    let end = off.checked_add(len).ok_or(KeyError::Bounds)?;
    if end > obj_len {
        return Err(KeyError::Bounds);
    }
    addr.checked_add(off).ok_or(KeyError::Bounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(pd: PdId, access: AccessFlags) -> Mr {
        Mr { pd, addr: 0x10000, len: 4096, iova: 0x7000_0000, access, valid: true, bound_mws: 0 }
    }

    #[test]
    fn rkey_checks_pd_access_and_bounds() {
        let mut t = KeyTable::new(100);
        let (_, key) = t.add_mr(mr(1, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)).unwrap();
        let ok = t.check_rkey(key, 1, 0x11, 0x7000_0010, 16, AccessFlags::REMOTE_WRITE).unwrap();
        assert_eq!(ok.host, 0x10010);
        assert_eq!(t.check_rkey(key, 2, 0x11, 0x7000_0010, 16, AccessFlags::REMOTE_WRITE), Err(KeyError::WrongPd));
        assert_eq!(t.check_rkey(key, 1, 0x11, 0x7000_0010, 16, AccessFlags::REMOTE_READ), Err(KeyError::Access));
        assert_eq!(t.check_rkey(key, 1, 0x11, 0x7000_0ff8, 16, AccessFlags::REMOTE_WRITE), Err(KeyError::Bounds));
        assert_eq!(t.check_rkey(key, 1, 0x11, 0x6fff_fff8, 8, AccessFlags::REMOTE_WRITE), Err(KeyError::Bounds));
        assert_eq!(t.check_rkey(key, 1, 0x11, u64::MAX, 16, AccessFlags::REMOTE_WRITE), Err(KeyError::Bounds));
        assert_eq!(t.check_rkey(key ^ 1, 1, 0x11, 0x7000_0010, 16, AccessFlags::REMOTE_WRITE), Err(KeyError::BadKey));
    }

    #[test]
    fn deregistered_key_is_not_reused_soon() {
        let mut t = KeyTable::new(1000);
        let (id, key) = t.add_mr(mr(1, AccessFlags::LOCAL_WRITE)).unwrap();
        assert!(t.remove(id));
        let mut keys = Vec::new();
        for _ in 0..200 {
            keys.push(t.add_mr(mr(1, AccessFlags::LOCAL_WRITE)).unwrap().1);
        }
        assert!(!keys.contains(&key));
        assert_eq!(t.check_lkey(key, 1, 0x7000_0000, 1, AccessFlags::EMPTY), Err(KeyError::BadKey));
    }

    #[test]
    fn type2_window_is_owned_by_its_qp_and_invalidated_once() {
        let mut t = KeyTable::new(100);
        let (mr_id, _) = t.add_mr(mr(1, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)).unwrap();
        let (mw, k0) = t.add_mw(1, MwType::Type2).unwrap();
        let k1 = (k0 & !0xFF) | ((k0 + 1) & 0xFF);
        let b = MwBind { mw, rkey: k1, mr: mr_id, addr: 0x7000_0100, length: 256, access: AccessFlags::REMOTE_WRITE };
        t.bind_mw(&b, 1, 0x11).unwrap();
        assert!(t.check_rkey(k1, 1, 0x11, 0x7000_0100, 256, AccessFlags::REMOTE_WRITE).is_ok());
        assert_eq!(t.check_rkey(k1, 1, 0x12, 0x7000_0100, 8, AccessFlags::REMOTE_WRITE), Err(KeyError::WrongQp));
        assert_eq!(t.check_rkey(k1, 1, 0x11, 0x7000_0100, 257, AccessFlags::REMOTE_WRITE), Err(KeyError::Bounds));
        assert_eq!(t.check_rkey(k0, 1, 0x11, 0x7000_0100, 8, AccessFlags::REMOTE_WRITE), Err(KeyError::BadKey));
        assert_eq!(t.mr(mr_id).unwrap().bound_mws, 1);
        t.invalidate(k1, 1, Some(0x11)).unwrap();
        assert_eq!(t.check_rkey(k1, 1, 0x11, 0x7000_0100, 8, AccessFlags::REMOTE_WRITE), Err(KeyError::BadKey));
        assert_eq!(t.invalidate(k1, 1, Some(0x11)), Err(KeyError::BadKey));
        assert_eq!(t.mr(mr_id).unwrap().bound_mws, 0);
    }
}
