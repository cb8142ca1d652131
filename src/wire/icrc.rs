//! The RoCEv2 Invariant CRC (IBTA Vol 1 §7.8.1, C7-47..48; RoCEv2 annex A17.3.3).
//!
//! CRC-32 (the zlib one) over, in order: 8 bytes of 0xFF standing in for the LRH; the IP header
//! with the variant fields (IPv4 TOS, TTL, header checksum; IPv6 traffic class, flow label, hop
//! limit) set to all ones; the UDP header with its checksum set to 0xFFFF; the BTH with byte 4
//! (FECN/BECN/resv) set to 0xFF; everything after the BTH up to the ICRC. Stored little-endian.
//! The IPv4 Identification and flags are covered, which is why a sender must know its IP ID.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Bytes of ICRC at the end of every packet.
pub const ICRC_LEN: usize = 4;
/// UDP destination port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;
/// IPv4 "don't fragment" in the flags/fragment-offset word.
pub const IPV4_DF: u16 = 0x4000;

const IPV4_HDR_LEN: usize = 20;
const IPV6_HDR_LEN: usize = 40;
const UDP_HDR_LEN: usize = 8;
const BTH_LEN: usize = 12;

/// The IP header fields the ICRC covers. TTL/TOS/checksum and their IPv6 counterparts are masked,
/// so they are not here.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum IpFields {
    V4 {
        src: [u8; 4],
        dst: [u8; 4],
        /// IPv4 Identification.
        id: u16,
        /// Flags and fragment offset (`IPV4_DF` for what urxe and rxe send).
        flags_frag: u16,
    },
    V6 {
        src: [u8; 16],
        dst: [u8; 16],
    },
}

impl IpFields {
    /// IPv4 as urxe's sockets send it: ID 0, DF set.
    pub fn v4_df(src: Ipv4Addr, dst: Ipv4Addr) -> IpFields {
        IpFields::V4 { src: src.octets(), dst: dst.octets(), id: 0, flags_frag: IPV4_DF }
    }

    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> IpFields {
        IpFields::V6 { src: src.octets(), dst: dst.octets() }
    }

    /// The same fields with source and destination swapped (for replies in tests).
    pub fn reversed(self) -> IpFields {
        match self {
            IpFields::V4 { src, dst, id, flags_frag } => IpFields::V4 { src: dst, dst: src, id, flags_frag },
            IpFields::V6 { src, dst } => IpFields::V6 { src: dst, dst: src },
        }
    }
}

/// ICRC of a packet whose UDP payload (BTH up to, not including, the ICRC) is `bth_to_icrc`,
/// carried in IP/UDP headers with the given covered fields and ports. The lengths in the
/// pseudo-headers are derived from `bth_to_icrc.len()`.
pub fn icrc(ip: &IpFields, udp_sport: u16, udp_dport: u16, bth_to_icrc: &[u8]) -> u32 {
    let udp_len = (UDP_HDR_LEN + bth_to_icrc.len() + ICRC_LEN) as u16;
    // The masked prefix (LRH stand-in, IP, UDP, BTH) is assembled in one buffer and hashed in
    // one call: crc32fast's vector path only pays off on longer inputs, and small packets are
    // mostly prefix.
    let mut pre = [0xFFu8; PREFIX6_LEN + BTH_LEN];
    let n = write_prefix(&mut pre, ip, udp_sport, udp_dport, Some(udp_len));
    let mut h = hasher();
    if bth_to_icrc.len() >= BTH_LEN {
        pre[n..n + BTH_LEN].copy_from_slice(&bth_to_icrc[..BTH_LEN]);
        pre[n + 4] = 0xFF;
        h.update(&pre[..n + BTH_LEN]);
        h.update(&bth_to_icrc[BTH_LEN..]);
    } else {
        h.update(&pre[..n]);
        h.update(bth_to_icrc);
    }
    h.finalize()
}

/// Writes the masked pseudo-header before the BTH (LRH stand-in, IP header, UDP header) at the
/// start of `pre`, which is all ones (the masked fields stay so); returns its length. The IP
/// and UDP length fields say a UDP length of `udp_len`, or are zero with `None` (see
/// [`IcrcFlow`]).
#[inline(always)]
fn write_prefix(
    pre: &mut [u8; PREFIX6_LEN + BTH_LEN],
    ip: &IpFields,
    udp_sport: u16,
    udp_dport: u16,
    udp_len: Option<u16>,
) -> usize {
    let mut n = 8;
    let udp = udp_len.unwrap_or(0);
    match ip {
        IpFields::V4 { src, dst, id, flags_frag } => {
            let total = udp_len.map_or(0, |l| (IPV4_HDR_LEN as u16).wrapping_add(l));
            let h = &mut pre[n..n + IPV4_HDR_LEN];
            h[0] = 0x45;
            // h[1] TOS, h[8] TTL, h[10..12] checksum stay masked (0xFF).
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&id.to_be_bytes());
            h[6..8].copy_from_slice(&flags_frag.to_be_bytes());
            h[9] = 17;
            h[12..16].copy_from_slice(src);
            h[16..20].copy_from_slice(dst);
            n += IPV4_HDR_LEN;
        }
        IpFields::V6 { src, dst } => {
            let h = &mut pre[n..n + IPV6_HDR_LEN];
            // version 6; traffic class, flow label and hop limit stay masked (0xFF).
            h[0] = 0x6F;
            h[4..6].copy_from_slice(&udp.to_be_bytes());
            h[6] = 17;
            h[8..24].copy_from_slice(src);
            h[24..40].copy_from_slice(dst);
            n += IPV6_HDR_LEN;
        }
    }
    let u = &mut pre[n..n + UDP_HDR_LEN];
    u[0..2].copy_from_slice(&udp_sport.to_be_bytes());
    u[2..4].copy_from_slice(&udp_dport.to_be_bytes());
    u[4..6].copy_from_slice(&udp.to_be_bytes());
    // u[6..8] checksum stays masked (0xFF).
    n + UDP_HDR_LEN
}

/// Length of the masked prefix before the BTH: the LRH stand-in, the IPv4 header, the UDP header.
const PREFIX4_LEN: usize = 8 + IPV4_HDR_LEN + UDP_HDR_LEN;
/// The same with an IPv6 header.
const PREFIX6_LEN: usize = 8 + IPV6_HDR_LEN + UDP_HDR_LEN;

/// The ICRC of the packets of one flow: the covered IP fields and the UDP ports, everything in
/// the pseudo-packet before the BTH except its two length fields, hashed once.
///
/// A CRC is affine in its input: for inputs of one length, `crc(a ^ b) = crc(a) ^ crc(b) ^
/// crc(0)`. So the prefix's CRC with its length fields set is the CRC with them zero (hashed
/// here, once) XOR each length byte's own contribution, which depends only on its value and
/// its distance from the prefix's end ([`LEN4`], [`LEN6`], built at compile time). Per packet
/// that is four table lookups (IPv4; two for IPv6, whose two lengths are equal) instead of
/// assembling and hashing 36 (56) bytes.
///
/// Used where a packet's buffer is writable ([`IcrcFlow::icrc_in_place`]): by the engine for
/// the packets it builds (a 64-byte SEND's requester side went from 1985 to 1942 engine
/// instructions, bench/instructions.sh) and by the UDP transport for those it receives, whose
/// value it hands the engine (`IcrcCheck::Hashed`). The engine's own datagrams are read-only,
/// and hashing a BTH copy apart from the rest cost more than the prefix saved, so a datagram
/// without a value is checked with [`icrc`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IcrcFlow {
    v6: bool,
    /// CRC value (as crc32fast returns it) of the prefix with both length fields zero.
    base: u32,
}

impl IcrcFlow {
    pub fn new(ip: &IpFields, udp_sport: u16, udp_dport: u16) -> IcrcFlow {
        // The length fields are zero here (see `prefix`).
        let mut pre = [0xFFu8; PREFIX6_LEN + BTH_LEN];
        let n = write_prefix(&mut pre, ip, udp_sport, udp_dport, None);
        let mut h = hasher();
        h.update(&pre[..n]);
        IcrcFlow { v6: matches!(ip, IpFields::V6 { .. }), base: h.finalize() }
    }

    /// The CRC value of the prefix of a packet with `body` bytes from the BTH to the ICRC.
    #[inline]
    fn prefix(&self, body: usize) -> u32 {
        let udp_len = (UDP_HDR_LEN + body + ICRC_LEN) as u16;
        let [uh, ul] = udp_len.to_be_bytes();
        if self.v6 {
            self.base ^ LEN6[0][uh as usize] ^ LEN6[1][ul as usize]
        } else {
            let [th, tl] = (IPV4_HDR_LEN as u16).wrapping_add(udp_len).to_be_bytes();
            self.base ^ LEN4[0][th as usize] ^ LEN4[1][tl as usize] ^ LEN4[2][uh as usize] ^ LEN4[3][ul as usize]
        }
    }

    /// The ICRC of this flow's packet whose UDP payload up to the ICRC is `bth_to_icrc` (as
    /// [`icrc`]), hashed in one pass: the BTH's first five bytes are masked and seeded in place
    /// and restored after, so `bth_to_icrc` is as it was on return.
    ///
    /// Continuing a CRC from the value `prefix` is hashing from the start (value 0) with
    /// `prefix` XORed into the next four bytes (little-endian): both leave the same register
    /// after those bytes. So the packet is hashed with one call of a hasher cloned from one
    /// made once (see `hasher`): a crc32fast call on a 16-byte block costs about 40
    /// instructions, and it hashes a block shorter than 16 bytes byte by byte (a 12-byte BTH
    /// alone, 49), so a BTH hashed on its own would cost more than the prefix saves.
    #[inline]
    pub fn icrc_in_place(&self, bth_to_icrc: &mut [u8]) -> u32 {
        let prefix = self.prefix(bth_to_icrc.len());
        if bth_to_icrc.len() < BTH_LEN {
            // Shorter than a BTH (never a valid packet): hashed from the prefix's value.
            let mut h = crc32fast::Hasher::new_with_initial(prefix);
            h.update(bth_to_icrc);
            return h.finalize();
        }
        let mut saved = [0u8; 5];
        saved.copy_from_slice(&bth_to_icrc[..5]);
        let p = prefix.to_le_bytes();
        for i in 0..4 {
            bth_to_icrc[i] ^= p[i];
        }
        bth_to_icrc[4] = 0xFF;
        let mut h = hasher();
        h.update(bth_to_icrc);
        bth_to_icrc[..5].copy_from_slice(&saved);
        h.finalize()
    }
}

/// A few [`IcrcFlow`]s by their IP fields and ports, so that a flow's prefix is hashed once
/// while it stays in its slot (direct-mapped by the source port, which is per QP; a miss costs
/// what hashing the prefix every time did, plus a compare).
#[derive(Clone, Debug, Default)]
pub struct IcrcFlows {
    slots: [Option<(IpFields, u16, u16, IcrcFlow)>; FLOW_SLOTS],
}

const FLOW_SLOTS: usize = 8;

impl IcrcFlows {
    /// The flow of these fields and ports, hashed now if it is not held.
    #[inline]
    pub fn get(&mut self, ip: &IpFields, udp_sport: u16, udp_dport: u16) -> IcrcFlow {
        let s = &mut self.slots[(udp_sport ^ (udp_sport >> 8)) as usize % FLOW_SLOTS];
        if let Some((i, sp, dp, f)) = s {
            if *sp == udp_sport && *dp == udp_dport && i == ip {
                return *f;
            }
        }
        let f = IcrcFlow::new(ip, udp_sport, udp_dport);
        *s = Some((*ip, udp_sport, udp_dport, f));
        f
    }
}

/// CRC-32 (reflected) polynomial.
const POLY: u32 = 0xEDB8_8320;

/// The register after hashing byte `v` then `zeros` zero bytes, from register 0: the linear part
/// of byte `v`'s contribution to a CRC value when `zeros` bytes follow it.
const fn contribution(v: u8, zeros: usize) -> u32 {
    let mut r = v as u32;
    let mut i = 0;
    while i < 8 * (1 + zeros) {
        r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
        i += 1;
    }
    r
}

/// For each byte value, the XOR of its contributions at the given distances from the prefix's
/// end (a byte's contribution is linear in its bits: XOR of its set bits' contributions).
const fn length_table(zeros: [usize; 2], places: usize) -> [u32; 256] {
    let mut bit = [0u32; 8];
    let mut b = 0;
    while b < 8 {
        let mut k = 0;
        while k < places {
            bit[b] ^= contribution(1 << b, zeros[k]);
            k += 1;
        }
        b += 1;
    }
    let mut t = [0u32; 256];
    let mut v = 0;
    while v < 256 {
        let mut b = 0;
        while b < 8 {
            if v & (1 << b) != 0 {
                t[v] ^= bit[b];
            }
            b += 1;
        }
        v += 1;
    }
    t
}

/// Bytes after a prefix byte at offset `at`.
const fn after(prefix_len: usize, at: usize) -> usize {
    prefix_len - 1 - at
}

/// IPv4: the total length (high, low byte: prefix offsets 10, 11) and the UDP length (32, 33).
static LEN4: [[u32; 256]; 4] = [
    length_table([after(PREFIX4_LEN, 10), 0], 1),
    length_table([after(PREFIX4_LEN, 11), 0], 1),
    length_table([after(PREFIX4_LEN, 32), 0], 1),
    length_table([after(PREFIX4_LEN, 33), 0], 1),
];

/// IPv6: the payload length (offsets 12, 13) and the UDP length (52, 53), which are equal, so
/// one table per byte covers both places.
static LEN6: [[u32; 256]; 2] = [
    length_table([after(PREFIX6_LEN, 12), after(PREFIX6_LEN, 52)], 2),
    length_table([after(PREFIX6_LEN, 13), after(PREFIX6_LEN, 53)], 2),
];

/// A fresh CRC-32 hasher. `crc32fast::Hasher::new` detects the CPU's features at every call
/// (about 40 instructions, 2 % of a 64-byte SEND's engine cost on each side); a clone of one
/// made once does not.
fn hasher() -> crc32fast::Hasher {
    static PROTO: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTO.get_or_init(crc32fast::Hasher::new).clone()
}

/// Feeds BTH (with byte 4 masked) and the rest, after the variant's masked headers (RoCEv2's
/// IP and UDP, RoCEv1's LRH stand-in and GRH). A too-short buffer is hashed as it is: the
/// result then simply will not match, which is the right verdict for a truncated packet.
pub fn hash_from_bth(h: &mut crc32fast::Hasher, bth_to_icrc: &[u8]) {
    if bth_to_icrc.len() >= BTH_LEN {
        let mut bth = [0u8; BTH_LEN];
        bth.copy_from_slice(&bth_to_icrc[..BTH_LEN]);
        bth[4] = 0xFF;
        h.update(&bth);
        h.update(&bth_to_icrc[BTH_LEN..]);
    } else {
        h.update(bth_to_icrc);
    }
}

/// Error from [`icrc_from_headers`]: the IP header bytes are not a usable IPv4/IPv6 header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IpHeaderError {
    TooShort,
    BadVersion(u8),
}

impl std::fmt::Display for IpHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpHeaderError::TooShort => f.write_str("IP header too short"),
            IpHeaderError::BadVersion(v) => write!(f, "IP version {v} is neither 4 nor 6"),
        }
    }
}

impl std::error::Error for IpHeaderError {}

/// ICRC over the header bytes exactly as captured (IPv4 options included, lengths as they are),
/// with the variant fields masked. `udp_header` is the 8-byte UDP header; `bth_to_icrc` as in
/// [`icrc`]. Used by the capture verifier, where the captured lengths are the truth.
pub fn icrc_from_headers(ip_header: &[u8], udp_header: &[u8], bth_to_icrc: &[u8]) -> Result<u32, IpHeaderError> {
    if ip_header.is_empty() || udp_header.len() < UDP_HDR_LEN {
        return Err(IpHeaderError::TooShort);
    }
    let mut h = hasher();
    h.update(&[0xFF; 8]);
    match ip_header[0] >> 4 {
        4 => {
            if ip_header.len() < IPV4_HDR_LEN {
                return Err(IpHeaderError::TooShort);
            }
            let mut fixed = [0u8; IPV4_HDR_LEN];
            fixed.copy_from_slice(&ip_header[..IPV4_HDR_LEN]);
            fixed[1] = 0xFF;
            fixed[8] = 0xFF;
            fixed[10] = 0xFF;
            fixed[11] = 0xFF;
            h.update(&fixed);
            h.update(&ip_header[IPV4_HDR_LEN..]);
        }
        6 => {
            if ip_header.len() < IPV6_HDR_LEN {
                return Err(IpHeaderError::TooShort);
            }
            let mut fixed = [0u8; IPV6_HDR_LEN];
            fixed.copy_from_slice(&ip_header[..IPV6_HDR_LEN]);
            fixed[0] |= 0x0F;
            fixed[1] = 0xFF;
            fixed[2] = 0xFF;
            fixed[3] = 0xFF;
            fixed[7] = 0xFF;
            h.update(&fixed);
            h.update(&ip_header[IPV6_HDR_LEN..]);
        }
        v => return Err(IpHeaderError::BadVersion(v)),
    }
    let mut udp = [0u8; UDP_HDR_LEN];
    udp.copy_from_slice(&udp_header[..UDP_HDR_LEN]);
    udp[6] = 0xFF;
    udp[7] = 0xFF;
    h.update(&udp);
    hash_from_bth(&mut h, bth_to_icrc);
    Ok(h.finalize())
}

/// Reads the ICRC stored at the end of a UDP payload (little-endian).
pub fn stored_icrc(udp_payload: &[u8]) -> Option<u32> {
    let n = udp_payload.len();
    if n < ICRC_LEN {
        return None;
    }
    let b = &udp_payload[n - ICRC_LEN..];
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Writes `value` as the ICRC of a packet whose ICRC occupies the last 4 bytes of `udp_payload`.
pub fn store_icrc(udp_payload: &mut [u8], value: u32) {
    let n = udp_payload.len();
    udp_payload[n - ICRC_LEN..].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
pub(crate) mod reference {
    //! Slow bitwise CRC-32 (reflected 0xEDB88320, init and final XOR 0xFFFFFFFF), used to check
    //! the table-driven crc32fast path and the masking.
    pub fn crc32_bitwise(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                let lsb = crc & 1;
                crc >>= 1;
                if lsb != 0 {
                    crc ^= 0xEDB8_8320;
                }
            }
        }
        !crc
    }
}

#[cfg(test)]
mod tests {
    use super::reference::crc32_bitwise;
    use super::*;

    /// A captured rxe UD SEND ONLY (host_ud.pcap frame 2): IPv4 10.77.0.2 -> 10.77.0.1,
    /// sport 57236. Bytes from the IP header on.
    fn rxe_ud_frame() -> Vec<u8> {
        let pcap = include_bytes!("../../tests/captures/host_ud.pcap");
        // classic pcap: 24-byte global header, 16-byte record header per packet
        let mut off = 24;
        let mut frames = Vec::new();
        while off + 16 <= pcap.len() {
            let incl = u32::from_le_bytes(pcap[off + 8..off + 12].try_into().unwrap()) as usize;
            frames.push(pcap[off + 16..off + 16 + incl].to_vec());
            off += 16 + incl;
        }
        frames[1][14..].to_vec()
    }

    #[test]
    fn bitwise_reference_matches_crc32fast() {
        for data in [&b""[..], b"a", b"123456789", &[0xFFu8; 77][..]] {
            assert_eq!(crc32_bitwise(data), crc32fast::hash(data));
        }
        assert_eq!(crc32_bitwise(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn captured_rxe_packet_verifies_both_ways() {
        let f = rxe_ud_frame();
        let ihl = ((f[0] & 0x0F) * 4) as usize;
        let (ip, rest) = f.split_at(ihl);
        let (udp, bth_on) = rest.split_at(8);
        let body = &bth_on[..bth_on.len() - ICRC_LEN];
        let stored = stored_icrc(bth_on).unwrap();
        assert_eq!(icrc_from_headers(ip, udp, body).unwrap(), stored);
        let fields = IpFields::V4 {
            src: ip[12..16].try_into().unwrap(),
            dst: ip[16..20].try_into().unwrap(),
            id: u16::from_be_bytes([ip[4], ip[5]]),
            flags_frag: u16::from_be_bytes([ip[6], ip[7]]),
        };
        let sport = u16::from_be_bytes([udp[0], udp[1]]);
        assert_eq!(icrc(&fields, sport, ROCEV2_PORT, body), stored);
    }

    #[test]
    fn masked_fields_do_not_change_icrc_and_covered_ones_do() {
        let f = rxe_ud_frame();
        let (ip, rest) = f.split_at(20);
        let (udp, bth_on) = rest.split_at(8);
        let body = &bth_on[..bth_on.len() - ICRC_LEN];
        let base = icrc_from_headers(ip, udp, body).unwrap();
        for masked in [1usize, 8, 10, 11] {
            let mut ip2 = ip.to_vec();
            ip2[masked] ^= 0x5A;
            assert_eq!(icrc_from_headers(&ip2, udp, body).unwrap(), base, "IPv4 byte {masked} is masked");
        }
        let mut udp2 = udp.to_vec();
        udp2[6] ^= 0x12;
        assert_eq!(icrc_from_headers(ip, &udp2, body).unwrap(), base, "UDP checksum is masked");
        let mut body2 = body.to_vec();
        body2[4] ^= 0xC0;
        assert_eq!(icrc_from_headers(ip, udp, &body2).unwrap(), base, "BTH FECN/BECN byte is masked");
        for covered in [0usize, 2, 4, 5, 6, 9, 12, 19] {
            let mut ip2 = ip.to_vec();
            ip2[covered] ^= 0x01;
            assert_ne!(icrc_from_headers(&ip2, udp, body).unwrap(), base, "IPv4 byte {covered} is covered");
        }
        for covered in 0..body.len() {
            if covered == 4 {
                continue;
            }
            let mut b2 = body.to_vec();
            b2[covered] ^= 0x80;
            assert_ne!(icrc_from_headers(ip, udp, &b2).unwrap(), base, "byte {covered} after UDP is covered");
        }
    }

    #[test]
    fn icrc_equals_bitwise_crc_over_explicit_pseudo_packet_v6() {
        let ip = IpFields::v6("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        let body: Vec<u8> = (0u8..40).collect();
        let buf = pseudo_packet(&ip, 0xC001, &body);
        assert_eq!(icrc(&ip, 0xC001, ROCEV2_PORT, &body), crc32_bitwise(&buf));
    }

    /// The masked pseudo-packet of `icrc`'s inputs, written out byte by byte.
    fn pseudo_packet(ip: &IpFields, sport: u16, body: &[u8]) -> Vec<u8> {
        pseudo_packet_ports(ip, sport, ROCEV2_PORT, body)
    }

    /// The same with any destination port.
    fn pseudo_packet_ports(ip: &IpFields, sport: u16, dport: u16, body: &[u8]) -> Vec<u8> {
        let udp_len = (8 + body.len() + 4) as u16;
        let mut buf = vec![0xFFu8; 8];
        match ip {
            IpFields::V4 { src, dst, id, flags_frag } => {
                buf.extend_from_slice(&[0x45, 0xFF]);
                buf.extend_from_slice(&(20 + udp_len).to_be_bytes());
                buf.extend_from_slice(&id.to_be_bytes());
                buf.extend_from_slice(&flags_frag.to_be_bytes());
                buf.extend_from_slice(&[0xFF, 17, 0xFF, 0xFF]);
                buf.extend_from_slice(src);
                buf.extend_from_slice(dst);
            }
            IpFields::V6 { src, dst } => {
                buf.extend_from_slice(&[0x6F, 0xFF, 0xFF, 0xFF]);
                buf.extend_from_slice(&udp_len.to_be_bytes());
                buf.extend_from_slice(&[17, 0xFF]);
                buf.extend_from_slice(src);
                buf.extend_from_slice(dst);
            }
        }
        buf.extend_from_slice(&sport.to_be_bytes());
        buf.extend_from_slice(&dport.to_be_bytes());
        buf.extend_from_slice(&udp_len.to_be_bytes());
        buf.extend_from_slice(&[0xFF, 0xFF]);
        // A body shorter than a BTH is hashed as it is (it cannot verify anyway).
        let mut masked = body.to_vec();
        if masked.len() >= BTH_LEN {
            masked[4] = 0xFF;
        }
        buf.extend_from_slice(&masked);
        buf
    }

    /// Every length after the UDP header from 0 to 200 bytes (shorter than a BTH, a BTH with a
    /// short rest, rests across crc32fast's 16-, 64- and 128-byte paths), IPv4 and IPv6: the
    /// bitwise CRC of the pseudo-packet, by `icrc` and by a flow's precomputed prefix; the
    /// capture verifier's separate path agrees.
    #[test]
    fn every_length_across_the_one_buffer_limit_matches_the_bitwise_crc() {
        let v4 = IpFields::V4 { src: [10, 77, 0, 2], dst: [10, 77, 0, 1], id: 0x1234, flags_frag: IPV4_DF };
        let v6 = IpFields::v6("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        for len in 0..=200usize {
            let body: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
            for ip in [v4, v6] {
                let want = crc32_bitwise(&pseudo_packet(&ip, 0xC123, &body));
                assert_eq!(icrc(&ip, 0xC123, ROCEV2_PORT, &body), want, "{ip:?} body {len}");
                let mut b = body.clone();
                let flow = IcrcFlow::new(&ip, 0xC123, ROCEV2_PORT);
                assert_eq!(flow.icrc_in_place(&mut b), want, "flow {ip:?} body {len}");
                assert_eq!(b, body, "the body is restored");
            }
            let udp_len = (8 + len + 4) as u16;
            let mut ip4 = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 77, 0, 2, 10, 77, 0, 1];
            ip4[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
            let mut udp = [0u8; 8];
            udp[..2].copy_from_slice(&0xC123u16.to_be_bytes());
            udp[2..4].copy_from_slice(&ROCEV2_PORT.to_be_bytes());
            udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
            assert_eq!(
                icrc_from_headers(&ip4, &udp, &body).unwrap(),
                icrc(&v4, 0xC123, ROCEV2_PORT, &body),
                "body {len}"
            );
        }
    }

    /// Lengths whose high bytes are not zero (the length tables' other half): around 256, an
    /// MTU of 1024 and 4096, a jumbo frame, and the largest a UDP length can hold.
    #[test]
    fn long_bodies_match_the_bitwise_crc() {
        let v4 = IpFields::V4 { src: [192, 168, 7, 1], dst: [192, 168, 7, 9], id: 0xBEEF, flags_frag: 0 };
        let v6 = IpFields::v6("2001:db8::5".parse().unwrap(), "2001:db8::6".parse().unwrap());
        let lens = [243usize, 244, 252, 256, 1036, 1040, 4108, 4112, 8972, 65_515, 65_523];
        for len in lens {
            let body: Vec<u8> = (0..len).map(|i| (i as u8) ^ 0xA5).collect();
            for ip in [v4, v6] {
                let want = crc32_bitwise(&pseudo_packet(&ip, 0xD00D, &body));
                assert_eq!(icrc(&ip, 0xD00D, ROCEV2_PORT, &body), want, "{ip:?} body {len}");
                let mut b = body.clone();
                let flow = IcrcFlow::new(&ip, 0xD00D, ROCEV2_PORT);
                assert_eq!(flow.icrc_in_place(&mut b), want, "flow {ip:?} body {len}");
                assert_eq!(b, body, "the body is restored");
            }
        }
    }

    /// The flow cache gives what hashing every prefix gives, for flows that share a slot, that
    /// differ only in one field, and that come back after being evicted.
    #[test]
    fn cached_flows_give_the_uncached_icrc() {
        let mut flows = IcrcFlows::default();
        let body: Vec<u8> = (0u8..76).collect();
        let v4 = |d: u8, id: u16| IpFields::V4 { src: [10, 0, 0, 1], dst: [10, 0, 0, d], id, flags_frag: IPV4_DF };
        let v6 = |d: u8| {
            let mut dst = [0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            dst[15] = d;
            IpFields::V6 { src: [0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], dst }
        };
        let mut cases = Vec::new();
        for sport in [0xC000u16, 0xC008, 0xC010, 0xC001, 0x0800] {
            for ip in [v4(2, 0), v4(3, 0), v4(2, 7), v6(2), v6(3)] {
                for dport in [ROCEV2_PORT, ROCEV2_PORT + 1] {
                    cases.push((ip, sport, dport));
                }
            }
        }
        // Twice through, in two orders: every case meets both a held and an evicted slot.
        for round in 0..2 {
            for (k, &(ip, sport, dport)) in cases.iter().enumerate() {
                let (ip, sport, dport) = if round == 0 { (ip, sport, dport) } else { cases[cases.len() - 1 - k] };
                let want = crc32_bitwise(&pseudo_packet_ports(&ip, sport, dport, &body));
                let mut b = body.clone();
                assert_eq!(flows.get(&ip, sport, dport).icrc_in_place(&mut b), want, "{ip:?} {sport:#x} {dport}");
                assert_eq!(b, body, "the body is restored");
                let short = &mut b[..40];
                assert_eq!(flows.get(&ip, sport, dport).icrc_in_place(short), icrc(&ip, sport, dport, &body[..40]));
            }
        }
    }

    #[test]
    fn store_and_read_back_little_endian() {
        let mut p = vec![0u8; 16];
        store_icrc(&mut p, 0x1122_3344);
        assert_eq!(&p[12..], &[0x44, 0x33, 0x22, 0x11]);
        assert_eq!(stored_icrc(&p), Some(0x1122_3344));
        assert_eq!(stored_icrc(&p[..3]), None);
    }

    #[test]
    fn header_errors_are_reported() {
        assert_eq!(icrc_from_headers(&[0x45; 10], &[0; 8], &[]), Err(IpHeaderError::TooShort));
        assert_eq!(icrc_from_headers(&[0x55; 20], &[0; 8], &[]), Err(IpHeaderError::BadVersion(5)));
    }
}
