//! The RP against the equations of Zhu et al. 2015 (§3.1) and mlx5's parameter meanings, with
//! ConnectX's values unless a test says otherwise.

use super::*;

const LINE: u64 = 10_000_000_000;
const US: Nanos = 1000;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Paper-like settings: F = 5, a byte counter that stays out of the way unless fed, and a
/// first rate (1 Gb/s) well below the line rate so the target has room to grow.
fn paper() -> DcqcnParams {
    DcqcnParams { rpg_threshold: 5, rpg_byte_reset: 32767, rate_to_set_on_first_cnp: 1000, ..DcqcnParams::connectx() }
}

#[test]
fn unlimited_until_the_first_cnp() {
    let rp = Rp::new(DcqcnParams::connectx(), LINE);
    assert_eq!(rp.rate_bps(), None);
    assert_eq!(rp.stage(), Stage::Unlimited);
    assert_eq!(rp.poll_timeout(), None);
    assert_eq!(rp.earliest_send(123, 1 << 20), 123);
}

#[test]
fn cnp_cuts_rate_by_alpha_half_and_raises_alpha() {
    let p = DcqcnParams::connectx();
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let a0 = 1023.0 / 1024.0;
    let g = 5.0 / 1024.0;
    // First CNP: Rt = Rc = line rate, then Rc = Rc(1 − α/2), α = (1 − g)α + g.
    assert_eq!(rp.target_bps(), Some(LINE));
    assert!(close(rp.rc, LINE as f64 * (1.0 - a0 / 2.0)), "{}", rp.rc);
    assert!(close(rp.alpha(0), (1.0 - g) * a0 + g));
    assert_eq!(c.rp_cnp_handled, 1);
    assert_eq!(rp.stage(), Stage::FastRecovery);
    assert_eq!(rp.poll_timeout(), Some(300 * US));

    // A second CNP 10 µs later (K = 1 µs): α decayed 10 periods first, then the cut with it.
    let (rc1, a1) = (rp.rc, rp.alpha(0));
    let a_at = a1 * (1.0 - g).powi(10);
    assert!(close(rp.alpha(10 * US), a_at));
    rp.on_cnp(10 * US, &mut c);
    assert!(close(rp.rc, rc1 * (1.0 - a_at / 2.0)));
    assert!(close(rp.alpha(10 * US), (1.0 - g) * a_at + g));
    // mlx5 default (clamp_tgt_rate 0, clamp after a timer increase only): Rt kept.
    assert_eq!(rp.target_bps(), Some(LINE));
}

#[test]
fn clamp_tgt_rate_sets_target_to_current_on_every_cut() {
    let p = DcqcnParams { clamp_tgt_rate: true, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let rc1 = rp.rc;
    rp.on_cnp(10 * US, &mut c);
    assert!(close(rp.rt, rc1), "Rt = Rc before the cut");
}

#[test]
fn target_clamped_after_a_timer_increase() {
    let (mut rp, mut c) = (Rp::new(DcqcnParams::connectx(), LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    rp.handle_timeout(300 * US); // one timer stage: fast recovery
    let rc = rp.rc;
    rp.on_cnp(301 * US, &mut c);
    assert!(close(rp.rt, rc));
}

#[test]
fn alpha_decays_by_one_minus_g_per_period_without_cnp() {
    let p = DcqcnParams { dce_tcp_rtt: 55, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let a = rp.alpha(0);
    let g = p.g();
    assert!(close(rp.alpha(54 * US), a), "no full period yet");
    assert!(close(rp.alpha(55 * US), a * (1.0 - g)));
    assert!(close(rp.alpha(3 * 55 * US + 7), a * (1.0 - g).powi(3)));
}

#[test]
fn recovery_fast_then_additive_then_hyper() {
    let p = paper();
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let rt0 = rp.rt;
    let mut rc = rp.rc;
    let t = p.increase_period();
    // Timer stages 1..=F: fast recovery, Rc = (Rt + Rc)/2, Rt unchanged.
    for k in 1..=5u64 {
        rp.handle_timeout(k * t);
        rc = (rt0 + rc) / 2.0;
        assert!(close(rp.rc, rc), "stage {k}");
        assert!(close(rp.rt, rt0));
        assert_eq!(rp.stage(), Stage::FastRecovery);
    }
    // Stage 6 (T > F, BC = 0): additive increase, Rt += R_AI.
    rp.handle_timeout(6 * t);
    let mut rt = rt0 + 5e6;
    rc = (rt + rc) / 2.0;
    assert!(close(rp.rt, rt) && close(rp.rc, rc));
    assert_eq!(rp.stage(), Stage::AdditiveIncrease);
    rp.handle_timeout(7 * t); // T = 7
    rt += 5e6;
    rc = (rt + rc) / 2.0;
    assert!(close(rp.rt, rt) && close(rp.rc, rc));
    // The byte counter: five stages keep additive increase (T > F, BC ≤ F) ...
    for _ in 0..5 {
        rp.on_sent(7 * t + 1, 32767);
        rt += 5e6;
        rc = (rt + rc) / 2.0;
    }
    assert!(close(rp.rt, rt) && close(rp.rc, rc));
    // ... BC = 6: both past F, hyper increase with i = min(T, BC) − F = 1, then BC = 7: i = 2.
    rp.on_sent(7 * t + 2, 32767);
    rt += 50e6;
    rc = (rt + rc) / 2.0;
    assert_eq!(rp.stage(), Stage::HyperIncrease);
    assert!(close(rp.rt, rt) && close(rp.rc, rc));
    rp.on_sent(7 * t + 3, 32767);
    rt += 2.0 * 50e6;
    rc = (rt + rc) / 2.0;
    assert!(close(rp.rt, rt) && close(rp.rc, rc), "{} {}", rp.rt, rt);
}

#[test]
fn a_cnp_restarts_the_stages() {
    let p = paper();
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    for k in 1..=7 {
        rp.handle_timeout(k * p.increase_period());
    }
    assert_eq!(rp.stage(), Stage::AdditiveIncrease);
    let now = 7 * p.increase_period() + 1;
    rp.on_cnp(now, &mut c);
    assert_eq!(rp.stage(), Stage::FastRecovery);
    assert_eq!(rp.poll_timeout(), Some(now + p.increase_period()));
}

#[test]
fn rate_never_below_rpg_min_rate() {
    let p = DcqcnParams { rpg_min_rate: 100, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    for i in 0..200u64 {
        rp.on_cnp(i * 5 * US, &mut c);
    }
    assert_eq!(rp.rate_bps(), Some(100_000_000));
}

#[test]
fn one_cut_leaves_at_least_rpg_min_dec_fac() {
    // rpg_gd 10: the cut is α·Rc (≈ all of it); min_dec_fac 30 keeps 30 %.
    let p = DcqcnParams { rpg_gd: 10, rpg_min_dec_fac: 30, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    assert!(close(rp.rc, LINE as f64 * 0.3), "{}", rp.rc);
}

#[test]
fn cnps_within_the_monitor_period_are_coalesced() {
    let (mut rp, mut c) = (Rp::new(DcqcnParams::connectx(), LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let rc = rp.rc;
    for us in 1..4 {
        rp.on_cnp(us * US, &mut c);
    }
    assert!(close(rp.rc, rc), "no second cut inside rate_reduce_monitor_period");
    rp.on_cnp(4 * US, &mut c);
    assert!(rp.rc < rc);
    assert_eq!(c.rp_cnp_handled, 5);
}

#[test]
fn dcqcn_off_ignores_cnps() {
    let p = DcqcnParams { enabled: false, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    assert_eq!((c.rp_cnp_handled, c.rp_cnp_ignored), (0, 1));
    assert_eq!(rp.rate_bps(), None);
    assert_eq!(rp.earliest_send(5, 65536), 5);
}

#[test]
fn rate_to_set_on_first_cnp_replaces_the_line_rate() {
    let p = DcqcnParams { rate_to_set_on_first_cnp: 1000, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    assert_eq!(rp.target_bps(), Some(1_000_000_000));
    assert!(close(rp.rc, 1e9 * (1.0 - 1023.0 / 2048.0)));
}

#[test]
fn pacing_holds_the_current_rate() {
    let p = DcqcnParams { rpg_time_reset: 131_071, rpg_byte_reset: 0, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, LINE), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let rate = rp.rate_bps().unwrap() as f64;
    // Send 4 KiB packets as early as allowed for 10 ms (bounded: at most 200k packets).
    let (mut now, mut sent) = (0u64, 0u64);
    for _ in 0..200_000 {
        now = rp.earliest_send(now, 4096);
        if now >= 10_000_000 {
            break;
        }
        rp.on_sent(now, 4096);
        sent += 4096;
    }
    let expect = rate * 0.010 / 8.0;
    assert!((sent as f64 - expect).abs() <= 16384.0 + 4096.0, "sent {sent}, rate says {expect}");
    // A train larger than the bucket waits for a full bucket, then goes.
    let t = rp.earliest_send(now, 1 << 20);
    assert!(t > now && t - now <= (16384.0 * 8e9 / rate) as u64 + 1);
}

#[test]
fn recovers_to_unlimited_with_no_more_cnps() {
    let (mut rp, mut c) = (Rp::new(DcqcnParams::connectx(), 1_000_000_000), CcCounters::default());
    rp.on_cnp(0, &mut c);
    let mut steps = 0;
    while let Some(t) = rp.poll_timeout() {
        rp.on_sent(t, 4096);
        rp.handle_timeout(t);
        steps += 1;
        assert!(steps < 10_000, "never recovered: {:?}", rp.rate_bps());
    }
    assert_eq!(rp.stage(), Stage::Unlimited);
    // A later CNP is a first CNP again: Rt = line rate.
    rp.on_cnp(1_000_000_000, &mut c);
    assert_eq!(rp.target_bps(), Some(1_000_000_000));
}

#[test]
fn a_long_idle_catches_up_in_bounded_work() {
    let p = DcqcnParams { rpg_ai_rate: 1, rpg_hai_rate: 1, ..DcqcnParams::connectx() };
    let (mut rp, mut c) = (Rp::new(p, 100_000_000_000), CcCounters::default());
    rp.on_cnp(0, &mut c);
    rp.handle_timeout(3_600 * 1_000_000_000);
    if let Some(t) = rp.poll_timeout() {
        assert!(t > 3_600 * 1_000_000_000);
    }
}

/// One input to an RP.
#[derive(Clone, Debug)]
enum Op {
    Cnp,
    Sent(u32),
    Timeout,
}

fn any_op() -> impl proptest::strategy::Strategy<Value = (u64, Op)> {
    use proptest::prelude::*;
    let op = prop_oneof![Just(Op::Cnp), (1u32..=1 << 24).prop_map(Op::Sent), Just(Op::Timeout)];
    // Time advances by 0 .. 10 ms, or by a jump of up to a day.
    (prop_oneof![0u64..10_000_000, 0u64..86_400_000_000_000], op)
}

fn any_params() -> impl proptest::strategy::Strategy<Value = DcqcnParams> {
    use proptest::prelude::*;
    let rp = (1u32..=131_071, 0u32..=32_767, 1u32..=31, 0u32..=100_000, 1u32..=100_000, 1u32..=100_000, 10u32..=20);
    let rp2 = (0u32..=100, 1u32..=100_000, 0u32..=100_000, 1u32..=1_000_000, 1u32..=1023, 0u32..=1023, 1u32..=131_071);
    (rp, rp2, any::<bool>(), any::<bool>(), any::<bool>(), 1u32..=1 << 24).prop_map(
        |((tr, br, th, max, ai, hai, gd), (fac, min, first, mon, a0, g, k), clamp, clamp_t, on, burst)| DcqcnParams {
            enabled: on,
            rpg_time_reset: tr,
            rpg_byte_reset: br,
            rpg_threshold: th,
            rpg_max_rate: max,
            rpg_ai_rate: ai,
            rpg_hai_rate: hai,
            rpg_gd: gd,
            rpg_min_dec_fac: fac,
            rpg_min_rate: min,
            rate_to_set_on_first_cnp: first,
            rate_reduce_monitor_period: mon,
            initial_alpha_value: a0,
            dce_tcp_g: g,
            dce_tcp_rtt: k,
            clamp_tgt_rate: clamp,
            clamp_tgt_rate_after_time_inc: clamp_t,
            burst_bytes: burst,
            ..DcqcnParams::connectx()
        },
    )
}

proptest::proptest! {
    /// Any parameters in range, any line rate, any inputs in time order: no panic, the rate
    /// stays within [min(rpg_min_rate, highest), highest] and finite, alpha in [0, 1], the
    /// next send is never in the past, and the timer is never in the past after it ran.
    #[test]
    fn rp_stays_within_its_bounds(
        p in any_params(),
        line in 0u64..=400_000_000_000,
        ops in proptest::collection::vec(any_op(), 1..200),
    ) {
        let mut rp = Rp::new(p, line);
        let mut c = CcCounters::default();
        let max = if p.rpg_max_rate > 0 { p.rpg_max_rate as f64 * 1e6 } else { line.max(1) as f64 };
        let lo = (p.rpg_min_rate as f64 * 1e6).min(max);
        let mut now = 0u64;
        for (dt, op) in ops {
            now = now.saturating_add(dt);
            match op {
                Op::Cnp => rp.on_cnp(now, &mut c),
                Op::Sent(b) => rp.on_sent(now, b),
                Op::Timeout => rp.handle_timeout(now),
            }
            let a = rp.alpha(now);
            proptest::prop_assert!((0.0..=1.0).contains(&a), "alpha {}", a);
            if let Some(r) = rp.rate_bps() {
                proptest::prop_assert!(rp.rc.is_finite() && rp.rc >= lo * (1.0 - 1e-12) && rp.rc <= max, "rc {} not in [{}, {}]", rp.rc, lo, max);
                proptest::prop_assert!(r as f64 <= max);
            }
            proptest::prop_assert!(rp.earliest_send(now, 4096) >= now);
            if matches!(op, Op::Timeout) {
                if let Some(t) = rp.poll_timeout() {
                    proptest::prop_assert!(t > now || t == u64::MAX);
                }
            }
        }
        // DCQCN is on or off for the whole run: only one of the two counts moves.
        proptest::prop_assert_eq!(c.rp_cnp_handled + c.rp_cnp_ignored, c.rp_cnp_handled.max(c.rp_cnp_ignored));
    }
}
