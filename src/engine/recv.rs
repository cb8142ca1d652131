//! Receive checks (rxe_recv.c): what every datagram must pass before a QP's responder or
//! completer sees it — parse, ICRC, P_Key — and what the addressed QP must accept — transport
//! type and, for connected QPs, the peer's address. Each drop is counted.

use super::counters::Counters;
use super::qp::Qp;
use super::types::*;
use crate::wire;
use crate::wire::icrc::{IpFields, ROCEV2_PORT};
use crate::wire::opcode::Transport;
use crate::wire::Parsed;

/// Parses the datagram and checks its ICRC and P_Key; `None` (counted) if it is dropped.
///
/// Inlined into its one caller, so that the parsed packet (about 200 bytes of headers) is built
/// in place instead of being copied out of here and again into the caller's frame: two
/// `memcpy` calls per packet, about 80 instructions with the moves around them (callgrind,
/// ib_send_lat).
#[inline(always)]
pub(crate) fn check_packet<'a>(c: &mut Counters, d: &Datagram<'a>) -> Option<Parsed<'a>> {
    c.rcvd_pkts += 1;
    let p = match wire::parse(d.payload) {
        Ok(p) => p,
        Err(wire::WireError::UnknownOpcode(_) | wire::WireError::Unsupported(_) | wire::WireError::BadTver(_)) => {
            c.opcode_errors += 1;
            return None;
        }
        Err(_) => {
            c.length_errors += 1;
            return None;
        }
    };
    // The ICRC as the driver knew the covered fields: all of them (a mismatch drops), or
    // IPv4 without the ID (a mismatch is accepted and counted).
    let (icrc, every_field_known) = match d.icrc {
        IcrcCheck::Full(ip) => (wire::icrc::icrc(&ip, d.src_port, ROCEV2_PORT, p.icrc_covered(d.payload)), true),
        IcrcCheck::V4NoId { src, dst } => {
            let ip = IpFields::v4_df(src.into(), dst.into());
            (wire::icrc::icrc(&ip, d.src_port, ROCEV2_PORT, p.icrc_covered(d.payload)), false)
        }
        IcrcCheck::Hashed { icrc, id_known } => (icrc, id_known),
    };
    if icrc != p.icrc {
        if every_field_known {
            c.icrc_errors += 1;
            return None;
        }
        c.icrc_unverified += 1;
    }
    // One partition (P_Key table = [0xFFFF]): full or limited membership of it matches.
    if p.headers.bth.pkey & 0x7FFF != 0x7FFF {
        c.pkey_violations += 1;
        return None;
    }
    Some(p)
}

/// Whether the addressed QP takes this packet: its transport matches the QP type and a
/// connected QP's peer sent it. Counted when not.
pub(crate) fn check_qp(c: &mut Counters, q: &Qp, d: &Datagram<'_>, p: &Parsed<'_>) -> bool {
    let ok_transport = match (p.info.transport, q.ty) {
        (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud) => true,
        // XRC: requests go to targets, responses to initiators.
        (Transport::Xrc, QpType::XrcRecv) => p.info.request,
        (Transport::Xrc, QpType::XrcSend) => !p.info.request,
        _ => false,
    };
    if !ok_transport {
        c.opcode_errors += 1;
        return false;
    }
    if q.ty != QpType::Ud && q.dest.is_some_and(|a| a != d.src) {
        c.unknown_qp += 1;
        return false;
    }
    true
}
