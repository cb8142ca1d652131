//! Wire layer: RoCEv2 headers, the opcode table, PSN arithmetic and the ICRC.
//!
//! Layer rules: no I/O, no clock, no allocation when parsing; parsing never panics on any input.
//! One file per header (smoltcp style: zero-copy `Xxx<T>` views and plain `XxxRepr` values).
#![forbid(unsafe_code)]

mod view;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod checksum;
pub mod cm;
pub mod cnp;
pub mod deth;
pub mod feth;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod gso_id;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod psn;
pub mod reth;
pub mod short;
pub mod xrceth;

pub use packet::{parse, Headers, Parsed};
pub use psn::{Msn, Psn};

use std::fmt;

/// Why a packet (or a header buffer) was refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum WireError {
    /// Shorter than the headers (and ICRC) it must hold.
    Truncated { need: usize, have: usize },
    /// Transport header version other than 0.
    BadTver(u8),
    /// Not an opcode IBTA defines.
    UnknownOpcode(u8),
    /// A defined opcode urxe does not implement (RD; FLUSH and ATOMIC WRITE on XRC).
    Unsupported(u8),
    /// The packet is not a whole number of 4-byte words.
    NotPadded { len: usize },
    /// Payload on an opcode that carries none.
    PayloadNotAllowed { len: usize },
    /// PadCnt larger than the payload area, or pad on a FIRST/MIDDLE packet.
    BadPad { pad: u8, body: usize },
    /// More payload than the largest MTU.
    PayloadTooLong { len: usize },
    /// Emit: the opcode calls for a header that was not given.
    MissingHeader(&'static str),
    /// Emit: a field value does not fit its wire width.
    FieldRange,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::Truncated { need, have } => write!(f, "truncated: need {need} bytes, have {have}"),
            WireError::BadTver(v) => write!(f, "transport header version {v} (must be 0)"),
            WireError::UnknownOpcode(o) => write!(f, "reserved opcode {o:#04x}"),
            WireError::Unsupported(o) => {
                write!(f, "unsupported opcode {o:#04x} ({})", opcode::Opcode(o))
            }
            WireError::NotPadded { len } => write!(f, "length {len} is not a multiple of 4"),
            WireError::PayloadNotAllowed { len } => write!(f, "{len} bytes of payload on an opcode without payload"),
            WireError::BadPad { pad, body } => write!(f, "pad count {pad} not valid with {body} payload bytes"),
            WireError::PayloadTooLong { len } => write!(f, "payload of {len} bytes exceeds 4096"),
            WireError::MissingHeader(h) => write!(f, "opcode requires {h}"),
            WireError::FieldRange => f.write_str("field value out of range"),
        }
    }
}

impl std::error::Error for WireError {}
