//! Per-flow PSN report: for each (source, destination, destination QP) the packets seen, the
//! request PSN range and the response (ACK, READ response) PSN range apart, PSN
//! gaps, retransmissions (a request PSN that does not advance), NAKs and RNR NAKs.
//!
//! A READ request reserves one PSN per response packet, which depends on the path MTU the
//! capture does not state; after a READ request the next request PSN is accepted as the new
//! reference without counting a gap.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::verify::PacketReport;
use crate::wire::aeth::{NakCode, Syndrome};
use crate::wire::opcode::{OpKind, Transport};
use crate::wire::Psn;

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
}

/// All flows of a capture.
#[derive(Default)]
pub struct FlowReport {
    flows: BTreeMap<FlowKey, FlowStats>,
}

impl FlowReport {
    pub fn add(&mut self, r: &PacketReport<'_>) {
        let Some(p) = &r.parsed else { return };
        let b = &p.headers.bth;
        let key = FlowKey { src: r.src, dst: r.dst, dest_qp: b.dest_qp };
        let f = self.flows.entry(key).or_default();
        f.packets += 1;
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
            "flow                                              tr   pkts   req  resp  req_psns             resp_psns            gaps  retrans  naks  psn_naks  rnr_naks\n",
        );
        for (k, f) in &self.flows {
            let name = format!("{} > {} qp={:#08x}", k.src, k.dst, k.dest_qp);
            let psns = |a: Option<Psn>, b: Option<Psn>| match (a, b) {
                (Some(a), Some(b)) => format!("{:#08x}-{:#08x}", a.value(), b.value()),
                _ => "-".into(),
            };
            s.push_str(&format!(
                "{:<49} {:<4} {:>5} {:>5} {:>5}  {:<19}  {:<19} {:>5} {:>8} {:>5} {:>9} {:>9}\n",
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
                f.rnr_naks
            ));
        }
        s
    }
}
