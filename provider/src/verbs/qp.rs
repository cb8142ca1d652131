//! Queue pairs: `ibv_create_qp` / `create_qp_ex`, `ibv_qp_to_qp_ex`, `ibv_modify_qp`,
//! `ibv_query_qp`, `ibv_destroy_qp`, multicast attach/detach, and the QP verbs urxe declines (ECE). Posting
//! is [`super::post`]; the `ibv_qp_ex` builder is [`super::qp_ex`].

use super::dev_of;
use super::qp_ex::fill_wr_table;
use crate::abi::*;
use crate::convert::{self, QpRefs};
use crate::events::{self, AsyncKind};
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint, c_void};
use std::ptr;
use std::sync::atomic::Ordering;
use urxe::engine::{QpAttrMask, QpCap, QpInitAttr, QpState, QpType, Qpn};

/// # Safety
/// `context` live context of ours; object pointers in `attr` NULL or ours.
unsafe fn create_qp_common(context: *mut ibv_context, attr: &mut ibv_qp_init_attr_ex) -> Result<*mut UrxeQp, i32> {
    // SAFETY: caller contract.
    let dev = unsafe { dev_of(context) }?;
    let pd = if attr.comp_mask & IBV_QP_INIT_ATTR_PD as u32 != 0 { attr.pd } else { ptr::null_mut() };
    // SAFETY: caller contract: the pointers are objects of ours or NULL.
    let refs = unsafe {
        QpRefs {
            pd: (!pd.is_null()).then(|| (*(pd as *mut UrxePd)).id),
            send_cq: (!attr.send_cq.is_null()).then(|| (*(attr.send_cq as *mut UrxeCq)).id),
            recv_cq: (!attr.recv_cq.is_null()).then(|| (*(attr.recv_cq as *mut UrxeCq)).id),
            srq: (!attr.srq.is_null()).then(|| (*(attr.srq as *mut UrxeSrq)).id),
        }
    };
    let (init, send_ops) = convert::qp_init_attr_from_c(attr, refs, &dev.info.limits)?;
    let block_self = attr.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS as u32 != 0
        && attr.create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0;
    if block_self && attr.qp_type != IBV_QPT_UD as u32 {
        return Err(libc::EINVAL);
    }
    let (qpn, cap) = if init.qp_type == QpType::XrcRecv {
        // SAFETY: caller contract: `xrcd` is NULL or a domain of ours.
        let x: &UrxeXrcd = unsafe { shell(attr.xrcd) }?;
        (glue::create_xrc_recv_qp(dev, x.id)?, QpCap::default())
    } else {
        glue::create_qp(dev, &init)?
    };
    if block_self {
        if let Err(e) = glue::block_self_mcast_loopback(dev, qpn) {
            let _ = glue::destroy_qp(dev, qpn);
            return Err(e);
        }
    }
    attr.cap = convert::cap_to_c(&cap);
    // SAFETY: caller contract (as above).
    unsafe { new_qp_shell(context, attr, qpn, &init, send_ops, cap, true) }
}

/// The shell of a new (or newly opened) QP `qpn`; the creator's is registered for the QP's
/// async events.
///
/// # Safety
/// `context` live context of ours; `attr.pd` (when its mask names it) NULL or a live PD of ours.
unsafe fn new_qp_shell(
    context: *mut ibv_context,
    attr: &ibv_qp_init_attr_ex,
    qpn: Qpn,
    init: &QpInitAttr,
    send_ops: u64,
    cap: QpCap,
    events_here: bool,
) -> Result<*mut UrxeQp, i32> {
    let pd = if attr.comp_mask & IBV_QP_INIT_ATTR_PD as u32 != 0 { attr.pd } else { ptr::null_mut() };
    let mut b = Box::new(UrxeQp {
        ibv: Zeroable::zeroed(),
        wr_flush: Some(super::qp_ex::wr_flush),
        qpn,
        qp_type: init.qp_type,
        has_qp_ex: attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS as u32 != 0,
        send_ops_flags: send_ops,
        cap,
        sq_sig_all: init.sq_sig_all,
        async_events_read: Default::default(),
        batch: Default::default(),
    });
    let q = &mut b.ibv.qp_base;
    q.context = context;
    q.qp_context = attr.qp_context;
    q.pd = pd;
    q.send_cq = attr.send_cq;
    q.recv_cq = attr.recv_cq;
    q.srq = attr.srq;
    q.handle = qpn;
    q.qp_num = qpn;
    q.state = QpState::Reset as u32;
    q.qp_type = attr.qp_type;
    fill_wr_table(&mut b.ibv);
    // SAFETY: `pd` is NULL or a live PD of ours (caller contract).
    unsafe { parent_domain_use(pd, 1) };
    let raw = Box::into_raw(b);
    // SAFETY: live boxed QP; in-place init of its mutex/cond.
    unsafe { init_sync(ptr::addr_of_mut!((*raw).ibv.qp_base.mutex), ptr::addr_of_mut!((*raw).ibv.qp_base.cond)) };
    if events_here {
        events::register_async(AsyncKind::Qp, qpn, raw as usize);
    }
    Ok(raw)
}

/// `ibv_create_qp(3)`: also writes the granted capacities back into `qp_init_attr->cap`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    let p = non_null(pd)?;
    let a = non_null(qp_init_attr)?;
    let mut ex = ibv_qp_init_attr_ex::zeroed();
    // SAFETY: caller passes a readable ibv_qp_init_attr and a PD of ours.
    let context = unsafe {
        ex.qp_context = (*a).qp_context;
        ex.send_cq = (*a).send_cq;
        ex.recv_cq = (*a).recv_cq;
        ex.srq = (*a).srq;
        ex.cap = (*a).cap;
        ex.qp_type = (*a).qp_type;
        ex.sq_sig_all = (*a).sq_sig_all;
        (*p).context
    };
    ex.comp_mask = IBV_QP_INIT_ATTR_PD as u32;
    ex.pd = p;
    // SAFETY: as above.
    let qp = unsafe { create_qp_common(context, &mut ex) }?;
    // SAFETY: writable caller struct.
    unsafe { (*a).cap = ex.cap };
    Ok(qp as *mut ibv_qp)
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex(3)`).
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn create_qp_ex_op(
    context: *mut ibv_context,
    qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let a = non_null(qp_init_attr_ex)?;
    // SAFETY: caller passes a context of ours and a writable attr.
    unsafe { create_qp_common(context, &mut *a) }.map(|q| q as *mut ibv_qp)
}

/// `verbs_context.open_qp` (`ibv_open_qp(3)`): another handle on an XRC target QP of the
/// given domain (the only QPs that can be opened). The QP lives until every handle, the
/// creator's included, is destroyed; async events go to the creator's handle.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn open_qp_op(context: *mut ibv_context, attr: *mut c_void) -> *mut ibv_qp {
    let a = non_null(attr as *mut ibv_qp_open_attr)?;
    // SAFETY: caller passes a readable ibv_qp_open_attr.
    let a = unsafe { &*a };
    let need = (IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE) as u32;
    let known = need | IBV_QP_OPEN_ATTR_CONTEXT as u32;
    if a.comp_mask & need != need || a.comp_mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    if a.qp_type as u64 != IBV_QPT_XRC_RECV {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller passes a domain of ours.
    let x: &UrxeXrcd = unsafe { shell(a.xrcd) }?;
    // SAFETY: caller passes a context of ours.
    let dev = unsafe { dev_of(context) }?;
    glue::open_xrc_qp(dev, x.id, a.qp_num)?;
    let mut ex = ibv_qp_init_attr_ex::zeroed();
    ex.qp_type = a.qp_type;
    ex.xrcd = a.xrcd;
    if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT as u32 != 0 {
        ex.qp_context = a.qp_context;
    }
    let init = QpInitAttr::xrc_target();
    // SAFETY: live context; no PD.
    let r = unsafe { new_qp_shell(context, &ex, a.qp_num, &init, 0, QpCap::default(), false) };
    if r.is_err() {
        let _ = glue::destroy_qp(dev, a.qp_num);
    }
    r.map(|q| q as *mut ibv_qp)
}

/// `ibv_qp_to_qp_ex(3)`: only for QPs created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    if s.has_qp_ex {
        Ok(qp as *mut ibv_qp_ex)
    } else {
        Err(libc::EOPNOTSUPP)
    }
}

/// `ibv_modify_qp(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    let a = non_null(attr)?;
    // SAFETY: readable caller struct.
    let (ea, mask) = convert::qp_attr_from_c(unsafe { &*a }, attr_mask)?;
    // SAFETY: its context is live.
    glue::modify_qp(unsafe { dev_of(s.ibv.qp_base.context) }?, s.qpn, &ea, mask)?;
    if mask.contains(QpAttrMask::STATE) {
        // SAFETY: `qp` is live; C-visible field written through the handle.
        unsafe { ptr::addr_of_mut!((*qp).state).write(ea.qp_state as u32) };
    }
    Ok(())
}

/// `ibv_query_qp(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    let out = non_null(attr)?;
    let init = non_null(init_attr)?;
    // SAFETY: its context is live.
    let ea = glue::query_qp(unsafe { dev_of(s.ibv.qp_base.context) }?, s.qpn)?;
    let q = &s.ibv.qp_base;
    // SAFETY: writable caller structs.
    unsafe {
        out.write(convert::qp_attr_to_c(&ea));
        init.write(ibv_qp_init_attr {
            qp_context: q.qp_context,
            send_cq: q.send_cq,
            recv_cq: q.recv_cq,
            srq: q.srq,
            cap: convert::cap_to_c(&s.cap),
            qp_type: q.qp_type,
            sq_sig_all: s.sq_sig_all as c_int,
        });
    }
    // SAFETY: `qp` is live; C-visible field written through the handle.
    unsafe { ptr::addr_of_mut!((*qp).state).write(ea.qp_state as u32) };
    Ok(())
}

/// `ibv_destroy_qp(3)`: waits for every async event of the QP to be acked.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    // SAFETY: its context is live.
    glue::destroy_qp(unsafe { dev_of(s.ibv.qp_base.context) }?, s.qpn)?;
    let raw = s as *const UrxeQp as *mut UrxeQp;
    events::unregister_async(AsyncKind::Qp, s.qpn, raw as usize);
    // SAFETY: live until freed below.
    unsafe {
        let m = ptr::addr_of_mut!((*raw).ibv.qp_base.mutex);
        let c = ptr::addr_of_mut!((*raw).ibv.qp_base.cond);
        wait_acked(m, c, ptr::addr_of!((*raw).ibv.qp_base.events_completed), || {
            (*raw).async_events_read.load(Ordering::Acquire)
        });
        destroy_sync(m, c);
        parent_domain_use((*raw).ibv.qp_base.pd, -1);
        drop(Box::from_raw(raw));
    }
    Ok(())
}

/// `ibv_query_qp_data_in_order(3)`: 0 = no in-order guarantee is advertised.
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: c_uint, flags: u32) -> c_int {
    0
}

/// `ibv_query_ece(3)`: ECE is a Mellanox feature; EOPNOTSUPP.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    non_null(qp)?;
    Err(libc::EOPNOTSUPP)
}

/// `ibv_set_ece(3)`: EOPNOTSUPP.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    non_null(qp)?;
    Err(libc::EOPNOTSUPP)
}

/// `ibv_attach_mcast(3)`: attaches a UD QP to the multicast group `gid` names (an IP
/// multicast address, IPv4-mapped or IPv6, as RoCE maps groups; `lid` is unused on RoCE).
/// EINVAL for another QP type or a unicast GID, ENOMEM past the device's multicast limits.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    let g = non_null(gid as *mut ibv_gid)?;
    // SAFETY: `gid` is a readable `union ibv_gid`; every view is 16 bytes.
    let raw = unsafe { (*g).raw };
    // SAFETY: its context is live.
    glue::attach_mcast(unsafe { dev_of(s.ibv.qp_base.context) }?, s.qpn, raw)
}

/// `ibv_detach_mcast(3)`: EINVAL if the QP is not attached to the group.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    let g = non_null(gid as *mut ibv_gid)?;
    // SAFETY: `gid` is a readable `union ibv_gid`; every view is 16 bytes.
    let raw = unsafe { (*g).raw };
    // SAFETY: its context is live.
    glue::detach_mcast(unsafe { dev_of(s.ibv.qp_base.context) }?, s.qpn, raw)
}
