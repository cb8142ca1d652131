//! Shared receive queues: `ibv_create_srq` / `create_srq_ex` (basic and XRC SRQs),
//! `ibv_modify_srq`, `ibv_query_srq`, `ibv_destroy_srq`, `get_srq_num`; and XRC domains
//! (`open_xrcd` / `close_xrcd`). Posting to an SRQ is [`super::post`].
//!
//! XRC domains and files: a kernel device shares a domain between every process that opens
//! it with the same file (an inode). A userspace device has no state shared between
//! processes, so urxe shares it between the opens *of one process*: domains are keyed by the
//! file's (st_dev, st_ino); another process opening the same file gets a domain of its own
//! (its XRC SRQs and target QPs are its own, which is all a process can reach anyway).

use super::dev_of;
use crate::abi::*;
use crate::context::ctx_from;
use crate::convert;
use crate::events::{self, AsyncKind};
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_void};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use urxe::engine::{CqId, SrqAttr, SrqAttrMask, XrcdId};

/// # Safety
/// `pd` NULL or ours; `attr` NULL or writable.
unsafe fn create_srq_common(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_attr,
    srq_context: *mut c_void,
    xrc: Option<(XrcdId, CqId)>,
) -> Result<*mut ibv_srq, i32> {
    // SAFETY: caller contract.
    let p: &UrxePd = unsafe { shell(pd) }?;
    let a = non_null(attr)?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(p.ibv.context) }?;
    // SAFETY: readable caller struct.
    let ea = convert::srq_attr_from_c(unsafe { &*a }, &dev.info.limits)?;
    let (id, granted, xrc_srqn) = match xrc {
        Some((xrcd, cq)) => {
            let (id, granted, num) = glue::create_xrc_srq(dev, p.id, xrcd, cq, ea)?;
            (id, granted, Some(num))
        }
        None => {
            let (id, granted) = glue::create_srq(dev, p.id, ea)?;
            (id, granted, None)
        }
    };
    // SAFETY: writable caller struct.
    unsafe { a.write(ibv_srq_attr { max_wr: granted.max_wr, max_sge: granted.max_sge, srq_limit: granted.srq_limit }) };
    let mut b = Box::new(UrxeSrq {
        ibv: Zeroable::zeroed(),
        id,
        max_sge: granted.max_sge,
        xrc_srqn,
        async_events_read: Default::default(),
    });
    b.ibv.context = p.ibv.context;
    b.ibv.srq_context = srq_context;
    b.ibv.pd = pd;
    b.ibv.handle = id;
    // SAFETY: `pd` is a live PD of ours (checked above).
    unsafe { parent_domain_use(pd, 1) };
    let raw = Box::into_raw(b);
    // SAFETY: live boxed SRQ; in-place init.
    unsafe { init_sync(ptr::addr_of_mut!((*raw).ibv.mutex), ptr::addr_of_mut!((*raw).ibv.cond)) };
    events::register_async(AsyncKind::Srq, id, raw as usize);
    Ok(raw as *mut ibv_srq)
}

/// `ibv_create_srq(3)`: writes the granted attributes back.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    let ia = non_null(srq_init_attr)?;
    // SAFETY: caller passes a PD of ours and a writable init attr.
    unsafe { create_srq_common(pd, ptr::addr_of_mut!((*ia).attr), (*ia).srq_context, None) }
}

/// `verbs_context.create_srq_ex`: basic and XRC SRQs (tag matching: EOPNOTSUPP). An XRC
/// SRQ needs its PD, XRC domain and CQ.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn create_srq_ex_op(context: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let a = non_null(attr)?;
    // SAFETY: readable caller struct.
    let (mask, ty, pd, xrcd, cq) = unsafe { ((*a).comp_mask, (*a).srq_type, (*a).pd, (*a).xrcd, (*a).cq) };
    let known = (IBV_SRQ_INIT_ATTR_TYPE
        | IBV_SRQ_INIT_ATTR_PD
        | IBV_SRQ_INIT_ATTR_XRCD
        | IBV_SRQ_INIT_ATTR_CQ
        | IBV_SRQ_INIT_ATTR_TM) as u32;
    if mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    let ty = if mask & IBV_SRQ_INIT_ATTR_TYPE as u32 != 0 { ty as u64 } else { IBV_SRQT_BASIC };
    if ty != IBV_SRQT_BASIC && ty != IBV_SRQT_XRC {
        return Err(libc::EOPNOTSUPP);
    }
    if mask & IBV_SRQ_INIT_ATTR_PD as u32 == 0 {
        return Err(libc::EINVAL);
    }
    let xrc = if ty == IBV_SRQT_XRC {
        let need = (IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ) as u32;
        if mask & need != need {
            return Err(libc::EINVAL);
        }
        // SAFETY: caller passes an XRC domain and a CQ of ours (or NULL).
        let (x, c) = unsafe { (shell::<_, UrxeXrcd>(xrcd)?, shell::<_, UrxeCq>(cq)?) };
        Some((x.id, c.id))
    } else {
        None
    };
    // SAFETY: as above.
    unsafe { create_srq_common(pd, ptr::addr_of_mut!((*a).attr), (*a).srq_context, xrc) }
}

/// `verbs_context.get_srq_num`: the number peers name an XRC SRQ by (EINVAL for a basic
/// SRQ).
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn get_srq_num_op(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: caller passes an SRQ of ours.
    let s: &UrxeSrq = unsafe { shell(srq) }?;
    let out = non_null(srq_num)?;
    let n = s.xrc_srqn.ok_or(libc::EINVAL)?;
    // SAFETY: writable caller out-parameter.
    unsafe { out.write(n) };
    Ok(())
}

/// `ibv_modify_srq(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int {
    // SAFETY: caller passes an SRQ of ours.
    let s: &UrxeSrq = unsafe { shell(srq) }?;
    let a = non_null(srq_attr)?;
    let m = SrqAttrMask(u32::try_from(srq_attr_mask).map_err(|_| libc::EINVAL)?);
    if m.unknown_bits() != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: readable caller struct.
    let a = unsafe { *a };
    // SAFETY: its context is live.
    glue::modify_srq(
        unsafe { dev_of(s.ibv.context) }?,
        s.id,
        SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit },
        m,
    )
}

/// `ibv_query_srq(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: caller passes an SRQ of ours.
    let s: &UrxeSrq = unsafe { shell(srq) }?;
    let out = non_null(srq_attr)?;
    // SAFETY: its context is live.
    let a = glue::query_srq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
    // SAFETY: writable caller struct.
    unsafe { out.write(ibv_srq_attr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit }) };
    Ok(())
}

/// `ibv_destroy_srq(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: caller passes an SRQ of ours.
    let s: &UrxeSrq = unsafe { shell(srq) }?;
    // SAFETY: its context is live.
    glue::destroy_srq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
    let raw = s as *const UrxeSrq as *mut UrxeSrq;
    events::unregister_async(AsyncKind::Srq, s.id, raw as usize);
    // SAFETY: live until freed below.
    unsafe {
        let m = ptr::addr_of_mut!((*raw).ibv.mutex);
        let c = ptr::addr_of_mut!((*raw).ibv.cond);
        wait_acked(m, c, ptr::addr_of!((*raw).ibv.events_completed), || {
            (*raw).async_events_read.load(Ordering::Acquire)
        });
        destroy_sync(m, c);
        parent_domain_use((*raw).ibv.pd, -1);
        drop(Box::from_raw(raw));
    }
    Ok(())
}

// XRC domains.

/// Domains opened with a file, by (device, st_dev, st_ino): the engine's domain and how many
/// opens share it.
static XRCD_FILES: Mutex<Vec<XrcdFile>> = Mutex::new(Vec::new());

struct XrcdFile {
    dev: usize,
    inode: (u64, u64),
    id: XrcdId,
    opens: u32,
}

/// (st_dev, st_ino) of an open file.
fn inode_of(fd: c_int) -> Result<(u64, u64), i32> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into `st` on success.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: fstat succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// `verbs_context.open_xrcd` (`ibv_open_xrcd(3)`), with the kernel's rules: `fd` -1 makes
/// a domain of its own; a file's domain is created by the first open with O_CREAT (EAGAIN
/// without it), shared by later opens of the same file (EINVAL with O_EXCL); other oflags
/// bits are ignored. Both FD and OFLAGS must be in the mask (EINVAL), nothing else
/// (EOPNOTSUPP), as rdma-core's command layer. Shared within this process only (module docs).
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn open_xrcd_op(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(context) }?;
    let a = non_null(attr)?;
    // SAFETY: readable caller struct.
    let (mask, fd, oflags) = unsafe { ((*a).comp_mask, (*a).fd, (*a).oflags) };
    let known = (IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS) as u32;
    if mask & !known != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if mask & known != known {
        return Err(libc::EINVAL);
    }
    let create = oflags & libc::O_CREAT != 0;
    let (id, inode) = if fd == -1 {
        (glue::alloc_xrcd(dev)?, None)
    } else {
        let inode = inode_of(fd)?;
        let key = dev as *const _ as usize;
        let mut files = XRCD_FILES.lock().unwrap_or_else(|e| e.into_inner());
        match files.iter_mut().find(|f| f.dev == key && f.inode == inode) {
            Some(_) if oflags & libc::O_EXCL != 0 => return Err(libc::EINVAL),
            Some(f) => {
                f.opens += 1;
                (f.id, Some(inode))
            }
            None if !create => return Err(libc::EAGAIN),
            None => {
                let id = glue::alloc_xrcd(dev)?;
                files.push(XrcdFile { dev: key, inode, id, opens: 1 });
                (id, Some(inode))
            }
        }
    };
    let b = Box::new(UrxeXrcd { ibv: ibv_xrcd { context }, id, inode });
    Ok(Box::into_raw(b) as *mut ibv_xrcd)
}

/// `verbs_context.close_xrcd` (`ibv_close_xrcd(3)`): the domain goes with its last open;
/// EBUSY (and nothing closed) while XRC SRQs or target QPs are in it.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn close_xrcd_op(xrcd: *mut ibv_xrcd) -> c_int {
    // SAFETY: caller passes a domain of ours.
    let x: &UrxeXrcd = unsafe { shell(xrcd) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(x.ibv.context) }?;
    let key = dev as *const _ as usize;
    {
        let mut files = XRCD_FILES.lock().unwrap_or_else(|e| e.into_inner());
        let shared = x.inode.and_then(|ino| files.iter().position(|f| f.dev == key && f.inode == ino));
        match shared {
            Some(i) if files[i].opens > 1 => files[i].opens -= 1,
            Some(i) => {
                glue::dealloc_xrcd(dev, x.id)?;
                files.remove(i);
            }
            None => glue::dealloc_xrcd(dev, x.id)?,
        }
    }
    // SAFETY: created by open_xrcd_op as a boxed UrxeXrcd; no reference outlives this.
    unsafe { drop(Box::from_raw(xrcd as *mut UrxeXrcd)) };
    Ok(())
}
