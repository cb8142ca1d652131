//! The progress thread: moves the device when no application thread does.
//!
//! Blocked in `mio::Poll` on the receive socket and the engine's next deadline (while armed,
//! see [`super::pacing`]), or on the away timer (disarmed, see [`super::away`]), and the
//! doorbell, it covers what nobody polls for: ACKs and responses
//! while the application sleeps, retransmission timers, completion-channel events, and the
//! `urxe stat` socket. It never spins and never waits for the device lock.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, TryLockError};
use std::time::Duration;

use mio::{Events, Poll, Token};

use super::hub::{Core, Hub};
use super::moderation::NapTuner;
use super::pacing::{APP_ACTIVE_NS, AWAY, REARM_AFTER_NS};
use crate::observe::stats::WakeCounters;

/// mio token of the doorbell.
pub(super) const WAKE: Token = Token(1);
/// The fine timer: DCQCN's paced QPs wait sub-millisecond intervals, which epoll_wait (whole
/// milliseconds) cannot time; while some QP is rate-limited such a deadline waits on a timerfd.
const FINE: Token = Token(4);

/// The real-time budget: over each window of [`RT_WINDOW_NS`], a SCHED_FIFO progress thread
/// that used more than [`RT_BUDGET_PCT`] % of a CPU drops to normal priority (as NAPI hands a
/// flood to ksoftirqd), so a packet flood cannot starve the host's other tasks on that CPU; it
/// takes real-time priority back after a window below [`RT_RESUME_PCT`] %.
const RT_WINDOW_NS: u64 = 100_000_000;
const RT_BUDGET_PCT: u64 = 50;
const RT_RESUME_PCT: u64 = 10;

/// Packet arrivals that in a row find an application thread holding the device lock after
/// which the thread stops being woken by packets (disarms): that application is busy in the
/// library and takes the packets itself (it runs the step left to it), so each further
/// wakeup would only preempt it. The away timer wakes the thread once nobody has called the
/// library for [`REARM_AFTER_NS`], and it re-arms then; the application re-arms it when it
/// starts waiting elsewhere (see `pacing`).
const BUSY_WAKEUPS_TO_DISARM: u32 = 4;

/// Disarmed with paced QPs, the device lock held by an application thread: look again after
/// this long (the holder runs the pacing meanwhile, unless the scheduler preempts it).
const PACE_RETRY_NS: u64 = 200_000;

/// Shortest sleep when the engine's deadline has already passed after handling it: a guard so a
/// deadline that does not move can never make the (possibly real-time) thread spin.
const MIN_SLEEP: Duration = Duration::from_micros(50);

/// Interrupt moderation (a NIC's rx-usecs): after a wakeup that received at least
/// [`STREAM_PKTS`] packets, a stream is arriving, and the thread naps before it waits on the
/// socket again. While it is not in `epoll_wait`, an arriving packet wakes nobody: the sender's
/// CPU, which runs loopback delivery, no longer pays a cross-CPU wakeup (an IPI, a VM exit
/// here) every few packets (ib_write_bw 64 KiB: 25,000 a second, 8 % of the sender's CPU under
/// `sock_def_readable`), and each later wakeup drains more, with one ACK for it all. A lone
/// request (a READ to a passive responder) is answered at once. How long the nap is, 0 to
/// 20 µs, is measured per stream (`moderation`): it delays the stream's ACKs, which a
/// requester with few bytes outstanding waits for.
const STREAM_PKTS: u64 = 16;

/// `URXE_RT`: `1` (default) runs the progress thread at real-time priority when the process
/// may (CAP_SYS_NICE or RLIMIT_RTPRIO), `0` leaves it at normal priority.
pub(super) fn rt_setting() -> io::Result<bool> {
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
/// never spins (see [`MIN_SLEEP`]), so this cannot starve anything. Best effort: without the
/// privilege, it stays at normal priority.
fn raise_priority() -> bool {
    set_policy(libc::SCHED_FIFO, 1)
}

fn set_policy(policy: i32, priority: i32) -> bool {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: sched_setscheduler only reads `param`, a valid sched_param that outlives the call;
    // pid 0 is the calling thread.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// CPU time this thread has used, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `t`, which lives for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return 0;
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Tracks the progress thread's CPU use per window and moves it between SCHED_FIFO and
/// SCHED_OTHER (see [`RT_BUDGET_PCT`]).
struct RtBudget {
    window_start: u64,
    cpu_at_start: u64,
    demoted: bool,
}

impl RtBudget {
    fn new(now: u64) -> RtBudget {
        RtBudget { window_start: now, cpu_at_start: thread_cpu_ns(), demoted: false }
    }

    /// Called after each wakeup's work; cheap except once per window.
    fn check(&mut self, hub: &Hub, now: u64) {
        let span = now.saturating_sub(self.window_start);
        if span < RT_WINDOW_NS {
            return;
        }
        let cpu = thread_cpu_ns();
        let pct = cpu.saturating_sub(self.cpu_at_start) * 100 / span.max(1);
        (self.window_start, self.cpu_at_start) = (now, cpu);
        let counters = &hub.signals.wake_counters;
        if !self.demoted && hub.rt.load(Ordering::Relaxed) && pct > RT_BUDGET_PCT {
            if set_policy(libc::SCHED_OTHER, 0) {
                self.demoted = true;
                hub.rt.store(false, Ordering::Relaxed);
                WakeCounters::bump(&counters.rt_demotions);
            }
        } else if self.demoted && pct < RT_RESUME_PCT && raise_priority() {
            self.demoted = false;
            hub.rt.store(true, Ordering::Relaxed);
            WakeCounters::bump(&counters.rt_promotions);
        }
    }
}

/// Takes the device lock without waiting. If an application thread holds it, it is active and
/// runs the step on its way out. Dekker-style: flag first, then try once more, so a thread that
/// left between the first try and the flag cannot miss it.
fn try_core(hub: &Hub) -> Option<MutexGuard<'_, Core>> {
    let once = || match hub.core.try_lock() {
        Ok(c) => Some(c),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    if let Some(c) = once() {
        return Some(c);
    }
    hub.signals.work_left.store(true, Ordering::SeqCst);
    once()
}

/// The thread's body, until the device asks it to stop.
pub(super) fn run(hub: Arc<Hub>, mut poll: Poll, rt: bool) {
    if rt {
        hub.rt.store(raise_priority(), Ordering::Relaxed);
    }
    let sig = &hub.signals;
    let mut budget = RtBudget::new(sig.now());
    let mut events = Events::with_capacity(16);
    // Absolute deadline (ns since the epoch) of the engine's next timer.
    let mut deadline: Option<u64> = None;
    // Consecutive wakeups that found the device lock held (see BUSY_WAKEUPS_TO_DISARM).
    let mut busy_streak = 0u32;
    let mut naps = NapTuner::default();
    let fine = super::away::AwayTimer::new().ok().filter(|t| {
        let fd = t.raw_fd();
        poll.registry().register(&mut mio::unix::SourceFd(&fd), FINE, mio::Interest::READABLE).is_ok()
    });
    // Some QP is paced (DCQCN): the engine's deadlines need the fine timer.
    let mut fine_needed = false;
    // Our last drain stopped at its bound with datagrams maybe still queued: armed, the
    // edge-triggered registration will not report them again; look at once.
    let mut left_behind = false;
    loop {
        if hub.stop.load(Ordering::Acquire) {
            return;
        }
        let now = sig.now();
        let mut wake_at = None;
        if sig.armed() {
            wake_at = deadline;
            if sig.app_away_for(now) < APP_ACTIVE_NS {
                // Armed while the application is active: its posts may arm timers without
                // ringing us (see `Signals::kick_needed`); look at least this often until it
                // goes quiet.
                let check = now + REARM_AFTER_NS;
                wake_at = Some(wake_at.map_or(check, |d| d.min(check)));
            }
        } else {
            // Disarmed: the pollers take the packets and run the timers, and every call of
            // theirs pushes the away timer ahead; it wakes us once nobody calls any more. No
            // look in between: each would preempt a poller that shares our CPU.
            if sig.owner.waiting() {
                // Disarmed for a thread asleep on its channel (`owner`): it runs the timers it
                // knew of when it went to sleep; one another thread's post set later rang us.
                wake_at = deadline;
            }
            sig.ensure_away(now);
            if fine_needed {
                // Except for DCQCN's paced QPs: a NIC's pacer does not stop while the host's
                // CPU runs something else. A poller the scheduler preempts (a loaded host) would
                // leave its QPs silent for whole time slices, then burst; we send at their
                // instants instead (ib_write_bw, 2 flows through a 1 Gbit/s bottleneck on a
                // loaded host: see bench/RESULTS.md "Congestion").
                wake_at = deadline;
            }
        }
        let timeout = if left_behind && sig.armed() {
            Some(Duration::ZERO)
        } else {
            wake_at.map(|d| Duration::from_nanos(d.saturating_sub(now)).max(MIN_SLEEP))
        };
        // Disarmed, the pollers take what is queued (each of their polls reads the socket).
        left_behind = false;
        if let (true, Some(f), Some(d)) = (fine_needed, &fine, wake_at) {
            if d > now && d - now < 1_000_000 && f.at() != Some(d) {
                f.set(now, d - now);
            }
        }
        // (A disarm after the armed() above pushes the away timer, which wakes us.)
        sig.thread_wake_at.store(wake_at.unwrap_or(u64::MAX), Ordering::SeqCst);
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                // Cannot wait: back off rather than spin.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if hub.stop.load(Ordering::Acquire) {
            return;
        }
        WakeCounters::bump(&sig.wake_counters.thread_wakeups);
        if rt {
            budget.check(&hub, sig.now());
        }
        let mut other_events = false;
        // A paced QP's instant has come (the poller may not have run it).
        let pace_due = fine_needed && deadline.is_some_and(|d| d <= sig.now());
        for ev in events.iter() {
            if ev.token() == AWAY {
                sig.away.fired();
                WakeCounters::bump(&sig.wake_counters.away_wakeups);
            } else if ev.token() == FINE {
                if let Some(f) = &fine {
                    f.fired();
                }
            } else {
                other_events = true;
            }
        }
        if !sig.armed() {
            let now = sig.now();
            let idle_for = sig.app_away_for(now);
            let owner_due = sig.owner.waiting() && deadline.is_some_and(|d| d <= now);
            if idle_for < REARM_AFTER_NS && !other_events && !pace_due && !owner_due {
                // Still polling (the away timer was set from an older call): sleep on.
                continue;
            }
            if !other_events && !owner_due && sig.owner.waiting() && sig.owner.held() {
                // The away timer's liveness check of a socket owner asleep on its channel: it
                // lives and receives itself; a step here would take the lock and perhaps the
                // owner's packet (two wakeups for one arrival). (`held` clears a dead owner's
                // claim: then we re-arm below.)
                continue;
            }
            if idle_for >= REARM_AFTER_NS {
                // A socket owner between two waits that stopped calling the library has left
                // event-driven work (see `owner`): its parked claim goes.
                sig.owner.clear_parked();
                sig.set_rx_armed(true);
            }
        }
        let Some(mut c) = try_core(&hub) else {
            WakeCounters::bump(&sig.wake_counters.lock_busy);
            busy_streak += 1;
            if busy_streak >= BUSY_WAKEUPS_TO_DISARM && sig.armed() {
                // Measured with UCX's tag_bw (the application polls four CQs in a loop): armed,
                // the thread was woken by nearly every datagram (20,000 epoll_wait returns a
                // second), found the lock held each time and preempted the poller on its CPU.
                sig.set_rx_armed(false);
                WakeCounters::bump(&sig.wake_counters.busy_disarms);
                busy_streak = 0;
            }
            // The application runs timers and packets now; armed, look again in a while rather
            // than re-waking at a deadline that is already past; disarmed, the away timer
            // brings us back once it stops.
            deadline = if sig.armed() {
                Some(sig.now() + REARM_AFTER_NS)
            } else if sig.owner.held() {
                // Disarmed for a socket owner (asleep on its channel or between two waits):
                // the timers stay ours, and we could not read the engine's next deadline. We
                // were rung for one earlier than the `thread_deadline` we published (often by
                // the poster itself, still holding the lock), or our own came: look again
                // shortly. Dropping the deadline here, as for a poller (who runs the timers
                // itself), left a SEND posted by rping's main thread, and lost, with nobody
                // to resend it: the owner's timeout predates the post, and our liveness
                // wake-ups of the owner run no step.
                Some(sig.now() + PACE_RETRY_NS)
            } else {
                // Paced QPs: look again soon, in case the holder is preempted.
                fine_needed.then(|| sig.now() + PACE_RETRY_NS)
            };
            continue;
        };
        busy_streak = 0;
        c.counters.progress_wakeups += 1;
        let now = c.now();
        let active = sig.app_away_for(now) < APP_ACTIVE_NS;
        let before = c.counters.rx_datagrams;
        c.take_in(now, false);
        left_behind = c.rx_left_behind();
        let stream = c.counters.rx_datagrams - before >= STREAM_PKTS;
        let nap = if stream { naps.stream_wakeup(now, c.counters.rx_datagrams) } else { 0 };
        if c.pacing.thread_may_hold(active) && c.engine.only_acks_pending() {
            // Requests that arrived while the application waits elsewhere (ib_write_lat spins on
            // memory): their ACKs are held for a moment so they leave with the application's
            // next post. The peer, polling for that ACK, then receives it together with the
            // next request and places it itself, and no thread hand-off is left on the round
            // trip. If the application does not post, the ACKs leave at its next empty poll or
            // after HOLD_ACK_NS.
            c.pacing.thread_holds(now);
            c.counters.tx_held_acks += 1;
        } else if !c.transmit(now) {
            // A socket is full (packets stay queued): try again shortly. Sockets are not watched
            // for writability (the per-flow ones are not registered at all); a full UDP send
            // buffer drains within microseconds on loopback, a NIC's within a millisecond.
            c.pacing.owe(now);
        }
        c.deliver_events();
        deadline = c.engine.poll_timeout();
        fine_needed = c.engine.pacing_active();
        if let Some(hold) = c.pacing.owed_deadline() {
            deadline = Some(deadline.map_or(hold, |d| d.min(hold)));
        }
        sig.thread_deadline.store(deadline.unwrap_or(u64::MAX), Ordering::Release);
        drop(c);
        if stream {
            let (nap_ns, steps) = naps.state();
            sig.wake_counters.nap_ns.store(nap_ns, Ordering::Relaxed);
            sig.wake_counters.nap_steps.store(steps, Ordering::Relaxed);
        }
        if nap > 0 {
            // Blocks (nanosleep), never spins.
            WakeCounters::bump(&sig.wake_counters.naps);
            std::thread::sleep(Duration::from_nanos(nap));
        }
    }
}
