//! The steering program of a shared address: a classic BPF program attached to the
//! SO_REUSEPORT group of `addr:4791` (`SO_ATTACH_REUSEPORT_CBPF`, no capability needed) that
//! returns the index of the slot socket a datagram belongs to.
//!
//! The kernel runs it with the UDP header already pulled: offset 0 is the BTH. A return value
//! at or above the group size makes the kernel fall back to its hash (such a datagram is a
//! stray for whichever member gets it); a load past the end of the datagram returns 0.
//!
//! Decisions, in order:
//! - DestQP != 1: the slot is the QPN's bits 16..23 ([`slot_of_qpn`]). Join probes are
//!   ordinary UD packets to QPN `slot << 16` (counter 0, never a QP), so they need no branch.
//! - A slot chosen by QPN or comm ID that has no member (not in [`Steering::live`]) is
//!   replaced by the default slot, whose member drops the datagram as a stray and counts it:
//!   as kernel rxe drops a packet for an unknown QP at once, a datagram for a slot nobody owns
//!   never waits in (and pins the memory of) a socket nobody reads. A joining member is live
//!   in the program before it sends its probe.
//! - DestQP == 1 (GSI): CM MADs (class 0x07) REQ and SIDR_REQ go by service ID through the
//!   listener table compiled into the program, or to the default slot when no listener
//!   matches (it rejects the request); SIDR_REP by its request ID's top byte; every other CM
//!   MAD by its RemoteCommID's top byte (the receiver's own comm ID); other classes go to the
//!   default slot.
//!
//! No I/O here except [`attach`]; the program is a pure function of [`Steering`], tested with
//! a small interpreter below.

use std::io;
use std::mem::size_of;
use std::os::fd::RawFd;

/// Most listeners the table holds (5 instructions each; jumps stay short).
pub const MAX_LISTENERS: usize = 128;

/// QP1, the general services QP (CM MADs).
const GSI_QPN: u32 = 1;
/// Offsets in the UDP payload of a MAD on QP1: BTH (12) + DETH (8) = 20.
const MAD: u32 = 20;
const MAD_CLASS: u32 = MAD + 1;
const MAD_ATTR_ID: u32 = MAD + 16;
/// The CM message body starts after the 24-byte MAD header.
const CM_BODY: u32 = MAD + 24;
/// REQ and SIDR_REQ: ServiceID (8 bytes) at body + 8.
const CM_SERVICE_ID: u32 = CM_BODY + 8;
/// SIDR_REP: RequestID at body + 0.
const CM_REQUEST_ID: u32 = CM_BODY;
/// Every other CM message: RemoteCommID at body + 4.
const CM_REMOTE_COMM_ID: u32 = CM_BODY + 4;
const MGMT_CLASS_CM: u32 = 0x07;
const ATTR_REQ: u32 = 0x0010;
const ATTR_SIDR_REQ: u32 = 0x0017;
const ATTR_SIDR_REP: u32 = 0x0018;
#[cfg(test)]
/// `SKF_NET_OFF`: loads relative to the network header (the interpreter below knows it).
const SKF_NET_OFF: i32 = -0x100000;

/// The slot that owns a QPN (`slot << 16 | n`).
pub fn slot_of_qpn(qpn: u32) -> u8 {
    (qpn >> 16) as u8
}

/// The slot that owns a CM comm ID or SIDR request ID (`slot << 24 | n`).
pub fn slot_of_comm_id(id: u32) -> u8 {
    (id >> 24) as u8
}

/// What the program is compiled from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steering {
    /// Where CM requests for no listener and non-CM MADs go (a live member).
    pub default_slot: u8,
    /// CM service ID -> slot of the listening process.
    pub listeners: Vec<(u64, u8)>,
    /// Slots with a member: datagrams for any other slot go to `default_slot`.
    pub live: Vec<u8>,
}

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// Opcode parts (linux/filter.h, linux/bpf_common.h).
const LD: u16 = 0x00;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const JA: u16 = 0x00;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const ABS: u16 = 0x20;
const AND: u16 = 0x50;
const RSH: u16 = 0x70;
const JEQ: u16 = 0x10;
const K: u16 = 0x00;
const A: u16 = 0x10;

/// A jump target not yet placed.
#[derive(Clone, Copy)]
enum Target {
    /// Fall through (offset 0).
    Next,
    /// Skip this many instructions.
    Skip(u8),
    Label(&'static str),
}

/// A small assembler: instructions with symbolic forward jump targets.
struct Asm {
    insns: Vec<(Insn, Target, Target)>,
    labels: Vec<(&'static str, usize)>,
}

impl Asm {
    fn new() -> Asm {
        Asm { insns: Vec::new(), labels: Vec::new() }
    }
    fn op(&mut self, code: u16, k: u32) {
        self.insns.push((Insn { code, jt: 0, jf: 0, k }, Target::Next, Target::Next));
    }
    fn ld(&mut self, size: u16, off: u32) {
        self.op(LD | size | ABS, off);
    }
    fn ret_k(&mut self, k: u32) {
        self.op(RET | K, k);
    }
    fn ret_a(&mut self) {
        self.op(RET | A, 0);
    }
    /// `goto label` (any distance forward).
    fn ja(&mut self, l: &'static str) {
        self.insns.push((Insn { code: JMP | JA, jt: 0, jf: 0, k: 0 }, Target::Label(l), Target::Next));
    }
    /// `if A == k goto jt else goto jf`.
    fn jeq(&mut self, k: u32, jt: Target, jf: Target) {
        self.insns.push((Insn { code: JMP | JEQ | K, jt: 0, jf: 0, k }, jt, jf));
    }
    fn label(&mut self, name: &'static str) {
        self.labels.push((name, self.insns.len()));
    }
    fn finish(self) -> Result<Vec<Insn>, ProgramError> {
        let resolve = |at: usize, t: Target| -> Result<u8, ProgramError> {
            let dest = match t {
                Target::Next => return Ok(0),
                Target::Skip(n) => return Ok(n),
                Target::Label(l) => {
                    self.labels.iter().find(|(n, _)| *n == l).map(|&(_, i)| i).ok_or(ProgramError::TooLong)?
                }
            };
            let off = dest.checked_sub(at + 1).ok_or(ProgramError::TooLong)?;
            u8::try_from(off).map_err(|_| ProgramError::TooLong)
        };
        let mut out = Vec::with_capacity(self.insns.len());
        for (at, &(mut insn, jt, jf)) in self.insns.iter().enumerate() {
            if insn.code == JMP | JA {
                // The offset is k (32 bits); jt holds the target.
                let Target::Label(l) = jt else { return Err(ProgramError::TooLong) };
                let dest = self.labels.iter().find(|(n, _)| *n == l).map(|&(_, i)| i).ok_or(ProgramError::TooLong)?;
                insn.k = dest.checked_sub(at + 1).ok_or(ProgramError::TooLong)? as u32;
                out.push(insn);
                continue;
            }
            insn.jt = resolve(at, jt)?;
            insn.jf = resolve(at, jf)?;
            out.push(insn);
        }
        Ok(out)
    }
}

/// The program cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramError {
    /// More than [`MAX_LISTENERS`] listeners.
    TooManyListeners(usize),
    /// A jump does not fit (cannot happen with the layout below; checked anyway).
    TooLong,
}

impl std::fmt::Display for ProgramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramError::TooManyListeners(n) => {
                write!(f, "{n} CM listeners on one address; at most {MAX_LISTENERS} are supported")
            }
            ProgramError::TooLong => write!(f, "steering program jump out of range"),
        }
    }
}

impl std::error::Error for ProgramError {}

/// Compiles the steering program.
pub fn program(s: &Steering) -> Result<Vec<Insn>, ProgramError> {
    if s.listeners.len() > MAX_LISTENERS {
        return Err(ProgramError::TooManyListeners(s.listeners.len()));
    }
    let next = Target::Next;
    let mut a = Asm::new();
    a.ld(W, 4);
    a.op(ALU | AND | K, 0x00FF_FFFF);
    a.jeq(GSI_QPN, Target::Label("gsi"), next);
    a.op(ALU | RSH | K, 16);
    a.ja("live");

    // QP1: CM MADs by comm ID / request ID / service ID.
    a.label("gsi");
    a.ld(B, MAD_CLASS);
    a.jeq(MGMT_CLASS_CM, next, Target::Label("default"));
    a.ld(H, MAD_ATTR_ID);
    a.jeq(ATTR_REQ, Target::Label("service"), next);
    a.jeq(ATTR_SIDR_REQ, Target::Label("service"), next);
    a.jeq(ATTR_SIDR_REP, next, Target::Label("comm"));
    a.ld(B, CM_REQUEST_ID);
    a.ja("live");
    a.label("comm");
    a.ld(B, CM_REMOTE_COMM_ID);
    a.ja("live");
    a.label("default");
    a.ret_k(s.default_slot as u32);

    // Listener table: five instructions per entry, each jump to the next entry or a return.
    a.label("service");
    for &(sid, slot) in &s.listeners {
        a.ld(W, CM_SERVICE_ID);
        // On a miss, skip the next three instructions (the low-word check and the return).
        a.jeq((sid >> 32) as u32, next, Target::Skip(3));
        a.ld(W, CM_SERVICE_ID + 4);
        a.jeq(sid as u32, next, Target::Skip(1));
        a.ret_k(slot as u32);
    }
    a.ret_k(s.default_slot as u32);

    // A in 0..=255: that slot if it has a member, else the default slot. Two instructions
    // per live slot.
    a.label("live");
    let mut live = s.live.clone();
    live.sort_unstable();
    live.dedup();
    for &slot in &live {
        a.jeq(slot as u32, next, Target::Skip(1));
        a.ret_a();
    }
    a.ret_k(s.default_slot as u32);
    a.finish()
}

const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// Attaches `prog` to the SO_REUSEPORT group `fd` belongs to, replacing the group's program
/// atomically (any member may do this; no capability needed).
pub fn attach(fd: RawFd, prog: &[Insn]) -> io::Result<()> {
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fprog = libc::sock_fprog { len, filter: prog.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `Insn` is `#[repr(C)]` with the layout of `struct sock_filter` (u16, u8, u8,
    // u32); `prog` outlives the call and `fprog.len` is its length. The kernel copies the
    // program before returning.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
pub(crate) mod interp {
    //! A classic BPF interpreter for the subset [`program`] emits, with the kernel's
    //! reuseport conventions: offset 0 = UDP payload, `SKF_NET_OFF` = network header, a load
    //! past the end returns 0.
    use super::*;

    pub fn run(prog: &[Insn], net: &[u8], payload: &[u8]) -> u32 {
        let mut acc: u32 = 0;
        let mut pc = 0usize;
        for _ in 0..4096 {
            let i = prog[pc];
            pc += 1;
            let class = i.code & 0x07;
            match class {
                0x00 => {
                    let size = match i.code & 0x18 {
                        W => 4,
                        H => 2,
                        _ => 1,
                    };
                    let (buf, off) = if (i.k as i32) < 0 {
                        (net, (i.k as i32 - SKF_NET_OFF) as usize)
                    } else {
                        (payload, i.k as usize)
                    };
                    let Some(bytes) = buf.get(off..off + size) else { return 0 };
                    acc = bytes.iter().fold(0u32, |v, &b| v << 8 | b as u32);
                }
                0x04 => match i.code & 0xF0 {
                    AND => acc &= i.k,
                    RSH => acc >>= i.k,
                    c => panic!("alu {c:#x}"),
                },
                0x05 if i.code == JMP | JA => pc += i.k as usize,
                0x05 => pc += if acc == i.k { i.jt as usize } else { i.jf as usize },
                0x06 => return if i.code & 0x18 == A { acc } else { i.k },
                c => panic!("class {c:#x}"),
            }
        }
        panic!("program did not return");
    }
}

#[cfg(test)]
mod tests {
    use super::interp::run;
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

    fn v4_header(src: Ipv4Addr) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[12..16].copy_from_slice(&src.octets());
        h[16..20].copy_from_slice(&ADDR.octets());
        h
    }

    fn data(qpn: u32) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        b[0] = 0x04;
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    fn mad(class: u8, attr: u16, field_at: u32, field: &[u8]) -> Vec<u8> {
        let mut b = data(1);
        b[0] = 0x64;
        b.resize(12 + 8 + 256 + 4, 0);
        b[MAD as usize] = 1;
        b[MAD_CLASS as usize] = class;
        b[MAD_ATTR_ID as usize..MAD_ATTR_ID as usize + 2].copy_from_slice(&attr.to_be_bytes());
        b[field_at as usize..field_at as usize + field.len()].copy_from_slice(field);
        b
    }

    /// Every slot live: steering by QPN and comm ID alone.
    fn steering(listeners: Vec<(u64, u8)>) -> Steering {
        Steering { default_slot: 3, listeners, live: (0..=255).collect() }
    }

    #[test]
    fn datagrams_for_slots_without_a_member_go_to_the_default_slot() {
        let s = Steering { default_slot: 2, listeners: vec![], live: vec![2, 7, 200] };
        let p = program(&s).unwrap();
        let h = v4_header(Ipv4Addr::new(10, 0, 0, 9));
        for (qpn, slot) in [(0x07_0011, 7), (0xc8_0011, 200), (0x02_0011, 2), (0x05_0011, 2), (0x11, 2), (0xff_0011, 2)]
        {
            assert_eq!(run(&p, &h, &data(qpn)), slot, "qpn {qpn:#x}");
        }
        let rep = mad(7, 0x0013, CM_REMOTE_COMM_ID, &0x0900_1234u32.to_be_bytes());
        assert_eq!(run(&p, &h, &rep), 2, "a comm ID of an unowned slot");
        let rep = mad(7, 0x0013, CM_REMOTE_COMM_ID, &0x0700_1234u32.to_be_bytes());
        assert_eq!(run(&p, &h, &rep), 7);
        let sidr_rep = mad(7, 0x0018, CM_REQUEST_ID, &0x0c00_0007u32.to_be_bytes());
        assert_eq!(run(&p, &h, &sidr_rep), 2, "a request ID of an unowned slot");
        // A joiner's probe reaches it once it is live.
        let probe = super::super::slots::probe(9, IpAddr::V4(ADDR), 1);
        assert_eq!(run(&p, &v4_header(ADDR), &probe), 2);
        let p9 = program(&Steering { live: vec![2, 7, 9, 200], ..s }).unwrap();
        assert_eq!(run(&p9, &v4_header(ADDR), &probe), 9);
    }

    #[test]
    fn data_packets_go_to_the_qpn_high_byte() {
        let p = program(&steering(vec![])).unwrap();
        let h = v4_header(Ipv4Addr::new(10, 0, 0, 9));
        for (qpn, slot) in [(0x11, 0), (0x01_0011, 1), (0x07_ffff, 7), (0xff_0002, 255)] {
            assert_eq!(run(&p, &h, &data(qpn)), slot, "qpn {qpn:#x}");
            assert_eq!(slot_of_qpn(qpn), slot as u8);
        }
    }

    #[test]
    fn cm_mads_go_by_service_id_comm_id_and_request_id() {
        let sid = 0x0000_0000_0106_1c06u64;
        let p = program(&steering(vec![(0x0106_0000_0000_0001, 9), (sid, 5)])).unwrap();
        let h = v4_header(Ipv4Addr::new(10, 0, 0, 9));
        let req = mad(7, 0x0010, CM_SERVICE_ID, &sid.to_be_bytes());
        assert_eq!(run(&p, &h, &req), 5);
        let sidr = mad(7, 0x0017, CM_SERVICE_ID, &0x0106_0000_0000_0001u64.to_be_bytes());
        assert_eq!(run(&p, &h, &sidr), 9);
        // Same high word as the first listener, other low word: no listener -> default slot.
        let miss = mad(7, 0x0010, CM_SERVICE_ID, &0x0106_0000_0000_0002u64.to_be_bytes());
        assert_eq!(run(&p, &h, &miss), 3);
        let rep = mad(7, 0x0013, CM_REMOTE_COMM_ID, &0x0a00_1234u32.to_be_bytes());
        assert_eq!(run(&p, &h, &rep), 10);
        let sidr_rep = mad(7, 0x0018, CM_REQUEST_ID, &0x0c00_0007u32.to_be_bytes());
        assert_eq!(run(&p, &h, &sidr_rep), 12);
        assert_eq!(slot_of_comm_id(0x0c00_0007), 12);
        // A non-CM class (e.g. performance management, 0x04) goes to the default slot.
        let perf = mad(4, 0x0010, CM_SERVICE_ID, &sid.to_be_bytes());
        assert_eq!(run(&p, &h, &perf), 3);
    }

    #[test]
    fn probes_go_to_their_slot_by_qpn() {
        let p = program(&steering(vec![])).unwrap();
        for slot in [0u8, 6, 200] {
            let probe = super::super::slots::probe(slot, IpAddr::V4(ADDR), 42);
            assert_eq!(run(&p, &v4_header(ADDR), &probe), slot as u32);
        }
    }

    #[test]
    fn runts_load_past_the_end_and_get_zero() {
        let p = program(&steering(vec![])).unwrap();
        assert_eq!(run(&p, &v4_header(ADDR), &[0x04, 0, 0]), 0);
    }

    #[test]
    fn full_listener_table_compiles_and_the_last_entry_matches() {
        let ls: Vec<(u64, u8)> =
            (0..MAX_LISTENERS as u64).map(|i| (0x0106_0000_0000_0000 | i, (i % 64) as u8)).collect();
        let p = program(&steering(ls.clone())).unwrap();
        assert!(p.len() < 4096, "{} instructions", p.len());
        let (sid, slot) = *ls.last().unwrap();
        let req = mad(7, 0x0010, CM_SERVICE_ID, &sid.to_be_bytes());
        assert_eq!(run(&p, &v4_header(ADDR), &req), slot as u32);
        let mut too_many = ls;
        too_many.push((1, 1));
        assert_eq!(program(&steering(too_many)), Err(ProgramError::TooManyListeners(MAX_LISTENERS + 1)));
    }
}
