//! Attributes of MRs, MWs and SRQs.

use super::flags::*;
use super::handles::*;

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

/// What `Engine::rereg_mr` changes (`None`: keep).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct MrChange {
    pub pd: Option<PdId>,
    /// New host address, length and iova.
    pub translation: Option<(u64, u64, u64)>,
    pub access: Option<AccessFlags>,
}

/// What `Engine::reg_mr` returns: the MR handle and its keys (lkey = rkey =
/// `(index << 8) | generation`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MrHandle {
    pub id: MrId,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_srq_attr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum MwType {
    Type1 = 1,
    Type2 = 2,
}
