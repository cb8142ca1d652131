//! Reading capture files (pcap and pcapng, via the pcap-file crate) and peeling the link layer
//! and IP/UDP headers (via etherparse) down to RoCEv2 UDP payloads.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;

pub use urxe::wire::checksum::{fold, ones_complement_sum, TAP_IP_ID_UNKNOWN};

/// Why a capture could not be read at all (as opposed to a packet failing a check).
#[derive(Debug)]
pub enum CaptureError {
    Io(std::io::Error),
    Empty,
    NotACapture,
    /// The container is broken part-way (e.g. truncated): `frame` (1-based, as Wireshark
    /// counts) is the record that could not be read.
    Corrupt {
        frame: u64,
        why: String,
    },
    UnknownLinkType(String),
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Io(e) => write!(f, "cannot read: {e}"),
            CaptureError::Empty => f.write_str("empty file"),
            CaptureError::NotACapture => f.write_str("not a pcap or pcapng capture"),
            CaptureError::Corrupt { frame, why } => {
                write!(f, "capture is corrupt at frame {frame} ({} frames read before it): {why}", frame - 1)
            }
            CaptureError::UnknownLinkType(l) => {
                write!(f, "unsupported link type {l} (supported: Ethernet, Linux cooked SLL/SLL2, raw IP, loopback)")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// One captured frame.
pub struct Frame {
    /// 1-based frame number in the file.
    pub number: u64,
    pub timestamp: Duration,
    pub link: DataLink,
    /// Bytes on the wire at capture time (may exceed `data.len()` when the snap length cut it).
    pub orig_len: u32,
    pub data: Vec<u8>,
    /// The record says its IPv4 ID is not the one on the wire ([`TAP_IP_ID_UNKNOWN`]).
    pub ip_id_unknown: bool,
}

enum Inner {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// Iterates the frames of one capture file.
pub struct Capture {
    inner: Inner,
    count: u64,
    link: DataLink,
}

const PCAP_MAGICS: [[u8; 4]; 4] =
    [[0xD4, 0xC3, 0xB2, 0xA1], [0xA1, 0xB2, 0xC3, 0xD4], [0x4D, 0x3C, 0xB2, 0xA1], [0xA1, 0xB2, 0x3C, 0x4D]];
const PCAPNG_MAGIC: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];

impl Capture {
    pub fn open(path: &Path) -> Result<Capture, CaptureError> {
        let mut f = File::open(path).map_err(CaptureError::Io)?;
        let mut magic = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match f.read(&mut magic[got..]).map_err(CaptureError::Io)? {
                0 => break,
                n => got += n,
            }
        }
        if got == 0 {
            return Err(CaptureError::Empty);
        }
        if got < 4 {
            return Err(CaptureError::NotACapture);
        }
        let f = File::open(path).map_err(CaptureError::Io)?;
        let r = BufReader::with_capacity(1 << 16, f);
        let corrupt = |e: pcap_file::PcapError| CaptureError::Corrupt { frame: 1, why: e.to_string() };
        if PCAP_MAGICS.contains(&magic) {
            let rd = PcapReader::new(r).map_err(corrupt)?;
            let link = rd.header().datalink;
            check_link(link)?;
            Ok(Capture { inner: Inner::Pcap(rd), count: 0, link })
        } else if magic == PCAPNG_MAGIC {
            let rd = PcapNgReader::new(r).map_err(corrupt)?;
            Ok(Capture { inner: Inner::PcapNg(rd), count: 0, link: DataLink::ETHERNET })
        } else {
            Err(CaptureError::NotACapture)
        }
    }

    /// The next frame, `None` at the end of the file.
    pub fn next_frame(&mut self) -> Option<Result<Frame, CaptureError>> {
        let frame = self.count + 1;
        let corrupt = |e: pcap_file::PcapError| CaptureError::Corrupt { frame, why: e.to_string() };
        loop {
            match &mut self.inner {
                Inner::Pcap(rd) => {
                    // Raw records: pcap-file's checked ones refuse `orig_len > snaplen`, which
                    // every capture written with a snap length has (`tcpdump -s`, `editcap
                    // -s`); Wireshark reads them, and so does this.
                    let nano = rd.header().ts_resolution == pcap_file::TsResolution::NanoSecond;
                    let p = match rd.next_raw_packet()? {
                        Ok(p) => p,
                        Err(e) => return Some(Err(corrupt(e))),
                    };
                    self.count += 1;
                    let ns = if nano { p.ts_frac as u64 } else { p.ts_frac as u64 * 1000 };
                    return Some(Ok(Frame {
                        number: self.count,
                        timestamp: Duration::from_secs(p.ts_sec as u64) + Duration::from_nanos(ns),
                        link: self.link,
                        orig_len: p.orig_len.max(p.incl_len),
                        data: p.data.into_owned(),
                        ip_id_unknown: false,
                    }));
                }
                Inner::PcapNg(rd) => {
                    let block = match rd.next_block()? {
                        Ok(b) => b,
                        Err(e) => return Some(Err(corrupt(e))),
                    };
                    let (iface, ts, orig_len, data, ip_id_unknown) = match block {
                        Block::EnhancedPacket(p) => {
                            let unknown = p.options.iter().any(
                                |o| matches!(o, EnhancedPacketOption::Comment(c) if c.as_ref() == TAP_IP_ID_UNKNOWN),
                            );
                            (p.interface_id, p.timestamp, p.original_len, p.data.into_owned(), unknown)
                        }
                        Block::SimplePacket(p) => (0, Duration::ZERO, p.original_len, p.data.into_owned(), false),
                        Block::Packet(p) => (
                            p.interface_id as u32,
                            Duration::from_nanos(p.timestamp),
                            p.original_len,
                            p.data.into_owned(),
                            false,
                        ),
                        _ => continue,
                    };
                    let link = match rd.interfaces().get(iface as usize) {
                        Some(i) => i.linktype,
                        None => {
                            return Some(Err(CaptureError::Corrupt {
                                frame,
                                why: format!("packet names interface {iface}, which is not described"),
                            }))
                        }
                    };
                    // A pcapng file may mix interfaces of several link types: frames of a type
                    // `check` does not read count as other frames instead of failing the file.
                    self.count += 1;
                    return Some(Ok(Frame { number: self.count, timestamp: ts, link, orig_len, data, ip_id_unknown }));
                }
            }
        }
    }
}

fn check_link(link: DataLink) -> Result<(), CaptureError> {
    match link {
        DataLink::ETHERNET
        | DataLink::LINUX_SLL
        | DataLink::LINUX_SLL2
        | DataLink::RAW
        | DataLink::IPV4
        | DataLink::IPV6
        | DataLink::NULL
        | DataLink::LOOP => Ok(()),
        other => Err(CaptureError::UnknownLinkType(format!("{other:?}"))),
    }
}

/// A UDP datagram found in a frame, with the header bytes the ICRC covers.
pub struct UdpDatagram<'a> {
    /// The IP header exactly as captured (options / extension headers included).
    pub ip_header: &'a [u8],
    /// The 8-byte UDP header.
    pub udp_header: &'a [u8],
    pub payload: &'a [u8],
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub sport: u16,
    pub dport: u16,
    /// IPv4 header checksum verdict (`None` for IPv6).
    pub ip_checksum_ok: Option<bool>,
    pub udp_checksum: UdpChecksum,
    /// RoCEv1 (ethertype 0x8915): `ip_header` is the GRH, `udp_header` is empty and the ports
    /// are 0.
    pub rocev1: bool,
    /// Bytes of the datagram the capture does not hold (its IP or UDP length says more than
    /// was captured): the payload then ends early and carries no ICRC.
    pub missing: usize,
    /// The encapsulation the packet was found in (`VXLAN`, `GRE`, `ERSPAN II`, ...), if any.
    pub encap: Option<&'static str>,
}

pub use super::decode::decode;

/// What a frame holds, from the checker's point of view.
pub enum Decoded<'a> {
    Udp(UdpDatagram<'a>),
    /// Not UDP over IP (ARP, TCP, …): not a RoCEv2 packet.
    Other,
    /// The frame claims more than was captured, or a header is malformed.
    Malformed(String),
}

/// Verdict on a UDP checksum field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UdpChecksum {
    /// 0: not computed (what RoCEv2 senders normally send).
    Zero,
    Ok,
    /// The field holds only the pseudo-header sum: the packet was captured on the sending host
    /// before checksum offload filled it in (tshark: "maybe caused by UDP checksum offload").
    /// The checksum the wire carried cannot be known from the capture.
    OffloadPending,
    Bad,
    /// The capture cut the datagram short: the checksum cannot be verified.
    NotCaptured,
}

/// One packet cut out of a GSO train, with the IP and UDP headers it has on the wire after
/// segmentation (lengths adjusted; everything else as captured).
pub struct GsoSegment {
    pub ip_header: Vec<u8>,
    pub udp_header: Vec<u8>,
    pub start: usize,
    pub len: usize,
}

/// Largest RoCEv2 packet a segment can be: the longest header (RETH + ImmDt after BTH, or
/// AtomicETH), a 4096-byte payload, pad and ICRC.
const MAX_SEGMENT: usize = 12 + 28 + 4096 + 3 + 4;
/// Smallest: a BTH and the ICRC.
const MIN_SEGMENT: usize = 12 + 4;

/// The packet at `start..start + len` of a train, the `index`-th, with its own IP and UDP
/// headers: as the kernel segments an IPv4 train, the `index`-th segment carries the train's
/// IP ID plus `index` (the ICRC covers the ID); `index` 0 keeps the train's ID (urxe before it
/// computed each segment's ICRC for its own ID sent every segment's ICRC for the train's).
fn segment(d: &UdpDatagram<'_>, index: usize, start: usize, len: usize) -> GsoSegment {
    let mut ip = d.ip_header.to_vec();
    let mut udp = d.udp_header.to_vec();
    udp[4..6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    if ip[0] >> 4 == 4 {
        let total = (ip.len() + 8 + len) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(index as u16);
        ip[4..6].copy_from_slice(&id.to_be_bytes());
    } else if ip.len() >= 40 {
        let plen = (ip.len() - 40 + 8 + len) as u16;
        ip[4..6].copy_from_slice(&plen.to_be_bytes());
    }
    GsoSegment { ip_header: ip, udp_header: udp, start, len }
}

/// The train cut into `seg`-byte packets (the last may be shorter), the i-th with IP ID + i·`step`.
fn cut(d: &UdpDatagram<'_>, seg: usize, step: usize) -> Vec<GsoSegment> {
    (0..d.payload.len())
        .step_by(seg)
        .enumerate()
        .map(|(i, s)| segment(d, i * step, s, seg.min(d.payload.len() - s)))
        .collect()
}

/// The packet parses and its stored ICRC matches the one computed over its headers.
fn icrc_confirms(d: &UdpDatagram<'_>, g: &GsoSegment) -> bool {
    let bytes = &d.payload[g.start..g.start + g.len];
    let Ok(p) = urxe::wire::parse(bytes) else { return false };
    urxe::wire::icrc::icrc_from_headers(&g.ip_header, &g.udp_header, p.icrc_covered(bytes)) == Ok(p.icrc)
}

/// A capture taken on the sending host (loopback in particular) shows a UDP GSO send as one
/// datagram holding several RoCEv2 packets of one segment size, the last possibly shorter (urxe
/// sends e.g. a 36-byte SEND and a 20-byte ACK as one train). Nothing in the datagram states
/// the segment size, so every size is tried and the split whose packets all carry a correct
/// ICRC wins (the smallest such size; a smaller wrong split would need a forged ICRC in every
/// piece). A split is made only when every piece's ICRC proves it: a single packet whose own
/// ICRC is bad (a flipped bit) must not be cut into phantom packets that happen to parse.
/// `None` if no split is proven.
pub fn split_gso(d: &UdpDatagram<'_>) -> Option<Vec<GsoSegment>> {
    let p = d.payload;
    let parses = |start: usize, len: usize| urxe::wire::parse(&p[start..(start + len).min(p.len())]).is_ok();
    for seg in MIN_SEGMENT..p.len().min(MAX_SEGMENT + 1) {
        // Cheap filters first: the first two packets must parse before any ICRC is computed.
        if !parses(0, seg) || !parses(seg, seg) {
            continue;
        }
        if !icrc_confirms(d, &segment(d, 0, 0, seg)) {
            continue;
        }
        // The kernel's IDs first (0, 1, 2 … from the train's), then one ID for all.
        for step in [1, 0] {
            let segs = cut(d, seg, step);
            if segs.iter().skip(1).all(|g| icrc_confirms(d, g)) {
                return Some(segs);
            }
        }
    }
    None
}
