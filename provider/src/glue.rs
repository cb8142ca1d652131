//! Provider layer: THE seam to the engine. Every verb that needs protocol state calls exactly
//! one function here with engine types (already converted and validated by
//! [`crate::convert`]), and gets engine handles or an errno back.
//!
//! Phase 1: the engine/transport are not wired yet, so every function returns
//! [`NOT_WIRED`] (ENOSYS). Phase 2 replaces each body with a call into the device's
//! `transport::Device` (reachable from `dev`), and routes `engine.poll_event()` to
//! [`crate::events::notify_cq`] / [`crate::events::post_async_event`].
//!
//! Must not: touch C structs or raw pointers (the only exception is memory registration, which
//! passes the application's address range as plain integers).

#![allow(unused_variables)]

use crate::device::UrxeDevice;
use urxe::engine::{
    AccessFlags, AhAttr, AhId, CqId, MrId, MwBind, MwId, MwType, PdId, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, Qpn, RecvWr, SendWr, SrqAttr, SrqAttrMask, SrqId, WorkCompletion,
};

/// errno for "this verb needs the engine, which is not wired into the provider yet".
pub const NOT_WIRED: i32 = libc::ENOSYS;

type R<T> = Result<T, i32>;

/// A registered MR as the engine reports it.
#[derive(Clone, Copy, Debug)]
pub struct MrKeys {
    pub id: MrId,
    pub lkey: u32,
    pub rkey: u32,
}

pub fn alloc_pd(dev: &UrxeDevice) -> R<PdId> {
    Err(NOT_WIRED)
}
pub fn dealloc_pd(dev: &UrxeDevice, pd: PdId) -> R<()> {
    Err(NOT_WIRED)
}
/// Register `[addr, addr+len)` of this process, addressed remotely as `iova`.
pub fn reg_mr(
    dev: &UrxeDevice,
    pd: PdId,
    addr: u64,
    len: u64,
    iova: u64,
    access: AccessFlags,
) -> R<MrKeys> {
    Err(NOT_WIRED)
}
pub fn dereg_mr(dev: &UrxeDevice, mr: MrId) -> R<()> {
    Err(NOT_WIRED)
}
/// Returns the CQ and the granted number of entries (>= `cqe`).
pub fn create_cq(dev: &UrxeDevice, cqe: u32) -> R<(CqId, u32)> {
    Err(NOT_WIRED)
}
pub fn resize_cq(dev: &UrxeDevice, cq: CqId, cqe: u32) -> R<u32> {
    Err(NOT_WIRED)
}
pub fn destroy_cq(dev: &UrxeDevice, cq: CqId) -> R<()> {
    Err(NOT_WIRED)
}
pub fn poll_cq(dev: &UrxeDevice, cq: CqId, out: &mut [WorkCompletion]) -> R<usize> {
    Err(NOT_WIRED)
}
pub fn req_notify_cq(dev: &UrxeDevice, cq: CqId, solicited_only: bool) -> R<()> {
    Err(NOT_WIRED)
}
/// Returns the QPN and the granted capacities.
pub fn create_qp(dev: &UrxeDevice, attr: &QpInitAttr) -> R<(Qpn, QpCap)> {
    Err(NOT_WIRED)
}
pub fn modify_qp(dev: &UrxeDevice, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> R<()> {
    Err(NOT_WIRED)
}
pub fn query_qp(dev: &UrxeDevice, qpn: Qpn) -> R<QpAttr> {
    Err(NOT_WIRED)
}
pub fn destroy_qp(dev: &UrxeDevice, qpn: Qpn) -> R<()> {
    Err(NOT_WIRED)
}
pub fn post_send(dev: &UrxeDevice, qpn: Qpn, wr: &SendWr<'_>) -> R<()> {
    Err(NOT_WIRED)
}
pub fn post_recv(dev: &UrxeDevice, qpn: Qpn, wr: &RecvWr<'_>) -> R<()> {
    Err(NOT_WIRED)
}
/// Returns the SRQ and the granted attributes.
pub fn create_srq(dev: &UrxeDevice, pd: PdId, attr: SrqAttr) -> R<(SrqId, SrqAttr)> {
    Err(NOT_WIRED)
}
pub fn modify_srq(dev: &UrxeDevice, srq: SrqId, attr: SrqAttr, mask: SrqAttrMask) -> R<()> {
    Err(NOT_WIRED)
}
pub fn query_srq(dev: &UrxeDevice, srq: SrqId) -> R<SrqAttr> {
    Err(NOT_WIRED)
}
pub fn destroy_srq(dev: &UrxeDevice, srq: SrqId) -> R<()> {
    Err(NOT_WIRED)
}
pub fn post_srq_recv(dev: &UrxeDevice, srq: SrqId, wr: &RecvWr<'_>) -> R<()> {
    Err(NOT_WIRED)
}
pub fn create_ah(dev: &UrxeDevice, pd: PdId, attr: &AhAttr) -> R<AhId> {
    Err(NOT_WIRED)
}
pub fn destroy_ah(dev: &UrxeDevice, ah: AhId) -> R<()> {
    Err(NOT_WIRED)
}
/// Returns the MW and its initial rkey.
pub fn alloc_mw(dev: &UrxeDevice, pd: PdId, ty: MwType) -> R<(MwId, u32)> {
    Err(NOT_WIRED)
}
pub fn dealloc_mw(dev: &UrxeDevice, mw: MwId) -> R<()> {
    Err(NOT_WIRED)
}
/// Type 1 bind through `ibv_bind_mw` (posted as a BIND_MW send WR on `qpn`).
pub fn bind_mw(dev: &UrxeDevice, qpn: Qpn, wr_id: u64, signaled: bool, bind: &MwBind) -> R<()> {
    Err(NOT_WIRED)
}
