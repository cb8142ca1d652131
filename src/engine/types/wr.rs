//! Work requests: SGEs, send WR kinds and the borrowed send/receive WRs.

use super::flags::*;
use super::handles::*;

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
    Flush = 14,
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
            14 => WrOpcode::Flush,
            15 => WrOpcode::AtomicWrite,
            _ => return None,
        })
    }
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
    SendWithImm {
        imm_data: u32,
    },
    SendWithInv {
        invalidate_rkey: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm_data: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    AtomicCmpSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    AtomicFetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    LocalInv {
        invalidate_rkey: u32,
    },
    BindMw(MwBind),
    /// ATOMIC WRITE (RC): the 8 bytes of `value` land at `remote_addr` (8-byte aligned) as one
    /// unit, in the byte order they have here (`ibv_wr_atomic_write` passes a pointer to them).
    AtomicWrite {
        remote_addr: u64,
        rkey: u32,
        value: [u8; 8],
    },
    /// FLUSH (RC): `placement` is the FETH placement type (1 global visibility, 2
    /// persistence), `level` the selectivity level (0 the range `remote_addr`/`len`, 1 the
    /// whole region of `rkey`).
    Flush {
        remote_addr: u64,
        rkey: u32,
        len: u32,
        placement: u8,
        level: u8,
    },
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
            WrKind::AtomicWrite { .. } => WrOpcode::AtomicWrite,
            WrKind::Flush { .. } => WrOpcode::Flush,
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
