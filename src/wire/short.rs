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

/// Writes the headers of an RDMA READ response packet (any of the four READ RESPONSE opcodes,
/// RC or XRC: `opcode` as given) at the start of `buf`: the BTH (no SE, AckReq or migration
/// bit), then the AETH `(syndrome byte, MSN)` that FIRST, LAST and ONLY carry and MIDDLE does
/// not; returns their length, or `None` if `buf` is too short or `dest_qp` or the MSN does not
/// fit 24 bits. Byte for byte what [`Headers::emit`](super::Headers::emit) writes (tested
/// below), without a `Headers` to fill.
#[inline]
pub fn emit_read_response(
    buf: &mut [u8],
    opcode: u8,
    dest_qp: u32,
    psn: Psn,
    aeth: Option<(u8, u32)>,
) -> Option<usize> {
    let len = if aeth.is_some() { 16 } else { 12 };
    if dest_qp > 0xFF_FFFF || buf.len() < len || aeth.is_some_and(|(_, msn)| msn > 0xFF_FFFF) {
        return None;
    }
    let b = &mut buf[..len];
    let [pk0, pk1] = DEFAULT_PKEY.to_be_bytes();
    b[0..4].copy_from_slice(&[opcode, 0, pk0, pk1]);
    b[4..8].copy_from_slice(&dest_qp.to_be_bytes());
    b[8..12].copy_from_slice(&psn.value().to_be_bytes());
    if let Some((syndrome, msn)) = aeth {
        b[12..16].copy_from_slice(&(u32::from(syndrome) << 24 | msn).to_be_bytes());
    }
    Some(len)
}

/// A received one-packet RC SEND or RDMA WRITE that passed every check [`parse`](super::parse)
/// makes, read straight from its fixed layout (the short path's receive side).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OnlyIn<'a> {
    pub req: OnlyRequest,
    pub solicited: bool,
    pub ack_req: bool,
    pub pkey: u16,
    pub dest_qp: u32,
    pub psn: Psn,
    /// The payload without pad.
    pub payload: &'a [u8],
    /// The ICRC as stored (not verified: that needs the IP header).
    pub icrc: u32,
}

/// Reads `p` (BTH .. ICRC) if it is an RC SEND ONLY, SEND ONLY WITH IMMEDIATE, RDMA WRITE ONLY
/// or RDMA WRITE ONLY WITH IMMEDIATE that [`parse`](super::parse) accepts, with the same
/// values; `None` for anything else (another opcode, or one of these that `parse` would refuse
/// or read differently), which the general path then parses and judges.
#[inline]
pub fn parse_rc_only(p: &[u8]) -> Option<OnlyIn<'_>> {
    let (&[opcode, flags, pk0, pk1], rest) = p.split_first_chunk::<4>()?;
    // TVer 0, and a whole number of words holding at least the headers and the ICRC.
    let (req_of, hlen): (fn(&[u8]) -> OnlyRequest, usize) = match opcode {
        op::RC_SEND_ONLY => (|_| OnlyRequest::Send, 12),
        op::RC_SEND_ONLY_WITH_IMMEDIATE => (|h| OnlyRequest::SendImm { imm: be32(&h[12..16]) }, 16),
        op::RC_RDMA_WRITE_ONLY => {
            (|h| OnlyRequest::Write { va: be64(&h[12..20]), rkey: be32(&h[20..24]), len: be32(&h[24..28]) }, 28)
        }
        op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => (
            |h| OnlyRequest::WriteImm {
                va: be64(&h[12..20]),
                rkey: be32(&h[20..24]),
                len: be32(&h[24..28]),
                imm: be32(&h[28..32]),
            },
            32,
        ),
        _ => return None,
    };
    if flags & 0x0F != 0 || p.len() < hlen + 4 || !p.len().is_multiple_of(4) {
        return None;
    }
    let body = p.len() - hlen - 4;
    let pad = ((flags >> 4) & 3) as usize;
    if pad > body || body - pad > super::packet::MAX_PAYLOAD {
        return None;
    }
    let w1 = be32(&rest[..4]);
    let w2 = be32(&rest[4..8]);
    Some(OnlyIn {
        req: req_of(p),
        solicited: flags & 0x80 != 0,
        ack_req: w2 & 0x8000_0000 != 0,
        pkey: u16::from_be_bytes([pk0, pk1]),
        dest_qp: w1 & 0xFF_FFFF,
        psn: Psn::new(w2 & 0xFF_FFFF),
        payload: &p[hlen..hlen + body - pad],
        icrc: u32::from_le_bytes(p[p.len() - 4..].try_into().ok()?),
    })
}

#[inline(always)]
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline(always)]
fn be64(b: &[u8]) -> u64 {
    (be32(&b[..4]) as u64) << 32 | be32(&b[4..8]) as u64
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

    proptest! {
        #[test]
        fn writes_the_read_responses_the_general_emitter_writes(
            which in 0u8..4, xrc in any::<bool>(), dest_qp in 0u32..=0xFF_FFFF, psn in 0u32..=0xFF_FFFF,
            code in any::<u8>(), msn in 0u32..=0xFF_FFFF,
        ) {
            use crate::wire::aeth::{AethRepr, Syndrome};
            use crate::wire::opcode::op;
            use crate::wire::Msn;
            let first = [op::RC_RDMA_READ_RESPONSE_FIRST, op::RC_RDMA_READ_RESPONSE_MIDDLE,
                op::RC_RDMA_READ_RESPONSE_LAST, op::RC_RDMA_READ_RESPONSE_ONLY][which as usize];
            let opcode = if xrc { first | 0xA0 } else { first };
            let syndrome = Syndrome::decode(code);
            let aeth = (first != op::RC_RDMA_READ_RESPONSE_MIDDLE).then_some((syndrome.encode(), msn));
            let mut h = Headers {
                bth: BthRepr { opcode, dest_qp, psn: Psn::new(psn), ..BthRepr::default() },
                ..Headers::default()
            };
            h.aeth = aeth.map(|_| AethRepr { syndrome, msn: Msn::new(msn) });
            let mut want = vec![0xA5u8; 64];
            let n = h.emit(&mut want).unwrap();
            let mut buf = vec![0x5Au8; 64];
            let m = emit_read_response(&mut buf, opcode, dest_qp, Psn::new(psn), aeth).unwrap();
            prop_assert_eq!(&buf[..m], &want[..n]);
            prop_assert!(buf[m..].iter().all(|&b| b == 0x5A));
        }
    }

    #[test]
    fn a_read_response_refuses_a_short_buffer_and_fields_over_24_bits() {
        let psn = Psn::new(1);
        assert_eq!(emit_read_response(&mut [0u8; 15], 0x0D, 1, psn, Some((0, 1))), None);
        assert_eq!(emit_read_response(&mut [0u8; 16], 0x0D, 1, psn, Some((0, 1))), Some(16));
        assert_eq!(emit_read_response(&mut [0u8; 12], 0x0E, 1, psn, None), Some(12));
        assert_eq!(emit_read_response(&mut [0u8; 16], 0x0E, 0x100_0000, psn, None), None);
        assert_eq!(emit_read_response(&mut [0u8; 16], 0x0D, 1, psn, Some((0, 0x100_0000))), None);
    }

    /// What the general parser says of `p`, as an [`OnlyIn`] (`None`: refused, or another
    /// opcode).
    fn general_in(p: &[u8]) -> Option<OnlyIn<'_>> {
        let g = crate::wire::parse(p).ok()?;
        let h = g.headers;
        let imm = h.immdt.map(|i| i.value);
        let req = match (h.bth.opcode, h.reth, imm) {
            (op::RC_SEND_ONLY, None, None) => OnlyRequest::Send,
            (op::RC_SEND_ONLY_WITH_IMMEDIATE, None, Some(imm)) => OnlyRequest::SendImm { imm },
            (op::RC_RDMA_WRITE_ONLY, Some(r), None) => OnlyRequest::Write { va: r.va, rkey: r.rkey, len: r.dma_len },
            (op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Some(r), Some(imm)) => {
                OnlyRequest::WriteImm { va: r.va, rkey: r.rkey, len: r.dma_len, imm }
            }
            _ => return None,
        };
        Some(OnlyIn {
            req,
            solicited: h.bth.solicited,
            ack_req: h.bth.ack_req,
            pkey: h.bth.pkey,
            dest_qp: h.bth.dest_qp,
            psn: h.bth.psn,
            payload: g.payload,
            icrc: g.icrc,
        })
    }

    proptest! {
        #[test]
        fn reads_what_the_general_parser_reads(
            which in 0u8..6, flags in any::<u8>(), tidy in 0u8..4, rest in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            // The four ONLY opcodes, plus a SEND FIRST and an ACK (never taken).
            let opcode = [op::RC_SEND_ONLY, op::RC_SEND_ONLY_WITH_IMMEDIATE, op::RC_RDMA_WRITE_ONLY,
                op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, op::RC_SEND_FIRST, op::RC_ACKNOWLEDGE][which as usize];
            // Mostly well-formed (TVer 0, whole words), sometimes not.
            let flags = if tidy > 0 { flags & 0xF0 } else { flags };
            let mut p = vec![opcode, flags];
            p.extend_from_slice(&rest);
            if tidy > 0 {
                p.truncate(p.len() & !3);
            }
            let taken = parse_rc_only(&p);
            prop_assert_eq!(taken, general_in(&p));
        }

        #[test]
        fn takes_nothing_the_general_parser_refuses(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(r) = parse_rc_only(&data) {
                prop_assert_eq!(Some(r), general_in(&data));
            }
        }
    }

    #[test]
    fn reads_a_packet_the_short_emitter_wrote() {
        let mut buf = [0u8; 64];
        let w = OnlyRequest::WriteImm { va: 0x1122_3344_5566_7788, rkey: 0xAABB_CCDD, len: 5, imm: 9 };
        let n = emit_rc_only(&mut buf, w, true, 0x12_3456, Psn::new(0xAB_CDEF)).unwrap();
        buf[n..n + 5].copy_from_slice(b"hello");
        buf[1] |= 3 << 4; // 3 pad bytes, then the ICRC
        let total = n + 8 + 4;
        buf[total - 4..total].copy_from_slice(&0x0102_0304u32.to_le_bytes());
        let r = parse_rc_only(&buf[..total]).unwrap();
        assert_eq!((r.req, r.solicited, r.ack_req, r.dest_qp, r.psn), (w, true, true, 0x12_3456, Psn::new(0xAB_CDEF)));
        assert_eq!((r.payload, r.icrc, r.pkey), (&b"hello"[..], 0x0102_0304, 0xFFFF));
    }

    #[test]
    fn refuses_a_short_buffer_and_a_qpn_over_24_bits() {
        let w = OnlyRequest::WriteImm { va: 1, rkey: 2, len: 3, imm: 4 };
        assert_eq!(emit_rc_only(&mut [0u8; 31], w, false, 5, Psn::new(0)), None);
        assert_eq!(emit_rc_only(&mut [0u8; 32], w, false, 5, Psn::new(0)), Some(32));
        assert_eq!(emit_rc_only(&mut [0u8; 64], OnlyRequest::Send, false, 0x100_0000, Psn::new(0)), None);
    }
}
