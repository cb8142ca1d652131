//! What the transport counts, and the `urxe stat` socket that prints it.
//!
//! Two kinds of counters: [`TransportCounters`] live with the engine under the device lock
//! (packets, batches, deferrals), [`WakeCounters`] outside it as relaxed atomics (who woke the
//! progress thread and why). The stats socket is an abstract Unix socket named after the
//! process and the device address; the progress thread answers it.

use std::io::{self, Write};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mio::net::UnixListener;

use crate::engine::Counters;

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
}

impl WakeCounters {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn text(&self) -> String {
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

/// Binds this process's stats socket for the device on `local` (non-blocking, for mio).
pub(super) fn bind_stats_listener(local: IpAddr) -> io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(stats_socket_name(std::process::id(), local))?;
    let l = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(UnixListener::from_std(l))
}

/// Answers the clients waiting on `l` with the text `report` builds (once per client).
pub(super) fn serve_stats(l: &UnixListener, report: impl Fn() -> String) {
    // Bounded: at most a few clients per wakeup.
    for _ in 0..8 {
        match l.accept() {
            Ok((s, _)) => {
                let text = report();
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
