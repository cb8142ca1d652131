//! Capture verifier behind `urxe check`: reads pcap/pcapng, decodes every UDP/4791 packet,
//! verifies its ICRC and header rules, and reports per packet and per flow.
//! Uses only the wire layer; never touches the engine.
#![forbid(unsafe_code)]

pub mod capture;
pub mod cm;
pub mod flows;
pub mod verify;

use std::io::Write;
use std::path::Path;

use capture::{decode, Capture, CaptureError, Decoded};
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
}

/// Totals of one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub frames: u64,
    pub rocev2: u64,
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
        self.bad == 0 && self.malformed_frames == 0 && (self.rocev2 > 0 || self.frames == 0)
    }

    pub fn line(&self) -> String {
        format!(
            "{} RoCEv2 packets{}: {} ok, {} bad (icrc {}, header {}, udp checksum {}, ip checksum {}); {} malformed frames; {} other frames skipped; retransmissions {}, naks {}, rnr naks {}, psn gaps {}",
            self.rocev2,
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
        let mut whole = check_packet(frame.number, &d);
        if frame.ip_id_unknown && whole.icrc == IcrcVerdict::Bad {
            verify::recover_ip_id(&d, &mut whole);
        }
        let gso = if whole.icrc != IcrcVerdict::Ok { capture::split_gso(&d) } else { None };
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
                        let mut r = check_packet(frame.number, &seg);
                        r.segment = Some((i + 1, n));
                        r
                    })
                    .collect()
            }
            None => vec![whole],
        };
        for r in reports {
            t.rocev2 += 1;
            if r.ok() {
                t.ok += 1;
            } else {
                t.bad += 1;
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
            flows.add(&r);
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
