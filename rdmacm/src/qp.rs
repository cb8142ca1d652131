//! The QP calls of rdma_cm (`rdma_create_qp`, `rdma_create_qp_ex`, `rdma_destroy_qp`): the
//! QP is made through the libibverbs.so.1 the application loaded, with its CQs (and their
//! completion channels) made here when the caller gives none.

use crate::abi::*;
use crate::core::*;
use crate::verbs::*;
use libc::{c_int, c_void};
use std::ptr;

fn key<T>(p: *mut T) -> Result<usize, i32> {
    if p.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(p as usize)
    }
}

/// A CQ with its own completion channel; its `cq_context` is the ID, which
/// `rdma_get_send_comp` / `rdma_get_recv_comp` assert.
fn make_cq(ctx: *mut ibv_context, cqe: u32, id: *mut rdma_cm_id) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), i32> {
    // SAFETY: an open context; on failure the channel is destroyed again.
    unsafe {
        let ch = ibv_create_comp_channel(ctx);
        if ch.is_null() {
            return Err(crate::export_errno());
        }
        let cq = ibv_create_cq(ctx, cqe.max(1) as c_int, id as *mut c_void, ch, 0);
        if cq.is_null() {
            let e = crate::export_errno();
            ibv_destroy_comp_channel(ch);
            return Err(e);
        }
        Ok((ch, cq))
    }
}

fn free_cqs(c: &mut rdma_cm_id) {
    // SAFETY: CQs and channels this library created for the ID; each freed once.
    unsafe {
        for (cq, ch) in [(c.send_cq, c.send_cq_channel), (c.recv_cq, c.recv_cq_channel)] {
            if !cq.is_null() {
                ibv_destroy_cq(cq);
            }
            if !ch.is_null() {
                ibv_destroy_comp_channel(ch);
            }
        }
    }
    c.send_cq = ptr::null_mut();
    c.recv_cq = ptr::null_mut();
    c.send_cq_channel = ptr::null_mut();
    c.recv_cq_channel = ptr::null_mut();
}

/// `rdma_create_qp` (the plain attributes: what `rdma_get_request` and `rdma_create_ep` pass
/// too), through [`create_qp_ex`] as librdmacm does.
pub(crate) fn create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<(), i32> {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { *attr };
    // SAFETY: ibv_qp_init_attr_ex is plain C data: all-zero is valid.
    let mut x: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    x.qp_context = a.qp_context;
    x.send_cq = a.send_cq;
    x.recv_cq = a.recv_cq;
    x.srq = a.srq;
    x.cap = a.cap;
    x.qp_type = a.qp_type;
    x.sq_sig_all = a.sq_sig_all;
    if !pd.is_null() {
        x.comp_mask = QP_INIT_ATTR_PD;
        x.pd = pd;
    }
    create_qp_ex(id, &mut x)?;
    // As librdmacm: the caller's attributes show what was granted and the CQs used.
    // SAFETY: the caller's attributes.
    unsafe {
        (*attr).cap = x.cap;
        (*attr).send_cq = x.send_cq;
        (*attr).recv_cq = x.recv_cq;
        (*attr).srq = x.srq;
    }
    Ok(())
}

/// The QP of an ID from extended attributes: the PD is the caller's (`IBV_QP_INIT_ATTR_PD`) or
/// the device's shared one; missing CQs are made here; every other `comp_mask` bit (send
/// ops flags, create flags, ...) goes as it is to the provider's `ibv_create_qp_ex`, which
/// answers for them, so `ibv_qp_to_qp_ex` works on the QP as on any other.
fn create_qp_ex(id: *mut rdma_cm_id, x: &mut ibv_qp_init_attr_ex) -> Result<(), i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    let ctx = lib.device()?.ctx;
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    // SAFETY: a live ID box.
    let c = unsafe { &mut *id };
    if !c.qp.is_null() || st.state == IdState::Listening {
        return Err(libc::EINVAL);
    }
    let given = if x.comp_mask & QP_INIT_ATTR_PD != 0 { x.pd } else { ptr::null_mut() };
    let pd = if given.is_null() { lib.shared_pd()? } else { given };
    // SAFETY: `pd` is a PD of libibverbs.
    if unsafe { (*pd).context } != ctx {
        return Err(libc::EINVAL);
    }
    let mut a = *x;
    a.comp_mask |= QP_INIT_ATTR_PD;
    a.pd = pd;
    let own = a.send_cq.is_null() || a.recv_cq.is_null();
    if own {
        let (sch, scq) = make_cq(ctx, a.cap.max_send_wr, id)?;
        c.send_cq_channel = sch;
        c.send_cq = scq;
        match make_cq(ctx, a.cap.max_recv_wr, id) {
            Ok((rch, rcq)) => {
                c.recv_cq_channel = rch;
                c.recv_cq = rcq;
            }
            Err(e) => {
                free_cqs(c);
                return Err(e);
            }
        }
        if a.send_cq.is_null() {
            a.send_cq = c.send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = c.recv_cq;
        }
    } else {
        c.send_cq = a.send_cq;
        c.recv_cq = a.recv_cq;
    }
    if a.srq.is_null() {
        a.srq = c.srq;
    }
    // SAFETY: a PD of this context and the attributes above.
    let qp = unsafe { create_qp_through(ctx, &mut a) };
    if qp.is_null() {
        let e = crate::export_errno();
        if own {
            free_cqs(c);
        }
        return Err(e);
    }
    c.qp = qp;
    c.pd = pd;
    c.qp_type = a.qp_type as c_int;
    let st = lib.id(id)?;
    st.qp_type = a.qp_type as c_int;
    st.own_cqs = own;
    let ud = a.qp_type as c_int == qp_type::UD;
    let r = if ud {
        lib.modify(k, qp_state::INIT)
            .and_then(|_| lib.modify(k, qp_state::RTR))
            .and_then(|_| lib.modify(k, qp_state::RTS))
    } else {
        lib.modify(k, qp_state::INIT)
    };
    if let Err(e) = r {
        // SAFETY: the QP just created, not yet seen by anyone.
        unsafe { ibv_destroy_qp(qp) };
        c.qp = ptr::null_mut();
        if own {
            free_cqs(c);
        }
        return Err(e);
    }
    x.cap = a.cap;
    x.send_cq = a.send_cq;
    x.recv_cq = a.recv_cq;
    x.srq = a.srq;
    Ok(())
}

/// `ibv_create_qp_ex` (an inline of `<infiniband/verbs.h>`): the plain `ibv_create_qp` when
/// only the PD is given, else the context's `create_qp_ex` op.
///
/// # Safety
/// `ctx` is an open context of the loaded libibverbs.so.1; `a` names a PD of it.
unsafe fn create_qp_through(ctx: *mut ibv_context, a: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if a.comp_mask == QP_INIT_ATTR_PD {
        let mut plain = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: caller contract.
        let qp = unsafe { ibv_create_qp(a.pd, &mut plain) };
        a.cap = plain.cap;
        return qp;
    }
    // SAFETY: caller contract: a context of urxe's libibverbs.so.1 (rdma_cm runs only over
    // it, see verbs::gsi), which always has the extended `verbs_context` in front.
    match unsafe { verbs_context_op_create_qp_ex(ctx) } {
        // SAFETY: the op of this context, with its own context and our attributes.
        Some(f) => unsafe { f(ctx, a) },
        None => {
            // SAFETY: sets the calling thread's errno.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            ptr::null_mut()
        }
    }
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    create_qp(id, pd, qp_init_attr)?;
    Ok(0)
}

/// The extended attributes go to the provider's `ibv_create_qp_ex` as librdmacm passes
/// them (send ops flags for `ibv_qp_to_qp_ex`, ...); the PD is optional.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int {
    key(id)?;
    if qp_init_attr.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's attributes.
    create_qp_ex(id, unsafe { &mut *qp_init_attr })?;
    Ok(0)
}

pub(crate) fn destroy_qp(id: *mut rdma_cm_id) -> Result<(), i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    let own = lib.ids.get(&k).ok_or(libc::EINVAL)?.own_cqs;
    // SAFETY: a live ID box.
    let c = unsafe { &mut *id };
    if !c.qp.is_null() {
        // SAFETY: the ID's QP, destroyed once.
        unsafe { ibv_destroy_qp(c.qp) };
        c.qp = ptr::null_mut();
    }
    if own {
        free_cqs(c);
        lib.id(id)?.own_cqs = false;
    }
    Ok(())
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| destroy_qp(id)));
    crate::export::finish("rdma_destroy_qp", r, ());
}
