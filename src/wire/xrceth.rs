//! XRC Extended Transport Header (IBTA Vol 1 §9.3.8 / annex A14, 4 bytes): a reserved byte and
//! the 24-bit number of the XRC SRQ the request is for. Carried by every XRC request (opcodes
//! 0xA0..0xBF that are requests); XRC responses carry none. On the wire it follows the BTH
//! (and RDETH/DETH, which XRC never has) and precedes RETH, AtomicETH and ImmDt/IETH.

use super::view::header_view;

header_view!(
    /// Zero-copy XRCETH view.
    XrcEth,
    4
);

impl<T: AsRef<[u8]>> XrcEth<T> {
    /// Reserved byte 0 (sent as zero, ignored on receipt).
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    pub fn srqn(&self) -> u32 {
        self.be24(1)
    }
}

/// XRCETH value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct XrcEthRepr {
    /// XRC SRQ number (24 bits).
    pub srqn: u32,
}

impl XrcEthRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &XrcEth<T>) -> XrcEthRepr {
        XrcEthRepr { srqn: h.srqn() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut XrcEth<T>) {
        h.buffer.as_mut()[0] = 0;
        h.set_be24(1, self.srqn & 0xFF_FFFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit() {
        let b = [0x00, 0x01, 0x02, 0x03];
        let x = XrcEth::new_checked(&b[..]).unwrap();
        assert_eq!((x.reserved(), XrcEthRepr::parse(&x)), (0, XrcEthRepr { srqn: 0x01_0203 }));
        let mut out = [0xFFu8; 4];
        XrcEthRepr { srqn: 0x01_0203 }.emit(&mut XrcEth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn test_emit_masks_to_24_bits_and_clears_reserved() {
        let mut out = [0xFFu8; 4];
        XrcEthRepr { srqn: 0xAB12_3456 }.emit(&mut XrcEth::new_unchecked(&mut out[..]));
        assert_eq!(out, [0x00, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn test_impossible_len() {
        assert!(XrcEth::new_checked(&[0u8; 3][..]).is_err());
    }
}
