//! Invalidate Extended Transport Header (IBTA Vol 1 §9.3.7, 4 bytes): the R_Key the responder
//! invalidates on SEND with Invalidate.

use super::view::header_view;

header_view!(
    /// Zero-copy IETH view.
    Ieth,
    4
);

impl<T: AsRef<[u8]>> Ieth<T> {
    pub fn rkey(&self) -> u32 {
        self.be32(0)
    }
}

/// IETH value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct IethRepr {
    pub rkey: u32,
}

impl IethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Ieth<T>) -> IethRepr {
        IethRepr { rkey: h.rkey() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ieth<T>) {
        h.set_be32(0, self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit() {
        let b = [0x00, 0x00, 0x05, 0x01];
        let r = IethRepr::parse(&Ieth::new_checked(&b[..]).unwrap());
        assert_eq!(r.rkey, 0x501);
        let mut out = [0u8; 4];
        r.emit(&mut Ieth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert!(Ieth::new_checked(&b[..2]).is_err());
    }
}
