//! Memory regions: `ibv_reg_mr` and its iova / dma-buf variants, `ibv_rereg_mr`,
//! `ibv_dereg_mr`, the import verbs (`ibv_import_mr`; device memory is in `dm`), and
//! on-demand paging: `IBV_ACCESS_ON_DEMAND` MRs, the implicit MR over the whole address space,
//! `ibv_advise_mr` and the ODP capabilities `ibv_query_device_ex` reports.
//!
//! urxe pins no MR, so every MR already behaves as ODP does on a NIC: each access is checked
//! when it happens and a page that is not there is an error completion or a NAK, never a
//! signal (src/transport/fault.rs). What `IBV_ACCESS_ON_DEMAND` changes is registration: the
//! range's mappings are not checked (it may have holes, or be mapped later), and
//! `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)` registers the implicit MR, whose
//! keys reach any address of the process — what the application asks for, as with a NIC.

use super::{destroy_plain, dev_of, free_plain};
use crate::abi::*;
use crate::export::{non_null, set_errno};
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint, c_void};
use urxe::engine::{AccessFlags, MrChange};
use urxe::host::registration;

pub(super) fn check_access(access: u32) -> Result<AccessFlags, i32> {
    let a = AccessFlags(access);
    if a.unknown_bits() != 0 {
        return Err(libc::EINVAL);
    }
    // IBA: remote write/atomic access requires local write.
    if a.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC) && !a.contains(AccessFlags::LOCAL_WRITE) {
        return Err(libc::EINVAL);
    }
    Ok(a)
}

/// The range checks of a registration or of a new translation. An ordinary MR: what the
/// kernel's `ib_umem_get` answers (the mappings must be there with the access the MR needs). An
/// ODP MR: only no wrap; the implicit MR (NULL, SIZE_MAX) must be addressed from iova 0.
fn check_range(addr: u64, len: u64, iova: u64, access: AccessFlags) -> Result<(), i32> {
    if !access.contains(AccessFlags::ON_DEMAND) {
        return registration::check(addr, len, access);
    }
    if registration::is_implicit(addr, len) && iova != 0 {
        return Err(libc::EINVAL);
    }
    registration::check_on_demand(addr, len)
}

/// `ibv_odp_caps` and `xrc_odp_caps` for `ibv_query_device_ex`, given the device's capability
/// flags. Every transport reaches memory the same way (checked at use, nothing pinned), so an
/// ODP MR may serve every operation the transport has: RC sends, receives, RDMA WRITE/READ,
/// atomics and SRQ receives; UC sends, receives, WRITEs and SRQ receives; UD sends and (SRQ)
/// receives; XRC as RC, when the device has XRC.
pub fn odp_caps(device_cap_flags: c_uint) -> (ibv_odp_caps, u32) {
    /// `IBV_DEVICE_XRC` of `enum ibv_device_cap_flags`.
    const DEVICE_XRC: c_uint = 1 << 20;
    let b = |v: u64| v as u32;
    let ud = b(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV);
    let uc = ud | b(IBV_ODP_SUPPORT_WRITE);
    let rc = uc | b(IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC);
    let caps = ibv_odp_caps {
        general_caps: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
        per_transport_caps: ibv_odp_caps_per_transport { rc_odp_caps: rc, uc_odp_caps: uc, ud_odp_caps: ud },
    };
    (caps, if device_cap_flags & DEVICE_XRC != 0 { rc } else { 0 })
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
    check_range(addr as u64, length as u64, iova, access)?;
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

/// `ibv_reg_mr(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr {
    // SAFETY: caller passes a PD of ours.
    unsafe { reg_mr_common(pd, addr, length, addr as u64, access as u32) }
}

/// `ibv_reg_mr_iova(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: caller passes a PD of ours.
    unsafe { reg_mr_common(pd, addr, length, iova, access as u32) }
}

/// `ibv_reg_mr_iova2(3)`: where the `ibv_reg_mr` macro sends non-constant access flags.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: caller passes a PD of ours.
    unsafe { reg_mr_common(pd, addr, length, iova, access) }
}

/// `ibv_reg_dmabuf_mr(3)`: no dma-buf in a software device (EOPNOTSUPP).
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr {
    non_null(pd)?;
    Err(libc::EOPNOTSUPP)
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
    let (base, len, iova) = if flags & REREG_CHANGE_TRANSLATION != 0 {
        change.translation = Some((addr as u64, length as u64, addr as u64));
        (addr as u64, length as u64, addr as u64)
    } else {
        (m.ibv.addr as u64, m.ibv.length as u64, glue::query_mr(dev, m.id)?.iova)
    };
    if change.translation.is_some() || change.access.is_some() {
        check_range(base, len, iova, new_access)?;
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

/// `ibv_rereg_mr(3)`: 0, `IBV_REREG_MR_ERR_INPUT` (unknown flags, a translation without
/// address or length, access flags without IBV_REREG_MR_CHANGE_ACCESS) or
/// `IBV_REREG_MR_ERR_CMD` (the re-registration itself was refused; the MR is unchanged),
/// with errno set.
#[urxe_cabi::export(value(REREG_ERR_CMD))]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
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

/// `ibv_dereg_mr(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: caller passes an MR of ours (from reg_mr_common / ibv_import_mr).
    unsafe { destroy_plain(mr, |s: &UrxeMr| s.ibv.context, |dev, s| glue::dereg_mr(dev, s.id)) }
}

/// `ibv_import_mr(3)`: a new shell over MR `mr_handle` of this process, which must belong
/// to `pd`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr {
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

/// `ibv_unimport_mr(3)`: frees the shell; the MR stays registered.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_unimport_mr(mr: *mut ibv_mr) {
    // SAFETY: caller passes an MR of ours (from reg_mr_common / ibv_import_mr).
    unsafe { free_plain::<_, UrxeMr>(mr) }
}

/// `verbs_context.advise_mr` (`ibv_advise_mr(3)`): 0 or the errno. Every SGE is checked
/// before any page is touched, as the kernel's mlx5 driver checks them: a bad PD or unknown
/// flags EINVAL, an advice other than the three prefetches EOPNOTSUPP, no SGE EINVAL; a
/// key naming nothing, or an MR that is not ODP, ENOENT; a memory window's key EINVAL; an
/// MR of another PD, or PREFETCH_WRITE on an MR that is not writable, EPERM; a range outside
/// the MR EFAULT. Then PREFETCH / PREFETCH_WRITE fault the pages in for reading / writing
/// (nothing stays pinned): with IBV_ADVISE_MR_FLAG_FLUSH a page that cannot be faulted in
/// (not mapped, or not with that access) is EFAULT; without it the call is best effort and
/// such a page is left for the access to fail on. PREFETCH_NO_FAULT faults nothing: urxe
/// has no translation table to fill, pages present to the CPU are present to the device.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn advise_mr_op(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: caller passes a PD of ours (or junk we refuse with EINVAL).
    let p: &UrxePd = unsafe { shell(pd) }.map_err(|_| libc::EINVAL)?;
    if u64::from(flags) & !IBV_ADVISE_MR_FLAG_FLUSH != 0 {
        return Err(libc::EINVAL);
    }
    let write = match u64::from(advice) {
        IBV_ADVISE_MR_ADVICE_PREFETCH => Some(false),
        IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE => Some(true),
        IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT => None,
        _ => return Err(libc::EOPNOTSUPP),
    };
    let sg_list = non_null(sg_list).map_err(|_| libc::EINVAL)?;
    if num_sge == 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(p.ibv.context) }?;
    // SAFETY: the caller passes `num_sge` readable SGEs.
    let sges = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    // Grown as the list is read (never sized from `num_sge` alone).
    let mut ranges = Vec::new();
    for sge in sges {
        let info = glue::mr_by_key(dev, sge.lkey)?;
        if !info.access.contains(AccessFlags::ON_DEMAND) {
            return Err(libc::ENOENT);
        }
        if info.pd != p.id || (write == Some(true) && !registration::writable(info.access)) {
            return Err(libc::EPERM);
        }
        let off = sge.addr.checked_sub(info.iova).ok_or(libc::EFAULT)?;
        if off.checked_add(u64::from(sge.length)).is_none_or(|end| end > info.len) {
            return Err(libc::EFAULT);
        }
        ranges.push((info.addr.checked_add(off).ok_or(libc::EFAULT)?, u64::from(sge.length)));
    }
    let Some(write) = write else { return Ok(()) };
    let sync = u64::from(flags) & IBV_ADVISE_MR_FLAG_FLUSH != 0;
    for (addr, len) in ranges {
        if let Err(e) = registration::prefetch(addr, len, write) {
            if sync {
                return Err(e);
            }
        }
    }
    Ok(())
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
        assert!(check_access((IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE) as u32).is_ok());
    }

    #[test]
    fn odp_ranges_skip_the_mapping_check_but_not_the_wrap_check() {
        let odp = AccessFlags(IBV_ACCESS_ON_DEMAND as u32) | AccessFlags::LOCAL_WRITE;
        assert_eq!(check_range(0, u64::MAX, 0, odp), Ok(()), "implicit");
        assert_eq!(check_range(0, u64::MAX, 4096, odp), Err(libc::EINVAL), "implicit at another iova");
        assert_eq!(check_range(0, 1 << 20, 0, odp), Ok(()), "NULL, to be mapped later");
        assert_eq!(check_range(0, 1 << 20, 0, AccessFlags::LOCAL_WRITE), Err(libc::EFAULT), "not ODP");
        assert_eq!(check_range(u64::MAX - 8, 64, u64::MAX - 8, odp), Err(libc::EINVAL));
    }

    #[test]
    fn odp_caps_cover_what_each_transport_has() {
        let (caps, xrc) = odp_caps(0);
        assert_eq!(caps.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
        assert_eq!(caps.per_transport_caps.rc_odp_caps, 0x3f, "send recv write read atomic srq_recv");
        assert_eq!(caps.per_transport_caps.uc_odp_caps, 0x27, "no READ or atomics on UC");
        assert_eq!(caps.per_transport_caps.ud_odp_caps, 0x23, "sends and receives on UD");
        assert_eq!(xrc, 0, "no XRC, no XRC ODP caps");
        assert_eq!(odp_caps(1 << 20).1, 0x3f);
    }
}
