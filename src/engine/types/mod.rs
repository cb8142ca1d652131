//! Engine API types: the values that cross between the engine and its drivers (transport,
//! provider, simulator). They mirror verbs semantics, and their bit values and discriminants are
//! the `<infiniband/verbs.h>` ones so the provider converts field by field without tables.
//!
//! No behaviour lives here beyond small conversions; the engine modules own the rules.

macro_rules! bitflags_u32 {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $flag:ident = $val:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);
        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($val);)*
            /// No bits.
            pub const EMPTY: $name = $name(0);
            /// Every bit this type names.
            pub const ALL: $name = $name(0 $(| $val)*);
            pub const fn bits(self) -> u32 { self.0 }
            pub const fn contains(self, other: $name) -> bool { self.0 & other.0 == other.0 }
            pub const fn intersects(self, other: $name) -> bool { self.0 & other.0 != 0 }
            pub const fn union(self, other: $name) -> $name { $name(self.0 | other.0) }
            /// Bits set that this type does not name.
            pub const fn unknown_bits(self) -> u32 { self.0 & !Self::ALL.0 }
        }
        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) { self.0 |= o.0 }
        }
        impl std::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, o: $name) -> $name { $name(self.0 & o.0) }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                let mut first = true;
                $(if self.contains($name::$flag) && $val != 0 {
                    if !first { write!(f, "|")?; }
                    write!(f, "{}", stringify!($flag))?;
                    first = false;
                })*
                if self.unknown_bits() != 0 {
                    if !first { write!(f, "|")?; }
                    write!(f, "{:#x}", self.unknown_bits())?;
                }
                write!(f, ")")
            }
        }
    };
}

mod config;
mod event;
mod flags;
mod handles;
mod io;
mod objects;
mod qp;
mod wc;
mod wr;

pub use config::*;
pub use event::*;
pub use flags::*;
pub use handles::*;
pub use io::*;
pub use objects::*;
pub use qp::*;
pub use wc::*;
pub use wr::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_for_netdev_matches_rxe_rule() {
        assert_eq!(Mtu::for_netdev(1500), Some(Mtu::Mtu1024));
        assert_eq!(Mtu::for_netdev(9000), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_netdev(65536), Some(Mtu::Mtu4096));
        assert_eq!(Mtu::for_netdev(300), None);
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    }

    #[test]
    fn flag_helpers_report_unknown_bits() {
        let m = QpAttrMask::STATE | QpAttrMask::AV;
        assert!(m.contains(QpAttrMask::STATE));
        assert_eq!(QpAttrMask(1 << 30).unknown_bits(), 1 << 30);
        assert_eq!(format!("{:?}", SendFlags::SIGNALED | SendFlags::INLINE), "SendFlags(SIGNALED|INLINE)");
    }
}
