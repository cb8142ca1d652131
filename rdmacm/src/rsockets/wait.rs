//! Waiting: blocking calls as a loop of non-blocking steps and sleeps between them.

use super::dp::*;
use super::proto::*;
use super::stream::*;
use libc::{c_int, nfds_t, pollfd};
use std::ptr;
use std::time::Instant;
use urxe::sys::cancellable_poll;

// ---- waiting ------------------------------------------------------------------------------
//
// A blocking call is a loop of non-blocking attempts ("steps") and sleeps between them. Each
// step runs with the thread's cancellation off, under the panic guard ([`blocking`]); it either
// finishes the call or says where to sleep ([`Fail::Block`]), having saved its progress in the
// call's state (`Copy`: nothing to drop). The sleep is a `poll` declared `C-unwind` in
// [`blocking`]'s own frame, which holds nothing to drop there: a thread cancelled while it
// sleeps unwinds through that frame and the exported function to its own cleanup handlers, as
// a librdmacm rsocket's waits in poll(2) and in the completion channel's read are cancellation
// points. Unwound through a step instead, it would meet the panic guard, which aborts.

/// Where a blocking call sleeps until its next step.
#[derive(Clone, Copy)]
pub(super) enum Sleep {
    /// Readable on one of the socket's fds (a negative one is ignored), for at most
    /// WAKE_INTERVAL_MS: every step re-checks the socket.
    On([c_int; 2]),
    /// The caller's set for `rpoll`/`rselect`: the thread's [`POLL_SET`] (pointer, count) for
    /// `ms` milliseconds.
    Set(*mut pollfd, nfds_t, c_int),
}

/// Why a step did not finish the call: an errno, or it has to sleep first.
pub(super) enum Fail {
    Errno(i32),
    Block(Sleep),
}

impl From<i32> for Fail {
    fn from(e: i32) -> Fail {
        Fail::Errno(e)
    }
}

/// How the sleep before a step ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Woke {
    /// The call's first step: no sleep yet.
    First,
    /// poll(2) returned (an fd is ready, or the interval ran out).
    Slept,
    /// poll(2) failed with this errno (EINTR: a signal handler ran).
    Failed(i32),
}

/// Runs a blocking call: `step` until it finishes, sleeping where it says between steps. See
/// the section's comment for why the sleep is here. `state` and `failed` are `Copy`, so this
/// frame and the exported function's hold nothing to drop while the thread sleeps.
pub(super) fn blocking<S: Copy, T: Copy>(
    name: &str,
    state: &mut S,
    step: fn(&mut S, Woke) -> Result<T, Fail>,
    failed: T,
) -> T {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let mut woke = Woke::First;
    loop {
        let sleep = {
            let _off = urxe::sys::CancelOff::begin();
            match catch_unwind(AssertUnwindSafe(|| step(state, woke))) {
                Ok(Err(Fail::Block(s))) => s,
                Ok(Ok(v)) => return crate::export::finish(name, Ok(Ok(v)), failed),
                Ok(Err(Fail::Errno(e))) => return crate::export::finish(name, Ok(Err(e)), failed),
                Err(p) => return crate::export::finish(name, Err(p), failed),
            }
        };
        let mut two = [pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 2];
        let (fds, n, ms) = match sleep {
            Sleep::On(fds) => {
                two[0].fd = fds[0];
                two[1].fd = fds[1];
                (two.as_mut_ptr(), 2, WAKE_INTERVAL_MS)
            }
            Sleep::Set(p, n, ms) => (p, n, ms),
        };
        // SAFETY: `n` valid pollfds: ours, or the thread's poll set, which only the next step
        // of this call touches.
        let r = unsafe { cancellable_poll(fds, n, ms) };
        woke = if r < 0 {
            // SAFETY: this thread's errno slot.
            Woke::Failed(unsafe { *libc::__errno_location() })
        } else {
            Woke::Slept
        };
    }
}

/// What a step does first after a sleep on one socket: takes the completion event it may
/// have slept for, so the next sleep arms the CQ again.
pub(super) fn after_sleep(h: &Handle, woke: Woke) {
    if woke != Woke::First {
        take_cq_event(&mut guard(h));
    }
}

/// Waits until `test` holds on the socket (librdmacm's rs_get_comp): polls the CQ and spins
/// briefly, then arms the CQ and asks to sleep on the completion and event channels (the
/// caller's step returns the [`Fail::Block`]). EWOULDBLOCK for a non-blocking call.
///
/// Every step spins anew, after each wake-up too: the completions of a stream come in runs,
/// and one wake-up usually has the next within microseconds. (Spinning only before the first
/// sleep of a call, as before the steps, halves rstream's blocking 1 MB transfers here: 4.8–5.2
/// against 7.7–8.1 Gb/s, alternating runs.)
pub(super) fn get_comp(h: &Handle, nonblock: bool, test: fn(&Stream) -> bool) -> Result<(), Fail> {
    let start = Instant::now();
    loop {
        let mut s = guard(h);
        s.update_credits();
        s.poll_cq();
        s.poll_cm();
        if test(&s) {
            s.update_credits();
            return Ok(());
        }
        if s.state & st::ERROR != 0 {
            return Err(Fail::Errno(if s.err != 0 { s.err } else { libc::EIO }));
        }
        if nonblock {
            return Err(Fail::Errno(libc::EWOULDBLOCK));
        }
        if start.elapsed() < POLL_SPIN {
            continue;
        }
        if !s.cq_armed && !s.cq.is_null() {
            // SAFETY: our CQ.
            unsafe { req_notify_cq(s.cq) };
            s.cq_armed = true;
            continue;
        }
        s.update_credits();
        // SAFETY: our live completion channel.
        let comp_fd = if s.comp.is_null() { -1 } else { unsafe { (*s.comp).fd } };
        return Err(Fail::Block(Sleep::On([comp_fd, s.ch_fd()])));
    }
}

/// Consumes a completion event if one is there (the channel is non-blocking) and disarms.
pub(super) fn take_cq_event(s: &mut Stream) {
    if s.comp.is_null() {
        return;
    }
    let (mut cq, mut ctx) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: our non-blocking completion channel; each event is acknowledged at once.
    if unsafe { ibv_get_cq_event(s.comp, &mut cq, &mut ctx) } == 0 {
        // SAFETY: the CQ the event was for (ours).
        unsafe { ibv_ack_cq_events(cq, 1) };
        s.cq_armed = false;
    }
}

pub(super) fn have_rdata(s: &Stream) -> bool {
    !s.rmsg.is_empty()
}
pub(super) fn conn_have_rdata(s: &Stream) -> bool {
    have_rdata(s) || s.state & st::READABLE == 0
}
pub(super) fn conn_can_send(s: &Stream) -> bool {
    s.can_send() || s.state & st::WRITABLE == 0
}
pub(super) fn conn_can_send_ctrl(s: &Stream) -> bool {
    s.ctrl_avail() || s.state & st::CONNECTED == 0
}
pub(super) fn conn_all_sends_done(s: &Stream) -> bool {
    (s.ctrl_max_seqno - s.ctrl_seqno) + s.sqe_avail == s.sq_size || s.state & st::CONNECTED == 0
}

/// Moves an opening socket on by the CM events that came: Ok once connected; for a blocking
/// call still in progress, sleep on the event channel; EINPROGRESS for a non-blocking one.
pub(super) fn do_connect(h: &Handle, nonblock: bool) -> Result<(), Fail> {
    let mut s = guard(h);
    match s.progress_connect() {
        Err(libc::EINPROGRESS) if !nonblock => Err(Fail::Block(Sleep::On([s.ch_fd(), -1]))),
        r => r.map_err(Fail::Errno),
    }
}

/// Waits for the next event of a socket's channel while it resolves its address and route.
/// Not a cancellation point: the wait is bounded by the resolution's own timeout (2 s), and
/// runs inside `rconnect`'s first step.
pub(super) fn wait_event(h: &Handle) -> TakenEvent {
    loop {
        let fd = {
            let mut s = guard(h);
            if let Some(e) = s.take_event() {
                return e;
            }
            s.ch_fd()
        };
        let mut p = pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours (cancellation is off: not a cancellation point here).
        unsafe { libc::poll(&mut p, 1, WAKE_INTERVAL_MS) };
    }
}

// ---- entry points -------------------------------------------------------------------------
