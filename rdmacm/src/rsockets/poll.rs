//! `rpoll` and `rselect`.

use super::dp::*;
use super::proto::*;
use super::stream::*;
use super::wait::*;
use libc::{c_int, nfds_t, pollfd};
use std::time::{Duration, Instant};

/// The socket's readiness now (librdmacm's rs_poll_rs with a non-blocking check), and the fd
/// to sleep on when it has none.
pub(super) fn poll_one(h: &Handle, events: i16) -> (i16, c_int) {
    {
        let s = guard(h);
        if s.state & st::OPENING != 0 {
            drop(s);
            let _ = do_connect(h, true);
        }
    }
    let mut s = guard(h);
    if s.state & st::CONNECTED != 0 || s.state == st::DISCONNECTED || s.state & st::ERROR != 0 {
        s.update_credits();
        s.poll_cq();
        s.poll_cm();
        s.update_credits();
        let io = |s: &Stream| {
            let r = if events & libc::POLLIN != 0 && conn_have_rdata(s) { libc::POLLIN } else { 0 };
            r | if events & libc::POLLOUT != 0 && s.can_send() { libc::POLLOUT } else { 0 }
        };
        let mut rev = io(&s);
        // A peer that sent its last data and closed: that data is read first (POLLIN without
        // POLLHUP, as a TCP socket with data before its FIN), else programs that treat HUP as
        // the end (rstream) would lose the reply that came with the close.
        if s.state & st::CONNECTED == 0 && !(s.state == st::DISCONNECTED && have_rdata(&s)) {
            rev |= if s.state == st::DISCONNECTED { libc::POLLHUP } else { libc::POLLERR };
        }
        if rev == 0 && !s.cq_armed && !s.cq.is_null() {
            // Armed before sleeping; a completion that raced the arm is seen next round.
            // SAFETY: our CQ.
            unsafe { req_notify_cq(s.cq) };
            s.cq_armed = true;
            s.poll_cq();
            rev |= io(&s);
        }
        // SAFETY: our live completion channel.
        let fd = if s.comp.is_null() { s.ch_fd() } else { unsafe { (*s.comp).fd } };
        return (rev, fd);
    }
    if s.state == st::LISTENING {
        let mut p = pollfd { fd: s.ch_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one pollfd of ours.
        unsafe { libc::poll(&mut p, 1, 0) };
        return (if p.revents & libc::POLLIN != 0 { events & libc::POLLIN } else { 0 }, s.ch_fd());
    }
    if s.state == st::CONNECT_ERROR {
        return ((events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR, s.ch_fd());
    }
    (0, s.ch_fd())
}

thread_local! {
    /// The fds a thread's `rpoll`/`rselect` sleeps on: each rsocket's completion (or event)
    /// channel, each other fd as asked. Kept between a call's steps: the sleep fills in the
    /// revents the next step reads.
    static POLL_SET: std::cell::RefCell<Vec<pollfd>> = const { std::cell::RefCell::new(Vec::new()) };
    /// `rselect`'s fd sets as pollfds, rebuilt at each step.
    static SELECT_SET: std::cell::RefCell<Vec<pollfd>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One step of `rpoll` over `fds`: the number ready, or a sleep on the thread's poll set.
/// `start` is the call's start (set by its first step), for the spin and the timeout.
pub(super) fn poll_step(
    fds: &mut [pollfd],
    timeout: c_int,
    start: &mut Option<Instant>,
    woke: Woke,
) -> Result<c_int, Fail> {
    let start = *start.get_or_insert_with(Instant::now);
    let deadline = (timeout >= 0).then(|| start + Duration::from_millis(timeout as u64));
    POLL_SET.with(|set| {
        let mut sleep = set.borrow_mut();
        match woke {
            Woke::First => {}
            Woke::Failed(e) => return Err(Fail::Errno(e)),
            Woke::Slept => {
                for (p, q) in fds.iter().zip(sleep.iter()) {
                    if q.revents != 0 {
                        if let Ok(h) = lookup(p.fd) {
                            take_cq_event(&mut guard(&h));
                        }
                    }
                }
            }
        }
        loop {
            let mut ready = 0;
            sleep.clear();
            for p in fds.iter_mut() {
                p.revents = 0;
                if p.fd < 0 {
                    sleep.push(pollfd { fd: -1, events: 0, revents: 0 });
                    continue;
                }
                match lookup(p.fd) {
                    Ok(h) => {
                        let (rev, fd) = poll_one(&h, p.events);
                        p.revents = rev;
                        sleep.push(pollfd { fd, events: libc::POLLIN, revents: 0 });
                    }
                    Err(_) => {
                        let mut q = pollfd { fd: p.fd, events: p.events, revents: 0 };
                        // SAFETY: one pollfd (zero timeout; cancellation is off).
                        unsafe { libc::poll(&mut q, 1, 0) };
                        p.revents = q.revents;
                        sleep.push(pollfd { fd: p.fd, events: p.events, revents: 0 });
                    }
                }
                if p.revents != 0 {
                    ready += 1;
                }
            }
            if ready > 0 || timeout == 0 {
                return Ok(ready);
            }
            if start.elapsed() < POLL_SPIN {
                continue;
            }
            let ms = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(0);
                    }
                    (left.as_millis() as c_int).clamp(1, WAKE_INTERVAL_MS)
                }
                None => WAKE_INTERVAL_MS,
            };
            return Err(Fail::Block(Sleep::Set(sleep.as_mut_ptr(), sleep.len() as nfds_t, ms)));
        }
    })
}

/// `rpoll`'s arguments and start.
#[derive(Clone, Copy)]
pub(super) struct Poll {
    pub(super) fds: *mut pollfd,
    pub(super) nfds: nfds_t,
    pub(super) timeout: c_int,
    pub(super) start: Option<Instant>,
}

pub(super) fn rpoll_step(p: &mut Poll, woke: Woke) -> Result<c_int, Fail> {
    if p.fds.is_null() && p.nfds > 0 {
        return Err(Fail::Errno(libc::EFAULT));
    }
    let fds = if p.nfds == 0 {
        &mut []
    } else {
        // SAFETY: the caller's array of `nfds` pollfds.
        unsafe { std::slice::from_raw_parts_mut(p.fds, p.nfds as usize) }
    };
    poll_step(fds, p.timeout, &mut p.start, woke)
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    blocking("rpoll", &mut Poll { fds, nfds, timeout, start: None }, rpoll_step, -1)
}

/// `rselect`'s arguments and start.
#[derive(Clone, Copy)]
pub(super) struct Select {
    pub(super) nfds: c_int,
    pub(super) sets: [*mut libc::fd_set; 3],
    pub(super) timeout: *mut libc::timeval,
    pub(super) start: Option<Instant>,
}

/// `rselect`: the fd sets as pollfds ([`SELECT_SET`]), polled as `rpoll`; the sets are
/// rewritten once it is done.
pub(super) fn select_step(x: &mut Select, woke: Woke) -> Result<c_int, Fail> {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&x.nfds) {
        return Err(Fail::Errno(libc::EINVAL));
    }
    let [readfds, writefds, exceptfds] = x.sets;
    let ms = if x.timeout.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { &*x.timeout };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            return Err(Fail::Errno(libc::EINVAL));
        }
        (t.tv_sec * 1000 + t.tv_usec / 1000).min(i64::from(c_int::MAX)) as c_int
    };
    SELECT_SET.with(|fds| {
        let mut fds = fds.borrow_mut();
        fds.clear();
        // SAFETY: the caller's fd sets (NULL = not asked).
        let is = |set: *mut libc::fd_set, fd: c_int| !set.is_null() && unsafe { libc::FD_ISSET(fd, set) };
        for fd in 0..x.nfds {
            let mut ev = 0;
            if is(readfds, fd) {
                ev |= libc::POLLIN;
            }
            if is(writefds, fd) {
                ev |= libc::POLLOUT;
            }
            if is(exceptfds, fd) {
                ev |= libc::POLLPRI;
            }
            if ev != 0 {
                fds.push(pollfd { fd, events: ev, revents: 0 });
            }
        }
        poll_step(&mut fds, ms, &mut x.start, woke)?;
        // SAFETY: the caller's fd sets, rewritten with what is ready.
        unsafe {
            for set in x.sets {
                if !set.is_null() {
                    libc::FD_ZERO(set);
                }
            }
            let mut count = 0;
            for p in fds.iter() {
                if !readfds.is_null()
                    && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
                    && p.events & libc::POLLIN != 0
                {
                    libc::FD_SET(p.fd, readfds);
                    count += 1;
                }
                if !writefds.is_null()
                    && p.revents & (libc::POLLOUT | libc::POLLERR) != 0
                    && p.events & libc::POLLOUT != 0
                {
                    libc::FD_SET(p.fd, writefds);
                    count += 1;
                }
                if !exceptfds.is_null() && p.revents & libc::POLLPRI != 0 {
                    libc::FD_SET(p.fd, exceptfds);
                    count += 1;
                }
            }
            Ok(count)
        }
    })
}

/// A cancellation point while it sleeps (see [`blocking`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    blocking(
        "rselect",
        &mut Select { nfds, sets: [readfds, writefds, exceptfds], timeout, start: None },
        select_step,
        -1,
    )
}

// ---- shutdown and close -------------------------------------------------------------------
