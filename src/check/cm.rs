//! CM MADs on QP1: what `check` reads out of a GSI packet (message, comm IDs, service ID, QPN,
//! starting PSN, the rdma_cm private-data header) and which rules it holds them to, and the
//! `--flows` section that ties each CM connection to the RC flows it opened.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::IpAddr;

use super::flows::{FlowKey, FlowReport};
use crate::wire::cm::{port_space, CmMessage, CmaHeader};
use crate::wire::mad::{MadHeader, CLASS_CM, GSI_QKEY, MAD_LEN};

/// What one CM MAD says (no borrowed data, so a report can keep it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmInfo {
    /// IBTA name: REQ, REP, RTU, ...
    pub msg: &'static str,
    pub transaction_id: u64,
    pub local_id: u32,
    pub remote_id: u32,
    pub service_id: Option<u64>,
    /// The sender's QPN (REQ, REP), the receiver's (DREQ), or the resolved one (SIDR_REP).
    pub qpn: Option<u32>,
    /// The PSN the sender expects to receive (REQ, REP).
    pub starting_psn: Option<u32>,
    /// REJ reason, SIDR_REP status.
    pub reason: Option<u16>,
    /// The rdma_cm header of a REQ / SIDR_REQ of the TCP, UDP or IPoIB port space.
    pub cma: Option<CmaHeader>,
}

/// What is wrong with a GSI packet (checked beside the RoCEv2 rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GsiProblem {
    /// GSI traffic uses the well-known Q_Key 0x80010000.
    Qkey(u32),
    /// The payload is not one 256-byte MAD.
    MadLength(usize),
    /// A MAD of the CM class that this codec refuses (class version, attribute, length).
    MalformedCm(String),
    /// An rdma_cm REQ / SIDR_REQ whose private data does not start with a valid CMA header.
    CmaHeader(String),
}

impl std::fmt::Display for GsiProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GsiProblem::Qkey(q) => write!(f, "GSI Q_Key {q:#010x} (must be 0x80010000)"),
            GsiProblem::MadLength(n) => write!(f, "GSI payload of {n} bytes (a MAD is 256)"),
            GsiProblem::MalformedCm(e) => write!(f, "malformed CM MAD: {e}"),
            GsiProblem::CmaHeader(e) => write!(f, "rdma_cm private data: {e}"),
        }
    }
}

/// True when `service_id` belongs to an rdma_cm port space whose REQ carries a CMA header.
fn has_cma_header(service_id: u64) -> bool {
    let ps = (service_id >> 16) as u16;
    service_id >> 32 == 0 && matches!(ps, port_space::TCP | port_space::UDP | port_space::IPOIB)
}

/// Decodes the MAD of a UD packet to QP1. Returns what it says (for CM MADs) and the problems.
pub fn decode(qkey: Option<u32>, payload: &[u8]) -> (Option<CmInfo>, Vec<GsiProblem>) {
    let mut problems = Vec::new();
    if let Some(q) = qkey.filter(|&q| q != GSI_QKEY) {
        problems.push(GsiProblem::Qkey(q));
    }
    if payload.len() != MAD_LEN {
        problems.push(GsiProblem::MadLength(payload.len()));
        return (None, problems);
    }
    let Ok(h) = MadHeader::new_checked(payload) else { return (None, problems) };
    if h.mgmt_class() != CLASS_CM {
        return (None, problems); // another management class (SA, PerfMgt ...): not ours to judge
    }
    let (hdr, msg) = match CmMessage::parse(payload) {
        Ok(v) => v,
        Err(e) => {
            problems.push(GsiProblem::MalformedCm(e.to_string()));
            return (None, problems);
        }
    };
    let mut info = CmInfo {
        msg: msg.name(),
        transaction_id: hdr.transaction_id,
        local_id: msg.local_id(),
        remote_id: msg.remote_id(),
        service_id: None,
        qpn: None,
        starting_psn: None,
        reason: None,
        cma: None,
    };
    let mut cma_of = |sid: u64, pdata: &[u8], info: &mut CmInfo| {
        if has_cma_header(sid) {
            match CmaHeader::parse(pdata) {
                Ok(h) => info.cma = Some(h),
                Err(e) => problems.push(GsiProblem::CmaHeader(e.to_string())),
            }
        }
    };
    match msg {
        CmMessage::Req(m) => {
            info.service_id = Some(m.service_id);
            info.qpn = Some(m.local_qpn);
            info.starting_psn = Some(m.starting_psn);
            cma_of(m.service_id, m.private_data, &mut info);
        }
        CmMessage::Rep(m) => {
            info.qpn = Some(m.local_qpn);
            info.starting_psn = Some(m.starting_psn);
        }
        CmMessage::Rej(m) => info.reason = Some(m.reason),
        CmMessage::Dreq(m) => info.qpn = Some(m.remote_qpn),
        CmMessage::SidrReq(m) => {
            info.service_id = Some(m.service_id);
            cma_of(m.service_id, m.private_data, &mut info);
        }
        CmMessage::SidrRep(m) => {
            info.service_id = Some(m.service_id);
            info.qpn = Some(m.qpn);
            info.reason = Some(u16::from(m.status));
        }
        CmMessage::Mra(_) | CmMessage::Rtu(_) | CmMessage::Drep(_) => {}
    }
    (Some(info), problems)
}

/// One line's worth of a CM MAD, for the packet summary.
pub fn summary(c: &CmInfo) -> String {
    let mut s = format!(" CM {} lcid={:#010x} rcid={:#010x}", c.msg, c.local_id, c.remote_id);
    if let Some(v) = c.service_id {
        let _ = write!(s, " sid={v:#018x}");
    }
    if let Some(v) = c.qpn {
        let _ = write!(s, " cmqpn={v:#08x}");
    }
    if let Some(v) = c.starting_psn {
        let _ = write!(s, " spsn={v:#08x}");
    }
    if let Some(v) = c.reason {
        let _ = write!(s, " {}={v}", if c.msg == "REJ" { "reason" } else { "status" });
    }
    if let Some(h) = c.cma {
        let _ = write!(s, " cma={}:{}>{}", h.src, h.src_port, h.dst);
    }
    s
}

/// JSON object of a CM MAD.
pub fn json(c: &CmInfo) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    format!(
        "{{\"msg\":\"{}\",\"tid\":{},\"local_comm_id\":{},\"remote_comm_id\":{},\"service_id\":{},\"qpn\":{},\
         \"starting_psn\":{},\"reason\":{},\"cma\":{}}}",
        c.msg,
        c.transaction_id,
        c.local_id,
        c.remote_id,
        opt(c.service_id.map(|v| v.to_string())),
        opt(c.qpn.map(|v| v.to_string())),
        opt(c.starting_psn.map(|v| v.to_string())),
        opt(c.reason.map(|v| v.to_string())),
        opt(c.cma.map(|h| format!("{{\"src\":\"{}\",\"src_port\":{},\"dst\":\"{}\"}}", h.src, h.src_port, h.dst)))
    )
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
