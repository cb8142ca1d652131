//! A whole RoCEv2 UDP payload: BTH, extension headers, payload, pad, ICRC.
//!
//! [`parse`] checks a received payload once (lengths, TVer, opcode, headers, pad) and returns
//! plain header values plus a borrowed payload; it never panics and never allocates.
//! [`Headers::emit`] + [`finish`] build a packet in place: the caller writes the payload between
//! them, straight from host memory, so the payload is copied once.

use super::aeth::{Aeth, AethRepr};
use super::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use super::atomic_eth::{AtomicEth, AtomicEthRepr};
use super::bth::{Bth, BthRepr, BTH_LEN};
use super::deth::{Deth, DethRepr};
use super::feth::{Feth, FethRepr};
use super::icrc::{store_icrc, IcrcFlow, IpFields, ICRC_LEN};
use super::ieth::{Ieth, IethRepr};
use super::immdt::{ImmDt, ImmDtRepr};
use super::opcode::{HeaderSet, OpInfo, Opcode, Position};
use super::reth::{Reth, RethRepr};
use super::xrceth::{XrcEth, XrcEthRepr};
use super::WireError;

/// Largest payload of one packet: the largest path MTU (4096).
pub const MAX_PAYLOAD: usize = 4096;
/// Smallest valid UDP payload: BTH + ICRC.
pub const MIN_LEN: usize = BTH_LEN + ICRC_LEN;

/// BTH and the extension headers its opcode calls for.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Headers {
    pub bth: BthRepr,
    pub reth: Option<RethRepr>,
    pub aeth: Option<AethRepr>,
    pub deth: Option<DethRepr>,
    pub immdt: Option<ImmDtRepr>,
    pub ieth: Option<IethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// XRC requests: the XRC SRQ the message is for.
    pub xrceth: Option<XrcEthRepr>,
    /// FLUSH only.
    pub feth: Option<FethRepr>,
}

/// A checked packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Parsed<'a> {
    pub headers: Headers,
    pub info: &'static OpInfo,
    /// BTH + extension headers.
    pub header_len: usize,
    /// Payload without pad.
    pub payload: &'a [u8],
    /// The ICRC as stored in the packet (not verified here: that needs the IP header).
    pub icrc: u32,
    /// Some bit the spec reserves (BTH resv6/resv7, DETH byte 4, pad bytes) is not zero.
    /// Receivers ignore this (IBTA: reserved fields are ignored on receipt); `check` reports it.
    pub reserved_nonzero: bool,
}

impl Parsed<'_> {
    /// The bytes the ICRC covers after the UDP header: `udp_payload[..len - 4]`.
    pub fn icrc_covered<'b>(&self, udp_payload: &'b [u8]) -> &'b [u8] {
        &udp_payload[..udp_payload.len().saturating_sub(ICRC_LEN)]
    }
}

/// Parses and checks one UDP payload (BTH .. ICRC).
pub fn parse(p: &[u8]) -> Result<Parsed<'_>, WireError> {
    if p.len() < MIN_LEN {
        return Err(WireError::Truncated { need: MIN_LEN, have: p.len() });
    }
    let bth_view = Bth::new_unchecked(&p[..BTH_LEN]);
    let bth = BthRepr::parse(&bth_view);
    if bth.tver != 0 {
        return Err(WireError::BadTver(bth.tver));
    }
    let info = Opcode(bth.opcode).info();
    if !info.is_known() {
        return Err(WireError::UnknownOpcode(bth.opcode));
    }
    if !info.supported {
        return Err(WireError::Unsupported(bth.opcode));
    }
    let header_len = info.header_len();
    if p.len() < header_len + ICRC_LEN {
        return Err(WireError::Truncated { need: header_len + ICRC_LEN, have: p.len() });
    }
    if !p.len().is_multiple_of(4) {
        return Err(WireError::NotPadded { len: p.len() });
    }
    let body = p.len() - header_len - ICRC_LEN;
    let pad = bth.pad_cnt as usize;
    if !info.payload && body != 0 {
        return Err(WireError::PayloadNotAllowed { len: body });
    }
    if pad > body {
        return Err(WireError::BadPad { pad: bth.pad_cnt, body });
    }
    // Only the packet that ends a message may be padded (§9.2: PadCnt on LAST/ONLY).
    if pad != 0 && matches!(info.position, Some(Position::First | Position::Middle)) {
        return Err(WireError::BadPad { pad: bth.pad_cnt, body });
    }
    let payload_len = body - pad;
    if payload_len > MAX_PAYLOAD {
        return Err(WireError::PayloadTooLong { len: payload_len });
    }

    let mut headers = Headers { bth, ..Headers::default() };
    let mut reserved_nonzero = bth_view.resv6() != 0 || bth_view.resv7() != 0;
    // One pass over the extension headers the opcode has (none for a SEND or a WRITE MIDDLE).
    for (set, o) in info.headers.walk() {
        let q = &p[o..];
        match set {
            HeaderSet::RETH => headers.reth = Some(RethRepr::parse(&Reth::new_unchecked(q))),
            HeaderSet::AETH => headers.aeth = Some(AethRepr::parse(&Aeth::new_unchecked(q))),
            HeaderSet::DETH => {
                let d = Deth::new_unchecked(q);
                reserved_nonzero |= d.reserved() != 0;
                headers.deth = Some(DethRepr::parse(&d));
            }
            HeaderSet::XRCETH => {
                let x = XrcEth::new_unchecked(q);
                reserved_nonzero |= x.reserved() != 0;
                headers.xrceth = Some(XrcEthRepr::parse(&x));
            }
            HeaderSet::IMMDT => headers.immdt = Some(ImmDtRepr::parse(&ImmDt::new_unchecked(q))),
            HeaderSet::IETH => headers.ieth = Some(IethRepr::parse(&Ieth::new_unchecked(q))),
            HeaderSet::ATOMIC_ETH => headers.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_unchecked(q))),
            HeaderSet::ATOMIC_ACK_ETH => {
                headers.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(q)))
            }
            HeaderSet::FETH => {
                let f = Feth::new_unchecked(q);
                reserved_nonzero |= f.reserved() != 0;
                headers.feth = Some(FethRepr::parse(&f));
            }
            HeaderSet::CNP_PAD => {
                reserved_nonzero |= q[..super::cnp::CNP_RESERVED_LEN].iter().any(|&b| b != 0);
            }
            // RDETH: the opcodes that carry it (RD) are not supported, so were refused above.
            _ => {}
        }
    }
    let payload = &p[header_len..header_len + payload_len];
    reserved_nonzero |= p[header_len + payload_len..header_len + body].iter().any(|&b| b != 0);
    let icrc = super::icrc::stored_icrc(p).unwrap_or(0);
    Ok(Parsed { headers, info, header_len, payload, icrc, reserved_nonzero })
}

impl Headers {
    /// BTH + extension headers of this opcode.
    pub fn header_len(&self) -> usize {
        Opcode(self.bth.opcode).info().header_len()
    }

    /// Writes the BTH and the extension headers the opcode calls for at the start of `buf`;
    /// returns their length. Headers present but not called for are ignored; a header called
    /// for but absent is an error, as is an opcode urxe does not emit.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let info = Opcode(self.bth.opcode).info();
        if !info.is_known() {
            return Err(WireError::UnknownOpcode(self.bth.opcode));
        }
        if !info.supported {
            return Err(WireError::Unsupported(self.bth.opcode));
        }
        let len = info.header_len();
        if buf.len() < len {
            return Err(WireError::Truncated { need: len, have: buf.len() });
        }
        self.bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]))?;
        fn need<T: Copy>(v: Option<T>, name: &'static str) -> Result<T, WireError> {
            v.ok_or(WireError::MissingHeader(name))
        }
        // One pass over the extension headers the opcode has, as `parse` does (none for a SEND
        // or an ACK's BTH alone; asking each of the ten kinds for its offset cost about 60
        // instructions per packet).
        for (set, o) in info.headers.walk() {
            let q = &mut buf[o..];
            match set {
                HeaderSet::RETH => need(self.reth, "RETH")?.emit(&mut Reth::new_unchecked(q)),
                HeaderSet::AETH => need(self.aeth, "AETH")?.emit(&mut Aeth::new_unchecked(q)),
                HeaderSet::DETH => need(self.deth, "DETH")?.emit(&mut Deth::new_unchecked(q)),
                HeaderSet::XRCETH => need(self.xrceth, "XRCETH")?.emit(&mut XrcEth::new_unchecked(q)),
                HeaderSet::IMMDT => need(self.immdt, "ImmDt")?.emit(&mut ImmDt::new_unchecked(q)),
                HeaderSet::IETH => need(self.ieth, "IETH")?.emit(&mut Ieth::new_unchecked(q)),
                HeaderSet::ATOMIC_ETH => need(self.atomic_eth, "AtomicETH")?.emit(&mut AtomicEth::new_unchecked(q)),
                HeaderSet::ATOMIC_ACK_ETH => {
                    need(self.atomic_ack_eth, "AtomicAckETH")?.emit(&mut AtomicAckEth::new_unchecked(q))
                }
                HeaderSet::FETH => need(self.feth, "FETH")?.emit(&mut Feth::new_unchecked(q)),
                HeaderSet::CNP_PAD => q[..super::cnp::CNP_RESERVED_LEN].fill(0),
                // RDETH: its opcodes (RD) are not supported, so were refused above.
                _ => {}
            }
        }
        Ok(len)
    }
}

/// Bytes of an AETH.
const AETH_LEN: usize = 4;

/// Writes the headers of a packet that is a BTH and an AETH alone (ACKNOWLEDGE, RC or XRC) at
/// the start of `buf`, as [`Headers::emit`] does for them, without a [`Headers`] to fill:
/// a responder sends one per message in a ping-pong, and filling and walking a whole
/// `Headers` cost about 165 instructions more per ACK (callgrind, ib_send_lat).
#[inline]
pub fn emit_ack(bth: &BthRepr, aeth: &AethRepr, buf: &mut [u8]) -> Result<usize, WireError> {
    let info = Opcode(bth.opcode).info();
    if info.headers != HeaderSet::AETH || info.payload || !info.supported {
        return Err(WireError::Unsupported(bth.opcode));
    }
    let len = BTH_LEN + AETH_LEN;
    if buf.len() < len {
        return Err(WireError::Truncated { need: len, have: buf.len() });
    }
    bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]))?;
    aeth.emit(&mut Aeth::new_unchecked(&mut buf[BTH_LEN..len]));
    Ok(len)
}

/// Pad bytes needed after `payload_len` bytes of payload.
pub const fn pad_for(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

/// Completes a packet whose headers (`header_len` bytes) and payload (`payload_len` bytes) are
/// already in `buf`: sets PadCnt, writes zero pad bytes and the ICRC for the given IP/UDP
/// fields. Returns the total UDP payload length.
pub fn finish(
    buf: &mut [u8],
    header_len: usize,
    payload_len: usize,
    ip: &IpFields,
    udp_sport: u16,
    udp_dport: u16,
) -> Result<usize, WireError> {
    finish_flow(buf, header_len, payload_len, &IcrcFlow::new(ip, udp_sport, udp_dport))
}

/// [`finish`] for a packet of a flow whose ICRC prefix is already hashed (see [`IcrcFlow`]).
#[inline]
pub fn finish_flow(buf: &mut [u8], header_len: usize, payload_len: usize, flow: &IcrcFlow) -> Result<usize, WireError> {
    let pad = pad_for(payload_len);
    let total = header_len + payload_len + pad + ICRC_LEN;
    if buf.len() < total || header_len < BTH_LEN {
        return Err(WireError::Truncated { need: total.max(BTH_LEN + ICRC_LEN), have: buf.len() });
    }
    Bth::new_unchecked(&mut buf[..BTH_LEN]).set_pad_cnt(pad as u8);
    let covered = header_len + payload_len + pad;
    // At most three bytes; most packets have none (a call to memset each cost about 15
    // instructions).
    if pad > 0 {
        buf[header_len + payload_len..covered].fill(0);
    }
    let crc = flow.icrc_in_place(&mut buf[..covered]);
    store_icrc(&mut buf[..total], crc);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::aeth::{CreditCode, Syndrome};
    use crate::wire::icrc::icrc;
    use crate::wire::opcode::{op, OPCODES};
    use crate::wire::psn::{Msn, Psn};
    use proptest::prelude::*;

    fn ip() -> IpFields {
        IpFields::v4_df("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
    }

    fn build(h: &Headers, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 64 + payload.len() + 8];
        let hl = h.emit(&mut buf).unwrap();
        buf[hl..hl + payload.len()].copy_from_slice(payload);
        let n = finish(&mut buf, hl, payload.len(), &ip(), 0xC001, 4791).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn send_only_roundtrip_with_pad() {
        let h = Headers {
            bth: BthRepr {
                opcode: op::RC_SEND_ONLY,
                dest_qp: 0x11,
                ack_req: true,
                psn: Psn::new(7),
                ..Default::default()
            },
            ..Default::default()
        };
        let pkt = build(&h, b"hello");
        assert_eq!(pkt.len(), 12 + 5 + 3 + 4);
        let p = parse(&pkt).unwrap();
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.headers.bth.pad_cnt, 3);
        assert!(!p.reserved_nonzero);
        let crc = icrc(&ip(), 0xC001, 4791, p.icrc_covered(&pkt));
        assert_eq!(crc, p.icrc);
    }

    /// `emit_ack` writes what `Headers::emit` writes for RC and XRC ACKs of every syndrome
    /// class, and refuses any other opcode (an ATOMIC ACK, a READ response, which has an AETH
    /// and payload, a SEND) and a buffer too short.
    #[test]
    fn emit_ack_writes_what_emit_writes_and_refuses_other_opcodes() {
        let syndromes = [
            Syndrome::Ack { credits: CreditCode::UNLIMITED },
            Syndrome::Ack { credits: CreditCode::new(3) },
            Syndrome::RnrNak { timer: crate::wire::aeth::RnrTimer::new(14) },
            Syndrome::Nak(crate::wire::aeth::NakCode::PsnSequenceError),
            Syndrome::Nak(crate::wire::aeth::NakCode::RemoteAccessError),
        ];
        for opcode in [op::RC_ACKNOWLEDGE, 0xA0 | op::RC_ACKNOWLEDGE] {
            for (i, &syndrome) in syndromes.iter().enumerate() {
                let bth =
                    BthRepr { opcode, dest_qp: 0xAB_CDEF, psn: Psn::new(0xFF_FFF0 + i as u32), ..Default::default() };
                let aeth = AethRepr { syndrome, msn: Msn::new(0x12_3456) };
                let mut want = [0x55u8; 24];
                let h = Headers { bth, aeth: Some(aeth), ..Default::default() };
                assert_eq!(h.emit(&mut want), Ok(16));
                let mut got = [0x55u8; 24];
                assert_eq!(emit_ack(&bth, &aeth, &mut got), Ok(16));
                assert_eq!(got, want, "{opcode:#x} {syndrome:?}");
                assert_eq!(emit_ack(&bth, &aeth, &mut got[..15]), Err(WireError::Truncated { need: 16, have: 15 }));
            }
        }
        let aeth = AethRepr { syndrome: syndromes[0], msn: Msn::new(1) };
        for opcode in [op::RC_ATOMIC_ACKNOWLEDGE, op::RC_RDMA_READ_RESPONSE_ONLY, op::RC_SEND_ONLY] {
            let bth = BthRepr { opcode, ..Default::default() };
            assert_eq!(emit_ack(&bth, &aeth, &mut [0u8; 64]), Err(WireError::Unsupported(opcode)));
        }
    }

    #[test]
    fn ack_and_atomic_ack_roundtrip() {
        let aeth = AethRepr { syndrome: Syndrome::Ack { credits: CreditCode::UNLIMITED }, msn: Msn::new(3) };
        let h = Headers {
            bth: BthRepr { opcode: op::RC_ATOMIC_ACKNOWLEDGE, dest_qp: 5, ..Default::default() },
            aeth: Some(aeth),
            atomic_ack_eth: Some(AtomicAckEthRepr { orig: 42 }),
            ..Default::default()
        };
        let pkt = build(&h, &[]);
        let p = parse(&pkt).unwrap();
        let mut want = h;
        want.bth.pad_cnt = 0;
        assert_eq!(p.headers, want);
        assert_eq!(pkt.len(), 12 + 4 + 8 + 4);
    }

    #[test]
    fn emit_refuses_missing_headers_and_unsupported_opcodes() {
        let mut buf = [0u8; 64];
        let h = Headers { bth: BthRepr { opcode: op::RC_RDMA_WRITE_ONLY, ..Default::default() }, ..Default::default() };
        assert_eq!(h.emit(&mut buf), Err(WireError::MissingHeader("RETH")));
        let h = Headers { bth: BthRepr { opcode: 0x44, ..Default::default() }, ..Default::default() };
        assert_eq!(h.emit(&mut buf), Err(WireError::Unsupported(0x44)));
        let h = Headers { bth: BthRepr { opcode: 0x1F, ..Default::default() }, ..Default::default() };
        assert_eq!(h.emit(&mut buf), Err(WireError::UnknownOpcode(0x1F)));
        let h = Headers { bth: BthRepr { opcode: op::RC_SEND_ONLY, ..Default::default() }, ..Default::default() };
        assert_eq!(h.emit(&mut buf[..11]), Err(WireError::Truncated { need: 12, have: 11 }));
    }

    #[test]
    fn parse_rejects_malformed_packets() {
        let h = Headers { bth: BthRepr { opcode: op::RC_SEND_ONLY, ..Default::default() }, ..Default::default() };
        let good = build(&h, &[1, 2, 3, 4]);
        assert!(parse(&good).is_ok());
        assert!(matches!(parse(&good[..15]), Err(WireError::Truncated { .. })));
        let mut bad = good.clone();
        bad[1] |= 0x01; // TVer 1
        assert_eq!(parse(&bad), Err(WireError::BadTver(1)));
        let mut bad = good.clone();
        bad[0] = 0x1F;
        assert_eq!(parse(&bad), Err(WireError::UnknownOpcode(0x1F)));
        let mut bad = good.clone();
        bad[0] = 0x44;
        assert_eq!(parse(&bad), Err(WireError::Unsupported(0x44)));
        let mut bad = build(&h, &[0; 8]);
        bad[0] = op::RC_ACKNOWLEDGE; // 16 bytes of headers, 4 of ICRC, 4 of "payload"
        assert_eq!(parse(&bad), Err(WireError::PayloadNotAllowed { len: 4 }));
        let mut bad = good.clone();
        bad[0] = op::RC_SEND_FIRST;
        bad[1] |= 0x10; // pad 1 on a FIRST
        assert!(matches!(parse(&bad), Err(WireError::BadPad { .. })));
        assert_eq!(parse(&good[..good.len() - 1]), Err(WireError::NotPadded { len: 19 }));
        let mut big = vec![0u8; 12 + 4100 + 4];
        big[0] = op::RC_SEND_ONLY;
        assert_eq!(parse(&big), Err(WireError::PayloadTooLong { len: 4100 }));
    }

    fn headers_for(opcode: u8, seed: u64) -> Headers {
        let s = seed;
        Headers {
            bth: BthRepr {
                opcode,
                solicited: s & 1 != 0,
                mig_req: s & 2 != 0,
                pad_cnt: 0,
                tver: 0,
                pkey: (s >> 8) as u16,
                fecn: s & 4 != 0,
                becn: s & 8 != 0,
                dest_qp: (s >> 16) as u32 & 0xFF_FFFF,
                ack_req: s & 16 != 0,
                psn: Psn::new((s >> 40) as u32),
            },
            reth: Some(RethRepr { va: s.rotate_left(7), rkey: s as u32, dma_len: (s >> 32) as u32 }),
            aeth: Some(AethRepr { syndrome: Syndrome::decode(s as u8 & 0x7F), msn: Msn::new(s as u32) }),
            deth: Some(DethRepr { qkey: (s >> 3) as u32, src_qp: (s >> 11) as u32 & 0xFF_FFFF }),
            immdt: Some(ImmDtRepr { value: (s >> 5) as u32 }),
            ieth: Some(IethRepr { rkey: (s >> 9) as u32 }),
            atomic_eth: Some(AtomicEthRepr { va: s, rkey: 1, swap_add: !s, compare: s ^ 0x55 }),
            atomic_ack_eth: Some(AtomicAckEthRepr { orig: s.wrapping_mul(3) }),
            xrceth: Some(XrcEthRepr { srqn: (s >> 13) as u32 & 0xFF_FFFF }),
            feth: Some(FethRepr { placement: (s >> 13) as u8 & 0xF, level: (s >> 17) as u8 & 0x3 }),
        }
    }

    /// Keeps only the headers the opcode carries, as parse returns them.
    fn only_present(mut h: Headers) -> Headers {
        let set = Opcode(h.bth.opcode).info().headers;
        if !set.contains(HeaderSet::RETH) {
            h.reth = None;
        }
        if !set.contains(HeaderSet::AETH) {
            h.aeth = None;
        }
        if !set.contains(HeaderSet::DETH) {
            h.deth = None;
        }
        if !set.contains(HeaderSet::IMMDT) {
            h.immdt = None;
        }
        if !set.contains(HeaderSet::IETH) {
            h.ieth = None;
        }
        if !set.contains(HeaderSet::ATOMIC_ETH) {
            h.atomic_eth = None;
        }
        if !set.contains(HeaderSet::ATOMIC_ACK_ETH) {
            h.atomic_ack_eth = None;
        }
        if !set.contains(HeaderSet::XRCETH) {
            h.xrceth = None;
        }
        if !set.contains(HeaderSet::FETH) {
            h.feth = None;
        }
        h
    }

    /// RC FLUSH (IBTA 1.5 §9.2, opcode 0x1C): BTH, FETH, RETH, no payload. Bytes written
    /// out by hand from the layout: a global-visibility flush of a 4 KiB range.
    #[test]
    fn golden_flush_request_bytes() {
        let h = Headers {
            bth: BthRepr {
                opcode: op::RC_FLUSH,
                dest_qp: 0x11,
                ack_req: true,
                psn: Psn::new(0x12_3456),
                ..Default::default()
            },
            feth: Some(FethRepr {
                placement: crate::wire::feth::PLACEMENT_GLOBAL,
                level: crate::wire::feth::LEVEL_RANGE,
            }),
            reth: Some(RethRepr { va: 0x0000_7F00_DEAD_B000, rkey: 0x0001_2345, dma_len: 0x1000 }),
            ..Default::default()
        };
        let mut buf = [0u8; 64];
        let hl = h.emit(&mut buf).unwrap();
        #[rustfmt::skip]
        let want: [u8; 32] = [
            // BTH: opcode, SE/M/pad/TVer, P_Key (default 0xFFFF), resv8 + DestQP, AckReq + PSN
            0x1C, 0x00, 0xFF, 0xFF,  0x00, 0x00, 0x00, 0x11,  0x80, 0x12, 0x34, 0x56,
            // FETH: 26 reserved bits, selectivity level (bits 5..4) 0, placement type 1
            0x00, 0x00, 0x00, 0x01,
            // RETH: VA, R_Key, DMA length
            0x00, 0x00, 0x7F, 0x00, 0xDE, 0xAD, 0xB0, 0x00,  0x00, 0x01, 0x23, 0x45,  0x00, 0x00, 0x10, 0x00,
        ];
        assert_eq!(&buf[..hl], &want[..]);
        let pkt = build(&h, &[]);
        assert_eq!(&pkt[..32], &want[..]);
        let p = parse(&pkt).unwrap();
        assert_eq!(p.headers.feth, h.feth);
        assert_eq!(p.headers.reth, h.reth);
        assert!(p.payload.is_empty() && !p.reserved_nonzero);
        // A FETH reserved bit is reported, not refused.
        let mut odd = pkt.clone();
        odd[12] = 0x40;
        assert!(parse(&odd).unwrap().reserved_nonzero);
        // FLUSH carries no payload.
        let mut bad = build(&h, &[0; 4]);
        bad[1] &= !0x30;
        assert_eq!(parse(&bad), Err(WireError::PayloadNotAllowed { len: 4 }));
        assert_eq!(Headers { feth: None, ..h }.emit(&mut buf), Err(WireError::MissingHeader("FETH")));
    }

    /// RC ATOMIC WRITE (IBTA 1.5 §9.2, opcode 0x1D): BTH, RETH (DMA length 8), 8 bytes of
    /// payload written as one unit; the RDMA READ RESPONSE ONLY that acknowledges it and a
    /// FLUSH carries AETH and no payload.
    #[test]
    fn golden_atomic_write_and_its_response_bytes() {
        let h = Headers {
            bth: BthRepr {
                opcode: op::RC_ATOMIC_WRITE,
                dest_qp: 0x12,
                ack_req: true,
                psn: Psn::new(7),
                ..Default::default()
            },
            reth: Some(RethRepr { va: 0x1000, rkey: 0xAB, dma_len: 8 }),
            ..Default::default()
        };
        let value = [1, 2, 3, 4, 5, 6, 7, 8];
        let pkt = build(&h, &value);
        #[rustfmt::skip]
        let want: [u8; 36] = [
            0x1D, 0x00, 0xFF, 0xFF,  0x00, 0x00, 0x00, 0x12,  0x80, 0x00, 0x00, 0x07,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00,  0x00, 0x00, 0x00, 0xAB,  0x00, 0x00, 0x00, 0x08,
            1, 2, 3, 4, 5, 6, 7, 8,
        ];
        assert_eq!(&pkt[..36], &want[..]);
        assert_eq!(pkt.len(), 36 + ICRC_LEN, "8 bytes need no pad");
        let p = parse(&pkt).unwrap();
        assert_eq!(p.payload, &value[..]);
        assert_eq!(p.headers.reth, h.reth);
        let r = Headers {
            bth: BthRepr {
                opcode: op::RC_RDMA_READ_RESPONSE_ONLY,
                dest_qp: 0x11,
                psn: Psn::new(7),
                ..Default::default()
            },
            aeth: Some(AethRepr {
                syndrome: Syndrome::Ack { credits: crate::wire::aeth::CreditCode::UNLIMITED },
                msn: Msn::new(3),
            }),
            ..Default::default()
        };
        let pkt = build(&r, &[]);
        #[rustfmt::skip]
        let want: [u8; 16] = [
            0x10, 0x00, 0xFF, 0xFF,  0x00, 0x00, 0x00, 0x11,  0x00, 0x00, 0x00, 0x07,
            0x1F, 0x00, 0x00, 0x03,
        ];
        assert_eq!(&pkt[..16], &want[..]);
        assert_eq!(pkt.len(), 16 + ICRC_LEN);
        assert!(parse(&pkt).unwrap().payload.is_empty());
    }

    proptest! {
        #[test]
        fn emit_then_parse_gives_the_same_repr(
            opcode in proptest::sample::select(
                (0..=255u8).filter(|&o| OPCODES[o as usize].supported).collect::<Vec<_>>()),
            seed in any::<u64>(),
            len in 0usize..=MAX_PAYLOAD,
        ) {
            let info = &OPCODES[opcode as usize];
            let len = if info.payload { len } else { 0 };
            let len = match info.position {
                // FIRST/MIDDLE carry whole MTUs: no pad allowed.
                Some(Position::First | Position::Middle) => len & !3,
                _ => len,
            };
            let h = headers_for(opcode, seed);
            let payload: Vec<u8> = (0..len).map(|i| (i as u64 ^ seed) as u8).collect();
            let pkt = build(&h, &payload);
            let p = parse(&pkt).unwrap();
            let mut want = only_present(h);
            want.bth.pad_cnt = pad_for(len) as u8;
            prop_assert_eq!(p.headers, want);
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!(icrc(&ip(), 0xC001, 4791, p.icrc_covered(&pkt)), p.icrc);
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse(&data);
        }

        #[test]
        fn parse_never_panics_on_valid_opcode_prefixes(opcode in any::<u8>(), flags in any::<u8>(), rest in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut d = vec![opcode, flags & 0xF0];
            d.extend_from_slice(&rest);
            if let Ok(p) = parse(&d) {
                prop_assert!(p.header_len + p.payload.len() + ICRC_LEN <= d.len());
            }
        }
    }
}
