//! Provider layer: THE seam to the engine. Every verb that needs protocol state calls exactly
//! one function here with engine types (already converted and validated by
//! [`crate::convert`]), and gets engine handles or an errno back.
//!
//! The device's [`Device`] (engine + sockets + progress thread) is created on the first verb
//! that needs it, over the UDP socket the address choice already bound. Engine events go to
//! [`crate::events`]: completions to the CQ's completion channel, async events to the
//! context's async fd.
//!
//! Every function calls one typed method of the device: the data path
//! ([`Device::post_sends`], [`Device::post_recvs`], [`Device::poll_cq`], ...), whose
//! methods own the transport's policy (when packets leave, who is woken), and the control
//! verbs ([`Device::alloc_pd`], [`Device::create_qp`], ...), which the device runs on the
//! engine. The provider never reaches the engine itself. What is left here is starting the
//! device and errno conversion.
//!
//! Must not: touch C structs or raw pointers (the only exception is memory registration, which
//! passes the application's address range as plain integers).

use crate::context::UrxeDevice;
use urxe::engine::{
    AccessFlags, AhAttr, AhId, CqId, EngineConfig, Error, Event, MrChange, MrId, MrInfo, MwBind, MwId, MwType, PdId,
    QpAttr, QpAttrMask, QpCap, QpInitAttr, Qpn, RecvWr, SendFlags, SrqAttr, SrqAttrMask, SrqId, WorkCompletion, XrcdId,
};
use urxe::runtime::{Device, PostSend};

/// A verb's outcome: its value, or the errno the C ABI returns.
type VerbResult<T> = Result<T, i32>;

/// The errno rdma-core documents for an engine error.
fn errno(err: Error) -> i32 {
    err.errno()
}

/// A registered MR as the engine reports it.
#[derive(Clone, Copy, Debug)]
pub struct MrKeys {
    pub id: MrId,
    pub lkey: u32,
    pub rkey: u32,
}

/// The running device, started on first use.
pub fn transport(dev: &UrxeDevice) -> VerbResult<&Device> {
    dev.transport
        .get_or_init(|| {
            let member = dev.info.group.lock().unwrap_or_else(|p| p.into_inner()).take().ok_or(libc::EIO)?;
            let cfg = EngineConfig {
                local_addr: dev.info.addr,
                max_mtu: dev.info.active_mtu,
                limits: dev.info.limits,
                // The transport seeds the engine's key RNG from the kernel itself.
                seed: 0,
            };
            let sink = Box::new(|ev: Event| match ev {
                Event::Completion(cq) => crate::events::notify_cq_id(cq).ok().flatten().flatten(),
                Event::Async(a) => {
                    crate::events::post_engine_async(a);
                    None
                }
                Event::Gsi => {
                    crate::events::wake_gsi();
                    None
                }
            });
            Device::open_group(member, cfg, sink).map_err(|err| {
                eprintln!("urxe: cannot start the device on {}: {err}", dev.info.addr);
                err.raw_os_error().unwrap_or(libc::EIO)
            })
        })
        .as_ref()
        .map_err(|&e| e)
}

/// The device clock (ns since the device started): the completion timestamps' clock.
pub fn clock(dev: &UrxeDevice) -> VerbResult<u64> {
    Ok(transport(dev)?.clock())
}
/// A device-clock reading as wall-clock ns since the Unix epoch.
pub fn wallclock_ns(dev: &UrxeDevice, t: u64) -> VerbResult<u64> {
    Ok(transport(dev)?.wallclock_ns(t))
}

pub fn alloc_pd(dev: &UrxeDevice) -> VerbResult<PdId> {
    transport(dev)?.alloc_pd().map_err(errno)
}
pub fn dealloc_pd(dev: &UrxeDevice, pd: PdId) -> VerbResult<()> {
    transport(dev)?.dealloc_pd(pd).map_err(errno)
}
/// Register `[addr, addr+len)` of this process, addressed remotely as `iova`.
pub fn reg_mr(dev: &UrxeDevice, pd: PdId, addr: u64, len: u64, iova: u64, access: AccessFlags) -> VerbResult<MrKeys> {
    let h = transport(dev)?.reg_mr(pd, addr, len, iova, access).map_err(errno)?;
    Ok(MrKeys { id: h.id, lkey: h.lkey, rkey: h.rkey })
}
/// Checks that PD `pd` exists (importing it into another context of this process).
pub fn query_pd(dev: &UrxeDevice, pd: PdId) -> VerbResult<()> {
    transport(dev)?.query_pd(pd).map_err(errno)
}
/// Attributes of MR `mr` (importing it into another context of this process).
pub fn query_mr(dev: &UrxeDevice, mr: MrId) -> VerbResult<MrInfo> {
    transport(dev)?.query_mr(mr).map_err(errno)
}
/// The MR `key` names and its attributes (`ibv_advise_mr`): ENOENT when the key names
/// nothing, EINVAL when it names a memory window.
pub fn mr_by_key(dev: &UrxeDevice, key: u32) -> VerbResult<MrInfo> {
    transport(dev)?.mr_by_key(key).map_err(errno)
}
/// Re-register MR `mr` in place (keys kept).
pub fn rereg_mr(dev: &UrxeDevice, mr: MrId, change: &MrChange) -> VerbResult<()> {
    transport(dev)?.rereg_mr(mr, change).map_err(errno)
}
pub fn dereg_mr(dev: &UrxeDevice, mr: MrId) -> VerbResult<()> {
    transport(dev)?.dereg_mr(mr).map_err(errno)
}
/// Returns the CQ and the granted number of entries (>= `cqe`).
pub fn create_cq(dev: &UrxeDevice, cqe: u32) -> VerbResult<(CqId, u32)> {
    transport(dev)?.create_cq(cqe).map_err(errno)
}
pub fn resize_cq(dev: &UrxeDevice, cq: CqId, cqe: u32) -> VerbResult<u32> {
    transport(dev)?.resize_cq(cq, cqe).map_err(errno)
}
pub fn destroy_cq(dev: &UrxeDevice, cq: CqId) -> VerbResult<()> {
    transport(dev)?.destroy_cq(cq).map_err(errno)
}
/// The data-path poll: progresses the device in the caller's thread, then reads the CQ.
pub fn poll_cq(dev: &UrxeDevice, cq: CqId, out: &mut [WorkCompletion]) -> VerbResult<usize> {
    transport(dev)?.poll_cq(cq, out).map_err(errno)
}
pub fn req_notify_cq(dev: &UrxeDevice, cq: CqId, solicited_only: bool) -> VerbResult<()> {
    transport(dev)?.req_notify_cq(cq, solicited_only).map_err(errno)
}
/// Returns the QPN and the granted capacities.
pub fn create_qp(dev: &UrxeDevice, attr: &QpInitAttr) -> VerbResult<(Qpn, QpCap)> {
    transport(dev)?.create_qp(attr).map_err(errno)
}
pub fn modify_qp(dev: &UrxeDevice, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> VerbResult<()> {
    let t = transport(dev)?;
    t.modify_qp(qpn, attr, mask).map_err(errno)?;
    if mask.contains(QpAttrMask::AV) && attr.qp_state == urxe::engine::QpState::Rtr {
        // As kernel rxe's modify to RTR: the peer's neighbour entry resolved before the first
        // burst (outside the device lock; at most one second, as an unanswered ARP/NDP takes).
        let peer = std::net::IpAddr::V6(attr.ah_attr.grh.dgid.into());
        let _ = urxe::transport::neigh::resolve(t.local_addr(), peer, std::time::Duration::from_secs(1));
    }
    Ok(())
}
pub fn query_qp(dev: &UrxeDevice, qpn: Qpn) -> VerbResult<QpAttr> {
    transport(dev)?.query_qp(qpn).map_err(errno)
}
pub fn destroy_qp(dev: &UrxeDevice, qpn: Qpn) -> VerbResult<()> {
    transport(dev)?.destroy_qp(qpn).map_err(errno)
}
/// `ibv_attach_mcast`: UD QP `qpn` joins the multicast group GID `gid`.
pub fn attach_mcast(dev: &UrxeDevice, qpn: Qpn, gid: [u8; 16]) -> VerbResult<()> {
    transport(dev)?.attach_mcast(qpn, gid).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` on a new UD QP.
pub fn block_self_mcast_loopback(dev: &UrxeDevice, qpn: Qpn) -> VerbResult<()> {
    transport(dev)?.block_self_mcast_loopback(qpn).map_err(errno)
}
/// `ibv_detach_mcast`.
pub fn detach_mcast(dev: &UrxeDevice, qpn: Qpn, gid: [u8; 16]) -> VerbResult<()> {
    transport(dev)?.detach_mcast(qpn, gid).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
/// Posts send WRs already converted from the application's list: one lock, one transmit.
/// `Err((i, errno))`: WR `i` was refused, those before it are posted.
pub fn post_sends(dev: &UrxeDevice, qpn: Qpn, wrs: &[PostSend<'_>]) -> Result<(), (usize, i32)> {
    transport(dev).map_err(|e| (0, e))?.post_sends(qpn, wrs).map_err(|(i, e)| (i, errno(e)))
}
/// Posts converted receive WRs to QP `qpn` under one lock; `Err((i, errno))` as [`post_sends`].
pub fn post_recvs(dev: &UrxeDevice, qpn: Qpn, wrs: &[RecvWr<'_>]) -> Result<(), (usize, i32)> {
    transport(dev).map_err(|e| (0, e))?.post_recvs(qpn, wrs).map_err(|(i, e)| (i, errno(e)))
}
/// Posts converted receive WRs to SRQ `srq` under one lock; `Err((i, errno))` as [`post_sends`].
pub fn post_srq_recvs(dev: &UrxeDevice, srq: SrqId, wrs: &[RecvWr<'_>]) -> Result<(), (usize, i32)> {
    transport(dev).map_err(|e| (0, e))?.post_srq_recvs(srq, wrs).map_err(|(i, e)| (i, errno(e)))
}
/// Returns the SRQ and the granted attributes.
pub fn create_srq(dev: &UrxeDevice, pd: PdId, attr: SrqAttr) -> VerbResult<(SrqId, SrqAttr)> {
    transport(dev)?.create_srq(pd, &attr).map_err(errno)
}
pub fn modify_srq(dev: &UrxeDevice, srq: SrqId, attr: SrqAttr, mask: SrqAttrMask) -> VerbResult<()> {
    transport(dev)?.modify_srq(srq, &attr, mask).map_err(errno)
}
pub fn query_srq(dev: &UrxeDevice, srq: SrqId) -> VerbResult<SrqAttr> {
    transport(dev)?.query_srq(srq).map_err(errno)
}
pub fn destroy_srq(dev: &UrxeDevice, srq: SrqId) -> VerbResult<()> {
    transport(dev)?.destroy_srq(srq).map_err(errno)
}
pub fn alloc_xrcd(dev: &UrxeDevice) -> VerbResult<XrcdId> {
    transport(dev)?.alloc_xrcd().map_err(errno)
}
pub fn dealloc_xrcd(dev: &UrxeDevice, xrcd: XrcdId) -> VerbResult<()> {
    transport(dev)?.dealloc_xrcd(xrcd).map_err(errno)
}
/// Returns the SRQ, the granted attributes and the SRQ number.
pub fn create_xrc_srq(
    dev: &UrxeDevice,
    pd: PdId,
    xrcd: XrcdId,
    cq: CqId,
    attr: SrqAttr,
) -> VerbResult<(SrqId, SrqAttr, u32)> {
    transport(dev)?.create_xrc_srq(pd, xrcd, cq, &attr).map_err(errno)
}
pub fn create_xrc_recv_qp(dev: &UrxeDevice, xrcd: XrcdId) -> VerbResult<Qpn> {
    transport(dev)?.create_xrc_recv_qp(xrcd).map_err(errno)
}
pub fn open_xrc_qp(dev: &UrxeDevice, xrcd: XrcdId, qpn: Qpn) -> VerbResult<()> {
    transport(dev)?.open_xrc_qp(xrcd, qpn).map_err(errno)
}
pub fn create_ah(dev: &UrxeDevice, pd: PdId, attr: &AhAttr) -> VerbResult<AhId> {
    transport(dev)?.create_ah(pd, attr).map_err(errno)
}
pub fn destroy_ah(dev: &UrxeDevice, ah: AhId) -> VerbResult<()> {
    transport(dev)?.destroy_ah(ah).map_err(errno)
}
/// Returns the MW and its initial rkey.
pub fn alloc_mw(dev: &UrxeDevice, pd: PdId, ty: MwType) -> VerbResult<(MwId, u32)> {
    transport(dev)?.alloc_mw(pd, ty).map_err(errno)
}
pub fn dealloc_mw(dev: &UrxeDevice, mw: MwId) -> VerbResult<()> {
    transport(dev)?.dealloc_mw(mw).map_err(errno)
}
/// Type 1 bind through `ibv_bind_mw` (posted as a BIND_MW send WR on `qpn`); returns the
/// window's new rkey.
pub fn bind_mw(dev: &UrxeDevice, qpn: Qpn, wr_id: u64, signaled: bool, bind: &MwBind) -> VerbResult<u32> {
    let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::EMPTY };
    transport(dev)?.bind_mw(qpn, wr_id, flags, bind).map_err(errno)
}
