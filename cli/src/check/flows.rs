//! Per-flow PSN report: for each (source, destination, destination QP) the packets seen, the
//! request PSN range and the response (ACK, READ response) PSN range apart, PSN
//! gaps, retransmissions (a request PSN that does not advance), NAKs and RNR NAKs.
//!
//! A READ request reserves one PSN per response packet, which depends on the path MTU the
//! capture does not state; after a READ request the next request PSN is accepted as the new
//! reference without counting a gap.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

use super::cm::CmInfo;
use super::verify::PacketReport;
use urxe::wire::aeth::{NakCode, Syndrome};
use urxe::wire::opcode::{OpKind, Transport};
use urxe::wire::Psn;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FlowKey {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dest_qp: u32,
}

/// Counters of one flow.
#[derive(Clone, Debug, Default)]
pub struct FlowStats {
    pub transport: Option<Transport>,
    pub packets: u64,
    pub requests: u64,
    pub responses: u64,
    /// PSNs of the first and the last request packet (SEND, WRITE, READ request, atomic).
    pub first_req_psn: Option<Psn>,
    pub last_req_psn: Option<Psn>,
    /// PSNs of the first and the last response packet (ACK, NAK, READ response, atomic ACK):
    /// the responder's PSNs, reported apart so a final ACK never shows as a request PSN.
    pub first_resp_psn: Option<Psn>,
    pub last_resp_psn: Option<Psn>,
    /// Highest request PSN seen so far (serial order).
    highest: Option<Psn>,
    /// The next request PSN is unknown (after a READ request).
    skip_gap: bool,
    pub gaps: u64,
    pub retransmissions: u64,
    pub naks: u64,
    pub psn_seq_naks: u64,
    pub rnr_naks: u64,
    /// Packets whose IP ECN field was CE (marked by a congested switch).
    pub ce: u64,
    /// CNPs (BTH opcode 0x81) in this flow: congestion notifications to `dest_qp`.
    pub cnps: u64,
}

/// All flows of a capture.
#[derive(Default)]
pub struct FlowReport {
    flows: BTreeMap<FlowKey, FlowStats>,
}

impl FlowReport {
    /// One packet; `ecn` is its IP header's ECN field (0b11: CE).
    pub fn add(&mut self, r: &PacketReport<'_>, ecn: u8) {
        let Some(p) = &r.parsed else { return };
        let b = &p.headers.bth;
        let key = FlowKey { src: r.src, dst: r.dst, dest_qp: b.dest_qp };
        let f = self.flows.entry(key).or_default();
        f.packets += 1;
        f.ce += (ecn & 0b11 == 0b11) as u64;
        f.cnps += (p.info.kind == OpKind::Cnp) as u64;
        f.transport = Some(p.info.transport);
        if let Some(a) = p.headers.aeth {
            match a.syndrome {
                Syndrome::RnrNak { .. } => f.rnr_naks += 1,
                Syndrome::Nak(c) => {
                    f.naks += 1;
                    if c == NakCode::PsnSequenceError {
                        f.psn_seq_naks += 1;
                    }
                }
                _ => {}
            }
        }
        if !p.info.request || p.info.kind == OpKind::Cnp {
            f.responses += 1;
            f.first_resp_psn.get_or_insert(b.psn);
            f.last_resp_psn = Some(b.psn);
            return;
        }
        f.requests += 1;
        f.first_req_psn.get_or_insert(b.psn);
        f.last_req_psn = Some(b.psn);
        match f.highest {
            None => f.highest = Some(b.psn),
            Some(h) => {
                if b.psn.after(h) {
                    if b.psn.distance(h) > 1 && !f.skip_gap {
                        f.gaps += 1;
                    }
                    f.highest = Some(b.psn);
                } else {
                    f.retransmissions += 1;
                }
            }
        }
        if b.psn == f.highest.unwrap_or(b.psn) {
            f.skip_gap = p.info.kind == OpKind::ReadRequest;
        }
    }

    pub fn total_retransmissions(&self) -> u64 {
        self.flows.values().map(|f| f.retransmissions).sum()
    }

    pub fn total_naks(&self) -> u64 {
        self.flows.values().map(|f| f.naks).sum()
    }

    pub fn total_rnr_naks(&self) -> u64 {
        self.flows.values().map(|f| f.rnr_naks).sum()
    }

    pub fn total_gaps(&self) -> u64 {
        self.flows.values().map(|f| f.gaps).sum()
    }

    pub fn flows(&self) -> impl Iterator<Item = (&FlowKey, &FlowStats)> {
        self.flows.iter()
    }

    /// A text table.
    pub fn render(&self) -> String {
        let mut s = String::from(
            "flow                                              tr   pkts   req  resp  req_psns             resp_psns            gaps  retrans  naks  psn_naks  rnr_naks     ce   cnp\n",
        );
        for (k, f) in &self.flows {
            let name = format!("{} > {} qp={:#08x}", k.src, k.dst, k.dest_qp);
            let psns = |a: Option<Psn>, b: Option<Psn>| match (a, b) {
                (Some(a), Some(b)) => format!("{:#08x}-{:#08x}", a.value(), b.value()),
                _ => "-".into(),
            };
            s.push_str(&format!(
                "{:<49} {:<4} {:>5} {:>5} {:>5}  {:<19}  {:<19} {:>5} {:>8} {:>5} {:>9} {:>9} {:>6} {:>5}\n",
                name,
                f.transport.map(|t| t.name()).unwrap_or("-"),
                f.packets,
                f.requests,
                f.responses,
                psns(f.first_req_psn, f.last_req_psn),
                psns(f.first_resp_psn, f.last_resp_psn),
                f.gaps,
                f.retransmissions,
                f.naks,
                f.psn_seq_naks,
                f.rnr_naks,
                f.ce,
                f.cnps
            ));
        }
        s
    }
}

/// One CM connection as the capture shows it: the active side (REQ sender) and the passive.
#[derive(Clone, Debug, Default)]
struct Conn {
    active: Option<IpAddr>,
    passive: Option<IpAddr>,
    active_qpn: Option<u32>,
    active_psn: Option<u32>,
    passive_qpn: Option<u32>,
    passive_psn: Option<u32>,
    service_id: Option<u64>,
    messages: Vec<&'static str>,
}

/// CM exchanges of a capture, keyed by (active address, active comm ID).
#[derive(Default)]
pub struct CmReport {
    conns: BTreeMap<(IpAddr, u32), Conn>,
    /// (passive address, passive comm ID) -> key, learnt from REPs.
    passive: BTreeMap<(IpAddr, u32), (IpAddr, u32)>,
}

impl CmReport {
    pub fn add(&mut self, src: IpAddr, dst: IpAddr, c: &CmInfo) {
        let key = match c.msg {
            "REQ" | "SIDR_REQ" => (src, c.local_id),
            "REP" => {
                self.passive.insert((src, c.local_id), (dst, c.remote_id));
                (dst, c.remote_id)
            }
            "SIDR_REP" => (dst, c.local_id),
            // Later messages name both IDs, the sender's first: the passive side's ID maps to
            // its connection through the REP; a REJ sent before any REP names the active ID as
            // the remote one.
            _ => match self.passive.get(&(src, c.local_id)) {
                Some(&k) => k,
                None if self.conns.contains_key(&(dst, c.remote_id)) => (dst, c.remote_id),
                None => (src, c.local_id),
            },
        };
        let conn = self.conns.entry(key).or_default();
        conn.messages.push(c.msg);
        match c.msg {
            "REQ" | "SIDR_REQ" => {
                conn.active = Some(src);
                conn.passive = Some(dst);
                conn.active_qpn = c.qpn.or(conn.active_qpn);
                conn.active_psn = c.starting_psn;
                conn.service_id = c.service_id;
            }
            "REP" | "SIDR_REP" => {
                conn.passive_qpn = c.qpn;
                conn.passive_psn = c.starting_psn;
            }
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// A text section: one line per connection, then the RC flows it opened with whether their
    /// first request PSN is the one the CM exchange announced.
    pub fn render(&self, flows: &FlowReport) -> String {
        let mut s =
            String::from("CM connections (active > passive, comm ID, service ID, QPNs, starting PSNs, messages)\n");
        for ((a, id), c) in &self.conns {
            let p = c.passive.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
            let _ = writeln!(
                s,
                "  {a} > {p} cid={id:#010x} sid={} qpn {}/{} spsn {}/{} : {}",
                c.service_id.map(|v| format!("{v:#x}")).unwrap_or_else(|| "-".into()),
                hex(c.active_qpn),
                hex(c.passive_qpn),
                hex(c.active_psn),
                hex(c.passive_psn),
                c.messages.join(" ")
            );
            // Active -> passive requests go to the passive QPN and start at the PSN the
            // passive side said it expects (REP), and the other way round.
            for (from, to, qpn, psn) in
                [(Some(*a), c.passive, c.passive_qpn, c.passive_psn), (c.passive, Some(*a), c.active_qpn, c.active_psn)]
            {
                let (Some(from), Some(to), Some(qpn)) = (from, to, qpn) else { continue };
                let key = FlowKey { src: from, dst: to, dest_qp: qpn };
                let Some((_, f)) = flows.flows().find(|(k, _)| **k == key) else { continue };
                let verdict = match (f.first_req_psn, psn) {
                    (Some(first), Some(want)) if first.value() == want => "first request PSN as announced".to_string(),
                    (Some(first), Some(want)) => {
                        format!("first request PSN {:#08x}, announced {want:#08x}", first.value())
                    }
                    _ => "no request seen".to_string(),
                };
                let _ = writeln!(s, "    opened {from} > {to} qp={qpn:#08x}: {} packets, {verdict}", f.packets);
            }
        }
        s
    }
}

fn hex(v: Option<u32>) -> String {
    v.map(|v| format!("{v:#x}")).unwrap_or_else(|| "-".into())
}
