//! From a captured frame to the RoCE packet inside it: the link layer (Ethernet with VLAN tags,
//! Linux cooked SLL/SLL2, raw IP, BSD loopback), IPv4/IPv6 and UDP (via etherparse's lax
//! slicing, so a frame the capture cut short still yields its headers), the encapsulations a
//! capture point adds (VXLAN on UDP 4789, GRE transparent Ethernet bridging, ERSPAN types I, II
//! and III), and RoCEv1 (ethertype 0x8915: GRH + BTH, no IP/UDP).

use etherparse::{IpNumber, LaxIpSlice};
use pcap_file::DataLink;

use super::capture::{fold, ones_complement_sum, Decoded, Frame, UdpChecksum, UdpDatagram};

/// Ethertype of RoCEv1 (IBTA Annex A16).
pub const ETHERTYPE_ROCEV1: u16 = 0x8915;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
/// GRE protocol types: transparent Ethernet bridging, ERSPAN types I/II, ERSPAN type III.
const GRE_TEB: u16 = 0x6558;
const GRE_ERSPAN_II: u16 = 0x88BE;
const GRE_ERSPAN_III: u16 = 0x22EB;
/// VXLAN's IANA port.
pub const VXLAN_PORT: u16 = 4789;
/// GRH length and its next-header value for a BTH (IBTA §8.3).
const GRH_LEN: usize = 40;
const GRH_NEXT_BTH: u8 = 0x1B;
/// Tunnels inside tunnels deeper than this are not opened (a crafted capture could nest
/// without end).
const MAX_DEPTH: usize = 4;

/// Peels link and IP/UDP headers (and any encapsulation) from a frame.
pub fn decode(frame: &Frame) -> Decoded<'_> {
    decode_link(frame.link, &frame.data, 0, None)
}

fn decode_link<'a>(link: DataLink, d: &'a [u8], depth: usize, encap: Option<&'static str>) -> Decoded<'a> {
    let (et, rest) = match link {
        DataLink::ETHERNET => match ethernet(d) {
            Some(x) => x,
            None => return Decoded::Malformed(format!("truncated: Ethernet header incomplete ({} bytes)", d.len())),
        },
        DataLink::LINUX_SLL => {
            if d.len() < 16 {
                return Decoded::Malformed("truncated: Linux SLL header incomplete".into());
            }
            (u16::from_be_bytes([d[14], d[15]]), &d[16..])
        }
        DataLink::LINUX_SLL2 => {
            if d.len() < 20 {
                return Decoded::Malformed("truncated: Linux SLL2 header incomplete".into());
            }
            (u16::from_be_bytes([d[0], d[1]]), &d[20..])
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => (ip_ethertype(d), d),
        DataLink::NULL | DataLink::LOOP => {
            if d.len() < 4 {
                return Decoded::Malformed("truncated: loopback header incomplete".into());
            }
            (ip_ethertype(&d[4..]), &d[4..])
        }
        _ => return Decoded::Other,
    };
    decode_ethertype(et, rest, depth, encap)
}

/// Ethertype and payload of an Ethernet II frame, after any 802.1Q / 802.1ad tags.
fn ethernet(d: &[u8]) -> Option<(u16, &[u8])> {
    let mut off = 12;
    loop {
        let et = u16::from_be_bytes([*d.get(off)?, *d.get(off + 1)?]);
        if matches!(et, 0x8100 | 0x88A8 | 0x9100) {
            off += 4;
            continue;
        }
        return Some((et, d.get(off + 2..)?));
    }
}

/// The ethertype for an IP packet of unknown kind, from its version nibble.
fn ip_ethertype(d: &[u8]) -> u16 {
    match d.first().map(|b| b >> 4) {
        Some(6) => ETHERTYPE_IPV6,
        _ => ETHERTYPE_IPV4,
    }
}

fn decode_ethertype<'a>(et: u16, d: &'a [u8], depth: usize, encap: Option<&'static str>) -> Decoded<'a> {
    match et {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => decode_ip(d, depth, encap),
        ETHERTYPE_ROCEV1 => decode_rocev1(d, encap),
        _ => Decoded::Other,
    }
}

/// RoCEv1: a GRH (laid out as an IPv6 header, next header 0x1B) then the IBA transport
/// packet. The GRH's payload length names the packet's end (Ethernet may pad after it).
fn decode_rocev1<'a>(d: &'a [u8], encap: Option<&'static str>) -> Decoded<'a> {
    if d.len() < GRH_LEN {
        return Decoded::Malformed(format!(
            "truncated: RoCEv1 GRH incomplete ({} of {GRH_LEN} bytes captured)",
            d.len()
        ));
    }
    let grh = &d[..GRH_LEN];
    if grh[0] >> 4 != 6 {
        return Decoded::Malformed(format!("RoCEv1 GRH IP version {} (must be 6)", grh[0] >> 4));
    }
    if grh[6] != GRH_NEXT_BTH {
        return Decoded::Malformed(format!("RoCEv1 GRH next header {:#04x} (must be 0x1b, BTH)", grh[6]));
    }
    let plen = u16::from_be_bytes([grh[4], grh[5]]) as usize;
    let body = &d[GRH_LEN..];
    let payload = &body[..plen.min(body.len())];
    let gid = |b: &[u8]| {
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        std::net::IpAddr::V6(std::net::Ipv6Addr::from(a))
    };
    Decoded::Udp(UdpDatagram {
        ip_header: grh,
        udp_header: &[],
        payload,
        src: gid(&grh[8..24]),
        dst: gid(&grh[24..40]),
        sport: 0,
        dport: 0,
        ip_checksum_ok: None,
        udp_checksum: UdpChecksum::Zero,
        rocev1: true,
        missing: plen.saturating_sub(body.len()),
        encap,
    })
}

fn decode_ip<'a>(d: &'a [u8], depth: usize, encap: Option<&'static str>) -> Decoded<'a> {
    let ip = match LaxIpSlice::from_slice(d) {
        Ok((ip, _)) => ip,
        Err(e) => return Decoded::Malformed(e.to_string()),
    };
    // Offsets into `d`, so the returned slices borrow the frame, not etherparse's views.
    let offset = |sub: &[u8]| (sub.as_ptr() as usize).wrapping_sub(d.as_ptr() as usize);
    let (ip_off, ip_len, ip_checksum_ok, pseudo) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            (
                offset(h.slice()),
                h.slice().len(),
                Some(ipv4_header_checksum_ok(h.slice())),
                Pseudo::V4(h.source(), h.destination()),
            )
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            // The ICRC covers the IPv6 header and any extension headers before UDP.
            let len = h.slice().len() + v6.extensions().slice().len();
            (offset(h.slice()), len, None, Pseudo::V6(h.source(), h.destination()))
        }
    };
    let pl = ip.payload();
    if pl.fragmented {
        return Decoded::Malformed("fragmented IP packet".into());
    }
    let (src, dst) = (ip.source_addr(), ip.destination_addr());
    let pl_off = offset(pl.payload);
    let Some(ip_payload) = d.get(pl_off..pl_off + pl.payload.len()) else {
        return Decoded::Malformed("inconsistent header offsets".into());
    };
    // Bytes the IP header says follow, beyond the captured ones.
    let ip_missing = match &ip {
        LaxIpSlice::Ipv4(v4) => (v4.header().total_len() as usize).saturating_sub(ip_len + ip_payload.len()),
        LaxIpSlice::Ipv6(v6) => (v6.header().payload_length() as usize).saturating_sub(ip_len - 40 + ip_payload.len()),
    };
    match pl.ip_number {
        IpNumber::UDP => {}
        IpNumber::GRE => return decode_gre(ip_payload, depth, encap),
        _ => return Decoded::Other,
    }
    if ip_payload.len() < 8 {
        return Decoded::Malformed(format!(
            "truncated: UDP header incomplete ({} of 8 bytes captured)",
            ip_payload.len()
        ));
    }
    let Some(ip_header) = d.get(ip_off..ip_off + ip_len) else {
        return Decoded::Malformed("inconsistent header offsets".into());
    };
    let udp_header = &ip_payload[..8];
    let sport = u16::from_be_bytes([udp_header[0], udp_header[1]]);
    let dport = u16::from_be_bytes([udp_header[2], udp_header[3]]);
    let udp_len = u16::from_be_bytes([udp_header[4], udp_header[5]]) as usize;
    let csum = u16::from_be_bytes([udp_header[6], udp_header[7]]);
    if udp_len < 8 {
        return Decoded::Malformed(format!("UDP length {udp_len} is shorter than its header"));
    }
    // The UDP length is the datagram's; IP padding after it is not part of it.
    let present = ip_payload.len().min(udp_len);
    let missing = (udp_len - present).max(ip_missing.min(udp_len - present));
    let payload = &ip_payload[8..present];
    if dport == VXLAN_PORT && depth < MAX_DEPTH && payload.len() >= 8 && payload[0] & 0x08 != 0 {
        return decode_link(DataLink::ETHERNET, &payload[8..], depth + 1, Some("VXLAN"));
    }
    let udp_checksum = match csum {
        0 => UdpChecksum::Zero,
        _ if missing > 0 => UdpChecksum::NotCaptured,
        _ => udp_checksum(&pseudo, &ip_payload[..present], csum),
    };
    Decoded::Udp(UdpDatagram {
        ip_header,
        udp_header,
        payload,
        src,
        dst,
        sport,
        dport,
        ip_checksum_ok,
        udp_checksum,
        rocev1: false,
        missing,
        encap,
    })
}

/// GRE (RFC 2784/2890): transparent Ethernet bridging and the ERSPAN types mirror ports send.
fn decode_gre<'a>(d: &'a [u8], depth: usize, _outer: Option<&'static str>) -> Decoded<'a> {
    if depth >= MAX_DEPTH {
        return Decoded::Other;
    }
    if d.len() < 4 {
        return Decoded::Malformed("truncated: GRE header incomplete".into());
    }
    let (flags, version) = (d[0], d[1] & 7);
    let proto = u16::from_be_bytes([d[2], d[3]]);
    // Routing present (R) or a version other than 0 (1 is PPTP's): not a mirror tunnel.
    if version != 0 || flags & 0x40 != 0 {
        return Decoded::Other;
    }
    let (c, k, s) = (flags & 0x80 != 0, flags & 0x20 != 0, flags & 0x10 != 0);
    let hl = 4 + 4 * (c as usize + k as usize + s as usize);
    let Some(inner) = d.get(hl..) else {
        return Decoded::Malformed("truncated: GRE header incomplete".into());
    };
    let (name, eth) = match proto {
        GRE_TEB => ("GRE", inner),
        // Type I has no sequence number and no ERSPAN header; type II has both.
        GRE_ERSPAN_II if !s => ("ERSPAN I", inner),
        GRE_ERSPAN_II => {
            if inner.len() < 8 || inner[0] >> 4 != 1 {
                return Decoded::Malformed("ERSPAN type II header incomplete or not version 1".into());
            }
            ("ERSPAN II", &inner[8..])
        }
        GRE_ERSPAN_III => {
            if inner.len() < 12 || inner[0] >> 4 != 2 {
                return Decoded::Malformed("ERSPAN type III header incomplete or not version 2".into());
            }
            // O flag: an 8-byte platform-specific subheader follows.
            let hl = if inner[11] & 1 != 0 { 20 } else { 12 };
            match inner.get(hl..) {
                Some(e) => ("ERSPAN III", e),
                None => return Decoded::Malformed("truncated: ERSPAN type III subheader incomplete".into()),
            }
        }
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => return decode_ip(inner, depth + 1, Some("GRE")),
        _ => return Decoded::Other,
    };
    decode_link(DataLink::ETHERNET, eth, depth + 1, Some(name))
}

enum Pseudo {
    V4([u8; 4], [u8; 4]),
    V6([u8; 16], [u8; 16]),
}

pub(crate) fn ipv4_header_checksum_ok(h: &[u8]) -> bool {
    fold(ones_complement_sum(0, h)) == 0xFFFF
}

/// Verifies a nonzero UDP checksum over the pseudo-header and the whole datagram (`udp` =
/// header + payload with the checksum as sent).
fn udp_checksum(p: &Pseudo, udp: &[u8], stored: u16) -> UdpChecksum {
    let len = udp.len() as u32;
    let mut acc = 0u32;
    match p {
        Pseudo::V4(s, d) => {
            acc = ones_complement_sum(acc, s);
            acc = ones_complement_sum(acc, d);
            acc += 17 + len;
        }
        Pseudo::V6(s, d) => {
            acc = ones_complement_sum(acc, s);
            acc = ones_complement_sum(acc, d);
            acc += (len >> 16) + (len & 0xFFFF) + 17;
        }
    }
    let pseudo_only = fold(acc);
    acc = ones_complement_sum(acc, udp);
    if fold(acc) == 0xFFFF {
        UdpChecksum::Ok
    } else if stored == pseudo_only {
        UdpChecksum::OffloadPending
    } else {
        UdpChecksum::Bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_checksum_of_a_known_header() {
        // RFC 1071 style example header with a correct checksum.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xB8, 0x61, 0xC0, 0xA8, 0x00, 0x01, 0xC0, 0xA8,
            0x00, 0xC7,
        ];
        assert!(ipv4_header_checksum_ok(&h));
        let mut bad = h;
        bad[8] = 0x3F;
        assert!(!ipv4_header_checksum_ok(&bad));
    }
}
