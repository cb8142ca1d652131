//! Completion queues: `ibv_create_cq` / `create_cq_ex`, `ibv_destroy_cq`, `ibv_resize_cq`,
//! and the `ops.poll_cq` / `ops.req_notify_cq` entries. The `ibv_cq_ex` polling cursor is
//! [`super::cq_ex`].

use super::dev_of;
use crate::abi::*;
use crate::context::ctx_from;
use crate::convert;
use crate::events::{self, channel_ref, next_cq_serial, register_cq, unregister_cq, AsyncKind};
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_void};
use std::ptr;
use std::sync::atomic::Ordering;
use urxe::engine::WorkCompletion;

/// # Safety
/// `context` live context of ours; `attr` valid.
unsafe fn create_cq_common(context: *mut ibv_context, attr: &ibv_cq_init_attr_ex) -> Result<*mut UrxeCq, i32> {
    // SAFETY: caller contract.
    let u = unsafe { ctx_from(context) }?;
    let dev = u.device();
    let cqe = convert::cq_init_attr_check(attr, &dev.info.limits, u.vctx.context.num_comp_vectors as u32)?;
    if attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD as u32 != 0 {
        // SAFETY: caller passes NULL or a PD of ours.
        let p: &UrxePd = unsafe { shell(attr.parent_domain) }.map_err(|_| libc::EINVAL)?;
        if p.parent.is_none() || p.ibv.context != context {
            return Err(libc::EINVAL);
        }
    }
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
        ibv: ibv_cq_ex::zeroed(),
        id,
        serial: next_cq_serial(),
        comp_events_read: Default::default(),
        async_events_read: Default::default(),
        wc_flags: attr.wc_flags,
        cur: WorkCompletion::default(),
        parent_domain: if attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD as u32 != 0 {
            attr.parent_domain
        } else {
            ptr::null_mut()
        },
    });
    let c = &mut b.ibv;
    c.context = context;
    c.channel = attr.channel;
    c.cq_context = attr.cq_context;
    c.handle = id;
    c.cqe = granted as c_int;
    super::cq_ex::fill_cq_ex_table(c);
    let raw = Box::into_raw(b);
    // SAFETY: `raw` is a live boxed CQ; mutex/cond are initialised in place and never move;
    // its parent domain is NULL or a live parent domain of ours (checked by the caller).
    unsafe {
        parent_domain_use((*raw).parent_domain, 1);
        init_sync(ptr::addr_of_mut!((*raw).ibv.mutex), ptr::addr_of_mut!((*raw).ibv.cond));
        register_cq(raw, (*raw).serial);
        events::register_async(AsyncKind::Cq, id, raw as usize);
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
        unregister_cq((*raw).serial, (*raw).id);
        events::unregister_async(AsyncKind::Cq, (*raw).id, raw as usize);
        let m = ptr::addr_of_mut!((*raw).ibv.mutex);
        let c = ptr::addr_of_mut!((*raw).ibv.cond);
        wait_acked(m, c, ptr::addr_of!((*raw).ibv.comp_events_completed), || {
            (*raw).comp_events_read.load(Ordering::Acquire)
        });
        wait_acked(m, c, ptr::addr_of!((*raw).ibv.async_events_completed), || {
            (*raw).async_events_read.load(Ordering::Acquire)
        });
        channel_ref((*raw).ibv.channel, -1)?;
        parent_domain_use((*raw).parent_domain, -1);
        destroy_sync(m, c);
        drop(Box::from_raw(raw));
    }
    Ok(())
}

/// `ibv_create_cq(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let mut attr = ibv_cq_init_attr_ex::zeroed();
    attr.cqe = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
    attr.cq_context = cq_context;
    attr.channel = channel;
    attr.comp_vector = u32::try_from(comp_vector).map_err(|_| libc::EINVAL)?;
    // SAFETY: caller passes a context of ours.
    unsafe { create_cq_common(context, &attr) }.map(|p| p as *mut ibv_cq)
}

/// `verbs_context.create_cq_ex` (`ibv_create_cq_ex(3)`).
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn create_cq_ex_op(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let a = non_null(cq_attr)?;
    // SAFETY: caller passes a context of ours and a readable attr.
    unsafe { create_cq_common(context, &*a) }.map(|p| p as *mut ibv_cq_ex)
}

/// `ibv_destroy_cq(3)`: waits until every event handed out for the CQ was acked.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: caller passes a CQ of ours.
    let s: &UrxeCq = unsafe { shell(cq) }?;
    // SAFETY: its context is live.
    glue::destroy_cq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
    // SAFETY: the engine CQ is gone; the shell is ours to free.
    unsafe { free_cq_shell(s as *const UrxeCq as *mut UrxeCq) }?;
    Ok(())
}

/// `ibv_resize_cq(3)`.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
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

/// `ops.poll_cq`: number of completions, or a negative errno.
#[urxe_cabi::c_fn(negerrno)]
pub unsafe extern "C" fn poll_cq_op(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
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

/// `ops.req_notify_cq`: arm the CQ (one shot).
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn req_notify_cq_op(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: caller passes a CQ of ours.
    let s: &UrxeCq = unsafe { shell(cq) }?;
    // SAFETY: its context is live.
    glue::req_notify_cq(unsafe { dev_of(s.ibv.context) }?, s.id, solicited_only != 0)
}
