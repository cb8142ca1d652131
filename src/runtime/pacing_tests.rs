//! Tests of `pacing`.

mod basics {
    use super::super::*;

    #[test]
    fn a_signaled_wr_ends_a_burst_only_after_a_run_of_unsignaled_ones() {
        let mut p = Pacing::new();
        // perftest's pattern: 99 unsignaled, then one signaled, again and again.
        for _ in 0..3 {
            for _ in 0..99 {
                assert!(!p.send_wr_posted(false));
            }
            assert!(p.send_wr_posted(true));
            assert_eq!(p.unsignaled_run, 0);
        }
        // Every WR signaled (`-Q 1`), or one in two: bursts stay.
        for _ in 0..20 {
            assert!(!p.send_wr_posted(true));
        }
        for _ in 0..20 {
            assert!(!p.send_wr_posted(false));
            assert!(!p.send_wr_posted(true));
        }
        // The threshold itself.
        for _ in 0..SELECTIVE_SIGNAL_RUN - 1 {
            p.send_wr_posted(false);
        }
        assert!(!p.send_wr_posted(true));
        for _ in 0..SELECTIVE_SIGNAL_RUN {
            p.send_wr_posted(false);
        }
        assert!(p.send_wr_posted(true));
        // Never signaled (sq_sig_all, or UD): the count saturates, nothing changes.
        p.unsignaled_run = u32::MAX - 1;
        for _ in 0..3 {
            assert!(!p.send_wr_posted(false));
        }
        assert_eq!(p.unsignaled_run, u32::MAX);
    }

    #[test]
    fn two_empty_polls_disarm_once_and_every_32nd_yields() {
        let mut p = Pacing::new();
        let first = p.after_poll(false, 0, None);
        assert!(!first.disarm && !first.rearm && !first.yield_cpu);
        assert!(p.after_poll(false, 1, None).disarm);
        let mut yields = 0;
        for i in 3..=IDLE_POLLS_PER_YIELD as u64 * 2 {
            let a = p.after_poll(false, i, None);
            assert!(!a.disarm, "disarm only at the second empty poll");
            yields += a.yield_cpu as u32;
        }
        assert_eq!(yields, 2);
        let found = p.after_poll(true, 100, None);
        assert!(!found.disarm && !found.yield_cpu);
    }

    #[test]
    fn a_yield_that_ran_another_thread_makes_every_empty_poll_yield_for_a_while() {
        let mut p = Pacing::new();
        // A yield that came back at once changes nothing: one yield per 32 empty polls.
        assert!(!p.after_poll(false, 0, Some(YIELD_RAN_OTHERS_NS - 1)).yield_cpu);
        // One that kept the poller away: crowded. The next empty polls yield each, and the
        // first of them disarms packet wakeups (a crowded poller yields before a second).
        let t = 10_000;
        assert!(!p.after_poll(true, t, Some(YIELD_RAN_OTHERS_NS)).rearm);
        let first = p.after_poll(false, t + 1, None);
        assert!(first.yield_cpu && first.disarm);
        assert!(p.after_poll(false, t + 2, Some(100)).yield_cpu, "a quick yield does not end it");
        // Long absences after completions do not re-arm wakeups while crowded ...
        for i in 0..3 {
            let at = t + 100_000 * (i + 1);
            p.app_returns(at);
            assert!(!p.after_poll(true, at, None).rearm);
        }
        // ... and CROWDED_FOR_NS after the last slow yield, polling is as before.
        let later = t + CROWDED_FOR_NS;
        let a = p.after_poll(false, later, None);
        assert!(!a.yield_cpu && !a.disarm);
        let b = p.after_poll(false, later + 1, None);
        assert!(!b.yield_cpu && b.disarm);
        let at = later + 2 + AWAY_MEANS_ELSEWHERE_NS;
        p.app_returns(at);
        assert!(p.after_poll(true, at, None).rearm, "long absences re-arm again");
    }

    #[test]
    fn quick_yields_in_a_row_end_crowding_before_its_time_is_up() {
        let mut p = Pacing::new();
        let t = 10_000;
        // One slow yield (an interrupt, say) on a core of its own ...
        assert!(p.after_poll(false, t, Some(YIELD_RAN_OTHERS_NS)).yield_cpu);
        // ... then quick ones: CROWDED_SCORE of them and it polls as before, long before
        // CROWDED_FOR_NS.
        for i in 1..CROWDED_SCORE as u64 {
            assert!(p.after_poll(false, t + i, Some(500)).yield_cpu, "quick yield {i}");
        }
        let n = CROWDED_SCORE as u64;
        assert!(!p.after_poll(false, t + n, Some(500)).yield_cpu);
        // Slow yields among quick ones, one in four (two pollers on one core, some yields
        // not running the other): it stays crowded.
        let mut q = Pacing::new();
        for i in 0..200u64 {
            let took = if i % 4 == 0 { 3_000 } else { 500 };
            assert!(q.after_poll(false, t + i, Some(took)).yield_cpu, "yield {i}");
        }
    }

    #[test]
    fn a_yield_that_lost_a_slice_turns_yields_into_naps_with_probes_until_one_comes_back_quick() {
        let mut p = Pacing::new();
        let t = 10_000;
        // A slow yield that did not lose a slice: yields, not naps.
        let a = p.after_poll(false, t, Some(YIELD_LOST_SLICE_NS - 1));
        assert!(a.yield_cpu && !a.nap);
        // One that lost a slice: the next empty polls nap, every NAP_PROBE_EVERY-th yields.
        let mut kinds = Vec::new();
        for i in 1..=2 * NAP_PROBE_EVERY as u64 {
            let took = if i == 1 { Some(YIELD_LOST_SLICE_NS) } else { Some(60_000) };
            let a = p.after_poll(false, t + i, took);
            assert!(a.yield_cpu, "crowded: every empty poll gives the CPU up ({i})");
            kinds.push(a.nap);
        }
        let probes: Vec<usize> = kinds.iter().enumerate().filter(|(_, n)| !**n).map(|(i, _)| i).collect();
        assert_eq!(probes.len(), 2, "{kinds:?}");
        assert_eq!(probes[1] - probes[0], NAP_PROBE_EVERY as usize);
        // A probe that comes back at once ends the naps.
        let a = p.after_poll(false, t + 100, Some(100));
        assert!(a.yield_cpu && !a.nap);
        // And so does NAP_INSTEAD_FOR_NS without another lost slice.
        let mut q = Pacing::new();
        q.after_poll(false, t, Some(YIELD_LOST_SLICE_NS));
        assert!(q.after_poll(false, t + 1, Some(60_000)).nap);
        let a = q.after_poll(false, t + NAP_INSTEAD_FOR_NS, Some(60_000));
        assert!(a.yield_cpu && !a.nap);
    }

    #[test]
    fn rearm_after_two_completions_each_followed_by_a_long_absence() {
        let mut p = Pacing::new();
        // The first completion: no absence measured yet (away_after_found starts at MAX,
        // which counts as one).
        assert!(!p.after_poll(true, 0, None).rearm);
        p.app_returns(AWAY_MEANS_ELSEWHERE_NS);
        assert!(p.after_poll(true, AWAY_MEANS_ELSEWHERE_NS, None).rearm);
        // A quick return breaks the streak; it takes two long absences in a row again.
        let t = AWAY_MEANS_ELSEWHERE_NS + 1;
        p.app_returns(t);
        assert!(!p.after_poll(true, t, None).rearm);
        let t = t + AWAY_MEANS_ELSEWHERE_NS;
        p.app_returns(t);
        assert!(!p.after_poll(true, t, None).rearm);
        let t = t + AWAY_MEANS_ELSEWHERE_NS;
        p.app_returns(t);
        assert!(p.after_poll(true, t, None).rearm);
    }

    #[test]
    fn a_burst_of_small_posts_waits_within_its_bounds() {
        let small = Some(64);
        let mut p = Pacing::new();
        p.last_post_end = 1_000;
        // Armed (the application waits elsewhere) or large: never waits.
        assert!(!p.post_may_wait(small, true, 1_100));
        assert!(!p.post_may_wait(None, false, 1_100));
        // Too long after the previous post: a new burst, sent at once.
        assert!(!p.post_may_wait(small, false, 1_000 + BURST_GAP_NS));
        let mut now = 1_100;
        let mut waited = 0;
        while p.post_may_wait(small, false, now) {
            p.owe_post(now, 64);
            p.last_post_end = now;
            now += 100;
            waited += 1;
            assert!(waited <= BURST_MAX_POSTS);
        }
        assert_eq!(waited, BURST_MAX_POSTS);
        assert_eq!(p.owed_deadline(), Some(1_100 + HOLD_ACK_NS));
        p.paid();
        assert!(!p.owes() && p.post_may_wait(small, false, now));
        // The window: the first owed post waits at most BURST_MAX_NS.
        p.owe_post(now, 64);
        assert!(!p.post_may_wait(small, false, now + BURST_MAX_NS));
    }

    #[test]
    fn a_burst_of_medium_posts_waits_within_its_bytes() {
        let mut p = Pacing::new();
        let mut now = 1_000;
        p.last_post_end = now;
        let mut waited = 0u64;
        while p.post_may_wait(Some(8192), false, now) {
            p.owe_post(now, 8192);
            p.last_post_end = now;
            now += 100;
            waited += 1;
            assert!(waited <= BURST_MAX_POSTS as u64);
        }
        assert_eq!(waited, BURST_MAX_BYTES / 8192);
        p.paid();
        assert!(p.post_may_wait(Some(SMALL_POST_BYTES), false, now));
    }

    #[test]
    fn a_poll_owes_only_when_it_found_something_to_answer_while_disarmed() {
        let mut p = Pacing::new();
        assert!(p.poll_may_wait(true, 0, true, false, 0));
        assert!(!p.poll_may_wait(false, 0, true, false, 0));
        assert!(!p.poll_may_wait(true, 0, false, false, 0));
        assert!(!p.poll_may_wait(true, 0, true, true, 0));
        for i in 0..POLL_DEFER_MAX as u64 {
            assert!(p.poll_may_wait(true, 0, true, false, i));
            p.owe(i);
        }
        assert!(!p.poll_may_wait(true, 0, true, false, POLL_DEFER_MAX as u64));
    }

    #[test]
    fn an_empty_poll_owes_while_completions_wait_in_another_cq() {
        let mut p = Pacing::new();
        // The poll of the send CQ receives the peer's SEND: a completion waits in the receive
        // CQ (the running count went from 0 to 1), so the ACK waits for the next call.
        assert!(p.poll_may_wait(false, 1, true, false, 0));
        p.owe(0);
        // The polls of other CQs that follow still see it waiting ...
        assert!(p.poll_may_wait(false, 1, true, false, 100));
        p.owe(100);
        // ... until the receive CQ's poll finds it: from then on an empty poll sends at once.
        assert!(p.poll_may_wait(true, 1, true, false, 200));
        p.owe(200);
        p.paid();
        assert!(!p.poll_may_wait(false, 1, true, false, 300));
        // A completion nobody polls for holds packets back for a bounded while only: once the
        // limit is reached the poll transmits, and that catches up with the count.
        let mut t = 1_000;
        let mut waited = 0;
        while p.poll_may_wait(false, 2, true, false, t) {
            p.owe(t);
            t += 100;
            waited += 1;
            assert!(waited <= POLL_DEFER_MAX);
        }
        assert_eq!(waited, POLL_DEFER_MAX);
        p.paid();
        assert!(!p.poll_may_wait(false, 2, true, false, t));
        // The limit also runs out in time.
        assert!(p.poll_may_wait(false, 3, true, false, t));
        p.owe(t);
        assert!(!p.poll_may_wait(false, 3, true, false, t + POLL_DEFER_NS));
    }

    #[test]
    fn the_progress_thread_holds_acks_once() {
        let mut p = Pacing::new();
        assert!(!p.thread_may_hold(false));
        assert!(p.thread_may_hold(true));
        p.thread_holds(5);
        assert!(!p.thread_may_hold(true) && p.owes());
        p.paid();
        assert!(p.thread_may_hold(true));
    }
}

mod arm_tests {
    use super::super::*;
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    /// Whether `fd` is in `poll`'s epoll set (registering it again says so).
    fn registered(poll: &mio::Poll, fd: std::os::fd::RawFd) -> bool {
        match poll.registry().register(&mut SourceFd(&fd), RX, Interest::READABLE) {
            Ok(()) => {
                poll.registry().deregister(&mut SourceFd(&fd)).unwrap();
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => true,
            Err(e) => panic!("register: {e}"),
        }
    }

    #[test]
    fn racing_arms_and_disarms_leave_the_flag_and_the_registration_in_agreement() {
        for round in 0..20 {
            let poll = mio::Poll::new().unwrap();
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let fd = sock.as_raw_fd();
            let reg = poll.registry().try_clone().unwrap();
            reg.register(&mut SourceFd(&fd), RX, Interest::READABLE).unwrap();
            let sig = Arc::new(Signals::new(test_doorbell(&poll), reg, fd, Epoch::start()).unwrap());
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let sig = sig.clone();
                    std::thread::spawn(move || {
                        for i in 0..5_000u32 {
                            sig.set_rx_armed((i + t) % 2 == 0);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(registered(&poll, fd), sig.armed(), "round {round}");
        }
    }

    fn test_doorbell(poll: &mio::Poll) -> Doorbell {
        let d = Doorbell::new().unwrap();
        poll.registry()
            .register(&mut SourceFd(&d.raw_fd()), crate::runtime::progress::WAKE, Interest::READABLE)
            .unwrap();
        d
    }

    fn signals() -> (mio::Poll, Signals, std::net::UdpSocket) {
        let poll = mio::Poll::new().unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let reg = poll.registry().try_clone().unwrap();
        let sig = Signals::new(test_doorbell(&poll), reg, sock.as_raw_fd(), Epoch::start()).unwrap();
        (poll, sig, sock)
    }

    #[test]
    fn disarmed_a_timer_due_before_the_threads_next_look_rings_only_if_nobody_polls() {
        let (_poll, sig, _sock) = signals();
        // Old enough that "no poll for APP_ACTIVE_NS" can be true.
        std::thread::sleep(std::time::Duration::from_nanos(2 * APP_ACTIVE_NS));
        sig.set_rx_armed(false);
        assert!(!sig.armed());
        let now = sig.now();
        // The thread sleeps with no timeout; the away timer wakes it 1.5 ms after the disarm.
        sig.thread_wake_at.store(u64::MAX, Ordering::SeqCst);
        assert!(sig.away.at() >= Some(now + REARM_AFTER_NS), "the disarm set the away timer");
        let away = sig.away.at().unwrap();
        // Nobody polled for a while and the timer is due before the away timer fires: ring.
        sig.poll_active_at.store(0, Ordering::Release);
        assert!(sig.kick_needed(Some(now + 100_000), now, true));
        // Due after the away timer: the thread takes over by then, no ring.
        assert!(!sig.kick_needed(Some(away + 1), now, true));
        // Someone polls: the poller runs the timer.
        sig.poll_active_at.store(now.max(1), Ordering::Release);
        assert!(!sig.kick_needed(Some(now + 100_000), now, true));
        // A full socket always rings.
        assert!(sig.kick_needed(None, now, false));
    }

    #[test]
    fn disarmed_calls_push_the_away_timer_at_most_once_per_slack_which_doubles_while_they_go_on() {
        let (_poll, sig, _sock) = signals();
        sig.set_rx_armed(false);
        let t0 = sig.away.at().unwrap();
        let start = t0 - REARM_AFTER_NS - AWAY_SLACK_NS;
        // Calls within the slack leave it where it is (no system call).
        sig.app_enters(start + AWAY_SLACK_NS / 2);
        assert_eq!(sig.away.at(), Some(t0));
        // A call past the slack pushes it a whole period plus twice the slack on: the
        // application kept calling.
        let mut at = start + AWAY_SLACK_NS + 1;
        sig.app_enters(at);
        let mut slack = 2 * AWAY_SLACK_NS;
        assert_eq!(sig.away.at(), Some(at + REARM_AFTER_NS + slack));
        // Each further push doubles it, up to the largest slack.
        let mut pushes = 1;
        while slack < AWAY_SLACK_MAX_NS {
            // Just inside the slack: no push.
            sig.app_enters(at + slack - 1);
            assert_eq!(sig.away.at(), Some(at + REARM_AFTER_NS + slack));
            at += slack + 1;
            sig.app_enters(at);
            slack = (2 * slack).min(AWAY_SLACK_MAX_NS);
            assert_eq!(sig.away.at(), Some(at + REARM_AFTER_NS + slack));
            pushes += 1;
            assert!(pushes < 10, "the slack stops growing");
        }
        at += slack + 1;
        sig.app_enters(at);
        assert_eq!(sig.away.at(), Some(at + REARM_AFTER_NS + AWAY_SLACK_MAX_NS), "capped");
        // Armed, calls do not touch it.
        let set = sig.away.at();
        sig.set_rx_armed(true);
        sig.app_enters(at + 100 * REARM_AFTER_NS);
        assert_eq!(sig.away.at(), set);
        // Disarmed again: the slack starts over (the disarm pushes it with the shortest).
        sig.set_rx_armed(false);
        let now = sig.now();
        let later = at + 200 * REARM_AFTER_NS;
        sig.app_enters(later);
        assert_eq!(
            sig.away.at(),
            Some(later + REARM_AFTER_NS + 2 * AWAY_SLACK_NS),
            "the re-arm started the slack over"
        );
        // The thread, disarmed and about to sleep after the timer fired, sets it for when the
        // application will have been away a whole period ...
        sig.away.fired();
        assert_eq!(sig.away.at(), None);
        sig.app_active_at.store(now, Ordering::Release);
        sig.ensure_away(now);
        assert_eq!(sig.away.at(), Some(now + REARM_AFTER_NS));
        // ... and after a firing, the next push has the shortest slack.
        sig.away.fired();
        sig.app_enters(now + 1);
        assert_eq!(sig.away.at(), Some(now + 1 + REARM_AFTER_NS + AWAY_SLACK_NS));
    }
}
