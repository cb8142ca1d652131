//! The registered memory of an rsocket: receive/send/target buffers ([`Region`]) that the peer
//! writes into at any time (reached through raw pointers only), `riomap` mappings, and the
//! `#[repr(C)]` layout of the SGEs and iomap entries the peer writes into the target buffer.

use super::dp::*;
use super::proto::*;
use libc::{c_int, c_void};

/// A buffer this side mapped with `riomap(PROT_WRITE)`: its slot in the peer's target iomap.
pub(super) struct IoMap {
    pub(super) mr: *mut ibv_mr,
    pub(super) offset: u64,
    pub(super) sent: bool,
}

/// Memory the peer writes into (receive buffer, target SGL/iomap) or the QP reads from (send
/// buffer): allocated here, registered, freed after deregistration. Accessed through raw
/// pointers only: the remote side writes into it at any time.
pub(super) struct Region {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
    pub(super) mr: *mut ibv_mr,
}

impl Region {
    pub(super) fn new(pd: *mut ibv_pd, len: usize, access: c_int) -> Result<Region, i32> {
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
    pub(super) fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }
    pub(super) fn rkey(&self) -> u32 {
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

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct RsSgeRaw {
    pub(super) addr: u64,
    pub(super) key: u32,
    pub(super) length: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct RsIomapRaw {
    pub(super) offset: u64,
    pub(super) sge: RsSgeRaw,
}

const _: () = assert!(std::mem::size_of::<RsIomapRaw>() == IOMAP_LEN && std::mem::size_of::<RsSgeRaw>() == SGE_LEN);
