//! Congestion Notification Packet (RoCEv2 annex A17.9.3): BTH with opcode 0x81, BECN set,
//! the destination QP of the flow being throttled, then 16 reserved bytes, then the ICRC.
//! urxe recognises and counts CNPs today; congestion reaction builds on this layout.

use super::bth::BthRepr;
use super::opcode::op;
use super::psn::Psn;

/// Reserved bytes after the BTH.
pub const CNP_RESERVED_LEN: usize = 16;

/// The BTH of a CNP for `dest_qp` (PSN 0, BECN set, AckReq clear).
pub fn cnp_bth(dest_qp: u32, pkey: u16) -> BthRepr {
    BthRepr { opcode: op::CNP, becn: true, pkey, dest_qp, psn: Psn::new(0), ..BthRepr::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::opcode::Opcode;

    #[test]
    fn cnp_layout() {
        let b = cnp_bth(0x12, 0xFFFF);
        assert!(b.becn && !b.fecn && !b.ack_req);
        let info = Opcode(b.opcode).info();
        assert_eq!(info.header_len(), 12 + CNP_RESERVED_LEN);
        assert!(!info.payload);
    }
}
