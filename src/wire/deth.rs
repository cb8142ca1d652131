//! Datagram Extended Transport Header (IBTA Vol 1 §9.3.2, 8 bytes): Q_Key, reserved byte,
//! source QP. Carried by every UD packet.

use super::view::header_view;

header_view!(
    /// Zero-copy DETH view.
    Deth,
    8
);

impl<T: AsRef<[u8]>> Deth<T> {
    pub fn qkey(&self) -> u32 {
        self.be32(0)
    }
    /// Reserved byte 4 (sent as zero).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[4]
    }
    pub fn src_qp(&self) -> u32 {
        self.be24(5)
    }
}

/// DETH values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct DethRepr {
    pub qkey: u32,
    pub src_qp: u32,
}

impl DethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Deth<T>) -> DethRepr {
        DethRepr { qkey: h.qkey(), src_qp: h.src_qp() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Deth<T>) {
        h.set_be32(0, self.qkey);
        h.buffer.as_mut()[4] = 0;
        h.set_be24(5, self.src_qp & 0xFF_FFFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // ud_send.pcap: Q_Key 0x11111111 from QP 0x11.
    const BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x11];

    #[test]
    fn test_parse_emit() {
        let d = Deth::new_checked(&BYTES[..]).unwrap();
        let r = DethRepr::parse(&d);
        assert_eq!(r, DethRepr { qkey: 0x1111_1111, src_qp: 0x11 });
        assert_eq!(d.reserved(), 0);
        let mut out = [0xFFu8; 8];
        r.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert!(Deth::new_checked(&BYTES[..7]).is_err());
    }
}
