//! What `check` reads from a RoCE packet beyond the wire layer's strict parse: the ICRC of a
//! RoCEv1 packet (GRH variant), a decode "as far as the headers are known" for packets the
//! wire layer refuses (RD opcodes, which ConnectX DC traffic uses; reserved and
//! manufacturer-specific opcodes; packets the capture cut short), and solving a 16-bit header
//! field from the stored ICRC (the IPv4 ID urxe's tap could not see; a UDP source port a
//! capture point rewrote).

use super::capture::UdpDatagram;
use urxe::wire::aeth::{Aeth, AethRepr};
use urxe::wire::atomic_ack_eth::{AtomicAckEth, AtomicAckEthRepr};
use urxe::wire::atomic_eth::{AtomicEth, AtomicEthRepr};
use urxe::wire::bth::{Bth, BthRepr, BTH_LEN};
use urxe::wire::deth::{Deth, DethRepr};
use urxe::wire::icrc::{hash_from_bth, icrc_from_headers, IpHeaderError, ICRC_LEN};
use urxe::wire::ieth::{Ieth, IethRepr};
use urxe::wire::immdt::{ImmDt, ImmDtRepr};
use urxe::wire::opcode::{HeaderSet, Opcode};
use urxe::wire::reth::{Reth, RethRepr};
use urxe::wire::xrceth::{XrcEth, XrcEthRepr};
use urxe::wire::{Headers, Parsed};

/// The ICRC over the packet's variant-masked headers: RoCEv2 (IP + UDP headers, as the wire
/// layer computes it) or RoCEv1 (IBTA Annex A16: the 8 bytes of 1s that stand for the LRH,
/// then the GRH with traffic class, flow label and hop limit set to 1s, then the BTH with
/// its reserved byte 4 set to 1s and the rest of the packet up to the ICRC).
pub fn icrc_of(d: &UdpDatagram<'_>, bth_to_icrc: &[u8]) -> Result<u32, IpHeaderError> {
    if !d.rocev1 {
        return icrc_from_headers(d.ip_header, d.udp_header, bth_to_icrc);
    }
    if d.ip_header.len() < 40 {
        return Err(IpHeaderError::TooShort);
    }
    let mut grh = [0u8; 40];
    grh.copy_from_slice(&d.ip_header[..40]);
    grh[0] |= 0x0F;
    grh[1] = 0xFF;
    grh[2] = 0xFF;
    grh[3] = 0xFF;
    grh[7] = 0xFF;
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xFF; 8]);
    h.update(&grh);
    hash_from_bth(&mut h, bth_to_icrc);
    Ok(h.finalize())
}

/// A packet decoded as far as its headers are known, for what the strict parse refused.
pub struct Lenient<'a> {
    pub parsed: Parsed<'a>,
    /// RDETH's EE context (RD opcodes).
    pub rdeth: Option<u32>,
    /// The extension headers the opcode calls for were all captured.
    pub headers_complete: bool,
}

/// Decodes the BTH and, if the opcode is one IBTA defines and its headers are present, the
/// extension headers. `with_icrc`: the last 4 bytes are the ICRC (false for a packet the
/// capture cut short). `None` only when not even a BTH is there.
pub fn lenient(p: &[u8], with_icrc: bool) -> Option<Lenient<'_>> {
    let bth = BthRepr::parse(&Bth::new_unchecked(p.get(..BTH_LEN)?));
    let info = Opcode(bth.opcode).info();
    let end = if with_icrc { p.len().checked_sub(ICRC_LEN)? } else { p.len() };
    if end < BTH_LEN {
        return None;
    }
    let mut headers = Headers { bth, ..Headers::default() };
    let mut rdeth = None;
    let hl = info.header_len();
    let complete = info.is_known() && end >= hl;
    let header_len = if complete {
        for (set, o) in info.headers.walk() {
            let q = &p[o..];
            match set {
                HeaderSet::RDETH => rdeth = Some(u32::from_be_bytes([0, q[1], q[2], q[3]])),
                HeaderSet::RETH => headers.reth = Some(RethRepr::parse(&Reth::new_unchecked(q))),
                HeaderSet::AETH => headers.aeth = Some(AethRepr::parse(&Aeth::new_unchecked(q))),
                HeaderSet::DETH => headers.deth = Some(DethRepr::parse(&Deth::new_unchecked(q))),
                HeaderSet::XRCETH => headers.xrceth = Some(XrcEthRepr::parse(&XrcEth::new_unchecked(q))),
                HeaderSet::IMMDT => headers.immdt = Some(ImmDtRepr::parse(&ImmDt::new_unchecked(q))),
                HeaderSet::IETH => headers.ieth = Some(IethRepr::parse(&Ieth::new_unchecked(q))),
                HeaderSet::ATOMIC_ETH => headers.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_unchecked(q))),
                HeaderSet::ATOMIC_ACK_ETH => {
                    headers.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(q)))
                }
                _ => {}
            }
        }
        hl
    } else {
        BTH_LEN
    };
    // The pad is only known to be there when the packet ends in the capture.
    let pad = if with_icrc { (bth.pad_cnt as usize).min(end - header_len) } else { 0 };
    let icrc = if with_icrc { urxe::wire::icrc::stored_icrc(p).unwrap_or(0) } else { 0 };
    Some(Lenient {
        parsed: Parsed { headers, info, header_len, payload: &p[header_len..end - pad], icrc, reserved_nonzero: false },
        rdeth,
        headers_complete: complete || (!info.is_known() && end >= BTH_LEN),
    })
}

/// A 16-bit field of the packet's headers that the ICRC covers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Field {
    /// The IPv4 Identification.
    Ipv4Id,
    /// The UDP source port.
    UdpSourcePort,
}

/// The value of `field` that makes the packet's ICRC verify, if one does (and differs from
/// nothing: the caller knows the current value fails). The ICRC is an affine function of the
/// field's 16 bits (CRC-32 is linear over GF(2) for a fixed length), so 17 CRCs and a 32x16
/// elimination find it; a damaged packet has such a value only by a 1 in 65536 chance.
pub fn solve_field(d: &UdpDatagram<'_>, covered: &[u8], stored: u32, field: Field) -> Option<u16> {
    if d.rocev1 {
        return None;
    }
    match field {
        Field::Ipv4Id if d.ip_header.len() < 20 || d.ip_header[0] >> 4 != 4 => return None,
        Field::UdpSourcePort if d.udp_header.len() < 8 => return None,
        _ => {}
    }
    let with = |v: u16| {
        let mut ip = d.ip_header.to_vec();
        let mut udp = d.udp_header.to_vec();
        match field {
            Field::Ipv4Id => ip[4..6].copy_from_slice(&v.to_be_bytes()),
            Field::UdpSourcePort => udp[0..2].copy_from_slice(&v.to_be_bytes()),
        }
        icrc_from_headers(&ip, &udp, covered).ok()
    };
    let base = with(0)?;
    // Echelon basis of the columns: (vector, which bits of the field make it).
    let mut basis: Vec<(u32, u16)> = Vec::with_capacity(16);
    for bit in 0..16 {
        let c = with(1 << bit)?;
        let (mut v, mut m) = (c ^ base, 1u16 << bit);
        for &(bv, bm) in &basis {
            if v & (1 << (31 - bv.leading_zeros())) != 0 {
                v ^= bv;
                m ^= bm;
            }
        }
        if v != 0 {
            basis.push((v, m));
        }
    }
    let (mut t, mut value) = (stored ^ base, 0u16);
    for &(bv, bm) in &basis {
        if t & (1 << (31 - bv.leading_zeros())) != 0 {
            t ^= bv;
            value ^= bm;
        }
    }
    (t == 0 && with(value) == Some(stored)).then_some(value)
}

/// How `check` names an opcode: `RC SEND_ONLY`, `RD SEND_ONLY`, `CNP` (not `CNP CNP`), and
/// `opcode 0xNN` for reserved and manufacturer-specific values.
pub fn op_name(opcode: u8) -> String {
    let i = Opcode(opcode).info();
    if !i.is_known() {
        return format!("opcode {opcode:#04x}");
    }
    if i.transport.name() == i.name {
        i.name.to_string()
    } else {
        format!("{} {}", i.transport.name(), i.name)
    }
}

/// IBTA reserves opcodes 0xC0-0xFF for manufacturer-specific use.
pub fn is_manufacturer_specific(opcode: u8) -> bool {
    opcode >= 0xC0
}
