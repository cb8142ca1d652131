//! Management Datagram header (IBTA Vol 1 §13.4.2, 24 bytes) and the GSI packet around it.
//!
//! On RoCE, MADs of the communication manager travel as UD SEND_ONLY packets to QP1
//! (BTH + DETH, Q_Key 0x80010000, P_Key 0xFFFF, source QP 1), with a 256-byte MAD as the
//! payload. This file knows the common MAD header; `cm.rs` knows the CM class's messages.

use super::view::header_view;

/// Every MAD is 256 bytes (IBTA §13.4.1).
pub const MAD_LEN: usize = 256;
/// The GSI queue pair's number.
pub const GSI_QPN: u32 = 1;
/// The well-known Q_Key of QP1 (IBTA §13.5.1.1, "GSI Q_Key").
pub const GSI_QKEY: u32 = 0x8001_0000;
/// MAD base version 1.
pub const BASE_VERSION: u8 = 1;
/// Management class of the communication manager (IBTA Vol 1 §13.4.2: class 0x07).
pub const CLASS_CM: u8 = 0x07;
/// The CM class version in use (IBTA Vol 1 §12.6: 2).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method "Send" (IBTA §13.4.5): every CM message uses it.
pub const METHOD_SEND: u8 = 0x03;

header_view!(
    /// Zero-copy MAD header view (the first 24 bytes of a MAD).
    MadHeader,
    24
);

impl<T: AsRef<[u8]>> MadHeader<T> {
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[2]
    }
    /// Method without the response bit (bit 7).
    pub fn method(&self) -> u8 {
        self.buffer.as_ref()[3] & 0x7F
    }
    pub fn is_response(&self) -> bool {
        self.buffer.as_ref()[3] & 0x80 != 0
    }
    pub fn status(&self) -> u16 {
        self.be16(4)
    }
    pub fn class_specific(&self) -> u16 {
        self.be16(6)
    }
    pub fn transaction_id(&self) -> u64 {
        self.be64(8)
    }
    pub fn attribute_id(&self) -> u16 {
        self.be16(16)
    }
    pub fn attribute_modifier(&self) -> u32 {
        self.be32(20)
    }
}

/// MAD header values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct MadHeaderRepr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// Method including the response bit.
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub transaction_id: u64,
    pub attribute_id: u16,
    pub attribute_modifier: u32,
}

impl MadHeaderRepr {
    /// The header of a CM message with this attribute and transaction ID.
    pub fn cm(attribute_id: u16, transaction_id: u64) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id,
            attribute_modifier: 0,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(h: &MadHeader<T>) -> MadHeaderRepr {
        let b = h.buffer.as_ref();
        MadHeaderRepr {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: h.status(),
            class_specific: h.class_specific(),
            transaction_id: h.transaction_id(),
            attribute_id: h.attribute_id(),
            attribute_modifier: h.attribute_modifier(),
        }
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut MadHeader<T>) {
        {
            let b = h.buffer.as_mut();
            b[0] = self.base_version;
            b[1] = self.mgmt_class;
            b[2] = self.class_version;
            b[3] = self.method;
        }
        h.set_be16(4, self.status);
        h.set_be16(6, self.class_specific);
        h.set_be32(8, (self.transaction_id >> 32) as u32);
        h.set_be32(12, self.transaction_id as u32);
        h.set_be16(16, self.attribute_id);
        h.set_be16(18, 0);
        h.set_be32(20, self.attribute_modifier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rdma_cm.pcap frame 1 (kernel rxe, rping's REQ): the 24-byte MAD header.
    const REQ_HDR: [u8; 24] = [
        0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x54, 0x3a, 0x30, 0x35, 0x00, 0x10,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn test_parse_emit() {
        let h = MadHeader::new_checked(&REQ_HDR[..]).unwrap();
        let r = MadHeaderRepr::parse(&h);
        assert_eq!(r, MadHeaderRepr::cm(0x0010, 0x0000_0002_543a_3035));
        assert_eq!(h.method(), METHOD_SEND);
        assert!(!h.is_response());
        let mut out = [0xAAu8; 24];
        r.emit(&mut MadHeader::new_unchecked(&mut out[..]));
        assert_eq!(out, REQ_HDR);
    }

    #[test]
    fn test_impossible_len() {
        assert!(MadHeader::new_checked(&REQ_HDR[..23]).is_err());
    }
}
