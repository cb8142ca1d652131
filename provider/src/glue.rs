//! Provider layer: THE seam to the engine. Every verb that needs protocol state calls exactly
//! one function here with engine types (already converted and validated by
//! [`crate::convert`]), and gets engine handles or an errno back.
//!
//! The device's [`Device`] (engine + sockets + progress thread) is created on the first verb
//! that needs it, over the UDP socket the address choice already bound. Engine events go to
//! [`crate::events`]: completions to the CQ's completion channel, async events to the
//! context's async fd.
//!
//! The data path calls the device's typed methods ([`Device::post_send`],
//! [`Device::post_recv`], [`Device::poll_cq`], ...), which own the transport's policy (when
//! packets leave, who is woken); control verbs run on the engine through [`Device::control`].
//! What is left here is errno conversion.
//!
//! Must not: touch C structs or raw pointers (the only exception is memory registration, which
//! passes the application's address range as plain integers).

use crate::context::UrxeDevice;
use urxe::engine::{
    AccessFlags, AhAttr, AhId, CqId, EngineConfig, Error, Event, MrChange, MrId, MrInfo, MwBind, MwId, MwType, PdId,
    QpAttr, QpAttrMask, QpCap, QpInitAttr, Qpn, RecvWr, SendFlags, SendWr, SrqAttr, SrqAttrMask, SrqId, WorkCompletion,
    XrcdId,
};
use urxe::runtime::Device;

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
                Event::Completion(cq) => {
                    let _ = crate::events::notify_cq_id(cq);
                }
                Event::Async(a) => crate::events::post_engine_async(a),
                Event::Gsi => crate::events::wake_gsi(),
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
    transport(dev)?.control(|en, _| en.alloc_pd()).map_err(errno)
}
pub fn dealloc_pd(dev: &UrxeDevice, pd: PdId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.dealloc_pd(pd)).map_err(errno)
}
/// Register `[addr, addr+len)` of this process, addressed remotely as `iova`.
pub fn reg_mr(dev: &UrxeDevice, pd: PdId, addr: u64, len: u64, iova: u64, access: AccessFlags) -> VerbResult<MrKeys> {
    let h = transport(dev)?.control(|en, _| en.reg_mr(pd, addr, len, iova, access)).map_err(errno)?;
    Ok(MrKeys { id: h.id, lkey: h.lkey, rkey: h.rkey })
}
/// Checks that PD `pd` exists (importing it into another context of this process).
pub fn query_pd(dev: &UrxeDevice, pd: PdId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.query_pd(pd)).map_err(errno)
}
/// Attributes of MR `mr` (importing it into another context of this process).
pub fn query_mr(dev: &UrxeDevice, mr: MrId) -> VerbResult<MrInfo> {
    transport(dev)?.control(|en, _| en.query_mr(mr)).map_err(errno)
}
/// The MR `key` names and its attributes (`ibv_advise_mr`): ENOENT when the key names
/// nothing, EINVAL when it names a memory window.
pub fn mr_by_key(dev: &UrxeDevice, key: u32) -> VerbResult<MrInfo> {
    transport(dev)?.control(|en, _| en.mr_by_key(key).and_then(|mr| en.query_mr(mr))).map_err(errno)
}
/// Re-register MR `mr` in place (keys kept).
pub fn rereg_mr(dev: &UrxeDevice, mr: MrId, change: &MrChange) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.rereg_mr(mr, change)).map_err(errno)
}
pub fn dereg_mr(dev: &UrxeDevice, mr: MrId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.dereg_mr(mr)).map_err(errno)
}
/// Returns the CQ and the granted number of entries (>= `cqe`).
pub fn create_cq(dev: &UrxeDevice, cqe: u32) -> VerbResult<(CqId, u32)> {
    transport(dev)?.control(|en, _| en.create_cq(cqe)).map_err(errno)
}
pub fn resize_cq(dev: &UrxeDevice, cq: CqId, cqe: u32) -> VerbResult<u32> {
    transport(dev)?.control(|en, _| en.resize_cq(cq, cqe)).map_err(errno)
}
pub fn destroy_cq(dev: &UrxeDevice, cq: CqId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.destroy_cq(cq)).map_err(errno)
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
    transport(dev)?.control(|en, _| en.create_qp(attr)).map_err(errno)
}
pub fn modify_qp(dev: &UrxeDevice, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.modify_qp(qpn, attr, mask)).map_err(errno)
}
pub fn query_qp(dev: &UrxeDevice, qpn: Qpn) -> VerbResult<QpAttr> {
    transport(dev)?.control(|en, _| en.query_qp(qpn)).map(|(a, _)| a).map_err(errno)
}
pub fn destroy_qp(dev: &UrxeDevice, qpn: Qpn) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.destroy_qp(qpn)).map_err(errno)
}
/// `ibv_attach_mcast`: UD QP `qpn` joins the multicast group GID `gid`.
pub fn attach_mcast(dev: &UrxeDevice, qpn: Qpn, gid: [u8; 16]) -> VerbResult<()> {
    transport(dev)?.attach_mcast(qpn, gid).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
/// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` on a new UD QP.
pub fn block_self_mcast_loopback(dev: &UrxeDevice, qpn: Qpn) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.block_self_mcast_loopback(qpn)).map_err(errno)
}
/// `ibv_detach_mcast`.
pub fn detach_mcast(dev: &UrxeDevice, qpn: Qpn, gid: [u8; 16]) -> VerbResult<()> {
    transport(dev)?.detach_mcast(qpn, gid).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
/// Posts a chain of send WRs under one lock and transmits once, so the packets of the whole
/// chain can leave in one batch. `each` walks the chain, calling `post` per converted WR;
/// its error (the first WR that failed) is returned as is.
/// Each WR comes with the remote XRC SRQ number it names (XRC initiators only).
pub fn post_send_chain(
    dev: &UrxeDevice,
    qpn: Qpn,
    each: impl FnOnce(&mut dyn FnMut(Option<u32>, &SendWr<'_>) -> VerbResult<()>) -> VerbResult<()>,
) -> VerbResult<()> {
    transport(dev)?.post_send_to(qpn, |post| each(&mut |srqn, wr| post(srqn, wr).map_err(errno)))
}
pub fn post_recv(dev: &UrxeDevice, qpn: Qpn, wr: &RecvWr<'_>) -> VerbResult<()> {
    transport(dev)?.post_recv(qpn, wr).map_err(errno)
}
/// Returns the SRQ and the granted attributes.
pub fn create_srq(dev: &UrxeDevice, pd: PdId, attr: SrqAttr) -> VerbResult<(SrqId, SrqAttr)> {
    transport(dev)?.control(|en, _| en.create_srq(pd, &attr)).map_err(errno)
}
pub fn modify_srq(dev: &UrxeDevice, srq: SrqId, attr: SrqAttr, mask: SrqAttrMask) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.modify_srq(srq, &attr, mask)).map_err(errno)
}
pub fn query_srq(dev: &UrxeDevice, srq: SrqId) -> VerbResult<SrqAttr> {
    transport(dev)?.control(|en, _| en.query_srq(srq)).map_err(errno)
}
pub fn destroy_srq(dev: &UrxeDevice, srq: SrqId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.destroy_srq(srq)).map_err(errno)
}
pub fn alloc_xrcd(dev: &UrxeDevice) -> VerbResult<XrcdId> {
    transport(dev)?.control(|en, _| en.alloc_xrcd()).map_err(errno)
}
pub fn dealloc_xrcd(dev: &UrxeDevice, xrcd: XrcdId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.dealloc_xrcd(xrcd)).map_err(errno)
}
/// Returns the SRQ, the granted attributes and the SRQ number.
pub fn create_xrc_srq(
    dev: &UrxeDevice,
    pd: PdId,
    xrcd: XrcdId,
    cq: CqId,
    attr: SrqAttr,
) -> VerbResult<(SrqId, SrqAttr, u32)> {
    transport(dev)?
        .control(|en, _| {
            let (id, got) = en.create_xrc_srq(pd, xrcd, cq, &attr)?;
            Ok((id, got, en.srq_num(id)?))
        })
        .map_err(errno)
}
pub fn create_xrc_recv_qp(dev: &UrxeDevice, xrcd: XrcdId) -> VerbResult<Qpn> {
    transport(dev)?.control(|en, _| en.create_xrc_recv_qp(xrcd)).map_err(errno)
}
pub fn open_xrc_qp(dev: &UrxeDevice, xrcd: XrcdId, qpn: Qpn) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.open_xrc_qp(xrcd, qpn)).map_err(errno)
}
pub fn post_srq_recv(dev: &UrxeDevice, srq: SrqId, wr: &RecvWr<'_>) -> VerbResult<()> {
    transport(dev)?.post_srq_recv(srq, wr).map_err(errno)
}
pub fn create_ah(dev: &UrxeDevice, pd: PdId, attr: &AhAttr) -> VerbResult<AhId> {
    transport(dev)?.control(|en, _| en.create_ah(pd, attr)).map_err(errno)
}
pub fn destroy_ah(dev: &UrxeDevice, ah: AhId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.destroy_ah(ah)).map_err(errno)
}
/// Returns the MW and its initial rkey.
pub fn alloc_mw(dev: &UrxeDevice, pd: PdId, ty: MwType) -> VerbResult<(MwId, u32)> {
    transport(dev)?.control(|en, _| en.alloc_mw(pd, ty)).map_err(errno)
}
pub fn dealloc_mw(dev: &UrxeDevice, mw: MwId) -> VerbResult<()> {
    transport(dev)?.control(|en, _| en.dealloc_mw(mw)).map_err(errno)
}
/// Type 1 bind through `ibv_bind_mw` (posted as a BIND_MW send WR on `qpn`); returns the
/// window's new rkey.
pub fn bind_mw(dev: &UrxeDevice, qpn: Qpn, wr_id: u64, signaled: bool, bind: &MwBind) -> VerbResult<u32> {
    let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::EMPTY };
    transport(dev)?.bind_mw(qpn, wr_id, flags, bind).map_err(errno)
}
