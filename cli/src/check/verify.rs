//! Checks one RoCEv2 packet found in a capture and describes it.

use std::net::IpAddr;

use super::capture::{UdpChecksum, UdpDatagram};
use super::cm::{CmInfo, GsiProblem};
use super::roce::{icrc_of, is_manufacturer_specific, lenient, op_name, solve_field, Field};
use urxe::wire::aeth::{NakCode, Syndrome};
use urxe::wire::icrc::ROCEV2_PORT;
use urxe::wire::opcode::{OpKind, Transport};
use urxe::wire::{parse, Parsed, WireError};

/// A rule a packet broke.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Problem {
    /// The stored ICRC differs from the computed one.
    IcrcMismatch { stored: u32, computed: u32 },
    /// Multicast (IBTA §10.5.2.3, RoCEv2: an IP multicast destination) is UD SENDs to the
    /// multicast QPN 0xFFFFFF, and that QPN is only for multicast.
    Multicast(&'static str),
    /// The packet does not parse as RoCEv2 (lengths, TVer, opcode, pad).
    Wire(WireError),
    /// UDP checksum present and wrong.
    UdpChecksum,
    /// IPv4 header checksum wrong.
    IpChecksum,
    /// Reserved bits or bytes not zero. Receivers ignore reserved fields (IBTA §9.2 and the
    /// general rule for reserved fields), so this is a deviation unless `--strict`.
    ReservedBits,
    /// A manufacturer-specific opcode (0xC0-0xFF): its headers are the vendor's, only the BTH
    /// and the ICRC are checked. A deviation unless `--strict`.
    ManufacturerOpcode(u8),
    /// The capture holds the packet's headers but not its end: the ICRC cannot be checked.
    /// A deviation unless `--strict` (the packet counts as unverified, not as failed).
    Truncated { missing: usize },
    /// QP1 (GSI) only carries UD SENDs.
    NotUdOnQp1,
    /// The IP header does not fit the ICRC computation.
    IpHeader(String),
    /// A GSI (QP1) packet's MAD breaks a rule (Q_Key, length, CM message, rdma_cm header).
    Gsi(GsiProblem),
    /// An ATOMIC WRITE or FLUSH breaks a rule of IBTA 1.5 §9.4.6-9.4.7 (what the responder
    /// NAKs as an invalid request).
    FlushAtomicWrite(&'static str),
}

impl Problem {
    /// A "should" rule or a reserved field, not a "shall": reported and counted, fails only
    /// with `--strict`.
    pub fn is_deviation(&self) -> bool {
        matches!(self, Problem::ReservedBits | Problem::ManufacturerOpcode(_) | Problem::Truncated { .. })
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // In wire byte order, as Wireshark and scapy show the ICRC field.
            Problem::IcrcMismatch { stored, computed } => write!(
                f,
                "ICRC mismatch: stored {:#010x}, computed {:#010x}",
                stored.swap_bytes(),
                computed.swap_bytes()
            ),
            Problem::Multicast(s) => f.write_str(s),
            Problem::Wire(e) => write!(f, "{e}"),
            Problem::UdpChecksum => f.write_str("UDP checksum wrong (RoCEv2 senders use 0 or a correct one)"),
            Problem::IpChecksum => f.write_str("IPv4 header checksum wrong"),
            Problem::ReservedBits => f.write_str("reserved bits set"),
            Problem::ManufacturerOpcode(o) => {
                write!(f, "manufacturer-specific opcode {o:#04x}: headers after the BTH not checked")
            }
            Problem::Truncated { missing } => {
                write!(f, "truncated: {missing} bytes missing (ICRC not captured?)")
            }
            Problem::NotUdOnQp1 => f.write_str("QP1 packet is not a UD SEND"),
            Problem::IpHeader(s) => write!(f, "{s}"),
            Problem::Gsi(g) => write!(f, "{g}"),
            Problem::FlushAtomicWrite(s) => f.write_str(s),
        }
    }
}

/// ICRC verdict of one packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IcrcVerdict {
    Ok,
    Bad,
    /// Not computed: the packet did not parse far enough.
    NotChecked,
}

impl IcrcVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            IcrcVerdict::Ok => "ok",
            IcrcVerdict::Bad => "BAD",
            IcrcVerdict::NotChecked => "n/a",
        }
    }
}

/// Everything `check` knows about one RoCEv2 packet.
#[derive(Clone, Debug)]
pub struct PacketReport<'a> {
    pub frame: u64,
    /// `(i, n)`: packet i of n of a GSO train captured as one frame.
    pub segment: Option<(usize, usize)>,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub parsed: Option<Parsed<'a>>,
    /// Opcode byte even when parsing failed (first payload byte), if any.
    pub opcode: Option<u8>,
    pub udp_len: usize,
    pub icrc: IcrcVerdict,
    pub udp_checksum: UdpChecksum,
    pub problems: Vec<Problem>,
    /// The IPv4 ID was not recorded (urxe's tap, received packet) and the ICRC verified with
    /// this one, solved from the stored ICRC.
    pub recovered_ip_id: Option<u16>,
    /// The CM message a GSI packet carries.
    pub cm: Option<CmInfo>,
    /// Deviations (see [`Problem::is_deviation`]) that do not fail the packet.
    pub deviations: Vec<Problem>,
    /// RoCEv1 (GRH, no IP/UDP): `src`/`dst` are the GIDs, the ports 0.
    pub rocev1: bool,
    /// The encapsulation the capture point wrapped the packet in, if any.
    pub encap: Option<&'static str>,
    /// RDETH's EE context (RD opcodes).
    pub rdeth: Option<u32>,
    /// What may explain a failure (e.g. a rewritten UDP source port).
    pub hint: Option<String>,
}

impl PacketReport<'_> {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Passed, but the ICRC could not be checked (the capture cut the packet short).
    pub fn unverified(&self) -> bool {
        self.ok() && self.icrc != IcrcVerdict::Ok
    }
}

/// Destination QPN of multicast packets.
const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// The multicast rule a packet to `dst` breaks, if any: to a multicast address only UD SENDs
/// to QPN 0xFFFFFF; QPN 0xFFFFFF only at a multicast address.
fn multicast_problem(dst: IpAddr, p: &Parsed<'_>) -> Option<&'static str> {
    let to_group = dst.is_multicast();
    let mcast_qpn = p.headers.bth.dest_qp == MULTICAST_QPN;
    let ud_send = p.info.transport == Transport::Ud && p.info.kind == OpKind::Send;
    match (to_group, mcast_qpn) {
        (true, _) if !ud_send => Some("multicast packet is not a UD SEND"),
        (true, false) => Some("multicast packet's destination QP is not 0xFFFFFF"),
        (false, true) => Some("destination QP 0xFFFFFF (multicast) at a unicast address"),
        _ => None,
    }
}

/// True for a datagram `check` treats as RoCE: UDP to port 4791 (RoCEv2), or RoCEv1.
pub fn is_rocev2(d: &UdpDatagram<'_>) -> bool {
    d.rocev1 || d.dport == ROCEV2_PORT
}

/// Runs every per-packet check. `strict`: the "should" rules and reserved fields (see
/// [`Problem::is_deviation`]) fail the packet instead of being reported as deviations.
pub fn check_packet<'a>(frame: u64, d: &UdpDatagram<'a>, strict: bool) -> PacketReport<'a> {
    let mut problems = Vec::new();
    let payload = d.payload;
    let mut icrc = IcrcVerdict::NotChecked;
    let mut cm = None;
    let mut rdeth = None;
    let verify_icrc = |stored: u32, problems: &mut Vec<Problem>| {
        let covered = &payload[..payload.len().saturating_sub(urxe::wire::icrc::ICRC_LEN)];
        match icrc_of(d, covered) {
            Ok(c) if c == stored => IcrcVerdict::Ok,
            Ok(c) => {
                problems.push(Problem::IcrcMismatch { stored, computed: c });
                IcrcVerdict::Bad
            }
            Err(e) => {
                problems.push(Problem::IpHeader(e.to_string()));
                IcrcVerdict::NotChecked
            }
        }
    };
    let parsed = if d.missing > 0 {
        // Cut short by the capture: no ICRC to check, but the headers still say which flow
        // and PSN the packet is.
        problems.push(Problem::Truncated { missing: d.missing });
        match lenient(payload, false) {
            Some(l) => {
                rdeth = l.rdeth;
                Some(l.parsed)
            }
            None => None,
        }
    } else {
        match parse(payload) {
            Ok(p) => {
                icrc = verify_icrc(p.icrc, &mut problems);
                if p.reserved_nonzero {
                    problems.push(Problem::ReservedBits);
                }
                if let Some(m) = multicast_problem(d.dst, &p) {
                    problems.push(Problem::Multicast(m));
                }
                if p.headers.bth.dest_qp == 1 && p.info.transport != Transport::Ud {
                    problems.push(Problem::NotUdOnQp1);
                } else if p.headers.bth.dest_qp == 1 && p.info.kind == OpKind::Send {
                    let (info, gsi) = super::cm::decode(p.headers.deth.map(|d| d.qkey), p.payload);
                    cm = info;
                    problems.extend(gsi.into_iter().map(Problem::Gsi));
                }
                problems.extend(flush_atomic_write_rules(&p).map(Problem::FlushAtomicWrite));
                Some(p)
            }
            Err(e) => {
                // The ICRC does not depend on the opcode or on the headers after the BTH: it is
                // checked whenever the packet holds a BTH and an ICRC.
                if payload.len() >= urxe::wire::packet::MIN_LEN {
                    let stored = urxe::wire::icrc::stored_icrc(payload).unwrap_or(0);
                    icrc = verify_icrc(stored, &mut problems);
                }
                match e {
                    // RD opcodes (ConnectX DC traffic): defined by IBTA, only not implemented
                    // by urxe; decoded as far as the table knows them.
                    WireError::Unsupported(_) => {}
                    WireError::UnknownOpcode(o) if is_manufacturer_specific(o) => {
                        problems.push(Problem::ManufacturerOpcode(o))
                    }
                    e => problems.push(Problem::Wire(e)),
                }
                let known = matches!(e, WireError::Unsupported(_) | WireError::UnknownOpcode(_));
                match lenient(payload, true).filter(|_| known) {
                    Some(l) => {
                        rdeth = l.rdeth;
                        if !l.headers_complete {
                            problems.push(Problem::Wire(WireError::Truncated {
                                need: l.parsed.info.header_len() + urxe::wire::icrc::ICRC_LEN,
                                have: payload.len(),
                            }));
                        }
                        Some(l.parsed)
                    }
                    None => None,
                }
            }
        }
    };
    if d.udp_checksum == UdpChecksum::Bad {
        problems.push(Problem::UdpChecksum);
    }
    if d.ip_checksum_ok == Some(false) {
        problems.push(Problem::IpChecksum);
    }
    let mut deviations = Vec::new();
    if !strict {
        (deviations, problems) = problems.into_iter().partition(Problem::is_deviation);
    }
    PacketReport {
        frame,
        segment: None,
        src: d.src,
        dst: d.dst,
        sport: d.sport,
        dport: d.dport,
        opcode: payload.first().copied(),
        parsed,
        udp_len: payload.len(),
        icrc,
        udp_checksum: d.udp_checksum,
        problems,
        deviations,
        recovered_ip_id: None,
        cm,
        rocev1: d.rocev1,
        encap: d.encap,
        rdeth,
        hint: None,
    }
}

/// The rule an ATOMIC WRITE or FLUSH request breaks, if any: ATOMIC WRITE carries exactly 8
/// bytes to an 8-byte aligned VA with a RETH DMA length of 8; FLUSH's FETH names a placement
/// type (global visibility and/or persistence, nothing else) and a selectivity level of 0 or
/// 1. (FLUSH payload and FETH reserved bits are the wire layer's and `ReservedBits`.)
fn flush_atomic_write_rules(p: &Parsed<'_>) -> Option<&'static str> {
    match p.info.kind {
        OpKind::AtomicWrite => {
            let r = p.headers.reth?;
            if p.payload.len() != 8 {
                Some("ATOMIC WRITE payload is not 8 bytes")
            } else if r.dma_len != 8 {
                Some("ATOMIC WRITE RETH DMA length is not 8")
            } else if r.va % 8 != 0 {
                Some("ATOMIC WRITE VA is not 8-byte aligned")
            } else {
                None
            }
        }
        OpKind::Flush => {
            let f = p.headers.feth?;
            if f.placement == 0 || f.placement & !3 != 0 {
                Some("FLUSH FETH placement type undefined")
            } else if f.level > 1 {
                Some("FLUSH FETH selectivity level reserved")
            } else {
                None
            }
        }
        _ => None,
    }
}

/// `global`, `persistent`, `global+persistent` (or the raw value) and `range` / `mr`.
fn feth_str(f: urxe::wire::feth::FethRepr) -> String {
    let placement = match f.placement {
        1 => "global".to_string(),
        2 => "persistent".to_string(),
        3 => "global+persistent".to_string(),
        x => format!("{x:#x}"),
    };
    let level = match f.level {
        0 => "range".to_string(),
        1 => "mr".to_string(),
        x => x.to_string(),
    };
    format!("placement={placement} level={level}")
}

/// For a packet recorded without its IPv4 ID (see [`super::capture::TAP_IP_ID_UNKNOWN`]) whose
/// ICRC does not verify with the recorded ID: finds the ID that makes it verify, if one does,
/// and turns the verdict to ok.
pub fn recover_ip_id(d: &UdpDatagram<'_>, r: &mut PacketReport<'_>) {
    let Some(p) = &r.parsed else { return };
    let Some(Problem::IcrcMismatch { stored, .. }) =
        r.problems.iter().find(|p| matches!(p, Problem::IcrcMismatch { .. })).cloned()
    else {
        return;
    };
    if let Some(id) = solve_field(d, p.icrc_covered(d.payload), stored, Field::Ipv4Id) {
        r.problems.retain(|p| !matches!(p, Problem::IcrcMismatch { .. }));
        r.icrc = IcrcVerdict::Ok;
        r.recovered_ip_id = Some(id);
    }
}

/// For a packet whose ICRC fails: if one other UDP source port makes it verify, says so (a
/// capture point that rewrites the source port, e.g. to 4791, breaks every ICRC; the port
/// the sender used is then recoverable). The verdict stays: the packet as captured fails.
pub fn hint_source_port(d: &UdpDatagram<'_>, r: &mut PacketReport<'_>) {
    let Some(Problem::IcrcMismatch { stored, .. }) =
        r.problems.iter().find(|p| matches!(p, Problem::IcrcMismatch { .. })).cloned()
    else {
        return;
    };
    let covered = &d.payload[..d.payload.len().saturating_sub(urxe::wire::icrc::ICRC_LEN)];
    if let Some(port) = solve_field(d, covered, stored, Field::UdpSourcePort).filter(|&p| p != d.sport) {
        r.hint = Some(format!(
            "ICRC verifies with UDP source port {port} instead of {}: the capture point rewrote the source port?",
            d.sport
        ));
    }
}

fn addr(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// Short AETH description, e.g. `ACK`, `RNR_NAK(t=14)`, `NAK(PSN_SEQ_ERR)`.
pub fn syndrome_str(s: Syndrome) -> String {
    match s {
        Syndrome::Ack { .. } => "ACK".into(),
        Syndrome::RnrNak { timer } => format!("RNR_NAK(t={})", timer.code()),
        Syndrome::Nak(c) => format!(
            "NAK({})",
            match c {
                NakCode::PsnSequenceError => "PSN_SEQ_ERR".to_string(),
                NakCode::InvalidRequest => "INV_REQ".to_string(),
                NakCode::RemoteAccessError => "REM_ACCESS_ERR".to_string(),
                NakCode::RemoteOperationalError => "REM_OP_ERR".to_string(),
                NakCode::InvalidRdRequest => "INV_RD_REQ".to_string(),
                NakCode::Reserved(c) => format!("code {c}"),
            }
        ),
        Syndrome::Reserved(b) => format!("RSVD({b:#04x})"),
    }
}

/// One summary line, in the spirit of tshark's.
pub fn summary_line(r: &PacketReport<'_>) -> String {
    let frame = match r.segment {
        Some((i, n)) => format!("{}.{i}/{n}", r.frame),
        None => r.frame.to_string(),
    };
    let (src, dst) = if r.rocev1 {
        (format!("[{}]", r.src), format!("[{}]", r.dst))
    } else {
        (addr(r.src, r.sport), addr(r.dst, r.dport))
    };
    let mut s = format!("{frame} {src} > {dst} ");
    if r.rocev1 {
        s.push_str("RoCEv1 ");
    }
    if let Some(e) = r.encap {
        s.push_str(&format!("via {e} "));
    }
    match &r.parsed {
        Some(p) => {
            let b = &p.headers.bth;
            s.push_str(&format!(
                "{} qp={:#08x} psn={:#08x} len={}",
                op_name(b.opcode),
                b.dest_qp,
                b.psn.value(),
                p.payload.len()
            ));
            if b.ack_req {
                s.push_str(" A");
            }
            if let Some(a) = p.headers.aeth {
                s.push_str(&format!(" {} msn={}", syndrome_str(a.syndrome), a.msn.value()));
            }
            if let Some(x) = p.headers.xrceth {
                s.push_str(&format!(" xrcsrq={:#x}", x.srqn));
            }
            if let Some(x) = r.rdeth {
                s.push_str(&format!(" eecnxt={x:#x}"));
            }
            if let Some(f) = p.headers.feth {
                s.push_str(&format!(" {}", feth_str(f)));
            }
            if let Some(r) = p.headers.reth {
                s.push_str(&format!(" va={:#x} rkey={:#x} dlen={}", r.va, r.rkey, r.dma_len));
            }
            if let Some(d) = p.headers.deth {
                s.push_str(&format!(" qkey={:#x} srcqp={:#x}", d.qkey, d.src_qp));
            }
            if let Some(c) = &r.cm {
                s.push_str(&super::cm::summary(c));
            }
            if let Some(a) = p.headers.atomic_eth {
                s.push_str(&format!(" va={:#x} rkey={:#x}", a.va, a.rkey));
            }
            if let Some(a) = p.headers.atomic_ack_eth {
                s.push_str(&format!(" orig={:#x}", a.orig));
            }
        }
        None => match r.opcode {
            Some(o) => s.push_str(&format!("{} len={}", op_name(o), r.udp_len)),
            None => s.push_str("empty UDP payload"),
        },
    }
    s.push_str(&format!(" icrc={}", r.icrc.as_str()));
    if let Some(id) = r.recovered_ip_id {
        s.push_str(&format!(" ipid={id:#06x}(solved)"));
    }
    match r.udp_checksum {
        UdpChecksum::Zero | UdpChecksum::Bad => {}
        UdpChecksum::NotCaptured => s.push_str(" udpcsum=n/a"),
        UdpChecksum::Ok => s.push_str(" udpcsum=ok"),
        UdpChecksum::OffloadPending => s.push_str(" udpcsum=offload"),
    }
    for p in &r.problems {
        if !matches!(p, Problem::IcrcMismatch { .. }) {
            s.push_str(&format!(" [{p}]"));
        }
    }
    for p in &r.deviations {
        s.push_str(&format!(" [deviation: {p}]"));
    }
    if let Some(h) = &r.hint {
        s.push_str(&format!(" [hint: {h}]"));
    }
    s
}

/// Every field, one per line (`--verbose`).
pub fn verbose_lines(r: &PacketReport<'_>) -> Vec<String> {
    let mut v = vec![summary_line(r)];
    if let Some(p) = &r.parsed {
        let b = &p.headers.bth;
        v.push(format!(
            "    BTH: opcode={:#04x} ({}) se={} m={} pad={} tver={} pkey={:#06x} fecn={} becn={} destqp={:#08x} ackreq={} psn={:#08x}",
            b.opcode,
            op_name(b.opcode),
            b.solicited as u8,
            b.mig_req as u8,
            b.pad_cnt,
            b.tver,
            b.pkey,
            b.fecn as u8,
            b.becn as u8,
            b.dest_qp,
            b.ack_req as u8,
            b.psn.value()
        ));
        let h = &p.headers;
        if let Some(x) = h.xrceth {
            v.push(format!("    XRCETH: xrcsrq={:#08x}", x.srqn));
        }
        if let Some(x) = r.rdeth {
            v.push(format!("    RDETH: eecnxt={x:#08x}"));
        }
        if let Some(x) = h.feth {
            v.push(format!("    FETH: {} ({:#x}/{})", feth_str(x), x.placement, x.level));
        }
        if let Some(x) = h.reth {
            v.push(format!("    RETH: va={:#018x} rkey={:#010x} dmalen={}", x.va, x.rkey, x.dma_len));
        }
        if let Some(x) = h.aeth {
            v.push(format!(
                "    AETH: syndrome={:#04x} ({}) msn={}",
                x.syndrome.encode(),
                syndrome_str(x.syndrome),
                x.msn.value()
            ));
        }
        if let Some(x) = h.deth {
            v.push(format!("    DETH: qkey={:#010x} srcqp={:#08x}", x.qkey, x.src_qp));
        }
        if let Some(x) = h.immdt {
            v.push(format!("    ImmDt: {:#010x}", x.value));
        }
        if let Some(x) = h.ieth {
            v.push(format!("    IETH: rkey={:#010x}", x.rkey));
        }
        if let Some(x) = h.atomic_eth {
            v.push(format!(
                "    AtomicETH: va={:#018x} rkey={:#010x} swap_add={:#x} compare={:#x}",
                x.va, x.rkey, x.swap_add, x.compare
            ));
        }
        if let Some(x) = h.atomic_ack_eth {
            v.push(format!("    AtomicAckETH: orig={:#x}", x.orig));
        }
        if let Some(c) = &r.cm {
            v.push(format!("    {}", super::cm::summary(c).trim_start()));
        }
        v.push(format!(
            "    payload={} pad={} icrc={:#010x} ({})",
            p.payload.len(),
            b.pad_cnt,
            p.icrc.swap_bytes(),
            r.icrc.as_str()
        ));
    }
    for p in &r.problems {
        v.push(format!("    PROBLEM: {p}"));
    }
    for p in &r.deviations {
        v.push(format!("    DEVIATION: {p}"));
    }
    if let Some(h) = &r.hint {
        v.push(format!("    HINT: {h}"));
    }
    v
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// One JSON object (`--json`).
pub fn json_line(r: &PacketReport<'_>) -> String {
    let mut f: Vec<(String, String)> = vec![
        ("frame".into(), r.frame.to_string()),
        ("segment".into(), r.segment.map(|(i, _)| i.to_string()).unwrap_or_else(|| "null".into())),
        ("src".into(), json_str(&r.src.to_string())),
        ("sport".into(), r.sport.to_string()),
        ("dst".into(), json_str(&r.dst.to_string())),
        ("dport".into(), r.dport.to_string()),
        ("ok".into(), r.ok().to_string()),
        ("icrc".into(), json_str(r.icrc.as_str())),
        ("udp_checksum".into(), json_str(&format!("{:?}", r.udp_checksum).to_lowercase())),
    ];
    if let Some(id) = r.recovered_ip_id {
        f.push(("recovered_ip_id".into(), id.to_string()));
    }
    if let Some(p) = &r.parsed {
        let b = &p.headers.bth;
        f.push(("transport".into(), json_str(p.info.transport.name())));
        f.push(("opcode".into(), b.opcode.to_string()));
        f.push(("opcode_name".into(), json_str(p.info.name)));
        f.push(("se".into(), b.solicited.to_string()));
        f.push(("mig_req".into(), b.mig_req.to_string()));
        f.push(("pad".into(), b.pad_cnt.to_string()));
        f.push(("pkey".into(), b.pkey.to_string()));
        f.push(("fecn".into(), b.fecn.to_string()));
        f.push(("becn".into(), b.becn.to_string()));
        f.push(("dest_qp".into(), b.dest_qp.to_string()));
        f.push(("ack_req".into(), b.ack_req.to_string()));
        f.push(("psn".into(), b.psn.value().to_string()));
        f.push(("payload_len".into(), p.payload.len().to_string()));
        // The ICRC field's four bytes read in wire order (as Wireshark and scapy show it).
        f.push(("icrc_value".into(), p.icrc.swap_bytes().to_string()));
        let h = &p.headers;
        if let Some(x) = h.feth {
            f.push(("feth".into(), format!("{{\"placement\":{},\"level\":{}}}", x.placement, x.level)));
        }
        if let Some(x) = h.reth {
            f.push(("reth".into(), format!("{{\"va\":{},\"rkey\":{},\"dma_len\":{}}}", x.va, x.rkey, x.dma_len)));
        }
        if let Some(x) = h.aeth {
            f.push((
                "aeth".into(),
                format!(
                    "{{\"syndrome\":{},\"kind\":{},\"msn\":{}}}",
                    x.syndrome.encode(),
                    json_str(&syndrome_str(x.syndrome)),
                    x.msn.value()
                ),
            ));
        }
        if let Some(x) = h.xrceth {
            f.push(("xrc_srqn".into(), x.srqn.to_string()));
        }
        if let Some(x) = r.rdeth {
            f.push(("rdeth_eecnxt".into(), x.to_string()));
        }
        if let Some(x) = h.deth {
            f.push(("deth".into(), format!("{{\"qkey\":{},\"src_qp\":{}}}", x.qkey, x.src_qp)));
        }
        if let Some(x) = h.immdt {
            f.push(("imm_data".into(), x.value.to_string()));
        }
        if let Some(x) = h.ieth {
            f.push(("ieth_rkey".into(), x.rkey.to_string()));
        }
        if let Some(x) = h.atomic_eth {
            f.push((
                "atomic_eth".into(),
                format!(
                    "{{\"va\":{},\"rkey\":{},\"swap_add\":{},\"compare\":{}}}",
                    x.va, x.rkey, x.swap_add, x.compare
                ),
            ));
        }
        if let Some(x) = h.atomic_ack_eth {
            f.push(("atomic_ack_orig".into(), x.orig.to_string()));
        }
        if let Some(c) = &r.cm {
            f.push(("cm".into(), super::cm::json(c)));
        }
    } else if let Some(o) = r.opcode {
        f.push(("opcode".into(), o.to_string()));
    }
    let probs: Vec<String> = r.problems.iter().map(|p| json_str(&p.to_string())).collect();
    f.push(("problems".into(), format!("[{}]", probs.join(","))));
    let devs: Vec<String> = r.deviations.iter().map(|p| json_str(&p.to_string())).collect();
    f.push(("deviations".into(), format!("[{}]", devs.join(","))));
    if r.rocev1 {
        f.push(("rocev1".into(), "true".into()));
    }
    if let Some(e) = r.encap {
        f.push(("encap".into(), json_str(e)));
    }
    if let Some(h) = &r.hint {
        f.push(("hint".into(), json_str(h)));
    }
    let body: Vec<String> = f.into_iter().map(|(k, v)| format!("{}:{}", json_str(&k), v)).collect();
    format!("{{{}}}", body.join(","))
}

/// Does this opcode start a request the responder must answer (for the flow report)?
pub fn is_request_kind(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::Send
            | OpKind::Write
            | OpKind::ReadRequest
            | OpKind::CompareSwap
            | OpKind::FetchAdd
            | OpKind::AtomicWrite
            | OpKind::Flush
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use urxe::wire::bth::BthRepr;
    use urxe::wire::deth::DethRepr;
    use urxe::wire::icrc::IpFields;
    use urxe::wire::opcode::op;
    use urxe::wire::packet::finish;
    use urxe::wire::Headers;

    fn packet(opcode: u8, dest_qp: u32) -> Vec<u8> {
        let mut h = Headers { bth: BthRepr { opcode, dest_qp, ..BthRepr::default() }, ..Headers::default() };
        if opcode == op::UD_SEND_ONLY {
            h.deth = Some(DethRepr { qkey: 0x0123_4567, src_qp: 0x11 });
        }
        let mut buf = vec![0u8; 256];
        let hl = h.emit(&mut buf).unwrap();
        let ip = IpFields::v4_df("10.0.0.1".parse().unwrap(), "239.1.2.3".parse().unwrap());
        let n = finish(&mut buf, hl, 8, &ip, 50000, ROCEV2_PORT).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn multicast_is_ud_sends_to_qpn_ffffff_and_that_qpn_is_only_multicast() {
        let group: IpAddr = "239.1.2.3".parse().unwrap();
        let host: IpAddr = "10.0.0.2".parse().unwrap();
        let ud = packet(op::UD_SEND_ONLY, MULTICAST_QPN);
        assert_eq!(multicast_problem(group, &parse(&ud).unwrap()), None);
        assert!(multicast_problem(host, &parse(&ud).unwrap()).is_some(), "QPN 0xFFFFFF at a unicast address");
        let ud_qp = packet(op::UD_SEND_ONLY, 0x12);
        assert!(multicast_problem(group, &parse(&ud_qp).unwrap()).is_some(), "a group with another QPN");
        assert_eq!(multicast_problem(host, &parse(&ud_qp).unwrap()), None);
        let rc = packet(op::RC_SEND_ONLY, MULTICAST_QPN);
        assert!(multicast_problem(group, &parse(&rc).unwrap()).is_some(), "RC to a group");
    }
}
