//! Atomic Acknowledge Extended Transport Header (IBTA Vol 1 §9.5.3, 8 bytes): the original value
//! of the target before the atomic.

use super::view::header_view;

header_view!(
    /// Zero-copy AtomicAckETH view.
    AtomicAckEth,
    8
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    pub fn orig(&self) -> u64 {
        self.be64(0)
    }
}

/// AtomicAckETH value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AtomicAckEthRepr {
    pub orig: u64,
}

impl AtomicAckEthRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEth<T>) -> AtomicAckEthRepr {
        AtomicAckEthRepr { orig: h.orig() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEth<T>) {
        h.set_be64(0, self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit() {
        let b = [0, 0, 0, 0, 0, 0, 0x01, 0x02];
        let r = AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(&b[..]).unwrap());
        assert_eq!(r.orig, 0x102);
        let mut out = [0u8; 8];
        r.emit(&mut AtomicAckEth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert!(AtomicAckEth::new_checked(&b[..7]).is_err());
    }
}
