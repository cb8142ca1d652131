//! rdma_cm multicast (`rdma_join_multicast`, `rdma_join_multicast_ex`, `rdma_leave_multicast`)
//! as the kernel's cma.c does it on RoCE (`cma_iboe_join_multicast`): there is no SA to ask, so a
//! join completes at once with RDMA_CM_EVENT_MULTICAST_JOIN carrying the UD parameters built
//! locally — the group's GID (an IPv4 group IPv4-mapped, an IPv6 group as is), destination QPN
//! 0xFFFFFF, Q_Key RDMA_UDP_QKEY, hop limit 64, P_Key 0xFFFF — and the user's context as
//! `param.ud.private_data`. As librdmacm does, the ID's QP (if it has one by then) is attached
//! to the group when the application *retrieves* that event, unless the join was send-only,
//! and `rdma_leave_multicast` detaches it. Joining the IP group on the wire is the verbs
//! attach's business (urxe's `ibv_attach_mcast`), so a send-only member never joins it.
//!
//! Differences from the kernel, on purpose: a destination that is not a multicast address is
//! EINVAL at the call (the kernel reports it later as a failed attach); joining an address an ID
//! has already joined is EADDRINUSE; IPv6 groups work over an IPv6 device (the kernel refuses
//! them on RoCE v2 with ENOTSUPP).

use crate::abi::*;
use crate::core::{gid_of, load_sockaddr, lock, EventBox, IdState, Join, Lib, HOP_LIMIT};
use crate::verbs::{ibv_attach_mcast, ibv_detach_mcast, qp_type};
use libc::{c_int, c_void};

/// `param.ud.qp_num` of a multicast join: the multicast QPN (IBTA §10.5.2.3).
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;
/// `RDMA_MC_JOIN_FLAG_FULLMEMBER` / `_SENDONLY_FULLMEMBER` (`enum rdma_cm_mc_join_flags`).
pub const JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS` / `_JOIN_FLAGS` of `rdma_cm_join_mc_attr_ex.comp_mask`.
pub const JOIN_MC_ATTR_ADDRESS: u32 = 1;
pub const JOIN_MC_ATTR_JOIN_FLAGS: u32 = 2;

/// The UD parameters of a join event: what `mckey` and others build their AH and sends from.
fn ud_param(mgid: [u8; 16], context: *mut c_void) -> rdma_ud_param {
    rdma_ud_param {
        private_data: context,
        private_data_len: 0,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: mgid },
                flow_label: 0,
                sgid_index: 0,
                hop_limit: HOP_LIMIT,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        },
        qp_num: MULTICAST_QPN,
        qkey: RDMA_UDP_QKEY,
    }
}

/// `rdma_join_multicast(_ex)`: records the join and queues its event. EINVAL unless the ID is
/// a UD one (UDP or IPoIB port space) with a bound or resolved address, and `addr` a multicast
/// address of the device's family.
///
/// # Safety
/// `id` is NULL or an ID of ours; `addr` NULL or a sockaddr of its announced family.
pub unsafe fn join(
    id: *mut rdma_cm_id,
    addr: *const libc::sockaddr,
    context: *mut c_void,
    send_only: bool,
) -> Result<(), i32> {
    // SAFETY: caller contract.
    let group = unsafe { load_sockaddr(addr) }?.ok_or(libc::EINVAL)?.ip();
    let mut lib = lock();
    let st = lib.id(id)?;
    if !matches!(st.state, IdState::AddrBound | IdState::AddrResolved) || st.qp_type != qp_type::UD {
        return Err(libc::EINVAL);
    }
    let dev_addr = lib.device()?.addr;
    let st = lib.id(id)?;
    if !group.is_multicast() || group.is_ipv4() != dev_addr.is_ipv4() {
        return Err(libc::EINVAL);
    }
    if st.mcast.iter().any(|j| j.group == group) {
        return Err(libc::EADDRINUSE);
    }
    let mgid = gid_of(group);
    st.mcast.push(Join { group, mgid, context, send_only });
    let k = lib.key(id)?;
    lib.post(k, 0, event::MULTICAST_JOIN, 0, |b| b.ev.param.ud = ud_param(mgid, context));
    Ok(())
}

/// `rdma_leave_multicast`: forgets the join (EADDRNOTAVAIL if there is none for `addr`), drops
/// its join event if the application has not taken it yet, and detaches the ID's QP.
///
/// # Safety
/// As [`join`].
pub unsafe fn leave(id: *mut rdma_cm_id, addr: *const libc::sockaddr) -> Result<(), i32> {
    // SAFETY: caller contract.
    let group = unsafe { load_sockaddr(addr) }?.ok_or(libc::EINVAL)?.ip();
    let mut lib = lock();
    let st = lib.id(id)?;
    let i = st.mcast.iter().position(|j| j.group == group).ok_or(libc::EADDRNOTAVAIL)?;
    let j = st.mcast.remove(i);
    for c in lib.channels_mut() {
        drop(c.retain(|b| !is_join_event_of(b, id, &j.mgid)));
    }
    // SAFETY: `id` is a live ID (looked up above); its qp is NULL or a QP of libibverbs.
    let qp = unsafe { (*id).qp };
    if !qp.is_null() && !j.send_only {
        let g = ibv_gid { raw: j.mgid };
        // SAFETY: a live QP and a 16-byte GID. Like librdmacm, the outcome is not reported:
        // a QP whose join event was never taken was never attached.
        unsafe { ibv_detach_mcast(qp, &g, 0) };
    }
    Ok(())
}

fn is_join_event_of(b: &EventBox, id: *mut rdma_cm_id, mgid: &[u8; 16]) -> bool {
    // SAFETY: a join event's param is the `ud` member (written by `join`).
    b.ev.id == id && b.ev.event == event::MULTICAST_JOIN && unsafe { b.ev.param.ud.ah_attr.grh.dgid.raw } == *mgid
}

/// An event the application is taking: a join attaches the ID's QP to the group then (as
/// librdmacm's `ucma_process_join`); if that fails the event becomes MULTICAST_ERROR with
/// the errno as a negative status.
pub fn on_retrieved(lib: &mut Lib, b: &mut EventBox) {
    if b.ev.event != event::MULTICAST_JOIN {
        return;
    }
    // SAFETY: a join event's param is the `ud` member (written by `join`).
    let mgid = unsafe { b.ev.param.ud.ah_attr.grh.dgid.raw };
    let Some(st) = lib.ids.key_of(b.ev.id).and_then(|k| lib.ids.get(&k)) else { return };
    let Some(j) = st.mcast.iter().find(|j| j.mgid == mgid) else { return };
    // SAFETY: the event's ID is live (it is in `ids`); its qp is NULL or a QP of libibverbs.
    let qp = unsafe { (*b.ev.id).qp };
    if qp.is_null() || j.send_only {
        return;
    }
    let g = ibv_gid { raw: mgid };
    // SAFETY: a live QP and a 16-byte GID.
    let r: c_int = unsafe { ibv_attach_mcast(qp, &g, 0) };
    if r != 0 {
        b.ev.event = event::MULTICAST_ERROR;
        b.ev.status = -r;
    }
}
