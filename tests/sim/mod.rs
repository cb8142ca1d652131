//! The simulator: N engines joined by a simulated network with virtual time and a seeded
//! RNG — loss, duplication, reordering, delay/jitter, single-bit corruption (caught by the
//! ICRC, since every datagram carries `IcrcCheck::Full`), an MTU, and an interceptor that
//! can drop or alter a chosen packet. Shared by the `tests/sim_*.rs` scenario files.
#![allow(dead_code)]

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};

use urxe::engine::*;
use urxe::wire::icrc::IpFields;

// ---- host memory -------------------------------------------------------------------------

/// A simulated host's memory: `size` bytes at `base`, plus a bump allocator for tests.
pub struct SimHost {
    pub base: u64,
    mem: RefCell<Vec<u8>>,
    next: std::cell::Cell<u64>,
    /// Unmapped ranges `(addr, len)`: an engine access touching one fails with
    /// `MemError::Fault`, as the process accessor reports a page that is gone.
    holes: RefCell<Vec<(u64, u64)>>,
    /// Once enabled, every engine access that succeeded.
    log: RefCell<Option<Vec<Access>>>,
    /// A hole was punched or the log started: accesses are checked against both (without,
    /// the common case, an access costs a bounds check and the copy, as in a real host).
    watched: std::cell::Cell<bool>,
}

/// What an engine access did, for [`SimHost::take_log`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessKind {
    Read,
    Write,
    Atomic,
}

/// One engine access that succeeded: `len` bytes at `addr`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Access {
    pub kind: AccessKind,
    pub addr: u64,
    pub len: u64,
}

impl SimHost {
    pub fn new(base: u64, size: usize) -> SimHost {
        SimHost {
            base,
            mem: RefCell::new(vec![0; size]),
            next: std::cell::Cell::new(base),
            holes: RefCell::new(Vec::new()),
            log: RefCell::new(None),
            watched: std::cell::Cell::new(false),
        }
    }
    /// Unmaps `[addr, addr + len)` (registered or not): engine accesses there now fail.
    pub fn punch_hole(&self, addr: u64, len: u64) {
        self.holes.borrow_mut().push((addr, len));
        self.watched.set(true);
    }
    /// Maps `[addr, addr + len)` again (a hole punched with exactly these bounds).
    pub fn fill_hole(&self, addr: u64, len: u64) {
        self.holes.borrow_mut().retain(|&h| h != (addr, len));
    }
    /// Starts recording the engine's successful accesses.
    pub fn start_log(&self) {
        *self.log.borrow_mut() = Some(Vec::new());
        self.watched.set(true);
    }
    /// The accesses recorded since `start_log` (recording goes on).
    pub fn take_log(&self) -> Vec<Access> {
        self.log.borrow_mut().as_mut().map(std::mem::take).unwrap_or_default()
    }
    /// The range of an engine access: in host memory and clear of every hole.
    fn engine_range(&self, kind: AccessKind, addr: u64, len: usize) -> Result<std::ops::Range<usize>, MemError> {
        let r = self.range(addr, len)?;
        if !self.watched.get() {
            return Ok(r);
        }
        let end = addr + len as u64;
        if let Some(&(h, _)) = self.holes.borrow().iter().find(|&&(h, hl)| addr < h + hl && h < end) {
            return Err(MemError::Fault { addr: addr.max(h) });
        }
        if let Some(log) = self.log.borrow_mut().as_mut() {
            log.push(Access { kind, addr, len: len as u64 });
        }
        Ok(r)
    }
    /// Allocates `len` bytes aligned to 64.
    pub fn alloc(&self, len: u64) -> u64 {
        let a = (self.next.get() + 63) & !63;
        self.next.set(a + len.max(1));
        assert!(a + len <= self.base + self.mem.borrow().len() as u64, "SimHost out of memory");
        a
    }
    pub fn reset_alloc(&self) {
        self.next.set(self.base);
    }
    fn range(&self, addr: u64, len: usize) -> Result<std::ops::Range<usize>, MemError> {
        let size = self.mem.borrow().len() as u64;
        let off = addr.checked_sub(self.base).ok_or(MemError::OutOfBounds { addr, len: len as u64 })?;
        let end = off.checked_add(len as u64).ok_or(MemError::OutOfBounds { addr, len: len as u64 })?;
        if end > size {
            return Err(MemError::OutOfBounds { addr, len: len as u64 });
        }
        Ok(off as usize..end as usize)
    }
    pub fn get(&self, addr: u64, len: usize) -> Vec<u8> {
        let r = self.range(addr, len).expect("test read in range");
        self.mem.borrow()[r].to_vec()
    }
    pub fn set(&self, addr: u64, data: &[u8]) {
        let r = self.range(addr, data.len()).expect("test write in range");
        self.mem.borrow_mut()[r].copy_from_slice(data);
    }
    pub fn get_u64(&self, addr: u64) -> u64 {
        u64::from_ne_bytes(self.get(addr, 8).try_into().unwrap())
    }
    pub fn set_u64(&self, addr: u64, v: u64) {
        self.set(addr, &v.to_ne_bytes())
    }
}

impl HostMemory for SimHost {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.engine_range(AccessKind::Read, addr, buf.len())?;
        buf.copy_from_slice(&self.mem.borrow()[r]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.engine_range(AccessKind::Write, addr, data.len())?;
        self.mem.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
    fn atomic_cmp_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned { addr });
        }
        let r = self.engine_range(AccessKind::Atomic, addr, 8)?;
        let mut m = self.mem.borrow_mut();
        let old = u64::from_ne_bytes(m[r.clone()].try_into().unwrap());
        if old == compare {
            m[r].copy_from_slice(&swap.to_ne_bytes());
        }
        Ok(old)
    }
    fn atomic_fetch_add(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError::Misaligned { addr });
        }
        let r = self.engine_range(AccessKind::Atomic, addr, 8)?;
        let mut m = self.mem.borrow_mut();
        let old = u64::from_ne_bytes(m[r.clone()].try_into().unwrap());
        m[r].copy_from_slice(&old.wrapping_add(add).to_ne_bytes());
        Ok(old)
    }
}

// ---- RNG -----------------------------------------------------------------------------------

/// The engine's splitmix64: tiny, seeded, good enough for fault injection.
#[derive(Clone)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed ^ 0x5DEE_CE66_D1CE_4E5B))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_ne_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

// ---- network -------------------------------------------------------------------------------

/// Fault and timing knobs of the simulated link (applied to every packet).
#[derive(Clone, Copy, Debug)]
pub struct LinkCfg {
    pub loss: f64,
    pub dup: f64,
    /// Probability that a packet is held back by up to `reorder_window` ns extra.
    pub reorder: f64,
    pub reorder_window: u64,
    pub delay: u64,
    pub jitter: u64,
    /// Probability of flipping one random bit of the UDP payload.
    pub bitflip: f64,
    /// Largest UDP payload the link carries; bigger packets are dropped.
    pub mtu: usize,
    /// Link bandwidth in Gbit/s (serialisation delay per packet); 0 = infinite.
    pub gbps: u64,
    /// Most queueing delay the sending side buffers before it tail-drops (0 = unbounded).
    pub queue_ns: u64,
}

impl Default for LinkCfg {
    fn default() -> Self {
        LinkCfg {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_window: 0,
            delay: 1_000,
            jitter: 0,
            bitflip: 0.0,
            mtu: 9000,
            gbps: 100,
            queue_ns: 100_000,
        }
    }
}

/// A datagram in flight.
#[derive(Clone, Debug)]
pub struct Packet {
    pub from: usize,
    pub to: usize,
    pub src_port: u16,
    pub data: Vec<u8>,
}

impl Packet {
    pub fn opcode(&self) -> u8 {
        self.data[0]
    }
    pub fn psn(&self) -> u32 {
        u32::from_be_bytes([0, self.data[9], self.data[10], self.data[11]])
    }
    pub fn dest_qp(&self) -> u32 {
        u32::from_be_bytes([0, self.data[5], self.data[6], self.data[7]])
    }
    /// AETH syndrome byte (for ACK-carrying opcodes).
    pub fn syndrome(&self) -> Option<u8> {
        urxe::wire::parse(&self.data).ok()?.headers.aeth.map(|a| a.syndrome.encode())
    }
}

/// What the interceptor decides for one packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    Pass,
    Drop,
}

pub type Interceptor = Box<dyn FnMut(&mut Packet) -> Verdict>;

pub struct Node {
    pub eng: Engine<SimHost>,
    pub addr: IpAddr,
    /// The network drops everything to and from a vanished node.
    pub vanished: bool,
}

impl Node {
    pub fn mem(&self) -> &SimHost {
        self.eng.memory()
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub intercepted: u64,
    pub queue_drops: u64,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Slot(u64, u64); // (deliver at, sequence)

pub struct Net {
    pub nodes: Vec<Node>,
    pub now: u64,
    pub rng: Rng,
    pub link: LinkCfg,
    pub stats: NetStats,
    pub interceptor: Option<Interceptor>,
    /// Every packet put on the wire (after the interceptor), when enabled.
    pub trace: Option<Vec<(u64, Packet)>>,
    /// Packets from this node arrive with ECN CE set (a congested switch marked them), each
    /// with this probability.
    pub ce_from: Option<(usize, f64)>,
    queue: BinaryHeap<Reverse<(Slot, usize)>>,
    /// Per directed link (from * n + to): when the last packet finished leaving, and the
    /// earliest arrival time that keeps the link FIFO.
    link_free: Vec<u64>,
    fifo_floor: Vec<u64>,
    store: Vec<Option<Packet>>,
    free: Vec<usize>,
    seq: u64,
    buf: Vec<u8>,
}

pub const MEM_PER_NODE: usize = 8 << 20;

impl Net {
    pub fn new(n: usize, seed: u64, link: LinkCfg) -> Net {
        Net::with_memory(n, seed, link, MEM_PER_NODE)
    }

    pub fn with_memory(n: usize, seed: u64, link: LinkCfg, mem: usize) -> Net {
        Net::build(n, seed, link, mem, false)
    }

    /// Nodes addressed by IPv6 (`fd00::1`, `fd00::2`, ...).
    pub fn new_v6(n: usize, seed: u64, link: LinkCfg) -> Net {
        Net::build(n, seed, link, MEM_PER_NODE, true)
    }

    fn build(n: usize, seed: u64, link: LinkCfg, mem: usize, v6: bool) -> Net {
        let addrs: Vec<IpAddr> = (0..n)
            .map(|i| {
                if v6 {
                    IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16 + 1))
                } else {
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1))
                }
            })
            .collect();
        Net::with_addrs(&addrs, seed, link, mem)
    }

    /// Nodes with the given addresses.
    pub fn with_addrs(addrs: &[IpAddr], seed: u64, link: LinkCfg, mem: usize) -> Net {
        let nodes = addrs
            .iter()
            .enumerate()
            .map(|(i, &addr)| {
                let cfg = EngineConfig {
                    local_addr: addr,
                    max_mtu: Mtu::Mtu4096,
                    limits: Limits::default(),
                    seed: seed ^ i as u64,
                };
                let host = SimHost::new(0x1000_0000 * (i as u64 + 1), mem);
                Node { eng: Engine::new(cfg, host), addr, vanished: false }
            })
            .collect();
        Net {
            nodes,
            now: 1_000_000,
            rng: Rng::new(seed),
            link,
            stats: NetStats::default(),
            interceptor: None,
            trace: None,
            ce_from: None,
            queue: BinaryHeap::new(),
            link_free: vec![0; addrs.len() * addrs.len()],
            fifo_floor: vec![0; addrs.len() * addrs.len()],
            store: Vec::new(),
            free: Vec::new(),
            seq: 0,
            buf: vec![0; MAX_PACKET],
        }
    }

    fn node_of(&self, ip: IpAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr == ip)
    }

    fn enqueue(&mut self, at: u64, p: Packet) {
        let i = match self.free.pop() {
            Some(i) => {
                self.store[i] = Some(p);
                i
            }
            None => {
                self.store.push(Some(p));
                self.store.len() - 1
            }
        };
        self.seq += 1;
        self.queue.push(Reverse((Slot(at, self.seq), i)));
    }

    /// Runs (at most `max_ns` of virtual time) until `node`'s `cq` yields a completion; the
    /// first one, if any.
    pub fn first_completion(&mut self, node: usize, cq: CqId, max_ns: u64) -> Option<WorkCompletion> {
        let mut got = Vec::new();
        self.run_until(max_ns, |n| {
            got.extend(n.poll_all(node, cq));
            !got.is_empty()
        });
        got.first().copied()
    }

    /// Collects every packet the engines want to send and puts it on the link.
    pub fn pump_tx(&mut self) {
        for from in 0..self.nodes.len() {
            while let Some(t) = self.nodes[from].eng.poll_transmit(self.now, &mut self.buf) {
                let Some(to) = self.node_of(t.dst) else { continue };
                let mut p = Packet { from, to, src_port: t.src_port, data: self.buf[..t.len].to_vec() };
                self.stats.sent += 1;
                if self.nodes[from].vanished || self.nodes[to].vanished {
                    self.stats.lost += 1;
                    continue;
                }
                if let Some(f) = self.interceptor.as_mut() {
                    if f(&mut p) == Verdict::Drop {
                        self.stats.intercepted += 1;
                        continue;
                    }
                }
                if let Some(tr) = self.trace.as_mut() {
                    tr.push((self.now, p.clone()));
                }
                self.put_on_link(p);
            }
        }
    }

    fn put_on_link(&mut self, mut p: Packet) {
        let l = self.link;
        if p.data.len() > l.mtu || self.rng.chance(l.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance(l.bitflip) {
            let bit = self.rng.below(p.data.len() as u64 * 8);
            p.data[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let copies = if self.rng.chance(l.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        // The link serialises packets (bandwidth) and is FIFO: jitter delays a packet but does
        // not let it overtake the one before; only the `reorder` fraction is held back (and
        // overtaken).
        let ser = if l.gbps == 0 { 0 } else { (p.data.len() as u64 * 8).div_ceil(l.gbps) };
        let li = p.from * self.nodes.len() + p.to;
        if l.queue_ns != 0 && self.link_free[li] > self.now + l.queue_ns {
            // The sender's queue is full: tail drop, as a NIC or switch buffer would.
            self.stats.queue_drops += 1;
            return;
        }
        let depart = self.now.max(self.link_free[li]) + ser;
        self.link_free[li] = depart;
        for c in 0..copies {
            let mut at = (depart + l.delay + self.rng.below(l.jitter + 1)).max(self.fifo_floor[li]);
            if self.rng.chance(l.reorder) {
                at += 1 + self.rng.below(l.reorder_window + 1);
            } else {
                self.fifo_floor[li] = at;
            }
            let q = if c + 1 == copies {
                std::mem::replace(&mut p, Packet { from: 0, to: 0, src_port: 0, data: Vec::new() })
            } else {
                p.clone()
            };
            self.enqueue(at, q);
        }
    }

    /// Puts `p` on the wire again `delay` ns from now (bypassing faults): a duplicate.
    pub fn inject(&mut self, p: Packet, delay: u64) {
        let at = self.now + delay;
        self.enqueue(at, p);
    }

    fn deliver(&mut self, p: Packet) {
        self.stats.delivered += 1;
        let (src, dst) = (self.nodes[p.from].addr, self.nodes[p.to].addr);
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpFields::v4_df(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpFields::v6(s, d),
            _ => unreachable!("mixed families in the simulator"),
        };
        let ce = self.ce_from.is_some_and(|(from, chance)| from == p.from && self.rng.chance(chance));
        let d = Datagram { src, src_port: p.src_port, dst, icrc: IcrcCheck::Full(ip), payload: &p.data, ce };
        self.nodes[p.to].eng.handle_datagram(self.now, &d);
    }

    fn next_timer(&mut self) -> Option<u64> {
        self.nodes.iter_mut().filter_map(|n| n.eng.poll_timeout()).min()
    }

    /// Runs one event time: transmit, deliver what is due, fire due timers, then advance the
    /// clock to the next event. Returns false when nothing at all is pending.
    pub fn step(&mut self) -> bool {
        self.pump_tx();
        let mut did = false;
        while let Some(Reverse((Slot(at, _), i))) = self.queue.peek() {
            if *at > self.now {
                break;
            }
            let i = *i;
            self.queue.pop();
            let p = self.store[i].take().expect("stored packet");
            self.free.push(i);
            self.deliver(p);
            did = true;
        }
        for n in self.nodes.iter_mut() {
            if n.eng.poll_timeout().is_some_and(|t| t <= self.now) {
                n.eng.handle_timeout(self.now);
                did = true;
            }
        }
        self.pump_tx();
        if did {
            return true;
        }
        let next_pkt = self.queue.peek().map(|Reverse((Slot(at, _), _))| *at);
        let next = match (next_pkt, self.next_timer()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(x) => x,
                None => return false,
            },
        };
        self.now = next.max(self.now);
        true
    }

    /// Steps until `done` holds (checked between steps) or `max_ns` of virtual time pass.
    pub fn run_until(&mut self, max_ns: u64, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        let end = self.now + max_ns;
        loop {
            if done(self) {
                return true;
            }
            if self.now > end || !self.step() {
                return done(self);
            }
        }
    }

    /// Runs until nothing is pending (or `max_ns` pass).
    pub fn run_idle(&mut self, max_ns: u64) {
        let end = self.now + max_ns;
        while self.now <= end && self.step() {}
    }

    pub fn poll_all(&mut self, node: usize, cq: CqId) -> Vec<WorkCompletion> {
        let mut out = Vec::new();
        let mut wc = [WorkCompletion::default(); 16];
        loop {
            let n = self.nodes[node].eng.poll_cq(cq, &mut wc).unwrap();
            out.extend_from_slice(&wc[..n]);
            if n < wc.len() {
                return out;
            }
        }
    }
}

// ---- remote accesses -------------------------------------------------------------------------

/// The four remote memory accesses a hostile-memory test throws at a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Write,
    Read,
    CmpSwap,
    FetchAdd,
}

impl Verb {
    pub const ALL: [Verb; 4] = [Verb::Write, Verb::Read, Verb::CmpSwap, Verb::FetchAdd];

    pub fn is_atomic(self) -> bool {
        matches!(self, Verb::CmpSwap | Verb::FetchAdd)
    }

    /// The right the target's region must grant.
    pub fn need(self) -> AccessFlags {
        match self {
            Verb::Write => AccessFlags::REMOTE_WRITE,
            Verb::Read => AccessFlags::REMOTE_READ,
            Verb::CmpSwap | Verb::FetchAdd => AccessFlags::REMOTE_ATOMIC,
        }
    }

    /// The work request: compare-and-swap 0 -> 0x5A5A, fetch-and-add 3.
    pub fn wr(self, remote_addr: u64, rkey: u32) -> WrKind {
        match self {
            Verb::Write => WrKind::RdmaWrite { remote_addr, rkey },
            Verb::Read => WrKind::RdmaRead { remote_addr, rkey },
            Verb::CmpSwap => WrKind::AtomicCmpSwp { remote_addr, rkey, compare: 0, swap: 0x5A5A },
            Verb::FetchAdd => WrKind::AtomicFetchAdd { remote_addr, rkey, add: 3 },
        }
    }
}

// ---- setup helpers ---------------------------------------------------------------------------

/// Connection parameters for an RC/UC pair.
#[derive(Clone, Copy, Debug)]
pub struct QpOpts {
    pub ty: QpType,
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub a_psn: u32,
    pub b_psn: u32,
    pub max_rd_atomic: u8,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub access: AccessFlags,
    pub sq_sig_all: bool,
}

impl Default for QpOpts {
    fn default() -> Self {
        QpOpts {
            ty: QpType::Rc,
            mtu: Mtu::Mtu1024,
            timeout: 4, // 65.5 µs: small, so simulated runs stay short
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            a_psn: 0x100,
            b_psn: 0x200,
            max_rd_atomic: 16,
            max_send_wr: 256,
            max_recv_wr: 256,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            sq_sig_all: true,
        }
    }
}

/// One end of a connection.
#[derive(Clone, Copy, Debug)]
pub struct End {
    pub node: usize,
    pub pd: PdId,
    pub cq: CqId,
    pub qpn: Qpn,
}

pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// Creates PD, CQ and QP on `node` (RESET).
pub fn make_qp(net: &mut Net, node: usize, o: &QpOpts) -> End {
    let pd = net.nodes[node].eng.alloc_pd().unwrap();
    make_qp_in(net, node, pd, o)
}

/// Creates CQ and QP on `node` in PD `pd` (RESET).
pub fn make_qp_in(net: &mut Net, node: usize, pd: PdId, o: &QpOpts) -> End {
    let e = &mut net.nodes[node].eng;
    let (cq, _) = e.create_cq(4096).unwrap();
    let (qpn, _) = e
        .create_qp(&QpInitAttr {
            pd,
            qp_type: o.ty,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: o.max_send_wr,
                max_recv_wr: o.max_recv_wr,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: o.sq_sig_all,
        })
        .unwrap();
    End { node, pd, cq, qpn }
}

/// Drives one QP RESET -> INIT -> RTR -> RTS towards (`peer_node`, `peer_qpn`).
pub fn bring_up(net: &mut Net, me: End, peer_node: usize, peer_qpn: Qpn, sq_psn: u32, rq_psn: u32, o: &QpOpts) {
    use QpAttrMask as A;
    let dgid = gid_of(net.nodes[peer_node].addr);
    let e = &mut net.nodes[me.node].eng;
    let rc = o.ty == QpType::Rc;
    let a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: o.access, ..QpAttr::default() };
    e.modify_qp(me.qpn, &a, A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(o.mtu),
        dest_qp_num: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: o.max_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
        ah_attr: AhAttr {
            is_global: true,
            grh: GlobalRoute { dgid, hop_limit: 64, ..Default::default() },
            port_num: 1,
            ..Default::default()
        },
        ..QpAttr::default()
    };
    let mut m = A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN;
    if rc {
        m |= A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
    }
    e.modify_qp(me.qpn, &a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        sq_psn,
        timeout: o.timeout,
        retry_cnt: o.retry_cnt,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: o.max_rd_atomic,
        ..QpAttr::default()
    };
    let mut m = A::STATE | A::SQ_PSN;
    if rc {
        m |= A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC;
    }
    e.modify_qp(me.qpn, &a, m).unwrap();
}

/// Two connected QPs on nodes `a` and `b`.
pub fn connect(net: &mut Net, a: usize, b: usize, o: &QpOpts) -> (End, End) {
    let ea = make_qp(net, a, o);
    let eb = make_qp(net, b, o);
    bring_up(net, ea, b, eb.qpn, o.a_psn, o.b_psn, o);
    bring_up(net, eb, a, ea.qpn, o.b_psn, o.a_psn, o);
    (ea, eb)
}

/// Allocates and registers `len` bytes on `end`'s node with full access; returns (addr, keys).
pub fn buffer(net: &mut Net, end: End, len: u64) -> (u64, MrHandle) {
    let n = &mut net.nodes[end.node];
    let addr = n.eng.memory().alloc(len);
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let mr = n.eng.reg_mr(end.pd, addr, len.max(1), addr, access).unwrap();
    (addr, mr)
}

pub fn sge(addr: u64, len: u32, mr: MrHandle) -> Sge {
    Sge { addr, length: len, lkey: mr.lkey }
}

pub fn send_wr(wr_id: u64, kind: WrKind, sg: &[Sge]) -> SendWr<'_> {
    SendWr { wr_id, kind, flags: SendFlags::SIGNALED, sg_list: sg, ud: None }
}
