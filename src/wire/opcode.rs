//! The BTH OpCode table (IBTA Vol 1 §9.2.1, Table 38 "OpCode field"; RoCEv2 annex A17.9.3 for
//! CNP). One `const` table drives which extension headers a packet carries, in what order and at
//! what offsets, whether it may carry payload, and its place in a message.
//!
//! The top 3 bits select the transport (RC 000, UC 001, RD 010, UD 011, CNP 100, XRC 101), the
//! low 5 bits the operation. urxe implements RC (with FLUSH and ATOMIC WRITE), UC, UD and XRC
//! (without them) and recognises CNP; RD is recognised and reported as unsupported.

use std::fmt;

/// Transport service encoded in the opcode's top three bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    Rc,
    Uc,
    Rd,
    Ud,
    Cnp,
    Xrc,
    Reserved,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Reserved => "RSVD",
        }
    }
}

/// What an opcode does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum OpKind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    AtomicAck,
    CompareSwap,
    FetchAdd,
    Flush,
    AtomicWrite,
    Resync,
    Cnp,
    Unknown,
}

/// Place of a packet within a multi-packet message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// Starts a message (FIRST or ONLY).
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Ends a message (LAST or ONLY).
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The set of extension headers after the BTH, as a bitset. Their order on the wire is fixed
/// (IBTA §9.2 figure 35, FETH from release 1.5): RDETH, DETH, XRCETH, FETH, RETH, AtomicETH,
/// AETH, AtomicAckETH, ImmDt/IETH; [`HeaderSet::walk`] follows that order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    pub const NONE: HeaderSet = HeaderSet(0);
    pub const RDETH: HeaderSet = HeaderSet(1 << 0);
    pub const DETH: HeaderSet = HeaderSet(1 << 1);
    pub const XRCETH: HeaderSet = HeaderSet(1 << 2);
    /// FLUSH's FETH comes before its RETH (IBTA 1.5 §9.2; rxe_opcode.c agrees).
    pub const FETH: HeaderSet = HeaderSet(1 << 3);
    pub const RETH: HeaderSet = HeaderSet(1 << 4);
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 5);
    pub const AETH: HeaderSet = HeaderSet(1 << 6);
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 7);
    pub const IMMDT: HeaderSet = HeaderSet(1 << 8);
    pub const IETH: HeaderSet = HeaderSet(1 << 9);
    /// A CNP's 16 reserved bytes (RoCEv2 annex A17.9.3), treated as a header.
    pub const CNP_PAD: HeaderSet = HeaderSet(1 << 10);

    /// Wire order and sizes.
    const ORDER: [(HeaderSet, usize); 11] = [
        (HeaderSet::RDETH, 4),
        (HeaderSet::DETH, 8),
        (HeaderSet::XRCETH, 4),
        (HeaderSet::FETH, 4),
        (HeaderSet::RETH, 16),
        (HeaderSet::ATOMIC_ETH, 28),
        (HeaderSet::AETH, 4),
        (HeaderSet::ATOMIC_ACK_ETH, 8),
        (HeaderSet::IMMDT, 4),
        (HeaderSet::IETH, 4),
        (HeaderSet::CNP_PAD, 16),
    ];

    pub const fn union(self, o: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | o.0)
    }
    pub const fn contains(self, o: HeaderSet) -> bool {
        self.0 & o.0 == o.0
    }

    /// Bytes of extension headers (excluding the BTH).
    #[inline]
    pub const fn len(self) -> usize {
        // ORDER lists the headers by bit position, so bit i's size is ORDER[i].1.
        let mut n = 0;
        let mut bits = self.0;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            if i < Self::ORDER.len() {
                n += Self::ORDER[i].1;
            }
            bits &= bits - 1;
        }
        n
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The headers of this set in wire order, each with its offset from the start of the BTH:
    /// one pass, as long as the set is (nothing to do for a SEND).
    #[inline]
    pub const fn walk(self) -> HeaderWalk {
        HeaderWalk { bits: self.0, at: crate::wire::bth::BTH_LEN }
    }
}

/// Iterator of [`HeaderSet::walk`]: `(header, offset from the BTH's start)`.
pub struct HeaderWalk {
    bits: u16,
    at: usize,
}

impl Iterator for HeaderWalk {
    type Item = (HeaderSet, usize);

    #[inline]
    fn next(&mut self) -> Option<(HeaderSet, usize)> {
        if self.bits == 0 {
            return None;
        }
        let i = self.bits.trailing_zeros() as usize;
        let one = HeaderSet(1 << i);
        let at = self.at;
        // Bits past ORDER are never set by the opcode table; they would only add nothing.
        self.at += if i < HeaderSet::ORDER.len() { HeaderSet::ORDER[i].1 } else { 0 };
        self.bits &= self.bits - 1;
        Some((one, at))
    }
}

impl fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 11] =
            ["RDETH", "DETH", "XRCETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "CNP"];
        let mut l = f.debug_set();
        for (i, (h, _)) in HeaderSet::ORDER.iter().enumerate() {
            if self.contains(*h) {
                l.entry(&NAMES[i]);
            }
        }
        l.finish()
    }
}

/// Everything the table knows about one opcode value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpInfo {
    /// Operation name without the transport, e.g. `SEND_FIRST`.
    pub name: &'static str,
    pub transport: Transport,
    pub kind: OpKind,
    pub position: Option<Position>,
    pub headers: HeaderSet,
    /// The packet may carry payload.
    pub payload: bool,
    /// Requester-to-responder packet (as opposed to a response/ACK).
    pub request: bool,
    /// urxe implements it.
    pub supported: bool,
}

impl OpInfo {
    const UNKNOWN: OpInfo = OpInfo {
        name: "RESERVED",
        transport: Transport::Reserved,
        kind: OpKind::Unknown,
        position: None,
        headers: HeaderSet::NONE,
        payload: false,
        request: false,
        supported: false,
    };

    /// The value is a defined opcode (supported or merely recognised).
    pub const fn is_known(&self) -> bool {
        !matches!(self.kind, OpKind::Unknown)
    }

    /// BTH plus extension headers.
    pub const fn header_len(&self) -> usize {
        crate::wire::bth::BTH_LEN + self.headers.len()
    }

    pub const fn is_response(&self) -> bool {
        self.is_known() && !self.request && !matches!(self.kind, OpKind::Cnp)
    }
}

/// An opcode value with table lookups.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    pub const fn info(self) -> &'static OpInfo {
        &OPCODES[self.0 as usize]
    }
    pub const fn value(self) -> u8 {
        self.0
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self)
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.info();
        if i.is_known() {
            write!(f, "{} {}", i.transport.name(), i.name)
        } else {
            write!(f, "opcode {:#04x}", self.0)
        }
    }
}

// Low 5 bits of the common operations (Table 38).
const SEND_FIRST: u8 = 0x00;
const SEND_MIDDLE: u8 = 0x01;
const SEND_LAST: u8 = 0x02;
const SEND_LAST_IMM: u8 = 0x03;
const SEND_ONLY: u8 = 0x04;
const SEND_ONLY_IMM: u8 = 0x05;
const WRITE_FIRST: u8 = 0x06;
const WRITE_MIDDLE: u8 = 0x07;
const WRITE_LAST: u8 = 0x08;
const WRITE_LAST_IMM: u8 = 0x09;
const WRITE_ONLY: u8 = 0x0A;
const WRITE_ONLY_IMM: u8 = 0x0B;
const READ_REQUEST: u8 = 0x0C;
const READ_RESPONSE_FIRST: u8 = 0x0D;
const READ_RESPONSE_MIDDLE: u8 = 0x0E;
const READ_RESPONSE_LAST: u8 = 0x0F;
const READ_RESPONSE_ONLY: u8 = 0x10;
const ACKNOWLEDGE: u8 = 0x11;
const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
const COMPARE_SWAP: u8 = 0x13;
const FETCH_ADD: u8 = 0x14;
const RESYNC: u8 = 0x15;
const SEND_LAST_INV: u8 = 0x16;
const SEND_ONLY_INV: u8 = 0x17;
const FLUSH: u8 = 0x1C;
const ATOMIC_WRITE: u8 = 0x1D;

const RC: u8 = 0x00;
const UC: u8 = 0x20;
const RD: u8 = 0x40;
const UD: u8 = 0x60;
const XRC: u8 = 0xA0;

/// Named opcode values.
pub mod op {
    use super::*;
    pub const RC_SEND_FIRST: u8 = RC | SEND_FIRST;
    pub const RC_SEND_MIDDLE: u8 = RC | SEND_MIDDLE;
    pub const RC_SEND_LAST: u8 = RC | SEND_LAST;
    pub const RC_SEND_LAST_WITH_IMMEDIATE: u8 = RC | SEND_LAST_IMM;
    pub const RC_SEND_ONLY: u8 = RC | SEND_ONLY;
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: u8 = RC | SEND_ONLY_IMM;
    pub const RC_RDMA_WRITE_FIRST: u8 = RC | WRITE_FIRST;
    pub const RC_RDMA_WRITE_MIDDLE: u8 = RC | WRITE_MIDDLE;
    pub const RC_RDMA_WRITE_LAST: u8 = RC | WRITE_LAST;
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = RC | WRITE_LAST_IMM;
    pub const RC_RDMA_WRITE_ONLY: u8 = RC | WRITE_ONLY;
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = RC | WRITE_ONLY_IMM;
    pub const RC_RDMA_READ_REQUEST: u8 = RC | READ_REQUEST;
    pub const RC_RDMA_READ_RESPONSE_FIRST: u8 = RC | READ_RESPONSE_FIRST;
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: u8 = RC | READ_RESPONSE_MIDDLE;
    pub const RC_RDMA_READ_RESPONSE_LAST: u8 = RC | READ_RESPONSE_LAST;
    pub const RC_RDMA_READ_RESPONSE_ONLY: u8 = RC | READ_RESPONSE_ONLY;
    pub const RC_ACKNOWLEDGE: u8 = RC | ACKNOWLEDGE;
    pub const RC_ATOMIC_ACKNOWLEDGE: u8 = RC | ATOMIC_ACKNOWLEDGE;
    pub const RC_COMPARE_SWAP: u8 = RC | COMPARE_SWAP;
    pub const RC_FETCH_ADD: u8 = RC | FETCH_ADD;
    pub const RC_SEND_LAST_WITH_INVALIDATE: u8 = RC | SEND_LAST_INV;
    pub const RC_SEND_ONLY_WITH_INVALIDATE: u8 = RC | SEND_ONLY_INV;
    pub const RC_FLUSH: u8 = RC | FLUSH;
    pub const RC_ATOMIC_WRITE: u8 = RC | ATOMIC_WRITE;

    pub const UC_SEND_FIRST: u8 = UC | SEND_FIRST;
    pub const UC_SEND_MIDDLE: u8 = UC | SEND_MIDDLE;
    pub const UC_SEND_LAST: u8 = UC | SEND_LAST;
    pub const UC_SEND_LAST_WITH_IMMEDIATE: u8 = UC | SEND_LAST_IMM;
    pub const UC_SEND_ONLY: u8 = UC | SEND_ONLY;
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: u8 = UC | SEND_ONLY_IMM;
    pub const UC_RDMA_WRITE_FIRST: u8 = UC | WRITE_FIRST;
    pub const UC_RDMA_WRITE_MIDDLE: u8 = UC | WRITE_MIDDLE;
    pub const UC_RDMA_WRITE_LAST: u8 = UC | WRITE_LAST;
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: u8 = UC | WRITE_LAST_IMM;
    pub const UC_RDMA_WRITE_ONLY: u8 = UC | WRITE_ONLY;
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: u8 = UC | WRITE_ONLY_IMM;

    pub const UD_SEND_ONLY: u8 = UD | SEND_ONLY;
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: u8 = UD | SEND_ONLY_IMM;

    /// Congestion Notification Packet (RoCEv2 annex A17.9.3).
    pub const CNP: u8 = 0x81;
}

/// One row of the per-transport operation list: low 5 bits, name, kind, position, headers,
/// payload allowed, request.
type OpRow = (u8, &'static str, OpKind, Option<Position>, HeaderSet, bool, bool);

/// Fills the common operations of one transport at `base`; `extra` is RDETH+DETH for RD and
/// XRCETH for XRC. Which operations exist per transport follows Table 38.
const fn fill(mut t: [OpInfo; 256], base: u8, tr: Transport, extra: HeaderSet, supported: bool) -> [OpInfo; 256] {
    use HeaderSet as H;
    use OpKind::*;
    use Position::*;
    let full = matches!(tr, Transport::Rc | Transport::Rd | Transport::Xrc);
    let is_ud = matches!(tr, Transport::Ud);
    let ops: [OpRow; 26] = [
        (SEND_FIRST, "SEND_FIRST", Send, Some(First), H::NONE, true, true),
        (SEND_MIDDLE, "SEND_MIDDLE", Send, Some(Middle), H::NONE, true, true),
        (SEND_LAST, "SEND_LAST", Send, Some(Last), H::NONE, true, true),
        (SEND_LAST_IMM, "SEND_LAST_WITH_IMMEDIATE", Send, Some(Last), H::IMMDT, true, true),
        (SEND_ONLY, "SEND_ONLY", Send, Some(Only), H::NONE, true, true),
        (SEND_ONLY_IMM, "SEND_ONLY_WITH_IMMEDIATE", Send, Some(Only), H::IMMDT, true, true),
        (WRITE_FIRST, "RDMA_WRITE_FIRST", Write, Some(First), H::RETH, true, true),
        (WRITE_MIDDLE, "RDMA_WRITE_MIDDLE", Write, Some(Middle), H::NONE, true, true),
        (WRITE_LAST, "RDMA_WRITE_LAST", Write, Some(Last), H::NONE, true, true),
        (WRITE_LAST_IMM, "RDMA_WRITE_LAST_WITH_IMMEDIATE", Write, Some(Last), H::IMMDT, true, true),
        (WRITE_ONLY, "RDMA_WRITE_ONLY", Write, Some(Only), H::RETH, true, true),
        (WRITE_ONLY_IMM, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", Write, Some(Only), H::RETH.union(H::IMMDT), true, true),
        (READ_REQUEST, "RDMA_READ_REQUEST", ReadRequest, None, H::RETH, false, true),
        (READ_RESPONSE_FIRST, "RDMA_READ_RESPONSE_FIRST", ReadResponse, Some(First), H::AETH, true, false),
        (READ_RESPONSE_MIDDLE, "RDMA_READ_RESPONSE_MIDDLE", ReadResponse, Some(Middle), H::NONE, true, false),
        (READ_RESPONSE_LAST, "RDMA_READ_RESPONSE_LAST", ReadResponse, Some(Last), H::AETH, true, false),
        (READ_RESPONSE_ONLY, "RDMA_READ_RESPONSE_ONLY", ReadResponse, Some(Only), H::AETH, true, false),
        (ACKNOWLEDGE, "ACKNOWLEDGE", Ack, None, H::AETH, false, false),
        (ATOMIC_ACKNOWLEDGE, "ATOMIC_ACKNOWLEDGE", AtomicAck, None, H::AETH.union(H::ATOMIC_ACK_ETH), false, false),
        (COMPARE_SWAP, "COMPARE_SWAP", CompareSwap, None, H::ATOMIC_ETH, false, true),
        (FETCH_ADD, "FETCH_ADD", FetchAdd, None, H::ATOMIC_ETH, false, true),
        (RESYNC, "RESYNC", Resync, None, H::NONE, false, true),
        (SEND_LAST_INV, "SEND_LAST_WITH_INVALIDATE", Send, Some(Last), H::IETH, true, true),
        (SEND_ONLY_INV, "SEND_ONLY_WITH_INVALIDATE", Send, Some(Only), H::IETH, true, true),
        (FLUSH, "FLUSH", Flush, None, H::RETH.union(H::FETH), false, true),
        (ATOMIC_WRITE, "ATOMIC_WRITE", AtomicWrite, None, H::RETH, true, true),
    ];
    let mut i = 0;
    while i < ops.len() {
        let (low, name, kind, pos, hdr, payload, request) = ops[i];
        let is_send = matches!(kind, Send);
        let is_write = matches!(kind, Write);
        let exists = if is_ud {
            // UD: SEND ONLY and SEND ONLY with immediate.
            low == SEND_ONLY || low == SEND_ONLY_IMM
        } else if !full {
            // UC: SEND and RDMA WRITE, without invalidate.
            (is_send && low != SEND_LAST_INV && low != SEND_ONLY_INV) || is_write
        } else if matches!(tr, Transport::Rd) {
            // RD has RESYNC and no invalidate/flush/atomic-write.
            low <= FETCH_ADD || low == RESYNC
        } else {
            // RC and XRC: everything but RESYNC (an RD operation).
            low != RESYNC
        };
        if exists {
            // Responses carry no RDETH/DETH/XRCETH beyond what the transport puts on them:
            // RD responses carry RDETH only; XRC responses carry no XRCETH.
            let ext = if request {
                extra
            } else if matches!(tr, Transport::Rd) {
                HeaderSet::RDETH
            } else {
                HeaderSet::NONE
            };
            // FLUSH and ATOMIC WRITE are implemented on RC only.
            let sup = supported && (!matches!(kind, Flush | AtomicWrite) || matches!(tr, Transport::Rc));
            t[(base | low) as usize] = OpInfo {
                name,
                transport: tr,
                kind,
                position: pos,
                headers: ext.union(hdr),
                payload,
                request,
                supported: sup,
            };
        }
        i += 1;
    }
    t
}

const fn build() -> [OpInfo; 256] {
    let t = [OpInfo::UNKNOWN; 256];
    let t = fill(t, RC, Transport::Rc, HeaderSet::NONE, true);
    let t = fill(t, UC, Transport::Uc, HeaderSet::NONE, true);
    let t = fill(t, RD, Transport::Rd, HeaderSet::RDETH.union(HeaderSet::DETH), false);
    let t = fill(t, UD, Transport::Ud, HeaderSet::DETH, true);
    let mut t = fill(t, XRC, Transport::Xrc, HeaderSet::XRCETH, true);
    t[op::CNP as usize] = OpInfo {
        name: "CNP",
        transport: Transport::Cnp,
        kind: OpKind::Cnp,
        position: None,
        headers: HeaderSet::CNP_PAD,
        payload: false,
        request: false,
        supported: true,
    };
    t
}

/// The table, indexed by opcode value.
pub static OPCODES: [OpInfo; 256] = build();

#[cfg(test)]
mod tests {
    use super::op::*;
    use super::*;

    #[test]
    fn table_counts_per_transport() {
        let count = |tr: Transport| OPCODES.iter().filter(|i| i.transport == tr).count();
        assert_eq!(count(Transport::Rc), 25);
        assert_eq!(count(Transport::Uc), 12);
        assert_eq!(count(Transport::Ud), 2);
        assert_eq!(count(Transport::Cnp), 1);
        assert_eq!(count(Transport::Rd), 22);
        assert_eq!(count(Transport::Xrc), 25);
        let supported = OPCODES.iter().filter(|i| i.supported).count();
        // Every RC opcode (FLUSH and ATOMIC WRITE included), every XRC one but those two.
        assert_eq!(supported, 25 + 12 + 2 + 1 + 23);
    }

    #[test]
    fn every_value_has_a_consistent_entry() {
        for v in 0..=255u8 {
            let i = Opcode(v).info();
            if !i.is_known() {
                assert!(!i.supported, "{v:#x}");
                assert_eq!(i.transport, Transport::Reserved);
                continue;
            }
            // Message positions exist exactly for SEND, WRITE and READ responses.
            assert_eq!(
                i.position.is_some(),
                matches!(i.kind, OpKind::Send | OpKind::Write | OpKind::ReadResponse),
                "{v:#x}"
            );
            // Only responses carry AETH; all of them do but READ RESPONSE MIDDLE.
            let middle = i.kind == OpKind::ReadResponse && i.position == Some(Position::Middle);
            assert_eq!(i.headers.contains(HeaderSet::AETH), i.is_response() && !middle, "{v:#x}");
            if i.headers.contains(HeaderSet::RETH) || i.headers.contains(HeaderSet::ATOMIC_ETH) {
                assert!(i.request, "{v:#x}");
            }
            assert_eq!(i.header_len() % 4, 0);
            let top = v >> 5;
            let tr = [Transport::Rc, Transport::Uc, Transport::Rd, Transport::Ud, Transport::Cnp, Transport::Xrc];
            assert_eq!(i.transport, tr[top as usize], "{v:#x}");
        }
    }

    /// Offset of header `h` from the start of the BTH in set `s`, as `walk` gives it.
    fn offset_of(s: HeaderSet, h: HeaderSet) -> Option<usize> {
        s.walk().find(|&(x, _)| x == h).map(|(_, o)| o)
    }

    #[test]
    fn header_order_is_by_bit_position() {
        // len() and walk() rely on ORDER[i] being bit i.
        for (i, (h, _)) in HeaderSet::ORDER.iter().enumerate() {
            assert_eq!(h.0, 1 << i);
        }
        // And offsets agree with a plain walk over the wire order for every opcode.
        for info in OPCODES.iter() {
            let mut off = crate::wire::bth::BTH_LEN;
            let mut expected = Vec::new();
            for (h, size) in HeaderSet::ORDER {
                if info.headers.contains(h) {
                    assert_eq!(offset_of(info.headers, h), Some(off));
                    expected.push((h, off));
                    off += size;
                } else {
                    assert_eq!(offset_of(info.headers, h), None);
                }
            }
            assert_eq!(info.header_len(), off);
            // walk() yields exactly those headers, in wire order, at those offsets.
            assert_eq!(info.headers.walk().collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn header_offsets_follow_wire_order() {
        let i = Opcode(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).info();
        assert_eq!(i.header_len(), 12 + 16 + 4);
        assert_eq!(offset_of(i.headers, HeaderSet::RETH), Some(12));
        assert_eq!(offset_of(i.headers, HeaderSet::IMMDT), Some(28));
        let a = Opcode(RC_ATOMIC_ACKNOWLEDGE).info();
        assert_eq!(offset_of(a.headers, HeaderSet::AETH), Some(12));
        assert_eq!(offset_of(a.headers, HeaderSet::ATOMIC_ACK_ETH), Some(16));
        assert_eq!(a.header_len(), 24);
        let u = Opcode(UD_SEND_ONLY_WITH_IMMEDIATE).info();
        assert_eq!(offset_of(u.headers, HeaderSet::DETH), Some(12));
        assert_eq!(offset_of(u.headers, HeaderSet::IMMDT), Some(20));
        assert_eq!(offset_of(u.headers, HeaderSet::RETH), None);
        assert_eq!(Opcode(RC_COMPARE_SWAP).info().header_len(), 40);
        assert_eq!(Opcode(CNP).info().header_len(), 28);
        assert_eq!(Opcode(RC_RDMA_READ_REQUEST).info().header_len(), 28);
    }

    #[test]
    fn names_and_flags_of_well_known_opcodes() {
        assert_eq!(Opcode(0x04).to_string(), "RC SEND_ONLY");
        assert_eq!(Opcode(0x64).to_string(), "UD SEND_ONLY");
        assert_eq!(Opcode(0x81).to_string(), "CNP CNP");
        assert_eq!(Opcode(0xFF).to_string(), "opcode 0xff");
        let f = Opcode(RC_SEND_FIRST).info();
        assert!(f.payload && f.request && f.supported && f.position == Some(Position::First));
        assert!(!Opcode(RC_ACKNOWLEDGE).info().payload);
        let fl = Opcode(RC_FLUSH).info();
        assert!(fl.supported && fl.request && !fl.payload && fl.position.is_none());
        // BTH, FETH, RETH: the FETH sits right after the BTH.
        assert_eq!(offset_of(fl.headers, HeaderSet::FETH), Some(12));
        assert_eq!(offset_of(fl.headers, HeaderSet::RETH), Some(16));
        assert_eq!(fl.header_len(), 32);
        let aw = Opcode(RC_ATOMIC_WRITE).info();
        assert!(aw.supported && aw.request && aw.payload && aw.header_len() == 28);
        assert!(!Opcode(0xBC).info().supported, "XRC FLUSH is recognised only");
        assert!(!Opcode(0x44).info().supported && Opcode(0x44).info().is_known(), "RD is recognised");
        assert!(Opcode(0xA4).info().supported, "XRC is implemented");
        assert!(!Opcode(0xBC).info().supported && Opcode(0xBC).info().is_known(), "XRC FLUSH is recognised");
        assert!(!Opcode(0x15).info().is_known(), "RESYNC is RD-only");
        assert!(!Opcode(0x36).info().is_known(), "UC has no SEND with invalidate");
        assert!(!Opcode(0x60).info().is_known(), "UD has only SEND ONLY");
    }
}
