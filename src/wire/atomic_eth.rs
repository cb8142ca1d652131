//! Atomic Extended Transport Header (IBTA Vol 1 §9.3.4, 28 bytes): VA, R_Key, swap (or add)
//! data, compare data. Carried by COMPARE SWAP and FETCH ADD.

use super::view::header_view;

header_view!(
    /// Zero-copy AtomicETH view.
    AtomicEth,
    28
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    pub fn va(&self) -> u64 {
        self.be64(0)
    }
    pub fn rkey(&self) -> u32 {
        self.be32(8)
    }
    /// Swap data (COMPARE SWAP) or add data (FETCH ADD).
    pub fn swap_add(&self) -> u64 {
        self.be64(12)
    }
    pub fn compare(&self) -> u64 {
        self.be64(20)
    }
}

/// AtomicETH values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEthRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEth<T>) -> AtomicEthRepr {
        AtomicEthRepr { va: h.va(), rkey: h.rkey(), swap_add: h.swap_add(), compare: h.compare() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEth<T>) {
        h.set_be64(0, self.va);
        h.set_be32(8, self.rkey);
        h.set_be64(12, self.swap_add);
        h.set_be64(20, self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit() {
        let r = AtomicEthRepr { va: 0x1122_3344_5566_7788, rkey: 0xAABB_CCDD, swap_add: 7, compare: u64::MAX };
        let mut out = [0u8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut out[..]));
        assert_eq!(&out[..8], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&out[8..12], &[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(&out[12..20], &[0, 0, 0, 0, 0, 0, 0, 7]);
        assert_eq!(&out[20..], &[0xFF; 8]);
        assert_eq!(AtomicEthRepr::parse(&AtomicEth::new_checked(&out[..]).unwrap()), r);
        assert!(AtomicEth::new_checked(&out[..27]).is_err());
    }
}
