//! The reaction point: one per QP that sends. DCQCN's rate limiter (Zhu et al. 2015, §3.1,
//! with mlx5's parameters):
//!
//! - **Cut**, on a CNP (at most one per `rate_reduce_monitor_period`, further CNPs in it are
//!   coalesced): Rt = Rc, Rc = Rc·(1 − α/2) (generally Rc·(1 − α₁₀/2^rpg_gd), at least
//!   `rpg_min_dec_fac` % of Rc and at least `rpg_min_rate`), then α = (1 − g)·α + g; the
//!   rate-increase timer, the byte counter and both stage counts restart. mlx5 sets Rt = Rc
//!   only if `clamp_tgt_rate`, or `clamp_tgt_rate_after_time_inc` and the timer raised the
//!   rate since the last cut, or on the QP's first CNP; otherwise Rt keeps its value.
//! - **Alpha timer** (K = `dce_tcp_rtt`): each period without a CNP, α = (1 − g)·α. Computed
//!   when needed from the time elapsed, so the driver is never woken for it.
//! - **Increase**, each `rpg_time_reset` (timer stage T += 1) and each `rpg_byte_reset` bytes
//!   sent (byte stage BC += 1), with F = `rpg_threshold`: while max(T, BC) ≤ F fast recovery
//!   Rc = (Rt + Rc)/2; once one count passes F additive increase Rt += R_AI, Rc = (Rt + Rc)/2;
//!   once both pass F hyper increase Rt += i·R_HAI with i = min(T, BC) − F, Rc = (Rt + Rc)/2.
//!   With the byte counter off (`rpg_byte_reset` 0) BC follows T.
//!
//! A QP is unlimited until its first CNP and again once Rc is back within 1/1024 of the
//! highest rate (its next CNP is a first CNP again). While limited it is paced by a token
//! bucket `burst_bytes` deep that fills at Rc: [`Rp::earliest_send`] says when the next
//! packet or GSO train may leave, so the driver sleeps until then.

use super::super::types::Nanos;
use super::params::mbps;
use super::{CcCounters, DcqcnParams};

/// Expiries of the increase timer or byte counter handled in one call at most (a QP idle for
/// long catches up this many stages, then its timer restarts from now).
const MAX_CATCHUP: u32 = 4096;

/// Where a QP's rate is in DCQCN's recovery.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stage {
    /// No rate limit (no CNP yet, or fully recovered).
    Unlimited,
    FastRecovery,
    AdditiveIncrease,
    HyperIncrease,
}

/// Per-QP RP state.
#[derive(Clone, Debug)]
pub struct Rp {
    p: DcqcnParams,
    /// The highest rate (bit/s): `rpg_max_rate`, or the line rate given.
    max: f64,
    limited: bool,
    /// Current and target rate (bit/s).
    rc: f64,
    rt: f64,
    alpha: f64,
    /// Start of the current alpha period.
    alpha_at: Nanos,
    last_cut: Option<Nanos>,
    /// Timer and byte stage counts since the last cut.
    t: u32,
    bc: u32,
    /// The timer raised the rate since the last cut.
    timer_raised: bool,
    /// When the increase timer next expires (while limited).
    next_increase: Nanos,
    /// Bytes sent towards the next byte stage.
    bytes: u64,
    /// Pacing: the bucket's content (bytes; negative after a train larger than it) as of
    /// `tokens_at`.
    tokens: f64,
    tokens_at: Nanos,
}

impl Rp {
    /// A QP's RP on a link of `line_rate_bps` (the highest rate when `rpg_max_rate` is 0).
    pub fn new(p: DcqcnParams, line_rate_bps: u64) -> Rp {
        let max = if p.rpg_max_rate > 0 { mbps(p.rpg_max_rate) } else { (line_rate_bps.max(1)) as f64 };
        Rp {
            p,
            max,
            limited: false,
            rc: max,
            rt: max,
            alpha: p.initial_alpha_value as f64 / 1024.0,
            alpha_at: 0,
            last_cut: None,
            t: 0,
            bc: 0,
            timer_raised: false,
            next_increase: 0,
            bytes: 0,
            tokens: 0.0,
            tokens_at: 0,
        }
    }

    // ---- getters ----------------------------------------------------------------------

    /// The current rate Rc (bit/s), or None while the QP is not limited.
    pub fn rate_bps(&self) -> Option<u64> {
        self.limited.then_some(self.rc as u64)
    }
    /// The target rate Rt (bit/s), or None while the QP is not limited.
    pub fn target_bps(&self) -> Option<u64> {
        self.limited.then_some(self.rt as u64)
    }
    /// Alpha as of `now` (decayed by the alpha periods passed since the last update).
    pub fn alpha(&self, now: Nanos) -> f64 {
        self.decayed(now).0
    }
    /// The recovery stage.
    pub fn stage(&self) -> Stage {
        let f = self.p.rpg_threshold;
        if !self.limited {
            Stage::Unlimited
        } else if self.t.max(self.bc) <= f {
            Stage::FastRecovery
        } else if self.t.min(self.bc) > f {
            Stage::HyperIncrease
        } else {
            Stage::AdditiveIncrease
        }
    }
    /// When [`Rp::handle_timeout`] should next be called (the rate-increase timer), if limited.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.limited.then_some(self.next_increase)
    }

    /// When a packet or train of `bytes` may leave, at `now` or later. Unlimited: `now`.
    /// Otherwise once the bucket holds `min(bytes, burst_bytes)`.
    pub fn earliest_send(&self, now: Nanos, bytes: u32) -> Nanos {
        if !self.limited {
            return now;
        }
        let need = bytes.min(self.p.burst_bytes) as f64;
        let have = self.tokens_now(now);
        if have >= need {
            now
        } else {
            now.saturating_add(((need - have) * 8e9 / self.rc).ceil() as Nanos)
        }
    }

    // ---- inputs -----------------------------------------------------------------------

    /// A CNP for this QP arrived at `now`.
    pub fn on_cnp(&mut self, now: Nanos, c: &mut CcCounters) {
        if !self.p.enabled {
            c.rp_cnp_ignored += 1;
            return;
        }
        c.rp_cnp_handled += 1;
        self.refill(now);
        let (a, at) = self.decayed(now);
        self.alpha = a;
        self.alpha_at = at;
        let first = !self.limited;
        if first {
            let r = if self.p.rate_to_set_on_first_cnp > 0 {
                mbps(self.p.rate_to_set_on_first_cnp).clamp(self.lowest(), self.max)
            } else {
                self.max
            };
            self.limited = true;
            self.rc = r;
            self.rt = r;
            self.alpha = self.p.initial_alpha_value as f64 / 1024.0;
            self.tokens = 0.0;
            self.tokens_at = now;
        }
        let may_cut = self.last_cut.is_none_or(|l| first || now.saturating_sub(l) >= self.p.reduce_period());
        if may_cut {
            if first || self.p.clamp_tgt_rate || (self.p.clamp_tgt_rate_after_time_inc && self.timer_raised) {
                self.rt = self.rc;
            }
            let cut = self.alpha * (2f64).powi(10 - self.p.rpg_gd as i32);
            let floor = (self.rc * self.p.rpg_min_dec_fac as f64 / 100.0).max(self.lowest());
            self.rc = (self.rc * (1.0 - cut)).max(floor).min(self.max);
            self.last_cut = Some(now);
            self.t = 0;
            self.bc = 0;
            self.bytes = 0;
            self.timer_raised = false;
            self.next_increase = now.saturating_add(self.p.increase_period());
        }
        let g = self.p.g();
        self.alpha = (1.0 - g) * self.alpha + g;
        self.alpha_at = now;
    }

    /// `bytes` of this QP's packets left at `now` (drains the bucket, drives the byte counter).
    pub fn on_sent(&mut self, now: Nanos, bytes: u32) {
        if !self.limited {
            return;
        }
        self.refill(now);
        self.tokens -= bytes as f64;
        let reset = self.p.rpg_byte_reset as u64;
        if reset == 0 {
            return;
        }
        self.bytes += bytes as u64;
        let mut n = 0;
        while self.limited && self.bytes >= reset && n < MAX_CATCHUP {
            self.bytes -= reset;
            self.increase(false);
            n += 1;
        }
        if self.bytes >= reset {
            self.bytes %= reset;
        }
    }

    /// The increase timer's expiries up to `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        if !self.limited || now < self.next_increase {
            return;
        }
        self.refill(now);
        let period = self.p.increase_period();
        let mut n = 0;
        while self.limited && self.next_increase <= now && n < MAX_CATCHUP {
            self.increase(true);
            self.next_increase = self.next_increase.saturating_add(period);
            n += 1;
        }
        if self.next_increase <= now {
            self.next_increase = now.saturating_add(period);
        }
    }

    // ---- internals --------------------------------------------------------------------

    /// One rate increase, from the timer or the byte counter.
    fn increase(&mut self, by_timer: bool) {
        if by_timer {
            self.t += 1;
            self.timer_raised = true;
            if self.p.rpg_byte_reset == 0 {
                self.bc = self.t;
            }
        } else {
            self.bc += 1;
        }
        match self.stage() {
            Stage::FastRecovery | Stage::Unlimited => {}
            Stage::AdditiveIncrease => self.rt += mbps(self.p.rpg_ai_rate),
            Stage::HyperIncrease => {
                let i = self.t.min(self.bc) - self.p.rpg_threshold;
                self.rt += i as f64 * mbps(self.p.rpg_hai_rate);
            }
        }
        self.rt = self.rt.min(self.max);
        self.rc = ((self.rt + self.rc) / 2.0).min(self.max);
        if self.rt >= self.max && self.rc >= self.max - self.max / 1024.0 {
            self.limited = false;
            self.rc = self.max;
        }
    }

    /// The lowest rate: `rpg_min_rate`, or the highest rate if that is lower. Rc and Rt stay
    /// between the two.
    fn lowest(&self) -> f64 {
        mbps(self.p.rpg_min_rate).min(self.max)
    }

    /// Alpha decayed to `now`, and the start of the alpha period `now` is in.
    fn decayed(&self, now: Nanos) -> (f64, Nanos) {
        let k = self.p.alpha_period();
        let n = now.saturating_sub(self.alpha_at) / k;
        if n == 0 {
            return (self.alpha, self.alpha_at);
        }
        let a = self.alpha * (1.0 - self.p.g()).powi(n.min(1 << 30) as i32);
        (a, self.alpha_at + n * k)
    }

    fn tokens_now(&self, now: Nanos) -> f64 {
        let dt = now.saturating_sub(self.tokens_at) as f64;
        (self.tokens + dt * self.rc / 8e9).min(self.p.burst_bytes as f64)
    }

    fn refill(&mut self, now: Nanos) {
        if now > self.tokens_at {
            self.tokens = self.tokens_now(now);
            self.tokens_at = now;
        }
    }
}

#[cfg(test)]
#[path = "rp_tests.rs"]
mod tests;
