//! Memory regions: `ibv_reg_mr` and its iova / dma-buf variants, `ibv_rereg_mr`,
//! `ibv_dereg_mr`, and the import verbs (`ibv_import_mr`, and `ibv_import_dm`: no device
//! memory).

use super::{destroy_plain, dev_of, free_plain};
use crate::abi::*;
use crate::context::ctx_from;
use crate::export::{non_null, set_errno};
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint, c_void};
use urxe::engine::AccessFlags;

fn check_access(access: u32) -> Result<AccessFlags, i32> {
    let a = AccessFlags(access);
    if a.unknown_bits() != 0 {
        return Err(libc::EINVAL);
    }
    // IBA: remote write/atomic access requires local write.
    if a.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC) && !a.contains(AccessFlags::LOCAL_WRITE) {
        return Err(libc::EINVAL);
    }
    if a.contains(AccessFlags::ON_DEMAND) {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(a)
}

/// # Safety
/// `pd` is NULL or a live PD of ours.
unsafe fn reg_mr_common(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> Result<*mut ibv_mr, i32> {
    // SAFETY: caller contract.
    let p: &UrxePd = unsafe { shell(pd) }?;
    let access = check_access(access)?;
    if length == 0 && addr.is_null() {
        return Err(libc::EINVAL);
    }
    urxe::transport::registration::check(addr as u64, length as u64, access)?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(p.ibv.context) }?;
    let keys = glue::reg_mr(dev, p.id, addr as u64, length as u64, iova, access)?;
    let mr = Box::new(UrxeMr {
        ibv: ibv_mr { context: p.ibv.context, pd, addr, length, handle: keys.id, lkey: keys.lkey, rkey: keys.rkey },
        id: keys.id,
    });
    Ok(Box::into_raw(mr) as *mut ibv_mr)
}

export! {
    /// `ibv_reg_mr(3)`.
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr as ptr {
        // SAFETY: caller passes a PD of ours.
        unsafe { reg_mr_common(pd, addr, length, addr as u64, access as u32) }
    }
}

export! {
    /// `ibv_reg_mr_iova(3)`.
    fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr as ptr {
        // SAFETY: caller passes a PD of ours.
        unsafe { reg_mr_common(pd, addr, length, iova, access as u32) }
    }
}

export! {
    /// `ibv_reg_mr_iova2(3)`: where the `ibv_reg_mr` macro sends non-constant access flags.
    fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> *mut ibv_mr as ptr {
        // SAFETY: caller passes a PD of ours.
        unsafe { reg_mr_common(pd, addr, length, iova, access) }
    }
}

export! {
    /// `ibv_reg_dmabuf_mr(3)`: no dma-buf in a software device (EOPNOTSUPP).
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr as ptr {
        non_null(pd)?;
        Err(libc::EOPNOTSUPP)
    }
}

/// `IBV_REREG_MR_ERR_INPUT` / `IBV_REREG_MR_ERR_CMD`.
const REREG_ERR_INPUT: c_int = -1;
const REREG_ERR_CMD: c_int = -4;

export! {
    /// `ibv_rereg_mr(3)`: 0 or an `IBV_REREG_MR_ERR_*` code with errno set. urxe does not
    /// re-register in place (deregister and register again): ERR_CMD + EOPNOTSUPP.
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int as value(REREG_ERR_CMD) {
        if mr.is_null() || flags & !0x7 != 0 || flags == 0 {
            set_errno(libc::EINVAL);
            return REREG_ERR_INPUT;
        }
        set_errno(libc::EOPNOTSUPP);
        REREG_ERR_CMD
    }
}

export! {
    /// `ibv_dereg_mr(3)`.
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int as errno {
        // SAFETY: caller passes an MR of ours (from reg_mr_common / ibv_import_mr).
        unsafe { destroy_plain(mr, |s: &UrxeMr| s.ibv.context, |dev, s| glue::dereg_mr(dev, s.id)) }
    }
}

export! {
    /// `ibv_import_mr(3)`: a new shell over MR `mr_handle` of this process, which must belong
    /// to `pd`.
    fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr as ptr {
        // SAFETY: caller passes a PD of ours.
        let p: &UrxePd = unsafe { shell(pd) }?;
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(p.ibv.context) }?;
        let info = glue::query_mr(dev, mr_handle).map_err(|_| libc::EINVAL)?;
        if info.pd != p.id {
            return Err(libc::EINVAL);
        }
        let mr = Box::new(UrxeMr {
            ibv: ibv_mr {
                context: p.ibv.context,
                pd,
                addr: info.addr as usize as *mut c_void,
                length: info.len as usize,
                handle: mr_handle,
                lkey: info.lkey,
                rkey: info.rkey,
            },
            id: mr_handle,
        });
        Ok(Box::into_raw(mr) as *mut ibv_mr)
    }
}

export! {
    /// `ibv_unimport_mr(3)`: frees the shell; the MR stays registered.
    fn ibv_unimport_mr(mr: *mut ibv_mr) as void {
        // SAFETY: caller passes an MR of ours (from reg_mr_common / ibv_import_mr).
        unsafe { free_plain::<_, UrxeMr>(mr) }
    }
}

export! {
    /// `ibv_import_dm(3)`: no device memory.
    fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut c_void as ptr {
        // SAFETY: caller passes a context of ours.
        unsafe { ctx_from(context) }?;
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `ibv_unimport_dm(3)`.
    fn ibv_unimport_dm(dm: *mut c_void) as void {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flag_rules() {
        assert!(check_access(IBV_ACCESS_LOCAL_WRITE as u32).is_ok());
        assert_eq!(check_access(IBV_ACCESS_REMOTE_WRITE as u32), Err(libc::EINVAL));
        assert_eq!(check_access(IBV_ACCESS_REMOTE_ATOMIC as u32), Err(libc::EINVAL));
        assert!(check_access((IBV_ACCESS_REMOTE_READ) as u32).is_ok());
        assert_eq!(check_access(1 << 29), Err(libc::EINVAL));
        assert_eq!(check_access((IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE) as u32), Err(libc::EOPNOTSUPP));
    }
}
