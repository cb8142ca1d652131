//! The device clock: nanoseconds of `CLOCK_MONOTONIC` since the device started.
//!
//! Read on every library call (several times per message), so it is one `clock_gettime` (the
//! vDSO, no system call) and a subtraction. `Instant::elapsed().as_nanos()` costs about 60 more
//! instructions a reading here (callgrind: the checked `Timespec` subtraction, the `Duration`
//! normalisation and 128-bit arithmetic), some 200 per 64-byte message.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use crate::engine::Nanos;

/// `CLOCK_MONOTONIC` in ns (never fails on Linux for this clock id).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call; CLOCK_MONOTONIC is
    // always supported, so the call only writes `ts`.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(r, 0);
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Time zero of a device's clock; copies read the same clock.
#[derive(Clone, Copy, Debug)]
pub(super) struct Epoch {
    base: u64,
}

impl Epoch {
    /// Starts a clock at 0 now.
    pub(super) fn start() -> Epoch {
        Epoch { base: monotonic_ns() }
    }

    /// Nanoseconds since [`Epoch::start`]; never goes backwards.
    pub(super) fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_zero_in_step_with_the_std_clock() {
        let (e, i) = (Epoch::start(), std::time::Instant::now());
        let a = e.now();
        assert!(a < 50_000_000, "starts near 0: {a}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, std_ns) = (e.now(), i.elapsed().as_nanos() as u64);
        assert!(b >= a + 20_000_000, "{a} -> {b}");
        assert!(b.abs_diff(std_ns) < 5_000_000, "ours {b}, std {std_ns}");
        let copy = e;
        assert!(copy.now() >= b, "a copy reads the same clock");
    }
}
