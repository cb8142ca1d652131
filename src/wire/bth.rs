//! Base Transport Header (IBTA Vol 1 §9.2, 12 bytes).
//!
//! ```text
//! 0: OpCode | 1: SE MigReq PadCnt(2) TVer(4) | 2-3: P_Key
//! 4: FECN BECN resv6 | 5-7: DestQP | 8: AckReq resv7 | 9-11: PSN
//! ```

use super::psn::Psn;
use super::view::header_view;
use super::WireError;

/// Bytes in a BTH.
pub const BTH_LEN: usize = 12;
/// The default partition key.
pub const DEFAULT_PKEY: u16 = 0xFFFF;

header_view!(
    /// Zero-copy BTH view.
    Bth,
    BTH_LEN
);

impl<T: AsRef<[u8]>> Bth<T> {
    pub fn opcode(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[1] & 0x80 != 0
    }
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[1] & 0x40 != 0
    }
    pub fn pad_cnt(&self) -> u8 {
        (self.buffer.as_ref()[1] >> 4) & 0x3
    }
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[1] & 0x0F
    }
    pub fn pkey(&self) -> u16 {
        self.be16(2)
    }
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[4] & 0x40 != 0
    }
    /// The six reserved bits of byte 4 (sent as zero, ignored on receipt).
    pub fn resv6(&self) -> u8 {
        self.buffer.as_ref()[4] & 0x3F
    }
    pub fn dest_qp(&self) -> u32 {
        self.be24(5)
    }
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[8] & 0x80 != 0
    }
    /// The seven reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.buffer.as_ref()[8] & 0x7F
    }
    pub fn psn(&self) -> Psn {
        Psn::new(self.be24(9))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    pub fn set_opcode(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }
    pub fn set_pad_cnt(&mut self, pad: u8) {
        let b = &mut self.buffer.as_mut()[1];
        *b = (*b & !0x30) | ((pad & 0x3) << 4);
    }
    pub fn set_ack_req(&mut self, on: bool) {
        let b = &mut self.buffer.as_mut()[8];
        *b = (*b & 0x7F) | if on { 0x80 } else { 0 };
    }
    pub fn set_psn(&mut self, psn: Psn) {
        self.set_be24(9, psn.value());
    }
    pub fn set_dest_qp(&mut self, qpn: u32) {
        self.set_be24(5, qpn & 0xFF_FFFF);
    }
    pub fn set_pkey(&mut self, pkey: u16) {
        self.set_be16(2, pkey);
    }
}

/// A BTH as plain values. Reserved bits are not represented: emit writes them as zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BthRepr {
    pub opcode: u8,
    pub solicited: bool,
    pub mig_req: bool,
    pub pad_cnt: u8,
    pub tver: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: Psn,
}

impl Default for BthRepr {
    fn default() -> Self {
        BthRepr {
            opcode: 0,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: 0,
            ack_req: false,
            psn: Psn::new(0),
        }
    }
}

impl BthRepr {
    /// Reads the fields; semantic checks (TVer, opcode) are the packet parser's.
    pub fn parse<T: AsRef<[u8]>>(b: &Bth<T>) -> BthRepr {
        // The view's accessors over a 12-byte array: one bounds check here, and none in them
        // (through the caller's slice each accessor checked its own index: `wire::parse` took
        // 229 instructions per packet in ib_send_lat, this way 182, callgrind).
        let a: &[u8; BTH_LEN] = b.buffer.as_ref()[..BTH_LEN].try_into().expect("a BTH view holds 12 bytes");
        let v = Bth::new_unchecked(a);
        BthRepr {
            opcode: v.opcode(),
            solicited: v.solicited(),
            mig_req: v.mig_req(),
            pad_cnt: v.pad_cnt(),
            tver: v.tver(),
            pkey: v.pkey(),
            fecn: v.fecn(),
            becn: v.becn(),
            dest_qp: v.dest_qp(),
            ack_req: v.ack_req(),
            psn: v.psn(),
        }
    }

    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, b: &mut Bth<T>) -> Result<(), WireError> {
        if self.dest_qp > 0xFF_FFFF || self.pad_cnt > 3 || self.tver > 0xF {
            return Err(WireError::FieldRange);
        }
        let buf = b.buffer.as_mut();
        buf[0] = self.opcode;
        buf[1] = (self.solicited as u8) << 7 | (self.mig_req as u8) << 6 | self.pad_cnt << 4 | self.tver;
        buf[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6;
        buf[8] = (self.ack_req as u8) << 7;
        b.set_pkey(self.pkey);
        b.set_dest_qp(self.dest_qp);
        b.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_send_only.pcap frame 1: RC SEND ONLY, ack_req, QP 0x11.
    const BYTES: [u8; 12] = [0x04, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0x9A, 0x2B, 0x1C];

    #[test]
    fn test_parse() {
        let r = BthRepr::parse(&Bth::new_checked(&BYTES[..]).unwrap());
        assert_eq!(r.opcode, 0x04);
        assert_eq!(r.pkey, 0xFFFF);
        assert_eq!(r.dest_qp, 0x11);
        assert!(r.ack_req && !r.solicited && !r.mig_req && !r.fecn);
        assert_eq!(r.psn, Psn::new(0x9A2B1C));
    }

    #[test]
    fn test_emit() {
        let r = BthRepr::parse(&Bth::new_unchecked(&BYTES[..]));
        let mut out = [0xAAu8; 12];
        r.emit(&mut Bth::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, BYTES);
    }

    #[test]
    fn flags_and_setters() {
        let mut b = [0u8; 12];
        let r = BthRepr { solicited: true, mig_req: true, pad_cnt: 3, becn: true, ..BthRepr::default() };
        let mut v = Bth::new_unchecked(&mut b[..]);
        r.emit(&mut v).unwrap();
        assert!(v.solicited() && v.mig_req() && v.becn() && !v.fecn());
        assert_eq!(v.pad_cnt(), 3);
        v.set_pad_cnt(1);
        v.set_ack_req(true);
        v.set_psn(Psn::new(0xABCDEF));
        assert_eq!((v.pad_cnt(), v.ack_req(), v.psn().value()), (1, true, 0xABCDEF));
        assert_eq!(v.tver(), 0);
        assert_eq!(v.resv6() | v.resv7(), 0);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(Bth::new_checked(&BYTES[..11]), Err(WireError::Truncated { need: 12, have: 11 }));
        let r = BthRepr { dest_qp: 0x100_0000, ..BthRepr::default() };
        assert_eq!(r.emit(&mut Bth::new_unchecked(&mut [0u8; 12][..])), Err(WireError::FieldRange));
    }
}
