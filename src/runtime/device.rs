//! One urxe device: the typed façade the provider calls.
//!
//! A [`Device`] is an engine behind a mutex with its sockets (`io`), the pacing policy
//! (`pacing`) and a progress thread (`progress`). Its methods are the verbs
//! that move packets — [`Device::post_send`], [`Device::bind_mw`], [`Device::post_recv`],
//! [`Device::post_srq_recv`], [`Device::poll_cq`] — and [`Device::control`] for the control
//! verbs (create/modify/destroy objects), which move packets only as a side effect.
//!
//! Who moves packets:
//! - The caller's thread, on the fast path: [`Device::post_send`] transmits what the engine
//!   produces before returning (a NIC doorbell), and [`Device::poll_cq`] receives whatever is
//!   queued on the socket, runs due timers and transmits responses before reading the CQ. An
//!   application that busy-polls its CQ therefore never pays a thread hand-off.
//! - The progress thread covers what nobody polls for: ACKs and responses while the
//!   application sleeps, retransmission timers, completion-channel events. It never spins.
//!
//! Time is read here and in the progress thread (the only places) and handed to the engine as
//! nanoseconds.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use mio::unix::SourceFd;
use mio::{Interest, Poll};

use super::clock::Epoch;
use super::hub::{Core, Hub};
use super::pacing::{Pacing, Signals, RX, SMALL_POST_BYTES};
use super::progress::{self, rt_setting, WAKE};
use crate::engine::{
    CqId, Engine, EngineConfig, Error, MwBind, Nanos, Qpn, RecvWr, SendFlags, SendWr, SrqId, WorkCompletion,
};
use crate::host::memory::ProcessMemory;
use crate::observe::stats::{bind_stats_listener, StatsServer, TransportCounters};
use crate::transport::group::Member;
use crate::transport::io::{gso_setting, Io};
use crate::transport::socket::{RoceSocket, ROCE_PORT};

pub use super::hub::EventSink;
pub use super::pacing::IDLE_POLLS_PER_YIELD;
pub use crate::observe::stats::{read_stats, stats_socket_name, stats_socket_pid, STATS_SOCKET_PREFIX};

/// QPN counter values reserved in the slot record at a time (shared address). Each owner
/// of a slot moves its counter at least this far, so the counter comes round to reuse a QPN
/// only after about 65 000 / 256 = 255 owners.
const QPN_CHUNK: u32 = 256;

/// A running device. Dropping it stops the progress thread.
pub struct Device {
    hub: Arc<Hub>,
    thread: Option<JoinHandle<()>>,
    stats: Option<StatsServer>,
    local: IpAddr,
    /// Time zero of the device clock (engine `now`, completion timestamps).
    epoch: Epoch,
    /// `CLOCK_REALTIME` at `epoch`, in ns since the Unix epoch.
    realtime_at_epoch: u64,
}

/// `CLOCK_REALTIME` in ns since the Unix epoch (0 if the clock is before it).
fn realtime_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// One send WR of a posted list, converted, with the remote XRC SRQ number it names (XRC
/// initiators only): what [`Device::post_sends`] takes.
#[derive(Clone, Copy, Debug)]
pub struct PostSend<'a> {
    pub srqn: Option<u32>,
    pub wr: SendWr<'a>,
}

impl Device {
    /// Binds `local`:4791 and starts the progress thread. `EADDRINUSE` means the address and
    /// port belong to someone else (another urxe process or kernel rxe).
    pub fn open(local: IpAddr, cfg: EngineConfig, sink: EventSink) -> io::Result<Device> {
        let rx = RoceSocket::bind(SocketAddr::new(local, ROCE_PORT))?;
        Self::start(rx, cfg, sink, None)
    }

    /// Like [`Device::open`] over a UDP socket already bound to `addr:4791`.
    pub fn open_with_socket(sock: std::net::UdpSocket, cfg: EngineConfig, sink: EventSink) -> io::Result<Device> {
        Self::start(RoceSocket::adopt(sock)?, cfg, sink, None)
    }

    /// Runs the device on the slot of a shared address (see [`crate::transport::group`]): it receives on
    /// the slot's socket, hands out QPNs `slot << 16 | n` continuing the slot's counter, and
    /// drops (counting) datagrams for other slots. The member leaves the group when the device
    /// is dropped.
    pub fn open_group(member: Member, cfg: EngineConfig, sink: EventSink) -> io::Result<Device> {
        let rx = RoceSocket::adopt(member.socket_dup()?)?;
        Self::start(rx, cfg, sink, Some(member))
    }

    fn start(rx: RoceSocket, mut cfg: EngineConfig, sink: EventSink, group: Option<Member>) -> io::Result<Device> {
        let gso = gso_setting()?;
        let rt = rt_setting()?;
        let local = rx.local_addr().ip();
        let rx_fd = rx.raw_fd();
        cfg.local_addr = local;
        // Keys must not be predictable from outside: whatever the caller passed, the engine's
        // RNG is seeded from the kernel's random pool.
        cfg.seed = crate::sys::random_seed();
        // SAFETY: the engine reaches memory only inside registered MRs after its key/PD/bounds/access checks.
        let mut engine = Engine::new(cfg, unsafe { ProcessMemory::new() });
        engine.set_fault_plan(super::faultplan::fault_setting()?);
        engine.set_dcqcn(crate::observe::ccstat::dcqcn_setting()?);
        let tap = crate::observe::tap::Tap::from_env(local)?;
        let mut io = Io::new(rx, gso, tap);
        let mut qpn_reserved = 0;
        if let Some(m) = &group {
            let first = m.reserve_qpns(QPN_CHUNK)?;
            qpn_reserved = first + QPN_CHUNK;
            engine
                .set_qpn_slot(m.qpn_base(), first)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "QPN slot"))?;
            io.set_slot(m.slot());
        }
        let poll = Poll::new()?;
        let doorbell = crate::sys::Doorbell::new()?;
        poll.registry().register(&mut SourceFd(&doorbell.raw_fd()), WAKE, Interest::READABLE)?;
        poll.registry().register(&mut SourceFd(&rx_fd), RX, Interest::READABLE)?;
        let epoch = Epoch::start();
        let realtime_at_epoch = realtime_ns();
        let mut core = Core::new(engine, io, sink, epoch);
        core.qpn_reserved = qpn_reserved;
        let hub = Arc::new(Hub {
            core: Mutex::new(core),
            signals: Signals::new(doorbell, poll.registry().try_clone()?, rx_fd, epoch)?,
            stop: AtomicBool::new(false),
            rt: AtomicBool::new(false),
            group,
        });
        let h = hub.clone();
        let thread = crate::spawn::spawn_started("urxe-progress", move || progress::run(h, poll, rt))?;
        // Stats endpoint for `urxe stat`: an abstract Unix socket named after the process,
        // served by its own normal-priority thread (best effort: a name clash leaves it out).
        let h = hub.clone();
        let stats = bind_stats_listener(local).ok().and_then(|l| StatsServer::start(l, move || h.stats_report()).ok());
        Ok(Device { hub, thread: Some(thread), stats, local, epoch, realtime_at_epoch })
    }

    /// The device clock now: ns since the device started, the clock completion timestamps
    /// are read from (`ibv_query_rt_values_ex`'s raw clock).
    pub fn clock(&self) -> Nanos {
        self.epoch.now()
    }

    /// A device-clock reading as wall-clock time, ns since the Unix epoch
    /// (`ibv_wc_read_completion_wallclock_ns`).
    pub fn wallclock_ns(&self, t: Nanos) -> u64 {
        self.realtime_at_epoch.saturating_add(t)
    }

    pub fn local_addr(&self) -> IpAddr {
        self.local
    }

    /// This device's membership of its address's group, if it shares the address.
    pub fn group(&self) -> Option<&Member> {
        self.hub.group.as_ref()
    }

    /// On a shared address, moves the slot's persistent QPN mark ahead of the engine before
    /// the engine can hand out a QPN past it, so a later owner of the slot never reuses one.
    fn persist_qpn_counter(&self, c: &mut Core) {
        let Some(m) = &self.hub.group else { return };
        if c.engine.next_qpn_counter() + 1 >= c.qpn_reserved {
            if let Ok(first) = m.reserve_qpns(QPN_CHUNK) {
                // Our slot lock makes us the only writer: the chunk follows the previous one
                // unless the counter wrapped, which the engine's QPN space cannot reach.
                c.qpn_reserved = first + QPN_CHUNK;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.hub.lock()
    }

    /// Runs a control verb on the engine, then transmits whatever it produced and delivers its
    /// events (e.g. a QP moved to ERR flushes its WRs).
    ///
    /// The control verbs (objects: PD, MR, MW, CQ, QP, SRQ, AH) take the engine as is: each
    /// would be a one-line pass-through here, and what the transport owns about them is the
    /// same for all — owed packets leave first, produced packets and events leave after.
    pub fn control<T>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>, Nanos) -> T) -> T {
        let mut c = self.lock();
        let now = c.now();
        if c.pacing.owes() {
            // Owed packets leave first: `f` may destroy the QP that owes them.
            c.transmit(now);
        }
        let r = f(&mut c.engine, now);
        self.persist_qpn_counter(&mut c);
        let sent_all = c.transmit(now);
        c.deliver_events();
        self.kick_if_needed(&mut c, now, sent_all);
        drop(c);
        self.take_left_work();
        r
    }

    /// Posts a chain of send WRs to QP `qpn` under one lock and transmits once, so the packets
    /// of the whole chain can leave in one batch. `chain` walks the application's list, calling
    /// the given `post` for each converted WR, and stops at the first error (its own, or the
    /// engine's as `post` returns it); that error is returned as is.
    ///
    /// A chain of small WRs (at most `SMALL_POST_BYTES` of payload each) in a burst of posts
    /// may leave its packets for the next call (doorbell batching, see `pacing`).
    pub fn post_send<E>(
        &self,
        qpn: Qpn,
        chain: impl FnOnce(&mut dyn FnMut(&SendWr<'_>) -> Result<(), Error>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.post_send_to(qpn, |post| chain(&mut |wr| post(None, wr)))
    }

    /// [`Device::post_send`] where each WR may name a remote XRC SRQ (an XRC initiator's).
    pub fn post_send_to<E>(
        &self,
        qpn: Qpn,
        chain: impl FnOnce(&mut dyn FnMut(Option<u32>, &SendWr<'_>) -> Result<(), Error>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.send_path(|engine, pacing, now| {
            let mut bytes = Some(0u64);
            let r = chain(&mut |srqn, wr| {
                let len = wr.request_payload_len();
                engine.post_send_to(now, qpn, srqn, wr)?;
                // A signaled WR that ends a run of unsignaled ones leaves now (see
                // SELECTIVE_SIGNAL_RUN); so does a larger one.
                let ends_run = pacing.send_wr_posted(wr.flags.contains(SendFlags::SIGNALED));
                bytes = bytes.filter(|_| len <= SMALL_POST_BYTES && !ends_run).map(|b| b + len);
                Ok(())
            });
            (r, bytes)
        })
    }

    /// Posts send WRs already converted from the application's list (the provider converts
    /// the whole list before this call: no C struct is read under the lock) to QP `qpn`: one
    /// lock, one transmit, so the packets of the whole list can leave in one batch. Stops at
    /// the first WR the engine refuses: `Err((i, e))`, WRs `..i` are posted.
    ///
    /// A list of small WRs (at most `SMALL_POST_BYTES` of payload each) in a burst of posts
    /// may leave its packets for the next call (doorbell batching, see `pacing`).
    pub fn post_sends(&self, qpn: Qpn, wrs: &[PostSend<'_>]) -> Result<(), (usize, Error)> {
        self.send_path(|engine, pacing, now| {
            let mut bytes = Some(0u64);
            for (i, p) in wrs.iter().enumerate() {
                let len = p.wr.request_payload_len();
                if let Err(e) = engine.post_send_to(now, qpn, p.srqn, &p.wr) {
                    return (Err((i, e)), bytes);
                }
                // A signaled WR that ends a run of unsignaled ones leaves now (see
                // SELECTIVE_SIGNAL_RUN); so does a larger one.
                let ends_run = pacing.send_wr_posted(p.wr.flags.contains(SendFlags::SIGNALED));
                bytes = bytes.filter(|_| len <= SMALL_POST_BYTES && !ends_run).map(|b| b + len);
            }
            (Ok(()), bytes)
        })
    }

    /// Posts converted receive WRs to QP `qpn` under one lock; `Err((i, e))` as
    /// [`Device::post_sends`].
    pub fn post_recvs(&self, qpn: Qpn, wrs: &[RecvWr<'_>]) -> Result<(), (usize, Error)> {
        self.recv_path(|engine, epoch| {
            for (i, wr) in wrs.iter().enumerate() {
                engine.post_recv_at(qpn, wr, || epoch.now()).map_err(|e| (i, e))?;
            }
            Ok(())
        })
    }

    /// Posts converted receive WRs to SRQ `srq` under one lock; `Err((i, e))` as
    /// [`Device::post_sends`].
    pub fn post_srq_recvs(&self, srq: SrqId, wrs: &[RecvWr<'_>]) -> Result<(), (usize, Error)> {
        self.recv_path(|engine, _| {
            for (i, wr) in wrs.iter().enumerate() {
                engine.post_srq_recv(srq, wr).map_err(|e| (i, e))?;
            }
            Ok(())
        })
    }

    /// Type 1 bind through `ibv_bind_mw`: a BIND_MW send WR on `qpn`. Returns the window's new
    /// rkey.
    pub fn bind_mw(&self, qpn: Qpn, wr_id: u64, flags: SendFlags, bind: &MwBind) -> Result<u32, Error> {
        self.send_path(|engine, _, now| (engine.bind_mw(now, qpn, wr_id, flags, bind), None))
    }

    /// The send path: `f` posts and says how many payload bytes it posted in small WRs (`None`:
    /// a WR was larger); its packets leave now
    /// unless `Pacing::post_may_wait` lets them wait for the next post of a burst. A busy
    /// poller always comes back to its CQ; should it stop calling the library altogether, the
    /// progress thread takes over within about a millisecond.
    fn send_path<T>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>, &mut Pacing, Nanos) -> (T, Option<u64>)) -> T {
        let mut c = self.lock();
        let now = c.now();
        c.pacing.app_returns(now);
        self.hub.signals.app_enters(now);
        let core = &mut *c;
        let (r, bytes) = f(&mut core.engine, &mut core.pacing, now);
        let burst = c.pacing.post_may_wait(bytes, self.hub.signals.armed_hint(), now);
        if burst {
            c.pacing.owe_post(now, bytes.unwrap_or(0));
            c.counters.tx_deferred_posts += 1;
            self.kick_if_needed(&mut c, now, true);
        } else {
            let sent_all = c.transmit(now);
            c.deliver_events();
            self.kick_if_needed(&mut c, now, sent_all);
        }
        c.pacing.last_post_end = if burst { now } else { c.now() };
        drop(c);
        self.take_left_work();
        r
    }

    /// Posts a receive WR to QP `qpn`.
    pub fn post_recv(&self, qpn: Qpn, wr: &RecvWr<'_>) -> Result<(), Error> {
        self.recv_path(|engine, epoch| engine.post_recv_at(qpn, wr, || epoch.now()))
    }

    /// Posts a receive WR to SRQ `srq`.
    pub fn post_srq_recv(&self, srq: SrqId, wr: &RecvWr<'_>) -> Result<(), Error> {
        self.recv_path(|engine, _| engine.post_srq_recv(srq, wr))
    }

    /// Receive-posting path: a receive WR produces no packet, so nothing is transmitted here;
    /// packets owed by an earlier call (see [`Device::poll_cq`]) leave with the next post or
    /// poll (a poller that found a receive completion reposts the buffer, then answers).
    ///
    /// The clock is read only if the post completes at once (a QP in the error state flushes
    /// it; the completion carries the time): a busy poller reposts a receive per message, and
    /// a clock read there was about 6 % of ib_send_bw 64 B's receiving thread.
    fn recv_path<T>(&self, f: impl FnOnce(&mut Engine<ProcessMemory>, Epoch) -> T) -> T {
        let mut c = self.lock();
        let epoch = c.epoch();
        let r = f(&mut c.engine, epoch);
        // Receives posted to a QP in the error state complete at once (flushed).
        c.deliver_events();
        drop(c);
        self.take_left_work();
        r
    }

    /// Arms CQ `cq` for its next completion event (`ibv_req_notify_cq`). The application is
    /// about to wait for that event (in `ibv_get_cq_event` or poll(2) on the channel) instead of
    /// polling: packet arrivals must wake the progress thread again even if the empty polls
    /// before (a short spin, as rsockets and UCX do before they sleep) had disarmed them, or
    /// the event would wait for the away timer (1–9 ms after the application's last call).
    pub fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), Error> {
        // Arming produces no packet: what is owed stays owed for the reply post that usually
        // follows (an event-driven ping-pong: event, re-arm, poll, post).
        let r = {
            let mut c = self.lock();
            let r = c.engine.req_notify_cq(cq, solicited_only);
            c.deliver_events();
            drop(c);
            self.take_left_work();
            r
        };
        if r.is_ok() {
            let sig = &self.hub.signals;
            sig.app_waits();
            sig.set_rx_armed(true);
        }
        r
    }

    /// The data-path poll: receives and progresses the device in the caller's thread, then reads
    /// up to `out.len()` completions of CQ `cq` into `out` and returns how many.
    ///
    /// A poll that found a completion may leave the ACKs it produced for the caller's next post
    /// (see `Pacing::poll_may_wait`), and so may one that found nothing while completions the
    /// caller has not polled yet wait in another CQ; otherwise one that finds nothing sends
    /// what is owed at once. A
    /// caller that keeps finding nothing yields the CPU every [`IDLE_POLLS_PER_YIELD`] polls,
    /// because on a soft device the peer it waits for (often a process on the same few cores)
    /// needs CPU time to answer; after every empty poll while its yields show that another
    /// thread waits for its core.
    #[must_use = "the completions written to `out` are only known through the count"]
    pub fn poll_cq(&self, cq: CqId, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        let sig = &self.hub.signals;
        let mut c = self.lock();
        let now = c.now();
        c.pacing.app_returns(now);
        // Completions already queued are older than anything in the socket: a CQ that holds
        // all the caller asks for answers without a receive call. (ib_send_lat finds the
        // peer's SEND while it polls its send CQ for the ACK that came with it; receiving
        // again before returning that receive completion put an empty recvmmsg, about
        // 0.3 µs, on every one-way trip.) The next poll that needs more receives.
        if c.engine.cq_len(cq) < out.len().max(1) {
            c.take_in(now, true);
        }
        sig.app_enters(now);
        sig.app_polls(now);
        let r = c.engine.poll_cq(cq, out);
        let got = matches!(r, Ok(n) if n > 0);
        // Nothing waits long: every library call transmits, and the progress thread takes over
        // if the application goes quiet. A poll that finds nothing means the application
        // waits: owed packets go now.
        let (made, may_transmit) = (c.engine.completions_made(), c.engine.may_transmit());
        let defer = c.pacing.poll_may_wait(got, made, may_transmit, sig.armed_hint(), now);
        let sent_all = if defer {
            c.pacing.owe(now);
            c.counters.tx_deferred_polls += 1;
            true
        } else {
            c.transmit(now)
        };
        c.deliver_events();
        self.kick_if_needed(&mut c, now, sent_all);
        let after = c.pacing.after_poll(got, now, sig.take_yield_took());
        drop(c);
        if after.rearm {
            sig.set_rx_armed(true);
        } else if after.disarm {
            sig.set_rx_armed(false);
        }
        self.take_left_work();
        if after.yield_cpu {
            sig.yield_cpu(after.nap);
        }
        r
    }

    /// Runs the progress step the progress thread left to us (packets that arrived, a timer
    /// that fired) while we held the lock; their completions show in the next poll.
    ///
    /// Packets this application owes on purpose (see [`Device::post_send`] and
    /// [`Device::poll_cq`]) stay owed, and so do plain ACKs for what this step receives while
    /// we busy-poll: the step was left to us because we are active, so our next call sends
    /// them (with the post they wait for), and the progress thread's next look (within about a
    /// millisecond: it is disarmed) does if we stop. Sending them here, alone, would undo the
    /// pairing the wait is for.
    fn take_left_work(&self) {
        let sig = &self.hub.signals;
        if sig.work_left.swap(false, Ordering::SeqCst) {
            let mut c = self.lock();
            let now = c.now();
            c.take_in(now, false);
            // Like a busy poller's own receive: plain ACKs it produces wait for our next call.
            let hold = c.pacing.owes() || (!sig.armed_hint() && c.engine.only_acks_pending());
            let sent_all = if hold {
                c.pacing.owe(now);
                true
            } else {
                c.transmit(now)
            };
            c.deliver_events();
            self.kick_if_needed(&mut c, now, sent_all);
        }
    }

    /// Wakes the progress thread if it sleeps past the engine's new deadline or the socket
    /// has a backlog to drain.
    /// An application thread is about to wait in the library for a completion event: it runs
    /// no timer until it returns, so if the engine's next deadline (a retransmission, say) is
    /// earlier than the progress thread's, ring the thread so it plans for it. (An application
    /// that posts and then waits on a channel without ever polling would otherwise depend on
    /// a thread that sleeps until the next packet, which a lost request never brings.)
    /// Whether port 1 is up (false while a fault plan's `port-down` holds it down).
    pub fn port_active(&self) -> bool {
        let c = self.lock();
        c.engine.port_active(self.epoch.now())
    }

    /// The calling thread is about to sleep until a completion channel of this device is
    /// readable. It takes the receive socket from the progress thread if nobody else has it
    /// (see `owner`) and returns true: it then sleeps in poll(2) on the channel and
    /// [`Device::channel_step`]'s socket, runs a step whenever it wakes, and gives the socket
    /// back with [`Device::channel_wait_end`]. False: another thread owns it; wait on the
    /// channel alone.
    pub fn channel_wait_begin(&self) -> bool {
        let sig = &self.hub.signals;
        if !sig.owner.take() {
            return false;
        }
        sig.set_rx_armed(false);
        crate::observe::stats::WakeCounters::bump(&sig.wake_counters.owner_waits);
        true
    }

    /// The socket owner's progress step: receives what arrived, runs due timers, transmits
    /// (owed packets too: the application waits) and delivers the events (the channel
    /// records on `channel`). Returns the socket to sleep on, how long at most (ms, -1: no
    /// limit: until the engine's next deadline), and whether this step delivered a record to
    /// `channel` (the sink says so: written to its pipe, or handed to this waiter), which the
    /// owner then reads without polling first (a poll would return at once).
    pub fn channel_step(&self, channel: std::os::fd::RawFd) -> (std::os::fd::RawFd, i32, bool) {
        let sig = &self.hub.signals;
        crate::observe::stats::WakeCounters::bump(&sig.wake_counters.owner_steps);
        let mut c = self.lock();
        let now = c.now();
        let made = c.engine.completions_made();
        // Like a poller's receive: the owner sleeps in a level-triggered poll(2) on the
        // socket, so a partial batch ends the drain (a datagram that came meanwhile wakes the
        // poll at once; left after the owner leaves, the application's next verb or the
        // progress thread takes it). The drain to empty is for the edge-triggered progress
        // thread; here it cost an empty recvmmsg on every wake-up.
        c.take_in(now, true);
        let completed = c.engine.completions_made() != made;
        let mut reached = false;
        if completed && c.engine.only_acks_pending() && c.pacing.thread_may_hold(true) && {
            // Only if the completions reach this channel: the thread goes back to the
            // application now (otherwise it sleeps on, and the peer would wait for them).
            reached = c.deliver_events_to(channel);
            reached
        } {
            // The completion wakes the application, whose next post carries these ACKs (as
            // the progress thread holds them for an active application); should it post
            // nothing, its next poll or wait sends them, or the progress thread within
            // HOLD_ACK_NS.
            c.pacing.thread_holds(now);
            c.counters.tx_held_acks += 1;
        } else if !c.transmit(now) {
            c.pacing.owe(now);
        }
        reached |= c.deliver_events_to(channel);
        let mut due = c.engine.poll_timeout();
        if let Some(hold) = c.pacing.owed_deadline() {
            due = Some(due.map_or(hold, |d| d.min(hold)));
        }
        drop(c);
        self.take_left_work();
        // poll(2) counts milliseconds: round up, so the step after it finds the timer due.
        let ms = due.map_or(-1, |d| d.saturating_sub(now).div_ceil(1_000_000).min(i32::MAX as u64) as i32);
        (sig.rx_fd(), ms, reached)
    }

    /// The socket owner leaves its wait (see `Signals::owner_leaves`).
    pub fn channel_wait_end(&self) {
        self.hub.signals.owner_leaves();
    }

    /// A thread that does not own the socket starts (`true`) or ends (`false`) a plain wait
    /// on a completion channel: the progress thread must be armed for it.
    pub fn channel_reader(&self, starts: bool) {
        let sig = &self.hub.signals;
        if starts {
            sig.channel_readers.fetch_add(1, Ordering::SeqCst);
            sig.set_rx_armed(true);
        } else {
            let _ = sig.channel_readers.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    pub fn app_waits(&self) {
        let due = self.lock().engine.poll_timeout();
        if due.is_some_and(|d| d < self.hub.signals.thread_deadline.load(Ordering::Acquire)) {
            self.hub.signals.ring();
        }
    }

    fn kick_if_needed(&self, c: &mut Core, now: Nanos, sent_all: bool) {
        let sig = &self.hub.signals;
        let mut due = c.engine.poll_timeout();
        if sig.owner.waiting() {
            // Packets owed (a deferred post, held ACKs) are the progress thread's too while a
            // socket owner sleeps: no poller comes back for them.
            if let Some(hold) = c.pacing.owed_deadline() {
                due = Some(due.map_or(hold, |d| d.min(hold)));
            }
        }
        if sig.kick_needed(due, now, sent_all) {
            sig.ring();
        }
    }

    /// `ibv_attach_mcast`: attaches UD QP `qpn` to the multicast group `gid` names
    /// ([`Engine::attach_mcast`]); the first QP of a group makes us join the IP group on our
    /// interface with a socket of its own, which the progress thread watches. Errors: the
    /// engine's errno, or the socket's (the attachment is then undone).
    pub fn attach_mcast(&self, qpn: Qpn, gid: [u8; 16]) -> io::Result<()> {
        let mut c = self.lock();
        let new = c.engine.attach_mcast(qpn, gid).map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
        if let Some(group) = new {
            let joined = c.join_mcast(group).and_then(|fd| self.hub.signals.watch_mcast(fd));
            if let Err(e) = joined {
                c.leave_mcast(group, |_| {});
                let _ = c.engine.detach_mcast(qpn, gid);
                return Err(e);
            }
        }
        Ok(())
    }

    /// `ibv_detach_mcast`: the last QP of a group to leave closes its socket (leaving the IP
    /// group).
    pub fn detach_mcast(&self, qpn: Qpn, gid: [u8; 16]) -> io::Result<()> {
        let mut c = self.lock();
        let gone = c.engine.detach_mcast(qpn, gid).map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
        if let Some(group) = gone {
            c.leave_mcast(group, |fd| self.hub.signals.unwatch_mcast(fd));
        }
        Ok(())
    }

    /// Engine and transport counters as `name value` lines, then the wakeup counters.
    pub fn stats_text(&self) -> String {
        let t = self.lock().stats_text();
        t + &self.hub.signals.wake_counters.text()
    }

    pub fn transport_counters(&self) -> TransportCounters {
        self.lock().counters
    }

    /// Notes a fault injected outside the engine (librdmacm's rdma_cm faults) in the
    /// `URXE_PCAP` capture, as the engine's own are (`Tap::note`); nothing without a capture.
    pub fn fault_note(&self, text: &str) {
        if let Some(t) = self.lock().tap() {
            t.note(text);
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        drop(self.stats.take());
        self.hub.stop.store(true, Ordering::Release);
        self.hub.signals.wake_to_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
