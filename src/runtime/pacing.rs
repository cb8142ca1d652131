//! The pacing policy: when packets move, and who is woken to move them.
//!
//! Three decisions, each made here and nowhere else:
//! - **Doorbell batching.** A small send post in a burst leaves its packets for the next call
//!   ([`Pacing::post_may_wait`]); a poll that found a completion (or received one for another
//!   CQ) leaves the ACKs it produced for the post that usually follows
//!   ([`Pacing::poll_may_wait`]); a signaled WR after a run of unsignaled ones ends its
//!   burst ([`SELECTIVE_SIGNAL_RUN`]); the progress thread holds
//!   ACKs for an active application's next post ([`HOLD_ACK_NS`]). Whatever is left is *owed*
//!   ([`Pacing::owe`]) and leaves with the next transmit.
//! - **Arming.** Packet arrivals wake the progress thread only while it is armed: a poller that
//!   keeps finding nothing disarms it and takes the packets itself; a poll that finds a
//!   completion after the application stayed away re-arms it ([`Pacing::after_poll`]), and so
//!   does the thread when nobody polled for [`REARM_AFTER_NS`].
//! - **The doorbell.** An application thread rings the progress thread only when it would
//!   otherwise sleep past a new deadline or a socket is full ([`Signals::kick_needed`]).
//!
//! [`Pacing`] lives under the device lock; [`Signals`] is what application threads and the
//! progress thread tell each other without it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::away::AwayTimer;
use super::clock::Epoch;
use crate::engine::Nanos;
use crate::observe::stats::WakeCounters;
use crate::sys::Doorbell;

/// mio token of the receive socket.
pub(super) const RX: Token = Token(0);
/// Token of the away timer (see `away.rs`).
pub(super) const AWAY: Token = Token(3);
/// Token of the multicast groups' receive sockets (watched whether or not `RX` is armed:
/// multicast is rare enough that a busy poller does not need the thread kept off it).
pub(super) const MCAST: Token = Token(2);

/// Consecutive empty polls after which packet arrivals stop waking the progress thread.
const DISARM_AFTER_EMPTY_POLLS: u32 = 2;

/// An application that stayed away from its CQ this long after a completion waits elsewhere
/// (e.g. spins on memory): re-arm packet wakeups when it finds a completion.
const AWAY_MEANS_ELSEWHERE_NS: u64 = 10_000;
/// ... after this many completions in a row.
const AWAY_STREAK_TO_REARM: u32 = 2;

/// With packet wakeups disarmed, the progress thread re-arms them when no application thread
/// polled or posted for this long (it learns that from the away timer, see `away.rs`).
pub(super) const REARM_AFTER_NS: u64 = 1_000_000;

/// The away timer's slack: while disarmed, an application call pushes the timer to fire
/// [`REARM_AFTER_NS`] plus the slack after it, once it would fire sooner than [`REARM_AFTER_NS`]
/// from now; so a busy poller makes one `timerfd_settime` per slack. The slack starts at this
/// and doubles with each push of an application that keeps calling, up to
/// [`AWAY_SLACK_MAX_NS`]; it starts over when packet wakeups are re-armed.
pub(super) const AWAY_SLACK_NS: u64 = 500_000;
/// The largest slack: a busy poller pushes the timer once per 8 ms, and the thread wakes at
/// most 9 ms after the application's last call (the pollers run the engine's timers until
/// then; an RC timeout may fire up to four times its nominal value anyway, IBA 9.7.6.1.3).
///
/// Each push reprograms the CPU's timer (a VM exit on a virtual machine): measured with
/// ib_send_lat (100,000 iterations, alternating runs), one push per 0.5 ms put about 1 % of
/// the iterations 5-6 µs late, which was where its 99th percentile was (13-15 µs, 9 µs with
/// pushes 8 ms apart).
pub(super) const AWAY_SLACK_MAX_NS: u64 = 8_000_000;

/// Consecutive empty polls after which a polling thread yields the CPU once.
pub const IDLE_POLLS_PER_YIELD: u32 = 32;
/// A yield that kept the poller off the CPU this long ran another thread: the poller shares
/// its core with something runnable, perhaps the very peer it waits for (two busy-polling
/// processes on one core, which a 2-core machine does when a third process takes the other
/// core). Then the poller yields after every empty poll (one yield in 32 polls would leave the
/// peer's answer waiting 32 polls) while its yields go on showing it: see [`CROWDED_SCORE`].
/// On this kind of VM a `sched_yield` that finds nobody else takes about 0.5 µs; one that runs
/// another polling process and comes back, 2.8 µs. ib_send_lat with both processes on one core (`taskset -c 0`)
/// had a typical latency of 26-35 µs; with this, and the two rules below for packet wakeups,
/// 8.4 µs (1.7x its figure on two cores; tests/local_flood.rs failed in CI on the old figure,
/// when the scheduler put both processes on one core beside a flooding third).
const YIELD_RAN_OTHERS_NS: u64 = 1_500;
/// A yield that ran others adds this to the poller's crowding score, one that came back at once
/// takes 1 off; the poller is crowded while the score is above 0 and its last slow yield is
/// less than [`CROWDED_FOR_NS`] old. A few quick yields do not end it (the scheduler may keep
/// the yielder running while the other thread is not yet owed CPU time, and the next yield
/// runs it); eight in a row do, which keeps a lone poller from staying crowded on a yield an
/// interrupt made slow (it yields at every empty poll while crowded, so such yields come by
/// often: with a plain 1 ms window, ib_send_bw's sender on a core of its own made 110,000
/// yields a second).
const CROWDED_SCORE: u32 = 8;
/// The most the score holds.
const CROWDED_SCORE_MAX: u32 = 64;
/// How long after its last slow yield a poller counts as crowded at most.
const CROWDED_FOR_NS: u64 = 1_000_000;
/// A yield that kept the poller away this long gave a whole time slice to a thread that keeps
/// its CPU (a CPU-bound neighbour): a yielder goes to the back of the queue, and such a thread
/// runs its slice before it. For [`NAP_INSTEAD_FOR_NS`] after one, the poller gives the CPU up
/// by a short sleep instead (its timer wakes it, and a woken thread preempts one that has run
/// its share), so a neighbour takes tens of microseconds per empty poll rather than a slice.
/// ib_send_lat 2 B between two namespaces beside two CPU-bound loops on this 2-core VM: a
/// typical one-way 787 µs with yields (a slice each), 40-47 µs with naps; both processes and
/// one such loop on one core: 777 µs, 49-70 µs; libfabric's fi_msg_pingpong beside two loops
/// made no progress in 170 s with yields and finished in 70 s with naps (over libfabric's TCP
/// provider, which never yields, 23 s). Unloaded, and two processes alone on one core, the same as before.
const YIELD_LOST_SLICE_NS: u64 = 200_000;
/// How long a poller naps instead of yielding after a yield lost a slice ...
const NAP_INSTEAD_FOR_NS: u64 = 10_000_000;
/// ... except that every this many times it yields as a probe: one that comes back at once
/// (the neighbour is gone, or it was a moment's preemption) ends the naps.
const NAP_PROBE_EVERY: u32 = 8;

/// How long after an application poll or post the doorbell is not rung for a moved deadline.
pub(super) const APP_ACTIVE_NS: u64 = 1_000_000;

/// Send WRs carrying at most this many payload bytes may wait for the next post of a burst:
/// a few packets each (an 8 KiB message is two at MTU 4096; UCX's rc_verbs sends 64 KiB as
/// 8 KiB messages). Posted one call each, such messages would leave as one short train per
/// send call; batched, a burst fills whole GSO trains.
pub(super) const SMALL_POST_BYTES: u64 = 16_384;
/// The payload of the posts owed by a burst stays within this many bytes (a few GSO trains),
/// so that larger messages never hold the pipe empty for long.
const BURST_MAX_BYTES: u64 = 131_072;
/// A send post this soon after the previous one returned continues a burst.
const BURST_GAP_NS: u64 = 5_000;
/// At most this many posts of a burst wait for the next ... (63: with the post that ends it, a
/// burst of one-packet messages fills one GSO train of 64 segments. At 32, ib_send_bw 64 B
/// sent trains of about 25 and reached 1.93-2.16 M messages/s; at 63, 2.07-2.32, alternating
/// runs.)
const BURST_MAX_POSTS: u32 = 63;
/// ... and the first of them waits at most this long (checked at each post).
const BURST_MAX_NS: u64 = 50_000;
/// Selective signaling: a signaled send WR after at least this many unsignaled ones in a row
/// ends the burst it is in. The application will soon wait for its completion (perftest's
/// bandwidth tests signal every 100th WR and can post only 28 more before they wait), so it
/// leaves at once, and the ACK that completes it comes back one train sooner. ib_send_bw 64 B:
/// 1.71-2.07 M messages/s before, 1.82-2.15 after, alternating runs. An application that
/// signals every WR (perftest `-Q 1`, or one in two) keeps its bursts: ending them at every
/// signaled post took `-Q 1` from 1.25 to 0.24 M messages/s.
const SELECTIVE_SIGNAL_RUN: u32 = 8;

/// The progress thread holds ACKs for an active application's next post at most this long.
/// The thread's poll has whole-millisecond resolution (epoll rounds its timeout up), so this
/// is what a shorter value would amount to anyway; in the pattern the hold is for (the
/// application posts right after the thread places the peer's WRITE) the post ends it within
/// microseconds, and an application's empty poll sends it at once.
pub(super) const HOLD_ACK_NS: u64 = 1_000_000;
/// Consecutive polls that found completions (e.g. the send CQ, then the receive CQ) may leave
/// their packets for the next call, up to this many ...
const POLL_DEFER_MAX: u32 = 4;
/// ... within this long.
const POLL_DEFER_NS: u64 = 20_000;

/// The pacing state kept under the device lock.
pub(super) struct Pacing {
    /// Consecutive `poll` calls that found nothing.
    idle_polls: u32,
    /// Until when (ns) the poller may count as crowded, and its crowding score (see
    /// [`CROWDED_SCORE`]).
    crowded_until: u64,
    crowded_score: u32,
    /// Until when (ns) the poller naps instead of yielding (see [`YIELD_LOST_SLICE_NS`]).
    nap_until: u64,
    /// Naps or probe yields decided since (see [`NAP_PROBE_EVERY`]).
    naps: u32,
    /// When the last poll that found a completion returned (ns), if no poll came since.
    found_at: Option<u64>,
    /// How long the application stayed away from polling after its last completion: a
    /// memory spinner (ib_write_lat, NCCL-style flags) stays away for a round trip; a CQ
    /// poller comes back within microseconds.
    away_after_found: u64,
    /// Consecutive completions after each of which the application stayed away that long.
    away_streak: u32,
    /// When the last send post returned (ns).
    pub(super) last_post_end: u64,
    /// Library calls whose packets were left for the next call (a burst of small posts, see
    /// [`Pacing::post_may_wait`]; responses of a poll that found a completion, see
    /// [`Pacing::poll_may_wait`]; ACKs the progress thread holds).
    deferred: u32,
    /// When the first of them was posted (ns).
    deferred_since: u64,
    /// Payload bytes of the send posts among them.
    deferred_bytes: u64,
    /// The progress thread holds ACKs among them (it holds once, then sends).
    held_by_thread: bool,
    /// The engine's running completion count (`Engine::completions_made`) as of the last poll
    /// that found a completion or transmitted: a higher count means completions wait in some
    /// CQ that the application has not polled yet.
    seen_completions: u64,
    /// Unsignaled send WRs posted in a row (see [`SELECTIVE_SIGNAL_RUN`]).
    unsignaled_run: u32,
}

/// What a poll decided about packet-arrival wakeups and the CPU.
pub(super) struct AfterPoll {
    /// Re-arm packet wakeups (the application now waits elsewhere).
    pub(super) rearm: bool,
    /// Disarm them (the application busy-polls and takes the packets itself).
    pub(super) disarm: bool,
    /// Yield the CPU once (the application keeps finding nothing) ...
    pub(super) yield_cpu: bool,
    /// ... by a short sleep rather than `sched_yield` (see [`YIELD_LOST_SLICE_NS`]).
    pub(super) nap: bool,
}

impl Pacing {
    pub(super) fn new() -> Pacing {
        Pacing {
            idle_polls: 0,
            crowded_until: 0,
            crowded_score: 0,
            nap_until: 0,
            naps: 0,
            found_at: None,
            away_after_found: u64::MAX,
            away_streak: 0,
            last_post_end: 0,
            deferred: 0,
            deferred_since: 0,
            deferred_bytes: 0,
            held_by_thread: false,
            seen_completions: 0,
            unsignaled_run: 0,
        }
    }

    /// A send WR was posted. True when it is a signaled WR that ends a run of at least
    /// [`SELECTIVE_SIGNAL_RUN`] unsignaled ones: its packets should not wait in a burst.
    pub(super) fn send_wr_posted(&mut self, signaled: bool) -> bool {
        if signaled {
            std::mem::replace(&mut self.unsignaled_run, 0) >= SELECTIVE_SIGNAL_RUN
        } else {
            self.unsignaled_run = self.unsignaled_run.saturating_add(1);
            false
        }
    }

    /// An application call (post or poll) arrives: measures how long it stayed away since its
    /// last completion.
    pub(super) fn app_returns(&mut self, now: Nanos) {
        if let Some(t) = self.found_at.take() {
            self.away_after_found = now.saturating_sub(t);
        }
    }

    /// Whether packets are owed (left for a later call).
    pub(super) fn owes(&self) -> bool {
        self.deferred > 0
    }

    /// The progress thread's latest wake time for owed packets, if any.
    pub(super) fn owed_deadline(&self) -> Option<Nanos> {
        self.owes().then_some(self.deferred_since + HOLD_ACK_NS)
    }

    /// Leaves what the engine would send now for a later call.
    pub(super) fn owe(&mut self, now: Nanos) {
        if self.deferred == 0 {
            self.deferred_since = now;
        }
        self.deferred += 1;
    }

    /// A send post of `bytes` payload leaves its packets for a later call.
    pub(super) fn owe_post(&mut self, now: Nanos, bytes: u64) {
        self.owe(now);
        self.deferred_bytes = self.deferred_bytes.saturating_add(bytes);
    }

    /// Everything owed is being transmitted now.
    pub(super) fn paid(&mut self) {
        self.deferred = 0;
        self.deferred_bytes = 0;
        self.held_by_thread = false;
    }

    /// Whether one more call may leave its packets owed: none are yet, or fewer than `max`
    /// calls did so, the first less than `window` ago.
    fn may_owe_more(&self, now: Nanos, max: u32, window: u64) -> bool {
        self.deferred == 0 || (self.deferred < max && now.saturating_sub(self.deferred_since) < window)
    }

    /// Doorbell batching: a send post of only small WRs (`bytes` of payload in all, `None` if
    /// one WR is larger than [`SMALL_POST_BYTES`]), continuing a burst while the application
    /// busy-polls (`armed` false), may leave its packets for the next post; the burst leaves as
    /// one batch (UDP GSO trains on loopback) at the next poll or verb call, after
    /// [`BURST_MAX_POSTS`] posts, [`BURST_MAX_BYTES`] or [`BURST_MAX_NS`], whichever comes first.
    pub(super) fn post_may_wait(&self, bytes: Option<u64>, armed: bool, now: Nanos) -> bool {
        bytes.is_some_and(|b| self.deferred_bytes.saturating_add(b) <= BURST_MAX_BYTES)
            && !armed
            && now.saturating_sub(self.last_post_end) < BURST_GAP_NS
            && self.may_owe_more(now, BURST_MAX_POSTS, BURST_MAX_NS)
    }

    /// A busy poller (`armed` false) that found a completion (`got`) acts on it next, typically
    /// by posting: what the packets just received call for (ACKs, `may_transmit`) leaves with
    /// that post, one send call instead of two on the round trip's critical path.
    ///
    /// So does one whose poll found nothing while completions it has not seen wait in another
    /// CQ (`made`, the engine's running completion count, grew since a poll last found one or
    /// transmitted): an application that polls several CQs in turn (UCX polls four per
    /// progress call) receives the peer's SEND in whichever poll comes first, and reaps it a
    /// few polls later. The wait is bounded like any other ([`POLL_DEFER_MAX`] calls within
    /// [`POLL_DEFER_NS`]). A poll that found a completion or is told to transmit catches up
    /// with `made`.
    pub(super) fn poll_may_wait(&mut self, got: bool, made: u64, may_transmit: bool, armed: bool, now: Nanos) -> bool {
        let wait = (got || made != self.seen_completions)
            && may_transmit
            && !armed
            && self.may_owe_more(now, POLL_DEFER_MAX, POLL_DEFER_NS);
        if got || !wait {
            self.seen_completions = made;
        }
        wait
    }

    /// The progress thread may hold the ACKs it would send for an active application's next
    /// post, once (then it sends); the caller checks that only ACKs are pending.
    pub(super) fn thread_may_hold(&self, app_active: bool) -> bool {
        app_active && !self.held_by_thread
    }

    /// The progress thread holds what it would send (see [`Pacing::thread_may_hold`]).
    pub(super) fn thread_holds(&mut self, now: Nanos) {
        self.owe(now);
        self.held_by_thread = true;
    }

    /// Bookkeeping after a poll that found a completion (`got`) or not: when to yield the CPU,
    /// and whether the application's pattern calls for arming or disarming packet wakeups.
    /// `last_yield_took`: how long the last yield since the previous call kept its thread away,
    /// if one did (see [`YIELD_RAN_OTHERS_NS`]).
    pub(super) fn after_poll(&mut self, got: bool, now: Nanos, last_yield_took: Option<u64>) -> AfterPoll {
        match last_yield_took {
            Some(t) if t >= YIELD_RAN_OTHERS_NS => {
                self.crowded_until = now + CROWDED_FOR_NS;
                self.crowded_score = (self.crowded_score + CROWDED_SCORE).min(CROWDED_SCORE_MAX);
                if t >= YIELD_LOST_SLICE_NS {
                    self.nap_until = now + NAP_INSTEAD_FOR_NS;
                }
            }
            Some(_) => {
                self.crowded_score = self.crowded_score.saturating_sub(1);
                self.nap_until = 0;
            }
            None => {}
        }
        let crowded = self.crowded_score > 0 && now < self.crowded_until;
        let yield_cpu = if got {
            self.idle_polls = 0;
            false
        } else {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            crowded || self.idle_polls.is_multiple_of(IDLE_POLLS_PER_YIELD)
        };
        // One long absence may be a preemption; the same absence after two completions in a
        // row is the application's pattern (it waits elsewhere after each completion).
        let mut rearm = false;
        if got {
            if self.away_after_found >= AWAY_MEANS_ELSEWHERE_NS {
                self.away_streak = self.away_streak.saturating_add(1);
                // A crowded poller's absences are the scheduler's, not the application waiting
                // elsewhere (see [`CROWDED_SCORE`]); packet wakeups would add a thread to its core.
                rearm = self.away_streak >= AWAY_STREAK_TO_REARM && !crowded;
            } else {
                self.away_streak = 0;
            }
            self.away_after_found = 0;
            self.found_at = Some(now);
        }
        // A crowded poller yields after its first empty poll, often before a second: it
        // disarms at the first (the progress thread would be one more thread on its core,
        // woken by each packet, preempting whoever runs there).
        let disarm =
            !rearm && !got && (self.idle_polls == DISARM_AFTER_EMPTY_POLLS || (crowded && self.idle_polls == 1));
        // Every NAP_PROBE_EVERY-th of them yields after all: one that comes back at once
        // ends the naps (the neighbour is gone).
        let nap = yield_cpu && now < self.nap_until && {
            self.naps = self.naps.wrapping_add(1);
            !self.naps.is_multiple_of(NAP_PROBE_EVERY)
        };
        AfterPoll { rearm, disarm, yield_cpu, nap }
    }
}

/// What application threads and the progress thread tell each other without the lock.
pub(super) struct Signals {
    /// The progress thread's doorbell (rung with a raw `write`: a verb is no cancellation
    /// point, see `sys`).
    doorbell: Doorbell,
    /// Deadline (ns) the progress thread sleeps until; `u64::MAX` = no deadline.
    pub(super) thread_deadline: AtomicU64,
    /// When (ns) an application thread last polled or posted: while that is recent the
    /// application works through the library and its next poll moves the device, so a new
    /// deadline need not ring the progress thread's doorbell.
    pub(super) app_active_at: AtomicU64,
    /// When (ns) an application thread last polled a CQ. Only a poller comes back by itself:
    /// a thread that posts may then block in `ibv_get_cq_event` (rping's CQ thread already
    /// waits there while its main thread posts), so a post alone does not excuse a new
    /// deadline from the doorbell.
    pub(super) poll_active_at: AtomicU64,
    /// The progress thread found the lock held by an application thread and left the work to
    /// it: whoever leaves the library next runs one progress step. The progress thread never
    /// blocks on the lock — a real-time thread preempting an application thread and then
    /// waiting for that thread's lock costs two context switches and two futex calls.
    pub(super) work_left: AtomicBool,
    /// The progress thread is woken by packet arrivals. A poller that keeps finding its CQ
    /// empty disarms this: it takes the packets itself, and each wakeup would cost the machine
    /// an inter-processor interrupt (a VM exit on a virtual machine) per packet. A poll that
    /// finds a completion re-arms it (the application may now wait elsewhere, e.g. spin on
    /// memory), and the progress thread re-arms it when nobody polled for [`REARM_AFTER_NS`].
    rx_armed: AtomicBool,
    /// Serialises arming and disarming: the flag and the epoll registration change together.
    arm_lock: std::sync::Mutex<()>,
    /// When (ns) the progress thread will wake at the latest (`u64::MAX`: no timeout), the
    /// away timer aside.
    pub(super) thread_wake_at: AtomicU64,
    /// Disarmed, the progress thread sleeps until the application has been away for
    /// [`REARM_AFTER_NS`]: application calls keep pushing this timer ahead.
    pub(super) away: AwayTimer,
    /// The away timer's current slack (see [`AWAY_SLACK_NS`]).
    away_slack: AtomicU64,
    registry: mio::Registry,
    rx_fd: std::os::fd::RawFd,
    /// The same epoch as the device core's, readable without the lock.
    epoch: Epoch,
    /// Counters of who woke whom.
    pub(super) wake_counters: WakeCounters,
    /// How long (ns) a poller's last yield kept it away, until the next poll reads it
    /// (`u64::MAX`: no yield since).
    yield_took: AtomicU64,
    /// The application thread asleep on a completion channel that receives itself (see
    /// `owner`): while it owns the socket, nobody arms the progress thread's packet wakeups.
    pub(super) owner: super::owner::SocketOwner,
    /// Threads asleep in a plain read of a completion channel (not the socket's owner): when
    /// the owner leaves, the progress thread must take the packets for them.
    pub(super) channel_readers: std::sync::atomic::AtomicU32,
}

impl Signals {
    /// Over the progress thread's `doorbell` and `registry`, with the receive socket `rx_fd`
    /// registered (armed); registers the away timer there too.
    pub(super) fn new(
        doorbell: Doorbell,
        registry: mio::Registry,
        rx_fd: std::os::fd::RawFd,
        epoch: Epoch,
    ) -> std::io::Result<Signals> {
        let away = AwayTimer::new()?;
        registry.register(&mut SourceFd(&away.raw_fd()), AWAY, Interest::READABLE)?;
        Ok(Signals {
            doorbell,
            thread_deadline: AtomicU64::new(u64::MAX),
            app_active_at: AtomicU64::new(0),
            poll_active_at: AtomicU64::new(0),
            work_left: AtomicBool::new(false),
            rx_armed: AtomicBool::new(true),
            arm_lock: std::sync::Mutex::new(()),
            thread_wake_at: AtomicU64::new(u64::MAX),
            away,
            away_slack: AtomicU64::new(AWAY_SLACK_NS),
            registry,
            rx_fd,
            epoch,
            wake_counters: WakeCounters::default(),
            yield_took: AtomicU64::new(u64::MAX),
            owner: Default::default(),
            channel_readers: Default::default(),
        })
    }

    pub(super) fn now(&self) -> u64 {
        self.epoch.now()
    }

    /// Yields the CPU once, or naps (`nap`, see [`YIELD_LOST_SLICE_NS`]), and notes how long
    /// that took (see [`YIELD_RAN_OTHERS_NS`]).
    pub(super) fn yield_cpu(&self, nap: bool) {
        let t = self.now();
        if nap {
            // The shortest sleep: the thread's timer slack (50 µs by default) decides its
            // length. Not a cancellation point (this runs inside `ibv_poll_cq`).
            crate::sys::nap(1);
        } else {
            std::thread::yield_now();
        }
        self.yield_took.store(self.now().saturating_sub(t), Ordering::Relaxed);
    }

    /// How long the last [`Signals::yield_cpu`] since the previous call took, if there was one.
    pub(super) fn take_yield_took(&self) -> Option<u64> {
        Some(self.yield_took.swap(u64::MAX, Ordering::Relaxed)).filter(|&t| t != u64::MAX)
    }

    /// Whether packet arrivals wake the progress thread (relaxed: a hint for the policy).
    pub(super) fn armed_hint(&self) -> bool {
        self.rx_armed.load(Ordering::Relaxed)
    }

    /// Whether packet arrivals wake the progress thread (sequentially consistent with
    /// [`Signals::set_rx_armed`] and `thread_wake_at`).
    pub(super) fn armed(&self) -> bool {
        self.rx_armed.load(Ordering::SeqCst)
    }

    /// An application thread is in the library at `now`.
    pub(super) fn app_enters(&self, now: Nanos) {
        self.app_active_at.store(now.max(1), Ordering::Release);
        if !self.armed_hint() {
            self.push_away(now);
        }
    }

    /// Keeps the away timer at least [`REARM_AFTER_NS`] ahead of an application call at `now`.
    /// A push while the timer is still set (the application kept calling since the last
    /// push) doubles the slack, up to [`AWAY_SLACK_MAX_NS`].
    fn push_away(&self, now: Nanos) {
        let at = self.away.at();
        if at.is_none_or(|t| t < now + REARM_AFTER_NS) {
            let slack = match at {
                Some(_) => (self.away_slack.load(Ordering::Relaxed) * 2).min(AWAY_SLACK_MAX_NS),
                None => AWAY_SLACK_NS,
            };
            self.away_slack.store(slack, Ordering::Relaxed);
            self.away.set(now, REARM_AFTER_NS + slack);
        }
    }

    /// The progress thread, disarmed, is about to sleep: the away timer must be set, for when
    /// the application will have been away [`REARM_AFTER_NS`] (an application call pushes it
    /// further; it fired or was never set otherwise).
    pub(super) fn ensure_away(&self, now: Nanos) {
        if self.owner.waiting() {
            // Disarmed for a socket owner, not for pollers: nobody pushes the timer, and its
            // only use is to see that the owner still exists.
            if self.away.at().is_none_or(|t| t <= now) {
                self.away.set(now, super::owner::OWNER_CHECK_NS);
            }
            return;
        }
        if self.away.at().is_none() {
            let due = self.app_active_at.load(Ordering::Acquire).saturating_add(REARM_AFTER_NS);
            self.away.set(now, due.saturating_sub(now).max(AWAY_SLACK_NS / 10));
        }
    }

    /// An application thread polls a CQ at `now`.
    pub(super) fn app_polls(&self, now: Nanos) {
        self.poll_active_at.store(now.max(1), Ordering::Release);
    }

    /// An application thread armed a CQ for an event at `now`: it is about to wait for the
    /// event rather than poll, so its earlier polls no longer excuse the doorbell.
    pub(super) fn app_waits(&self) {
        self.poll_active_at.store(0, Ordering::Release);
    }

    /// How long since an application thread last polled or posted.
    pub(super) fn app_away_for(&self, now: Nanos) -> u64 {
        now.saturating_sub(self.app_active_at.load(Ordering::Acquire))
    }

    /// The progress thread watches multicast receive socket `fd` from now on.
    pub(super) fn watch_mcast(&self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        self.registry.register(&mut SourceFd(&fd), MCAST, Interest::READABLE)
    }

    /// The progress thread stops watching `fd` (before it is closed).
    pub(super) fn unwatch_mcast(&self, fd: std::os::fd::RawFd) {
        // Closing the socket removes it from the epoll set anyway.
        let _ = self.registry.deregister(&mut SourceFd(&fd));
    }

    /// Arms or disarms packet-arrival wakeups of the progress thread (one epoll_ctl).
    ///
    /// Several threads arm and disarm (pollers, a thread arming a CQ for an event, the progress
    /// thread itself), so the flag and the registration change under one lock: with the flag
    /// swapped first and the epoll_ctl after, a disarm and an arm racing could leave the flag
    /// "armed" with the socket deregistered (the arm's register failing with EEXIST before the
    /// disarm's deregister): the thread then slept with no timeout while datagrams queued,
    /// and a peer's SEND went unanswered for as long as the application waited for it
    /// (seen once with rping under 5 % loss against kernel rxe).
    pub(super) fn set_rx_armed(&self, armed: bool) {
        if self.rx_armed.load(Ordering::SeqCst) == armed {
            return;
        }
        let _g = self.arm_lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.rx_armed.load(Ordering::SeqCst) == armed {
            return;
        }
        if armed && self.owner.held() {
            // An application thread asleep on its channel receives (see `owner`); it re-arms
            // when it leaves. (Checked under the lock: an owner takes the socket, then
            // disarms under it, so an arm cannot slip in between and stay.)
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
        let done = match r {
            Ok(()) => true,
            // Already in the state asked for.
            Err(e) => {
                (armed && e.kind() == std::io::ErrorKind::AlreadyExists)
                    || (!armed && e.kind() == std::io::ErrorKind::NotFound)
            }
        };
        if !done {
            // Cannot change it: the flag keeps telling the truth (disarmed, the away timer
            // still wakes the thread; armed, packets do).
            return;
        }
        self.rx_armed.store(armed, Ordering::SeqCst);
        if armed {
            // The next disarmed spell starts with the shortest slack.
            self.away_slack.store(AWAY_SLACK_NS, Ordering::Relaxed);
        }
        WakeCounters::bump(if armed { &self.wake_counters.rx_arms } else { &self.wake_counters.rx_disarms });
        // Disarmed, the thread must learn when nobody calls the library any more: the away
        // timer, pushed ahead by every call from now on, wakes it then.
        if !armed {
            self.push_away(self.now());
        }
    }

    /// The socket owner leaves its wait. If nobody else sleeps on a channel, the progress
    /// thread stays disarmed as for a poller: the application is about to call the library
    /// (it just got its event), its next poll may leave the ACKs it owes for the post that
    /// follows (one packet train), and the away timer re-arms the thread once it stops
    /// calling. Otherwise the thread takes the packets again now.
    pub(super) fn owner_leaves(&self) {
        if self.channel_readers.load(Ordering::SeqCst) > 0 {
            self.owner.release();
            self.set_rx_armed(true);
            return;
        }
        self.owner.park();
        // The timer was set for the owner's liveness check (see `owner`): bring it back to a
        // poller's period.
        let now = self.now();
        if self.away.at().is_none_or(|t| t > now + REARM_AFTER_NS + AWAY_SLACK_MAX_NS) {
            self.away.set(now, REARM_AFTER_NS + AWAY_SLACK_NS);
        }
    }

    /// The receive socket (what a socket owner waits on).
    pub(super) fn rx_fd(&self) -> std::os::fd::RawFd {
        self.rx_fd
    }

    /// Rings the progress thread's doorbell.
    pub(super) fn ring(&self) {
        WakeCounters::bump(&self.wake_counters.doorbells);
        self.doorbell.ring();
    }

    /// Wakes the progress thread (the stop request is already published).
    pub(super) fn wake_to_stop(&self) {
        self.doorbell.ring();
    }

    /// Whether an application thread leaving the library at `now` must ring the progress
    /// thread: a socket is full (`sent_all` false), or the engine's next deadline `due` comes
    /// before the thread would look and either nobody polls or the thread would not look for
    /// a long time.
    ///
    /// A poller runs the timers itself, but only while it polls: the exemption holds only
    /// where the thread looks by itself anyway (disarmed: when the away timer fires, 1–9 ms
    /// after the last call; armed while the application is active: within a few milliseconds,
    /// see the progress thread).
    /// An armed thread asleep with no timeout is always rung — otherwise an application that
    /// posts, then waits in `ibv_get_cq_event` (rping), would lose a packet and never resend it.
    pub(super) fn kick_needed(&self, due: Option<Nanos>, now: Nanos, sent_all: bool) -> bool {
        let due = due.unwrap_or(u64::MAX);
        if self.owner.waiting() {
            // A socket owner asleep on its channel receives, but the timers stay the progress
            // thread's: it sleeps until the deadline it last planned under the device lock
            // (`thread_deadline`), and whoever leaves an earlier one rings it. No poller
            // exemption: the thread that polled last is the owner, asleep (rping's CQ thread
            // while its main thread posts: a lost SEND was never resent).
            return !sent_all || due < self.thread_deadline.load(Ordering::Acquire);
        }
        let polling = now.saturating_sub(self.poll_active_at.load(Ordering::Acquire)) < APP_ACTIVE_NS;
        // Disarmed, the thread wakes by itself at `thread_wake_at` or when the away timer fires
        // (once nobody has called the library for REARM_AFTER_NS), and takes over; until then
        // the pollers run the timers.
        let armed = self.armed();
        let thread_looks_by = if armed {
            self.thread_deadline.load(Ordering::Acquire).min(self.thread_wake_at.load(Ordering::SeqCst))
        } else {
            self.thread_wake_at.load(Ordering::SeqCst).min(self.away.at().unwrap_or(u64::MAX))
        };
        let looks_soon = !armed || thread_looks_by <= now + 2 * REARM_AFTER_NS;
        !sent_all || (due < thread_looks_by && (!polling || !looks_soon))
    }
}

#[cfg(test)]
#[path = "pacing_tests.rs"]
mod tests;
