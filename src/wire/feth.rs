//! FLUSH Extended Transport Header (IBTA Vol 1 release 1.5, §9.3.9 "FETH", 4 bytes): carried by
//! the RC FLUSH request between the BTH and the RETH. Bits 3..0 of the last byte are the
//! placement type (bit 0 global visibility, bit 1 persistence), bits 5..4 the selectivity level
//! (0: the RETH's range of the memory region, 1: the whole memory region); the rest is
//! reserved.

use super::view::header_view;

header_view!(
    /// Zero-copy FETH view.
    Feth,
    4
);

/// Placement type bit: make the data globally visible.
pub const PLACEMENT_GLOBAL: u8 = 1;
/// Placement type bit: make the data persistent.
pub const PLACEMENT_PERSISTENT: u8 = 2;
/// Selectivity level: the range the RETH names.
pub const LEVEL_RANGE: u8 = 0;
/// Selectivity level: the whole memory region the R_Key names (the RETH's VA and length are
/// not used).
pub const LEVEL_MR: u8 = 1;

impl<T: AsRef<[u8]>> Feth<T> {
    fn bits(&self) -> u32 {
        self.be32(0)
    }
    pub fn placement(&self) -> u8 {
        (self.bits() & 0xF) as u8
    }
    pub fn level(&self) -> u8 {
        ((self.bits() >> 4) & 0x3) as u8
    }
    /// The 26 reserved bits.
    pub fn reserved(&self) -> u32 {
        self.bits() & !0x3F
    }
}

/// FETH value. Out-of-range fields are truncated to their bit widths on emit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct FethRepr {
    /// Placement type (4 bits): [`PLACEMENT_GLOBAL`] and/or [`PLACEMENT_PERSISTENT`].
    pub placement: u8,
    /// Selectivity level (2 bits): [`LEVEL_RANGE`] or [`LEVEL_MR`].
    pub level: u8,
}

impl FethRepr {
    pub fn parse<T: AsRef<[u8]>>(h: &Feth<T>) -> FethRepr {
        FethRepr { placement: h.placement(), level: h.level() }
    }
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Feth<T>) {
        h.set_be32(0, u32::from(self.placement & 0xF) | (u32::from(self.level & 0x3) << 4));
    }
    /// The fields hold values IBTA defines: a placement type of global and/or persistent (not
    /// none) and a level of range or MR.
    pub fn is_valid(&self) -> bool {
        self.placement != 0
            && self.placement & !(PLACEMENT_GLOBAL | PLACEMENT_PERSISTENT) == 0
            && self.level <= LEVEL_MR
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit() {
        // Persistent placement of the whole MR: level 1 in bits 5..4, type 2 in bits 3..0.
        let b = [0x00, 0x00, 0x00, 0x12];
        let v = Feth::new_checked(&b[..]).unwrap();
        let r = FethRepr::parse(&v);
        assert_eq!(r, FethRepr { placement: PLACEMENT_PERSISTENT, level: LEVEL_MR });
        assert_eq!(v.reserved(), 0);
        assert!(r.is_valid());
        let mut out = [0xFFu8; 4];
        r.emit(&mut Feth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert!(Feth::new_checked(&b[..3]).is_err());
    }

    #[test]
    fn reserved_bits_and_undefined_values_are_seen() {
        let b = [0x80, 0x00, 0x01, 0x31];
        let v = Feth::new_unchecked(&b[..]);
        assert_eq!(v.reserved(), 0x8000_0100);
        let r = FethRepr::parse(&v);
        assert_eq!(r, FethRepr { placement: PLACEMENT_GLOBAL, level: 3 });
        assert!(!r.is_valid(), "level 3 is reserved");
        assert!(!FethRepr { placement: 0, level: 0 }.is_valid(), "no placement type");
        assert!(!FethRepr { placement: 4, level: 0 }.is_valid(), "placement bit 2 is reserved");
        assert!(FethRepr { placement: 3, level: 0 }.is_valid());
    }
}
