//! The table of rdma_cm IDs, keyed by handle ([`IdKey`]), not by the `rdma_cm_id` pointer.
//!
//! Every ID gets a handle when it is made (`rdma_create_id`, a CONNECT_REQUEST's new ID): a
//! number from a 64-bit counter, never given out twice in the process's life, so a handle kept
//! after its ID went names nothing. Inside the library everything that refers to an ID (the
//! comm IDs, the listeners, a request's listener, a CONNECT_REQUEST's owner) holds its handle.
//!
//! The pointer is only the C side's name for the ID: a call that takes one turns it into the
//! handle first ([`IdTable::key_of`]), which knows only the pointers of live IDs. A pointer
//! that is not one of them (an ID already destroyed, garbage, a pointer into another of our
//! objects) is refused (EINVAL) before anything reads through it. Reading a handle stored
//! beside the C struct would need the pointer trusted first, so the table is the check.

use crate::abi::*;
use crate::verbs::*;
use libc::{c_int, c_void};
use std::collections::HashMap;
use std::net::IpAddr;
use std::ptr;
use urxe::cm::rdma_id::RdmaId;

/// One group an ID has joined.
#[derive(Clone, Copy, Debug)]
pub struct Join {
    pub group: IpAddr,
    pub mgid: [u8; 16],
    pub context: *mut c_void,
    pub send_only: bool,
}

/// The Rust side of one `rdma_cm_id`: the sans-IO core's [`RdmaId`] (state, addresses,
/// connection; reached through `Deref`) and the C-side objects beside it.
pub struct Id {
    pub core: RdmaId,
    /// The C struct the application holds (set by [`IdTable::insert`]).
    pub c: *mut rdma_cm_id,
    pub channel: usize,
    /// A synchronous ID (created with a NULL channel) owns `channel`.
    pub sync: bool,
    /// From `rdma_create_ep` on a passive endpoint: every request gets a QP like this.
    pub ep_qp: Option<(ibv_qp_init_attr, *mut ibv_pd)>,
    /// CQs and channels this library made for the QP (`rdma_create_qp` without CQs).
    pub own_cqs: bool,
    pub path_rec: *mut ibv_sa_path_rec,
    pub local_ece: ibv_ece,
    /// Multicast groups joined (`rdma_join_multicast`).
    pub mcast: Vec<Join>,
    /// A new ID whose CONNECT_REQUEST waits, undelivered, on this listener's channel (0: none).
    pub request_of: IdKey,
    /// Its number in the process's creation order, from 0 (a fault plan's `cm-id=`).
    pub created: u64,
}

impl Id {
    pub fn new(ps: c_int, channel: usize, sync: bool) -> Id {
        static CREATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let qp_type = if ps == ps::UDP || ps == ps::IPOIB { qp_type::UD } else { qp_type::RC };
        Id {
            core: RdmaId::new(ps, qp_type),
            c: ptr::null_mut(),
            channel,
            sync,
            ep_qp: None,
            own_cqs: false,
            path_rec: ptr::null_mut(),
            local_ece: ibv_ece::default(),
            mcast: Vec::new(),
            request_of: 0,
            created: CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl std::ops::Deref for Id {
    type Target = RdmaId;
    fn deref(&self) -> &RdmaId {
        &self.core
    }
}

impl std::ops::DerefMut for Id {
    fn deref_mut(&mut self) -> &mut RdmaId {
        &mut self.core
    }
}

/// An ID's handle (see the module text): never a pointer value, never reused.
pub type IdKey = usize;

/// The live IDs by handle, and the pointer of each.
#[derive(Default)]
pub struct IdTable {
    ids: HashMap<IdKey, Id>,
    by_ptr: HashMap<usize, IdKey>,
    /// The last handle given out (0 is never one: "no ID" in `Id::request_of`).
    last: IdKey,
}

impl IdTable {
    /// Adds the ID whose C struct is `c`; its handle.
    pub fn insert(&mut self, c: *mut rdma_cm_id, mut id: Id) -> IdKey {
        self.last += 1;
        let k = self.last;
        id.c = c;
        self.by_ptr.insert(c as usize, k);
        self.ids.insert(k, id);
        k
    }

    /// The handle of the live ID whose C struct is `c` (None: not one of ours, or gone).
    pub fn key_of(&self, c: *const rdma_cm_id) -> Option<IdKey> {
        self.by_ptr.get(&(c as usize)).copied()
    }

    /// The C struct of `k` (NULL when `k` names no live ID).
    pub fn ptr(&self, k: IdKey) -> *mut rdma_cm_id {
        self.ids.get(&k).map_or(std::ptr::null_mut(), |i| i.c)
    }

    pub fn get(&self, k: &IdKey) -> Option<&Id> {
        self.ids.get(k)
    }

    pub fn get_mut(&mut self, k: &IdKey) -> Option<&mut Id> {
        self.ids.get_mut(k)
    }

    pub fn contains_key(&self, k: &IdKey) -> bool {
        self.ids.contains_key(k)
    }

    /// Takes `k` out; its pointer names nothing from now on.
    pub fn remove(&mut self, k: &IdKey) -> Option<Id> {
        let id = self.ids.remove(k)?;
        self.by_ptr.remove(&(id.c as usize));
        Some(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&IdKey, &Id)> {
        self.ids.iter()
    }

    pub fn values(&self) -> impl Iterator<Item = &Id> {
        self.ids.values()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Id> {
        self.ids.values_mut()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

impl std::ops::Index<&IdKey> for IdTable {
    type Output = Id;
    fn index(&self, k: &IdKey) -> &Id {
        &self.ids[k]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::ps;

    fn fake(n: usize) -> *mut rdma_cm_id {
        // Never dereferenced: the table only compares pointer values.
        (0x1000 * n) as *mut rdma_cm_id
    }

    #[test]
    fn handles_are_not_pointers_and_never_come_back() {
        let mut t = IdTable::default();
        let a = t.insert(fake(1), Id::new(ps::TCP, 0, false));
        let b = t.insert(fake(2), Id::new(ps::TCP, 0, false));
        assert_ne!(a, b);
        assert_ne!(a, fake(1) as usize);
        assert_eq!((t.key_of(fake(1)), t.key_of(fake(2))), (Some(a), Some(b)));
        assert_eq!(t.ptr(b), fake(2));
        assert!(t.remove(&a).is_some());
        assert!(t.remove(&a).is_none(), "removed twice");
        assert_eq!(t.key_of(fake(1)), None, "the pointer of a removed ID names nothing");
        assert!(t.ptr(a).is_null());
        // The allocator may hand the same address out again: it names the new ID, under a
        // new handle; the old handle stays dead.
        let c = t.insert(fake(1), Id::new(ps::TCP, 0, false));
        assert!(c != a && c != b);
        assert_eq!(t.key_of(fake(1)), Some(c));
        assert!(t.get(&a).is_none());
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_pointer_that_is_not_an_id_is_refused() {
        let mut t = IdTable::default();
        t.insert(fake(1), Id::new(ps::TCP, 0, false));
        for p in [fake(3), (fake(1) as usize + 8) as *mut rdma_cm_id, std::ptr::null_mut()] {
            assert_eq!(t.key_of(p), None, "{p:?}");
        }
    }
}
