//! Provider layer: THE seam to the engine. Every verb that needs protocol state calls exactly
//! one function here with engine types (already converted and validated by
//! [`crate::convert`]), and gets engine handles or an errno back.
//!
//! The device's [`Device`] (engine + sockets + progress thread) is created on the first verb
//! that needs it, over the UDP socket the address choice already bound. Engine events go to
//! [`crate::events`]: completions to the CQ's completion channel, async events to the
//! context's async fd.
//!
//! Must not: touch C structs or raw pointers (the only exception is memory registration, which
//! passes the application's address range as plain integers).

use crate::context::UrxeDevice;
use urxe::engine::{
    AccessFlags, AhAttr, AhId, CqId, EngineConfig, Error, Event, MrId, MrInfo, MwBind, MwId, MwType, PdId, QpAttr,
    QpAttrMask, QpCap, QpInitAttr, Qpn, RecvWr, SendFlags, SendWr, SrqAttr, SrqAttrMask, SrqId, WorkCompletion,
};
use urxe::transport::Device;

type R<T> = Result<T, i32>;

fn e(err: Error) -> i32 {
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
pub fn transport(dev: &UrxeDevice) -> R<&Device> {
    dev.transport
        .get_or_init(|| {
            let sock = dev.info.socket.try_clone().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
            let cfg = EngineConfig {
                local_addr: dev.info.addr,
                max_mtu: dev.info.active_mtu,
                limits: dev.info.limits,
                seed: std::process::id() as u64 ^ 0x7572_7865,
            };
            let sink = Box::new(|ev: Event| match ev {
                Event::Completion(cq) => {
                    let _ = crate::events::notify_cq_id(cq);
                }
                Event::Async(a) => crate::events::post_engine_async(a),
            });
            Device::open_with_socket(sock, cfg, sink).map_err(|err| {
                eprintln!("urxe: cannot start the device on {}: {err}", dev.info.addr);
                err.raw_os_error().unwrap_or(libc::EIO)
            })
        })
        .as_ref()
        .map_err(|&e| e)
}

pub fn alloc_pd(dev: &UrxeDevice) -> R<PdId> {
    transport(dev)?.with(|en, _| en.alloc_pd()).map_err(e)
}
pub fn dealloc_pd(dev: &UrxeDevice, pd: PdId) -> R<()> {
    transport(dev)?.with(|en, _| en.dealloc_pd(pd)).map_err(e)
}
/// Register `[addr, addr+len)` of this process, addressed remotely as `iova`.
pub fn reg_mr(dev: &UrxeDevice, pd: PdId, addr: u64, len: u64, iova: u64, access: AccessFlags) -> R<MrKeys> {
    let h = transport(dev)?.with(|en, _| en.reg_mr(pd, addr, len, iova, access)).map_err(e)?;
    Ok(MrKeys { id: h.id, lkey: h.lkey, rkey: h.rkey })
}
/// Checks that PD `pd` exists (importing it into another context of this process).
pub fn query_pd(dev: &UrxeDevice, pd: PdId) -> R<()> {
    transport(dev)?.with(|en, _| en.query_pd(pd)).map_err(e)
}
/// Attributes of MR `mr` (importing it into another context of this process).
pub fn query_mr(dev: &UrxeDevice, mr: MrId) -> R<MrInfo> {
    transport(dev)?.with(|en, _| en.query_mr(mr)).map_err(e)
}
pub fn dereg_mr(dev: &UrxeDevice, mr: MrId) -> R<()> {
    transport(dev)?.with(|en, _| en.dereg_mr(mr)).map_err(e)
}
/// Returns the CQ and the granted number of entries (>= `cqe`).
pub fn create_cq(dev: &UrxeDevice, cqe: u32) -> R<(CqId, u32)> {
    transport(dev)?.with(|en, _| en.create_cq(cqe)).map_err(e)
}
pub fn resize_cq(dev: &UrxeDevice, cq: CqId, cqe: u32) -> R<u32> {
    transport(dev)?.with(|en, _| en.resize_cq(cq, cqe)).map_err(e)
}
pub fn destroy_cq(dev: &UrxeDevice, cq: CqId) -> R<()> {
    transport(dev)?.with(|en, _| en.destroy_cq(cq)).map_err(e)
}
/// The data-path poll: progresses the device in the caller's thread, then reads the CQ.
pub fn poll_cq(dev: &UrxeDevice, cq: CqId, out: &mut [WorkCompletion]) -> R<usize> {
    transport(dev)?.poll(|en| en.poll_cq(cq, out), |r| matches!(r, Ok(n) if *n > 0)).map_err(e)
}
pub fn req_notify_cq(dev: &UrxeDevice, cq: CqId, solicited_only: bool) -> R<()> {
    transport(dev)?.with(|en, _| en.req_notify_cq(cq, solicited_only)).map_err(e)
}
/// Returns the QPN and the granted capacities.
pub fn create_qp(dev: &UrxeDevice, attr: &QpInitAttr) -> R<(Qpn, QpCap)> {
    transport(dev)?.with(|en, _| en.create_qp(attr)).map_err(e)
}
pub fn modify_qp(dev: &UrxeDevice, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> R<()> {
    transport(dev)?.with(|en, _| en.modify_qp(qpn, attr, mask)).map_err(e)
}
pub fn query_qp(dev: &UrxeDevice, qpn: Qpn) -> R<QpAttr> {
    transport(dev)?.with(|en, _| en.query_qp(qpn)).map(|(a, _)| a).map_err(e)
}
pub fn destroy_qp(dev: &UrxeDevice, qpn: Qpn) -> R<()> {
    transport(dev)?.with(|en, _| en.destroy_qp(qpn)).map_err(e)
}
/// Send WRs carrying at most this many payload bytes may wait for the next post of a burst
/// (doorbell batching, see `Device::post`): they are one small packet each.
const SMALL_POST_BYTES: u64 = 4096;

/// Posts a chain of send WRs under one lock and transmits once, so the packets of the whole
/// chain can leave in one batch. `each` walks the chain, calling `post` per converted WR;
/// its error (the first WR that failed) is returned as is.
pub fn post_send_chain(
    dev: &UrxeDevice,
    qpn: Qpn,
    each: impl FnOnce(&mut dyn FnMut(&SendWr<'_>) -> R<()>) -> R<()>,
) -> R<()> {
    transport(dev)?.post(|en, now| {
        let mut small = true;
        let r = each(&mut |wr| {
            small &= wr.request_payload_len() <= SMALL_POST_BYTES;
            en.post_send(now, qpn, wr).map_err(e)
        });
        (r, small)
    })
}
pub fn post_recv(dev: &UrxeDevice, qpn: Qpn, wr: &RecvWr<'_>) -> R<()> {
    transport(dev)?.post_recv(|en| en.post_recv(qpn, wr)).map_err(e)
}
/// Returns the SRQ and the granted attributes.
pub fn create_srq(dev: &UrxeDevice, pd: PdId, attr: SrqAttr) -> R<(SrqId, SrqAttr)> {
    transport(dev)?.with(|en, _| en.create_srq(pd, &attr)).map_err(e)
}
pub fn modify_srq(dev: &UrxeDevice, srq: SrqId, attr: SrqAttr, mask: SrqAttrMask) -> R<()> {
    transport(dev)?.with(|en, _| en.modify_srq(srq, &attr, mask)).map_err(e)
}
pub fn query_srq(dev: &UrxeDevice, srq: SrqId) -> R<SrqAttr> {
    transport(dev)?.with(|en, _| en.query_srq(srq)).map_err(e)
}
pub fn destroy_srq(dev: &UrxeDevice, srq: SrqId) -> R<()> {
    transport(dev)?.with(|en, _| en.destroy_srq(srq)).map_err(e)
}
pub fn post_srq_recv(dev: &UrxeDevice, srq: SrqId, wr: &RecvWr<'_>) -> R<()> {
    transport(dev)?.post_recv(|en| en.post_srq_recv(srq, wr)).map_err(e)
}
pub fn create_ah(dev: &UrxeDevice, pd: PdId, attr: &AhAttr) -> R<AhId> {
    transport(dev)?.with(|en, _| en.create_ah(pd, attr)).map_err(e)
}
pub fn destroy_ah(dev: &UrxeDevice, ah: AhId) -> R<()> {
    transport(dev)?.with(|en, _| en.destroy_ah(ah)).map_err(e)
}
/// Returns the MW and its initial rkey.
pub fn alloc_mw(dev: &UrxeDevice, pd: PdId, ty: MwType) -> R<(MwId, u32)> {
    transport(dev)?.with(|en, _| en.alloc_mw(pd, ty)).map_err(e)
}
pub fn dealloc_mw(dev: &UrxeDevice, mw: MwId) -> R<()> {
    transport(dev)?.with(|en, _| en.dealloc_mw(mw)).map_err(e)
}
/// Type 1 bind through `ibv_bind_mw` (posted as a BIND_MW send WR on `qpn`); returns the
/// window's new rkey.
pub fn bind_mw(dev: &UrxeDevice, qpn: Qpn, wr_id: u64, signaled: bool, bind: &MwBind) -> R<u32> {
    let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::EMPTY };
    transport(dev)?.post(|en, now| (en.bind_mw(now, qpn, wr_id, flags, bind), false)).map_err(e)
}
