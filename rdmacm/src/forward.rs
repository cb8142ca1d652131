//! CM requests for another process of the shared address. The steering program sends a REQ /
//! SIDR_REQ to the slot that registered its service ID, or to the group's default slot when
//! none has; a request queued there just before a listener's entry appeared (perftest's
//! client reconnecting while its server re-listens) would be refused by a process that never
//! listens on it. As one kernel CM with one listener table would, the receiving process looks
//! the service up in the group's table first:
//! - nobody else listens on it: the CM refuses it (REJ "invalid service ID", SIDR_REP
//!   "service ID not supported"), the kernel's answer;
//! - another live member listens on it: a request from our own address (a process of the
//!   same group) is sent on to the address, where the steering program now delivers it to
//!   that member, with the same source IP; a request from elsewhere is dropped without an
//!   answer, and its sender's retransmission is steered to the listener.
//!
//! A request is sent on once per transaction ID and [`RESEND_HOLD`] (a stale program that
//! sends it back to us cannot make it circle).

use crate::core::Lib;
use std::sync::Mutex;
use urxe::transport::group::{listener_elsewhere, registry::default_dir};
use urxe::wire::cm::attr;
use urxe::wire::mad::{MadHeader, CLASS_CM, MAD_LEN};

/// How long a sent-on transaction ID is not sent on again.
const RESEND_HOLD: u64 = 2_000_000_000;
/// Transaction IDs remembered at most.
const RECENT_MAX: usize = 64;
/// ServiceID offset in REQ and SIDR_REQ: message body (after the 24-byte MAD header) + 8.
const SERVICE_ID_AT: usize = 24 + 8;

/// Recently sent-on transaction IDs with the time they were sent on.
static RECENT: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// The service ID of a CM REQ or SIDR_REQ, None for every other MAD.
pub fn request_service(mad: &[u8]) -> Option<u64> {
    if mad.len() < MAD_LEN {
        return None;
    }
    let h = MadHeader::new_unchecked(mad);
    if h.mgmt_class() != CLASS_CM || !matches!(h.attribute_id(), attr::REQ | attr::SIDR_REQ) {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&mad[SERVICE_ID_AT..SERVICE_ID_AT + 8]);
    Some(u64::from_be_bytes(b))
}

/// What to do with a received MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Ours to handle (or to refuse): give it to the CM.
    Local,
    /// Send it on to our address, where the listener's slot receives it.
    SendOn,
    /// Another member listens, but it cannot be sent on (now): drop it.
    Drop,
}

/// Whether `tid` may be sent on at `now` (and remember it if so).
fn first_send(tid: u64, now: u64) -> bool {
    let mut r = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    r.retain(|&(_, at)| now.saturating_sub(at) < RESEND_HOLD);
    if r.iter().any(|&(t, _)| t == tid) {
        return false;
    }
    if r.len() >= RECENT_MAX {
        r.remove(0);
    }
    r.push((tid, now));
    true
}

/// The route of a MAD from `peer` (an IPv4-mapped or IPv6 GID), with `elsewhere` telling
/// whether another live member of the group listens on a service (asked only for requests
/// this process does not listen on).
pub fn route(
    lib: &Lib,
    peer: &[u8; 16],
    mad: &[u8],
    now: u64,
    elsewhere: impl FnOnce(std::net::IpAddr, u8, u64) -> bool,
) -> Route {
    let Some(sid) = request_service(mad) else { return Route::Local };
    if lib.listener(sid).is_some() {
        return Route::Local;
    }
    let Some(dev) = lib.dev.as_ref() else { return Route::Local };
    // SAFETY: a function of urxe's libibverbs with no arguments.
    let own_slot = (unsafe { (dev.gsi.comm_id_base)() } >> 24) as u8;
    if !elsewhere(dev.addr, own_slot, sid) {
        return Route::Local;
    }
    let tid = MadHeader::new_unchecked(mad).transaction_id();
    if *peer == dev.gid && first_send(tid, now) {
        Route::SendOn
    } else {
        Route::Drop
    }
}

impl Lib {
    /// Handles a MAD that belongs to another member; returns false if the CM should take it.
    pub fn divert(&self, peer: &[u8; 16], mad: &[u8; MAD_LEN], now: u64) -> bool {
        let lib = self;
        let elsewhere = |addr, own, sid| matches!(listener_elsewhere(&default_dir(), addr, own, sid), Ok(Some(_)));
        match route(lib, peer, mad, now, elsewhere) {
            Route::Local => false,
            Route::Drop => true,
            Route::SendOn => {
                if let Some(d) = &lib.dev {
                    // SAFETY: 16- and 256-byte buffers as the call requires. A failed send is the
                    // same as a lost request: the sender retransmits it.
                    unsafe { (d.gsi.send)(d.gid.as_ptr(), mad.as_ptr()) };
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mad(attr_id: u16, sid: u64) -> [u8; MAD_LEN] {
        let mut m = [0u8; MAD_LEN];
        m[0] = 1;
        m[1] = CLASS_CM;
        m[2] = 2;
        m[3] = 3;
        m[8..16].copy_from_slice(&0x1234_5678_9abc_def0u64.to_be_bytes());
        m[16..18].copy_from_slice(&attr_id.to_be_bytes());
        m[SERVICE_ID_AT..SERVICE_ID_AT + 8].copy_from_slice(&sid.to_be_bytes());
        m
    }

    #[test]
    fn only_req_and_sidr_req_name_a_service() {
        assert_eq!(request_service(&mad(attr::REQ, 0x0106_0000_0000_1d4f)), Some(0x0106_0000_0000_1d4f));
        assert_eq!(request_service(&mad(attr::SIDR_REQ, 0x0111_0000_0000_0007)), Some(0x0111_0000_0000_0007));
        assert_eq!(request_service(&mad(attr::REP, 0x0106_0000_0000_1d4f)), None);
        let mut other_class = mad(attr::REQ, 1);
        other_class[1] = 0x03;
        assert_eq!(request_service(&other_class), None);
        assert_eq!(request_service(&mad(attr::REQ, 1)[..100]), None);
    }

    #[test]
    fn a_transaction_is_sent_on_once_per_hold() {
        let t0 = 5_000_000_000_000;
        assert!(first_send(0xAB, t0));
        assert!(!first_send(0xAB, t0 + RESEND_HOLD - 1));
        assert!(first_send(0xAC, t0 + 1));
        assert!(first_send(0xAB, t0 + RESEND_HOLD));
    }
}
