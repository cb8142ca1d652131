//! Memory regions: `ibv_reg_mr` and its iova / dma-buf variants, `ibv_rereg_mr`,
//! `ibv_dereg_mr`, and the import verbs (`ibv_import_mr`; device memory is in `dm`).

use super::{destroy_plain, dev_of, free_plain};
use crate::abi::*;
use crate::export::{non_null, set_errno};
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint, c_void};
use urxe::engine::{AccessFlags, MrChange};

pub(super) fn check_access(access: u32) -> Result<AccessFlags, i32> {
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
        dm: None,
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

/// `IBV_REREG_MR_ERR_INPUT` / `IBV_REREG_MR_ERR_CMD`. The fork codes (-2, -3, -5) never
/// occur: urxe pins nothing, `ibv_dontfork_range` / `ibv_dofork_range` cannot fail.
const REREG_ERR_INPUT: c_int = IBV_REREG_MR_ERR_INPUT as i64 as c_int;
const REREG_ERR_CMD: c_int = IBV_REREG_MR_ERR_CMD as i64 as c_int;
const REREG_CHANGE_TRANSLATION: c_int = IBV_REREG_MR_CHANGE_TRANSLATION as c_int;
const REREG_CHANGE_PD: c_int = IBV_REREG_MR_CHANGE_PD as c_int;
const REREG_CHANGE_ACCESS: c_int = IBV_REREG_MR_CHANGE_ACCESS as c_int;
const REREG_FLAGS: c_int = REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS;

/// The command half of `ibv_rereg_mr`: what the kernel's `ib_uverbs_rereg_mr` checks
/// (flags 0, a PD of another context, bad access: EINVAL), the new range as `ibv_reg_mr`
/// checks it (also when only the access changes: new rights over the old range), then the
/// engine. On success the `ibv_mr` shows the new PD / address / length; keys stay.
///
/// # Safety
/// `mr` is a live MR of ours; `pd` is NULL or a live PD of ours.
unsafe fn rereg_cmd(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> Result<(), i32> {
    if flags == 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller contract.
    let m: &UrxeMr = unsafe { shell(mr) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(m.ibv.context) }?;
    if m.dm.is_some() {
        // Device memory MRs are not re-registered (the kernel says EINVAL for them too).
        return Err(libc::EINVAL);
    }
    let mut change = MrChange::default();
    if flags & REREG_CHANGE_PD != 0 {
        // SAFETY: caller contract.
        let p: &UrxePd = unsafe { shell(pd) }.map_err(|_| libc::EINVAL)?;
        if p.ibv.context != m.ibv.context {
            return Err(libc::EINVAL);
        }
        change.pd = Some(p.id);
    }
    let new_access = if flags & REREG_CHANGE_ACCESS != 0 {
        let a = check_access(access as u32)?;
        change.access = Some(a);
        a
    } else {
        glue::query_mr(dev, m.id)?.access
    };
    let (base, len) = if flags & REREG_CHANGE_TRANSLATION != 0 {
        change.translation = Some((addr as u64, length as u64, addr as u64));
        (addr as u64, length as u64)
    } else {
        (m.ibv.addr as u64, m.ibv.length as u64)
    };
    if change.translation.is_some() || change.access.is_some() {
        urxe::transport::registration::check(base, len, new_access)?;
    }
    glue::rereg_mr(dev, m.id, &change)?;
    let p = mr as *mut UrxeMr;
    // SAFETY: the caller owns the MR handle; written through the handle, the shell reference
    // is not used after.
    unsafe {
        if flags & REREG_CHANGE_PD != 0 {
            (*p).ibv.pd = pd;
        }
        if flags & REREG_CHANGE_TRANSLATION != 0 {
            (*p).ibv.addr = addr;
            (*p).ibv.length = length;
        }
    }
    Ok(())
}

export! {
    /// `ibv_rereg_mr(3)`: 0, `IBV_REREG_MR_ERR_INPUT` (unknown flags, a translation without
    /// address or length, access flags without IBV_REREG_MR_CHANGE_ACCESS) or
    /// `IBV_REREG_MR_ERR_CMD` (the re-registration itself was refused; the MR is unchanged),
    /// with errno set.
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int as value(REREG_ERR_CMD) {
        let input_ok = !mr.is_null()
            && flags & !REREG_FLAGS == 0
            && (flags & REREG_CHANGE_TRANSLATION == 0 || (length != 0 && !addr.is_null()))
            && (access == 0 || flags & REREG_CHANGE_ACCESS != 0);
        if !input_ok {
            set_errno(libc::EINVAL);
            return REREG_ERR_INPUT;
        }
        // SAFETY: caller passes an MR of ours and NULL or a PD of ours.
        match unsafe { rereg_cmd(mr, flags, pd, addr, length, access) } {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                REREG_ERR_CMD
            }
        }
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
            dm: None,
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
