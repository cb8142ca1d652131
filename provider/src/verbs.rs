//! Provider layer: the object verbs (PD, MR, CQ, QP, SRQ, AH, MW, XRCD) and the data-path
//! ops reached through `ibv_context.ops`, `ibv_cq_ex` and `ibv_qp_ex`.
//!
//! Each verb: check pointers, convert C -> engine ([`crate::convert`]), call [`crate::glue`],
//! then create/update/free the shell ([`crate::objects`]). In phase 1 the glue answers ENOSYS,
//! so object creation fails cleanly and nothing after the glue call runs yet.

use crate::abi::*;
use crate::convert::{self, checked_sge_count, QpRefs, Resolve, MAX_SGE};
use crate::device::{ctx_from, UrxeDevice};
use crate::events::{channel_ref, next_cq_serial, register_cq, unregister_cq};
use crate::export::{non_null, non_null_const, set_errno};
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint, c_void};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::Ordering;
use urxe::engine::{
    AccessFlags, AhId, MrId, MwBind, MwId, MwType, QpAttrMask, QpState, QpType, SendFlags, SendWr, Sge, SrqAttr,
    SrqAttrMask, UdDest, WcFlags, WorkCompletion, WrKind,
};

fn zeroed<T>() -> T {
    // SAFETY: used only for the plain-data C mirrors (integers, raw pointers, Option<fn>,
    // unions of those, pthread types), for which all-zero is a valid value.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

/// The device behind any object's `context`.
///
/// # Safety
/// `ctx` is NULL or a live context of ours.
unsafe fn dev_of(ctx: *mut ibv_context) -> Result<&'static UrxeDevice, i32> {
    // SAFETY: forwarded.
    unsafe { ctx_from(ctx) }.map(|u| u.device())
}

// SAFETY (for the resolvers): pointers inside WRs are objects of ours or NULL; NULL gives None.
fn ah_id(p: *mut ibv_ah) -> Option<AhId> {
    // SAFETY: see above.
    (!p.is_null()).then(|| unsafe { (*(p as *mut UrxeAh)).id })
}
fn mw_id(p: *mut ibv_mw) -> Option<MwId> {
    // SAFETY: see above.
    (!p.is_null()).then(|| unsafe { (*(p as *mut UrxeMw)).id })
}
fn mr_id(p: *mut ibv_mr) -> Option<MrId> {
    // SAFETY: see above.
    (!p.is_null()).then(|| unsafe { (*(p as *mut UrxeMr)).id })
}
const RESOLVE: Resolve<'static> = Resolve { ah: &ah_id, mw: &mw_id, mr: &mr_id };

// ------------------------------------------------------------------------------------------
// PD
// ------------------------------------------------------------------------------------------

export! {
    /// `ibv_alloc_pd(3)`.
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd as ptr {
        // SAFETY: caller passes a context of ours.
        let dev = unsafe { dev_of(context) }?;
        let id = glue::alloc_pd(dev)?;
        let pd = Box::new(UrxePd { ibv: ibv_pd { context, handle: id }, id });
        Ok(Box::into_raw(pd) as *mut ibv_pd)
    }
}

export! {
    /// `ibv_dealloc_pd(3)`: 0 or errno (EBUSY while objects use it).
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int as errno {
        // SAFETY: caller passes a PD of ours.
        let s: &UrxePd = unsafe { shell(pd) }?;
        // SAFETY: its context is live.
        glue::dealloc_pd(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: from Box::into_raw in ibv_alloc_pd; freed once.
        drop(unsafe { Box::from_raw(s as *const UrxePd as *mut UrxePd) });
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------
// MR
// ------------------------------------------------------------------------------------------

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
        // SAFETY: caller passes an MR of ours.
        let s: &UrxeMr = unsafe { shell(mr) }?;
        // SAFETY: its context is live.
        glue::dereg_mr(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: from Box::into_raw in reg_mr_common; freed once.
        drop(unsafe { Box::from_raw(s as *const UrxeMr as *mut UrxeMr) });
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------
// CQ
// ------------------------------------------------------------------------------------------

/// # Safety
/// `context` live context of ours; `attr` valid.
unsafe fn create_cq_common(context: *mut ibv_context, attr: &ibv_cq_init_attr_ex) -> Result<*mut UrxeCq, i32> {
    // SAFETY: caller contract.
    let u = unsafe { ctx_from(context) }?;
    let dev = u.device();
    let cqe = convert::cq_init_attr_check(attr, &dev.info.limits, u.vctx.context.num_comp_vectors as u32)?;
    let (id, granted) = glue::create_cq(dev, cqe)?;
    // SAFETY: caller contract.
    unsafe { new_cq_shell(context, attr, id, granted) }.inspect_err(|_| {
        let _ = glue::destroy_cq(dev, id);
    })
}

/// Build the C-side CQ for engine CQ `id` (attached to `attr.channel`, registered for the
/// completion channel). Split from the glue call so the channel/event machinery is testable
/// without the engine.
///
/// # Safety
/// `context` live context of ours; `attr.channel` NULL or a live channel of ours.
pub(crate) unsafe fn new_cq_shell(
    context: *mut ibv_context,
    attr: &ibv_cq_init_attr_ex,
    id: urxe::engine::CqId,
    granted: u32,
) -> Result<*mut UrxeCq, i32> {
    // SAFETY: caller contract (validates the channel before anything is allocated).
    unsafe { channel_ref(attr.channel, 1) }?;
    let mut b = Box::new(UrxeCq {
        ibv: zeroed(),
        id,
        serial: next_cq_serial(),
        comp_events_read: Default::default(),
        async_events_read: Default::default(),
        wc_flags: attr.wc_flags,
        cur: WorkCompletion::default(),
    });
    let c = &mut b.ibv;
    c.context = context;
    c.channel = attr.channel;
    c.cq_context = attr.cq_context;
    c.handle = id;
    c.cqe = granted as c_int;
    c.start_poll = Some(cq_start_poll);
    c.next_poll = Some(cq_next_poll);
    c.end_poll = Some(cq_end_poll);
    c.read_opcode = Some(cq_read_opcode);
    c.read_vendor_err = Some(cq_read_vendor_err);
    c.read_byte_len = Some(cq_read_byte_len);
    c.read_imm_data = Some(cq_read_imm_data);
    c.read_qp_num = Some(cq_read_qp_num);
    c.read_src_qp = Some(cq_read_src_qp);
    c.read_wc_flags = Some(cq_read_wc_flags);
    c.read_slid = Some(cq_read_slid);
    c.read_sl = Some(cq_read_sl);
    c.read_dlid_path_bits = Some(cq_read_dlid_path_bits);
    c.read_completion_ts = Some(cq_read_completion_ts);
    c.read_cvlan = Some(cq_read_cvlan);
    c.read_flow_tag = Some(cq_read_flow_tag);
    c.read_tm_info = Some(cq_read_tm_info);
    c.read_completion_wallclock_ns = Some(cq_read_completion_ts);
    let raw = Box::into_raw(b);
    // SAFETY: `raw` is a live boxed CQ; mutex/cond are initialised in place and never move.
    unsafe {
        init_sync(ptr::addr_of_mut!((*raw).ibv.mutex), ptr::addr_of_mut!((*raw).ibv.cond));
        register_cq(raw, (*raw).serial);
        crate::events::register_async(crate::events::AsyncKind::Cq, id, raw as usize);
    }
    Ok(raw)
}

/// Free a CQ shell after the engine destroyed the CQ: forget it for the channel, wait until
/// the application acked every event it was handed, detach from the channel, free.
///
/// # Safety
/// `raw` came from [`new_cq_shell`] and is not used by anyone else afterwards.
pub(crate) unsafe fn free_cq_shell(raw: *mut UrxeCq) -> Result<(), i32> {
    // SAFETY: caller contract; mutex/cond were initialised by new_cq_shell.
    unsafe {
        unregister_cq((*raw).serial);
        crate::events::unregister_async(crate::events::AsyncKind::Cq, (*raw).id, raw as usize);
        let m = ptr::addr_of_mut!((*raw).ibv.mutex);
        let c = ptr::addr_of_mut!((*raw).ibv.cond);
        wait_acked(m, c, ptr::addr_of!((*raw).ibv.comp_events_completed), || {
            (*raw).comp_events_read.load(Ordering::Acquire)
        });
        wait_acked(m, c, ptr::addr_of!((*raw).ibv.async_events_completed), || {
            (*raw).async_events_read.load(Ordering::Acquire)
        });
        channel_ref((*raw).ibv.channel, -1)?;
        destroy_sync(m, c);
        drop(Box::from_raw(raw));
    }
    Ok(())
}

export! {
    /// `ibv_create_cq(3)`.
    fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq as ptr {
        let mut attr: ibv_cq_init_attr_ex = zeroed();
        attr.cqe = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
        attr.cq_context = cq_context;
        attr.channel = channel;
        attr.comp_vector = u32::try_from(comp_vector).map_err(|_| libc::EINVAL)?;
        // SAFETY: caller passes a context of ours.
        unsafe { create_cq_common(context, &attr) }.map(|p| p as *mut ibv_cq)
    }
}

crate::c_fn! {
    /// `verbs_context.create_cq_ex` (`ibv_create_cq_ex(3)`).
    fn create_cq_ex_op(context: *mut ibv_context, cq_attr: *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex as ptr {
        let a = non_null(cq_attr)?;
        // SAFETY: caller passes a context of ours and a readable attr.
        unsafe { create_cq_common(context, &*a) }.map(|p| p as *mut ibv_cq_ex)
    }
}

export! {
    /// `ibv_destroy_cq(3)`: waits until every event handed out for the CQ was acked.
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int as errno {
        // SAFETY: caller passes a CQ of ours.
        let s: &UrxeCq = unsafe { shell(cq) }?;
        // SAFETY: its context is live.
        glue::destroy_cq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: the engine CQ is gone; the shell is ours to free.
        unsafe { free_cq_shell(s as *const UrxeCq as *mut UrxeCq) }?;
        Ok(())
    }
}

export! {
    /// `ibv_resize_cq(3)`.
    fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int as errno {
        // SAFETY: caller passes a CQ of ours.
        let s: &UrxeCq = unsafe { shell(cq) }?;
        let n = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
        // SAFETY: its context is live.
        let granted = glue::resize_cq(unsafe { dev_of(s.ibv.context) }?, s.id, n)?;
        // SAFETY: `cq` is live; a C-visible field written through the handle (no Rust
        // reference to the shell is used after this point).
        unsafe { ptr::addr_of_mut!((*cq).cqe).write(granted as c_int) };
        Ok(())
    }
}

crate::c_fn! {
    /// `ops.poll_cq`: number of completions, or a negative errno.
    fn poll_cq_op(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int as negerrno {
        // SAFETY: caller passes a CQ of ours.
        let s: &UrxeCq = unsafe { shell(cq) }?;
        let n = usize::try_from(num_entries).map_err(|_| libc::EINVAL)?;
        if n == 0 {
            return Ok(0);
        }
        let out = non_null(wc)?;
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.context) }?;
        let mut buf = [WorkCompletion::default(); 16];
        let mut done = 0usize;
        while done < n {
            let want = (n - done).min(buf.len());
            let got = glue::poll_cq(dev, s.id, &mut buf[..want])?;
            for (i, w) in buf[..got].iter().enumerate() {
                // SAFETY: the caller's array holds `num_entries` ibv_wc.
                unsafe { out.add(done + i).write(convert::wc_to_c(w)) };
            }
            done += got;
            if got < want {
                break;
            }
        }
        Ok(done as c_int)
    }
}

crate::c_fn! {
    /// `ops.req_notify_cq`: arm the CQ (one shot).
    fn req_notify_cq_op(cq: *mut ibv_cq, solicited_only: c_int) -> c_int as errno {
        // SAFETY: caller passes a CQ of ours.
        let s: &UrxeCq = unsafe { shell(cq) }?;
        // SAFETY: its context is live.
        glue::req_notify_cq(unsafe { dev_of(s.ibv.context) }?, s.id, solicited_only != 0)
    }
}

/// Move the `ibv_cq_ex` cursor to the next completion: 0, ENOENT when empty, or an errno.
///
/// # Safety
/// `cq` is a live CQ of ours.
unsafe fn cq_advance(cq: *mut ibv_cq_ex) -> Result<(), i32> {
    // SAFETY: caller contract.
    let s: &UrxeCq = unsafe { shell(cq) }?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(s.ibv.context) }?;
    let mut one = [WorkCompletion::default()];
    if glue::poll_cq(dev, s.id, &mut one)? == 0 {
        return Err(libc::ENOENT);
    }
    let p = cq as *mut UrxeCq;
    // SAFETY: the cursor belongs to the one thread polling this CQ between start_poll and
    // end_poll (the verbs rule); written through the handle, no shell reference used after.
    unsafe {
        ptr::addr_of_mut!((*p).cur).write(one[0]);
        ptr::addr_of_mut!((*p).ibv.status).write(one[0].status as u32);
        ptr::addr_of_mut!((*p).ibv.wr_id).write(one[0].wr_id);
    }
    Ok(())
}

crate::c_fn! {
    fn cq_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int as errno {
        // SAFETY: `attr` is NULL or readable.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: caller passes a CQ of ours.
        unsafe { cq_advance(cq) }
    }
}
crate::c_fn! {
    fn cq_next_poll(cq: *mut ibv_cq_ex) -> c_int as errno {
        // SAFETY: caller passes a CQ of ours.
        unsafe { cq_advance(cq) }
    }
}
crate::c_fn! {
    fn cq_end_poll(cq: *mut ibv_cq_ex) as void {}
}

/// The completion under the cursor.
///
/// # Safety
/// `cq` is a live CQ of ours.
unsafe fn cur<'a>(cq: *mut ibv_cq_ex) -> &'a WorkCompletion {
    // SAFETY: caller contract; the cursor is plain data.
    unsafe { &(*(cq as *mut UrxeCq)).cur }
}

macro_rules! cq_reader {
    ($name:ident -> $t:ty, |$w:ident| $e:expr) => {
        crate::c_fn! {
            fn $name(cq: *mut ibv_cq_ex) -> $t as value(0) {
                if cq.is_null() {
                    return 0;
                }
                // SAFETY: caller passes a CQ of ours, between start_poll and end_poll.
                let $w = unsafe { cur(cq) };
                $e
            }
        }
    };
}
cq_reader!(cq_read_opcode -> c_uint, |w| w.opcode as c_uint);
cq_reader!(cq_read_vendor_err -> u32, |w| w.vendor_err);
cq_reader!(cq_read_byte_len -> u32, |w| w.byte_len);
cq_reader!(cq_read_imm_data -> u32, |w| if w.wc_flags.contains(WcFlags::WITH_INV) { w.invalidated_rkey } else { w.imm_data });
cq_reader!(cq_read_qp_num -> u32, |w| w.qp_num);
cq_reader!(cq_read_src_qp -> u32, |w| w.src_qp);
cq_reader!(cq_read_wc_flags -> c_uint, |w| w.wc_flags.bits());
cq_reader!(cq_read_slid -> u32, |w| w.slid as u32);
cq_reader!(cq_read_sl -> u8, |w| w.sl);
cq_reader!(cq_read_dlid_path_bits -> u8, |w| w.dlid_path_bits);
cq_reader!(cq_read_completion_ts -> u64, |w| w.timestamp);
cq_reader!(cq_read_cvlan -> u16, |_w| 0);
cq_reader!(cq_read_flow_tag -> u32, |_w| 0);

crate::c_fn! {
    fn cq_read_tm_info(cq: *mut ibv_cq_ex, tm_info: *mut ibv_wc_tm_info) as void {
        if !tm_info.is_null() {
            // SAFETY: caller passes a writable struct.
            unsafe { tm_info.write(ibv_wc_tm_info { tag: 0, priv_: 0 }) };
        }
    }
}

// ------------------------------------------------------------------------------------------
// QP
// ------------------------------------------------------------------------------------------

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
    let (qpn, cap) = glue::create_qp(dev, &init)?;
    attr.cap = convert::cap_to_c(&cap);
    let mut b = Box::new(UrxeQp {
        ibv: zeroed(),
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
    let raw = Box::into_raw(b);
    // SAFETY: live boxed QP; in-place init of its mutex/cond.
    unsafe { init_sync(ptr::addr_of_mut!((*raw).ibv.qp_base.mutex), ptr::addr_of_mut!((*raw).ibv.qp_base.cond)) };
    crate::events::register_async(crate::events::AsyncKind::Qp, qpn, raw as usize);
    Ok(raw)
}

export! {
    /// `ibv_create_qp(3)`: also writes the granted capacities back into `qp_init_attr->cap`.
    fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp as ptr {
        let p = non_null(pd)?;
        let a = non_null(qp_init_attr)?;
        let mut ex: ibv_qp_init_attr_ex = zeroed();
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
}

crate::c_fn! {
    /// `verbs_context.create_qp_ex` (`ibv_create_qp_ex(3)`).
    fn create_qp_ex_op(context: *mut ibv_context, qp_init_attr_ex: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp as ptr {
        let a = non_null(qp_init_attr_ex)?;
        // SAFETY: caller passes a context of ours and a writable attr.
        unsafe { create_qp_common(context, &mut *a) }.map(|q| q as *mut ibv_qp)
    }
}

export! {
    /// `ibv_qp_to_qp_ex(3)`: only for QPs created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex as ptr {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        if s.has_qp_ex {
            Ok(qp as *mut ibv_qp_ex)
        } else {
            Err(libc::EOPNOTSUPP)
        }
    }
}

export! {
    /// `ibv_modify_qp(3)`.
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int as errno {
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
}

export! {
    /// `ibv_query_qp(3)`.
    fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int as errno {
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
}

export! {
    /// `ibv_destroy_qp(3)`: waits for every async event of the QP to be acked.
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        // SAFETY: its context is live.
        glue::destroy_qp(unsafe { dev_of(s.ibv.qp_base.context) }?, s.qpn)?;
        let raw = s as *const UrxeQp as *mut UrxeQp;
        crate::events::unregister_async(crate::events::AsyncKind::Qp, s.qpn, raw as usize);
        // SAFETY: live until freed below.
        unsafe {
            let m = ptr::addr_of_mut!((*raw).ibv.qp_base.mutex);
            let c = ptr::addr_of_mut!((*raw).ibv.qp_base.cond);
            wait_acked(m, c, ptr::addr_of!((*raw).ibv.qp_base.events_completed), || (*raw).async_events_read.load(Ordering::Acquire));
            destroy_sync(m, c);
            drop(Box::from_raw(raw));
        }
        Ok(())
    }
}

/// Read `wr`'s SGE list (validated against `max_sge`) into a slice.
///
/// # Safety
/// `sg_list` points to `num_sge` readable `ibv_sge` when non-NULL.
unsafe fn sges<'a>(sg_list: *mut ibv_sge, num_sge: c_int, max_sge: u32) -> Result<&'a [ibv_sge], i32> {
    let n = checked_sge_count(num_sge, sg_list.is_null(), max_sge)?;
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: caller contract; n validated above.
    Ok(unsafe { std::slice::from_raw_parts(sg_list, n) })
}

crate::c_fn! {
    /// `ops.post_send`: on error `*bad_wr` is the first WR not posted.
    fn post_send_op(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
        let mut cur = wr;
        let fail = |w: *mut ibv_send_wr, e: i32| {
            if !bad_wr.is_null() {
                // SAFETY: writable out-pointer.
                unsafe { *bad_wr = w };
            }
            Err(e)
        };
        if cur.is_null() {
            return fail(cur, libc::EINVAL);
        }
        // The whole chain is posted under one device lock and transmitted once.
        let mut failed: *mut ibv_send_wr = ptr::null_mut();
        let r = glue::post_send_chain(dev, s.qpn, |post| {
            while !cur.is_null() {
                // SAFETY: a readable WR of the caller's list.
                let w = unsafe { &*cur };
                let mut buf = [Sge::default(); MAX_SGE];
                // SAFETY: the WR's sg_list has num_sge entries.
                let r = unsafe { sges(w.sg_list, w.num_sge, s.cap.max_send_sge) }
                    .and_then(|sg| convert::send_wr_from_c(w, sg, &mut buf, s.qp_type, &RESOLVE))
                    .and_then(|ew| post(&ew));
                if let Err(e) = r {
                    failed = cur;
                    return Err(e);
                }
                cur = w.next;
            }
            Ok(())
        });
        match r {
            Ok(()) => Ok(()),
            Err(e) => fail(if failed.is_null() { wr } else { failed }, e),
        }
    }
}

/// Post a chain of receive WRs with `post` (QP or SRQ).
///
/// # Safety
/// `wr` is a readable chain; `bad_wr` NULL or writable.
unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    max_sge: u32,
    mut post: impl FnMut(&urxe::engine::RecvWr<'_>) -> Result<(), i32>,
) -> Result<(), i32> {
    let fail = |w: *mut ibv_recv_wr, e: i32| {
        if !bad_wr.is_null() {
            // SAFETY: writable out-pointer.
            unsafe { *bad_wr = w };
        }
        Err(e)
    };
    if wr.is_null() {
        return fail(wr, libc::EINVAL);
    }
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: a readable WR of the caller's list.
        let w = unsafe { &*cur };
        let mut buf = [Sge::default(); MAX_SGE];
        // SAFETY: the WR's sg_list has num_sge entries.
        let r = unsafe { sges(w.sg_list, w.num_sge, max_sge) }
            .and_then(|sg| convert::recv_wr_from_c(w, sg, &mut buf))
            .and_then(|ew| post(&ew));
        if let Err(e) = r {
            return fail(cur, e);
        }
        cur = w.next;
    }
    Ok(())
}

crate::c_fn! {
    /// `ops.post_recv`.
    fn post_recv_op(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        if !s.ibv.qp_base.srq.is_null() {
            if !bad_wr.is_null() {
                // SAFETY: writable out-pointer.
                unsafe { *bad_wr = wr };
            }
            return Err(libc::EINVAL);
        }
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
        let qpn = s.qpn;
        // SAFETY: caller's chain.
        unsafe { post_recv_chain(wr, bad_wr, s.cap.max_recv_sge, |w| glue::post_recv(dev, qpn, w)) }
    }
}

crate::c_fn! {
    /// `ops.post_srq_recv`.
    fn post_srq_recv_op(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.context) }?;
        let id = s.id;
        // SAFETY: caller's chain.
        unsafe { post_recv_chain(wr, bad_wr, s.max_sge, |w| glue::post_srq_recv(dev, id, w)) }
    }
}

// ---- ibv_qp_ex work-request builder -------------------------------------------------------
//
// Design: `wr_start` opens a batch; each `wr_<opcode>` pushes a PendingWr with the `wr_id` and
// `wr_flags` the application stored in the ibv_qp_ex; the `wr_set_*` calls fill the last one;
// `wr_complete` converts and posts them all (stopping at the first error, which it returns);
// `wr_abort` drops the batch. Setters return void, so a misuse (no open batch, opcode not in
// send_ops_flags, too many SGEs) is remembered and reported by `wr_complete`.

fn fill_wr_table(q: &mut ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_send_tso = Some(wr_send_tso);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_atomic_write = Some(wr_atomic_write);
}

fn batch_fail(b: &mut WrBatch, e: i32) {
    if b.error == 0 {
        b.error = e;
    }
}

/// Run `f` on the QP's builder state.
///
/// # Safety
/// `qp` is NULL or a live QP of ours.
unsafe fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&UrxeQp, &mut WrBatch)) {
    // SAFETY: caller contract.
    let Ok(s) = (unsafe { shell::<_, UrxeQp>(qp) }) else {
        return;
    };
    let mut b = s.batch.lock().unwrap_or_else(|e| e.into_inner());
    f(s, &mut b);
}

fn push_wr(s: &UrxeQp, b: &mut WrBatch, op_flag: u64, kind: WrKind) {
    if !b.active {
        return batch_fail(b, libc::EINVAL);
    }
    if s.send_ops_flags & op_flag == 0 {
        return batch_fail(b, libc::EOPNOTSUPP);
    }
    let wr = PendingWr { wr_id: s.ibv.wr_id, flags: s.ibv.wr_flags, kind, sges: Vec::new(), ud: None };
    b.wrs.push(wr);
}

macro_rules! wr_op {
    ($name:ident($($a:ident: $t:ty),*) => $flag:expr, $kind:expr) => {
        crate::c_fn! {
            fn $name(qp: *mut ibv_qp_ex $(, $a: $t)*) as void {
                // SAFETY: caller passes a QP of ours.
                unsafe { with_batch(qp, |s, b| push_wr(s, b, $flag, $kind)) }
            }
        }
    };
}

wr_op!(wr_send() => IBV_QP_EX_WITH_SEND, WrKind::Send);
wr_op!(wr_send_imm(imm_data: u32) => IBV_QP_EX_WITH_SEND_WITH_IMM, WrKind::SendWithImm { imm_data });
wr_op!(wr_send_inv(invalidate_rkey: u32) => IBV_QP_EX_WITH_SEND_WITH_INV, WrKind::SendWithInv { invalidate_rkey });
wr_op!(wr_rdma_write(rkey: u32, remote_addr: u64) => IBV_QP_EX_WITH_RDMA_WRITE, WrKind::RdmaWrite { remote_addr, rkey });
wr_op!(wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm_data: u32) => IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, WrKind::RdmaWriteWithImm { remote_addr, rkey, imm_data });
wr_op!(wr_rdma_read(rkey: u32, remote_addr: u64) => IBV_QP_EX_WITH_RDMA_READ, WrKind::RdmaRead { remote_addr, rkey });
wr_op!(wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64) => IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, WrKind::AtomicCmpSwp { remote_addr, rkey, compare, swap });
wr_op!(wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64) => IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, WrKind::AtomicFetchAdd { remote_addr, rkey, add });
wr_op!(wr_local_inv(invalidate_rkey: u32) => IBV_QP_EX_WITH_LOCAL_INV, WrKind::LocalInv { invalidate_rkey });

crate::c_fn! {
    fn wr_bind_mw(qp: *mut ibv_qp_ex, mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info) as void {
        // SAFETY: `bind_info` NULL or readable.
        let bi = (!bind_info.is_null()).then(|| unsafe { *bind_info });
        // SAFETY: caller passes a QP of ours.
        unsafe {
            with_batch(qp, |s, b| {
                let Some(bi) = bi else { return batch_fail(b, libc::EINVAL) };
                let (Some(mw), Some(mr)) = (mw_id(mw), mr_id(bi.mr)) else {
                    return batch_fail(b, libc::EINVAL);
                };
                let access = AccessFlags(bi.mw_access_flags);
                let bind = MwBind { mw, rkey, mr, addr: bi.addr, length: bi.length, access };
                push_wr(s, b, IBV_QP_EX_WITH_BIND_MW, WrKind::BindMw(bind));
            })
        }
    }
}

macro_rules! wr_unsupported {
    ($name:ident($($a:ident: $t:ty),*)) => {
        crate::c_fn! {
            fn $name(qp: *mut ibv_qp_ex $(, $a: $t)*) as void {
                $(let _ = $a;)*
                // SAFETY: caller passes a QP of ours.
                unsafe { with_batch(qp, |_, b| batch_fail(b, libc::EOPNOTSUPP)) }
            }
        }
    };
}
wr_unsupported!(wr_send_tso(hdr: *mut c_void, hdr_sz: u16, mss: u16));
wr_unsupported!(wr_set_xrc_srqn(remote_srqn: u32));
wr_unsupported!(wr_atomic_write(rkey: u32, remote_addr: u64, atomic_wr: *const c_void));

fn set_last_sges(s: &UrxeQp, b: &mut WrBatch, sges: Result<Vec<Sge>, i32>, inline: bool) {
    let sges = match sges {
        Ok(v) => v,
        Err(e) => return batch_fail(b, e),
    };
    let max_sge = s.cap.max_send_sge as usize;
    let max_inline = s.cap.max_inline_data as u64;
    let Some(last) = b.wrs.last_mut() else {
        return batch_fail(b, libc::EINVAL);
    };
    if inline {
        let total: u64 = sges.iter().map(|g| g.length as u64).sum();
        if total > max_inline {
            return batch_fail(b, libc::EINVAL);
        }
        last.flags |= IBV_SEND_INLINE as u32;
    } else if sges.len() > max_sge {
        return batch_fail(b, libc::EINVAL);
    }
    last.sges = sges;
}

crate::c_fn! {
    fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) as void {
        // SAFETY: caller passes a QP of ours.
        unsafe { with_batch(qp, |s, b| set_last_sges(s, b, Ok(vec![Sge { addr, length, lkey }]), false)) }
    }
}
crate::c_fn! {
    fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) as void {
        let v = if num_sge > MAX_SGE || (num_sge > 0 && sg_list.is_null()) {
            Err(libc::EINVAL)
        } else if num_sge == 0 {
            Ok(Vec::new())
        } else {
            // SAFETY: caller passes num_sge readable SGEs.
            let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge) };
            Ok(list.iter().map(|g| Sge { addr: g.addr, length: g.length, lkey: g.lkey }).collect())
        };
        // SAFETY: caller passes a QP of ours.
        unsafe { with_batch(qp, |s, b| set_last_sges(s, b, v, false)) }
    }
}
crate::c_fn! {
    fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) as void {
        let v = u32::try_from(length)
            .map(|len| vec![Sge { addr: addr as u64, length: len, lkey: 0 }])
            .map_err(|_| libc::EINVAL);
        // SAFETY: caller passes a QP of ours.
        unsafe { with_batch(qp, |s, b| set_last_sges(s, b, v, true)) }
    }
}
crate::c_fn! {
    fn wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) as void {
        let v = if num_buf > MAX_SGE || (num_buf > 0 && buf_list.is_null()) {
            Err(libc::EINVAL)
        } else if num_buf == 0 {
            Ok(Vec::new())
        } else {
            // SAFETY: caller passes num_buf readable buffers.
            let list = unsafe { std::slice::from_raw_parts(buf_list, num_buf) };
            list.iter()
                .map(|d| {
                    u32::try_from(d.length)
                        .map(|len| Sge { addr: d.addr as u64, length: len, lkey: 0 })
                        .map_err(|_| libc::EINVAL)
                })
                .collect()
        };
        // SAFETY: caller passes a QP of ours.
        unsafe { with_batch(qp, |s, b| set_last_sges(s, b, v, true)) }
    }
}
crate::c_fn! {
    fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) as void {
        // SAFETY: caller passes a QP of ours.
        unsafe {
            with_batch(qp, |_, b| match b.wrs.last_mut() {
                Some(last) => last.ud = Some((ah, remote_qpn, remote_qkey)),
                None => batch_fail(b, libc::EINVAL),
            })
        }
    }
}
crate::c_fn! {
    fn wr_start(qp: *mut ibv_qp_ex) as void {
        // SAFETY: caller passes a QP of ours.
        unsafe {
            with_batch(qp, |_, b| {
                b.active = true;
                b.wrs.clear();
                b.error = 0;
            })
        }
    }
}
crate::c_fn! {
    fn wr_abort(qp: *mut ibv_qp_ex) as void {
        // SAFETY: caller passes a QP of ours.
        unsafe {
            with_batch(qp, |_, b| {
                b.active = false;
                b.wrs.clear();
                b.error = 0;
            })
        }
    }
}

/// Engine view of one pending WR.
fn pending_to_send_wr<'a>(p: &'a PendingWr, qp_type: QpType) -> Result<SendWr<'a>, i32> {
    let flags = SendFlags(p.flags);
    if flags.unknown_bits() != 0 {
        return Err(libc::EINVAL);
    }
    let ud = match (qp_type, p.ud) {
        (QpType::Ud, Some((ah, remote_qpn, remote_qkey))) => {
            Some(UdDest { ah: ah_id(ah).ok_or(libc::EINVAL)?, remote_qpn: remote_qpn & 0x00ff_ffff, remote_qkey })
        }
        (QpType::Ud, None) => return Err(libc::EINVAL),
        _ => None,
    };
    Ok(SendWr { wr_id: p.wr_id, kind: p.kind, flags, sg_list: &p.sges, ud })
}

crate::c_fn! {
    fn wr_complete(qp: *mut ibv_qp_ex) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let s: &UrxeQp = unsafe { shell(qp) }?;
        let (wrs, err) = {
            let mut b = s.batch.lock().unwrap_or_else(|e| e.into_inner());
            if !b.active {
                return Err(libc::EINVAL);
            }
            b.active = false;
            (std::mem::take(&mut b.wrs), std::mem::take(&mut b.error))
        };
        if err != 0 {
            return Err(err);
        }
        // SAFETY: its context is live.
        let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
        // Converted first, so a bad WR posts nothing; then posted under one lock.
        let converted: Result<Vec<_>, i32> = wrs.iter().map(|p| pending_to_send_wr(p, s.qp_type)).collect();
        let converted = converted?;
        glue::post_send_chain(dev, s.qpn, |post| converted.iter().try_for_each(post))
    }
}

export! {
    /// `ibv_query_qp_data_in_order(3)`: 0 = no in-order guarantee is advertised.
    fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: c_uint, flags: u32) -> c_int as value(0) {
        0
    }
}

export! {
    /// `ibv_query_ece(3)`: ECE is a Mellanox feature; EOPNOTSUPP.
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int as errno {
        non_null(qp)?;
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `ibv_set_ece(3)`: EOPNOTSUPP.
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int as errno {
        non_null(qp)?;
        Err(libc::EOPNOTSUPP)
    }
}

// ------------------------------------------------------------------------------------------
// SRQ
// ------------------------------------------------------------------------------------------

/// # Safety
/// `pd` NULL or ours; `attr` NULL or writable.
unsafe fn create_srq_common(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_attr,
    srq_context: *mut c_void,
) -> Result<*mut ibv_srq, i32> {
    // SAFETY: caller contract.
    let p: &UrxePd = unsafe { shell(pd) }?;
    let a = non_null(attr)?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(p.ibv.context) }?;
    // SAFETY: readable caller struct.
    let ea = convert::srq_attr_from_c(unsafe { &*a }, &dev.info.limits)?;
    let (id, granted) = glue::create_srq(dev, p.id, ea)?;
    // SAFETY: writable caller struct.
    unsafe { a.write(ibv_srq_attr { max_wr: granted.max_wr, max_sge: granted.max_sge, srq_limit: granted.srq_limit }) };
    let mut b =
        Box::new(UrxeSrq { ibv: zeroed(), id, max_sge: granted.max_sge, async_events_read: Default::default() });
    b.ibv.context = p.ibv.context;
    b.ibv.srq_context = srq_context;
    b.ibv.pd = pd;
    b.ibv.handle = id;
    let raw = Box::into_raw(b);
    // SAFETY: live boxed SRQ; in-place init.
    unsafe { init_sync(ptr::addr_of_mut!((*raw).ibv.mutex), ptr::addr_of_mut!((*raw).ibv.cond)) };
    crate::events::register_async(crate::events::AsyncKind::Srq, id, raw as usize);
    Ok(raw as *mut ibv_srq)
}

export! {
    /// `ibv_create_srq(3)`: writes the granted attributes back.
    fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq as ptr {
        let ia = non_null(srq_init_attr)?;
        // SAFETY: caller passes a PD of ours and a writable init attr.
        unsafe { create_srq_common(pd, ptr::addr_of_mut!((*ia).attr), (*ia).srq_context) }
    }
}

crate::c_fn! {
    /// `verbs_context.create_srq_ex`: basic SRQs only (XRC / tag matching: EOPNOTSUPP).
    fn create_srq_ex_op(context: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq as ptr {
        // SAFETY: caller passes a context of ours.
        unsafe { ctx_from(context) }?;
        let a = non_null(attr)?;
        // SAFETY: readable caller struct.
        let (mask, ty, pd) = unsafe { ((*a).comp_mask, (*a).srq_type, (*a).pd) };
        let known = (IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM) as u32;
        if mask & !known != 0 {
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_INIT_ATTR_TYPE as u32 != 0 && ty as u64 != IBV_SRQT_BASIC {
            return Err(libc::EOPNOTSUPP);
        }
        if mask & IBV_SRQ_INIT_ATTR_PD as u32 == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: as above.
        unsafe { create_srq_common(pd, ptr::addr_of_mut!((*a).attr), (*a).srq_context) }
    }
}

crate::c_fn! {
    /// `verbs_context.get_srq_num`: XRC only; EOPNOTSUPP.
    fn get_srq_num_op(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int as errno {
        non_null(srq)?;
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `ibv_modify_srq(3)`.
    fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int as errno {
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
        glue::modify_srq(unsafe { dev_of(s.ibv.context) }?, s.id, SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit }, m)
    }
}

export! {
    /// `ibv_query_srq(3)`.
    fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        let out = non_null(srq_attr)?;
        // SAFETY: its context is live.
        let a = glue::query_srq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: writable caller struct.
        unsafe { out.write(ibv_srq_attr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit }) };
        Ok(())
    }
}

export! {
    /// `ibv_destroy_srq(3)`.
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        // SAFETY: its context is live.
        glue::destroy_srq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        let raw = s as *const UrxeSrq as *mut UrxeSrq;
        crate::events::unregister_async(crate::events::AsyncKind::Srq, s.id, raw as usize);
        // SAFETY: live until freed below.
        unsafe {
            let m = ptr::addr_of_mut!((*raw).ibv.mutex);
            let c = ptr::addr_of_mut!((*raw).ibv.cond);
            wait_acked(m, c, ptr::addr_of!((*raw).ibv.events_completed), || (*raw).async_events_read.load(Ordering::Acquire));
            destroy_sync(m, c);
            drop(Box::from_raw(raw));
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------
// XRCD (not supported: the inline wrappers turn NULL ops into EOPNOTSUPP; we say it ourselves
// so the failure is ours and visible under URXE_TRACE)
// ------------------------------------------------------------------------------------------

crate::c_fn! {
    fn open_xrcd_op(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd as ptr {
        // SAFETY: caller passes a context of ours.
        unsafe { ctx_from(context) }?;
        Err(libc::EOPNOTSUPP)
    }
}
crate::c_fn! {
    fn close_xrcd_op(xrcd: *mut ibv_xrcd) -> c_int as errno {
        Err(libc::EOPNOTSUPP)
    }
}

// ------------------------------------------------------------------------------------------
// AH
// ------------------------------------------------------------------------------------------

export! {
    /// `ibv_create_ah(3)`.
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah as ptr {
        // SAFETY: caller passes a PD of ours.
        let p: &UrxePd = unsafe { shell(pd) }?;
        let a = non_null(attr)?;
        // SAFETY: readable caller struct.
        let ea = convert::ah_attr_from_c(unsafe { &*a })?;
        // SAFETY: its context is live.
        let id = glue::create_ah(unsafe { dev_of(p.ibv.context) }?, p.id, &ea)?;
        let ah = Box::new(UrxeAh { ibv: ibv_ah { context: p.ibv.context, pd, handle: id }, id });
        Ok(Box::into_raw(ah) as *mut ibv_ah)
    }
}

export! {
    /// `ibv_destroy_ah(3)`.
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int as errno {
        // SAFETY: caller passes an AH of ours.
        let s: &UrxeAh = unsafe { shell(ah) }?;
        // SAFETY: its context is live.
        glue::destroy_ah(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: from Box::into_raw in ibv_create_ah; freed once.
        drop(unsafe { Box::from_raw(s as *const UrxeAh as *mut UrxeAh) });
        Ok(())
    }
}

/// The 40-byte GRH area at the start of a UD receive buffer. For RoCEv2 over IPv4 the
/// IPv4 header sits in its last 20 bytes (the first 20 are zero), as rxe and NICs deliver.
pub fn ah_attr_from_grh(grh: &[u8; 40], wc: &ibv_wc, port_num: u8) -> Result<ibv_ah_attr, i32> {
    let v4 = &grh[20..40];
    let (sgid_src, flow_label, hop_limit, tclass) = if v4[0] == 0x45 && grh[..20].iter().all(|b| *b == 0) {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&v4[12..16]);
        (g, 0u32, v4[8], v4[1])
    } else if grh[0] >> 4 == 6 {
        let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        let mut g = [0u8; 16];
        g.copy_from_slice(&grh[8..24]);
        (g, vtf & 0xf_ffff, grh[7], ((vtf >> 20) & 0xff) as u8)
    } else {
        return Err(libc::EINVAL);
    };
    Ok(ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: sgid_src },
            flow_label,
            sgid_index: 0,
            hop_limit,
            traffic_class: tclass,
        },
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        static_rate: 0,
        is_global: 1,
        port_num,
    })
}

export! {
    /// `ibv_init_ah_from_wc(3)`: 0 or -1 + errno. RoCE requires the GRH (IBV_WC_GRH).
    fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut c_void, ah_attr: *mut ibv_ah_attr) -> c_int as neg1 {
        // SAFETY: caller passes a context of ours.
        unsafe { ctx_from(context) }?;
        let wc = non_null(wc)?;
        let out = non_null(ah_attr)?;
        // SAFETY: readable caller struct.
        let w = unsafe { *wc };
        if w.wc_flags & IBV_WC_GRH as u32 == 0 {
            return Err(libc::EINVAL);
        }
        let g = non_null_const(grh as *const [u8; 40])?;
        // SAFETY: with IBV_WC_GRH the caller passes the 40-byte GRH area of the receive buffer.
        let a = ah_attr_from_grh(unsafe { &*g }, &w, port_num)?;
        // SAFETY: writable caller struct.
        unsafe { out.write(a) };
        Ok(0)
    }
}

export! {
    /// `ibv_create_ah_from_wc(3)`.
    fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut c_void, port_num: u8) -> *mut ibv_ah as ptr {
        let p = non_null(pd)?;
        let mut a: ibv_ah_attr = zeroed();
        // SAFETY: caller passes a PD of ours; forwarded pointers as documented.
        unsafe {
            if ibv_init_ah_from_wc((*p).context, port_num, wc, grh, &mut a) != 0 {
                return Err(crate::export::errno());
            }
            let ah = ibv_create_ah(pd, &mut a);
            if ah.is_null() { Err(crate::export::errno()) } else { Ok(ah) }
        }
    }
}

// ------------------------------------------------------------------------------------------
// MW
// ------------------------------------------------------------------------------------------

crate::c_fn! {
    /// `ops.alloc_mw`.
    fn alloc_mw_op(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw as ptr {
        // SAFETY: caller passes a PD of ours.
        let p: &UrxePd = unsafe { shell(pd) }?;
        let ty = match mw_type as u64 {
            IBV_MW_TYPE_1 => MwType::Type1,
            IBV_MW_TYPE_2 => MwType::Type2,
            _ => return Err(libc::EINVAL),
        };
        // SAFETY: its context is live.
        let (id, rkey) = glue::alloc_mw(unsafe { dev_of(p.ibv.context) }?, p.id, ty)?;
        let mw = Box::new(UrxeMw { ibv: ibv_mw { context: p.ibv.context, pd, rkey, handle: id, type_: mw_type }, id });
        Ok(Box::into_raw(mw) as *mut ibv_mw)
    }
}

crate::c_fn! {
    /// `ops.dealloc_mw`.
    fn dealloc_mw_op(mw: *mut ibv_mw) -> c_int as errno {
        // SAFETY: caller passes an MW of ours.
        let s: &UrxeMw = unsafe { shell(mw) }?;
        // SAFETY: its context is live.
        glue::dealloc_mw(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: from Box::into_raw in alloc_mw_op; freed once.
        drop(unsafe { Box::from_raw(s as *const UrxeMw as *mut UrxeMw) });
        Ok(())
    }
}

crate::c_fn! {
    /// `ops.bind_mw` (`ibv_bind_mw(3)`, type 1 windows).
    fn bind_mw_op(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int as errno {
        // SAFETY: caller passes a QP of ours.
        let q: &UrxeQp = unsafe { shell(qp) }?;
        let b = non_null(mw_bind)?;
        // SAFETY: caller passes an MW of ours.
        let w: &UrxeMw = unsafe { shell(mw) }?;
        if w.ibv.type_ as u64 != IBV_MW_TYPE_1 {
            return Err(libc::EINVAL);
        }
        // SAFETY: readable caller struct.
        let b = unsafe { &*b };
        let access = AccessFlags(b.bind_info.mw_access_flags);
        if access.unknown_bits() != 0 {
            return Err(libc::EINVAL);
        }
        let mr = mr_id(b.bind_info.mr).ok_or(libc::EINVAL)?;
        let bind = MwBind { mw: w.id, rkey: w.ibv.rkey, mr, addr: b.bind_info.addr, length: b.bind_info.length, access };
        let signaled = b.send_flags & IBV_SEND_SIGNALED as u32 != 0;
        // SAFETY: its context is live.
        let rkey = glue::bind_mw(unsafe { dev_of(q.ibv.qp_base.context) }?, q.qpn, b.wr_id, signaled, &bind)?;
        // SAFETY: the caller's MW; `rkey` is the C-visible field it reads after the bind.
        unsafe { ptr::addr_of_mut!((*mw).rkey).write(rkey) };
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------
// Multicast, import
// ------------------------------------------------------------------------------------------

export! {
    /// `ibv_attach_mcast(3)`: no multicast (max_mcast_grp = 0): EOPNOTSUPP.
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int as errno {
        non_null(qp)?;
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `ibv_detach_mcast(3)`: EOPNOTSUPP.
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int as errno {
        non_null(qp)?;
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `ibv_import_pd(3)`: sharing engine objects between contexts is not supported yet.
    fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd as ptr {
        // A context imported with ibv_import_device lives in this process and shares urxe0's
        // one engine, so the handle names the same engine PD: a new shell over it.
        // SAFETY: caller passes a context of ours.
        let dev = unsafe { dev_of(context) }?;
        glue::query_pd(dev, pd_handle).map_err(|_| libc::EINVAL)?;
        let pd = Box::new(UrxePd { ibv: ibv_pd { context, handle: pd_handle }, id: pd_handle });
        Ok(Box::into_raw(pd) as *mut ibv_pd)
    }
}

export! {
    /// `ibv_unimport_pd(3)`: frees the shell; the PD itself stays (dealloc destroys it).
    fn ibv_unimport_pd(pd: *mut ibv_pd) as void {
        // SAFETY: caller passes a PD of ours.
        if let Ok(s) = unsafe { shell::<_, UrxePd>(pd) } {
            // SAFETY: from Box::into_raw in ibv_import_pd/ibv_alloc_pd; freed once.
            drop(unsafe { Box::from_raw(s as *const UrxePd as *mut UrxePd) });
        }
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
        // SAFETY: caller passes an MR of ours.
        if let Ok(s) = unsafe { shell::<_, UrxeMr>(mr) } {
            // SAFETY: from Box::into_raw in reg_mr_common/ibv_import_mr; freed once.
            drop(unsafe { Box::from_raw(s as *const UrxeMr as *mut UrxeMr) });
        }
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

    #[test]
    fn grh_of_ipv4_and_ipv6_packets() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[21] = 0x10; // TOS
        g[28] = 64; // TTL
        g[32..36].copy_from_slice(&[10, 0, 0, 2]);
        let mut wc: ibv_wc = zeroed();
        wc.sl = 2;
        let a = ah_attr_from_grh(&g, &wc, 1).unwrap();
        // SAFETY: byte view of a union.
        let dgid = unsafe { a.grh.dgid.raw };
        assert_eq!(dgid, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
        assert_eq!((a.grh.hop_limit, a.grh.traffic_class, a.is_global, a.sl, a.port_num), (64, 0x10, 1, 2, 1));
        let mut g6 = [0u8; 40];
        g6[0] = 0x60;
        g6[3] = 0x05; // flow label 5
        g6[7] = 9;
        g6[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let a = ah_attr_from_grh(&g6, &wc, 1).unwrap();
        assert_eq!((a.grh.flow_label, a.grh.hop_limit), (5, 9));
        // SAFETY: byte view of a union.
        assert_eq!(unsafe { a.grh.dgid.raw }[0..4], [0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(ah_attr_from_grh(&[0u8; 40], &wc, 1).err(), Some(libc::EINVAL));
    }

    fn test_qp(send_ops: u64) -> Box<UrxeQp> {
        let mut b = Box::new(UrxeQp {
            ibv: zeroed(),
            qpn: 0x11,
            qp_type: QpType::Rc,
            has_qp_ex: true,
            send_ops_flags: send_ops,
            cap: urxe::engine::QpCap { max_send_sge: 2, max_inline_data: 16, ..Default::default() },
            sq_sig_all: false,
            async_events_read: Default::default(),
            batch: Default::default(),
        });
        fill_wr_table(&mut b.ibv);
        b
    }

    #[test]
    fn qp_ex_builder_collects_wrs_and_reports_misuse_at_complete() {
        let mut q = test_qp(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE);
        let p = &mut q.ibv as *mut ibv_qp_ex;
        // SAFETY: `p` is a live test QP used by this thread only.
        unsafe {
            wr_start(p);
            (*p).wr_id = 1;
            (*p).wr_flags = IBV_SEND_SIGNALED as u32;
            wr_send(p);
            wr_set_sge(p, 7, 0x1000, 64);
            (*p).wr_id = 2;
            wr_rdma_write(p, 0x55, 0x2000);
            wr_set_inline_data(p, 0x3000 as *mut c_void, 8);
        }
        assert_eq!(q.batch.lock().unwrap().wrs.len(), 2);
        assert_eq!(q.batch.lock().unwrap().wrs[0].wr_id, 1);
        assert_eq!(q.batch.lock().unwrap().wrs[0].sges, vec![Sge { addr: 0x1000, length: 64, lkey: 7 }]);
        assert_eq!(q.batch.lock().unwrap().wrs[1].kind, WrKind::RdmaWrite { remote_addr: 0x2000, rkey: 0x55 });
        assert_ne!(q.batch.lock().unwrap().wrs[1].flags & IBV_SEND_INLINE as u32, 0);
        assert_eq!(q.batch.lock().unwrap().error, 0);
        let w0 = q.batch.lock().unwrap().wrs[0].clone();
        let w = pending_to_send_wr(&w0, QpType::Rc).unwrap();
        assert_eq!(w.flags, SendFlags::SIGNALED);
        // SAFETY: as above.
        unsafe {
            wr_abort(p);
            wr_start(p);
            wr_atomic_fetch_add(p, 1, 2, 3); // not in send_ops_flags
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EOPNOTSUPP);
        // SAFETY: as above.
        assert_eq!(unsafe { wr_complete(p) }, libc::EOPNOTSUPP);
        // SAFETY: as above.
        unsafe {
            wr_start(p);
            wr_send(p);
            wr_set_inline_data(p, 0x3000 as *mut c_void, 17); // > max_inline_data
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EINVAL);
        // SAFETY: as above.
        unsafe {
            wr_abort(p);
            wr_send(p); // no wr_start
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EINVAL);
        // SAFETY: as above.
        let rc = unsafe { wr_complete(p) };
        assert_eq!(rc, libc::EINVAL, "complete without start");
    }

    #[test]
    fn ud_pending_wr_needs_an_address() {
        let p = PendingWr { wr_id: 1, flags: 0, kind: WrKind::Send, sges: vec![], ud: None };
        assert_eq!(pending_to_send_wr(&p, QpType::Ud).unwrap_err(), libc::EINVAL);
        let p = PendingWr { ud: Some((ptr::null_mut(), 1, 2)), ..p };
        assert_eq!(pending_to_send_wr(&p, QpType::Ud).unwrap_err(), libc::EINVAL);
    }
}
