//! The away timer: a `timerfd` the progress thread waits on while packet wakeups are disarmed.
//!
//! Disarmed, the application's polls take the packets, and the thread only has to notice when
//! the application stops calling the library. Waking now and then to look preempts a poller
//! that shares the thread's CPU (the thread is real-time, and `taskset` pins it with the
//! application); instead the application keeps pushing this one-shot timer ahead of it
//! (`Signals::app_enters`: a `timerfd_settime` at most once per slack), so it fires — and
//! wakes the thread — only once nobody has called the library for about a period.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::Nanos;

/// A one-shot monotonic timer whose expiry makes its fd readable.
#[derive(Debug)]
pub(super) struct AwayTimer {
    fd: OwnedFd,
    /// When (device ns) the timer is set to fire; 0 when it is not set (fired, or never set).
    /// Read through [`AwayTimer::at`].
    at: AtomicU64,
}

impl AwayTimer {
    pub(super) fn new() -> io::Result<AwayTimer> {
        // SAFETY: timerfd_create takes two integer arguments and returns a new fd or -1.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by timerfd_create and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(AwayTimer { fd, at: AtomicU64::new(0) })
    }

    pub(super) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// When the timer is set to fire (device ns), if it is set.
    pub(super) fn at(&self) -> Option<Nanos> {
        match self.at.load(Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }

    /// Sets the timer to fire `after` ns from `now` (device ns), replacing any earlier setting.
    pub(super) fn set(&self, now: Nanos, after: Nanos) {
        let after = after.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (after / 1_000_000_000) as libc::time_t,
                tv_nsec: (after % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: `fd` is our open timerfd; `spec` is a valid itimerspec that outlives the
        // call; a null old-value pointer is allowed.
        let r = unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if r == 0 {
            self.at.store(now + after, Ordering::Release);
        }
    }

    /// The timer fired: consumes the expiry (the fd stops being readable) and marks it unset.
    pub(super) fn fired(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into `n`, a valid u64 that outlives the call; the fd
        // is non-blocking, so nothing to read (already consumed, or re-set) returns EAGAIN.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
        self.at.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn readable(fd: RawFd, wait_ms: i32) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd that outlives the call.
        unsafe { libc::poll(&mut p, 1, wait_ms) == 1 }
    }

    #[test]
    fn fires_once_when_set_and_a_later_setting_replaces_an_earlier_one() {
        let t = AwayTimer::new().unwrap();
        assert_eq!(t.at(), None);
        assert!(!readable(t.raw_fd(), 0), "a timer never set does not fire");
        let start = Instant::now();
        t.set(1_000, 5_000_000);
        assert_eq!(t.at(), Some(5_001_000));
        // Set again before it fired: the new setting replaces the old one.
        t.set(2_000, 20_000_000);
        assert_eq!(t.at(), Some(20_002_000));
        assert!(readable(t.raw_fd(), 2_000), "it fires");
        assert!(start.elapsed() >= Duration::from_millis(20), "not at the replaced setting");
        t.fired();
        assert_eq!(t.at(), None);
        assert!(!readable(t.raw_fd(), 50), "consumed, one-shot: not readable again");
    }
}
