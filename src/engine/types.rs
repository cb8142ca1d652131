//! Engine API types: the values that cross between the engine and its drivers (transport,
//! provider, simulator). They mirror verbs semantics, and their bit values and discriminants are
//! the `<infiniband/verbs.h>` ones so the provider converts field by field without tables.
//!
//! No behaviour lives here beyond small conversions; the engine modules own the rules.

use std::fmt;
use std::net::IpAddr;

/// Protection domain handle.
pub type PdId = u32;
/// Completion queue handle.
pub type CqId = u32;
/// Shared receive queue handle.
pub type SrqId = u32;
/// Address handle.
pub type AhId = u32;
/// Memory region handle (distinct from its keys).
pub type MrId = u32;
/// Memory window handle.
pub type MwId = u32;
/// Queue pair number (24 bits). QP0/QP1 are reserved; the first user QPN is 0x11 as in rxe.
pub type Qpn = u32;

/// Nanoseconds on a monotonic clock with an arbitrary epoch, supplied by the driver.
pub type Nanos = u64;

macro_rules! bitflags_u32 {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $flag:ident = $val:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);
        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($val);)*
            /// No bits.
            pub const EMPTY: $name = $name(0);
            /// Every bit this type names.
            pub const ALL: $name = $name(0 $(| $val)*);
            pub const fn bits(self) -> u32 { self.0 }
            pub const fn contains(self, other: $name) -> bool { self.0 & other.0 == other.0 }
            pub const fn intersects(self, other: $name) -> bool { self.0 & other.0 != 0 }
            pub const fn union(self, other: $name) -> $name { $name(self.0 | other.0) }
            /// Bits set that this type does not name.
            pub const fn unknown_bits(self) -> u32 { self.0 & !Self::ALL.0 }
        }
        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) { self.0 |= o.0 }
        }
        impl std::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, o: $name) -> $name { $name(self.0 & o.0) }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                let mut first = true;
                $(if self.contains($name::$flag) && $val != 0 {
                    if !first { write!(f, "|")?; }
                    write!(f, "{}", stringify!($flag))?;
                    first = false;
                })*
                if self.unknown_bits() != 0 {
                    if !first { write!(f, "|")?; }
                    write!(f, "{:#x}", self.unknown_bits())?;
                }
                write!(f, ")")
            }
        }
    };
}

bitflags_u32! {
    /// `enum ibv_access_flags`.
    AccessFlags {
        LOCAL_WRITE = 1;
        REMOTE_WRITE = 1 << 1;
        REMOTE_READ = 1 << 2;
        REMOTE_ATOMIC = 1 << 3;
        MW_BIND = 1 << 4;
        ZERO_BASED = 1 << 5;
        ON_DEMAND = 1 << 6;
        HUGETLB = 1 << 7;
        FLUSH_GLOBAL = 1 << 8;
        FLUSH_PERSISTENT = 1 << 9;
        RELAXED_ORDERING = 1 << 20;
    }
}

bitflags_u32! {
    /// `enum ibv_send_flags`.
    SendFlags {
        FENCE = 1;
        SIGNALED = 1 << 1;
        SOLICITED = 1 << 2;
        INLINE = 1 << 3;
        IP_CSUM = 1 << 4;
    }
}

bitflags_u32! {
    /// `enum ibv_qp_attr_mask`.
    QpAttrMask {
        STATE = 1;
        CUR_STATE = 1 << 1;
        EN_SQD_ASYNC_NOTIFY = 1 << 2;
        ACCESS_FLAGS = 1 << 3;
        PKEY_INDEX = 1 << 4;
        PORT = 1 << 5;
        QKEY = 1 << 6;
        AV = 1 << 7;
        PATH_MTU = 1 << 8;
        TIMEOUT = 1 << 9;
        RETRY_CNT = 1 << 10;
        RNR_RETRY = 1 << 11;
        RQ_PSN = 1 << 12;
        MAX_QP_RD_ATOMIC = 1 << 13;
        ALT_PATH = 1 << 14;
        MIN_RNR_TIMER = 1 << 15;
        SQ_PSN = 1 << 16;
        MAX_DEST_RD_ATOMIC = 1 << 17;
        PATH_MIG_STATE = 1 << 18;
        CAP = 1 << 19;
        DEST_QPN = 1 << 20;
        RATE_LIMIT = 1 << 25;
    }
}

bitflags_u32! {
    /// `enum ibv_wc_flags`.
    WcFlags {
        GRH = 1;
        WITH_IMM = 1 << 1;
        IP_CSUM_OK = 1 << 2;
        WITH_INV = 1 << 3;
        TM_SYNC_REQ = 1 << 4;
        TM_MATCH = 1 << 5;
        TM_DATA_VALID = 1 << 6;
    }
}

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
}

impl QpType {
    /// `None` for types urxe does not implement (RAW_PACKET, XRC, DRIVER): the provider maps
    /// that to EOPNOTSUPP.
    pub fn from_u32(v: u32) -> Option<QpType> {
        match v {
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            _ => None,
        }
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

/// One scatter/gather element (`struct ibv_sge`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `enum ibv_wr_opcode`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum WrOpcode {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
    AtomicCmpAndSwp = 5,
    AtomicFetchAndAdd = 6,
    LocalInv = 7,
    BindMw = 8,
    SendWithInv = 9,
    Tso = 10,
    Driver1 = 11,
    AtomicWrite = 15,
}

impl WrOpcode {
    pub fn from_u32(v: u32) -> Option<WrOpcode> {
        Some(match v {
            0 => WrOpcode::RdmaWrite,
            1 => WrOpcode::RdmaWriteWithImm,
            2 => WrOpcode::Send,
            3 => WrOpcode::SendWithImm,
            4 => WrOpcode::RdmaRead,
            5 => WrOpcode::AtomicCmpAndSwp,
            6 => WrOpcode::AtomicFetchAndAdd,
            7 => WrOpcode::LocalInv,
            8 => WrOpcode::BindMw,
            9 => WrOpcode::SendWithInv,
            10 => WrOpcode::Tso,
            11 => WrOpcode::Driver1,
            15 => WrOpcode::AtomicWrite,
            _ => return None,
        })
    }
}

/// What `Engine::query_mr` reports (for `ibv_import_mr`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MrInfo {
    pub pd: PdId,
    pub addr: u64,
    pub len: u64,
    pub iova: u64,
    pub access: AccessFlags,
    pub lkey: u32,
    pub rkey: u32,
}

/// What `Engine::reg_mr` returns: the MR handle and its keys (lkey = rkey =
/// `(index << 8) | generation`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MrHandle {
    pub id: MrId,
    pub lkey: u32,
    pub rkey: u32,
}

/// Memory-window bind description (`struct ibv_mw_bind_info` + the MW being bound).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct MwBind {
    pub mw: MwId,
    /// The new rkey for a type 2 window (`ibv_inc_rkey` of the old one); ignored for type 1.
    pub rkey: u32,
    pub mr: MrId,
    pub addr: u64,
    pub length: u64,
    pub access: AccessFlags,
}

/// Opcode-specific part of a send WR.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WrKind {
    Send,
    SendWithImm { imm_data: u32 },
    SendWithInv { invalidate_rkey: u32 },
    RdmaWrite { remote_addr: u64, rkey: u32 },
    RdmaWriteWithImm { remote_addr: u64, rkey: u32, imm_data: u32 },
    RdmaRead { remote_addr: u64, rkey: u32 },
    AtomicCmpSwp { remote_addr: u64, rkey: u32, compare: u64, swap: u64 },
    AtomicFetchAdd { remote_addr: u64, rkey: u32, add: u64 },
    LocalInv { invalidate_rkey: u32 },
    BindMw(MwBind),
}

impl WrKind {
    pub fn opcode(&self) -> WrOpcode {
        match self {
            WrKind::Send => WrOpcode::Send,
            WrKind::SendWithImm { .. } => WrOpcode::SendWithImm,
            WrKind::SendWithInv { .. } => WrOpcode::SendWithInv,
            WrKind::RdmaWrite { .. } => WrOpcode::RdmaWrite,
            WrKind::RdmaWriteWithImm { .. } => WrOpcode::RdmaWriteWithImm,
            WrKind::RdmaRead { .. } => WrOpcode::RdmaRead,
            WrKind::AtomicCmpSwp { .. } => WrOpcode::AtomicCmpAndSwp,
            WrKind::AtomicFetchAdd { .. } => WrOpcode::AtomicFetchAndAdd,
            WrKind::LocalInv { .. } => WrOpcode::LocalInv,
            WrKind::BindMw(_) => WrOpcode::BindMw,
        }
    }
}

/// UD destination of a send WR.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct UdDest {
    pub ah: AhId,
    pub remote_qpn: Qpn,
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`, one element of the chain). Borrowed: the engine
/// copies what it keeps, and copies inline data out of host memory during `post_send`.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub kind: WrKind,
    pub flags: SendFlags,
    pub sg_list: &'a [Sge],
    /// UD only.
    pub ud: Option<UdDest>,
}

impl SendWr<'_> {
    /// Payload bytes this WR carries in its request packets (none for READ, atomics and local
    /// operations, whose requests are headers only).
    pub fn request_payload_len(&self) -> u64 {
        match self.kind {
            WrKind::Send
            | WrKind::SendWithImm { .. }
            | WrKind::SendWithInv { .. }
            | WrKind::RdmaWrite { .. }
            | WrKind::RdmaWriteWithImm { .. } => self.sg_list.iter().map(|s| u64::from(s.length)).sum(),
            _ => 0,
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`, one element of the chain).
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
}

/// `enum ibv_wc_status`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u32)]
pub enum WcStatus {
    #[default]
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
    TmErr = 22,
    TmRndvIncomplete = 23,
}

/// `enum ibv_wc_opcode`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u32)]
pub enum WcOpcode {
    #[default]
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Tso = 7,
    AtomicWrite = 9,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// One completion (`struct ibv_wc`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct WorkCompletion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Immediate data exactly as on the wire (big-endian bytes read as a native u32 would give
    /// `u32::from_ne_bytes(wire)`), i.e. the value `ibv_wc.imm_data` (`__be32`) holds.
    pub imm_data: u32,
    /// Valid with `WcFlags::WITH_INV`.
    pub invalidated_rkey: u32,
    pub qp_num: Qpn,
    pub src_qp: Qpn,
    pub wc_flags: WcFlags,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    /// Driver timestamp (ns), for `ibv_wc_read_completion_ts`.
    pub timestamp: Nanos,
}

/// `struct ibv_srq_attr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

bitflags_u32! {
    /// `enum ibv_srq_attr_mask`.
    SrqAttrMask {
        MAX_WR = 1;
        LIMIT = 1 << 1;
    }
}

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum MwType {
    Type1 = 1,
    Type2 = 2,
}

/// `enum ibv_event_type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum AsyncEventType {
    CqErr = 0,
    QpFatal = 1,
    QpReqErr = 2,
    QpAccessErr = 3,
    CommEst = 4,
    SqDrained = 5,
    PathMig = 6,
    PathMigErr = 7,
    DeviceFatal = 8,
    PortActive = 9,
    PortErr = 10,
    LidChange = 11,
    PkeyChange = 12,
    SmChange = 13,
    SrqErr = 14,
    SrqLimitReached = 15,
    QpLastWqeReached = 16,
    ClientReregister = 17,
    GidChange = 18,
    WqFatal = 19,
}

/// The object an async event is about.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AsyncElement {
    Qp(Qpn),
    Cq(CqId),
    Srq(SrqId),
    Port(u8),
    Device,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AsyncEvent {
    pub kind: AsyncEventType,
    pub element: AsyncElement,
}

/// What the engine asks its driver to deliver.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Event {
    /// An armed CQ received a completion (one-shot: the CQ is disarmed).
    Completion(CqId),
    Async(AsyncEvent),
}

/// Device-wide limits the engine enforces and the provider reports (`ibv_device_attr`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Limits {
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_inline_data: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_mr_size: u64,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_ah: u32,
    pub max_mw: u32,
    pub max_msg_size: u32,
}

impl Default for Limits {
    /// In the spirit of rxe's defaults (rxe_param.h), sized for a userspace process.
    fn default() -> Self {
        Limits {
            max_qp: 0x10000,
            max_qp_wr: 0x4000,
            max_sge: 32,
            max_sge_rd: 32,
            max_inline_data: 512,
            max_cq: 0x10000,
            max_cqe: (1 << 15) - 1,
            max_mr: 0x10000,
            max_mr_size: u64::MAX,
            max_pd: 0x10000,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_res_rd_atom: 0x3f000,
            max_srq: 0x10000,
            max_srq_wr: 0x4000,
            max_srq_sge: 27,
            max_ah: 0x8000,
            max_mw: 0x10000,
            max_msg_size: 1 << 31,
        }
    }
}

/// Static configuration of one engine (one device).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The device's own address (its GID is this address, IPv4-mapped for IPv4).
    pub local_addr: IpAddr,
    /// Largest path MTU the port supports (`active_mtu`).
    pub max_mtu: Mtu,
    pub limits: Limits,
    /// Seed for PSN-independent randomness the engine needs (none today beyond key scrambling);
    /// fixed in tests.
    pub seed: u64,
}

/// An engine command error. Each maps to the errno the verbs API documents.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Error {
    /// Bad argument, bad attribute mask or illegal state transition (EINVAL).
    Invalid,
    /// Out of resources (ENOMEM): queue full, too many objects.
    NoMemory,
    /// Object still referenced (EBUSY).
    Busy,
    /// Unknown handle (ENOENT, the provider usually reports EINVAL for a bad object).
    NotFound,
    /// Not implemented by urxe (EOPNOTSUPP).
    NotSupported,
    /// Work request posted in a state that does not allow it (EINVAL per verbs).
    BadState,
}

impl Error {
    pub fn errno(self) -> i32 {
        match self {
            Error::Invalid | Error::BadState => libc::EINVAL,
            Error::NoMemory => libc::ENOMEM,
            Error::Busy => libc::EBUSY,
            Error::NotFound => libc::ENOENT,
            Error::NotSupported => libc::EOPNOTSUPP,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Error::Invalid => "invalid argument",
            Error::NoMemory => "out of resources",
            Error::Busy => "object in use",
            Error::NotFound => "no such object",
            Error::NotSupported => "not supported",
            Error::BadState => "not allowed in the current state",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}

/// Host memory as the engine sees it: a flat address space of the process (or, in tests, of a
/// simulated host). Implementations check nothing about keys or PDs — the engine has already —
/// but must refuse addresses they cannot reach rather than fault.
pub trait HostMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// 8-byte aligned atomic compare-and-swap; returns the original value.
    fn atomic_cmp_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError>;
    /// 8-byte aligned atomic fetch-and-add; returns the original value.
    fn atomic_fetch_add(&self, addr: u64, add: u64) -> Result<u64, MemError>;
}

/// A host memory access that could not be done. `Fault`: registered memory no longer mapped
/// with the access needed (unmapped or protected after registration), at `addr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MemError {
    OutOfBounds { addr: u64, len: u64 },
    Misaligned { addr: u64 },
    Fault { addr: u64 },
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::OutOfBounds { addr, len } => {
                write!(f, "access of {len} bytes at {addr:#x} is outside host memory")
            }
            MemError::Misaligned { addr } => write!(f, "atomic at {addr:#x} is not 8-byte aligned"),
            MemError::Fault { addr } => write!(f, "registered memory at {addr:#x} is no longer mapped"),
        }
    }
}

impl std::error::Error for MemError {}

/// How much of a received packet's IP header the driver knows, for the ICRC.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IcrcCheck {
    /// The full set of covered IP fields (IPv6; IPv4 from a raw socket or a simulator).
    Full(crate::wire::icrc::IpFields),
    /// IPv4 via a UDP socket: the IP ID is unknown. Verify assuming ID 0 with DF (what urxe
    /// peers send); on mismatch accept and count `icrc_unverified`.
    V4NoId { src: [u8; 4], dst: [u8; 4] },
}

/// One received UDP datagram addressed to port 4791.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    pub src: IpAddr,
    pub src_port: u16,
    pub dst: IpAddr,
    pub icrc: IcrcCheck,
    /// The UDP payload: BTH .. ICRC.
    pub payload: &'a [u8],
}

/// One datagram the engine wants sent to `dst`:4791 from UDP source port `src_port`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Transmit {
    pub dst: IpAddr,
    pub src_port: u16,
    pub len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_for_netdev_matches_rxe_rule() {
        assert_eq!(Mtu::for_netdev(1500), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::for_netdev(9000), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_netdev(65536), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_netdev(300), None);
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    }

    #[test]
    fn flag_helpers_report_unknown_bits() {
        let m = QpAttrMask::STATE | QpAttrMask::AV;
        assert!(m.contains(QpAttrMask::STATE));
        assert_eq!(QpAttrMask(1 << 30).unknown_bits(), 1 << 30);
        assert_eq!(format!("{:?}", SendFlags::SIGNALED | SendFlags::INLINE), "SendFlags(SIGNALED|INLINE)");
    }
}
