//! Provider layer: the libibverbs functions that touch no device or object: enum-to-string,
//! rate conversions, fork support, the sysfs helpers (there is no sysfs device), and the
//! kernel-struct copy helpers librdmacm links.

use crate::abi::*;
use libc::{c_char, c_int, c_uint, c_void};

/// (ibv_rate, multiple of 2.5 Gb/s) for the rates that have one.
const RATE_MULT: &[(u64, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 1),
    (IBV_RATE_5_GBPS, 2),
    (IBV_RATE_10_GBPS, 4),
    (IBV_RATE_20_GBPS, 8),
    (IBV_RATE_30_GBPS, 12),
    (IBV_RATE_40_GBPS, 16),
    (IBV_RATE_60_GBPS, 24),
    (IBV_RATE_80_GBPS, 32),
    (IBV_RATE_120_GBPS, 48),
];

/// (ibv_rate, Mb/s) for every defined rate (the extended-speed ones are not multiples of 2.5).
const RATE_MBPS: &[(u64, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 2500),
    (IBV_RATE_5_GBPS, 5000),
    (IBV_RATE_10_GBPS, 10000),
    (IBV_RATE_20_GBPS, 20000),
    (IBV_RATE_30_GBPS, 30000),
    (IBV_RATE_40_GBPS, 40000),
    (IBV_RATE_60_GBPS, 60000),
    (IBV_RATE_80_GBPS, 80000),
    (IBV_RATE_120_GBPS, 120000),
    (IBV_RATE_14_GBPS, 14062),
    (IBV_RATE_56_GBPS, 56250),
    (IBV_RATE_112_GBPS, 112500),
    (IBV_RATE_168_GBPS, 168750),
    (IBV_RATE_25_GBPS, 25781),
    (IBV_RATE_100_GBPS, 103125),
    (IBV_RATE_200_GBPS, 206250),
    (IBV_RATE_300_GBPS, 309375),
    (IBV_RATE_28_GBPS, 28125),
    (IBV_RATE_50_GBPS, 53125),
    (IBV_RATE_400_GBPS, 425000),
    (IBV_RATE_600_GBPS, 637500),
    (IBV_RATE_800_GBPS, 850000),
    (IBV_RATE_1200_GBPS, 1275000),
];

fn lookup(t: &[(u64, c_int)], rate: c_uint) -> c_int {
    t.iter().find(|(r, _)| *r == rate as u64).map_or(-1, |(_, v)| *v)
}
fn rlookup(t: &[(u64, c_int)], v: c_int) -> c_uint {
    t.iter().find(|(_, x)| *x == v).map_or(IBV_RATE_MAX as c_uint, |(r, _)| *r as c_uint)
}

/// `ibv_rate_to_mult(3)`: multiple of 2.5 Gb/s, or -1.
#[urxe_cabi::export(value(-1))]
pub unsafe extern "C" fn ibv_rate_to_mult(rate: c_uint) -> c_int {
    lookup(RATE_MULT, rate)
}
/// `mult_to_ibv_rate(3)`: IBV_RATE_MAX for an unknown multiple.
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_uint {
    rlookup(RATE_MULT, mult)
}
/// `ibv_rate_to_mbps(3)`: Mb/s, or -1.
#[urxe_cabi::export(value(-1))]
pub unsafe extern "C" fn ibv_rate_to_mbps(rate: c_uint) -> c_int {
    lookup(RATE_MBPS, rate)
}
/// `mbps_to_ibv_rate(3)`: IBV_RATE_MAX for an unknown value.
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_uint {
    rlookup(RATE_MBPS, mbps)
}

macro_rules! cstrs {
    ($($s:literal),* $(,)?) => { &[$(concat!($s, "\0")),*] };
}

const NODE_TYPE_STR: &[&str] = cstrs![
    "unknown",
    "InfiniBand channel adapter",
    "InfiniBand switch",
    "InfiniBand router",
    "iWARP NIC",
    "usNIC",
    "usNIC UDP",
    "unspecified"
];
const PORT_STATE_STR: &[&str] = cstrs!["no state change (NOP)", "down", "init", "armed", "active", "active defer"];
const EVENT_STR: &[&str] = cstrs![
    "CQ error",
    "local work queue catastrophic error",
    "invalid request local work queue error",
    "local access violation work queue error",
    "communication established",
    "send queue drained",
    "path migrated",
    "path migration request error",
    "local catastrophic error",
    "port active",
    "port error",
    "LID change",
    "P_Key change",
    "SM change",
    "SRQ catastrophic error",
    "SRQ limit reached",
    "last WQE reached",
    "client reregistration",
    "GID table change",
    "WQ fatal",
];
const WC_STATUS_STR: &[&str] = cstrs![
    "success",
    "local length error",
    "local QP operation error",
    "local EE context operation error",
    "local protection error",
    "Work Request Flushed Error",
    "memory management operation error",
    "bad response error",
    "local access error",
    "remote invalid request error",
    "remote access error",
    "remote operation error",
    "transport retry counter exceeded",
    "RNR retry counter exceeded",
    "local RDD violation error",
    "remote invalid RD request",
    "aborted error",
    "invalid EE context number",
    "invalid EE context state",
    "fatal error",
    "response timeout error",
    "general error",
    "TM error",
    "TM software rendezvous",
];
const UNKNOWN: &str = "unknown\0";

fn pick(t: &[&'static str], i: i64) -> *const c_char {
    usize::try_from(i).ok().and_then(|i| t.get(i)).copied().unwrap_or(UNKNOWN).as_ptr() as *const c_char
}

/// `ibv_node_type_str(3)`.
#[urxe_cabi::export(value(UNKNOWN.as_ptr() as *const c_char))]
pub unsafe extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    if node_type < 1 {
        pick(&[], -1)
    } else {
        pick(NODE_TYPE_STR, node_type as i64)
    }
}
/// `ibv_port_state_str(3)`.
#[urxe_cabi::export(value(UNKNOWN.as_ptr() as *const c_char))]
pub unsafe extern "C" fn ibv_port_state_str(port_state: c_uint) -> *const c_char {
    pick(PORT_STATE_STR, port_state as i64)
}
/// `ibv_event_type_str(3)`.
#[urxe_cabi::export(value(UNKNOWN.as_ptr() as *const c_char))]
pub unsafe extern "C" fn ibv_event_type_str(event: c_uint) -> *const c_char {
    pick(EVENT_STR, event as i64)
}
/// `ibv_wc_status_str(3)`.
#[urxe_cabi::export(value(UNKNOWN.as_ptr() as *const c_char))]
pub unsafe extern "C" fn ibv_wc_status_str(status: c_uint) -> *const c_char {
    pick(WC_STATUS_STR, status as i64)
}

/// `ibv_wr_opcode_str` names, indexed by `enum ibv_wr_opcode` (rdma-core 56; 12 and 13 are
/// unassigned and read "unknown" like every value out of range).
const WR_OPCODE_STR: &[&str] = &[
    "rdma-write\0",
    "rdma-write-with-imm\0",
    "send\0",
    "send-with-imm\0",
    "rdma-read\0",
    "atomic-cmp-and-swp\0",
    "atomic-fetch-and-add\0",
    "local-inv\0",
    "bind-mw\0",
    "send-with-inv\0",
    "tso\0",
    "driver1\0",
    UNKNOWN,
    UNKNOWN,
    "flush\0",
    "atomic-write\0",
];
/// `ibv_wr_opcode_str` (IBVERBS_PRIVATE_34 in rdma-core 56, declared in verbs.h).
#[urxe_cabi::export(value(UNKNOWN.as_ptr() as *const c_char))]
pub unsafe extern "C" fn ibv_wr_opcode_str(opcode: c_uint) -> *const c_char {
    pick(WR_OPCODE_STR, opcode as i64)
}

/// `ibv_fork_init(3)`: nothing to do; urxe never pins memory for DMA, so fork is safe.
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn ibv_fork_init() -> c_int {
    0
}
/// `ibv_is_fork_initialized(3)`: IBV_FORK_UNNEEDED.
#[urxe_cabi::export(value(IBV_FORK_UNNEEDED as c_uint))]
pub unsafe extern "C" fn ibv_is_fork_initialized() -> c_uint {
    IBV_FORK_UNNEEDED as c_uint
}
/// `ibv_dontfork_range`: 0 (nothing pinned).
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    0
}
/// `ibv_dofork_range`: 0.
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    0
}

/// `ibv_get_sysfs_path`: "/sys" (librdmacm builds paths from it; nothing under it is ours).
#[urxe_cabi::export(value(c"/sys".as_ptr()))]
pub unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}
/// `ibv_read_sysfs_file`: urxe has no sysfs files; -1 + ENOENT (callers fall back:
/// librdmacm assumes the newest ABI, ibv_devinfo omits board_id).
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    Err(libc::ENOENT)
}

/// `ibv_resolve_eth_l2_from_gid`: used only by libmlx5's create_ah; EOPNOTSUPP.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_resolve_eth_l2_from_gid(
    context: *mut ibv_context,
    attr: *mut ibv_ah_attr,
    eth_mac: *mut u8,
    vid: *mut u16,
) -> c_int {
    Err(libc::EOPNOTSUPP)
}

/// `ibv_copy_path_rec_from_kern`: converts a kernel `ib_user_path_rec`, which only exists
/// in replies from the kernel rdma_cm; never produced with urxe. No-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(dst: *mut c_void, src: *mut c_void) {}
/// `ibv_copy_path_rec_to_kern`: see ibv_copy_path_rec_from_kern. No-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(dst: *mut c_void, src: *mut c_void) {}
/// `ibv_copy_qp_attr_from_kern`: kernel `ib_uverbs_qp_attr` replies only. No-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut c_void) {}
/// `ibv_copy_ah_attr_from_kern`: kernel `ib_uverbs_ah_attr` replies only. No-op.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut c_void) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn s(p: *const c_char) -> String {
        // SAFETY: the tables hold NUL-terminated literals.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
    }

    #[test]
    fn rates_round_trip() {
        // SAFETY: the rate functions take no pointers.
        unsafe {
            assert_eq!(ibv_rate_to_mult(IBV_RATE_40_GBPS as c_uint), 16);
            assert_eq!(mult_to_ibv_rate(16), IBV_RATE_40_GBPS as c_uint);
            assert_eq!(ibv_rate_to_mult(IBV_RATE_100_GBPS as c_uint), -1);
            assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX as c_uint);
            assert_eq!(ibv_rate_to_mbps(IBV_RATE_100_GBPS as c_uint), 103125);
            assert_eq!(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS as c_uint);
            assert_eq!(ibv_rate_to_mbps(99), -1);
            for (r, m) in RATE_MBPS {
                assert_eq!(mbps_to_ibv_rate(*m) as u64, *r);
            }
        }
    }

    #[test]
    fn strings() {
        // SAFETY: no pointers in.
        unsafe {
            assert_eq!(s(ibv_wc_status_str(0)), "success");
            assert_eq!(s(ibv_wr_opcode_str(2)), "send");
            assert_eq!(s(ibv_wr_opcode_str(15)), "atomic-write");
            assert_eq!(s(ibv_wr_opcode_str(12)), "unknown");
            assert_eq!(s(ibv_wr_opcode_str(16)), "unknown");
            assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
            assert_eq!(s(ibv_wc_status_str(23)), "TM software rendezvous");
            assert_eq!(s(ibv_wc_status_str(24)), "unknown");
            assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
            assert_eq!(s(ibv_node_type_str(-1)), "unknown");
            assert_eq!(s(ibv_port_state_str(4)), "active");
            assert_eq!(s(ibv_event_type_str(19)), "WQ fatal");
            assert_eq!(s(ibv_event_type_str(20)), "unknown");
        }
        assert_eq!(WC_STATUS_STR.len(), 24);
        assert_eq!(EVENT_STR.len(), 20);
    }
}
