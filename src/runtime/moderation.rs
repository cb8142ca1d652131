//! Adaptive interrupt moderation: how long the progress thread naps after a wakeup that found a
//! stream arriving (see `progress`), chosen by measuring, as a NIC driver's dynamic interrupt
//! moderation (Linux `net_dim`) chooses its coalescing profile.
//!
//! A nap lets the sender stream on without waking us (each wakeup costs the sender's CPU an
//! IPI and, in a VM, an exit) and drains more per wakeup, with one ACK for it all; it also
//! delays that ACK. Which matters more depends on the requester, which we cannot see: a
//! requester whose window holds much more than a nap's worth of data streams on through the
//! nap (ib_write_bw 64 KiB: 512 PSNs in flight; 31-33 Gb/s napping 10 µs, 15-16 without), one
//! whose application keeps few bytes outstanding stalls until the ACK comes (ib_write_bw 4 KiB:
//! 128 WRs of 4 KiB, a completion every 100; 9-19 Gb/s napping, 17-21 without).
//!
//! So the nap climbs a ladder of lengths by measuring: over each sample window of a stream it
//! measures the receive rate at the current length, tries each neighbouring length it has no
//! rate for, moves to a neighbour that did more than [`TOLERANCE_PCT`] better, and otherwise
//! stays there for [`PARK_SAMPLES`] samples, after which it forgets the neighbours' rates and
//! looks again (the application's pattern may have changed). A stream that pauses for
//! [`IDLE_RESET_NS`] starts afresh: rates of two streams say nothing about each other. No
//! clock is read here: time is an argument.

use crate::engine::Nanos;

/// Nap lengths, shortest first (0: no nap, wait on the socket at once).
pub(super) const LADDER_NS: [u64; 4] = [0, 5_000, 10_000, 20_000];
/// Where a device starts: 10 µs, the fixed nap this replaces.
const START: usize = 2;
/// A sample lasts at least this long and this many stream wakeups.
const SAMPLE_NS: Nanos = 10_000_000;
const SAMPLE_WAKEUPS: u32 = 8;
/// A neighbour's rate this many percent above the current one's is better.
const TOLERANCE_PCT: u64 = 10;
/// Samples spent at a length no neighbour beats before the neighbours are tried again.
const PARK_SAMPLES: u32 = 20;
/// A gap between stream wakeups this long ends the stream.
const IDLE_RESET_NS: Nanos = 50_000_000;

/// The nap ladder and its measurements (one per device, owned by its progress thread).
#[derive(Debug)]
pub(super) struct NapTuner {
    level: usize,
    /// The last receive rate measured at each length (packets per millisecond).
    rates: [Option<u64>; LADDER_NS.len()],
    /// Samples left before the neighbours are tried again.
    parked: u32,
    /// The current length is a probe from this one.
    probe_from: Option<usize>,
    /// The sample under way: when it started, the receive total then, its stream wakeups.
    sample: Option<(Nanos, u64, u32)>,
    /// Time of the last stream wakeup.
    last_wakeup: Nanos,
    /// Moves between lengths (for `urxe stat`).
    steps: u64,
}

impl Default for NapTuner {
    fn default() -> Self {
        NapTuner {
            level: START,
            rates: [None; LADDER_NS.len()],
            parked: 0,
            probe_from: None,
            sample: None,
            last_wakeup: 0,
            steps: 0,
        }
    }
}

impl NapTuner {
    /// A stream wakeup at `now`, when `rx_total` packets had been received by the device in
    /// all (any receiver: the application's polls take packets too). Returns the nap (ns).
    pub(super) fn stream_wakeup(&mut self, now: Nanos, rx_total: u64) -> u64 {
        if now.saturating_sub(self.last_wakeup) >= IDLE_RESET_NS {
            // A new stream: measure afresh from where we are.
            self.sample = None;
            self.rates = [None; LADDER_NS.len()];
            self.parked = 0;
            self.probe_from = None;
        }
        self.last_wakeup = now;
        match self.sample {
            None => self.sample = Some((now, rx_total, 0)),
            Some((start, rx0, n)) => {
                let n = n + 1;
                let took = now.saturating_sub(start);
                if took >= SAMPLE_NS && n >= SAMPLE_WAKEUPS {
                    let rate = rx_total.saturating_sub(rx0) * 1_000_000 / took.max(1);
                    self.judge(rate);
                    self.sample = Some((now, rx_total, 0));
                } else {
                    self.sample = Some((start, rx0, n));
                }
            }
        }
        LADDER_NS[self.level]
    }

    /// Ends a sample whose receive rate at the current length was `rate`: judge a probe (keep
    /// the new length only if it did better), then probe an unmeasured neighbour, move to a
    /// better one, or stay.
    fn judge(&mut self, rate: u64) {
        let better = |r: u64, than: u64| r * 100 > than * (100 + TOLERANCE_PCT);
        self.rates[self.level] = Some(rate);
        if let Some(from) = self.probe_from.take() {
            if !better(rate, self.rates[from].unwrap_or(0)) {
                self.level = from;
                self.steps += 1;
            }
        } else if self.parked > 0 {
            self.parked -= 1;
            if self.parked == 0 {
                // Look again: the neighbours' rates may no longer hold.
                let here = self.rates[self.level];
                self.rates = [None; LADDER_NS.len()];
                self.rates[self.level] = here;
            } else {
                return;
            }
        }
        let here = self.level;
        let base = self.rates[here].unwrap_or(rate);
        // Shorter first: of two unknowns, the one that costs less latency.
        let neighbours = [here.checked_sub(1), Some(here + 1).filter(|&l| l < LADDER_NS.len())];
        let unknown = neighbours.into_iter().flatten().find(|&l| self.rates[l].is_none());
        let known_better = || {
            neighbours
                .into_iter()
                .flatten()
                .filter_map(|l| self.rates[l].map(|r| (r, l)))
                .max()
                .filter(|&(r, _)| better(r, base))
                .map(|(_, l)| l)
        };
        match unknown.or_else(known_better) {
            Some(l) => {
                // A probe: one sample there, kept only if it beats this length.
                self.probe_from = Some(here);
                self.level = l;
                self.steps += 1;
            }
            None => self.parked = PARK_SAMPLES,
        }
    }

    /// The current nap (ns) and the moves taken so far.
    pub(super) fn state(&self) -> (u64, u64) {
        (LADDER_NS[self.level], self.steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a tuner with a stream whose rate (packets per ms) depends on the nap as `rate`
    /// says, one stream wakeup every 100 µs, for `ms` milliseconds; returns the naps chosen.
    fn drive(t: &mut NapTuner, start: Nanos, ms: u64, rate: impl Fn(u64) -> u64) -> Vec<u64> {
        let (mut now, mut rx, mut naps) = (start, 0u64, Vec::new());
        for _ in 0..ms * 10 {
            let nap = t.stream_wakeup(now, rx);
            naps.push(nap);
            now += 100_000;
            rx += rate(nap) / 10;
        }
        naps
    }

    #[test]
    fn a_requester_that_stalls_during_the_nap_brings_it_to_zero() {
        // Rate falls the longer the nap (ib_write_bw 4 KiB).
        let mut t = NapTuner::default();
        let naps = drive(&mut t, 1_000_000, 200, |nap| 600 - nap / 50);
        assert_eq!(naps[0], 10_000, "starts at 10 µs");
        let tail = &naps[naps.len() - 1000..];
        let at_0 = tail.iter().filter(|&&n| n == 0).count();
        assert!(at_0 * 100 > tail.len() * 85, "mostly no nap: {at_0} of {}: {t:?}", tail.len());
    }

    #[test]
    fn a_requester_that_streams_on_keeps_a_long_nap() {
        // Rate rises with the nap up to 10 µs and falls beyond (ib_write_bw 64 KiB): the tuner
        // settles around 10 µs and never stays at 0.
        let mut t = NapTuner::default();
        let rate = |nap: u64| match nap {
            0 => 300,
            5_000 => 500,
            10_000 => 800,
            _ => 600,
        };
        let naps = drive(&mut t, 1_000_000, 400, rate);
        let tail = &naps[naps.len() - 2000..];
        let at_10 = tail.iter().filter(|&&n| n == 10_000).count();
        assert!(at_10 * 100 > tail.len() * 85, "mostly 10 µs: {at_10} of {}", tail.len());
        assert!(tail.iter().all(|&n| n >= 5_000), "never no nap");
    }

    #[test]
    fn a_rate_within_the_tolerance_does_not_move_it() {
        let mut t = NapTuner::default();
        // Flat rates: it probes both neighbours of 10 µs, keeps neither, and rests there but
        // for one sample at each neighbour per re-look.
        let naps = drive(&mut t, 1_000_000, 1000, |_| 500);
        let at_10 = naps.iter().filter(|&&n| n == 10_000).count();
        assert!(at_10 * 100 > naps.len() * 85, "{at_10} of {} at 10 µs: {t:?}", naps.len());
    }

    #[test]
    fn a_pause_starts_the_next_stream_afresh() {
        let mut t = NapTuner::default();
        drive(&mut t, 1_000_000, 100, |nap| 600 - nap / 50);
        let before = t.state();
        // 1 s later a different stream: its first sample is not compared with the old rate.
        let _ = t.stream_wakeup(1_200_000_000, 0);
        assert!(t.rates.iter().all(Option::is_none) && t.sample.is_some());
        assert_eq!(t.state(), before, "the nap itself is kept");
    }
}
