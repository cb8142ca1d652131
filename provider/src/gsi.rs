//! Provider layer: urxe's private GSI API (`urxe_gsi_*@URXE_PRIVATE_1`), the one way
//! librdmacm.so.1 reaches QP1 of the device this library runs: it exchanges connection
//! manager MADs through the engine's GSI queues (`Engine::poll_gsi` / `send_gsi`) instead of
//! a kernel's `/dev/infiniband/umad`. No application is meant to call these.
//!
//! | call | returns |
//! |---|---|
//! | `int urxe_gsi_fd(void)` | an eventfd (non-blocking) that becomes readable when MADs arrive for QP1; the reader clears it, then calls `urxe_gsi_recv` until it returns 1. Starts the device. -1 + errno on failure |
//! | `int urxe_gsi_recv(uint8_t peer[16], uint8_t mad[256])` | 0 with the sender's IP (IPv4-mapped) and the MAD; 1 when none is queued (the normal end of a drain, so not an error `URXE_TRACE` would print); -1 + errno |
//! | `int urxe_gsi_send(const uint8_t peer[16], const uint8_t mad[256])` | 0, or -1 + errno (ENOMEM: send queue full) |
//! | `uint32_t urxe_gsi_comm_id_base(void)` | this process's CM comm ID base: its group slot in the high byte |
//! | `int urxe_gsi_listen(uint64_t service_id)` / `urxe_gsi_unlisten` | steer REQ / SIDR_REQ for the service at the shared address to this process (or stop); 0 or -1 + errno |
//! | `int urxe_gsi_cm_counters(const uint64_t *values, uint32_t n)` | librdmacm's CM counters for `urxe stat` (`urxe::cm::CmCounters::named` order, then the CM faults); 0, or -1 + errno |
//! | `int urxe_gsi_fault_note(const char *text)` | an rdma_cm fault librdmacm injected, noted in the `URXE_PCAP` capture (nothing without one); 0, or -1 + errno (EINVAL: NULL or not UTF-8) |

use crate::context::device;
use crate::glue::transport;
use libc::c_int;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::OnceLock;
use urxe::wire::mad::MAD_LEN;

fn gsi_fd() -> Result<c_int, i32> {
    static FD: OnceLock<Result<c_int, i32>> = OnceLock::new();
    *FD.get_or_init(|| {
        // SAFETY: eventfd has no memory arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(crate::export::errno());
        }
        crate::events::set_gsi_fd(fd);
        // Start the device so that QP1 receives; MADs that came before are read on the first
        // wakeup the reader gives itself (it drains before it waits).
        transport(device()?)?;
        crate::events::wake_gsi();
        Ok(fd)
    })
}

fn peer_of(g: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(g);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

fn gid_of(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// `urxe_gsi_fd`: the GSI wakeup eventfd (see the module table).
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_fd() -> c_int {
    gsi_fd()
}

/// `urxe_gsi_recv`: the next MAD for QP1 (0), or 1 if none is queued.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_recv(peer: *mut u8, mad: *mut u8) -> c_int {
    if peer.is_null() || mad.is_null() {
        return Err(libc::EINVAL);
    }
    let Some((src, m)) = transport(device()?)?.poll_gsi() else {
        return Ok(1);
    };
    // SAFETY: the caller's 16- and 256-byte buffers (the documented contract).
    unsafe {
        std::ptr::copy_nonoverlapping(gid_of(src).as_ptr(), peer, 16);
        std::ptr::copy_nonoverlapping(m.as_ptr(), mad, MAD_LEN);
    }
    Ok(0)
}

/// `urxe_gsi_send`: queue a MAD for QP1 of `peer` and send it.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_send(peer: *const u8, mad: *const u8) -> c_int {
    if peer.is_null() || mad.is_null() {
        return Err(libc::EINVAL);
    }
    let mut g = [0u8; 16];
    let mut m = [0u8; MAD_LEN];
    // SAFETY: the caller's 16- and 256-byte buffers.
    unsafe {
        std::ptr::copy_nonoverlapping(peer, g.as_mut_ptr(), 16);
        std::ptr::copy_nonoverlapping(mad, m.as_mut_ptr(), MAD_LEN);
    }
    let dst = peer_of(g);
    transport(device()?)?.send_gsi(dst, &m).map_err(|e| e.errno())?;
    Ok(0)
}

/// `urxe_gsi_comm_id_base`: this process's comm ID base: its group slot in the high byte
/// (every process sharing the address hands out distinct comm IDs, and the group steers
/// CM replies by that byte); 0 when the device could not start.
#[urxe_cabi::export(value(0))]
pub unsafe extern "C" fn urxe_gsi_comm_id_base() -> u32 {
    device().and_then(transport).ok().and_then(|t| t.group().map(|m| m.comm_base())).unwrap_or(0)
}

/// `urxe_gsi_listen`: steer CM REQs and SIDR_REQs for `service_id` arriving at the shared
/// address to this process (the group's listener table). 0 or -1 + errno.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_listen(service_id: u64) -> c_int {
    if let Some(m) = transport(device()?)?.group() {
        m.listen(service_id).map_err(|e| e.errno())?;
    }
    Ok(0)
}

/// `urxe_gsi_unlisten`: stop steering `service_id` to this process. 0 or -1 + errno.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_unlisten(service_id: u64) -> c_int {
    if let Some(m) = transport(device()?)?.group() {
        m.unlisten(service_id).map_err(|e| e.errno())?;
    }
    Ok(0)
}

/// `urxe_gsi_cm_counters`: librdmacm's CM counters, `n` values in
/// `urxe::cm::CmCounters::named` order and then its injected CM faults
/// (`urxe::engine::faults::CM_FAULT_KINDS` order), kept for `urxe stat` (what the process's
/// CM refused, dropped and released, and which faults it was made to take). 0, or -1 + EINVAL for a NULL `values`.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_cm_counters(values: *const u64, n: u32) -> c_int {
    if values.is_null() {
        return Err(libc::EINVAL);
    }
    let n = (n as usize).min(urxe::observe::cmstat::CM_VALUES);
    // SAFETY: the caller's array of at least `n` u64s (the documented contract).
    let v = unsafe { std::slice::from_raw_parts(values, n) };
    urxe::observe::cmstat::set_cm_counters(v);
    Ok(0)
}

/// `urxe_gsi_fault_note`: `text` (a NUL-terminated UTF-8 line, librdmacm's trace line of an
/// rdma_cm fault it injected) as a fault note in the device's `URXE_PCAP` capture, beside the
/// packets (the engine notes its own faults the same way). 0, or -1 + EINVAL for a NULL or
/// non-UTF-8 `text`.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn urxe_gsi_fault_note(text: *const libc::c_char) -> c_int {
    if text.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's NUL-terminated string (the documented contract), read here only.
    let text = unsafe { std::ffi::CStr::from_ptr(text) }.to_str().map_err(|_| libc::EINVAL)?;
    transport(device()?)?.fault_note(text);
    Ok(0)
}
