//! What the transport counts, and the `urxe stat` socket that prints it.
//!
//! Two kinds of counters: [`TransportCounters`] live with the engine under the device lock
//! (packets, batches, deferrals), [`WakeCounters`] outside it as relaxed atomics (who woke the
//! progress thread and why). The stats socket is an abstract Unix socket named after the
//! process, the device address and a random suffix.
//!
//! Abstract sockets have no permission bits: any local user can connect. So the socket is
//! served by a thread of its own at normal priority (never the real-time progress thread),
//! which answers only peers of the same user or root (SO_PEERCRED) and at most
//! [`ANSWERS_PER_SEC`] of them per second; everything else is closed unanswered and counted. A
//! connect flood by another user then costs this process one accept and one close per
//! connection on a normal-priority thread, and the data path nothing.
//!
//! Nor can another user pass for this process (issue #37): the name ends in 64 random bits,
//! so it cannot be bound in advance, and the client ([`read_stats`]) checks the server's
//! credentials (SO_PEERCRED): its pid must be the one the name claims, its uid the client's
//! or root (a root client reads every user's processes).
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
    /// Packets sent from 4791 because their flow port could not be bound (another user holds
    /// it), their ICRC recomputed for 4791.
    pub tx_port_fallbacks: u64,
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
pub(crate) struct WakeCounters {
    /// Doorbell rings (eventfd writes) by application threads.
    pub(crate) doorbells: AtomicU64,
    /// Packet-arrival wakeups armed / disarmed.
    pub(crate) rx_arms: AtomicU64,
    pub(crate) rx_disarms: AtomicU64,
    /// Times the progress thread returned from its wait.
    pub(crate) thread_wakeups: AtomicU64,
    /// Wakeups that found an application thread holding the lock and left it the work.
    pub(crate) lock_busy: AtomicU64,
    /// Times the progress thread stopped packet wakeups because the application kept holding
    /// the device lock when packets woke it.
    pub(crate) busy_disarms: AtomicU64,
    /// Wakeups by the away timer (disarmed: nobody had called the library for a while).
    pub(crate) away_wakeups: AtomicU64,
    /// Times the progress thread gave up real-time priority after using its CPU budget, and
    /// took it back once idle again.
    pub(crate) rt_demotions: AtomicU64,
    pub(crate) rt_promotions: AtomicU64,
    /// Naps after stream wakeups, the current nap length (ns) and the steps the moderation
    /// took between lengths (see `moderation`).
    pub(crate) naps: AtomicU64,
    pub(crate) nap_ns: AtomicU64,
    pub(crate) nap_steps: AtomicU64,
    /// Waits on a completion channel that owned the receive socket (see `owner`), and the
    /// progress steps those waits ran on the application's thread.
    pub(crate) owner_waits: AtomicU64,
    pub(crate) owner_steps: AtomicU64,
}

impl WakeCounters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn text(&self) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "WakeCounters\n    doorbells: {}\n    rx_arms: {}\n    rx_disarms: {}\n    thread_wakeups: {}\n    lock_busy: {}\n    \
             busy_disarms: {}\n    away_wakeups: {}\n    rt_demotions: {}\n    rt_promotions: {}\n    \
             naps: {}\n    nap_ns: {}\n    nap_steps: {}\n    owner_waits: {}\n    owner_steps: {}\n",
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
            l(&self.nap_steps),
            l(&self.owner_waits),
            l(&self.owner_steps)
        )
    }
}

/// Engine and transport counters as `name value` lines (what `urxe stat` prints).
pub(crate) fn counters_text(engine: &Counters, transport: &TransportCounters) -> String {
    let mut s = format!("{engine:#?}\n{transport:#?}\n");
    s.retain(|ch| ch != ',' && ch != '{' && ch != '}');
    s
}

/// Prefix of the stats sockets (abstract namespace): `urxe-stat-<pid>-<address>-<random>`.
pub const STATS_SOCKET_PREFIX: &str = "urxe-stat-";

/// Name of a stats socket of the device of process `pid` on `addr`, with the random `tag`
/// that keeps anyone from binding it before the process does.
pub fn stats_socket_name(pid: u32, addr: IpAddr, tag: u64) -> String {
    format!("{STATS_SOCKET_PREFIX}{pid}-{addr}-{tag:016x}")
}

/// The pid a stats socket's name claims.
pub fn stats_socket_pid(name: &str) -> Option<u32> {
    name.strip_prefix(STATS_SOCKET_PREFIX)?.split('-').next()?.parse().ok()
}

/// Binds this process's stats socket for the device on `local`.
pub(crate) fn bind_stats_listener(local: IpAddr) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let name = stats_socket_name(std::process::id(), local, crate::sys::random_seed());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    let l = UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Whether a client running as `me` may believe a stats server running as (`pid`, `uid`)
/// that answers on a name claiming `claimed` pid: the same process, of the client's user or
/// root; a root client believes any user's process.
pub fn may_believe(pid: u32, uid: u32, claimed: u32, me: u32) -> bool {
    pid == claimed && (uid == me || uid == 0 || me == 0)
}

/// Reads the counters from the stats socket `name` (abstract), after checking that the
/// process serving it is the one the name claims and may be believed ([`may_believe`]);
/// otherwise `PermissionDenied`, naming who answered.
pub fn read_stats(name: &str) -> io::Result<String> {
    use std::io::Read;
    use std::os::linux::net::SocketAddrExt;
    let claimed = stats_socket_pid(name).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    let mut s = UnixStream::connect_addr(&addr)?;
    let (pid, uid) = peer_cred(&s).ok_or_else(io::Error::last_os_error)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !may_believe(pid, uid, claimed, me) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("@{name} is served by pid {pid} (uid {uid}), not by process {claimed}: ignored (forged)"),
        ));
    }
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
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
pub(crate) struct StatsServer {
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatsServer {
    pub(crate) fn start(
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
        let thread = crate::spawn::spawn_started("urxe-stat", move || serve(listener, stop_fd, &report))?;
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
    peer_cred(s).map(|(_, uid)| uid)
}

/// The (pid, uid) of a connected Unix socket's peer, as the kernel recorded them at connect
/// (client) or listen (server) time.
fn peer_cred(s: &UnixStream) -> Option<(u32, u32)> {
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
    (r == 0 && len as usize == std::mem::size_of::<libc::ucred>()).then_some((cred.pid as u32, cred.uid))
}

/// Whether a peer running as `peer` may read this process's counters: the same user, or root.
pub(crate) fn may_read(peer: u32, me: u32) -> bool {
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
    use super::*;

    #[test]
    fn a_client_believes_only_the_named_process_of_its_user_or_root() {
        assert!(may_believe(42, 1000, 42, 1000));
        assert!(may_believe(42, 0, 42, 1000), "a root process");
        assert!(may_believe(42, 1000, 42, 0), "root reads every user's");
        assert!(!may_believe(43, 1000, 42, 1000), "another process of the same user");
        assert!(!may_believe(42, 1001, 42, 1000), "another user's process");
        assert!(!may_believe(43, 0, 42, 0), "root does not believe another pid either");
    }

    #[test]
    fn the_name_carries_the_pid_and_an_unpredictable_tag() {
        let a: IpAddr = "127.77.0.9".parse().unwrap();
        let n = stats_socket_name(4242, a, 0xabc);
        assert_eq!(n, "urxe-stat-4242-127.77.0.9-0000000000000abc");
        assert_eq!(stats_socket_pid(&n), Some(4242));
        assert_eq!(stats_socket_pid("urxe-stat-x-1"), None);
    }

    #[test]
    fn a_stats_server_of_another_pid_is_not_believed() {
        use std::os::linux::net::SocketAddrExt;
        // This process serves a name claiming pid 1: the client must refuse it unread.
        let name = stats_socket_name(1, "127.0.0.1".parse().unwrap(), crate::sys::random_seed());
        let l = UnixListener::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(b"pid 1\nforged\n");
        });
        let e = read_stats(&name).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("forged"), "{e}");
        t.join().unwrap();
        // Our own pid's name is believed.
        let name = stats_socket_name(std::process::id(), "127.0.0.1".parse().unwrap(), 7);
        let l = UnixListener::bind_addr(&std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = s.write_all(b"counters\n");
        });
        assert_eq!(read_stats(&name).unwrap(), "counters\n");
        t.join().unwrap();
    }

    #[test]
    fn only_the_same_user_or_root_may_read_the_counters() {
        assert!(may_read(1000, 1000));
        assert!(may_read(0, 1000));
        assert!(!may_read(65534, 0));
        assert!(!may_read(1001, 1000));
    }
}
