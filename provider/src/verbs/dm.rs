//! Device memory: `ibv_alloc_dm` / `ibv_free_dm`, the copies behind `ibv_memcpy_to_dm` /
//! `ibv_memcpy_from_dm`, `ibv_reg_dm_mr` (zero-based MRs over it, usable locally and
//! remotely like any MR), and `ibv_import_dm` / `ibv_unimport_dm` (a DM of this process seen
//! through another context).
//!
//! A software device has no on-chip memory: urxe's "device memory" is a block of the
//! process's heap owned by the DM, up to [`MAX_DM_SIZE`] bytes in all per process. What the
//! verbs promise holds: the memory is only reachable through the DM's copy functions and MRs,
//! copies are 4-byte granular as on hardware (EINVAL otherwise) and bounded by the DM
//! (EFAULT), an MR must be zero-based and inside the DM, and the DM cannot be freed while an
//! MR uses it (EBUSY).

use super::dev_of;
use super::mr::check_access;
use crate::abi::*;
use crate::context::ctx_from;
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint, c_void};
use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use urxe::engine::AccessFlags;

/// Device memory per process (`max_dm_size`), in bytes.
pub const MAX_DM_SIZE: u64 = 1 << 20;
/// Largest `log_align_req`: the block is at most page aligned.
const MAX_LOG_ALIGN: u32 = 12;
/// What an MR over device memory may grant (as mlx5's MEMIC).
const DM_MR_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::ZERO_BASED);

/// Every live DM of the process by handle, and the bytes they hold.
struct Registry {
    dms: HashMap<u32, Arc<DmMem>>,
    bytes: u64,
    next: u32,
}

static DMS: Mutex<Option<Registry>> = Mutex::new(None);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = DMS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(|| Registry { dms: HashMap::new(), bytes: 0, next: 1 }))
}

/// A new shell over `mem` (handle `handle`) in `context`.
fn new_shell(context: *mut ibv_context, handle: u32, mem: Arc<DmMem>) -> *mut ibv_dm {
    let dm = Box::new(UrxeDm {
        ibv: ibv_dm {
            context,
            memcpy_to_dm: Some(memcpy_to_dm_op),
            memcpy_from_dm: Some(memcpy_from_dm_op),
            comp_mask: 0,
            handle,
        },
        mem,
    });
    Box::into_raw(dm) as *mut ibv_dm
}

/// `verbs_context.alloc_dm` (`ibv_alloc_dm(3)`): EINVAL for a zero length, unknown
/// `comp_mask` bits or an alignment above a page; ENOMEM beyond `max_dm_size` in all.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn alloc_dm_op(context: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let attr = non_null(attr)?;
    // SAFETY: caller passes a readable attribute struct.
    let a = unsafe { *attr };
    if a.comp_mask != 0 || a.length == 0 || a.log_align_req > MAX_LOG_ALIGN {
        return Err(libc::EINVAL);
    }
    if a.length as u64 > MAX_DM_SIZE {
        return Err(libc::ENOMEM);
    }
    // Whole 8-byte words, at least cache-line aligned.
    let size = a.length.next_multiple_of(8);
    let align = (1usize << a.log_align_req).max(64);
    let layout = std::alloc::Layout::from_size_align(size, align).map_err(|_| libc::EINVAL)?;
    with_registry(|r| {
        if r.bytes + a.length as u64 > MAX_DM_SIZE {
            return Err(libc::ENOMEM);
        }
        // SAFETY: `layout` has a non-zero size.
        let p = ptr::NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or(libc::ENOMEM)?;
        let mem = Arc::new(DmMem { ptr: p, layout, len: a.length, mrs: AtomicU32::new(0) });
        let handle = r.next;
        r.next = r.next.wrapping_add(1).max(1);
        r.dms.insert(handle, mem.clone());
        r.bytes += a.length as u64;
        Ok(new_shell(context, handle, mem))
    })
}

/// `verbs_context.free_dm` (`ibv_free_dm(3)`): 0, or EBUSY while an MR uses the DM.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn free_dm_op(dm: *mut ibv_dm) -> c_int {
    // SAFETY: caller passes a DM of ours.
    let d: &UrxeDm = unsafe { shell(dm) }?;
    if d.mem.mrs.load(Ordering::Acquire) != 0 {
        return Err(libc::EBUSY);
    }
    let handle = d.ibv.handle;
    with_registry(|r| {
        if r.dms.remove(&handle).is_some() {
            r.bytes = r.bytes.saturating_sub(d.mem.len as u64);
        }
    });
    // SAFETY: made by Box::into_raw in new_shell; the caller frees it once.
    drop(unsafe { Box::from_raw(dm as *mut UrxeDm) });
    Ok(())
}

/// The DM memory at `[offset, offset+len)`: EFAULT outside the DM, EINVAL unless both are
/// multiples of 4.
fn dm_range(mem: &DmMem, offset: u64, len: usize) -> Result<*mut u8, i32> {
    let end = offset.checked_add(len as u64).ok_or(libc::EFAULT)?;
    if end > mem.len as u64 {
        return Err(libc::EFAULT);
    }
    if !offset.is_multiple_of(4) || !len.is_multiple_of(4) {
        return Err(libc::EINVAL);
    }
    Ok(mem.ptr.as_ptr().wrapping_add(offset as usize))
}

/// `ibv_dm.memcpy_to_dm` (`ibv_memcpy_to_dm(3)`): 0 or errno.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn memcpy_to_dm_op(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    // SAFETY: caller passes a DM of ours.
    let d: &UrxeDm = unsafe { shell(dm) }?;
    let dst = dm_range(&d.mem, dm_offset, length)?;
    if length == 0 {
        return Ok(());
    }
    let src = non_null(host_addr as *mut u8)?;
    // SAFETY: `dst` has `length` bytes inside the DM block (checked); the caller's buffer
    // is readable for `length` bytes; the two cannot overlap (the block is ours).
    unsafe { ptr::copy(src, dst, length) };
    Ok(())
}

/// `ibv_dm.memcpy_from_dm` (`ibv_memcpy_from_dm(3)`): 0 or errno.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn memcpy_from_dm_op(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    // SAFETY: caller passes a DM of ours.
    let d: &UrxeDm = unsafe { shell(dm) }?;
    let src = dm_range(&d.mem, dm_offset, length)?;
    if length == 0 {
        return Ok(());
    }
    let dst = non_null(host_addr as *mut u8)?;
    // SAFETY: `src` has `length` bytes inside the DM block (checked); the caller's buffer
    // is writable for `length` bytes.
    unsafe { ptr::copy(src, dst, length) };
    Ok(())
}

/// `verbs_context.reg_dm_mr` (`ibv_reg_dm_mr(3)`): a zero-based MR over
/// `[dm_offset, dm_offset+length)` of the DM. EINVAL without IBV_ACCESS_ZERO_BASED, with
/// rights device memory cannot grant, or a range outside the DM; the DM and the PD must
/// belong to the same device.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn reg_dm_mr_op(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: caller passes a PD of ours.
    let p: &UrxePd = unsafe { shell(pd) }?;
    // SAFETY: caller passes a DM of ours.
    let d: &UrxeDm = unsafe { shell(dm) }?;
    let access = check_access(access)?;
    if !access.contains(AccessFlags::ZERO_BASED) || access.0 & !DM_MR_ACCESS.0 != 0 {
        return Err(libc::EINVAL);
    }
    let len = d.mem.len as u64;
    if dm_offset > len || length as u64 > len - dm_offset {
        return Err(libc::EINVAL);
    }
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(p.ibv.context) }?;
    let host = d.mem.ptr.as_ptr() as u64 + dm_offset;
    let keys = glue::reg_mr(dev, p.id, host, length as u64, 0, access)?;
    let mr = Box::new(UrxeMr {
        ibv: ibv_mr {
            context: p.ibv.context,
            pd,
            addr: ptr::null_mut(),
            length,
            handle: keys.id,
            lkey: keys.lkey,
            rkey: keys.rkey,
        },
        id: keys.id,
        dm: Some(DmUse::new(d.mem.clone())),
    });
    Ok(Box::into_raw(mr) as *mut ibv_mr)
}

/// `ibv_import_dm(3)`: a new shell in `context` over DM `dm_handle` of this process
/// (EINVAL if there is none).
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let mem = with_registry(|r| r.dms.get(&dm_handle).cloned()).ok_or(libc::EINVAL)?;
    Ok(new_shell(context, dm_handle, mem))
}

/// `ibv_unimport_dm(3)`: frees the shell; the DM stays (`ibv_free_dm` frees it).
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_unimport_dm(dm: *mut ibv_dm) {
    if !dm.is_null() {
        // SAFETY: caller passes a DM shell of ours, made by Box::into_raw in new_shell.
        drop(unsafe { Box::from_raw(dm as *mut UrxeDm) });
    }
}
