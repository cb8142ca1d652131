//! Communication Management messages (IBTA Vol 1 §12.6, §12.11): the payload of CM MADs, and
//! the rdma_cm private-data header that the kernel's CMA puts in front of the application's
//! private data of a REQ or SIDR_REQ.
//!
//! Layout facts (offsets are from the start of the MAD's 232-byte data area, i.e. MAD byte
//! 24): every message starts with the communication IDs (or the SIDR request ID); bit fields
//! are numbered from the most significant bit of their byte, as in the IBTA's figures. The
//! private-data area always fills the rest of the MAD: on the wire it is zero-padded, and a
//! receiver cannot tell how much of it the sender meant.
//!
//! Parsing never panics and never allocates: a message borrows its private data from the
//! buffer.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::mad::{MadHeader, MadHeaderRepr, BASE_VERSION, CLASS_CM, MAD_LEN};

/// Where the CM message starts inside the MAD.
pub const DATA_OFFSET: usize = 24;
/// The CM data area: 256 - 24.
pub const DATA_LEN: usize = MAD_LEN - DATA_OFFSET;

/// Attribute IDs of the CM class (IBTA Vol 1 Table 97).
pub mod attr {
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// Private-data capacity of each message (IBTA Vol 1 §12.6).
pub mod private_len {
    pub const REQ: usize = 92;
    pub const MRA: usize = 222;
    pub const REJ: usize = 148;
    pub const REP: usize = 196;
    pub const RTU: usize = 224;
    pub const DREQ: usize = 220;
    pub const DREP: usize = 224;
    pub const SIDR_REQ: usize = 216;
    pub const SIDR_REP: usize = 136;
}

/// Offsets of each message's private data in the CM data area.
mod private_at {
    pub const REQ: usize = 140;
    pub const MRA: usize = 10;
    pub const REJ: usize = 84;
    pub const REP: usize = 36;
    pub const RTU: usize = 8;
    pub const DREQ: usize = 12;
    pub const DREP: usize = 8;
    pub const SIDR_REQ: usize = 16;
    pub const SIDR_REP: usize = 96;
}

/// Why a MAD is not a CM message this layer understands.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmError {
    /// Shorter than a MAD.
    Truncated { have: usize },
    /// Not base version 1, class CM, class version 2.
    NotCm { base_version: u8, class: u8, class_version: u8 },
    /// A CM attribute this layer does not handle (LAP, APR, ClassPortInfo, reserved).
    UnknownAttribute(u16),
    /// Private data longer than the message can carry (emit).
    PrivateDataTooLong { len: usize, max: usize },
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CmError::Truncated { have } => write!(f, "MAD truncated: {have} of {MAD_LEN} bytes"),
            CmError::NotCm { base_version, class, class_version } => write!(
                f,
                "not a CM MAD (base version {base_version}, class {class:#04x}, class version {class_version})"
            ),
            CmError::UnknownAttribute(a) => write!(f, "CM attribute {a:#06x} not handled"),
            CmError::PrivateDataTooLong { len, max } => {
                write!(f, "{len} bytes of private data, the message carries at most {max}")
            }
        }
    }
}

impl std::error::Error for CmError {}

/// One path of a REQ (primary or alternate: 44 bytes, IBTA Vol 1 §12.6.5).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CmPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits (4.096 µs · 2^t).
    pub local_ack_timeout: u8,
}

const PATH_LEN: usize = 44;

impl CmPath {
    fn parse(b: &[u8]) -> CmPath {
        let v = be32(b, 36);
        CmPath {
            local_lid: be16(b, 0),
            remote_lid: be16(b, 2),
            local_gid: gid(b, 4),
            remote_gid: gid(b, 20),
            flow_label: v >> 12,
            packet_rate: (v & 0x3F) as u8,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: b[43] >> 3,
        }
    }

    fn emit(&self, b: &mut [u8]) {
        put16(b, 0, self.local_lid);
        put16(b, 2, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        put32(b, 36, (self.flow_label & 0xF_FFFF) << 12 | u32::from(self.packet_rate & 0x3F));
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = (self.sl & 0xF) << 4 | u8::from(self.subnet_local) << 3;
        b[43] = (self.local_ack_timeout & 0x1F) << 3;
    }

    /// True when every field is zero: the REQ carries no alternate path.
    pub fn is_empty(&self) -> bool {
        *self == CmPath::default()
    }
}

/// ConnectRequest (IBTA Vol 1 §12.6.5).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Req<'a> {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 3 XRC/extended (IBTA Table 100).
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// The PSN the sender expects to receive (24 bits).
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits, `ibv_mtu` encoding (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub extended_transport_type: u8,
    pub primary: CmPath,
    pub alternate: CmPath,
    pub private_data: &'a [u8],
}

/// ConnectReply (IBTA Vol 1 §12.6.8).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rep<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    pub local_qpn: u32,
    pub local_eecn: u32,
    /// The PSN the sender expects to receive (24 bits).
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: &'a [u8],
}

/// ConnectReject (IBTA Vol 1 §12.6.7).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rej<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 other.
    pub message_rejected: u8,
    /// 7 bits.
    pub reject_info_length: u8,
    pub reason: u16,
    /// Additional rejection information (72 bytes on the wire).
    pub ari: &'a [u8],
    pub private_data: &'a [u8],
}

/// MessageReceiptAcknowledgement (IBTA Vol 1 §12.6.6).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Mra<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: 0 REQ, 1 REP, 2 LAP.
    pub message_mraed: u8,
    /// 5 bits (4.096 µs · 2^t).
    pub service_timeout: u8,
    pub private_data: &'a [u8],
}

/// ReadyToUse, DisconnectReply: the two comm IDs and private data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CommIds<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: &'a [u8],
}

/// DisconnectRequest (IBTA Vol 1 §12.6.10).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Dreq<'a> {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// The QPN of the receiver's side of the connection (24 bits).
    pub remote_qpn: u32,
    pub private_data: &'a [u8],
}

/// ServiceIDResolutionRequest (IBTA Vol 1 §12.11.1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SidrReq<'a> {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: &'a [u8],
}

/// ServiceIDResolutionResponse (IBTA Vol 1 §12.11.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SidrRep<'a> {
    pub request_id: u32,
    /// 0 valid, 1 service ID not supported, 2 rejected, 3 no QP, 4 redirect, 5 version.
    pub status: u8,
    pub additional_info_length: u8,
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    /// ClassPortInfo (72 bytes on the wire).
    pub class_port_info: &'a [u8],
    pub private_data: &'a [u8],
}

/// A CM message of any kind.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmMessage<'a> {
    Req(Req<'a>),
    Mra(Mra<'a>),
    Rej(Rej<'a>),
    Rep(Rep<'a>),
    Rtu(CommIds<'a>),
    Dreq(Dreq<'a>),
    Drep(CommIds<'a>),
    SidrReq(SidrReq<'a>),
    SidrRep(SidrRep<'a>),
}

impl<'a> CmMessage<'a> {
    /// The MAD attribute ID of this message.
    pub fn attribute_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name as the IBTA spells it.
    pub fn name(&self) -> &'static str {
        attribute_name(self.attribute_id())
    }

    /// The sender's comm ID (or SIDR request ID).
    pub fn local_id(&self) -> u32 {
        match self {
            CmMessage::Req(m) => m.local_comm_id,
            CmMessage::Mra(m) => m.local_comm_id,
            CmMessage::Rej(m) => m.local_comm_id,
            CmMessage::Rep(m) => m.local_comm_id,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.local_comm_id,
            CmMessage::Dreq(m) => m.local_comm_id,
            CmMessage::SidrReq(m) => m.request_id,
            CmMessage::SidrRep(m) => m.request_id,
        }
    }

    /// The receiver's comm ID as the sender knows it (0 in a REQ and in SIDR messages, whose
    /// request ID is the requester's own).
    pub fn remote_id(&self) -> u32 {
        match self {
            CmMessage::Req(_) | CmMessage::SidrReq(_) | CmMessage::SidrRep(_) => 0,
            CmMessage::Mra(m) => m.remote_comm_id,
            CmMessage::Rej(m) => m.remote_comm_id,
            CmMessage::Rep(m) => m.remote_comm_id,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.remote_comm_id,
            CmMessage::Dreq(m) => m.remote_comm_id,
        }
    }

    /// The private data area as carried (always the message's whole capacity on the wire).
    pub fn private_data(&self) -> &'a [u8] {
        match *self {
            CmMessage::Req(m) => m.private_data,
            CmMessage::Mra(m) => m.private_data,
            CmMessage::Rej(m) => m.private_data,
            CmMessage::Rep(m) => m.private_data,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.private_data,
            CmMessage::Dreq(m) => m.private_data,
            CmMessage::SidrReq(m) => m.private_data,
            CmMessage::SidrRep(m) => m.private_data,
        }
    }

    /// Parses a 256-byte MAD (the payload of a GSI UD packet). Bytes past 256 are ignored.
    pub fn parse(mad: &'a [u8]) -> Result<(MadHeaderRepr, CmMessage<'a>), CmError> {
        if mad.len() < MAD_LEN {
            return Err(CmError::Truncated { have: mad.len() });
        }
        let hdr = MadHeaderRepr::parse(&MadHeader::new_unchecked(&mad[..DATA_OFFSET]));
        if hdr.base_version != BASE_VERSION || hdr.mgmt_class != CLASS_CM || hdr.class_version != 2 {
            return Err(CmError::NotCm {
                base_version: hdr.base_version,
                class: hdr.mgmt_class,
                class_version: hdr.class_version,
            });
        }
        let d = &mad[DATA_OFFSET..MAD_LEN];
        let pd = |at: usize, len: usize| &d[at..at + len];
        let msg = match hdr.attribute_id {
            attr::REQ => CmMessage::Req(Req {
                local_comm_id: be32(d, 0),
                service_id: be64(d, 8),
                local_ca_guid: be64(d, 16),
                local_qkey: be32(d, 28),
                local_qpn: be24(d, 32),
                responder_resources: d[35],
                local_eecn: be24(d, 36),
                initiator_depth: d[39],
                remote_eecn: be24(d, 40),
                remote_cm_response_timeout: d[43] >> 3,
                transport_service_type: (d[43] >> 1) & 0x3,
                end_to_end_flow_control: d[43] & 1 != 0,
                starting_psn: be24(d, 44),
                local_cm_response_timeout: d[47] >> 3,
                retry_count: d[47] & 0x7,
                pkey: be16(d, 48),
                path_mtu: d[50] >> 4,
                rdc_exists: d[50] & 0x08 != 0,
                rnr_retry_count: d[50] & 0x7,
                max_cm_retries: d[51] >> 4,
                srq: d[51] & 0x08 != 0,
                extended_transport_type: d[51] & 0x7,
                primary: CmPath::parse(&d[52..52 + PATH_LEN]),
                alternate: CmPath::parse(&d[96..96 + PATH_LEN]),
                private_data: pd(private_at::REQ, private_len::REQ),
            }),
            attr::MRA => CmMessage::Mra(Mra {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                message_mraed: d[8] >> 6,
                service_timeout: d[9] >> 3,
                private_data: pd(private_at::MRA, private_len::MRA),
            }),
            attr::REJ => CmMessage::Rej(Rej {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                message_rejected: d[8] >> 6,
                reject_info_length: d[9] >> 1,
                reason: be16(d, 10),
                ari: &d[12..84],
                private_data: pd(private_at::REJ, private_len::REJ),
            }),
            attr::REP => CmMessage::Rep(Rep {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                local_qkey: be32(d, 8),
                local_qpn: be24(d, 12),
                local_eecn: be24(d, 16),
                starting_psn: be24(d, 20),
                responder_resources: d[24],
                initiator_depth: d[25],
                target_ack_delay: d[26] >> 3,
                failover_accepted: (d[26] >> 1) & 0x3,
                end_to_end_flow_control: d[26] & 1 != 0,
                rnr_retry_count: d[27] >> 5,
                srq: d[27] & 0x10 != 0,
                local_ca_guid: be64(d, 28),
                private_data: pd(private_at::REP, private_len::REP),
            }),
            attr::RTU => CmMessage::Rtu(CommIds {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                private_data: pd(private_at::RTU, private_len::RTU),
            }),
            attr::DREQ => CmMessage::Dreq(Dreq {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                remote_qpn: be24(d, 8),
                private_data: pd(private_at::DREQ, private_len::DREQ),
            }),
            attr::DREP => CmMessage::Drep(CommIds {
                local_comm_id: be32(d, 0),
                remote_comm_id: be32(d, 4),
                private_data: pd(private_at::DREP, private_len::DREP),
            }),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq {
                request_id: be32(d, 0),
                pkey: be16(d, 4),
                service_id: be64(d, 8),
                private_data: pd(private_at::SIDR_REQ, private_len::SIDR_REQ),
            }),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep {
                request_id: be32(d, 0),
                status: d[4],
                additional_info_length: d[5],
                qpn: be24(d, 8),
                service_id: be64(d, 12),
                qkey: be32(d, 20),
                class_port_info: &d[24..96],
                private_data: pd(private_at::SIDR_REP, private_len::SIDR_REP),
            }),
            other => return Err(CmError::UnknownAttribute(other)),
        };
        Ok((hdr, msg))
    }

    /// Writes the whole 256-byte MAD: the CM header with `transaction_id`, then the message.
    /// Private data shorter than the message's capacity is zero-padded; longer is an error.
    /// Reserved fields are written as zero.
    pub fn emit(&self, transaction_id: u64, mad: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        mad.fill(0);
        MadHeaderRepr::cm(self.attribute_id(), transaction_id).emit(&mut MadHeader::new_unchecked(&mut mad[..]));
        let d = &mut mad[DATA_OFFSET..];
        let (at, max) = match self {
            CmMessage::Req(_) => (private_at::REQ, private_len::REQ),
            CmMessage::Mra(_) => (private_at::MRA, private_len::MRA),
            CmMessage::Rej(_) => (private_at::REJ, private_len::REJ),
            CmMessage::Rep(_) => (private_at::REP, private_len::REP),
            CmMessage::Rtu(_) => (private_at::RTU, private_len::RTU),
            CmMessage::Dreq(_) => (private_at::DREQ, private_len::DREQ),
            CmMessage::Drep(_) => (private_at::DREP, private_len::DREP),
            CmMessage::SidrReq(_) => (private_at::SIDR_REQ, private_len::SIDR_REQ),
            CmMessage::SidrRep(_) => (private_at::SIDR_REP, private_len::SIDR_REP),
        };
        let pdata = self.private_data();
        if pdata.len() > max {
            return Err(CmError::PrivateDataTooLong { len: pdata.len(), max });
        }
        d[at..at + pdata.len()].copy_from_slice(pdata);
        match *self {
            CmMessage::Req(m) => {
                put32(d, 0, m.local_comm_id);
                put64(d, 8, m.service_id);
                put64(d, 16, m.local_ca_guid);
                put32(d, 28, m.local_qkey);
                put24(d, 32, m.local_qpn);
                d[35] = m.responder_resources;
                put24(d, 36, m.local_eecn);
                d[39] = m.initiator_depth;
                put24(d, 40, m.remote_eecn);
                d[43] = (m.remote_cm_response_timeout & 0x1F) << 3
                    | (m.transport_service_type & 0x3) << 1
                    | u8::from(m.end_to_end_flow_control);
                put24(d, 44, m.starting_psn);
                d[47] = (m.local_cm_response_timeout & 0x1F) << 3 | (m.retry_count & 0x7);
                put16(d, 48, m.pkey);
                d[50] = (m.path_mtu & 0xF) << 4 | u8::from(m.rdc_exists) << 3 | (m.rnr_retry_count & 0x7);
                d[51] = (m.max_cm_retries & 0xF) << 4 | u8::from(m.srq) << 3 | (m.extended_transport_type & 0x7);
                m.primary.emit(&mut d[52..52 + PATH_LEN]);
                m.alternate.emit(&mut d[96..96 + PATH_LEN]);
            }
            CmMessage::Mra(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                d[8] = (m.message_mraed & 0x3) << 6;
                d[9] = (m.service_timeout & 0x1F) << 3;
            }
            CmMessage::Rej(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                d[8] = (m.message_rejected & 0x3) << 6;
                d[9] = (m.reject_info_length & 0x7F) << 1;
                put16(d, 10, m.reason);
                let n = m.ari.len().min(72);
                d[12..12 + n].copy_from_slice(&m.ari[..n]);
            }
            CmMessage::Rep(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                put32(d, 8, m.local_qkey);
                put24(d, 12, m.local_qpn);
                put24(d, 16, m.local_eecn);
                put24(d, 20, m.starting_psn);
                d[24] = m.responder_resources;
                d[25] = m.initiator_depth;
                d[26] = (m.target_ack_delay & 0x1F) << 3
                    | (m.failover_accepted & 0x3) << 1
                    | u8::from(m.end_to_end_flow_control);
                d[27] = (m.rnr_retry_count & 0x7) << 5 | u8::from(m.srq) << 4;
                put64(d, 28, m.local_ca_guid);
            }
            CmMessage::Rtu(m) | CmMessage::Drep(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
            }
            CmMessage::Dreq(m) => {
                put32(d, 0, m.local_comm_id);
                put32(d, 4, m.remote_comm_id);
                put24(d, 8, m.remote_qpn);
            }
            CmMessage::SidrReq(m) => {
                put32(d, 0, m.request_id);
                put16(d, 4, m.pkey);
                put64(d, 8, m.service_id);
            }
            CmMessage::SidrRep(m) => {
                put32(d, 0, m.request_id);
                d[4] = m.status;
                d[5] = m.additional_info_length;
                put24(d, 8, m.qpn);
                put64(d, 12, m.service_id);
                put32(d, 20, m.qkey);
                let n = m.class_port_info.len().min(72);
                d[24..24 + n].copy_from_slice(&m.class_port_info[..n]);
            }
        }
        Ok(())
    }
}

/// The IBTA name of a CM attribute ID ("?" for others).
pub fn attribute_name(attribute_id: u16) -> &'static str {
    match attribute_id {
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => "?",
    }
}

/// rdma_cm port spaces (the high bits of a service ID, `RDMA_PS_*`).
pub mod port_space {
    pub const IPOIB: u16 = 0x0002;
    pub const IB: u16 = 0x013F;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
}

/// The service ID rdma_cm derives from a port space and a port: `0x0000_0000_PPPP_pppp` with
/// the port space in bits 31..16 and the port in 15..0.
pub fn rdma_cm_service_id(port_space: u16, port: u16) -> u64 {
    u64::from(port_space) << 16 | u64::from(port)
}

/// The header the kernel's CMA puts in front of the application's private data in a REQ and
/// a SIDR_REQ of the TCP/UDP/IPoIB port spaces (36 bytes): version, IP version (high nibble),
/// the source port, then source and destination address as 16-byte fields (IPv4 in the last
/// four bytes, the rest zero).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmaHeader {
    pub version: u8,
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// Length of [`CmaHeader`] on the wire.
pub const CMA_HEADER_LEN: usize = 36;

/// Why private data does not start with a valid CMA header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CmaHeaderError {
    Truncated,
    /// Version other than 0.
    Version(u8),
    /// IP version nibble other than 4 or 6.
    IpVersion(u8),
}

impl fmt::Display for CmaHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CmaHeaderError::Truncated => f.write_str("private data shorter than the 36-byte CMA header"),
            CmaHeaderError::Version(v) => write!(f, "CMA header version {v} (must be 0)"),
            CmaHeaderError::IpVersion(v) => write!(f, "CMA header IP version {v} (must be 4 or 6)"),
        }
    }
}

impl std::error::Error for CmaHeaderError {}

impl CmaHeader {
    pub fn parse(b: &[u8]) -> Result<CmaHeader, CmaHeaderError> {
        if b.len() < CMA_HEADER_LEN {
            return Err(CmaHeaderError::Truncated);
        }
        if b[0] != 0 {
            return Err(CmaHeaderError::Version(b[0]));
        }
        let ipv = b[1] >> 4;
        let addr = |at: usize| -> IpAddr {
            let g = gid(b, at);
            if ipv == 4 {
                IpAddr::V4(Ipv4Addr::new(g[12], g[13], g[14], g[15]))
            } else {
                IpAddr::V6(Ipv6Addr::from(g))
            }
        };
        if ipv != 4 && ipv != 6 {
            return Err(CmaHeaderError::IpVersion(ipv));
        }
        Ok(CmaHeader { version: 0, src_port: be16(b, 2), src: addr(4), dst: addr(20) })
    }

    /// Writes the header into the first 36 bytes of `b` (the caller's private-data buffer).
    /// Both addresses must be of one family; a mixed pair writes the source's family.
    pub fn emit(&self, b: &mut [u8]) {
        b[..CMA_HEADER_LEN].fill(0);
        b[0] = self.version;
        b[1] = if self.src.is_ipv4() { 4 << 4 } else { 6 << 4 };
        put16(b, 2, self.src_port);
        for (at, a) in [(4, self.src), (20, self.dst)] {
            match a {
                IpAddr::V4(v4) => b[at + 12..at + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => b[at..at + 16].copy_from_slice(&v6.octets()),
            }
        }
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from(be32(b, at)) << 32 | u64::from(be32(b, at + 4))
}
fn gid(b: &[u8], at: usize) -> [u8; 16] {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[at..at + 16]);
    g
}
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtu() -> CmMessage<'static> {
        CmMessage::Rtu(CommIds { local_comm_id: 0x1122_3344, remote_comm_id: 0x5566_7788, private_data: b"hi" })
    }

    #[test]
    fn test_emit_parse_round_trip_pads_private_data() {
        let mut mad = [0xEEu8; MAD_LEN];
        rtu().emit(7, &mut mad).unwrap();
        let (hdr, msg) = CmMessage::parse(&mad).unwrap();
        assert_eq!(hdr.transaction_id, 7);
        assert_eq!(hdr.attribute_id, attr::RTU);
        assert_eq!(msg.local_id(), 0x1122_3344);
        assert_eq!(msg.remote_id(), 0x5566_7788);
        assert_eq!(msg.private_data().len(), private_len::RTU);
        assert_eq!(&msg.private_data()[..2], b"hi");
        assert!(msg.private_data()[2..].iter().all(|&b| b == 0));
    }

    #[test]
    fn test_impossible_len_and_class() {
        let mut mad = [0u8; MAD_LEN];
        rtu().emit(1, &mut mad).unwrap();
        assert_eq!(CmMessage::parse(&mad[..255]), Err(CmError::Truncated { have: 255 }));
        mad[1] = 0x04; // not the CM class
        assert!(matches!(CmMessage::parse(&mad), Err(CmError::NotCm { class: 0x04, .. })));
        mad[1] = CLASS_CM;
        mad[16..18].copy_from_slice(&0x0019u16.to_be_bytes()); // LAP
        assert_eq!(CmMessage::parse(&mad), Err(CmError::UnknownAttribute(attr::LAP)));
    }

    #[test]
    fn test_private_data_too_long() {
        let big = [1u8; 93];
        let m = CmMessage::Rej(Rej {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_rejected: 0,
            reject_info_length: 0,
            reason: 8,
            ari: &[],
            private_data: &[0u8; 149],
        });
        let mut mad = [0u8; MAD_LEN];
        assert_eq!(m.emit(1, &mut mad), Err(CmError::PrivateDataTooLong { len: 149, max: 148 }));
        let m = CmMessage::SidrReq(SidrReq { request_id: 1, pkey: 0xFFFF, service_id: 2, private_data: &big });
        assert!(m.emit(1, &mut mad).is_ok());
    }

    #[test]
    fn test_cma_header_v4_and_v6() {
        let h = CmaHeader {
            version: 0,
            src_port: 0x8716,
            src: "10.77.0.3".parse().unwrap(),
            dst: "10.77.0.2".parse().unwrap(),
        };
        let mut b = [0xFFu8; 40];
        h.emit(&mut b);
        assert_eq!(&b[..4], &[0x00, 0x40, 0x87, 0x16]);
        assert_eq!(&b[16..20], &[10, 77, 0, 3]);
        assert!(b[4..16].iter().all(|&x| x == 0));
        assert_eq!(CmaHeader::parse(&b).unwrap(), h);
        let h6 = CmaHeader { version: 0, src_port: 1, src: "fe80::1".parse().unwrap(), dst: "::1".parse().unwrap() };
        h6.emit(&mut b);
        assert_eq!(b[1], 0x60);
        assert_eq!(CmaHeader::parse(&b).unwrap(), h6);
        b[1] = 0x50;
        assert_eq!(CmaHeader::parse(&b), Err(CmaHeaderError::IpVersion(5)));
        assert_eq!(CmaHeader::parse(&b[..35]), Err(CmaHeaderError::Truncated));
    }

    #[test]
    fn test_service_id() {
        assert_eq!(rdma_cm_service_id(port_space::TCP, 7174), 0x0106_1c06);
    }
}
