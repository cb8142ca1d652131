//! The event channels and their events: `rdma_create_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`, and the waits the synchronous calls share.

use crate::abi::*;
use crate::core::*;
pub use crate::qp::*;
use libc::{c_char, c_int};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::Arc;
use urxe::sys::cancellable_poll;

/// `IBV_EVENT_COMM_EST`.
pub(crate) const IBV_EVENT_COMM_EST: c_int = 4;

pub(crate) fn key<T>(p: *mut T) -> Result<usize, i32> {
    if p.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(p as usize)
    }
}

// ---- event channels and events ------------------------------------------------------------

/// A channel whose fd is readable exactly while events are queued.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    lock().new_channel()
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) -> c_int {
    let ch = key(channel)?;
    let mut lib = lock();
    if !lib.has_channel(ch) {
        return Err(libc::EINVAL);
    }
    // IDs still on it lose their channel: their later events are dropped.
    for st in lib.ids.values_mut().filter(|s| s.channel == ch) {
        st.channel = 0;
    }
    lib.free_channel(ch);
    Ok(0)
}

/// Takes the next event of a channel for a synchronous call (`sync_wait`): blocks unless its fd
/// is O_NONBLOCK (then EAGAIN).
///
/// A channel destroyed while a thread waits here is what the kernel's does to a thread blocked
/// in librdmacm's read of the ucma file: that thread keeps waiting (the file stays open under
/// it) and no event ever comes; it does not return an error. rping relies on it: its CM thread
/// waits for the next event while `main` destroys the ID and the channel and returns, and an
/// error there would make the thread `exit(-1)` first. So the waiter keeps blocking on the
/// channel's (still open, never again written) eventfd, taking no CPU; a non-blocking channel
/// gives EAGAIN.
pub(crate) fn get_event(ch: usize) -> Result<*mut EventBox, i32> {
    let fd = lock().channel(ch).map(|c| Arc::clone(&c.fd)).ok_or(libc::EINVAL)?;
    loop {
        if let Some(b) = take_ready(ch, Arc::as_ptr(&fd))? {
            return Ok(b);
        }
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the call. The synchronous calls that wait here run
        // with cancellation off (`cm_export!`): no cancellation point.
        unsafe { libc::poll(&mut p, 1, -1) };
    }
}

pub(crate) fn ack(ev: usize) -> Result<(), i32> {
    if !lock().take_back(ev) {
        return Err(libc::EINVAL);
    }
    notify_acked();
    // SAFETY: `ev` came from Box::into_raw in get_event and was outstanding until now.
    drop(unsafe { Box::from_raw(ev as *mut EventBox) });
    Ok(())
}

/// One step of taking a channel's event after a wait: the next event of channel `ch` whose
/// eventfd is `fd` (`Ok(None)`: none yet, wait again); a non-blocking channel with nothing
/// queued gives EAGAIN. The event and its eventfd count are taken together under the lock
/// ([`Channel::pop`]), so the fd is readable exactly while an event is queued. A channel
/// destroyed (or its key reused) since the wait began gives `Ok(None)` for ever: the waiter
/// keeps waiting on the still-open eventfd, drained and never again written (see
/// [`get_event`]). What taking the event does to the ID's QP happens here, in the caller's
/// thread ([`Lib::on_retrieved`]).
pub(crate) fn take_ready(ch: usize, fd: *const std::os::fd::OwnedFd) -> Result<Option<*mut EventBox>, i32> {
    // SAFETY: `fd` is a reference the caller holds across its wait.
    let raw = unsafe { (*fd).as_raw_fd() };
    let mut lib = lock();
    // The same key may name a newer channel: only this channel's own queue counts.
    let same = |c: &&mut Channel| std::ptr::eq(Arc::as_ptr(&c.fd), fd);
    let Some(mut b) = lib.channel_mut(ch).filter(same).and_then(|c| c.pop()) else {
        drop(lib);
        return if nonblocking(raw) { Err(libc::EAGAIN) } else { Ok(None) };
    };
    crate::mcast::on_retrieved(&mut lib, &mut b);
    lib.on_retrieved(&mut b);
    if b.ev.event == event::CONNECT_REQUEST {
        if let Some(k) = lib.ids.key_of(b.ev.id) {
            lib.request_taken(k);
        }
    }
    let p = Box::into_raw(b);
    lib.hand_out(p as usize);
    Ok(Some(p))
}

/// The shape of the calls that wait for a channel's next event (`rdma_get_cm_event`, and
/// `rdma_get_request` on a synchronous listener): `start` checks the arguments and names the
/// channel (and what `finish` needs, `Copy`: nothing to drop), the call waits for the event,
/// and `finish` takes it.
///
/// A cancellation point while it waits, as librdmacm's read of its fd is. `start`, the taking
/// of the event and `finish` run under the panic guard with cancellation off (as `cm_export!`
/// calls do); the wait, a `poll` declared `C-unwind`, runs between them in frames that hold
/// nothing to drop (the channel's eventfd is held by a raw `Arc` reference), so a thread
/// cancelled there unwinds through them to its own cleanup handlers. Such a thread leaves its
/// reference behind: a channel destroyed later keeps its eventfd open.
pub(crate) fn event_call<T: Copy>(
    name: &str,
    start: impl FnOnce() -> Result<(usize, T), i32>,
    finish: impl FnOnce(*mut EventBox, T) -> Result<c_int, i32>,
) -> c_int {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use urxe::sys::CancelOff;
    let (ch, fd, extra) = {
        let _off = CancelOff::begin();
        let r = catch_unwind(AssertUnwindSafe(|| -> Result<_, i32> {
            let (ch, extra) = start()?;
            let fd = lock().channel(ch).map(|c| Arc::clone(&c.fd)).ok_or(libc::EINVAL)?;
            Ok((ch, Arc::into_raw(fd), extra))
        }));
        match r {
            Ok(Ok(v)) => v,
            r => return crate::export::finish(name, r.map(|r| r.map(|_| 0)), -1),
        }
    };
    loop {
        // The wait, with the caller's cancellation setting: until the eventfd is readable
        // (at once on a non-blocking channel, which `take_ready` answers with EAGAIN).
        // SAFETY: `fd` is the reference taken above, released only below.
        let raw = unsafe { (*fd).as_raw_fd() };
        if !nonblocking(raw) {
            let mut p = libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd for the call.
            unsafe { cancellable_poll(&mut p, 1, -1) };
        }
        let _off = CancelOff::begin();
        let taken = match catch_unwind(AssertUnwindSafe(|| take_ready(ch, fd))) {
            Ok(Ok(None)) => continue,
            Ok(Ok(Some(b))) => Ok(Ok(b)),
            Ok(Err(e)) => Ok(Err(e)),
            Err(p) => Err(p),
        };
        // SAFETY: releases the reference taken above, once.
        drop(unsafe { Arc::from_raw(fd) });
        let r = match taken {
            Ok(Ok(b)) => catch_unwind(AssertUnwindSafe(|| finish(b, extra))),
            Ok(Err(e)) => Ok(Err(e)),
            Err(p) => Err(p),
        };
        return crate::export::finish(name, r, -1);
    }
}

/// `rdma_get_cm_event(3)`: 0, or -1 with errno (EAGAIN on an empty non-blocking channel). A
/// cancellation point while it waits (see [`event_call`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    let start = || {
        let ch = key(channel)?;
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        Ok((ch, ()))
    };
    let finish = |b: *mut EventBox, ()| {
        // SAFETY: `event` is the caller's out-parameter (checked non-null in `start`); `ev` is
        // the box's first field.
        unsafe { *event = b as *mut rdma_cm_event };
        Ok(0)
    };
    event_call("rdma_get_cm_event", start, finish)
}

/// Whether `fd` is in non-blocking mode.
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no pointer.
    unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK != 0 }
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ack(key(event)?)?;
    Ok(0)
}

/// `rdma_event_str`: the name of an event type.
///
/// # Safety
/// None: any value is accepted.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 16] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(event).ok().and_then(|i| NAMES.get(i)).map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
}

/// A synchronous ID's call completes with the next event on its private channel: `want`, or
/// the errno the event stands for. The event stays in `id->event` until the next one (or
/// `rdma_destroy_id`), as librdmacm keeps it.
pub(crate) fn sync_wait(id: *mut rdma_cm_id, want: c_int) -> Result<(), i32> {
    let ch = {
        let mut lib = lock();
        let st = lib.id(id)?;
        if !st.sync {
            return Ok(());
        }
        st.channel
    };
    // SAFETY: `id` is a live ID (checked above); only its owner thread waits on it.
    let prev = unsafe { std::mem::replace(&mut (*id).event, ptr::null_mut()) };
    if !prev.is_null() {
        let _ = ack(prev as usize);
    }
    let b = get_event(ch)?;
    // SAFETY: `b` is an outstanding event box.
    let (ev, status) = unsafe { ((*b).ev.event, (*b).ev.status) };
    // SAFETY: as above.
    unsafe { (*id).event = b as *mut rdma_cm_event };
    if ev == want || (want == event::ESTABLISHED && ev == event::CONNECT_RESPONSE) {
        return Ok(());
    }
    Err(match ev {
        event::REJECTED => libc::ECONNREFUSED,
        _ if status < 0 => -status,
        _ => libc::EINVAL,
    })
}
