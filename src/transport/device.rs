//! One urxe device: an engine behind a mutex, its UDP sockets, and a progress thread.
//!
//! Who moves packets:
//! - The caller's thread, on the fast path: [`Device::post_send`] transmits what the engine
//!   produces before returning (a NIC doorbell), and [`Device::poll_cq`] receives whatever is
//!   queued on the socket, runs due timers and transmits responses before reading the CQ. An
//!   application that busy-polls its CQ therefore never pays a thread hand-off.
//! - The progress thread, blocked in `mio::Poll` on the receive socket, a waker and the
//!   engine's next deadline. It covers what nobody polls for: ACKs and responses while the
//!   application sleeps, retransmission timers, completion-channel events. It never spins.
//!
//! Time is read here (the only place) and handed to the engine as nanoseconds.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::UnixListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use super::memory::ProcessMemory;
use super::socket::{RecvBatch, RoceSocket, SendBatch, MAX_GSO_BYTES, MAX_GSO_SEGMENTS, ROCE_PORT};
use crate::engine::{Counters, Datagram, Engine, EngineConfig, Event, IcrcCheck, Nanos, MAX_PACKET};
use crate::wire::icrc::IpFields;

const RX: Token = Token(0);
const WAKE: Token = Token(1);
const STATS: Token = Token(2);

/// Where engine events (completion notifications, async events) go. Called with the device
/// lock held: it must be quick and must not call back into the device.
pub type EventSink = Box<dyn FnMut(Event) + Send>;

/// Counters of the transport itself (the engine has its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportCounters {
    pub tx_datagrams: u64,
    pub tx_gso_sends: u64,
    pub tx_mmsg_sends: u64,
    pub tx_errors: u64,
    pub tx_would_block: u64,
    pub rx_datagrams: u64,
    pub rx_batches: u64,
    pub rx_errors: u64,
    /// Datagrams from a non-RoCE source port arrangement we could not attribute (no source).
    pub rx_unaddressed: u64,
    pub progress_wakeups: u64,
    /// Send posts whose transmission waited for the next one of a burst (doorbell batching).
    pub tx_deferred_posts: u64,
    /// Polls that found a completion and left the packets they produced (ACKs) for the next call.
    pub tx_deferred_polls: u64,
    /// Times the progress thread held ACKs for the application's next post.
    pub tx_held_acks: u64,
}

/// The engine and everything the data path touches, behind one lock.
pub struct Core {
    pub engine: Engine<ProcessMemory>,
    rx: RoceSocket,
    tx_socks: HashMap<u16, RoceSocket>,
    local: IpAddr,
    recv: RecvBatch,
    send: SendBatch,
    /// Flow of the packets in `send`.
    send_key: Option<SendKey>,
    sink: EventSink,
    epoch: Instant,
    /// UDP GSO trains allowed (loopback only in any case).
    gso: bool,
    /// Consecutive `poll` calls that found nothing.
    idle_polls: u32,
    /// When the last poll that found a completion returned (ns), if no poll came since.
    found_at: Option<u64>,
    /// How long the application stayed away from polling after its last completion: a
    /// memory spinner (ib_write_lat, NCCL-style flags) stays away for a round trip; a CQ
    /// poller comes back within microseconds.
    away_after_found: u64,
    /// Consecutive completions after each of which the application stayed away that long.
    away_streak: u32,
    /// When the last send post returned (ns).
    last_post_end: u64,
    /// Library calls whose packets were left for the next call (a burst of small posts, see
    /// [`Device::post`]; responses of a poll that found a completion, see [`Device::poll`]).
    deferred: u32,
    /// When the first of them was posted (ns).
    deferred_since: u64,
    /// The progress thread holds ACKs among them (it holds once, then sends).
    held_by_thread: bool,
    pub counters: TransportCounters,
}

/// The flow a send batch belongs to. With `gso` the batch is a train of `seg`-byte packets
/// (the last may be shorter) sent in one call; otherwise single datagrams via sendmmsg.
#[derive(Clone, Copy)]
struct SendKey {
    sport: u16,
    dst: IpAddr,
    seg: usize,
    gso: bool,
}

struct Shared {
    core: Mutex<Core>,
    waker: Waker,
    stop: AtomicBool,
    /// Deadline (ns) the progress thread sleeps until; `u64::MAX` = no deadline.
    thread_deadline: AtomicU64,
    /// When (ns) an application thread last polled or posted: while that is recent the
    /// application works through the library and its next poll moves the device, so a new
    /// deadline need not ring the progress thread's doorbell.
    app_active_at: AtomicU64,
    /// The progress thread found the lock held by an application thread and left the work to
    /// it: whoever leaves the library next runs one progress step. The progress thread never
    /// blocks on the lock — a real-time thread preempting an application thread and then
    /// waiting for that thread's lock costs two context switches and two futex calls.
    work_left: AtomicBool,
    /// The progress thread is woken by packet arrivals. A poller that keeps finding its CQ
    /// empty disarms this: it takes the packets itself, and each wakeup would cost the machine
    /// an inter-processor interrupt (a VM exit on a virtual machine) per packet. A poll that
    /// finds a completion re-arms it (the application may now wait elsewhere, e.g. spin on
    /// memory), and the progress thread re-arms it when nobody polled for [`REARM_AFTER_NS`].
    rx_armed: AtomicBool,
    /// When (ns) the progress thread will wake at the latest (`u64::MAX`: no timeout).
    thread_wake_at: AtomicU64,
    registry: mio::Registry,
    rx_fd: std::os::fd::RawFd,
    /// The same epoch as `Core::epoch`, readable without the lock.
    epoch: Instant,
    /// The progress thread runs at real-time priority.
    rt: AtomicBool,
    /// Counters kept outside the lock (who woke whom).
    wake_counters: WakeCounters,
}

/// How often the progress thread is woken and why; kept outside the lock (relaxed atomics).
#[derive(Default)]
struct WakeCounters {
    /// Doorbell rings (eventfd writes) by application threads.
    doorbells: AtomicU64,
    /// Packet-arrival wakeups armed / disarmed.
    rx_arms: AtomicU64,
    rx_disarms: AtomicU64,
    /// Times the progress thread returned from its wait.
    thread_wakeups: AtomicU64,
    /// Wakeups that found an application thread holding the lock and left it the work.
    lock_busy: AtomicU64,
}

impl WakeCounters {
    fn text(&self) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "WakeCounters\n    doorbells: {}\n    rx_arms: {}\n    rx_disarms: {}\n    thread_wakeups: {}\n    lock_busy: {}\n",
            l(&self.doorbells),
            l(&self.rx_arms),
            l(&self.rx_disarms),
            l(&self.thread_wakeups),
            l(&self.lock_busy)
        )
    }
}

/// Consecutive empty polls after which packet arrivals stop waking the progress thread.
const DISARM_AFTER_EMPTY_POLLS: u32 = 2;

/// An application that stayed away from its CQ this long after a completion waits elsewhere
/// (e.g. spins on memory): re-arm packet wakeups when it finds a completion.
const AWAY_MEANS_ELSEWHERE_NS: u64 = 10_000;
/// ... after this many completions in a row.
const AWAY_STREAK_TO_REARM: u32 = 2;

/// With packet wakeups disarmed, the progress thread re-arms them when no application thread
/// polled for this long (and checks that often).
const REARM_AFTER_NS: u64 = 1_000_000;

impl Shared {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Arms or disarms packet-arrival wakeups of the progress thread (one epoll_ctl).
    fn set_rx_armed(&self, armed: bool) {
        if self.rx_armed.swap(armed, Ordering::SeqCst) == armed {
            return;
        }
        // Disarmed = not registered at all. Armed = readable only: a writable interest would
        // fire at once on registration (the socket is writable), waking the real-time thread
        // for nothing right when a busy application re-arms; a full socket is retried on a
        // timer instead (see the progress thread).
        let r = if armed {
            self.registry.register(&mut SourceFd(&self.rx_fd), RX, Interest::READABLE)
        } else {
            self.registry.deregister(&mut SourceFd(&self.rx_fd))
        };
        if r.is_err() && !armed {
            // Cannot disarm: stay armed, the safe state.
            self.rx_armed.store(true, Ordering::SeqCst);
            return;
        }
        let n = if armed { &self.wake_counters.rx_arms } else { &self.wake_counters.rx_disarms };
        n.fetch_add(1, Ordering::Relaxed);
        // Disarmed, the thread must still check within REARM_AFTER_NS whether anyone polls: if it
        // sleeps longer than that (e.g. with no timeout at all), ring it so it re-plans.
        if !armed && self.thread_wake_at.load(Ordering::SeqCst) > self.now() + REARM_AFTER_NS {
            self.ring();
        }
    }

    /// Rings the progress thread's doorbell.
    fn ring(&self) {
        self.wake_counters.doorbells.fetch_add(1, Ordering::Relaxed);
        let _ = self.waker.wake();
    }
}

/// Consecutive empty polls after which a polling thread yields the CPU once.
pub const IDLE_POLLS_PER_YIELD: u32 = 32;

/// How long after an application poll or post the doorbell is not rung for a moved deadline.
const APP_ACTIVE_NS: u64 = 1_000_000;

/// A send post this soon after the previous one returned continues a burst.
const BURST_GAP_NS: u64 = 5_000;
/// At most this many posts of a burst wait for the next ...
const BURST_MAX_POSTS: u32 = 32;
/// ... and the first of them waits at most this long (checked at each post).
const BURST_MAX_NS: u64 = 50_000;
/// The progress thread holds ACKs for an active application's next post at most this long.
/// The thread's poll has whole-millisecond resolution (epoll rounds its timeout up), so this
/// is what a shorter value would amount to anyway; in the pattern the hold is for (the
/// application posts right after the thread places the peer's WRITE) the post ends it within
/// microseconds, and an application's empty poll sends it at once.
const HOLD_ACK_NS: u64 = 1_000_000;
/// Consecutive polls that found completions (e.g. the send CQ, then the receive CQ) may leave
/// their packets for the next call, up to this many ...
const POLL_DEFER_MAX: u32 = 4;
/// ... within this long.
const POLL_DEFER_NS: u64 = 20_000;

/// A running device. Dropping it stops the progress thread.
pub struct Device {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    local: IpAddr,
}

const TX_SLOT: usize = MAX_PACKET;

impl Core {
    fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// Receives everything queued on the socket (bounded per call) and feeds the engine. The
    /// clock is read per batch: timers armed by a packet (RNR) start from when it was handled.
    fn receive(&mut self) {
        for _ in 0..16 {
            let now = self.now();
            let n = match self.rx.recv_batch(&mut self.recv) {
                Ok(0) => return,
                Ok(n) => n,
                Err(_) => {
                    self.counters.rx_errors += 1;
                    return;
                }
            };
            self.counters.rx_batches += 1;
            let local = self.local;
            for (src, pkt) in self.recv.packets() {
                let Some(src) = src else {
                    self.counters.rx_unaddressed += 1;
                    continue;
                };
                self.counters.rx_datagrams += 1;
                let icrc = match (src.ip(), local) {
                    (IpAddr::V4(s), IpAddr::V4(d)) => IcrcCheck::V4NoId { src: s.octets(), dst: d.octets() },
                    (IpAddr::V6(s), IpAddr::V6(d)) => IcrcCheck::Full(IpFields::v6(s, d)),
                    _ => {
                        self.counters.rx_unaddressed += 1;
                        continue;
                    }
                };
                let d = Datagram { src: src.ip(), src_port: src.port(), dst: local, icrc, payload: pkt };
                self.engine.handle_datagram(now, &d);
            }
            if n < super::socket::RECV_BATCH {
                return;
            }
        }
    }

    /// One socket per flow source port, as rxe varies the port per QP pair. If the port is
    /// taken on this address, packets go from 4791 instead (any source port is valid).
    fn open_tx_socket(&mut self, sport: u16) {
        if !self.tx_socks.contains_key(&sport) {
            if let Ok(s) = RoceSocket::bind(SocketAddr::new(self.local, sport)) {
                self.tx_socks.insert(sport, s);
            }
        }
    }

    /// Sends what is batched. Returns false if the socket would block (packets stay queued).
    fn flush_send(&mut self) -> bool {
        let Some(key) = self.send_key else { return true };
        while !self.send.is_empty() {
            let dst_sa = SocketAddr::new(key.dst, ROCE_PORT);
            let n = self.send.len();
            self.open_tx_socket(key.sport);
            let sock = self.tx_socks.get(&key.sport).unwrap_or(&self.rx);
            let res = if n > 1 && key.gso {
                // Built as a train: equal segments, only the last may be shorter.
                let r = sock.send_gso(self.send.data(), key.seg as u16, dst_sa).map(|_| n);
                if r.is_ok() {
                    self.counters.tx_gso_sends += 1;
                }
                r
            } else {
                let r = sock.send_mmsg(&mut self.send);
                if r.is_ok() {
                    self.counters.tx_mmsg_sends += 1;
                }
                r
            };
            match res {
                Ok(k) => {
                    self.counters.tx_datagrams += k as u64;
                    self.send.consume(k);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.counters.tx_would_block += 1;
                    return false;
                }
                Err(_) => {
                    // Unreachable peer, no route...: the packet is lost as on a wire; RC
                    // retransmission covers it.
                    self.counters.tx_errors += 1;
                    self.send.consume(if key.gso { n } else { 1 });
                }
            }
        }
        self.send_key = None;
        true
    }

    /// Moves every packet the engine has into the socket. Returns false if the socket is full
    /// (the rest stays queued in the engine or the batch).
    fn transmit(&mut self, now: Nanos) -> bool {
        self.deferred = 0;
        self.held_by_thread = false;
        if !self.flush_send() {
            return false;
        }
        loop {
            if self.send.is_full(TX_SLOT) && !self.flush_send() {
                return false;
            }
            let Some(t) = self.engine.poll_transmit(now, &mut self.send.next_buf()[..TX_SLOT]) else { break };
            let extends = match self.send_key.as_mut() {
                Some(k) if k.sport == t.src_port && k.dst == t.dst => {
                    if !k.gso
                        || (t.len <= k.seg
                            && self.send.last_len() == Some(k.seg)
                            && self.send.data().len() + t.len <= MAX_GSO_BYTES
                            && self.send.len() < MAX_GSO_SEGMENTS)
                    {
                        true
                    } else if self.send.len() == 1 {
                        // Not a train (e.g. an ACK, then a request): one sendmmsg for both.
                        k.gso = false;
                        true
                    } else {
                        false
                    }
                }
                _ => false,
            };
            if !extends && self.send_key.is_some() {
                // Another flow or the end of a train: send what we have first. The new packet
                // sits after the batch in the buffer; keep it aside while the batch goes.
                let mut tmp = [0u8; TX_SLOT];
                tmp[..t.len].copy_from_slice(&self.send.next_buf()[..t.len]);
                let flushed = self.flush_send();
                self.send.next_buf()[..t.len].copy_from_slice(&tmp[..t.len]);
                if !flushed {
                    // Keep order: queue it behind the blocked batch, sent as single datagrams.
                    if let Some(k) = self.send_key.as_mut() {
                        k.gso = false;
                    }
                    self.send.push(t.len, SocketAddr::new(t.dst, ROCE_PORT));
                    return false;
                }
            }
            if self.send_key.is_none() {
                self.send_key =
                    Some(SendKey { sport: t.src_port, dst: t.dst, seg: t.len, gso: self.gso && self.rx.gso_to(t.dst) });
            }
            self.send.push(t.len, SocketAddr::new(t.dst, ROCE_PORT));
        }
        self.flush_send()
    }

    fn deliver_events(&mut self) {
        while let Some(ev) = self.engine.poll_event() {
            (self.sink)(ev);
        }
    }

    /// Takes in what arrived and what is due: queued datagrams, then expired timers.
    fn take_in(&mut self, now: Nanos) {
        self.receive();
        let now = self.now().max(now);
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
    }

    /// Leaves what the engine would send now for a later call (see [`Core::deferred`]).
    fn owe(&mut self, now: Nanos) {
        if self.deferred == 0 {
            self.deferred_since = now;
        }
        self.deferred += 1;
    }

    /// Whether one more call may leave its packets owed: none are yet, or fewer than `max`
    /// calls did so, the first less than `window` ago.
    fn may_owe_more(&self, now: Nanos, max: u32, window: u64) -> bool {
        self.deferred == 0 || (self.deferred < max && now.saturating_sub(self.deferred_since) < window)
    }

    /// Counters as `name value` lines (what `urxe stat` prints).
    pub fn stats_text(&self) -> String {
        let c: &Counters = self.engine.counters();
        let mut s = format!("{c:#?}\n{:#?}\n", self.counters);
        s.retain(|ch| ch != ',' && ch != '{' && ch != '}');
        s
    }
}

impl Device {
    /// Binds `local`:4791 and starts the progress thread. `EADDRINUSE` means the address and
    /// port belong to someone else (another urxe process or kernel rxe).
    pub fn open(local: IpAddr, cfg: EngineConfig, sink: EventSink) -> io::Result<Device> {
        let rx = RoceSocket::bind(SocketAddr::new(local, ROCE_PORT))?;
        Self::start(rx, cfg, sink)
    }

    /// Like [`Device::open`] over a UDP socket already bound to `addr:4791`.
    pub fn open_with_socket(sock: std::net::UdpSocket, cfg: EngineConfig, sink: EventSink) -> io::Result<Device> {
        Self::start(RoceSocket::adopt(sock)?, cfg, sink)
    }

    fn start(rx: RoceSocket, mut cfg: EngineConfig, sink: EventSink) -> io::Result<Device> {
        let gso = gso_setting()?;
        let rt = rt_setting()?;
        let local = rx.local_addr().ip();
        cfg.local_addr = local;
        let engine = Engine::new(cfg, ProcessMemory);
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKE)?;
        let rx_fd = rx.raw_fd();
        poll.registry().register(&mut SourceFd(&rx_fd), RX, Interest::READABLE)?;
        // Stats endpoint for `urxe stat`: an abstract Unix socket named after the process.
        let stats = bind_stats_listener(local);
        let mut stats = stats.ok();
        if let Some(l) = stats.as_mut() {
            poll.registry().register(l, STATS, Interest::READABLE)?;
        }
        let epoch = Instant::now();
        let core = Core {
            engine,
            rx,
            tx_socks: HashMap::new(),
            local,
            recv: RecvBatch::new(),
            send: SendBatch::new(MAX_GSO_SEGMENTS, MAX_GSO_BYTES + TX_SLOT),
            send_key: None,
            sink,
            epoch,
            gso,
            idle_polls: 0,
            found_at: None,
            away_after_found: u64::MAX,
            away_streak: 0,
            last_post_end: 0,
            deferred: 0,
            deferred_since: 0,
            held_by_thread: false,
            counters: TransportCounters::default(),
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            waker,
            stop: AtomicBool::new(false),
            thread_deadline: AtomicU64::new(u64::MAX),
            app_active_at: AtomicU64::new(0),
            work_left: AtomicBool::new(false),
            rx_armed: AtomicBool::new(true),
            thread_wake_at: AtomicU64::new(u64::MAX),
            registry: poll.registry().try_clone()?,
            rx_fd,
            epoch,
            rt: AtomicBool::new(false),
            wake_counters: WakeCounters::default(),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("urxe-progress".into())
            .spawn(move || progress_thread(sh, poll, stats, rt))?;
        Ok(Device { shared, thread: Some(thread), local })
    }

    pub fn local_addr(&self) -> IpAddr {
        self.local
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock is caught at the FFI boundary; the engine's state is
        // still consistent enough to keep serving (no invariant spans a panic point), so
        // recover the guard rather than poisoning every later call.
        self.shared.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs a control-path command on the engine, then transmits whatever it produced and
    /// delivers its events (e.g. a QP moved to ERR flushes its WRs).
    pub fn with<R>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>, Nanos) -> R) -> R {
        let mut c = self.lock();
        let now = c.now();
        if c.deferred > 0 {
            // Owed packets leave first: `f` may destroy the QP that owes them.
            c.transmit(now);
        }
        let r = f(&mut c.engine, now);
        let sent_all = c.transmit(now);
        c.deliver_events();
        self.kick_if_needed(&mut c, now, sent_all);
        drop(c);
        self.take_left_work();
        r
    }

    /// Runs the progress step the progress thread left to us (packets that arrived, a timer
    /// that fired) while we held the lock; their completions show in the next poll.
    ///
    /// Packets this application owes on purpose (see [`Device::post`] and [`Device::poll`]) stay
    /// owed, and so do plain ACKs for what this step receives while we busy-poll: the step was
    /// left to us because we are active, so our next call sends them (with the post they wait
    /// for), and the progress thread's next look (within about a millisecond: it is disarmed)
    /// does if we stop. Sending them here, alone, would undo the pairing the wait is for.
    fn take_left_work(&self) {
        if self.shared.work_left.swap(false, Ordering::SeqCst) {
            let mut c = self.lock();
            let now = c.now();
            c.take_in(now);
            // Like a busy poller's own receive: plain ACKs it produces wait for our next call.
            let hold =
                c.deferred > 0 || (!self.shared.rx_armed.load(Ordering::Relaxed) && c.engine.only_acks_pending());
            let sent_all = if hold {
                c.owe(now);
                true
            } else {
                c.transmit(now)
            };
            c.deliver_events();
            self.kick_if_needed(&mut c, now, sent_all);
        }
    }

    /// Posting path: like [`Device::with`] (the closure posts), transmitting in this thread.
    /// A post right after a completion means the application works through the library (a
    /// throughput loop posting between polls), not that it waits elsewhere.
    ///
    /// Doorbell batching: the closure also says whether every WR it posted is small (one short
    /// packet). A small post that
    /// follows the previous one within [`BURST_GAP_NS`], while the application busy-polls its CQ
    /// (packet wakeups disarmed), is queued without transmitting; the burst leaves as one batch
    /// (a UDP GSO train on loopback) at the next poll or verb call, after [`BURST_MAX_POSTS`]
    /// posts or [`BURST_MAX_NS`], whichever comes first. A busy poller always comes back to its
    /// CQ; should it stop calling the library altogether, the progress thread takes over within
    /// about [`REARM_AFTER_NS`] (it does when nobody polled or posted for that long).
    pub fn post<R>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>, Nanos) -> (R, bool)) -> R {
        let mut c = self.lock();
        let now = c.now();
        if let Some(t) = c.found_at.take() {
            c.away_after_found = now.saturating_sub(t);
        }
        self.shared.app_active_at.store(now.max(1), Ordering::Release);
        let (r, small) = f(&mut c.engine, now);
        let burst = small
            && !self.shared.rx_armed.load(Ordering::Relaxed)
            && now.saturating_sub(c.last_post_end) < BURST_GAP_NS
            && c.may_owe_more(now, BURST_MAX_POSTS, BURST_MAX_NS);
        if burst {
            c.owe(now);
            c.counters.tx_deferred_posts += 1;
        } else {
            let sent_all = c.transmit(now);
            c.deliver_events();
            self.kick_if_needed(&mut c, now, sent_all);
        }
        c.last_post_end = if burst { now } else { c.now() };
        drop(c);
        self.take_left_work();
        r
    }

    /// Receive-posting path: a receive WR produces no packet, so nothing is transmitted here;
    /// packets owed by an earlier call (see [`Device::poll`]) leave with the next post or poll
    /// (a poller that found a receive completion reposts the buffer, then answers).
    pub fn post_recv<R>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>) -> R) -> R {
        let mut c = self.lock();
        let r = f(&mut c.engine);
        // Receives posted to a QP in the error state complete at once (flushed).
        c.deliver_events();
        drop(c);
        self.take_left_work();
        r
    }

    /// Polling path: receive and progress in the caller's thread, then read the CQ.
    /// `found` tells whether the poll produced anything: a caller that keeps finding nothing
    /// yields the CPU every [`IDLE_POLLS_PER_YIELD`] polls, because on a soft device the peer
    /// it waits for (often a process on the same few cores) needs CPU time to answer.
    pub fn poll<R>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>) -> R, found: impl FnOnce(&R) -> bool) -> R {
        let mut c = self.lock();
        let now = c.now();
        if let Some(t) = c.found_at.take() {
            c.away_after_found = now.saturating_sub(t);
        }
        c.take_in(now);
        self.shared.app_active_at.store(now.max(1), Ordering::Release);
        let r = f(&mut c.engine);
        let got = found(&r);
        // A busy poller that found a completion acts on it next, typically by posting: what
        // the packets just received call for (ACKs) leaves with that post, one send call
        // instead of two on the round trip's critical path. Nothing waits long: every library
        // call transmits, and the progress thread takes over if the application goes quiet.
        // A poll that finds nothing means the application waits: owed packets go now.
        let defer = got
            && c.engine.may_transmit()
            && !self.shared.rx_armed.load(Ordering::Relaxed)
            && c.may_owe_more(now, POLL_DEFER_MAX, POLL_DEFER_NS);
        let sent_all = if defer {
            c.owe(now);
            c.counters.tx_deferred_polls += 1;
            true
        } else {
            c.transmit(now)
        };
        c.deliver_events();
        self.kick_if_needed(&mut c, now, sent_all);
        let idle = if got {
            c.idle_polls = 0;
            false
        } else {
            c.idle_polls = c.idle_polls.wrapping_add(1);
            c.idle_polls.is_multiple_of(IDLE_POLLS_PER_YIELD)
        };
        let empty_streak = c.idle_polls;
        // One long absence may be a preemption; the same absence after two completions in a
        // row is the application's pattern (it waits elsewhere after each completion).
        let mut rearm = false;
        if got {
            if c.away_after_found >= AWAY_MEANS_ELSEWHERE_NS {
                c.away_streak = c.away_streak.saturating_add(1);
                rearm = c.away_streak >= AWAY_STREAK_TO_REARM;
            } else {
                c.away_streak = 0;
            }
            c.away_after_found = 0;
            c.found_at = Some(now);
        }
        drop(c);
        if rearm {
            self.shared.set_rx_armed(true);
        } else if !got && empty_streak == DISARM_AFTER_EMPTY_POLLS {
            self.shared.set_rx_armed(false);
        }
        self.take_left_work();
        if idle {
            std::thread::yield_now();
        }
        r
    }

    /// Wakes the progress thread if it sleeps past the engine's new deadline or the socket
    /// has a backlog to drain.
    fn kick_if_needed(&self, c: &mut Core, now: Nanos, sent_all: bool) {
        let due = c.engine.poll_timeout().unwrap_or(u64::MAX);
        let polling = now.saturating_sub(self.shared.app_active_at.load(Ordering::Acquire)) < APP_ACTIVE_NS;
        // Disarmed, the thread looks by itself within REARM_AFTER_NS and takes over once nobody
        // has polled for that long; until then the pollers run the timers.
        let thread_looks_by = if self.shared.rx_armed.load(Ordering::SeqCst) {
            self.shared.thread_deadline.load(Ordering::Acquire)
        } else {
            now + 2 * REARM_AFTER_NS
        };
        if !sent_all || (!polling && due < thread_looks_by) {
            self.shared.ring();
        }
    }

    pub fn stats_text(&self) -> String {
        let t = self.lock().stats_text();
        t + &self.shared.wake_counters.text()
    }

    pub fn transport_counters(&self) -> TransportCounters {
        self.lock().counters
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _ = self.shared.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `URXE_GSO`: `1` (default) lets loopback trains go out as UDP GSO sends; `0` sends every
/// packet as its own datagram (e.g. so a loopback capture shows each packet as a frame).
fn gso_setting() -> io::Result<bool> {
    match std::env::var("URXE_GSO").as_deref() {
        Err(_) | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(v) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("URXE_GSO={v}: expected 0 or 1"))),
    }
}

/// Prefix of the stats sockets (abstract namespace): `urxe-stat-<pid>-<address>`.
pub const STATS_SOCKET_PREFIX: &str = "urxe-stat-";

/// Name of the stats socket of the device of process `pid` on `addr`.
pub fn stats_socket_name(pid: u32, addr: IpAddr) -> String {
    format!("{STATS_SOCKET_PREFIX}{pid}-{addr}")
}

fn bind_stats_listener(local: IpAddr) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(stats_socket_name(std::process::id(), local))?;
    let l = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(UnixListener::from_std(l))
}

fn serve_stats(shared: &Shared, l: &UnixListener) {
    use std::io::Write;
    // Bounded: at most a few clients per wakeup.
    for _ in 0..8 {
        match l.accept() {
            Ok((s, _)) => {
                let text = {
                    let c = shared.core.lock().unwrap_or_else(|p| p.into_inner());
                    let prio = if shared.rt.load(Ordering::Relaxed) { "real-time" } else { "normal" };
                    format!(
                        "pid {}\naddress {}\nprogress thread {prio}\n{}{}",
                        std::process::id(),
                        c.local,
                        c.stats_text(),
                        shared.wake_counters.text()
                    )
                };
                // The client reads to EOF; a blocking write of a few KiB to a fresh socket.
                let mut s = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(s));
                let _ = s.set_nonblocking(false);
                let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
                let _ = s.write_all(text.as_bytes());
            }
            Err(_) => return,
        }
    }
}

/// `URXE_RT`: `1` (default) runs the progress thread at real-time priority when the process
/// may (CAP_SYS_NICE or RLIMIT_RTPRIO), `0` leaves it at normal priority.
fn rt_setting() -> io::Result<bool> {
    match std::env::var("URXE_RT").as_deref() {
        Err(_) | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(v) => Err(io::Error::new(io::ErrorKind::InvalidInput, format!("URXE_RT={v}: expected 0 or 1"))),
    }
}

/// The progress thread does what a NIC and the kernel's softirq do for kernel rxe: it lands data
/// in memory that an application may be spinning on (ib_write_lat polls a buffer, not the CQ).
/// At normal priority it would wait for a time slice behind that spinning thread; SCHED_FIFO
/// (lowest RT level) lets it run as soon as a packet arrives. It blocks between packets and
/// never spins (see the minimum sleep below), so this cannot starve anything. Best effort:
/// without the privilege, it stays at normal priority.
fn raise_priority() -> bool {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain syscall on the calling thread (pid 0) with a valid param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Shortest sleep when the engine's deadline has already passed after handling it: a guard so a
/// deadline that does not move can never make the (possibly real-time) thread spin.
const MIN_SLEEP: Duration = Duration::from_micros(50);

fn progress_thread(shared: Arc<Shared>, mut poll: Poll, stats: Option<UnixListener>, rt: bool) {
    if rt {
        shared.rt.store(raise_priority(), Ordering::Relaxed);
    }
    let mut events = Events::with_capacity(16);
    // Absolute deadline (ns since the epoch) of the engine's next timer.
    let mut deadline: Option<u64> = None;
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let now = shared.now();
        let mut wake_at = deadline;
        if !shared.rx_armed.load(Ordering::SeqCst) {
            // Pollers take the packets; check now and then that someone still polls.
            let check = now + REARM_AFTER_NS;
            wake_at = Some(wake_at.map_or(check, |d| d.min(check)));
        }
        let timeout = wake_at.map(|d| Duration::from_nanos(d.saturating_sub(now)).max(MIN_SLEEP));
        shared.thread_wake_at.store(wake_at.unwrap_or(u64::MAX), Ordering::SeqCst);
        // A disarm between reading rx_armed above and storing the wake time would not ring us:
        // look again now that the wake time is published.
        if wake_at.is_none_or(|w| w > now + REARM_AFTER_NS) && !shared.rx_armed.load(Ordering::SeqCst) {
            continue;
        }
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                // Cannot wait: back off rather than spin.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        shared.wake_counters.thread_wakeups.fetch_add(1, Ordering::Relaxed);
        if let Some(l) = &stats {
            if events.iter().any(|e| e.token() == STATS) {
                serve_stats(&shared, l);
            }
        }
        if !shared.rx_armed.load(Ordering::SeqCst) {
            let idle_for = shared.now().saturating_sub(shared.app_active_at.load(Ordering::Acquire));
            if idle_for < REARM_AFTER_NS && events.is_empty() && deadline.is_none_or(|d| d > shared.now()) {
                continue;
            }
            if idle_for >= REARM_AFTER_NS {
                shared.set_rx_armed(true);
            }
        }
        // Never wait for the lock: if an application thread holds it, it is active and runs
        // the step on its way out. Dekker-style: flag first, then try once more, so a thread
        // that left between our first try and the flag cannot miss it.
        let mut c = match shared.core.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                shared.work_left.store(true, Ordering::SeqCst);
                match shared.core.try_lock() {
                    Ok(c) => c,
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => {
                        shared.wake_counters.lock_busy.fetch_add(1, Ordering::Relaxed);
                        // The application runs timers and packets now; look again in a while
                        // rather than re-waking at a deadline that is already past.
                        deadline = Some(shared.now() + REARM_AFTER_NS);
                        continue;
                    }
                }
            }
        };
        c.counters.progress_wakeups += 1;
        let now = c.now();
        let active = now.saturating_sub(shared.app_active_at.load(Ordering::Acquire)) < APP_ACTIVE_NS;
        c.take_in(now);
        if active && !c.held_by_thread && c.engine.only_acks_pending() {
            // Requests that arrived while the application waits elsewhere (ib_write_lat spins on
            // memory): their ACKs are held for a moment so they leave with the application's
            // next post. The peer, polling for that ACK, then receives it together with the
            // next request and places it itself, and no thread hand-off is left on the round
            // trip. If the application does not post, the ACKs leave at its next empty poll or
            // after HOLD_ACK_NS.
            c.owe(now);
            c.held_by_thread = true;
            c.counters.tx_held_acks += 1;
        } else if !c.transmit(now) {
            // A socket is full (packets stay queued): try again shortly. Sockets are not watched
            // for writability (the per-flow ones are not registered at all); a full UDP send
            // buffer drains within microseconds on loopback, a NIC's within a millisecond.
            c.owe(now);
        }
        c.deliver_events();
        deadline = c.engine.poll_timeout();
        if c.deferred > 0 {
            let hold = c.deferred_since + HOLD_ACK_NS;
            deadline = Some(deadline.map_or(hold, |d| d.min(hold)));
        }
        shared.thread_deadline.store(deadline.unwrap_or(u64::MAX), Ordering::Release);
        drop(c);
    }
}
