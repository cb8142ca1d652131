//! What the transport counts, and the `urxe stat` socket that prints it.
//!
//! Two kinds of counters: [`TransportCounters`] live with the engine under the device lock
//! (packets, batches, deferrals), [`WakeCounters`] outside it as relaxed atomics (who woke the
//! progress thread and why). The stats socket is an abstract Unix socket named after the
//! process and the device address.
//!
//! Abstract sockets have no permission bits: any local user can connect. So the socket is
//! served by a thread of its own at normal priority (never the real-time progress thread),
//! which answers only peers of the same user or root (SO_PEERCRED) and at most
//! [`ANSWERS_PER_SEC`] of them per second; everything else is closed unanswered and counted. A
//! connect flood by another user then costs this process one accept and one close per
//! connection on a normal-priority thread, and the data path nothing.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::engine::Counters;

/// Most answers the stats socket gives per second (a token bucket with this burst).
pub const ANSWERS_PER_SEC: u32 = 50;

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
    /// Shared address: datagrams for another slot's QPN (the kernel's hash fallback), dropped.
    pub rx_group_strays: u64,
    /// Shared address: join probes of other members, dropped.
    pub rx_group_probes: u64,
    pub progress_wakeups: u64,
    /// Send posts whose transmission waited for the next one of a burst (doorbell batching).
    pub tx_deferred_posts: u64,
    /// Polls that found a completion and left the packets they produced (ACKs) for the next call.
    pub tx_deferred_polls: u64,
    /// Times the progress thread held ACKs for the application's next post.
    pub tx_held_acks: u64,
}

/// How often the progress thread is woken and why; kept outside the lock (relaxed atomics).
#[derive(Default)]
pub(super) struct WakeCounters {
    /// Doorbell rings (eventfd writes) by application threads.
    pub(super) doorbells: AtomicU64,
    /// Packet-arrival wakeups armed / disarmed.
    pub(super) rx_arms: AtomicU64,
    pub(super) rx_disarms: AtomicU64,
    /// Times the progress thread returned from its wait.
    pub(super) thread_wakeups: AtomicU64,
    /// Wakeups that found an application thread holding the lock and left it the work.
    pub(super) lock_busy: AtomicU64,
    /// Times the progress thread stopped packet wakeups because the application kept holding
    /// the device lock when packets woke it.
    pub(super) busy_disarms: AtomicU64,
    /// Wakeups by the away timer (disarmed: nobody had called the library for a while).
    pub(super) away_wakeups: AtomicU64,
    /// Times the progress thread gave up real-time priority after using its CPU budget, and
    /// took it back once idle again.
    pub(super) rt_demotions: AtomicU64,
    pub(super) rt_promotions: AtomicU64,
    /// Naps after stream wakeups, the current nap length (ns) and the steps the moderation
    /// took between lengths (see `moderation`).
    pub(super) naps: AtomicU64,
    pub(super) nap_ns: AtomicU64,
    pub(super) nap_steps: AtomicU64,
}

impl WakeCounters {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn text(&self) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "WakeCounters\n    doorbells: {}\n    rx_arms: {}\n    rx_disarms: {}\n    thread_wakeups: {}\n    lock_busy: {}\n    \
             busy_disarms: {}\n    away_wakeups: {}\n    rt_demotions: {}\n    rt_promotions: {}\n    \
             naps: {}\n    nap_ns: {}\n    nap_steps: {}\n",
            l(&self.doorbells),
            l(&self.rx_arms),
            l(&self.rx_disarms),
            l(&self.thread_wakeups),
            l(&self.lock_busy),
            l(&self.busy_disarms),
            l(&self.away_wakeups),
            l(&self.rt_demotions),
            l(&self.rt_promotions),
            l(&self.naps),
            l(&self.nap_ns),
            l(&self.nap_steps)
        )
    }
}

/// Engine and transport counters as `name value` lines (what `urxe stat` prints).
pub(super) fn counters_text(engine: &Counters, transport: &TransportCounters) -> String {
    let mut s = format!("{engine:#?}\n{transport:#?}\n");
    s.retain(|ch| ch != ',' && ch != '{' && ch != '}');
    s
}

/// Prefix of the stats sockets (abstract namespace): `urxe-stat-<pid>-<address>`.
pub const STATS_SOCKET_PREFIX: &str = "urxe-stat-";

/// Name of the stats socket of the device of process `pid` on `addr`.
pub fn stats_socket_name(pid: u32, addr: IpAddr) -> String {
    format!("{STATS_SOCKET_PREFIX}{pid}-{addr}")
}

/// Binds this process's stats socket for the device on `local`.
pub(super) fn bind_stats_listener(local: IpAddr) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(stats_socket_name(std::process::id(), local))?;
    let l = UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// What the stats thread counts: connections answered, refused (another user), and closed over
/// the rate limit.
#[derive(Default)]
struct SocketCounters {
    answered: AtomicU64,
    refused: AtomicU64,
    throttled: AtomicU64,
}

impl SocketCounters {
    fn text(&self) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "StatsSocket\n    stats_answered: {}\n    stats_refused: {}\n    stats_throttled: {}\n",
            l(&self.answered),
            l(&self.refused),
            l(&self.throttled)
        )
    }
}

/// The stats thread: blocks until a client connects or `stop` is signalled, answers permitted
/// clients with `report()` and its own counters, and ends when the device stops.
pub(super) struct StatsServer {
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatsServer {
    pub(super) fn start(
        listener: UnixListener,
        report: impl Fn() -> String + Send + 'static,
    ) -> io::Result<StatsServer> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        let stop = unsafe { OwnedFd::from_raw_fd(fd) };
        let stop_fd = stop.as_raw_fd();
        let thread = super::spawn::spawn_started("urxe-stat", move || serve(listener, stop_fd, &report))?;
        Ok(StatsServer { stop, thread: Some(thread) })
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd we own (kept open until the
        // thread is joined below).
        let _ = unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The user a connected Unix socket's peer runs as.
fn peer_uid(s: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, a live ucred of that size, and
    // the new length into `len`; the fd is the open socket `s` owns.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some(cred.uid)
}

/// Whether a peer running as `peer` may read this process's counters: the same user, or root.
pub(super) fn may_read(peer: u32, me: u32) -> bool {
    peer == me || peer == 0
}

/// After a wakeup that refused connections, the stats thread sleeps this long.
const REFUSAL_PAUSE: Duration = Duration::from_millis(2);

fn serve(listener: UnixListener, stop: i32, report: &dyn Fn() -> String) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let counters = SocketCounters::default();
    let (mut tokens, mut refill) = (ANSWERS_PER_SEC, Instant::now());
    loop {
        let mut fds = [
            libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a live array of 2 pollfds for the duration of the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        // Bounded: a few connections per wakeup, then back to poll (which sees `stop`).
        let mut refused = false;
        for _ in 0..64 {
            let Ok((s, _)) = listener.accept() else { break };
            if !peer_uid(&s).is_some_and(|u| may_read(u, me)) {
                WakeCounters::bump(&counters.refused);
                refused = true;
                continue;
            }
            if refill.elapsed() >= Duration::from_secs(1) {
                (tokens, refill) = (ANSWERS_PER_SEC, Instant::now());
            }
            if tokens == 0 {
                WakeCounters::bump(&counters.throttled);
                continue;
            }
            tokens -= 1;
            WakeCounters::bump(&counters.answered);
            let text = report() + &counters.text();
            let mut s = s;
            let _ = s.set_nonblocking(false);
            let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = s.write_all(text.as_bytes());
        }
        if refused {
            // A connect flood from another user costs this thread at most one wakeup per
            // pause (measured: about 1,500 refused connects a second each took a wakeup and
            // 13-21 % of a CPU). Meanwhile the listen backlog fills and the flooder's
            // connects wait; a reader of ours waits at most this long.
            std::thread::sleep(REFUSAL_PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::may_read;

    #[test]
    fn only_the_same_user_or_root_may_read_the_counters() {
        assert!(may_read(1000, 1000));
        assert!(may_read(0, 1000));
        assert!(!may_read(65534, 0));
        assert!(!may_read(1001, 1000));
    }
}
