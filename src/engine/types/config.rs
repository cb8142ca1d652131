//! Device limits, engine configuration and the command error.

use std::fmt;
use std::net::IpAddr;

use super::qp::*;

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
    /// Multicast groups the device's QPs may be attached to at once.
    pub max_mcast_grp: u32,
    /// QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Attachments over all groups.
    pub max_total_mcast_qp_attach: u32,
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
            // Not rxe's (1 << 15) - 1, a kernel memory bound: libfabric's ofi_rxm sizes its CQ
            // for 1024 peers ((128 + 128) * 1024 entries by default) without looking at
            // max_cqe; ConnectX reports (1 << 22) - 1. A CQ's ring is this process's memory.
            max_cqe: (1 << 22) - 1,
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
            // rxe_param.h: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH, RXE_MAX_TOT_MCAST_QP_ATTACH.
            // Each group is one socket of the process, so the group count stays below a
            // default open-file limit.
            max_mcast_grp: 512,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 0x70000,
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
    /// Seed of the engine's RNG, the source of the random bits in every lkey/rkey. The
    /// transport draws it from the kernel (`sys::random_seed`); the simulator fixes it
    /// so runs are reproducible.
    pub seed: u64,
}

/// splitmix64 (Steele, Lea and Flood, 2014): the engine's seeded generator — the random bits of
/// every key come from one seeded with [`EngineConfig::seed`]. Public so that drivers and
/// simulators that want the same small generator need not carry their own.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
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
    /// The errno a fault plan (`URXE_FAULTS`) gives this call.
    Injected(i32),
}

impl Error {
    pub fn errno(self) -> i32 {
        match self {
            Error::Invalid | Error::BadState => libc::EINVAL,
            Error::NoMemory => libc::ENOMEM,
            Error::Busy => libc::EBUSY,
            Error::NotFound => libc::ENOENT,
            Error::NotSupported => libc::EOPNOTSUPP,
            Error::Injected(e) => e,
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
            Error::Injected(_) => "injected by the fault plan",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}
