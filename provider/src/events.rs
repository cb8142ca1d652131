//! Provider layer: completion channels and async events, i.e. the two file descriptors
//! applications `read`/`poll`.
//!
//! - Completion channel = a pipe (`pipe2(O_CLOEXEC)`, write end O_NONBLOCK) carrying one 8-byte
//!   record per fired notification, as the kernel's uverbs event file does. The record is the
//!   CQ's process-unique *serial* (not its address): `ibv_get_cq_event` maps it back through a
//!   registry of live CQs, so a record still in the pipe when its CQ is destroyed is skipped
//!   instead of dereferencing freed memory, and a reused address can never be mistaken for it.
//!   Honours O_NONBLOCK on the read end (EAGAIN), several CQs per channel, and one-shot arming
//!   (the engine disarms; [`notify_cq`] just writes).
//! - Async events = a per-context pipe with 16-byte records `{u64 element, u32 type, u32 0}`.
//!
//! - A record the socket owner's own progress step produces for the channel it waits on, with
//!   nothing older in the pipe, is handed to it directly ([`notify_cq`]): the owner reads it
//!   right after its step, so writing it into the pipe and reading it back only cost the wake-up
//!   two system calls. Anything else goes through the pipe, in order.
//!
//! The engine glue reports completions with [`notify_cq_id`] and async events with
//! [`post_engine_async`].

use crate::abi::*;
use crate::context::ctx_from;
use crate::export::{errno, non_null};
use crate::objects::{shell, UrxeChannel, UrxeCq, UrxeQp, UrxeSrq};
use libc::{c_int, c_uint, c_void};
use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use urxe::sys::cancellable_read;

thread_local! {
    /// While a socket owner runs its progress step: the channel (read fd) it waits on; -1
    /// otherwise (see `owner_wait`).
    static DIRECT_WANT: std::cell::Cell<c_int> = const { std::cell::Cell::new(-1) };
    /// A record handed to that owner: the channel and the CQ serial, read before the pipe.
    static DIRECT_REC: std::cell::Cell<Option<(c_int, u64)>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` as a socket owner's step on channel `fd` runs (records for it may be handed to
/// this thread): for tests of the hand-over without a device.
#[cfg(test)]
pub(crate) fn as_owner_step<R>(fd: c_int, f: impl FnOnce() -> R) -> R {
    DIRECT_WANT.set(fd);
    let r = f();
    DIRECT_WANT.set(-1);
    r
}

/// Whether a record for channel `fd` waits in this thread's hand.
fn direct_pending(fd: c_int) -> bool {
    matches!(DIRECT_REC.get(), Some((f, _)) if f == fd)
}

/// The record handed to this thread for channel `fd`, if any (taken).
fn take_direct(fd: c_int) -> Option<u64> {
    direct_pending(fd).then(|| DIRECT_REC.take()).flatten().map(|(_, serial)| serial)
}

/// Live CQs: by serial (the channel records' key) and by engine CQ id (the engine's
/// completion events' key), each to the address of the `UrxeCq`.
#[derive(Default)]
struct CqRegistry {
    by_serial: HashMap<u64, usize>,
    /// Engine id -> serial. An id the engine reuses after a destroy maps to the newest CQ
    /// registered with it; the older one's unregister leaves that entry alone.
    by_id: HashMap<urxe::engine::CqId, u64>,
}

static CQS: Mutex<Option<CqRegistry>> = Mutex::new(None);
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// A fresh CQ serial.
pub fn next_cq_serial() -> u64 {
    NEXT_SERIAL.fetch_add(1, Ordering::Relaxed)
}

/// Make a CQ findable by its serial and its engine id (on create).
///
/// # Safety
/// `cq` is a live CQ of ours whose `id` is set; it stays alive until [`unregister_cq`].
pub unsafe fn register_cq(cq: *mut UrxeCq, serial: u64) {
    // SAFETY: caller contract.
    let id = unsafe { (*cq).id };
    let mut g = CQS.lock().unwrap_or_else(|e| e.into_inner());
    let r = g.get_or_insert_with(CqRegistry::default);
    r.by_serial.insert(serial, cq as usize);
    r.by_id.insert(id, serial);
}

/// Forget a CQ (on destroy, before freeing it): `serial` and engine `id` as registered.
pub fn unregister_cq(serial: u64, id: urxe::engine::CqId) {
    if let Some(r) = CQS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        r.by_serial.remove(&serial);
        if r.by_id.get(&id) == Some(&serial) {
            r.by_id.remove(&id);
        }
    }
}

/// Resolve a channel record to its CQ and count the event as handed out, atomically with
/// respect to `ibv_destroy_cq` (which unregisters under the same lock, then waits for acks up to
/// the handed-out count): the CQ cannot be freed between lookup and count.
fn take_event(serial: u64) -> Option<(*mut UrxeCq, *mut c_void)> {
    let guard = CQS.lock().unwrap_or_else(|e| e.into_inner());
    let p = *guard.as_ref()?.by_serial.get(&serial)? as *mut UrxeCq;
    // SAFETY: registered CQs are alive while the lock is held.
    let c = unsafe { &*p };
    c.comp_events_read.fetch_add(1, Ordering::AcqRel);
    Some((p, c.ibv.cq_context))
}

/// Write one completion-channel record for `cq` if it has a channel. Called by the engine glue
/// when an armed CQ gets a completion. A full pipe (tens of thousands of unread events) drops
/// the record: the application is not reading and the CQ itself still holds the completions.
/// Returns the channel's fd (the one applications wait on) if the record went to it, in the
/// pipe or to its socket owner.
///
/// # Safety
/// `cq` is a live CQ of ours.
pub unsafe fn notify_cq(cq: *mut UrxeCq) -> Result<Option<c_int>, i32> {
    // SAFETY: caller contract.
    let cq = unsafe { &*cq };
    if cq.ibv.channel.is_null() {
        return Ok(None);
    }
    // SAFETY: a CQ's channel outlives it (destroy_comp_channel is EBUSY while CQs attach).
    let ch = unsafe { &*(cq.ibv.channel as *const UrxeChannel) };
    let fd = ch.ibv.fd;
    // The socket owner waiting on this channel, in its own step, and nothing older in the
    // pipe (records are only written under the device lock, which this step holds): it takes
    // this record next either way, so it gets it without the pipe.
    if DIRECT_WANT.get() == fd && DIRECT_REC.get().is_none() && ch.queued.load(Ordering::Acquire) == 0 {
        DIRECT_REC.set(Some((fd, cq.serial)));
        return Ok(Some(fd));
    }
    let rec = cq.serial.to_ne_bytes();
    ch.queued.fetch_add(1, Ordering::AcqRel);
    // SAFETY: writing 8 bytes from a local buffer to our own pipe fd. A raw write: this runs
    // inside ibv_poll_cq and the like, which must not be cancellation points.
    let n = unsafe { urxe::sys::write(ch.write_fd, rec.as_ptr() as *const c_void, rec.len()) };
    if n == rec.len() as isize {
        Ok(Some(fd))
    } else {
        let e = errno();
        uncount(ch);
        Err(e)
    }
}

/// One record fewer in `ch`'s pipe (never below zero).
fn uncount(ch: &UrxeChannel) {
    let _ = ch.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
}

/// [`notify_cq`] for the engine's `Event::Completion(cq_id)`: finds the live CQ with that
/// engine id and writes its record while holding the registry lock, so a concurrent
/// `ibv_destroy_cq` (which unregisters under the same lock before freeing) cannot free it
/// underneath. Returns `Ok(None)` if no such CQ is alive (destroyed meanwhile), else what
/// [`notify_cq`] returned.
pub fn notify_cq_id(id: urxe::engine::CqId) -> Result<Option<Option<c_int>>, i32> {
    let guard = CQS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = guard.as_ref() else {
        return Ok(None);
    };
    let Some(addr) = r.by_id.get(&id).and_then(|serial| r.by_serial.get(serial)) else {
        return Ok(None);
    };
    // SAFETY: registered CQs are alive while the lock is held.
    unsafe { notify_cq(*addr as *mut UrxeCq) }.map(Some)
}

/// Queue an async event on a context. `element` is the `ibv_cq*`/`ibv_qp*`/`ibv_srq*` pointer
/// or the port number, as `ibv_async_event.element` expects for `event_type`.
///
/// Kinds of objects an engine async event can name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AsyncKind {
    Qp,
    Cq,
    Srq,
}

/// Live objects async events can name: engine id -> shell address, and the set of live shell
/// addresses (checked before a record read from the async fd touches its element).
#[derive(Default)]
struct AsyncObjs {
    by_id: HashMap<(AsyncKind, u32), usize>,
    live: std::collections::HashSet<usize>,
}

static ASYNC_OBJS: Mutex<Option<AsyncObjs>> = Mutex::new(None);

/// Records a QP/CQ/SRQ shell (its `context` field must be set) so engine async events about
/// engine object `id` reach its context.
pub fn register_async(kind: AsyncKind, id: u32, shell: usize) {
    let mut g = ASYNC_OBJS.lock().unwrap_or_else(|e| e.into_inner());
    let o = g.get_or_insert_with(AsyncObjs::default);
    o.by_id.insert((kind, id), shell);
    o.live.insert(shell);
}

/// Forgets a shell before it is freed: no event is posted for it afterwards, and a record
/// already in the pipe is skipped by `ibv_get_async_event`.
pub fn unregister_async(kind: AsyncKind, id: u32, shell: usize) {
    if let Some(o) = ASYNC_OBJS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        if o.by_id.get(&(kind, id)) == Some(&shell) {
            o.by_id.remove(&(kind, id));
        }
        o.live.remove(&shell);
    }
}

/// Delivers an engine async event to the async fd of the context owning its object. Called by
/// the device's event sink.
pub fn post_engine_async(ev: urxe::engine::AsyncEvent) {
    use urxe::engine::AsyncElement as El;
    let (kind, id) = match ev.element {
        El::Qp(q) => (AsyncKind::Qp, q),
        El::Cq(c) => (AsyncKind::Cq, c),
        El::Srq(s) => (AsyncKind::Srq, s),
        // Port and device events go to every open context, as the kernel's do; their
        // element is the port number (0 for the device).
        El::Port(p) => return post_to_every_context(u64::from(p), ev.kind as u32),
        El::Device => return post_to_every_context(0, ev.kind as u32),
    };
    let g = ASYNC_OBJS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(&shell) = g.as_ref().and_then(|o| o.by_id.get(&(kind, id))) else { return };
    // SAFETY: registered shells are alive while the lock is held; `context` is their first
    // field for CQ and SRQ (`ibv_cq`, `ibv_srq`) and `qp_base.context` (offset 0) for QPs.
    let ctx = unsafe { *(shell as *const *mut ibv_context) };
    // SAFETY: the shell's context outlives it (contexts close after their objects).
    let _ = unsafe { post_async_event(ctx, shell as u64, ev.kind as u32) };
}

/// The async-event pipes (write ends) of the open contexts, for port and device events.
static CONTEXT_PIPES: Mutex<Vec<c_int>> = Mutex::new(Vec::new());

/// A context was opened: port and device events reach it through this pipe.
pub fn register_context_pipe(fd: c_int) {
    CONTEXT_PIPES.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
}

/// A context is closing: its pipe is about to be closed.
pub fn unregister_context_pipe(fd: c_int) {
    CONTEXT_PIPES.lock().unwrap_or_else(|e| e.into_inner()).retain(|&f| f != fd);
}

fn post_to_every_context(element: u64, event_type: u32) {
    // Held while writing, so no pipe is closed under the write (close unregisters first).
    let pipes = CONTEXT_PIPES.lock().unwrap_or_else(|e| e.into_inner());
    for &fd in pipes.iter() {
        let _ = write_record(fd, element, event_type);
    }
}

/// Writes one 16-byte async record to a context's pipe.
fn write_record(fd: c_int, element: u64, event_type: u32) -> Result<(), i32> {
    let mut rec = [0u8; 16];
    rec[..8].copy_from_slice(&element.to_ne_bytes());
    rec[8..12].copy_from_slice(&event_type.to_ne_bytes());
    // SAFETY: writing 16 bytes from a local buffer to a pipe fd of ours (atomic: < PIPE_BUF).
    // A raw write, no cancellation point (it may run inside a verb).
    let n = unsafe { urxe::sys::write(fd, rec.as_ptr() as *const c_void, rec.len()) };
    if n == rec.len() as isize {
        Ok(())
    } else {
        Err(errno())
    }
}

/// # Safety
/// `ctx` is a live context of ours; `element` stays valid until the event is acked (destroy
/// waits for that).
pub unsafe fn post_async_event(ctx: *mut ibv_context, element: u64, event_type: u32) -> Result<(), i32> {
    // SAFETY: caller contract.
    let u = unsafe { ctx_from(ctx) }?;
    write_record(u.async_write, element, event_type)
}

/// Reads exactly one record; -1/errno semantics of read(2) (EAGAIN when O_NONBLOCK and empty).
///
/// A cancellation point, as rdma-core's read of the channel is: it holds nothing to drop, so
/// a thread cancelled while it waits here unwinds through it (see [`blocking_verb`]). A signal
/// handled meanwhile acts as on rdma-core's read of the kernel's event file: the kernel
/// restarts the read if the handler was installed with SA_RESTART, else the verb fails with
/// EINTR (a pipe read and the uverbs event file both wait interruptibly and restart alike).
fn wait_record<const N: usize>(fd: c_int) -> Result<[u8; N], i32> {
    let mut buf = [0u8; N];
    // SAFETY: reading into a local buffer of N bytes.
    let n = unsafe { cancellable_read(fd, buf.as_mut_ptr() as *mut c_void, N) };
    if n == N as isize {
        return Ok(buf);
    }
    if n < 0 {
        return Err(errno());
    }
    // Records are written atomically; a short read means the pipe was closed.
    Err(libc::EIO)
}

/// The shape of the two blocking verbs, `ibv_get_cq_event` and `ibv_get_async_event`: `start`
/// (argument checks; returns the fd to wait on), then as often as `finish` asks (`Ok(None)`:
/// a stale record, wait again) one blocking [`wait_record`] and `finish` on the record.
///
/// `start` and `finish` run under the panic guard, with cancellation off, as every exported
/// verb does (`CancelOff`); the wait does neither. A thread with deferred cancellation is
/// cancelled inside the wait (rdma-core's verbs read the fd, a cancellation point), and the
/// panic guard (`catch_unwind`) cannot let that unwind pass: the process would abort ("FATAL:
/// exception not rethrown"). Between the two, nothing held by these frames has a destructor,
/// and the exported functions are `extern "C-unwind"`: the unwind runs through them to the
/// application's own cleanup handlers.
fn blocking_verb<const N: usize>(
    name: &str,
    start: impl FnOnce() -> Result<c_int, i32>,
    mut before_wait: impl FnMut(c_int) -> Result<(), i32>,
    mut read_one: impl FnMut(c_int) -> Result<[u8; N], i32>,
    mut after_wait: impl FnMut(),
    mut finish: impl FnMut([u8; N]) -> Result<Option<()>, i32>,
) -> c_int {
    use urxe::sys::CancelOff;
    let fd = {
        let _off = CancelOff::begin();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(start)) {
            Ok(Ok(fd)) => fd,
            r => return crate::export::finish(name, r.map(|r| r.map(|_| 0)), -1),
        }
    };
    loop {
        // The caller's cancellation setting here (no `CancelOff` lives across the wait).
        if let Err(e) = before_wait(fd) {
            return crate::export::finish(name, Ok(Err(e)), -1);
        }
        let rec = read_one(fd);
        let _off = CancelOff::begin();
        after_wait();
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => return crate::export::finish(name, Ok(Err(e)), -1),
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| finish(rec))) {
            Ok(Ok(None)) => continue,
            r => return crate::export::finish(name, r.map(|r| r.map(|_| 0)), -1),
        }
    }
}

/// `ibv_create_comp_channel(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    // SAFETY: caller passes a context of ours.
    let u = unsafe { ctx_from(context) }?;
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two new fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(errno());
    }
    // SAFETY: fcntl on our own fd.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    let ch = Box::new(UrxeChannel {
        ibv: ibv_comp_channel { context: u.ibv(), fd: fds[0], refcnt: 0 },
        write_fd: fds[1],
        queued: AtomicU64::new(0),
    });
    Ok(Box::into_raw(ch) as *mut ibv_comp_channel)
}

/// `ibv_destroy_comp_channel(3)`: EBUSY while CQs are attached.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: caller passes a channel of ours.
    let ch: &UrxeChannel = unsafe { shell(channel) }?;
    // SAFETY: the channel's context is live (contexts outlive their channels).
    let u = unsafe { ctx_from(ch.ibv.context) }?;
    let m = ptr::addr_of!(u.vctx.context.mutex) as *mut libc::pthread_mutex_t;
    // SAFETY: the context mutex is initialised; refcnt is only changed under it.
    unsafe { libc::pthread_mutex_lock(m) };
    let busy = ch.ibv.refcnt > 0;
    // SAFETY: locked above.
    unsafe { libc::pthread_mutex_unlock(m) };
    if busy {
        return Err(libc::EBUSY);
    }
    // SAFETY: created by Box::into_raw in ibv_create_comp_channel; freed once here.
    let b = unsafe { Box::from_raw(channel as *mut UrxeChannel) };
    // SAFETY: our fds.
    unsafe {
        libc::close(b.ibv.fd);
        libc::close(b.write_fd);
    }
    Ok(())
}

/// Attach/detach a CQ to its channel (refcnt under the context mutex).
///
/// # Safety
/// `channel` is NULL or a live channel of ours.
pub unsafe fn channel_ref(channel: *mut ibv_comp_channel, delta: c_int) -> Result<(), i32> {
    if channel.is_null() {
        return Ok(());
    }
    // SAFETY: caller contract.
    let ch = unsafe { &mut *channel };
    // SAFETY: the channel's context is live.
    let u = unsafe { ctx_from(ch.context) }?;
    let m = ptr::addr_of!(u.vctx.context.mutex) as *mut libc::pthread_mutex_t;
    // SAFETY: initialised context mutex.
    unsafe { libc::pthread_mutex_lock(m) };
    ch.refcnt += delta;
    // SAFETY: locked above.
    unsafe { libc::pthread_mutex_unlock(m) };
    Ok(())
}

/// `ibv_get_cq_event(3)`: 0, or -1 with errno (EAGAIN on an empty O_NONBLOCK channel). A
/// cancellation point while it waits (see [`blocking_verb`]).
///
/// # Safety
/// Called from C: pointer arguments must satisfy the libibverbs contract of this verb.
#[no_mangle]
pub unsafe extern "C-unwind" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let start = || {
        let channel = non_null(channel)?;
        non_null(cq)?;
        non_null(cq_context)?;
        // SAFETY: caller passes a live channel.
        Ok(unsafe { (*channel).fd })
    };
    // A thread left to a plain read (another owns the socket) is counted while it reads.
    let reading = std::cell::Cell::new(None);
    // SAFETY: checked non-null in `start`, which runs first; a live channel's context is a
    // live context of ours.
    let before_wait = |fd| match unsafe { crate::context::dev_of((*channel).context) } {
        Ok(dev) => owner_wait(dev, fd, &reading),
        Err(_) => Ok(()),
    };
    let after_wait = || {
        if let Some(t) = reading.take() {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.channel_reader(false)));
        }
    };
    // The record handed to this thread by its own step as the socket owner, else one from the
    // pipe (then uncounted).
    let read_one = |fd| {
        if let Some(serial) = take_direct(fd) {
            return Ok(serial.to_ne_bytes());
        }
        let r = wait_record::<8>(fd);
        if r.is_ok() {
            // SAFETY: checked non-null in `start`, which runs first; a channel of ours.
            uncount(unsafe { &*(channel as *const UrxeChannel) });
        }
        r
    };
    let finish = |rec: [u8; 8]| {
        // A record for a CQ destroyed since it was written: skip it.
        let Some((p, user)) = take_event(u64::from_ne_bytes(rec)) else { return Ok(None) };
        // SAFETY: caller passes writable out-pointers (checked non-null in `start`).
        unsafe {
            *cq = p as *mut ibv_cq;
            *cq_context = user;
        }
        Ok(Some(()))
    };
    blocking_verb("ibv_get_cq_event", start, before_wait, read_one, after_wait, finish)
}

/// Before `ibv_get_cq_event` sleeps on a blocking channel: the thread waits until the channel
/// is readable as the receive socket's owner if it can (`urxe::runtime` `owner`), so the
/// packet that completes its work wakes it and nobody else; returns when the channel is
/// readable (the record read follows) or when another thread owns the socket (then the read
/// sleeps as before, and that thread's steps write the records). Runs the device's steps with
/// cancellation off and under the panic guard; the poll between them is a cancellation point
/// with nothing to drop in these frames (see [`blocking_verb`]): a thread cancelled there
/// leaves its claim on the socket, which the next thread to look clears (the owner is gone).
///
/// A signal during the poll: EINTR as the read would have given it, i.e. unless every
/// installed handler has SA_RESTART (poll(2) is never restarted; the read is, under
/// SA_RESTART); otherwise the verb goes on to the plain read.
fn owner_wait(
    dev: &'static crate::context::UrxeDevice,
    fd: c_int,
    reading: &std::cell::Cell<Option<&'static urxe::runtime::Device>>,
) -> Result<(), i32> {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use urxe::sys::{cancellable_poll, every_handler_restarts, CancelOff};
    let Some(Ok(t)) = dev.transport.get() else { return Ok(()) };
    let guarded = |f: &dyn Fn() -> bool| {
        let _off = CancelOff::begin();
        catch_unwind(AssertUnwindSafe(f)).unwrap_or(false)
    };
    // SAFETY: fcntl F_GETFL on the channel's fd only reads its flags.
    let blocking = unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK == 0;
    if !blocking || !guarded(&|| t.channel_wait_begin()) {
        // The thread may sleep in the read: timers must not wait for it, and the progress
        // thread must take the packets for it.
        let _ = guarded(&|| {
            if blocking {
                t.channel_reader(true);
            }
            t.app_waits();
            true
        });
        if blocking {
            reading.set(Some(t));
        }
        return Ok(());
    }
    loop {
        let step = {
            let _off = CancelOff::begin();
            DIRECT_WANT.set(fd);
            let r = catch_unwind(AssertUnwindSafe(|| t.channel_step(fd)));
            DIRECT_WANT.set(-1);
            r
        };
        // A step that put its completions' record on the channel, or handed one to us (it or
        // the work it left to us): read it now (a poll would return at once).
        let Some((rx, ms, _)) = step.ok().filter(|&(_, _, reached)| !reached && !direct_pending(fd)) else {
            let _ = guarded(&|| {
                t.channel_wait_end();
                true
            });
            return Ok(());
        };
        let mut fds = [
            libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: rx, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds that outlive the call. A cancellation point: nothing in
        // this frame or the callers' up to C has a destructor at this point.
        let n = unsafe { cancellable_poll(fds.as_mut_ptr(), 2, ms) };
        let e = if n < 0 { errno() } else { 0 };
        if n < 0 || fds[0].revents != 0 {
            let _ = guarded(&|| {
                t.channel_wait_end();
                true
            });
            if e == libc::EINTR && !every_handler_restarts() {
                return Err(libc::EINTR);
            }
            return Ok(());
        }
    }
}

/// `ibv_ack_cq_events(3)`.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    if cq.is_null() {
        return;
    }
    // SAFETY: caller passes a live CQ; the counter is only written under its mutex.
    unsafe {
        let m = ptr::addr_of_mut!((*cq).mutex);
        libc::pthread_mutex_lock(m);
        (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents);
        libc::pthread_cond_signal(ptr::addr_of_mut!((*cq).cond));
        libc::pthread_mutex_unlock(m);
    }
}

fn is_cq_event(t: u32) -> bool {
    t == IBV_EVENT_CQ_ERR as u32
}
fn is_qp_event(t: u32) -> bool {
    matches!(
        t as u64,
        IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED
    )
}
fn is_srq_event(t: u32) -> bool {
    matches!(t as u64, IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED)
}

/// `ibv_get_async_event(3)`: 0, or -1 with errno (EAGAIN when O_NONBLOCK and empty). A
/// cancellation point while it waits (see [`blocking_verb`]).
///
/// # Safety
/// Called from C: pointer arguments must satisfy the libibverbs contract of this verb.
#[no_mangle]
pub unsafe extern "C-unwind" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    let start = || {
        // SAFETY: caller passes a context of ours.
        let u = unsafe { ctx_from(context) }?;
        non_null(event)?;
        Ok(u.vctx.context.async_fd)
    };
    // A record whose object was destroyed since it was written is stale: skip it and read the
    // next (bounded by what the pipe holds; EAGAIN/blocking as read(2) decides).
    let finish = |rec: [u8; 16]| {
        let element = u64::from_ne_bytes(rec[..8].try_into().unwrap_or_default());
        let t = u32::from_ne_bytes(rec[8..12].try_into().unwrap_or_default());
        let mut ev = ibv_async_event::zeroed();
        ev.event_type = t;
        if is_cq_event(t) || is_qp_event(t) || is_srq_event(t) {
            let g = ASYNC_OBJS.lock().unwrap_or_else(|e| e.into_inner());
            if !g.as_ref().is_some_and(|o| o.live.contains(&(element as usize))) {
                return Ok(None);
            }
            ev.element.cq = element as usize as *mut ibv_cq;
            // SAFETY: the element is registered (alive) while we hold the lock, and its
            // destroy waits for the acks counted here.
            unsafe {
                if is_cq_event(t) {
                    (*(element as usize as *mut UrxeCq)).async_events_read.fetch_add(1, Ordering::AcqRel);
                } else if is_qp_event(t) {
                    (*(element as usize as *mut UrxeQp)).async_events_read.fetch_add(1, Ordering::AcqRel);
                } else {
                    (*(element as usize as *mut UrxeSrq)).async_events_read.fetch_add(1, Ordering::AcqRel);
                }
            }
        } else {
            ev.element.port_num = element as c_int;
        }
        // SAFETY: caller passes a writable event (checked non-null in `start`).
        unsafe { event.write(ev) };
        Ok(Some(()))
    };
    blocking_verb("ibv_get_async_event", start, |_| Ok(()), wait_record::<16>, || {}, finish)
}

/// `ibv_ack_async_event(3)`: counts the ack on the object so its destroy can proceed.
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: caller passes an event filled by ibv_get_async_event; its element is live.
    unsafe {
        let t = (*event).event_type;
        let (m, c, counter): (*mut libc::pthread_mutex_t, *mut libc::pthread_cond_t, *mut u32) = if is_cq_event(t) {
            let cq = (*event).element.cq;
            (
                ptr::addr_of_mut!((*cq).mutex),
                ptr::addr_of_mut!((*cq).cond),
                ptr::addr_of_mut!((*cq).async_events_completed),
            )
        } else if is_qp_event(t) {
            let qp = (*event).element.qp;
            (ptr::addr_of_mut!((*qp).mutex), ptr::addr_of_mut!((*qp).cond), ptr::addr_of_mut!((*qp).events_completed))
        } else if is_srq_event(t) {
            let srq = (*event).element.srq;
            (
                ptr::addr_of_mut!((*srq).mutex),
                ptr::addr_of_mut!((*srq).cond),
                ptr::addr_of_mut!((*srq).events_completed),
            )
        } else {
            return;
        };
        if m.is_null() || c.is_null() {
            return;
        }
        libc::pthread_mutex_lock(m);
        *counter = (*counter).wrapping_add(1);
        libc::pthread_cond_signal(c);
        libc::pthread_mutex_unlock(m);
    }
}

/// The GSI eventfd (`urxe_gsi_fd`), -1 until it is made: the engine's event sink rings it when
/// MADs for QP1 are queued. Kept here, below both the glue (which rings it) and the GSI API
/// (which makes it).
static GSI_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

pub fn set_gsi_fd(fd: libc::c_int) {
    GSI_FD.store(fd, std::sync::atomic::Ordering::Release);
}

/// Called by the device's event sink (under the device lock): MADs are queued.
pub fn wake_gsi() {
    let fd = GSI_FD.load(std::sync::atomic::Ordering::Acquire);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a local u64 to our own eventfd. A raw write, no
        // cancellation point (it runs inside a verb).
        unsafe { urxe::sys::write(fd, &one as *const u64 as *const libc::c_void, 8) };
    }
}
