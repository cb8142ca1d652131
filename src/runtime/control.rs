//! Transport layer: the control verbs of [`Device`], typed. Each runs its engine call through
//! [`Device::control`] (owed packets leave first; what the call produced leaves after and its
//! events are delivered), so that the provider calls the device, never the engine: the layers
//! stay a line, provider → transport → engine, with no closure reaching from the provider into
//! the engine.
//!
//! Must not: hold policy of its own. What the transport owns about a control verb is in
//! `control`; a verb whose transport side differs (posting, polling, arming a CQ, multicast
//! membership, memory-window binds) is a method of its own in `device`.

use std::net::IpAddr;

use super::device::Device;
use crate::engine::{
    AccessFlags, AhAttr, AhId, CqId, Error, MrChange, MrHandle, MrId, MrInfo, MwId, MwType, PdId, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, Qpn, SrqAttr, SrqAttrMask, SrqId, XrcdId,
};
use crate::wire::mad::MAD_LEN;

impl Device {
    pub fn alloc_pd(&self) -> Result<PdId, Error> {
        self.control(|en, _| en.alloc_pd())
    }
    pub fn dealloc_pd(&self, pd: PdId) -> Result<(), Error> {
        self.control(|en, _| en.dealloc_pd(pd))
    }
    /// Checks that PD `pd` exists.
    pub fn query_pd(&self, pd: PdId) -> Result<(), Error> {
        self.control(|en, _| en.query_pd(pd))
    }
    /// Registers `[addr, addr+len)` of this process, addressed remotely as `iova`.
    pub fn reg_mr(&self, pd: PdId, addr: u64, len: u64, iova: u64, access: AccessFlags) -> Result<MrHandle, Error> {
        self.control(|en, _| en.reg_mr(pd, addr, len, iova, access))
    }
    pub fn query_mr(&self, mr: MrId) -> Result<MrInfo, Error> {
        self.control(|en, _| en.query_mr(mr))
    }
    /// The MR `key` names and its attributes (NotFound when the key names nothing).
    pub fn mr_by_key(&self, key: u32) -> Result<MrInfo, Error> {
        self.control(|en, _| en.mr_by_key(key).and_then(|mr| en.query_mr(mr)))
    }
    /// Re-registers MR `mr` in place (keys kept).
    pub fn rereg_mr(&self, mr: MrId, change: &MrChange) -> Result<(), Error> {
        self.control(|en, _| en.rereg_mr(mr, change))
    }
    pub fn dereg_mr(&self, mr: MrId) -> Result<(), Error> {
        self.control(|en, _| en.dereg_mr(mr))
    }
    /// The CQ and the granted number of entries (>= `cqe`).
    pub fn create_cq(&self, cqe: u32) -> Result<(CqId, u32), Error> {
        self.control(|en, _| en.create_cq(cqe))
    }
    pub fn resize_cq(&self, cq: CqId, cqe: u32) -> Result<u32, Error> {
        self.control(|en, _| en.resize_cq(cq, cqe))
    }
    pub fn destroy_cq(&self, cq: CqId) -> Result<(), Error> {
        self.control(|en, _| en.destroy_cq(cq))
    }
    /// The QPN and the granted capacities.
    pub fn create_qp(&self, attr: &QpInitAttr) -> Result<(Qpn, QpCap), Error> {
        self.control(|en, _| en.create_qp(attr))
    }
    pub fn modify_qp(&self, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        self.control(|en, _| en.modify_qp(qpn, attr, mask))
    }
    pub fn query_qp(&self, qpn: Qpn) -> Result<QpAttr, Error> {
        self.control(|en, _| en.query_qp(qpn)).map(|(a, _)| a)
    }
    pub fn destroy_qp(&self, qpn: Qpn) -> Result<(), Error> {
        self.control(|en, _| en.destroy_qp(qpn))
    }
    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB` on a new UD QP.
    pub fn block_self_mcast_loopback(&self, qpn: Qpn) -> Result<(), Error> {
        self.control(|en, _| en.block_self_mcast_loopback(qpn))
    }
    /// The SRQ and the granted attributes.
    pub fn create_srq(&self, pd: PdId, attr: &SrqAttr) -> Result<(SrqId, SrqAttr), Error> {
        self.control(|en, _| en.create_srq(pd, attr))
    }
    pub fn modify_srq(&self, srq: SrqId, attr: &SrqAttr, mask: SrqAttrMask) -> Result<(), Error> {
        self.control(|en, _| en.modify_srq(srq, attr, mask))
    }
    pub fn query_srq(&self, srq: SrqId) -> Result<SrqAttr, Error> {
        self.control(|en, _| en.query_srq(srq))
    }
    pub fn destroy_srq(&self, srq: SrqId) -> Result<(), Error> {
        self.control(|en, _| en.destroy_srq(srq))
    }
    pub fn alloc_xrcd(&self) -> Result<XrcdId, Error> {
        self.control(|en, _| en.alloc_xrcd())
    }
    pub fn dealloc_xrcd(&self, xrcd: XrcdId) -> Result<(), Error> {
        self.control(|en, _| en.dealloc_xrcd(xrcd))
    }
    /// The SRQ, the granted attributes and the SRQ number.
    pub fn create_xrc_srq(
        &self,
        pd: PdId,
        xrcd: XrcdId,
        cq: CqId,
        attr: &SrqAttr,
    ) -> Result<(SrqId, SrqAttr, u32), Error> {
        self.control(|en, _| {
            let (id, got) = en.create_xrc_srq(pd, xrcd, cq, attr)?;
            Ok((id, got, en.srq_num(id)?))
        })
    }
    pub fn create_xrc_recv_qp(&self, xrcd: XrcdId) -> Result<Qpn, Error> {
        self.control(|en, _| en.create_xrc_recv_qp(xrcd))
    }
    pub fn open_xrc_qp(&self, xrcd: XrcdId, qpn: Qpn) -> Result<(), Error> {
        self.control(|en, _| en.open_xrc_qp(xrcd, qpn))
    }
    pub fn create_ah(&self, pd: PdId, attr: &AhAttr) -> Result<AhId, Error> {
        self.control(|en, _| en.create_ah(pd, attr))
    }
    pub fn destroy_ah(&self, ah: AhId) -> Result<(), Error> {
        self.control(|en, _| en.destroy_ah(ah))
    }
    /// The MW and its initial rkey.
    pub fn alloc_mw(&self, pd: PdId, ty: MwType) -> Result<(MwId, u32), Error> {
        self.control(|en, _| en.alloc_mw(pd, ty))
    }
    pub fn dealloc_mw(&self, mw: MwId) -> Result<(), Error> {
        self.control(|en, _| en.dealloc_mw(mw))
    }
    /// The next MAD received for QP1, with its sender.
    pub fn poll_gsi(&self) -> Option<(IpAddr, [u8; MAD_LEN])> {
        self.control(|en, _| en.poll_gsi())
    }
    /// Queues a MAD for QP1 of `peer` and sends it.
    pub fn send_gsi(&self, peer: IpAddr, mad: &[u8; MAD_LEN]) -> Result<(), Error> {
        self.control(|en, _| en.send_gsi(peer, mad))
    }
}
