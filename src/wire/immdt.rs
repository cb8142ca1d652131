//! Immediate Data Extended Transport Header (IBTA Vol 1 §9.3.6, 4 bytes).
//!
//! The value is opaque to the transport; verbs hand it to the application as `__be32`. We keep
//! it as the four wire bytes read big-endian (`ImmDtRepr::value`), and the engine converts to the
//! in-memory representation the application sees.

use super::view::header_view;

header_view!(
    /// Zero-copy ImmDt view.
    ImmDt,
    4
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    pub fn value(&self) -> u32 {
        self.be32(0)
    }
}

/// ImmDt value (big-endian interpretation of the 4 wire bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ImmDtRepr {
    pub value: u32,
}

impl ImmDtRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &ImmDt<T>) -> ImmDtRepr {
        ImmDtRepr { value: h.value() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ImmDt<T>) {
        h.set_be32(0, self.value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit() {
        let b = [0xDE, 0xAD, 0xBE, 0xEF];
        let r = ImmDtRepr::parse(&ImmDt::new_checked(&b[..]).unwrap());
        assert_eq!(r.value, 0xDEAD_BEEF);
        let mut out = [0u8; 4];
        r.emit(&mut ImmDt::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert!(ImmDt::new_checked(&b[..3]).is_err());
    }
}
