//! Memory regions and memory windows (rxe_mr.c, rxe_mw.c): the key scheme and every check that
//! stands between a key on the wire (or in an SGE) and host memory.
//!
//! Keys are `((generation << index_bits) | index) << 8 | random byte`: the 24 bits above the
//! low byte name the slot (its index in the low `index_bits`, as many as the table's size
//! needs) and a generation in the bits the index leaves free; the low byte is drawn from the
//! engine's seeded RNG at every registration (never the byte the slot had before), as rxe puts
//! a random byte in every key. A fresh slot starts at a random generation, so neither a
//! process's first keys nor the next key of a slot can be predicted from the ones a peer saw.
//! MRs and MWs share one index space; a freed index goes to the back of a FIFO free list and
//! its generation is bumped, and a key is checked whole, so a stale key does not name a new
//! object until its index has come round `2^(24 - index_bits)` times, and even then only if
//! the random byte repeats. A type 2 window keeps its slot bits across binds: `ibv_inc_rkey`
//! changes only the low byte.
//! This module never touches memory; it only translates and checks.

use std::collections::VecDeque;

use super::types::{AccessFlags, MrId, MwBind, MwId, MwType, PdId, Qpn, SplitMix64};

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
    /// The key names an object that cannot be invalidated (an MR, a type 1 MW).
    NotInvalidatable,
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
    /// Always true for the MRs `ibv_reg_mr` creates: they cannot be invalidated, locally or
    /// remotely (only fast-register MRs can, and userspace verbs cannot make those).
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
    /// Per slot: the key it was last given (0: never used) and what it holds.
    slots: Vec<(u32, Slot)>,
    free: VecDeque<u32>,
    max: u32,
    live: usize,
    /// Bits of the slot field (key bits 8..32) that hold the index; the rest hold the generation.
    index_bits: u32,
    rng: KeyRng,
}

/// Index 0 is never used so that key 0 (a common uninitialised value) is always invalid.
const FIRST_INDEX: u32 = 1;
/// Keys are 32 bits: at most 24 bits of index.
const MAX_INDEX: u32 = 0x00FF_FFFF;

/// The key RNG: the engine's splitmix64, seeded by the driver (the transport from the kernel's
/// random pool, the simulator from its seed, so runs stay reproducible).
struct KeyRng(SplitMix64);

impl KeyRng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A random byte other than `not`.
    fn byte_except(&mut self, not: u8) -> u8 {
        // 255 values: uniform over the bytes that are not `not`.
        let r = (self.next() % 255) as u8;
        if r >= not {
            r + 1
        } else {
            r
        }
    }
}

impl KeyTable {
    /// A table of at most `max` MRs + MWs whose keys draw their random bits from `seed`.
    pub fn new(max: u32, seed: u64) -> KeyTable {
        let max = max.clamp(FIRST_INDEX, MAX_INDEX);
        let index_bits = 32 - max.leading_zeros();
        KeyTable {
            slots: vec![(0, Slot::Free)],
            free: VecDeque::new(),
            max,
            live: 0,
            index_bits,
            rng: KeyRng(SplitMix64::new(seed)),
        }
    }

    fn index_of(&self, key: u32) -> u32 {
        (key >> 8) & ((1u32 << self.index_bits) - 1)
    }

    /// The next key of slot `idx` whose last key was `last` (0 for a fresh slot).
    fn next_key(&mut self, idx: u32, last: u32) -> u32 {
        let gen_bits = 24 - self.index_bits;
        let gen_mask = (1u32 << gen_bits) - 1;
        let gen =
            if last == 0 { self.rng.next() as u32 & gen_mask } else { ((last >> 8 >> self.index_bits) + 1) & gen_mask };
        let byte = self.rng.byte_except(last as u8);
        (((gen << self.index_bits) | idx) << 8) | byte as u32
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
        let key = self.next_key(idx, self.slots[idx as usize].0);
        self.slots[idx as usize] = (key, make(key));
        self.live += 1;
        Some(idx)
    }

    fn release(&mut self, idx: u32) {
        if let Some(s) = self.slots.get_mut(idx as usize) {
            // The key stays recorded: the slot's next key is derived from it (and differs).
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

    /// A type 1 window's next key after `rkey`: the same slot bits, a fresh random low byte
    /// (so a peer that knew one binding's key cannot guess the next binding's).
    pub fn next_window_key(&mut self, rkey: u32) -> u32 {
        (rkey & !0xFF) | self.rng.byte_except(rkey as u8) as u32
    }

    /// The key slot `idx` was given when its object was created (an MR's lkey and rkey).
    pub fn key_of(&self, idx: u32) -> u32 {
        self.slots.get(idx as usize).map_or(0, |s| s.0)
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

    /// Which object `key` names, compared whole: `Some(Ok(mr))` for a valid MR whose key it
    /// is, `Some(Err(mw))` for a window whose current rkey it is, `None` for nothing.
    pub fn object_of(&self, key: u32) -> Option<Result<MrId, MwId>> {
        let idx = self.index_of(key);
        match self.slots.get(idx as usize)? {
            (k, Slot::Mr(mr)) if *k == key && mr.valid => Some(Ok(idx)),
            (_, Slot::Mw(mw)) if mw.rkey == key => Some(Err(idx)),
            _ => None,
        }
    }

    /// Checks an lkey for a local access of `len` bytes at `va` by a QP of PD `pd`.
    pub fn check_lkey(&self, lkey: u32, pd: PdId, va: u64, len: u64, need: AccessFlags) -> Result<Resolved, KeyError> {
        let idx = self.index_of(lkey);
        let (key, slot) = self.slots.get(idx as usize).ok_or(KeyError::BadKey)?;
        match slot {
            Slot::Mr(mr) if *key == lkey && mr.valid => {
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
        let idx = self.index_of(rkey);
        let (key, slot) = self.slots.get(idx as usize).ok_or(KeyError::BadKey)?;
        match slot {
            Slot::Mr(mr) if *key == rkey && mr.valid => {
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

    /// Invalidates the object named by `rkey` (SEND with Invalidate from `remote_qpn`, or
    /// LOCAL_INV when `None`). Only a bound type 2 MW can be invalidated (IBTA 10.6.7.2.5,
    /// 9.4.1.2.1): it becomes unbound. A type 1 MW or an MR is refused and stays valid — the
    /// only MRs that may be invalidated are fast-register MRs, which userspace cannot create
    /// (rxe refuses every other MR type the same way).
    pub fn invalidate(&mut self, rkey: u32, pd: PdId, remote_qpn: Option<Qpn>) -> Result<(), KeyError> {
        let idx = self.index_of(rkey);
        let slot_key = self.slots.get(idx as usize).map(|s| s.0).ok_or(KeyError::BadKey)?;
        let unbind_mr = match self.slots.get_mut(idx as usize).map(|s| &mut s.1) {
            Some(Slot::Mr(mr)) if slot_key == rkey && mr.valid => return Err(KeyError::NotInvalidatable),
            Some(Slot::Mw(mw)) if mw.rkey == rkey && mw.bound.is_some() => {
                if mw.ty == MwType::Type1 {
                    return Err(KeyError::NotInvalidatable);
                }
                if mw.pd != pd {
                    return Err(KeyError::WrongPd);
                }
                let Some(b) = mw.bound else { return Err(KeyError::BadKey) };
                if let (Some(owner), Some(q)) = (b.qpn, remote_qpn) {
                    if owner != q {
                        return Err(KeyError::WrongQp);
                    }
                }
                mw.bound = None;
                b.mr
            }
            _ => return Err(KeyError::BadKey),
        };
        if let Some(m) = self.mr_mut(unbind_mr) {
            m.bound_mws = m.bound_mws.saturating_sub(1);
        }
        Ok(())
    }

    /// Binds (or, with length 0 for type 1, unbinds) a window (IBTA 10.6.7.2). `new_rkey` is the
    /// window's next key: its index must be the window's, only the low byte changes.
    pub fn bind_mw(&mut self, b: &MwBind, qp_pd: PdId, qpn: Qpn) -> Result<u32, KeyError> {
        let MwBind { mw: mw_id, rkey: new_rkey, mr: mr_id, addr: va, length: len, access } = *b;
        // Only the low byte of a window's key is the consumer's to change.
        if self.index_of(new_rkey) != mw_id || new_rkey >> 8 != self.key_of(mw_id) >> 8 {
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
    fn implicit_region_translates_every_address_to_itself() {
        let mut t = KeyTable::new(100, 3);
        let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::ON_DEMAND;
        let implicit = Mr { pd: 1, addr: 0, len: u64::MAX, iova: 0, access: all, valid: true, bound_mws: 0 };
        let (id, key) = t.add_mr(implicit).unwrap();
        for va in [1u64, 0x7fff_0000_1234, u64::MAX - 4096] {
            let r = t.check_rkey(key, 1, 0x11, va, 4096, AccessFlags::REMOTE_WRITE).unwrap();
            assert_eq!((r.host, r.mr), (va, id));
            assert_eq!(t.check_lkey(key, 1, va, 4096, AccessFlags::LOCAL_WRITE).unwrap().host, va);
        }
        assert_eq!(t.check_rkey(key, 1, 0x11, u64::MAX - 10, 16, AccessFlags::REMOTE_WRITE), Err(KeyError::Bounds));
        assert_eq!(t.check_rkey(key, 2, 0x11, 4096, 16, AccessFlags::REMOTE_WRITE), Err(KeyError::WrongPd));
        assert_eq!(t.check_rkey(key, 1, 0x11, 4096, 16, AccessFlags::REMOTE_READ), Err(KeyError::Access));
    }

    #[test]
    fn object_of_tells_regions_windows_and_nothing_apart() {
        let mut t = KeyTable::new(100, 5);
        let (mr_id, mr_key) = t.add_mr(mr(1, AccessFlags::LOCAL_WRITE)).unwrap();
        let (mw_id, mw_key) = t.add_mw(1, MwType::Type1).unwrap();
        assert_eq!(t.object_of(mr_key), Some(Ok(mr_id)));
        assert_eq!(t.object_of(mw_key), Some(Err(mw_id)));
        assert_eq!(t.object_of(mr_key ^ 1), None, "the random byte counts");
        assert_eq!(t.object_of(0), None);
        t.remove(mr_id);
        assert_eq!(t.object_of(mr_key), None, "a deregistered MR's key names nothing");
    }

    #[test]
    fn rkey_checks_pd_access_and_bounds() {
        let mut t = KeyTable::new(100, 7);
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
        let mut t = KeyTable::new(1000, 7);
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
        let mut t = KeyTable::new(100, 7);
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

    #[test]
    fn keys_carry_random_bits_from_the_seed() {
        let keys = |seed| {
            let mut t = KeyTable::new(0x20000, seed);
            (0..8).map(|_| t.add_mr(mr(1, AccessFlags::LOCAL_WRITE)).unwrap()).collect::<Vec<_>>()
        };
        let (a, b) = (keys(1), keys(2));
        // The same seed gives the same keys (the simulator stays reproducible) ...
        assert_eq!(a, keys(1));
        // ... another seed other keys for the same indices.
        assert_ne!(a.iter().map(|k| k.1).collect::<Vec<_>>(), b.iter().map(|k| k.1).collect::<Vec<_>>());
        for (i, &(id, key)) in a.iter().enumerate() {
            assert_eq!(id, i as u32 + 1);
            assert_eq!((key >> 8) & 0x3FFFF, id, "index in the slot field");
        }
        // Not index << 8 with a counter byte: the low bytes are not all equal.
        assert!(a.iter().any(|k| k.1 as u8 != a[0].1 as u8));
    }

    #[test]
    fn reused_slot_gets_a_new_key_and_the_stale_one_fails() {
        // A tiny table reuses one index at once: 2 bits of index, 22 of generation.
        let mut t = KeyTable::new(2, 9);
        let mut seen = std::collections::HashSet::new();
        let mut last = None;
        for _ in 0..1000 {
            let (id, key) = t.add_mr(mr(1, AccessFlags::LOCAL_WRITE)).unwrap();
            assert!(seen.insert(key), "key {key:#x} handed out twice");
            if let Some(stale) = last {
                assert_eq!(t.check_lkey(stale, 1, 0x7000_0000, 1, AccessFlags::EMPTY), Err(KeyError::BadKey));
            }
            assert!(t.check_lkey(key, 1, 0x7000_0000, 1, AccessFlags::EMPTY).is_ok());
            assert!(t.remove(id));
            last = Some(key);
        }
    }

    #[test]
    fn mr_and_type1_window_cannot_be_invalidated() {
        let mut t = KeyTable::new(100, 3);
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
        let (mr_id, key) = t.add_mr(mr(1, access)).unwrap();
        assert_eq!(t.invalidate(key, 1, Some(0x11)), Err(KeyError::NotInvalidatable));
        assert_eq!(t.invalidate(key, 1, None), Err(KeyError::NotInvalidatable));
        assert!(t.check_rkey(key, 1, 0x11, 0x7000_0000, 8, AccessFlags::REMOTE_WRITE).is_ok());
        let (mw, k0) = t.add_mw(1, MwType::Type1).unwrap();
        let k1 = (k0 & !0xFF) | (k0.wrapping_add(1) & 0xFF);
        let b = MwBind { mw, rkey: k1, mr: mr_id, addr: 0x7000_0000, length: 64, access: AccessFlags::REMOTE_WRITE };
        t.bind_mw(&b, 1, 0x11).unwrap();
        assert_eq!(t.invalidate(k1, 1, Some(0x11)), Err(KeyError::NotInvalidatable));
        assert!(t.check_rkey(k1, 1, 0x11, 0x7000_0000, 8, AccessFlags::REMOTE_WRITE).is_ok());
        // A window key whose slot bits are not the window's is refused at bind.
        let wrong = k1 ^ (1 << 31);
        assert_eq!(t.bind_mw(&MwBind { rkey: wrong, ..b }, 1, 0x11), Err(KeyError::BadKey));
    }
}
