//! Socket I/O and batching: datagrams between the UDP sockets and the engine.
//!
//! Receive drains the 4791 socket with `recvmmsg` (GRO trains split back into packets) into
//! [`Engine::handle_datagram`]. Transmit drains [`Engine::poll_transmit`] into one send batch
//! per flow, sent with one `sendmmsg`: runs of equal-sized packets form UDP GSO trains, one
//! message each, toward any unicast peer (IPv4 segments' ICRCs fixed for the ID the kernel
//! gives each, [`crate::wire::gso_id`]); elsewhere every packet is its own message. One send socket per flow source port, as rxe varies
//! the port per QP pair. No policy here about *when* to move packets: that is
//! [`crate::runtime::pacing`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr};

use super::group;
use super::socket::{RecvBatch, RoceSocket, SendBatch, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, RECV_BATCH, ROCE_PORT};
use crate::engine::{Datagram, Engine, IcrcCheck, Nanos, MAX_PACKET};
use crate::host::memory::ProcessMemory;
use crate::observe::stats::TransportCounters;
use crate::wire::gso_id::IdShift;
use crate::wire::icrc::{store_icrc, stored_icrc, IcrcFlow, IcrcFlows, IpFields, ICRC_LEN};

/// More tries of a multicast receive socket's bind and join after EADDRINUSE (see
/// [`Io::join_mcast`]).
const MCAST_BIND_RETRIES: u32 = 4;

/// Bytes of one packet slot in the send batch.
const TX_SLOT: usize = MAX_PACKET;

/// The flow a send batch belongs to. With `gso` the batch leaves as GSO trains (runs of
/// equal-sized packets, the last of each may be shorter), one message each of one sendmmsg;
/// otherwise as single datagrams via sendmmsg.
#[derive(Clone, Copy)]
struct SendKey {
    sport: u16,
    dst: IpAddr,
    flow_label: u32,
    gso: bool,
    /// IP TOS / traffic class (DSCP, ECN) of the packets.
    tos: u8,
}

/// The peer's RoCEv2 port; toward IPv6 carrying the flow label in `sin6_flowinfo` (the
/// sockets send it: `IPV6_FLOWINFO_SEND`).
fn roce_dst(dst: IpAddr, flow_label: u32) -> SocketAddr {
    match dst {
        IpAddr::V6(a) => SocketAddr::V6(std::net::SocketAddrV6::new(a, ROCE_PORT, (flow_label & 0xF_FFFF).to_be(), 0)),
        v4 => SocketAddr::new(v4, ROCE_PORT),
    }
}

/// Hashes a UDP port (Fibonacci hashing: the product's high bits, which the table uses, depend
/// on every bit of the port).
#[derive(Default)]
pub(crate) struct PortHasher(u64);

impl Hasher for PortHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u16(&mut self, v: u16) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The device's sockets and the batches between them and the engine.
pub(crate) struct Io {
    /// The 4791 socket: receives everything, sends when a flow port cannot be bound.
    rx: RoceSocket,
    /// Send sockets by flow source port (looked up for every send call: a multiplicative hash
    /// of the port, not SipHash; the ports are ours, not an attacker's).
    tx_socks: HashMap<u16, RoceSocket, BuildHasherDefault<PortHasher>>,
    local: IpAddr,
    recv: RecvBatch,
    send: SendBatch,
    /// Flow of the packets in `send`.
    send_key: Option<SendKey>,
    /// Where UDP GSO trains may go.
    gso: GsoScope,
    /// `URXE_PCAP` capture tap (None: off).
    tap: Option<crate::observe::tap::Tap>,
    /// On a shared address, our slot: datagrams for other slots' QPNs are strays.
    slot: Option<u8>,
    /// One receive socket per IP multicast group a QP of ours is attached to.
    mcast: Vec<(IpAddr, RoceSocket)>,
    /// ICRC prefixes of the flows datagrams were last received on.
    icrc_rx: IcrcFlows,
    /// The last non-poller `receive` stopped at its batch bound with datagrams possibly still
    /// queued (see [`Io::left_behind`]).
    left_behind: bool,
    /// The ID shift of the last GSO segment length trains were sent with (see [`gso_ids`]).
    id_shift: Option<(usize, IdShift)>,
}

impl Io {
    /// The `URXE_PCAP` tap, if one is open (fault notes go there).
    pub(crate) fn tap(&self) -> Option<&crate::observe::tap::Tap> {
        self.tap.as_ref()
    }

    pub(crate) fn new(rx: RoceSocket, gso: GsoScope, tap: Option<crate::observe::tap::Tap>) -> Io {
        let local = rx.local_addr().ip();
        Io {
            rx,
            tx_socks: HashMap::default(),
            local,
            recv: RecvBatch::new(),
            send: SendBatch::new(MAX_GSO_SEGMENTS, MAX_GSO_BYTES + TX_SLOT),
            send_key: None,
            gso,
            tap,
            slot: None,
            mcast: Vec::new(),
            icrc_rx: IcrcFlows::default(),
            left_behind: false,
            id_shift: None,
        }
    }

    /// The last drain that was not a poller's stopped at its bound (16 full batches on one
    /// socket) rather than at an empty socket: datagrams may still be queued, and the progress
    /// thread's edge-triggered registration will not report them again until another datagram
    /// arrives. The thread drains again at once instead of sleeping (150,000 datagrams flooded
    /// at a shared address left 283 of them queued for good before this).
    pub(crate) fn left_behind(&self) -> bool {
        self.left_behind
    }

    /// GSO trains may go to `dst`.
    fn gso_to(&self, dst: IpAddr) -> bool {
        match self.gso {
            GsoScope::Off => false,
            GsoScope::Loopback => self.rx.gso_to(dst) && dst.is_loopback() && self.local.is_loopback(),
            // IPv6 trains leave with the UDP checksum on (the kernel refuses an IPv6 GSO send
            // without it; see `socket`); IPv6 has no ID, so every segment's ICRC is the engine's.
            GsoScope::Any => self.rx.gso_to(dst),
        }
    }

    /// Receive only what belongs to `slot` of a shared address (see [`super::group`]).
    pub(crate) fn set_slot(&mut self, slot: u8) {
        self.slot = Some(slot);
    }

    pub(crate) fn local(&self) -> IpAddr {
        self.local
    }

    /// Receives everything queued on the sockets (bounded per call) and feeds the engine. The
    /// clock is read per batch received, after the receive call: timers a packet arms (RNR)
    /// start from when it was handled. Returns the clock's last reading (`None`: nothing came,
    /// and the clock was not read: an empty poll reads it once, in its caller).
    ///
    /// `poller`: the caller is an application's poll, which calls again. A receive after an
    /// empty one takes a single datagram ([`RoceSocket::recv_batch`]); a poller returns with
    /// it (its next poll, if this one found nothing for it, takes the rest with `recvmmsg`),
    /// everyone else drains on. The progress thread must empty the socket: its epoll
    /// registration is edge-triggered, and a datagram left behind would wait for the next
    /// packet to wake it (rping over a lossy link timed out that way).
    pub(crate) fn receive(
        &mut self,
        engine: &mut Engine<ProcessMemory>,
        clock: impl Fn() -> Nanos,
        counters: &mut TransportCounters,
        poller: bool,
    ) -> Option<Nanos> {
        self.left_behind = false;
        let mut last = self.drain(None, engine, &clock, counters, poller);
        for i in 0..self.mcast.len() {
            last = self.drain(Some(i), engine, &clock, counters, poller).or(last);
        }
        last
    }

    /// Drains one socket: the 4791 socket (`None`) or multicast socket `Some(i)`, whose
    /// datagrams are addressed to its group rather than to our address (the ICRC covers the
    /// destination address, and the group names which QPs take the datagram).
    fn drain(
        &mut self,
        mcast: Option<usize>,
        engine: &mut Engine<ProcessMemory>,
        clock: &impl Fn() -> Nanos,
        counters: &mut TransportCounters,
        poller: bool,
    ) -> Option<Nanos> {
        let (sock, local) = match mcast {
            None => (&self.rx, self.local),
            Some(i) => (&self.mcast[i].1, self.mcast[i].0),
        };
        let mut last = None;
        let mut last_flow = None;
        for _ in 0..16 {
            let n = match sock.recv_batch(&mut self.recv) {
                Ok(0) => return last,
                Ok(n) => n,
                Err(_) => {
                    counters.rx_errors += 1;
                    return last;
                }
            };
            let now = clock();
            last = Some(now);
            counters.rx_batches += 1;
            for (src, tos, pkt) in self.recv.packets_mut() {
                let Some(src) = src else {
                    counters.rx_unaddressed += 1;
                    continue;
                };
                counters.rx_datagrams += 1;
                if let Some(t) = &self.tap {
                    t.received(src, sock.local_addr(), tos, pkt);
                }
                // A shared address's slots split unicast by QPN; every member receives its
                // own copy of a group's datagrams.
                if let (Some(slot), None) = (self.slot, mcast) {
                    match group::classify(slot, pkt) {
                        group::Delivery::Mine => {}
                        group::Delivery::Probe => {
                            counters.rx_group_probes += 1;
                            continue;
                        }
                        group::Delivery::Stray => {
                            counters.rx_group_strays += 1;
                            continue;
                        }
                    }
                }
                // The ICRC is hashed here, where the buffer is writable (see
                // `IcrcFlow::icrc_in_place`); IPv4's ID is unknown to a UDP socket: as the
                // engine's `V4NoId`, hashed as ID 0 with DF.
                // A burst comes from one peer: the previous datagram's flow serves again.
                let (flow, id_known) = match last_flow {
                    Some((a, f, k)) if a == src => (f, k),
                    _ => {
                        let (ip, id_known) = match (src.ip(), local) {
                            (IpAddr::V4(s), IpAddr::V4(d)) => (IpFields::v4_df(s, d), false),
                            (IpAddr::V6(s), IpAddr::V6(d)) => (IpFields::v6(s, d), true),
                            _ => {
                                counters.rx_unaddressed += 1;
                                continue;
                            }
                        };
                        let f = self.icrc_rx.get(&ip, src.port(), ROCE_PORT);
                        last_flow = Some((src, f, id_known));
                        (f, id_known)
                    }
                };
                let covered = pkt.len().saturating_sub(ICRC_LEN);
                let icrc = flow.icrc_in_place(&mut pkt[..covered]);
                let icrc = IcrcCheck::Hashed { icrc, id_known };
                let d = Datagram {
                    src: src.ip(),
                    src_port: src.port(),
                    dst: local,
                    icrc,
                    payload: pkt,
                    ce: tos & 0b11 == 0b11,
                };
                engine.handle_datagram(now, &d);
            }
            if n < RECV_BATCH && (poller || !self.recv.was_single()) {
                return last;
            }
        }
        if !poller {
            self.left_behind = true;
        }
        last
    }

    /// Opens the receive socket of multicast group `group` (see
    /// [`RoceSocket::bind_multicast`]); its fd, for the progress thread to watch.
    pub(crate) fn join_mcast(&mut self, group: IpAddr) -> io::Result<std::os::fd::RawFd> {
        if let Some((_, s)) = self.mcast.iter().find(|(g, _)| *g == group) {
            return Ok(s.raw_fd());
        }
        // Every process's socket for the group has SO_REUSEADDR and SO_REUSEPORT, which the
        // kernel lets any number of them bind. Yet once in CI (e04e927, tests/mcast.rs) the
        // second of two receivers that joined at the same instant got EADDRINUSE, never seen
        // again in 10 reruns nor in 3,000 rounds of a C program doing the same binds and joins
        // from three processes: taken as a transient, it gets a few more tries, 1 ms apart,
        // before the error is the caller's.
        let mut tries = 0;
        let s = loop {
            match RoceSocket::bind_multicast(group, self.local) {
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) && tries < MCAST_BIND_RETRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                r => break r?,
            }
        };
        let fd = s.raw_fd();
        self.mcast.push((group, s));
        Ok(fd)
    }

    /// Closes the receive socket of `group` (leaving the IP group), after handing its fd to
    /// `before_close` (the progress thread stops watching it).
    pub(crate) fn leave_mcast(&mut self, group: IpAddr, before_close: impl FnOnce(std::os::fd::RawFd)) {
        if let Some(i) = self.mcast.iter().position(|(g, _)| *g == group) {
            let (_, s) = self.mcast.remove(i);
            before_close(s.raw_fd());
        }
    }

    /// One socket per flow source port, as rxe varies the port per QP pair. If the port
    /// cannot be bound (another user holds it), packets go from 4791 instead, their ICRC
    /// recomputed for that port (see [`Io::send_batch`]): the ICRC covers the UDP source
    /// port, and a peer (kernel rxe, a NIC) drops a packet whose ICRC does not match. On a
    /// shared address the port is bound with SO_REUSEPORT: flows of several members may map
    /// to one port.
    fn open_tx_socket(&mut self, sport: u16) {
        if !self.tx_socks.contains_key(&sport) {
            let local = SocketAddr::new(self.local, sport);
            let s = if self.slot.is_some() { RoceSocket::bind_shared(local) } else { RoceSocket::bind(local) };
            if let Ok(s) = s {
                self.tx_socks.insert(sport, s);
            }
        }
    }

    /// Recomputes the ICRC of every packet in the batch for source port 4791 (the batch goes
    /// from the 4791 socket): the same fields as the engine's (IPv4 with DF and ID 0).
    fn reseal(&mut self, dst: IpAddr) {
        let ip = match (self.local, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpFields::v4_df(s, d),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpFields::v6(s, d),
            _ => return,
        };
        let flow = IcrcFlow::new(&ip, ROCE_PORT, ROCE_PORT);
        for i in 0..self.send.len() {
            let p = self.send.packet_mut(i);
            if p.len() > ICRC_LEN {
                let covered = p.len() - ICRC_LEN;
                let v = flow.icrc_in_place(&mut p[..covered]);
                store_icrc(p, v);
            }
        }
    }

    /// Sends what is batched. Returns false if the socket would block (packets stay queued).
    fn send_batch(&mut self, counters: &mut TransportCounters) -> bool {
        let Some(key) = self.send_key else { return true };
        self.open_tx_socket(key.sport);
        if key.sport != ROCE_PORT && !self.tx_socks.contains_key(&key.sport) && !self.send.is_empty() {
            // Leaving from 4791, not from the flow port the engine hashed in.
            self.reseal(key.dst);
            counters.tx_port_fallbacks += self.send.len() as u64;
        }
        // Toward a loopback peer the train reaches the socket whole (GRO), never cut: no
        // segment gets its own ID, and every ICRC stays the ID-0 one the receiver checks.
        let fix_ids = key.gso && key.dst.is_ipv4() && !key.dst.is_loopback();
        while !self.send.is_empty() {
            let dst_sa = roce_dst(key.dst, key.flow_label);
            if fix_ids {
                gso_ids(&mut self.send, 0, &mut self.id_shift);
            }
            let sock = self.tx_socks.get(&key.sport).unwrap_or(&self.rx);
            sock.set_tos(key.tos);
            let res = if key.gso {
                // Cut into trains at send time: equal segments, only the last may be shorter;
                // every train is one message of one sendmmsg.
                let r = sock.send_trains(&mut self.send);
                if r.is_ok() {
                    counters.tx_gso_sends += 1;
                }
                r
            } else {
                let r = sock.send_mmsg(&mut self.send);
                if r.is_ok() {
                    counters.tx_mmsg_sends += 1;
                }
                r
            };
            if fix_ids {
                // What did not go is back to its ID-0 ICRC: a later try may cut other trains.
                gso_ids(&mut self.send, *res.as_ref().unwrap_or(&0), &mut self.id_shift);
            }
            match res {
                Ok(k) => {
                    if let Some(t) = &self.tap {
                        let ids = train_positions(&self.send, k, fix_ids);
                        t.sent(sock.local_addr(), dst_sa, key.tos, ids.zip((0..k).map(|i| self.send.packet(i))));
                    }
                    counters.tx_datagrams += k as u64;
                    self.send.consume(k);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    counters.tx_would_block += 1;
                    return false;
                }
                Err(_) => {
                    // Unreachable peer, no route...: the packet is lost as on a wire; RC
                    // retransmission covers it.
                    counters.tx_errors += 1;
                    self.send.consume(if key.gso { self.send.train_len(0) } else { 1 });
                }
            }
        }
        self.send_key = None;
        true
    }

    /// Moves every packet the engine has into the sockets. Returns false if a socket is full
    /// (the rest stays queued in the engine or the batch).
    pub(crate) fn transmit(
        &mut self,
        engine: &mut Engine<ProcessMemory>,
        now: Nanos,
        counters: &mut TransportCounters,
    ) -> bool {
        if !self.send_batch(counters) {
            return false;
        }
        loop {
            if self.send.is_full(TX_SLOT) && !self.send_batch(counters) {
                return false;
            }
            let Some(t) = engine.poll_transmit(now, &mut self.send.next_buf()[..TX_SLOT]) else { break };
            // Packets of one flow share the batch whatever their sizes: it leaves as one
            // sendmmsg, cut into GSO trains where they are allowed.
            let extends = matches!(self.send_key, Some(k) if k.sport == t.src_port && k.dst == t.dst && k.flow_label == t.flow_label && k.tos == t.tos);
            if !extends && self.send_key.is_some() {
                // Another flow or the end of a train: send what we have first. The new packet
                // sits after the batch in the buffer; keep it aside while the batch goes.
                let mut tmp = [0u8; TX_SLOT];
                tmp[..t.len].copy_from_slice(&self.send.next_buf()[..t.len]);
                let flushed = self.send_batch(counters);
                self.send.next_buf()[..t.len].copy_from_slice(&tmp[..t.len]);
                if !flushed {
                    // Keep order: queue it behind the blocked batch, sent as single datagrams.
                    if let Some(k) = self.send_key.as_mut() {
                        k.gso = false;
                    }
                    self.send.push(t.len, roce_dst(t.dst, t.flow_label));
                    return false;
                }
            }
            if self.send_key.is_none() {
                self.send_key = Some(SendKey {
                    sport: t.src_port,
                    dst: t.dst,
                    flow_label: t.flow_label,
                    gso: self.gso_to(t.dst),
                    tos: t.tos,
                });
            }
            self.send.push(t.len, roce_dst(t.dst, t.flow_label));
        }
        self.send_batch(counters)
    }
}

/// XORs, into every packet of the batch's trains from packet `from` (a train boundary) on,
/// the ICRC change of its IPv4 ID: segment `i` of a train leaves with ID `i` (see
/// [`crate::wire::gso_id`]). Applied before a send, applied again to what did not go. `cache`
/// keeps the shift of the last segment length (a stream's trains share one: computing it is
/// some twenty multiplies); the deltas of a train come from one multiply per ID bit.
fn gso_ids(batch: &mut SendBatch, from: usize, cache: &mut Option<(usize, IdShift)>) {
    let mut shift_for = |len: usize| match *cache {
        Some((l, s)) if l == len => s,
        _ => {
            let s = IdShift::new(len);
            *cache = Some((len, s));
            s
        }
    };
    let mut deltas = [0u32; MAX_GSO_SEGMENTS];
    let mut first = from;
    while first < batch.len() {
        let count = batch.train_len(first);
        if count > 1 {
            // Every segment has the first one's length but the last, which may be shorter.
            let seg = batch.packet_mut(first).len();
            shift_for(seg).fill_deltas(&mut deltas[..count]);
            for (i, delta) in deltas.iter().enumerate().take(count).skip(1) {
                let p = batch.packet_mut(first + i);
                let d = if p.len() == seg { *delta } else { IdShift::new(p.len()).delta(i as u16) };
                if let Some(v) = stored_icrc(p) {
                    store_icrc(p, v ^ d);
                }
            }
        }
        first += count;
    }
}

/// The IPv4 ID each of the first `k` packets of the batch left with: its place in its train
/// (all 0 without GSO ID fixing).
fn train_positions(batch: &SendBatch, k: usize, trains: bool) -> impl Iterator<Item = u16> {
    let mut ids = Vec::new();
    let mut first = 0;
    while first < k {
        let count = if trains { batch.train_len(first).min(k - first) } else { 1 };
        ids.extend((0..count).map(|i| i as u16));
        first += count;
    }
    ids.into_iter()
}

/// Where UDP GSO trains may go (`URXE_GSO`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GsoScope {
    /// `0`: every packet its own datagram (e.g. so a loopback capture shows each as a frame).
    Off,
    /// `lo`: only from a loopback address to a loopback address (before issue #38).
    Loopback,
    /// `1`, the default: toward every unicast peer, IPv4 ICRCs fixed for the kernel's IDs.
    Any,
}

/// `URXE_GSO`: `1` (default), `lo` or `0` (see [`GsoScope`]).
pub(crate) fn gso_setting() -> io::Result<GsoScope> {
    match std::env::var("URXE_GSO").as_deref() {
        Err(_) | Ok("1") => Ok(GsoScope::Any),
        Ok("lo") => Ok(GsoScope::Loopback),
        Ok("0") => Ok(GsoScope::Off),
        Ok(v) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("URXE_GSO={v}: expected 1, lo or 0"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// A group whose port another socket holds without SO_REUSEPORT: the join fails with
    /// EADDRINUSE after its bounded retries (milliseconds, not a hang) and leaves nothing
    /// behind; once that socket is gone the same join succeeds.
    #[test]
    fn a_join_the_kernel_refuses_fails_after_its_retries_and_leaves_nothing() {
        let local: IpAddr = "127.44.0.40".parse().unwrap();
        let group: IpAddr = "239.44.9.7".parse().unwrap();
        let blocker = std::net::UdpSocket::bind(SocketAddr::new(group, ROCE_PORT)).unwrap();
        let mut io = Io::new(RoceSocket::bind(SocketAddr::new(local, 0)).unwrap(), GsoScope::Off, None);
        let t = std::time::Instant::now();
        let e = io.join_mcast(group).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
        let took = t.elapsed();
        assert!(took >= std::time::Duration::from_millis(MCAST_BIND_RETRIES as u64), "retried: {took:?}");
        assert!(took < std::time::Duration::from_secs(1), "bounded: {took:?}");
        assert!(io.mcast.is_empty());
        drop(blocker);
        io.join_mcast(group).unwrap();
        assert_eq!(io.mcast.len(), 1);
    }

    /// The progress thread's drain is bounded (16 batches of 32); what it leaves on the socket is
    /// reported, since its edge-triggered registration would not report it again, and the next
    /// drain takes it: 600 datagrams queued, the first drain takes 512 and says so, the second
    /// the other 88 and says the socket is empty. A poller's drain never claims it.
    #[test]
    fn a_drain_that_stops_at_its_bound_says_so_and_the_next_takes_the_rest() {
        let local: IpAddr = "127.44.0.41".parse().unwrap();
        let mut io = Io::new(RoceSocket::bind(SocketAddr::new(local, 0)).unwrap(), GsoScope::Off, None);
        let cfg = crate::engine::EngineConfig {
            local_addr: local,
            max_mtu: crate::engine::Mtu::Mtu1024,
            limits: Default::default(),
            seed: 1,
        };
        let mut engine = Engine::new(cfg, crate::host::memory::ProcessMemory::without_regions());
        let to = io.rx.local_addr();
        let tx = std::net::UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
        let flood = |n: usize| {
            // A UD SEND to an unknown QP: the engine counts and drops it.
            let pkt = [&[0x64u8, 0, 0xff, 0xff, 0, 0, 0, 0x11][..], &[0u8; 36]].concat();
            for _ in 0..n {
                tx.send_to(&pkt, to).unwrap();
            }
        };
        let mut counters = TransportCounters::default();
        flood(600);
        io.receive(&mut engine, || 0, &mut counters, false);
        assert_eq!(counters.rx_datagrams, 16 * RECV_BATCH as u64);
        assert!(io.left_behind(), "stopped at the bound, yet says the socket is empty");
        io.receive(&mut engine, || 0, &mut counters, false);
        assert_eq!(counters.rx_datagrams, 600);
        assert!(!io.left_behind(), "emptied the socket, yet says datagrams are left");
        flood(600);
        for _ in 0..40 {
            io.receive(&mut engine, || 0, &mut counters, true);
            assert!(!io.left_behind(), "a poller's drain set the progress thread's flag");
        }
        assert_eq!(counters.rx_datagrams, 1200, "40 polls took the second 600");
    }

    #[test]
    fn port_hashes_spread_over_the_bits_the_table_uses() {
        // hashbrown takes the control byte from the top 7 bits and the bucket from the low
        // ones: consecutive flow ports (rxe and we pick them from a range) must differ in both.
        let h = BuildHasherDefault::<PortHasher>::default();
        let ports = 49152u16..49152 + 128;
        let top: std::collections::HashSet<u64> = ports.clone().map(|p| h.hash_one(p) >> 57).collect();
        let low: std::collections::HashSet<u64> = ports.map(|p| h.hash_one(p) & 127).collect();
        assert!(top.len() > 64, "top 7 bits: {} distinct of 128", top.len());
        assert!(low.len() > 64, "low 7 bits: {} distinct of 128", low.len());
        let mut m: HashMap<u16, u16, BuildHasherDefault<PortHasher>> = HashMap::default();
        for p in 0..5000u16 {
            m.insert(p.wrapping_mul(13), p);
        }
        assert!((0..5000u16).all(|p| m.get(&p.wrapping_mul(13)) == Some(&p)));
    }
}
