//! Capture verifier behind `urxe check`: reads pcap/pcapng, decodes every UDP/4791 packet,
//! verifies its ICRC and header rules, and reports per packet and per flow.
//! Uses only the wire layer; never touches the engine.
#![forbid(unsafe_code)]

pub mod capture;
pub mod cm;
pub mod decode;
pub mod flows;
pub mod roce;
pub mod verify;

use std::io::Write;
use std::path::Path;

use capture::{Capture, CaptureError, Decoded};
use decode::decode;
use flows::FlowReport;
use verify::{check_packet, is_rocev2, IcrcVerdict};

/// How to print.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Format {
    #[default]
    Summary,
    Verbose,
    Json,
    /// Only the totals (and the flow table if asked).
    Quiet,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    pub format: Format,
    /// Print the per-flow PSN report after the packets.
    pub flows: bool,
    /// `--strict`: deviations (reserved fields set, manufacturer-specific opcodes, packets
    /// whose end the capture did not hold) fail like broken "shall" rules.
    pub strict: bool,
}

/// Totals of one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub frames: u64,
    /// RoCEv2 packets (UDP 4791, also inside VXLAN/GRE/ERSPAN).
    pub rocev2: u64,
    /// RoCEv1 packets (ethertype 0x8915).
    pub rocev1: u64,
    /// Packets that passed with deviations (reported, not failing without `--strict`).
    pub deviations: u64,
    /// Packets that passed but whose ICRC the capture did not hold (cut short).
    pub unverified: u64,
    /// Packets found inside an encapsulation (VXLAN, GRE, ERSPAN).
    pub encapsulated: u64,
    /// Failing packets whose ICRC verifies with another UDP source port.
    pub port_rewritten: u64,
    pub ok: u64,
    pub bad: u64,
    pub icrc_bad: u64,
    pub header_errors: u64,
    pub udp_checksum_bad: u64,
    pub ip_checksum_bad: u64,
    pub malformed_frames: u64,
    /// Frames holding a GSO train (counted once; their packets count in `rocev2`).
    pub gso_trains: u64,
    pub other: u64,
    pub retransmissions: u64,
    pub naks: u64,
    pub rnr_naks: u64,
    pub gaps: u64,
}

impl Totals {
    /// Every RoCEv2 packet passed, and the file held at least one or no frame at all (a capture
    /// of an idle link is valid; frames that are all something else mean a wrong capture).
    pub fn passed(&self) -> bool {
        self.bad == 0 && self.malformed_frames == 0 && (self.roce() > 0 || self.frames == 0)
    }

    /// Adds another file's totals (the grand total of several files).
    pub fn add(&mut self, t: &Totals) {
        let Totals {
            frames,
            rocev2,
            rocev1,
            deviations,
            unverified,
            encapsulated,
            port_rewritten,
            ok,
            bad,
            icrc_bad,
            header_errors,
            udp_checksum_bad,
            ip_checksum_bad,
            malformed_frames,
            gso_trains,
            other,
            retransmissions,
            naks,
            rnr_naks,
            gaps,
        } = *t;
        self.frames += frames;
        self.rocev2 += rocev2;
        self.rocev1 += rocev1;
        self.deviations += deviations;
        self.unverified += unverified;
        self.encapsulated += encapsulated;
        self.port_rewritten += port_rewritten;
        self.ok += ok;
        self.bad += bad;
        self.icrc_bad += icrc_bad;
        self.header_errors += header_errors;
        self.udp_checksum_bad += udp_checksum_bad;
        self.ip_checksum_bad += ip_checksum_bad;
        self.malformed_frames += malformed_frames;
        self.gso_trains += gso_trains;
        self.other += other;
        self.retransmissions += retransmissions;
        self.naks += naks;
        self.rnr_naks += rnr_naks;
        self.gaps += gaps;
    }

    /// RoCE packets of either version.
    pub fn roce(&self) -> u64 {
        self.rocev2 + self.rocev1
    }

    pub fn line(&self) -> String {
        let mut extra = String::new();
        if self.deviations > 0 {
            extra.push_str(&format!("; {} with deviations (not failing without --strict)", self.deviations));
        }
        if self.unverified > 0 {
            extra.push_str(&format!("; {} truncated by the capture, ICRC unverified", self.unverified));
        }
        if self.port_rewritten > 0 {
            extra.push_str(&format!(
                "; {} whose ICRC verifies with another UDP source port (rewritten by the capture point?)",
                self.port_rewritten
            ));
        }
        format!(
            "{} RoCEv2 packets{}{}{}: {} ok, {} bad (icrc {}, header {}, udp checksum {}, ip checksum {}){extra}; {} malformed frames; {} other frames skipped; retransmissions {}, naks {}, rnr naks {}, psn gaps {}",
            self.rocev2,
            if self.rocev1 > 0 { format!(" and {} RoCEv1 packets", self.rocev1) } else { String::new() },
            if self.encapsulated > 0 { format!(" ({} in VXLAN/GRE/ERSPAN)", self.encapsulated) } else { String::new() },
            if self.gso_trains > 0 { format!(" (from {} GSO trains and single frames)", self.gso_trains) } else { String::new() },
            self.ok,
            self.bad,
            self.icrc_bad,
            self.header_errors,
            self.udp_checksum_bad,
            self.ip_checksum_bad,
            self.malformed_frames,
            self.other,
            self.retransmissions,
            self.naks,
            self.rnr_naks,
            self.gaps
        )
    }
}

/// Checks one capture file, printing per `opts` to `out`.
pub fn check_file(path: &Path, opts: Options, out: &mut dyn Write) -> Result<Totals, CaptureError> {
    let mut cap = Capture::open(path)?;
    let mut t = Totals::default();
    let mut flows = FlowReport::default();
    let mut cms = flows::CmReport::default();
    let io = CaptureError::Io;
    while let Some(frame) = cap.next_frame() {
        let frame = frame?;
        t.frames += 1;
        let d = match decode(&frame) {
            Decoded::Udp(d) if is_rocev2(&d) => d,
            Decoded::Udp(_) | Decoded::Other => {
                t.other += 1;
                continue;
            }
            Decoded::Malformed(why) => {
                t.malformed_frames += 1;
                if opts.format != Format::Quiet {
                    writeln!(out, "{} malformed frame: {why}", frame.number).map_err(io)?;
                }
                continue;
            }
        };
        // A GSO train captured on the sender: check each packet as it left the host. A train
        // may happen to parse as one packet (a SEND followed by an ACK reads as a longer
        // SEND), so anything whose ICRC does not confirm it as one packet is tried as a train.
        let mut whole = check_packet(frame.number, &d, opts.strict);
        if frame.ip_id_unknown && whole.icrc == IcrcVerdict::Bad {
            verify::recover_ip_id(&d, &mut whole);
        }
        let gso = if whole.icrc == IcrcVerdict::Bad && !d.rocev1 { capture::split_gso(&d) } else { None };
        if gso.is_none() && whole.icrc == IcrcVerdict::Bad {
            verify::hint_source_port(&d, &mut whole);
        }
        let reports: Vec<verify::PacketReport<'_>> = match &gso {
            Some(segs) => {
                t.gso_trains += 1;
                let n = segs.len();
                segs.iter()
                    .enumerate()
                    .map(|(i, g)| {
                        let seg = capture::UdpDatagram {
                            ip_header: &g.ip_header,
                            udp_header: &g.udp_header,
                            payload: &d.payload[g.start..g.start + g.len],
                            // Header checksums belong to the train, not to the segments.
                            ip_checksum_ok: None,
                            udp_checksum: if d.udp_checksum == capture::UdpChecksum::Zero {
                                capture::UdpChecksum::Zero
                            } else {
                                capture::UdpChecksum::OffloadPending
                            },
                            ..d
                        };
                        let mut r = check_packet(frame.number, &seg, opts.strict);
                        r.segment = Some((i + 1, n));
                        r
                    })
                    .collect()
            }
            None => vec![whole],
        };
        for r in reports {
            if r.rocev1 {
                t.rocev1 += 1;
            } else {
                t.rocev2 += 1;
            }
            t.encapsulated += r.encap.is_some() as u64;
            t.port_rewritten += r.hint.is_some() as u64;
            if r.unverified() {
                t.unverified += 1;
            } else if r.ok() {
                t.ok += 1;
            } else {
                t.bad += 1;
            }
            if r.ok() && !r.deviations.is_empty() {
                t.deviations += 1;
            }
            for p in &r.problems {
                match p {
                    verify::Problem::IcrcMismatch { .. } => t.icrc_bad += 1,
                    verify::Problem::UdpChecksum => t.udp_checksum_bad += 1,
                    verify::Problem::IpChecksum => t.ip_checksum_bad += 1,
                    _ => t.header_errors += 1,
                }
            }
            debug_assert!(r.icrc != IcrcVerdict::Bad || !r.ok());
            flows.add(&r, ip_ecn(d.ip_header));
            if let Some(c) = &r.cm {
                cms.add(r.src, r.dst, c);
            }
            match opts.format {
                Format::Summary => writeln!(out, "{}", verify::summary_line(&r)).map_err(io)?,
                Format::Verbose => {
                    for l in verify::verbose_lines(&r) {
                        writeln!(out, "{l}").map_err(io)?;
                    }
                }
                Format::Json => writeln!(out, "{}", verify::json_line(&r)).map_err(io)?,
                Format::Quiet if !r.ok() => writeln!(out, "{}", verify::summary_line(&r)).map_err(io)?,
                Format::Quiet => {}
            }
        }
    }
    t.retransmissions = flows.total_retransmissions();
    t.naks = flows.total_naks();
    t.rnr_naks = flows.total_rnr_naks();
    t.gaps = flows.total_gaps();
    if opts.flows {
        write!(out, "{}", flows.render()).map_err(io)?;
        if !cms.is_empty() {
            write!(out, "{}", cms.render(&flows)).map_err(io)?;
        }
    }
    Ok(t)
}

/// The ECN field of an IPv4 header (TOS bits 1..0), or of an IPv6 header or RoCEv1 GRH
/// (traffic class bits 1..0); 0 for a header too short to hold it.
fn ip_ecn(h: &[u8]) -> u8 {
    match h.first().map(|b| b >> 4) {
        Some(4) if h.len() >= 2 => h[1] & 0b11,
        Some(6) if h.len() >= 2 => (h[1] >> 4) & 0b11,
        _ => 0,
    }
}
