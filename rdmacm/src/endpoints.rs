//! The rdma_cm calls around an ID: devices, SRQs, synchronous endpoints (`rdma_create_ep`,
//! `rdma_get_request`), multicast joins and ECE.

use crate::abi::*;
use crate::api::*;
use crate::core::*;
use crate::events::*;
pub use crate::qp::*;
use crate::verbs::*;
use libc::{c_int, c_uint, c_void, sockaddr};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ptr;

// ---- devices, QPs, SRQs -----------------------------------------------------------------------

#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let ctx = lock().device()?.ctx;
    // SAFETY: calloc of two pointers, freed by rdma_free_devices.
    let list = unsafe { libc::calloc(2, std::mem::size_of::<*mut ibv_context>()) } as *mut *mut ibv_context;
    if list.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: `list` has two slots; `num_devices` is NULL or the caller's.
    unsafe {
        *list = ctx;
        if !num_devices.is_null() {
            *num_devices = 1;
        }
    }
    Ok(list)
}

/// `rdma_free_devices`.
///
/// # Safety
/// `list` is NULL or came from `rdma_get_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: calloc'd by rdma_get_devices (free(NULL) is a no-op).
    unsafe { libc::free(list as *mut c_void) };
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int {
    if attr.is_null() {
        return Err(libc::EINVAL);
    }
    let mut lib = lock();
    lib.device()?;
    lib.id(id)?;
    let pd = if pd.is_null() { lib.shared_pd()? } else { pd };
    // SAFETY: a PD and the caller's attributes.
    let srq = unsafe { ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(crate::export_errno());
    }
    // SAFETY: a live ID box.
    unsafe {
        (*id).srq = srq;
        (*id).pd = pd;
    }
    Ok(0)
}

/// Extended SRQs (XRC, tag matching) are not offered through rdma_cm: EOPNOTSUPP.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> c_int {
    key(id)?;
    key(attr)?;
    Err(libc::EOPNOTSUPP)
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(), i32> {
        lock().id(id)?;
        // SAFETY: a live ID box; its SRQ is destroyed once.
        unsafe {
            if !(*id).srq.is_null() {
                ibv_destroy_srq((*id).srq);
                (*id).srq = ptr::null_mut();
            }
        }
        Ok(())
    }));
    crate::export::finish("rdma_destroy_srq", r, ());
}

// ---- synchronous endpoints --------------------------------------------------------------------

/// `rdma_get_request(3)` on a synchronous listening endpoint: the next connection request's
/// ID (its QP created when the endpoint has QP attributes). A cancellation point while it
/// waits, as librdmacm's is (see [`event_call`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    let start = || {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let mut lib = lock();
        let st = lib.id(listen)?;
        if !st.sync || st.state != IdState::Listening {
            return Err(libc::EINVAL);
        }
        Ok((st.channel, st.ep_qp))
    };
    let finish = |b: *mut EventBox, ep: Option<(ibv_qp_init_attr, *mut ibv_pd)>| {
        // SAFETY: an outstanding event box.
        let (ev, status, child) = unsafe { ((*b).ev.event, (*b).ev.status, (*b).ev.id) };
        if ev != event::CONNECT_REQUEST || status != 0 {
            let _ = ack(b as usize);
            return Err(if status < 0 { -status } else { libc::EINVAL });
        }
        // SAFETY: the child ID the event names is live (its destroy would have dropped the
        // event); the request event stays with it, as librdmacm keeps it in `id->event`.
        unsafe { (*child).event = b as *mut rdma_cm_event };
        if let Some((mut attr, pd)) = ep {
            if let Err(e) = create_qp(child, pd, &mut attr) {
                let _ = reject_id(child, ptr::null(), 0);
                let _ = destroy_id(child);
                return Err(e);
            }
        }
        // SAFETY: the caller's out-parameter (checked non-null in `start`).
        unsafe { *id = child };
        Ok(0)
    };
    event_call("rdma_get_request", start, finish)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's address info (from rdma_getaddrinfo).
    let r = unsafe { &*res };
    let ps = if r.ai_port_space != 0 {
        r.ai_port_space
    } else if r.ai_qp_type == qp_type::UD {
        ps::UDP
    } else {
        ps::TCP
    };
    let cid = create_id(ptr::null_mut(), ptr::null_mut(), ps)?;
    let setup = || -> Result<(), i32> {
        if r.ai_qp_type != 0 {
            lock().id(cid)?.qp_type = r.ai_qp_type;
        }
        let qpt = lock().id(cid)?.qp_type;
        // SAFETY: sockaddrs of the address info (or NULL).
        let (src, dst) = unsafe { (load_sockaddr(r.ai_src_addr)?, load_sockaddr(r.ai_dst_addr)?) };
        if r.ai_flags & RAI_PASSIVE != 0 {
            let src = src.unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
            bind(&mut lock(), cid, src)?;
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes, copied for every request.
                let mut a = unsafe { *qp_init_attr };
                a.qp_type = qpt as c_uint;
                lock().id(cid)?.ep_qp = Some((a, pd));
            }
            return Ok(());
        }
        resolve_addr(cid, src, dst.ok_or(libc::EINVAL)?, 2000)?;
        sync_wait(cid, event::ADDR_RESOLVED)?;
        resolve_route(cid, 2000)?;
        sync_wait(cid, event::ROUTE_RESOLVED)?;
        if !qp_init_attr.is_null() {
            // As librdmacm: the endpoint's QP type is the address info's.
            // SAFETY: the caller's attributes.
            unsafe { (*qp_init_attr).qp_type = qpt as c_uint };
            create_qp(cid, pd, qp_init_attr)?;
        }
        Ok(())
    };
    if let Err(e) = setup() {
        let _ = destroy_id(cid);
        return Err(e);
    }
    // SAFETY: the caller's out-parameter.
    unsafe { *id = cid };
    Ok(0)
}

/// `rdma_destroy_ep`: the QP (and the CQs made for it), then the ID.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        destroy_qp(id)?;
        destroy_id(id)
    }));
    crate::export::finish("rdma_destroy_ep", r, ());
}

// ---- multicast and ECE ------------------------------------------------------------------------

/// Joins the group at `addr` as a full member (see [`crate::mcast`]).
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int {
    key(id)?;
    // SAFETY: `addr` is a sockaddr per the man page (NULL is refused).
    unsafe { crate::mcast::join(id, key(addr)? as *const sockaddr, context, false) }?;
    sync_wait(id, event::MULTICAST_JOIN)?;
    Ok(0)
}

/// `rdma_join_multicast` with join flags: full member, or send-only full member (the QP is
/// not attached, so it sends to the group without receiving from it). Both attributes are
/// required (EINVAL), unknown ones are EOPNOTSUPP, as librdmacm.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    use crate::mcast::*;
    key(id)?;
    key(attr)?;
    // SAFETY: the caller's attribute struct.
    let (comp_mask, join_flags, addr) = unsafe { ((*attr).comp_mask, (*attr).join_flags, (*attr).addr) };
    if comp_mask & !(JOIN_MC_ATTR_ADDRESS | JOIN_MC_ATTR_JOIN_FLAGS) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if comp_mask & JOIN_MC_ATTR_ADDRESS == 0
        || comp_mask & JOIN_MC_ATTR_JOIN_FLAGS == 0
        || !matches!(join_flags, JOIN_FLAG_FULLMEMBER | JOIN_FLAG_SENDONLY_FULLMEMBER)
    {
        return Err(libc::EINVAL);
    }
    // SAFETY: `addr` is a sockaddr per the man page (NULL is refused).
    unsafe { join(id, key(addr)? as *const sockaddr, context, join_flags == JOIN_FLAG_SENDONLY_FULLMEMBER) }?;
    sync_wait(id, event::MULTICAST_JOIN)?;
    Ok(0)
}

/// Leaves a joined group: EADDRNOTAVAIL if `addr` was not joined on this ID.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    key(id)?;
    // SAFETY: `addr` is a sockaddr per the man page (NULL is refused).
    unsafe { crate::mcast::leave(id, key(addr)? as *const sockaddr) }?;
    Ok(0)
}

/// Kept for `rdma_get_remote_ece` symmetry; urxe (like rxe) negotiates no ECE options.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    if ece.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's ECE value.
    let e = unsafe { *ece };
    lock().id(id)?.local_ece = e;
    Ok(0)
}

/// The peer's ECE: always none (vendor 0): no ECE options travel in urxe's CM messages.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    if ece.is_null() {
        return Err(libc::EINVAL);
    }
    lock().id(id)?;
    // SAFETY: the caller's out-parameter.
    unsafe { *ece = ibv_ece::default() };
    Ok(0)
}
