//! The socket owner: an application thread asleep in `ibv_get_cq_event` receives the packets
//! itself, so an arrival wakes it once, as a blocked UDP receiver is woken.
//!
//! Without it, the packet woke the progress thread (on the application's CPU, a cross-CPU
//! wakeup), which received, wrote the completion channel and went back to sleep, and the
//! write woke the application: two wakeups per arrival, 1.86× the both-asleep UDP ping-pong
//! for `ib_send_lat -e`. While an owner waits, the receive socket is taken out of the progress
//! thread's epoll set (disarmed) and the owner sleeps in poll(2) on the channel and the socket
//! together, with the engine's next deadline as its timeout; whatever arrives, it runs the
//! progress step (receive, timers, transmit, deliver events) on its own thread.
//!
//! One owner at a time (a compare-and-swap on its thread id): a second thread waiting on a
//! channel reads it as before, and the owner's step writes its records. The owner gives the
//! socket back (re-arms the progress thread) when it leaves. A thread cancelled in its wait
//! (the wait is a cancellation point, and nothing may be dropped across it) cannot give it
//! back: the id stays, but the thread is gone, and whoever next tries to arm the socket or to
//! own it sees that (`tgkill` with signal 0: ESRCH) and takes it over. Until then, the
//! progress thread looks every [`OWNER_CHECK_NS`] (its away timer), so a cancelled owner
//! costs others at most that long.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::{thread_alive, thread_id};

/// How often the progress thread checks that the socket's owner still exists while it is
/// disarmed for it: the longest a cancelled owner can keep the socket from everyone else.
pub(super) const OWNER_CHECK_NS: u64 = 100_000_000;

/// Which application thread, if any, owns the receive socket, and whether it is asleep on it
/// now: its kernel thread id shifted left by one, ored with 1 while it waits; 0: nobody.
///
/// Between two waits the owner keeps its claim, "parked": it is running the application
/// (which just got its event, and usually re-arms the CQ, polls and posts the reply), and
/// arming the progress thread then would split the ACK it owes from the reply post (an armed
/// device sends at each poll). A parked claim keeps the progress thread disarmed as for a
/// poller (its away timer re-arms it once the application stops calling the library, and
/// clears the claim), and any thread may take it over.
#[derive(Debug, Default)]
pub(super) struct SocketOwner {
    state: AtomicU64,
}

fn tid_of(state: u64) -> i32 {
    (state >> 1) as i32
}

impl SocketOwner {
    /// The calling thread takes the socket to wait on it: true if nobody waits on it now (it
    /// was free, parked, or claimed by a thread that no longer exists) or it is already ours.
    pub(super) fn take(&self) -> bool {
        let me = thread_id();
        let mine = (me as u64) << 1 | 1;
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if cur == mine {
                return true;
            }
            if cur & 1 == 1 && tid_of(cur) != me && thread_alive(tid_of(cur)) {
                return false;
            }
            match self.state.compare_exchange(cur, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// The calling thread leaves its wait and keeps its claim (parked).
    pub(super) fn park(&self) {
        let me = (thread_id() as u64) << 1;
        let _ = self.state.compare_exchange(me | 1, me, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// The calling thread gives the socket back (nothing if it does not own it).
    pub(super) fn release(&self) {
        let me = (thread_id() as u64) << 1;
        for s in [me, me | 1] {
            let _ = self.state.compare_exchange(s, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Clears a parked claim (the application stopped calling the library); a waiting owner
    /// keeps it.
    pub(super) fn clear_parked(&self) {
        let cur = self.state.load(Ordering::Acquire);
        if cur != 0 && cur & 1 == 0 {
            let _ = self.state.compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Whether a live thread claims the socket (waiting or parked); a dead owner's claim is
    /// cleared here.
    pub(super) fn held(&self) -> bool {
        let cur = self.state.load(Ordering::Acquire);
        if cur == 0 {
            return false;
        }
        if tid_of(cur) == thread_id() || thread_alive(tid_of(cur)) {
            return true;
        }
        let _ = self.state.compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Relaxed);
        false
    }

    /// Whether a thread waits on the socket now (no liveness check: a hint).
    pub(super) fn waiting(&self) -> bool {
        self.state.load(Ordering::Relaxed) & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_owner_at_a_time_and_a_dead_owner_is_taken_over() {
        let o = std::sync::Arc::new(SocketOwner::default());
        assert!(!o.held());
        assert!(o.take());
        assert!(o.take(), "taking it again is fine");
        assert!(o.held());
        // Another live thread cannot take it; once it is released, it can.
        let (o2, (tx, rx)) = (o.clone(), std::sync::mpsc::channel());
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(o2.take()).unwrap();
            go_rx.recv().unwrap();
            tx.send(o2.take()).unwrap();
            // Exits owning it, without releasing: as a thread cancelled in its wait.
        });
        assert!(!rx.recv().unwrap(), "owned by the main thread");
        o.release();
        assert!(!o.held());
        go_tx.send(()).unwrap();
        assert!(rx.recv().unwrap(), "free again");
        t.join().unwrap();
        // join returns when the thread cleared its id; the kernel forgets the task a moment
        // later (bounded wait).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while o.held() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!o.held(), "a dead owner holds nothing, and its claim is cleared");
        assert!(o.take());
        o.release();
    }

    #[test]
    fn a_parked_claim_can_be_taken_over_and_cleared_but_a_waiting_one_cannot() {
        let o = std::sync::Arc::new(SocketOwner::default());
        assert!(o.take() && o.waiting());
        o.park();
        assert!(!o.waiting() && o.held(), "parked: still held");
        let o2 = o.clone();
        // Another thread takes a parked claim, waits, then parks it too.
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(o2.take()).unwrap();
            go_rx.recv().unwrap();
            o2.park();
            tx.send(true).unwrap();
            go_rx.recv().unwrap();
        });
        assert!(rx.recv().unwrap(), "a parked claim is free to take");
        assert!(!o.take(), "but not while its new owner waits");
        o.clear_parked();
        assert!(o.waiting(), "a waiting claim is not cleared");
        go_tx.send(()).unwrap();
        assert!(rx.recv().unwrap());
        o.clear_parked();
        assert!(!o.waiting() && o.take(), "a parked one is");
        o.release();
        go_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn release_by_a_thread_that_does_not_own_it_changes_nothing() {
        let o = std::sync::Arc::new(SocketOwner::default());
        assert!(o.take());
        let o2 = o.clone();
        std::thread::spawn(move || o2.release()).join().unwrap();
        assert!(o.held());
        o.release();
        assert!(!o.held());
    }
}
