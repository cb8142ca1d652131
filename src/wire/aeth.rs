//! ACK Extended Transport Header (IBTA Vol 1 §9.3.5, 4 bytes): syndrome and MSN.
//!
//! Syndrome bits 7-5 select ACK (000, bits 4-0 = credit code), RNR NAK (001, bits 4-0 = RNR
//! timer code) or NAK (011, bits 4-0 = NAK code); 010 is reserved (§9.3.5, Table 43).

use super::psn::Msn;
use super::view::header_view;

header_view!(
    /// Zero-copy AETH view.
    Aeth,
    4
);

impl<T: AsRef<[u8]>> Aeth<T> {
    pub fn syndrome_byte(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    pub fn msn(&self) -> Msn {
        Msn::new(self.be24(1))
    }
}

/// End-to-end credit code (IBTA §9.7.7.2.5, Table 45): the number of receive WQEs the responder
/// advertises. Code 31 means the responder does not do credit-based flow control.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CreditCode(u8);

/// Table 45: code 0..=30 -> credits.
const CREDITS: [u16; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
    8192, 12288, 16384, 24576, 32768,
];

impl CreditCode {
    /// "Invalid credit count": no end-to-end flow control. What rxe always sends.
    pub const UNLIMITED: CreditCode = CreditCode(0x1F);

    pub const fn new(code: u8) -> CreditCode {
        CreditCode(code & 0x1F)
    }
    pub const fn code(self) -> u8 {
        self.0
    }
    /// Credits advertised, `None` for [`CreditCode::UNLIMITED`].
    pub fn credits(self) -> Option<u16> {
        CREDITS.get(self.0 as usize).copied()
    }
    /// The largest code whose credit count does not exceed `n` available WQEs.
    pub fn for_available(n: u32) -> CreditCode {
        let idx = CREDITS.iter().rposition(|&c| c as u32 <= n).unwrap_or(0);
        CreditCode(idx as u8)
    }
}

/// RNR NAK timer code (IBTA §9.7.5.2.8, Table 44): the minimum time the requester waits before
/// retrying after an RNR NAK. Values from the spec (rxe's own table has typos, e.g. code 25).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RnrTimer(u8);

/// Table 44 in units of 10 µs, index = code. Code 0 is the longest, 655.36 ms.
const RNR_10US_UNITS: [u32; 32] = [
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
    6144, 8192, 12288, 16384, 24576, 32768, 49152,
];

impl RnrTimer {
    pub const fn new(code: u8) -> RnrTimer {
        RnrTimer(code & 0x1F)
    }
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The encoded delay in nanoseconds.
    pub const fn nanos(self) -> u64 {
        // Entries are in units of 10 µs (0.01 ms), except code 0 which is 655.36 ms.
        RNR_10US_UNITS[self.0 as usize] as u64 * 10_000
    }
}

/// NAK codes (IBTA §9.3.5, Table 43).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    Reserved(u8),
}

impl NakCode {
    pub const fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1F,
        }
    }
    pub const fn from_code(c: u8) -> NakCode {
        match c & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Syndrome {
    Ack {
        credits: CreditCode,
    },
    RnrNak {
        timer: RnrTimer,
    },
    Nak(NakCode),
    /// Syndrome class 010: reserved.
    Reserved(u8),
}

impl Syndrome {
    pub const fn decode(byte: u8) -> Syndrome {
        let low = byte & 0x1F;
        match byte >> 5 {
            0b000 => Syndrome::Ack { credits: CreditCode::new(low) },
            0b001 => Syndrome::RnrNak { timer: RnrTimer::new(low) },
            0b011 => Syndrome::Nak(NakCode::from_code(low)),
            _ => Syndrome::Reserved(byte),
        }
    }

    pub const fn encode(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits.code(),
            Syndrome::RnrNak { timer } => 0b001 << 5 | timer.code(),
            Syndrome::Nak(code) => 0b011 << 5 | code.code(),
            Syndrome::Reserved(b) => b,
        }
    }

    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

/// AETH values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    pub msn: Msn,
}

impl AethRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Aeth<T>) -> AethRepr {
        AethRepr { syndrome: Syndrome::decode(h.syndrome_byte()), msn: h.msn() }
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Aeth<T>) {
        h.buffer.as_mut()[0] = self.syndrome.encode();
        h.set_be24(1, self.msn.value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_parse_emit_ack_from_rxe() {
        // rxe ACKs carry syndrome 0x1F (no flow control).
        let b = [0x1F, 0x00, 0x00, 0x05];
        let r = AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap());
        assert_eq!(r.syndrome, Syndrome::Ack { credits: CreditCode::UNLIMITED });
        assert_eq!(r.msn, Msn::new(5));
        let mut out = [0u8; 4];
        r.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert!(Aeth::new_checked(&b[..3]).is_err());
    }

    #[test]
    fn syndrome_classes_roundtrip_for_every_byte() {
        for b in 0..=255u8 {
            let s = Syndrome::decode(b);
            assert_eq!(s.encode(), b, "{b:#x}");
            match b >> 5 {
                0 => assert!(s.is_ack()),
                1 => assert!(matches!(s, Syndrome::RnrNak { .. })),
                3 => assert!(matches!(s, Syndrome::Nak(_))),
                _ => assert!(matches!(s, Syndrome::Reserved(_))),
            }
        }
        assert_eq!(Syndrome::Nak(NakCode::PsnSequenceError).encode(), 0x60);
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).encode(), 0x62);
        assert_eq!(Syndrome::RnrNak { timer: RnrTimer::new(12) }.encode(), 0x2C);
    }

    /// IBTA Table 45.
    #[test]
    fn credit_table() {
        let expect = [
            0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
            4096, 6144, 8192, 12288, 16384, 24576, 32768,
        ];
        for (code, &n) in expect.iter().enumerate() {
            assert_eq!(CreditCode::new(code as u8).credits(), Some(n));
        }
        assert_eq!(CreditCode::UNLIMITED.credits(), None);
        assert_eq!(CreditCode::for_available(0).code(), 0);
        assert_eq!(CreditCode::for_available(5).code(), 4);
        assert_eq!(CreditCode::for_available(100).credits(), Some(96));
        assert_eq!(CreditCode::for_available(1 << 20).credits(), Some(32768));
    }

    /// IBTA Table 44 (ms): code 25 is 61.44 ms, not rxe's 61410 µs.
    #[test]
    fn rnr_timer_table() {
        let ms = [
            655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92, 2.56,
            3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
        ];
        for (code, &m) in ms.iter().enumerate() {
            let want = (m * 1_000_000.0f64).round() as u64;
            assert_eq!(RnrTimer::new(code as u8).nanos(), want, "code {code}");
        }
    }

    #[test]
    fn nak_codes() {
        for c in 0..32u8 {
            assert_eq!(NakCode::from_code(c).code(), c);
        }
        assert_eq!(NakCode::from_code(3), NakCode::RemoteOperationalError);
        assert_eq!(NakCode::from_code(9), NakCode::Reserved(9));
    }
}
