//! QP states, types, MTU, address vectors and the QP attribute structs.

use super::flags::*;
use super::handles::*;

/// `enum ibv_qp_state`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u32)]
pub enum QpState {
    #[default]
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

impl QpState {
    pub fn from_u32(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

/// `enum ibv_qp_type` (the ones urxe implements).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum QpType {
    Rc = 2,
    Uc = 3,
    Ud = 4,
    /// XRC initiator (`IBV_QPT_XRC_SEND`): an RC send queue whose requests name an XRC SRQ
    /// of the peer (XRCETH); no receive side of its own.
    XrcSend = 9,
    /// XRC target (`IBV_QPT_XRC_RECV`): an RC responder with no queues, created in an XRC
    /// domain; each request lands in the XRC SRQ its XRCETH names.
    XrcRecv = 10,
}

impl QpType {
    /// `None` for types urxe does not implement (RAW_PACKET, DRIVER): the provider maps
    /// that to EOPNOTSUPP.
    pub fn from_u32(v: u32) -> Option<QpType> {
        match v {
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            9 => Some(QpType::XrcSend),
            10 => Some(QpType::XrcRecv),
            _ => None,
        }
    }

    /// Reliable connected service (RC and both XRC halves): ACKs, retransmission, READ and
    /// atomics, the RC transition table.
    pub fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// XRC initiator or target.
    pub fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }
}

/// `enum ibv_mtu`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u32)]
pub enum Mtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl Mtu {
    pub fn from_u32(v: u32) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// Payload bytes per packet.
    pub fn bytes(self) -> usize {
        128 << (self as u32)
    }
    /// Largest IB MTU that fits `netdev_mtu` minus the RoCEv2 overhead rxe reserves (80 bytes).
    pub fn for_netdev(netdev_mtu: u32) -> Option<Mtu> {
        let room = netdev_mtu.checked_sub(80)?;
        [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512, Mtu::Mtu256]
            .into_iter()
            .find(|m| m.bytes() as u32 <= room)
    }
}

/// `enum ibv_mig_state`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u32)]
pub enum MigState {
    #[default]
    Migrated = 0,
    Rearm = 1,
    Armed = 2,
}

/// A global route: RoCEv2 always carries one (the GRH becomes the IP header).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct GlobalRoute {
    /// Destination GID (IPv6 or IPv4-mapped IPv6 address).
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` as RoCEv2 uses it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AhAttr {
    pub grh: GlobalRoute,
    /// `is_global`: must be set on RoCE.
    pub is_global: bool,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub port_num: u8,
}

/// Capacities of a QP (`struct ibv_qp_cap`). On create the engine may round up and returns the
/// values it granted.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// What `create_qp` needs (`struct ibv_qp_init_attr` / `_ex` reduced to what urxe implements).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct QpInitAttr {
    pub pd: PdId,
    pub qp_type: QpType,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub cap: QpCap,
    /// `sq_sig_all`: every send WR completes as if SIGNALED.
    pub sq_sig_all: bool,
}

impl QpInitAttr {
    /// What an XRC target QP is created with: no PD, no CQ, no queue (it lives in an XRC
    /// domain and borrows each of these from the SRQ a message names).
    pub fn xrc_target() -> QpInitAttr {
        QpInitAttr {
            pd: 0,
            qp_type: QpType::XrcRecv,
            send_cq: 0,
            recv_cq: 0,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }
}

/// `struct ibv_qp_attr`: every field; `QpAttrMask` says which are meaningful.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct QpAttr {
    pub qp_state: QpState,
    pub cur_qp_state: QpState,
    pub path_mtu: Option<Mtu>,
    pub path_mig_state: MigState,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: AccessFlags,
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: bool,
    /// Read-only: true while draining in SQD.
    pub sq_draining: bool,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}
