//! 24-bit sequence numbers: the PSN (BTH, IBTA §9.2) and the MSN (AETH, §9.3.5).
//!
//! Both wrap at 2^24 and compare by serial arithmetic: `a` is before `b` when
//! `((a - b) << 8) as i32 < 0`. They deliberately do not implement `Ord`: "smaller" has no
//! meaning across the wrap, only "before" within half the space.

macro_rules! seq24 {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// Mask of the 24 significant bits.
            pub const MASK: u32 = 0x00FF_FFFF;

            /// The value modulo 2^24.
            pub const fn new(v: u32) -> Self {
                $name(v & Self::MASK)
            }

            pub const fn value(self) -> u32 {
                self.0
            }

            pub const fn add(self, n: u32) -> Self {
                $name(self.0.wrapping_add(n) & Self::MASK)
            }

            pub const fn sub(self, n: u32) -> Self {
                $name(self.0.wrapping_sub(n) & Self::MASK)
            }

            pub const fn next(self) -> Self {
                self.add(1)
            }

            /// Signed serial distance `self - earlier`, in -2^23 .. 2^23.
            pub const fn distance(self, earlier: Self) -> i32 {
                ((self.0.wrapping_sub(earlier.0) << 8) as i32) >> 8
            }

            /// `self` comes strictly before `other`.
            pub const fn before(self, other: Self) -> bool {
                self.distance(other) < 0
            }

            /// `self` comes strictly after `other`.
            pub const fn after(self, other: Self) -> bool {
                self.distance(other) > 0
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:#08x})", stringify!($name), self.0)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:#08x}", self.0)
            }
        }
    };
}

seq24!(
    /// Packet sequence number (BTH bits 9-11).
    Psn
);
seq24!(
    /// Message sequence number (AETH bytes 1-3).
    Msn
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(0xFF_FFFF).next(), Psn::new(0));
        assert_eq!(Psn::new(0x1_000_005).value(), 5);
        assert_eq!(Psn::new(2).sub(3), Psn::new(0xFF_FFFF));
        assert_eq!(Msn::new(0xFF_FFFE).add(3), Msn::new(1));
    }

    #[test]
    fn serial_comparison_across_the_wrap() {
        let a = Psn::new(0xFF_FFF0);
        let b = Psn::new(0x00_0010);
        assert!(a.before(b));
        assert!(b.after(a));
        assert_eq!(b.distance(a), 0x20);
        assert_eq!(a.distance(b), -0x20);
        assert!(!a.before(a));
        assert_eq!(Psn::new(0x80_0000).distance(Psn::new(0)), -0x80_0000);
    }

    proptest! {
        #[test]
        fn add_then_distance_roundtrips(start in 0u32..0x100_0000, n in 0u32..0x7F_FFFF) {
            let a = Psn::new(start);
            let b = a.add(n);
            prop_assert_eq!(b.distance(a), n as i32);
            prop_assert_eq!(b.sub(n), a);
            prop_assert_eq!(n > 0, a.before(b));
        }
    }
}
