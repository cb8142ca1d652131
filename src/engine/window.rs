//! The requester's adaptation to loss and delay (engine layer, sans-IO: time is an argument,
//! no I/O). One [`SendWindow`] per RC QP decides how many PSNs may be outstanding (AIMD with
//! slow start after a timeout), when the retransmission timer fires (from the measured round
//! trip, backing off, never later than the QP's configured local ACK timeout), and which
//! timer expiries are local ACK timeouts in the IBTA sense (those count against `retry_cnt`).
//!
//! What the IBTA leaves to the requester is used and nothing more: how much it keeps
//! outstanding, when it asks for an ACK, and when it sends unacknowledged packets again (the
//! responder handles duplicates, §9.7.5.1). The local ACK timeout keeps its meaning: a
//! `RETRY_EXC_ERR` still takes `retry_cnt + 1` periods of the configured timeout without
//! progress. See docs/DESIGN.md, "The requester's window and retransmission timer".

use super::counters::Counters;
/// Most PSNs a requester has in flight without an acknowledgement. rxe uses 128; 512 (2 MiB
/// at MTU 4096) lets a stream go on while a passive responder's progress thread naps between
/// drains (runtime::progress and moderation, up to 20 µs): with 128, ib_write_bw 64 KiB ran the window dry
/// (smoothed RTT 300 µs, 128 packets of 4 KiB = 13.9 Gb/s). The IBTA allows 2^23.
pub(crate) const MAX_UNACKED_PSNS: i32 = 512;
/// A long message asks for an ACK every this many packets (at the full window).
pub(crate) const ACK_EVERY: u32 = 64;
use super::types::Nanos;
use crate::wire::Psn;

/// The window's ceiling.
pub(crate) const MAX_WINDOW: u32 = MAX_UNACKED_PSNS as u32;
/// Where a new QP's window starts (rxe's ceiling); it slow-starts from there to the ceiling,
/// which a loss-free link reaches within two round trips. Starting at the ceiling made each of
/// the first losses of a transfer on a lossy link resend most of 512 PSNs.
pub(crate) const INITIAL_WINDOW: u32 = 128;
/// A loss (NAK, RNR) shrinks the window down to this; only a timeout goes below it.
pub(crate) const MIN_WINDOW: u32 = 8;
/// After a timer expiry the requester resends this many packets first (the probe).
pub(crate) const PROBE_WINDOW: u32 = 2;
/// A loss the responder reports shrinks the window to this many quarters. Gentler than
/// halving: a NAK-sequence also follows plain reordering, and go-back-N already bounds what
/// one loss costs to what is in flight.
const LOSS_QUARTERS: u32 = 3;
/// The retransmission timer never fires sooner than this after it was armed (above it, the
/// measured round trip and its variation decide). A responder may hold an ACK for a while
/// (urxe's progress thread holds one up to 1 ms for the application's next post), so, like
/// TCP's minimum RTO above delayed ACKs, the floor stays above that hold.
pub(crate) const MIN_RTO: Nanos = 2_000_000;
/// A premature expiry (see [`SendWindow::on_response`]) raises the QP's own floor up to this:
/// a peer whose ACKs lag by more than the measured round trip suggests (a slow or descheduled
/// host, an emulated one) stops drawing spurious go-back-N resends.
pub(crate) const MAX_MIN_RTO: Nanos = 256_000_000;
/// After this many round-trip samples with no premature expiry the raised floor halves again.
const CALM_SAMPLES: u32 = 2048;
/// Consecutive timeouts double the timer at most this many times (the configured local ACK
/// timeout caps it long before on any practical path).
const MAX_BACKOFF: u32 = 10;

/// What a timer expiry was.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Expiry {
    /// The retransmission timer fired before the configured local ACK timeout: resend a
    /// probe; `retry_cnt` is not touched.
    Early,
    /// The configured local ACK timeout passed without progress (IBTA §9.7.6.1.3): counts
    /// against `retry_cnt`.
    AckTimeout,
}

/// What a response after an early expiry tells the requester (see [`SendWindow::on_response`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resume {
    /// Nothing particular: go-back-N goes on from the oldest unacknowledged PSN.
    GoBackN,
    /// The expiry was premature: go on after the highest PSN sent.
    Premature,
    /// Not known yet (the response covers only resent PSNs): resend nothing more, go on after
    /// the highest PSN sent; the next response or the timer decides (F-RTO, RFC 5682).
    Hold,
}

/// What an early expiry changed, kept until a response tells whether it was premature.
#[derive(Clone, Copy, Debug)]
struct Undo {
    cwnd: u32,
    ssthresh: u32,
    /// One past the last PSN resent (or re-requested, for a READ its whole response range)
    /// since the expiry: an acknowledgement beyond it answers an original transmission.
    resent_end: Psn,
    /// When the expired timer was armed (the first send or last response before it).
    armed_at: Nanos,
    /// A response already came that covered only resent PSNs: the requester holds.
    held: bool,
}

/// Per-QP send window and retransmission timer state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWindow {
    /// PSNs that may be outstanding (`1..=MAX_WINDOW`).
    cwnd: u32,
    /// Below this the window grows by one per acknowledged PSN (slow start), above it by
    /// one per acknowledged half window (one AckReq interval).
    ssthresh: u32,
    /// PSNs acknowledged towards the next additive increase.
    acked: u32,
    /// The window was reduced for the loss of something sent before this PSN: further
    /// losses below it belong to the same episode and do not reduce it again.
    recover: Option<Psn>,
    /// Oldest unacknowledged PSN as last seen (to count newly acknowledged PSNs).
    unacked: Psn,
    /// Smoothed round trip and its variation (RFC 6298's estimator).
    srtt: Option<Nanos>,
    rttvar: Nanos,
    /// Consecutive timer expiries without progress (the timer is doubled this many times).
    backoff: u32,
    /// The one packet being timed: (PSN, sent at). Only packets sent once are timed.
    sample: Option<(Psn, Nanos)>,
    /// When the configured local ACK timeout expires, if armed.
    ack_deadline: Option<Nanos>,
    /// After a timeout until the first progress: the requester is probing.
    probing: bool,
    /// This QP's retransmission-timer floor (`MIN_RTO`, raised by premature expiries).
    min_rto: Nanos,
    /// Set by an early expiry until a response shows it premature or a real loss shows.
    undo: Option<Undo>,
    /// A hold ended in another expiry (a real loss): no undo or hold until everything sent
    /// before this PSN is acknowledged.
    no_undo_before: Option<Psn>,
    /// Round-trip samples since the floor was last raised or lowered.
    calm: u32,
    /// When the timer was last armed.
    armed_at: Nanos,
}

impl Default for SendWindow {
    fn default() -> Self {
        SendWindow {
            cwnd: INITIAL_WINDOW,
            ssthresh: MAX_WINDOW,
            acked: 0,
            recover: None,
            unacked: Psn::new(0),
            srtt: None,
            rttvar: 0,
            backoff: 0,
            sample: None,
            ack_deadline: None,
            probing: false,
            min_rto: MIN_RTO,
            undo: None,
            no_undo_before: None,
            calm: 0,
            armed_at: 0,
        }
    }
}

impl SendWindow {
    /// Starts at `psn` (the QP's first send PSN).
    pub fn starting_at(psn: Psn) -> SendWindow {
        SendWindow { unacked: psn, ..SendWindow::default() }
    }

    /// A window that has come to `cwnd` PSNs (below the ceiling), for tests of its dynamics.
    #[cfg(test)]
    fn settled_at(psn: Psn, cwnd: u32) -> SendWindow {
        SendWindow { unacked: psn, cwnd, ssthresh: cwnd, ..SendWindow::default() }
    }

    // ---- getters ----------------------------------------------------------------------

    /// PSNs that may be outstanding now.
    pub fn limit(&self) -> i32 {
        self.cwnd as i32
    }

    /// A long message asks for an ACK at least every this many packets: half a window, so
    /// the ACK comes back while the rest of the window is still being sent.
    pub fn ack_every(&self) -> u32 {
        (self.cwnd / 2).clamp(1, ACK_EVERY)
    }

    /// Whether the requester is probing after a timeout (sending one packet at a time).
    #[cfg(test)]
    pub fn probing(&self) -> bool {
        self.probing
    }

    /// The retransmission timeout for the next arming, capped by the configured one.
    pub fn rto(&self, configured: Nanos) -> Nanos {
        let base = match self.srtt {
            Some(s) => (s + (4 * self.rttvar).max(1)).max(self.min_rto),
            None => configured,
        };
        base.saturating_mul(1 << self.backoff.min(MAX_BACKOFF)).min(configured)
    }

    // ---- inputs -----------------------------------------------------------------------

    /// A request packet with PSN `psn`, using `consumes` PSNs (a READ request: its responses),
    /// left at `now`; `resend` if it was sent before.
    pub fn on_send(&mut self, now: Nanos, psn: Psn, consumes: u32, resend: bool, c: &mut Counters) {
        if resend {
            if let Some(u) = &mut self.undo {
                let end = psn.add(consumes.max(1));
                if end.after(u.resent_end) {
                    u.resent_end = end;
                }
            }
            // Karn: an ACK of a packet sent twice does not say which copy it answers.
            if self.sample.is_some_and(|(p, _)| !psn.after(p)) {
                self.sample = None;
            }
            if self.probing {
                c.probe_resends += 1;
            }
        } else if self.sample.is_none() {
            self.sample = Some((psn, now));
        }
    }

    /// A valid response arrived; `unacked` is the oldest PSN still unacknowledged after it.
    /// Takes a round-trip sample, ends a backoff and grows the window by what was newly
    /// acknowledged. After an early expiry it also says where the requester goes on.
    pub fn on_response(&mut self, now: Nanos, unacked: Psn, c: &mut Counters) -> Resume {
        let newly = unacked.distance(self.unacked);
        if newly <= 0 {
            return Resume::GoBackN;
        }
        let mut resume = Resume::GoBackN;
        self.unacked = unacked;
        if self.no_undo_before.is_some_and(|p| !unacked.before(p)) {
            self.no_undo_before = None;
        }
        // After an early expiry: a response that acknowledges a PSN not resent since shows
        // that the original transmission arrived and the expiry was premature (the ACK lagged,
        // nothing was lost). Undo the window cut and raise this QP's floor so that the same
        // lag does not fire the timer again; the caller resumes sending where it was, as the
        // packets in flight got through too (a real loss among them draws a NAK or the timer,
        // as any loss does). A response that covers only resent PSNs says nothing yet (it may
        // answer the resend or the original): the requester holds, resending nothing more,
        // until a response decides; if the timer fires first, that was a real loss and
        // go-back-N runs as usual (F-RTO, RFC 5682).
        if let Some(mut u) = self.undo.take() {
            if !unacked.after(u.resent_end) {
                u.held = true;
                self.undo = Some(u);
                resume = Resume::Hold;
            } else {
                resume = Resume::Premature;
                self.cwnd = u.cwnd;
                self.ssthresh = u.ssthresh;
                self.recover = None;
                // At least double; at once to a quarter above the lag this ACK showed (from
                // the arming of the timer that fired to now), so one expiry is enough.
                let lag = now.saturating_sub(u.armed_at);
                self.min_rto = (self.min_rto * 2).max(lag + lag / 4).min(MAX_MIN_RTO);
                self.calm = 0;
                c.spurious_rtos += 1;
            }
        }
        if let Some((p, sent)) = self.sample {
            if unacked.after(p) {
                self.sample = None;
                self.rtt_sample(now.saturating_sub(sent), c);
            }
        }
        self.backoff = 0;
        self.probing = false;
        if self.recover.is_some_and(|r| !unacked.before(r)) {
            self.recover = None;
        }
        let newly = newly as u32;
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + newly).min(self.ssthresh);
        } else {
            self.acked += newly;
            while self.acked >= self.cwnd / 2 && self.cwnd < MAX_WINDOW {
                self.acked -= self.cwnd / 2;
                self.cwnd += 1;
            }
            if self.cwnd == MAX_WINDOW {
                self.acked = 0;
            }
        }
        c.send_window = self.cwnd as u64;
        resume
    }

    /// A loss reported by the responder (NAK-sequence, a missing READ response, RNR) at
    /// `psn`, with `high` one past the highest PSN sent: shrinks the window once per episode.
    pub fn on_loss(&mut self, psn: Psn, high: Psn, c: &mut Counters) {
        self.sample = None;
        // A reported loss is no premature expiry, whatever is acknowledged next.
        self.undo = None;
        if self.recover.is_some_and(|r| psn.before(r)) {
            return;
        }
        self.recover = Some(high);
        self.ssthresh = (self.cwnd * LOSS_QUARTERS / 4).max(MIN_WINDOW);
        self.cwnd = self.ssthresh;
        self.acked = 0;
        self.reduced(c);
    }

    /// The retransmission timer fired at `now` with PSNs up to `high` outstanding. Says
    /// whether it is a local ACK timeout; either way the window drops to one packet (the
    /// probe) and the next timer is doubled.
    pub fn on_timeout(&mut self, now: Nanos, high: Psn, c: &mut Counters) -> Expiry {
        let kind = match self.ack_deadline {
            Some(d) if d > now => Expiry::Early,
            _ => Expiry::AckTimeout,
        };
        if self.undo.is_some_and(|u| u.held) {
            // Held, and no response came that showed the expiry premature: a real loss.
            self.no_undo_before = Some(high);
            self.undo = None;
        }
        if kind == Expiry::Early {
            c.early_rtos += 1;
            if !self.probing && self.no_undo_before.is_none() && self.undo.is_none() {
                self.undo = Some(Undo {
                    cwnd: self.cwnd,
                    ssthresh: self.ssthresh,
                    resent_end: self.unacked,
                    armed_at: self.armed_at,
                    held: false,
                });
            }
        } else {
            self.undo = None;
        }
        if !self.probing {
            self.ssthresh = (self.cwnd / 2).max(MIN_WINDOW);
        }
        self.probing = true;
        self.cwnd = PROBE_WINDOW;
        self.acked = 0;
        self.sample = None;
        self.recover = Some(high);
        if self.backoff < MAX_BACKOFF {
            self.backoff += 1;
            c.rto_backoffs += 1;
        }
        self.reduced(c);
        kind
    }

    // ---- timer --------------------------------------------------------------------------

    /// Arms both timers from `now` (first packet sent, or a response arrived): the local ACK
    /// timeout at `now + configured`, and returns when the retransmission timer fires
    /// (`None`: the configured timeout is infinite, so no timer at all).
    pub fn arm(&mut self, now: Nanos, configured: Option<Nanos>) -> Option<Nanos> {
        let cfg = configured?;
        self.ack_deadline = Some(now + cfg);
        self.armed_at = now;
        Some(now + self.rto(cfg))
    }

    /// Re-arms after an expiry of `kind` at `now`: a local ACK timeout starts a new period
    /// of the configured timeout; an early expiry keeps the running one. The retransmission
    /// timer (backed off) never fires after the local ACK timeout.
    pub fn rearm(&mut self, now: Nanos, configured: Option<Nanos>, kind: Expiry) -> Option<Nanos> {
        let cfg = configured?;
        let deadline = match (kind, self.ack_deadline) {
            (Expiry::Early, Some(d)) => d,
            _ => now + cfg,
        };
        self.ack_deadline = Some(deadline);
        self.armed_at = now;
        Some((now + self.rto(cfg)).min(deadline))
    }

    /// Whether an early expiry's undo is pending (the ACK short path leaves those to the
    /// general one).
    #[inline]
    pub fn undo_pending(&self) -> bool {
        self.undo.is_some()
    }

    /// Nothing is outstanding or the requester waits (RNR): no timer.
    pub fn disarm(&mut self) {
        self.ack_deadline = None;
    }

    // ---- internals ----------------------------------------------------------------------

    fn rtt_sample(&mut self, r: Nanos, c: &mut Counters) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        c.rtt_samples += 1;
        c.srtt_ns = self.srtt.unwrap_or(r);
        self.calm += 1;
        if self.calm >= CALM_SAMPLES && self.min_rto > MIN_RTO {
            self.min_rto = (self.min_rto / 2).max(MIN_RTO);
            self.calm = 0;
        }
    }

    fn reduced(&mut self, c: &mut Counters) {
        c.window_reductions += 1;
        c.send_window = self.cwnd as u64;
        if c.send_window_min == 0 || (self.cwnd as u64) < c.send_window_min {
            c.send_window_min = self.cwnd as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: Nanos = 67_108_864; // timeout 14

    fn p(v: u32) -> Psn {
        Psn::new(v)
    }

    #[test]
    fn starts_at_the_initial_window_and_slow_starts_to_the_ceiling() {
        let mut c = Counters::default();
        let mut w = SendWindow::starting_at(p(10));
        assert_eq!(w.limit(), INITIAL_WINDOW as i32);
        assert_eq!(w.ack_every(), 64);
        assert_eq!(w.rto(CFG), CFG, "no sample yet: the configured timeout");
        // Each acknowledged PSN adds one (slow start) up to the ceiling: one window's worth
        // of ACKs doubles it.
        w.on_response(1_000, p(10 + 128), &mut c);
        assert_eq!(w.limit(), 256);
        w.on_response(2_000, p(10 + 128 + 256), &mut c);
        assert_eq!(w.limit(), MAX_UNACKED_PSNS);
        w.on_response(3_000, p(10 + 128 + 256 + 512), &mut c);
        assert_eq!(w.limit(), MAX_UNACKED_PSNS, "never above the ceiling");
    }

    #[test]
    fn nak_shrinks_once_per_episode_then_grows_additively() {
        let mut c = Counters::default();
        // A window of 128 (rxe's ceiling; ours is higher): the numbers below follow from it.
        let mut w = SendWindow::settled_at(p(0), 128);
        w.on_loss(p(5), p(100), &mut c);
        assert_eq!(w.limit(), 96);
        // A second loss in the same flight does not reduce again.
        w.on_loss(p(50), p(120), &mut c);
        assert_eq!(w.limit(), 96);
        assert_eq!(c.window_reductions, 1);
        // Acknowledging past the episode ends it; each half window acknowledged adds one.
        w.on_response(1_000, p(100), &mut c);
        assert_eq!(w.limit(), 98, "100 acked at 96: +1 per 48, +1 per 48.5, 4 carried");
        w.on_response(2_000, p(197), &mut c);
        assert_eq!(w.limit(), 100);
        w.on_loss(p(198), p(300), &mut c);
        assert_eq!(w.limit(), 75);
        assert_eq!(c.window_reductions, 2);
        assert_eq!(c.send_window_min, 75);
        assert_eq!(w.ack_every(), 37);
    }

    #[test]
    fn losses_never_take_the_window_below_the_floor() {
        let mut c = Counters::default();
        let mut w = SendWindow::starting_at(p(0));
        for i in 0..40 {
            w.on_loss(p(2 * i + 1), p(2 * i + 2), &mut c);
            w.on_response(0, p(2 * i + 2), &mut c);
        }
        assert!(w.limit() >= MIN_WINDOW as i32 && w.limit() <= MIN_WINDOW as i32 + 1, "{}", w.limit());
        assert_eq!(w.ack_every(), MIN_WINDOW / 2);
    }

    #[test]
    fn timeout_probes_with_a_small_window_then_slow_starts_to_half() {
        let mut c = Counters::default();
        let mut w = SendWindow::settled_at(p(0), 128);
        let t0 = 1_000_000;
        assert_eq!(w.arm(t0, Some(CFG)), Some(t0 + CFG));
        assert_eq!(w.on_timeout(t0 + CFG, p(128), &mut c), Expiry::AckTimeout);
        assert_eq!(w.limit(), PROBE_WINDOW as i32);
        assert_eq!(w.ack_every(), 1, "every probe packet asks for its ACK");
        assert!(w.probing());
        w.on_send(t0 + CFG, p(0), 1, true, &mut c);
        assert_eq!(c.probe_resends, 1);
        w.on_response(t0 + CFG + 10, p(1), &mut c);
        assert!(!w.probing());
        assert_eq!(w.limit(), PROBE_WINDOW as i32 + 1);
        w.on_response(t0 + CFG + 20, p(3), &mut c);
        assert_eq!(w.limit(), PROBE_WINDOW as i32 + 3);
        w.on_response(t0 + CFG + 30, p(200), &mut c);
        assert_eq!(w.limit(), 64, "slow start stops at half the window before the timeout");
        // A second expiry while probing keeps that target.
        w.on_timeout(t0 + 2 * CFG, p(300), &mut c);
        w.on_timeout(t0 + 3 * CFG, p(300), &mut c);
        w.on_response(t0 + 3 * CFG + 10, p(290), &mut c);
        assert_eq!(w.limit(), 32);
    }

    #[test]
    fn rto_follows_measured_rtt_with_floor_and_karn() {
        let mut c = Counters::default();
        let mut w = SendWindow::starting_at(p(0));
        w.on_send(0, p(0), 1, false, &mut c);
        w.on_send(10, p(1), 1, false, &mut c); // not timed: one sample at a time
        w.on_response(5_000_000, p(1), &mut c);
        assert_eq!(c.rtt_samples, 1);
        assert_eq!(c.srtt_ns, 5_000_000);
        assert_eq!(w.rto(CFG), 5_000_000 + 4 * 2_500_000);
        // A resent packet is not timed.
        w.on_send(6_000_000, p(2), 1, false, &mut c);
        w.on_send(7_000_000, p(2), 1, true, &mut c);
        w.on_response(8_000_000, p(3), &mut c);
        assert_eq!(c.rtt_samples, 1);
        // Tiny round trips: the floor holds.
        let mut w = SendWindow::starting_at(p(0));
        for i in 0..50u32 {
            w.on_send(i as u64 * 100, p(i), 1, false, &mut c);
            w.on_response(i as u64 * 100 + 20, p(i + 1), &mut c);
        }
        assert_eq!(w.rto(CFG), MIN_RTO);
        // Never above the configured timeout.
        assert_eq!(w.rto(MIN_RTO / 2), MIN_RTO / 2);
    }

    #[test]
    fn early_expiries_back_off_but_never_past_the_ack_timeout() {
        let mut c = Counters::default();
        let mut w = SendWindow::starting_at(p(0));
        w.on_send(0, p(0), 1, false, &mut c);
        w.on_response(2_000_000, p(1), &mut c); // srtt 2 ms, rttvar 1 ms: rto 6 ms
        let t = 10_000_000;
        let mut at = w.arm(t, Some(CFG)).unwrap();
        assert_eq!(at, t + 6_000_000);
        let mut periods = Vec::new();
        let mut kinds = Vec::new();
        for _ in 0..8 {
            let k = w.on_timeout(at, p(1), &mut c);
            kinds.push(k);
            let next = w.rearm(at, Some(CFG), k).unwrap();
            periods.push(next - at);
            at = next;
        }
        // 12 and 24 ms, then 48 ms cut to the local ACK timeout at t + 67.1 ms; from there
        // every expiry is a local ACK timeout one configured period after the last.
        assert_eq!(&kinds[..3], &[Expiry::Early; 3]);
        assert_eq!(&periods[..3], &[12_000_000, 24_000_000, CFG - 42_000_000]);
        assert!(kinds[3..].iter().all(|k| *k == Expiry::AckTimeout), "{kinds:?}");
        assert!(periods[3..].iter().all(|&d| d == CFG), "{periods:?}");
        assert_eq!((c.early_rtos, c.rto_backoffs), (3, 8));
    }

    /// A window of 100 PSNs in flight with a measured 100 µs round trip (RTO at the floor),
    /// and its early expiry.
    fn expired_window(c: &mut Counters) -> SendWindow {
        let mut w = SendWindow::starting_at(p(0));
        w.on_send(0, p(0), 1, false, c);
        w.on_response(100_000, p(1), c);
        for i in 1..101 {
            w.on_send(200_000, p(i), 1, false, c);
        }
        w.arm(200_000, Some(CFG));
        assert_eq!(w.rto(CFG), MIN_RTO);
        assert_eq!(w.on_timeout(200_000 + MIN_RTO, p(101), c), Expiry::Early);
        assert_eq!(w.limit(), PROBE_WINDOW as i32);
        w
    }

    /// The probe after [`expired_window`]'s expiry: PSNs 1 and 2 resent.
    fn resend_probe(w: &mut SendWindow, c: &mut Counters) {
        w.on_send(2_300_000, p(1), 1, true, c);
        w.on_send(2_300_001, p(2), 1, true, c);
    }

    #[test]
    fn an_ack_of_an_original_after_an_early_expiry_undoes_it_and_raises_the_floor() {
        let mut c = Counters::default();
        let mut w = expired_window(&mut c);
        // The probe goes out (PSNs 1 and 2); the lagging ACK of the originals covers 1..=60.
        resend_probe(&mut w, &mut c);
        w.on_response(2_400_000, p(61), &mut c);
        assert_eq!(c.spurious_rtos, 1);
        assert!(!w.probing());
        assert!(w.limit() >= 128, "the window before the expiry is back: {}", w.limit());
        assert_eq!(w.rto(CFG), 2 * MIN_RTO, "the floor doubled");
        // Each further premature expiry doubles it again, up to its cap (with a configured
        // timeout of 10 s, so that every expiry is an early one).
        const LONG: Nanos = 10_000_000_000;
        for i in 0..12u32 {
            let t = 1_000_000_000 * u64::from(i + 1);
            w.arm(t, Some(LONG));
            let at = t + w.rto(LONG);
            assert_eq!(w.on_timeout(at, p(400), &mut c), Expiry::Early);
            w.on_response(at + 1, p(61 + 10 * (i + 1)), &mut c);
        }
        assert_eq!(c.spurious_rtos, 13);
        assert_eq!(w.rto(LONG), MAX_MIN_RTO, "the floor's own cap");
        assert_eq!(w.rto(CFG), CFG, "never above the configured timeout");
    }

    #[test]
    fn the_floor_jumps_to_the_lag_an_ack_showed() {
        let mut c = Counters::default();
        let mut w = expired_window(&mut c);
        // Armed at 0.2 ms; the ACK of the originals comes 20 ms later.
        w.on_response(20_200_000, p(61), &mut c);
        assert_eq!(c.spurious_rtos, 1);
        assert_eq!(w.rto(CFG), 25_000_000, "a quarter above the 20 ms lag, not just doubled");
    }

    #[test]
    fn an_ack_that_only_covers_the_resent_probe_holds_until_the_next_one_decides() {
        let mut c = Counters::default();
        let mut w = expired_window(&mut c);
        resend_probe(&mut w, &mut c);
        // PSN 1 acknowledged: the probe's answer or the original's, unknown. Hold.
        assert_eq!(w.on_response(2_400_000, p(2), &mut c), Resume::Hold);
        assert_eq!(w.on_response(2_450_000, p(3), &mut c), Resume::Hold, "still only resent PSNs");
        assert_eq!(c.spurious_rtos, 0);
        // PSN 3 was never resent: the originals got through.
        assert_eq!(w.on_response(2_500_000, p(90), &mut c), Resume::Premature);
        assert_eq!(c.spurious_rtos, 1);
        assert!(w.limit() >= 128);
    }

    #[test]
    fn a_hold_that_ends_in_an_expiry_is_a_real_loss() {
        let mut c = Counters::default();
        let mut w = expired_window(&mut c);
        resend_probe(&mut w, &mut c);
        assert_eq!(w.on_response(2_400_000, p(3), &mut c), Resume::Hold);
        // Nothing more comes: the timer fires again. Go-back-N as usual from here on: no undo
        // and no hold until all that was sent (up to PSN 101) is acknowledged.
        w.arm(2_400_000, Some(CFG));
        assert_eq!(w.on_timeout(2_400_000 + w.rto(CFG), p(101), &mut c), Expiry::Early);
        w.on_send(4_500_000, p(3), 1, true, &mut c);
        w.on_send(4_500_001, p(4), 1, true, &mut c);
        assert_eq!(w.on_response(4_600_000, p(5), &mut c), Resume::GoBackN);
        assert_eq!(w.on_response(4_700_000, p(60), &mut c), Resume::GoBackN);
        assert_eq!(c.spurious_rtos, 0);
        assert_eq!(w.rto(CFG), MIN_RTO, "no floor raised for a real loss");
        // Once PSN 101 is acknowledged, premature expiries are recognised again.
        w.on_response(4_800_000, p(101), &mut c);
        for i in 101..201 {
            w.on_send(5_000_000, p(i), 1, false, &mut c);
        }
        w.arm(5_000_000, Some(CFG));
        assert_eq!(w.on_timeout(5_000_000 + w.rto(CFG), p(201), &mut c), Expiry::Early);
        assert_eq!(w.on_response(7_500_000, p(150), &mut c), Resume::Premature);
    }

    #[test]
    fn a_re_requested_read_covers_its_whole_response_range() {
        let mut c = Counters::default();
        let mut w = expired_window(&mut c);
        // PSN 1 is a READ of 16 packets: re-requesting it makes the responder answer 1..=16.
        w.on_send(2_300_000, p(1), 16, true, &mut c);
        w.on_response(2_400_000, p(17), &mut c);
        assert_eq!(c.spurious_rtos, 0, "responses to the re-request prove nothing");
        let mut w = expired_window(&mut c);
        w.on_send(2_300_000, p(1), 16, true, &mut c);
        w.on_response(2_400_000, p(18), &mut c);
        assert_eq!(c.spurious_rtos, 1, "PSN 17 was answered from its original request");
    }

    #[test]
    fn a_local_ack_timeout_is_never_undone_and_a_raised_floor_decays() {
        let mut c = Counters::default();
        let mut w = expired_window(&mut c);
        w.on_response(2_400_000, p(50), &mut c);
        assert_eq!(w.rto(CFG), 2 * MIN_RTO);
        // The configured timeout passes: a real timeout, whatever answers next.
        let t = 10_000_000;
        w.arm(t, Some(CFG));
        assert_eq!(w.on_timeout(t + CFG, p(200), &mut c), Expiry::AckTimeout);
        w.on_response(t + CFG + 1, p(150), &mut c);
        assert_eq!(c.spurious_rtos, 1);
        // Calm round trips bring the floor back down.
        for i in 0..CALM_SAMPLES {
            let psn = 150 + i;
            w.on_send(u64::from(i) * 1000, p(psn), 1, false, &mut c);
            w.on_response(u64::from(i) * 1000 + 100, p(psn + 1), &mut c);
        }
        assert_eq!(w.rto(CFG), MIN_RTO);
    }

    #[test]
    fn infinite_timeout_arms_nothing() {
        let mut w = SendWindow::starting_at(p(0));
        assert_eq!(w.arm(5, None), None);
        assert_eq!(w.rearm(5, None, Expiry::AckTimeout), None);
    }
}
