//! CM MADs on QP1: what `check` reads out of a GSI packet (message, comm IDs, service ID, QPN,
//! starting PSN, the rdma_cm private-data header) and which rules it holds them to. The
//! `--flows` section that ties each CM connection to its RC flows is in `flows.rs`.

use std::fmt::Write;

use urxe::wire::cm::{port_space, CmMessage, CmaHeader};
use urxe::wire::mad::{MadHeader, CLASS_CM, GSI_QKEY, MAD_LEN};

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
