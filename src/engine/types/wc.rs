//! Work completions.

use super::flags::*;
use super::handles::*;

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

impl WcStatus {
    /// The status with this `enum ibv_wc_status` value.
    pub fn from_u32(v: u32) -> Option<WcStatus> {
        use WcStatus::*;
        const ALL: [WcStatus; 24] = [
            Success,
            LocLenErr,
            LocQpOpErr,
            LocEecOpErr,
            LocProtErr,
            WrFlushErr,
            MwBindErr,
            BadRespErr,
            LocAccessErr,
            RemInvReqErr,
            RemAccessErr,
            RemOpErr,
            RetryExcErr,
            RnrRetryExcErr,
            LocRddViolErr,
            RemInvRdReqErr,
            RemAbortErr,
            InvEecnErr,
            InvEecStateErr,
            FatalErr,
            RespTimeoutErr,
            GeneralErr,
            TmErr,
            TmRndvIncomplete,
        ];
        ALL.iter().copied().find(|s| *s as u32 == v)
    }
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
    Flush = 8,
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
