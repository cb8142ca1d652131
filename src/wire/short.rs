//! The short path's request headers: the BTH and extension headers of a one-packet RC SEND
//! or RDMA WRITE (the four ONLY opcodes, with or without immediate data) written straight
//! into the packet buffer in three or four word stores, byte for byte what
//! [`Headers::emit`](super::Headers::emit) writes for the same values (the tests below check
//! every opcode against it), without a `Headers` to fill or the opcode table to walk.
//!
//! PadCnt is left zero: [`finish_flow`](super::packet::finish_flow) sets it with the ICRC.

use super::bth::DEFAULT_PKEY;
use super::opcode::op;
use super::psn::Psn;

/// Which ONLY request, with the fields its extension headers carry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OnlyRequest {
    /// RC SEND ONLY: the BTH alone.
    Send,
    /// RC SEND ONLY WITH IMMEDIATE: `imm` as [`ImmDtRepr`](super::immdt::ImmDtRepr) holds it.
    SendImm { imm: u32 },
    /// RC RDMA WRITE ONLY: a RETH for `len` bytes at `va` under `rkey`.
    Write { va: u64, rkey: u32, len: u32 },
    /// RC RDMA WRITE ONLY WITH IMMEDIATE: a RETH, then the immediate data.
    WriteImm { va: u64, rkey: u32, len: u32, imm: u32 },
}

impl OnlyRequest {
    /// The opcode and the length of the BTH and extension headers.
    #[inline]
    pub fn opcode_and_len(self) -> (u8, usize) {
        match self {
            OnlyRequest::Send => (op::RC_SEND_ONLY, 12),
            OnlyRequest::SendImm { .. } => (op::RC_SEND_ONLY_WITH_IMMEDIATE, 16),
            OnlyRequest::Write { .. } => (op::RC_RDMA_WRITE_ONLY, 28),
            OnlyRequest::WriteImm { .. } => (op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 32),
        }
    }
}

/// Writes the headers of `req` with AckReq set (the ONLY packet ends its message, and an RC
/// requester asks for an ACK there) at the start of `buf`; returns their length, or `None` if
/// `buf` is too short or `dest_qp` does not fit 24 bits (what `Headers::emit` refuses).
#[inline]
pub fn emit_rc_only(buf: &mut [u8], req: OnlyRequest, solicited: bool, dest_qp: u32, psn: Psn) -> Option<usize> {
    let (opcode, len) = req.opcode_and_len();
    if dest_qp > 0xFF_FFFF || buf.len() < len {
        return None;
    }
    let b = &mut buf[..len];
    let [pk0, pk1] = DEFAULT_PKEY.to_be_bytes();
    // Opcode, SE/M/PadCnt/TVer, P_Key; FECN/BECN/reserved and the destination QP; AckReq,
    // reserved and the PSN.
    b[0..4].copy_from_slice(&[opcode, (solicited as u8) << 7, pk0, pk1]);
    b[4..8].copy_from_slice(&dest_qp.to_be_bytes());
    b[8..12].copy_from_slice(&(0x8000_0000 | psn.value()).to_be_bytes());
    match req {
        OnlyRequest::Send => {}
        OnlyRequest::SendImm { imm } => b[12..16].copy_from_slice(&imm.to_be_bytes()),
        OnlyRequest::Write { va, rkey, len } | OnlyRequest::WriteImm { va, rkey, len, .. } => {
            b[12..20].copy_from_slice(&va.to_be_bytes());
            b[20..24].copy_from_slice(&rkey.to_be_bytes());
            b[24..28].copy_from_slice(&len.to_be_bytes());
            if let OnlyRequest::WriteImm { imm, .. } = req {
                b[28..32].copy_from_slice(&imm.to_be_bytes());
            }
        }
    }
    Some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::bth::BthRepr;
    use crate::wire::immdt::ImmDtRepr;
    use crate::wire::reth::RethRepr;
    use crate::wire::Headers;
    use proptest::prelude::*;

    /// What the general emitter writes for the same request.
    fn general(req: OnlyRequest, solicited: bool, dest_qp: u32, psn: Psn) -> Vec<u8> {
        let (opcode, _) = req.opcode_and_len();
        let mut h = Headers {
            bth: BthRepr { opcode, solicited, dest_qp, psn, ack_req: true, ..BthRepr::default() },
            ..Headers::default()
        };
        match req {
            OnlyRequest::Send => {}
            OnlyRequest::SendImm { imm } => h.immdt = Some(ImmDtRepr { value: imm }),
            OnlyRequest::Write { va, rkey, len } => h.reth = Some(RethRepr { va, rkey, dma_len: len }),
            OnlyRequest::WriteImm { va, rkey, len, imm } => {
                h.reth = Some(RethRepr { va, rkey, dma_len: len });
                h.immdt = Some(ImmDtRepr { value: imm });
            }
        }
        let mut buf = vec![0xA5u8; 64];
        let n = h.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn request(which: u8, va: u64, rkey: u32, len: u32, imm: u32) -> OnlyRequest {
        match which % 4 {
            0 => OnlyRequest::Send,
            1 => OnlyRequest::SendImm { imm },
            2 => OnlyRequest::Write { va, rkey, len },
            _ => OnlyRequest::WriteImm { va, rkey, len, imm },
        }
    }

    proptest! {
        #[test]
        fn writes_what_the_general_emitter_writes(
            which in 0u8..4, solicited in any::<bool>(), dest_qp in 0u32..=0xFF_FFFF, psn in 0u32..=0xFF_FFFF,
            va in any::<u64>(), rkey in any::<u32>(), len in any::<u32>(), imm in any::<u32>(),
        ) {
            let req = request(which, va, rkey, len, imm);
            let psn = Psn::new(psn);
            // Over a dirty buffer: every header byte is written, none left from before.
            let mut buf = vec![0x5Au8; 64];
            let n = emit_rc_only(&mut buf, req, solicited, dest_qp, psn).unwrap();
            prop_assert_eq!(&buf[..n], &general(req, solicited, dest_qp, psn)[..]);
            prop_assert!(buf[n..].iter().all(|&b| b == 0x5A));
        }
    }

    #[test]
    fn refuses_a_short_buffer_and_a_qpn_over_24_bits() {
        let w = OnlyRequest::WriteImm { va: 1, rkey: 2, len: 3, imm: 4 };
        assert_eq!(emit_rc_only(&mut [0u8; 31], w, false, 5, Psn::new(0)), None);
        assert_eq!(emit_rc_only(&mut [0u8; 32], w, false, 5, Psn::new(0)), Some(32));
        assert_eq!(emit_rc_only(&mut [0u8; 64], OnlyRequest::Send, false, 0x100_0000, Psn::new(0)), None);
    }
}
