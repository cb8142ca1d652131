//! System calls a verb makes, issued raw (`syscall(2)`) rather than through glibc's wrappers.
//!
//! glibc's `recvmsg`, `sendmsg`, `write` and the like are POSIX cancellation points: a thread
//! with deferred cancellation pending is unwound from inside them. A verb of a hardware
//! provider (`ibv_poll_cq`, `ibv_post_send`, `ibv_req_notify_cq`) makes no system call and so
//! is never one; ours receive and send on sockets and ring the progress thread from inside the
//! verb. Unwound there, the thread would leave the device lock locked, and the unwind would
//! meet the C boundary, which cannot pass it (the process aborts: "FATAL: exception not
//! rethrown"). Raw system calls are never cancellation points, and they skip the two atomic
//! updates of the thread's cancellation state that each wrapped call makes.
//!
//! Each function has the contract of its system call's man page; the return value is the
//! call's, with -1 and `errno` set on failure, as glibc's `syscall()` returns it.

use std::os::fd::RawFd;

use libc::{c_int, c_long, c_uint, c_void};

/// recvmsg(2).
///
/// # Safety
/// `msg` points to a `msghdr` whose name, iovec and control pointers are valid for writes of
/// their stated lengths for the duration of the call.
#[inline]
pub unsafe fn recvmsg(fd: RawFd, msg: *mut libc::msghdr, flags: c_int) -> isize {
    // SAFETY: caller contract; every argument is widened to the register width the kernel
    // reads.
    unsafe { libc::syscall(libc::SYS_recvmsg, fd as c_long, msg, flags as c_long) as isize }
}

/// recvmmsg(2) without a timeout.
///
/// # Safety
/// `msgs` points to `vlen` `mmsghdr`s, each valid as for [`recvmsg`].
#[inline]
pub unsafe fn recvmmsg(fd: RawFd, msgs: *mut libc::mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    // SAFETY: caller contract; a null timeout is allowed.
    unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            fd as c_long,
            msgs,
            vlen as c_long,
            flags as c_long,
            std::ptr::null_mut::<libc::timespec>(),
        ) as c_int
    }
}

/// sendmsg(2).
///
/// # Safety
/// `msg` points to a `msghdr` whose name, iovec and control pointers are valid for reads of
/// their stated lengths for the duration of the call.
#[inline]
pub unsafe fn sendmsg(fd: RawFd, msg: *const libc::msghdr, flags: c_int) -> isize {
    // SAFETY: caller contract.
    unsafe { libc::syscall(libc::SYS_sendmsg, fd as c_long, msg, flags as c_long) as isize }
}

/// sendmmsg(2).
///
/// # Safety
/// `msgs` points to `vlen` `mmsghdr`s, each valid as for [`sendmsg`] (the kernel writes their
/// `msg_len`).
#[inline]
pub unsafe fn sendmmsg(fd: RawFd, msgs: *mut libc::mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    // SAFETY: caller contract.
    unsafe { libc::syscall(libc::SYS_sendmmsg, fd as c_long, msgs, vlen as c_long, flags as c_long) as c_int }
}

/// write(2).
///
/// # Safety
/// `buf` is valid for reads of `len` bytes.
#[inline]
pub unsafe fn write(fd: RawFd, buf: *const c_void, len: usize) -> isize {
    // SAFETY: caller contract.
    unsafe { libc::syscall(libc::SYS_write, fd as c_long, buf, len) as isize }
}

/// read(2).
///
/// # Safety
/// `buf` is valid for writes of `len` bytes.
#[inline]
pub unsafe fn read(fd: RawFd, buf: *mut c_void, len: usize) -> isize {
    // SAFETY: caller contract.
    unsafe { libc::syscall(libc::SYS_read, fd as c_long, buf, len) as isize }
}

/// Sleeps for at least `ns` nanoseconds (the thread's timer slack may add to it) without
/// being a cancellation point: the raw `nanosleep` system call, not glibc's wrapper (a verb
/// such as `ibv_poll_cq` must not be one). A signal ends it early, which is fine for a nap.
pub fn nap(ns: u64) {
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as c_long };
    // SAFETY: `ts` is a valid timespec on our stack; a null remaining-time pointer is allowed.
    unsafe { libc::syscall(libc::SYS_nanosleep, &ts as *const libc::timespec, std::ptr::null_mut::<libc::timespec>()) };
}

/// Writes all of `bytes` to `fd` (a short write continues, EINTR retries).
pub fn write_all(fd: RawFd, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice of `bytes.len()` bytes.
        let n = unsafe { write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// glibc's poll(2), a cancellation point, for the waits that are meant to be one: a thread
/// cancelled while it waits here is unwound out of it by glibc. The caller's frames up to C
/// must be `C-unwind` and hold nothing to drop (no `catch_unwind`, no live destructor).
///
/// Called through an `extern "C-unwind"` function pointer the optimizer cannot see through,
/// not through a `C-unwind` declaration of `poll` of its own: the libc crate declares `poll`
/// as unable to unwind, the code generator may merge the two declarations, and a call marked
/// unable to unwind gets no entry in the caller's unwind table, so the unwinder ends the
/// process there (as it did in rsockets' `raccept`).
///
/// # Safety
/// poll(2)'s contract: `fds` points to `nfds` valid pollfds.
#[inline]
pub unsafe fn cancellable_poll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    type Poll = unsafe extern "C-unwind" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
    type PollC = unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int;
    let c: PollC = libc::poll;
    // SAFETY: the same function with the same calling convention; "C-unwind" only says that
    // an unwind may leave it, which glibc's cancellation does.
    let f: Poll = std::hint::black_box(unsafe { std::mem::transmute::<PollC, Poll>(c) });
    // SAFETY: the caller's pollfds.
    unsafe { f(fds, nfds, timeout) }
}

/// glibc's read(2), a cancellation point, for the waits that are meant to be one; see
/// [`cancellable_poll`] for the caller's frames and for why it is called through a pointer.
///
/// # Safety
/// read(2)'s contract: `buf` is valid for writes of `count` bytes.
#[inline]
pub unsafe fn cancellable_read(fd: RawFd, buf: *mut c_void, count: usize) -> isize {
    type Read = unsafe extern "C-unwind" fn(c_int, *mut c_void, usize) -> isize;
    type ReadC = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
    let c: ReadC = libc::read;
    // SAFETY: as in `cancellable_poll`.
    let f: Read = std::hint::black_box(unsafe { std::mem::transmute::<ReadC, Read>(c) });
    // SAFETY: the caller's buffer.
    unsafe { f(fd, buf, count) }
}

thread_local! {
    /// The thread's kernel id once read (0: not yet); see [`thread_id`].
    static TID: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}
/// The process id once read (0: not yet); see [`thread_alive`].
static PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static ATFORK: std::sync::Once = std::sync::Once::new();

/// In the child of a fork(2): the one thread left is a copy of the forking one, with its
/// thread-locals, so both cached ids are the parent's; read them again.
extern "C" fn forgot_ids_in_child() {
    PID.store(0, std::sync::atomic::Ordering::Relaxed);
    TID.set(0);
}

/// The ids are cached (the event path asks for them several times per wake-up, a system
/// call each: gettid, and getpid, which glibc no longer caches); a fork clears the cache.
fn cache_ids_across_fork() {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic and a const-initialised
        // thread-local (no allocation, no lock: async-signal-safe, as a fork child needs).
        unsafe { libc::pthread_atfork(None, None, Some(forgot_ids_in_child)) };
    });
}

/// The calling thread's kernel id (gettid(2), read once per thread).
pub fn thread_id() -> i32 {
    let t = TID.get();
    if t != 0 {
        return t;
    }
    cache_ids_across_fork();
    // SAFETY: gettid takes no argument and cannot fail.
    let t = unsafe { libc::gettid() };
    TID.set(t);
    t
}

/// Whether thread `tid` of this process still exists (tgkill(2) with signal 0 sends nothing).
/// A thread that ended, cancelled or not, is gone at once: the kernel reaps a thread of a
/// multi-threaded process when it exits.
pub fn thread_alive(tid: i32) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let mut pid = PID.load(Relaxed);
    if pid == 0 {
        cache_ids_across_fork();
        // SAFETY: getpid takes no argument and cannot fail.
        pid = unsafe { libc::getpid() };
        PID.store(pid, Relaxed);
    }
    // SAFETY: tgkill with signal 0 only checks that the thread exists; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether every signal handler the process installed restarts an interrupted system call
/// (`SA_RESTART`), glibc's own (cancellation, set*id: 32 and 33) aside. A wait in poll(2) ends
/// with EINTR whatever the handler's flags, where a read(2) would have been restarted: a
/// verb that waits in poll on behalf of a read uses this to answer as the read would have.
/// It cannot tell which signal came: with handlers of both kinds installed it says no. The
/// signals a fault raises in the faulting thread itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
/// SIGTRAP, SIGSYS; a sanitizer's handlers) cannot end a wait and do not count.
pub fn every_handler_restarts() -> bool {
    const SYNCHRONOUS: [c_int; 6] =
        [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS];
    let asynchronous = |s: &c_int| (*s < 32 || *s >= libc::SIGRTMIN()) && !SYNCHRONOUS.contains(s);
    (1..=libc::SIGRTMAX()).filter(asynchronous).all(|s| {
        // SAFETY: a zeroed sigaction is a valid out-buffer; a null new action only reads.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `old` outlives the call; signal numbers outside the valid range fail (EINVAL).
        if unsafe { libc::sigaction(s, std::ptr::null(), &mut old) } != 0 {
            return true;
        }
        old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN || old.sa_flags & libc::SA_RESTART != 0
    })
}

// glibc's <pthread.h>; the libc crate leaves thread cancellation out.
extern "C" {
    fn pthread_setcancelstate(state: c_int, oldstate: *mut c_int) -> c_int;
}
/// `PTHREAD_CANCEL_ENABLE` of <pthread.h>.
pub const PTHREAD_CANCEL_ENABLE: c_int = 0;
/// `PTHREAD_CANCEL_DISABLE` of <pthread.h>.
pub const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Turns the calling thread's cancellation off for the life of the value, then back to what
/// it was. Every exported call of the control path (both libraries) holds one: closing a file
/// (destroying a channel or a device) and other calls the control path makes are cancellation
/// points of glibc, and a thread unwound from inside a call would meet its panic guard, which
/// aborts the process. A cancellation requested meanwhile acts at the thread's next
/// cancellation point after the call. The data path (the provider's ops tables, without it)
/// makes only raw system calls (this module), and the blocking calls turn it back on while
/// they wait (the provider's `events::blocking_verb`, librdmacm's `rdma_get_cm_event`).
#[derive(Debug)]
pub struct CancelOff(c_int);

impl CancelOff {
    /// Cancellation off from now on.
    #[inline]
    #[must_use = "cancellation is back on when the value drops"]
    pub fn begin() -> CancelOff {
        let mut old = PTHREAD_CANCEL_ENABLE;
        // SAFETY: `old` is a valid out-pointer; the call changes only this thread's state.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        CancelOff(old)
    }
}

impl Drop for CancelOff {
    #[inline]
    fn drop(&mut self) {
        if self.0 != PTHREAD_CANCEL_DISABLE {
            let mut old = 0;
            // SAFETY: as in `begin`.
            unsafe { pthread_setcancelstate(self.0, &mut old) };
        }
    }
}

/// An eventfd a poller watches, rung from inside verbs: the progress thread's doorbell. mio's
/// `Waker` does the same with glibc's `write`, a cancellation point.
#[derive(Debug)]
pub struct Doorbell {
    fd: std::os::fd::OwnedFd,
}

impl Doorbell {
    /// A new eventfd (non-blocking, close-on-exec).
    pub fn new() -> std::io::Result<Doorbell> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd(2) takes no pointers; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened here and nothing else owns it.
        Ok(Doorbell { fd: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) } })
    }

    /// The fd to watch for readability (edge-triggered: every ring is a new edge; nobody
    /// needs to read it).
    pub fn raw_fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// Adds one to the counter, which makes the fd readable and wakes its watcher.
    pub fn ring(&self) {
        let one = 1u64;
        // SAFETY: an 8-byte write from a local u64.
        let r = unsafe { write(self.raw_fd(), (&one as *const u64).cast(), 8) };
        if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock {
            // The counter is at its maximum (2^64 - 2 rings never read): read it back to 0,
            // then ring again.
            let mut n = 0u64;
            // SAFETY: an 8-byte read into a local u64.
            unsafe { read(self.raw_fd(), (&mut n as *mut u64).cast(), 8) };
            // SAFETY: as the first write.
            unsafe { write(self.raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// 64 bits from the kernel's random pool (`/dev/urandom`); if that cannot be read (a chroot
/// without /dev), the standard library's per-process random hash keys, which come from the
/// same pool through `getrandom(2)`.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_ok() {
        return u64::from_ne_bytes(b);
    }
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd that outlives the call.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn a_doorbell_is_readable_once_rung_and_counts_its_rings() {
        let d = Doorbell::new().unwrap();
        assert!(!readable(d.raw_fd()));
        d.ring();
        d.ring();
        assert!(readable(d.raw_fd()));
        let mut n = 0u64;
        // SAFETY: an 8-byte read into a local u64.
        assert_eq!(unsafe { read(d.raw_fd(), (&mut n as *mut u64).cast(), 8) }, 8);
        assert_eq!(n, 2);
        assert!(!readable(d.raw_fd()));
    }

    #[test]
    fn the_cancellable_calls_are_glibcs_poll_and_read() {
        let d = Doorbell::new().unwrap();
        let mut p = libc::pollfd { fd: d.raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd that outlives the call.
        assert_eq!(unsafe { cancellable_poll(&mut p, 1, 0) }, 0);
        d.ring();
        // SAFETY: as above.
        assert_eq!(unsafe { cancellable_poll(&mut p, 1, 1000) }, 1);
        assert_eq!(p.revents, libc::POLLIN);
        let mut n = 0u64;
        // SAFETY: an 8-byte read into a local u64.
        assert_eq!(unsafe { cancellable_read(d.raw_fd(), (&mut n as *mut u64).cast(), 8) }, 8);
        assert_eq!(n, 1);
        // SAFETY: a read of a closed descriptor number fails with EBADF, writing nothing.
        assert_eq!(unsafe { cancellable_read(-1, (&mut n as *mut u64).cast(), 8) }, -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EBADF));
    }

    #[test]
    fn a_full_doorbell_counter_is_reset_and_rung_again() {
        let d = Doorbell::new().unwrap();
        let max = u64::MAX - 1;
        // SAFETY: an 8-byte write from a local u64.
        assert_eq!(unsafe { write(d.raw_fd(), (&max as *const u64).cast(), 8) }, 8);
        d.ring();
        let mut n = 0u64;
        // SAFETY: an 8-byte read into a local u64.
        assert_eq!(unsafe { read(d.raw_fd(), (&mut n as *mut u64).cast(), 8) }, 8);
        assert_eq!(n, 1, "the full counter was read back to 0 and rung once");
    }

    fn cancel_state() -> c_int {
        let mut old = 0;
        // SAFETY: a valid out-pointer; this test thread's own state.
        unsafe {
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old);
            pthread_setcancelstate(old, std::ptr::null_mut());
        }
        old
    }

    #[test]
    fn cancel_off_turns_cancellation_off_and_back_to_the_callers_setting() {
        std::thread::spawn(|| {
            assert_eq!(cancel_state(), PTHREAD_CANCEL_ENABLE, "a new thread's default");
            {
                let _g = CancelOff::begin();
                assert_eq!(cancel_state(), PTHREAD_CANCEL_DISABLE);
                {
                    let _inner = CancelOff::begin();
                    assert_eq!(cancel_state(), PTHREAD_CANCEL_DISABLE);
                }
                assert_eq!(cancel_state(), PTHREAD_CANCEL_DISABLE, "the inner one leaves it off");
            }
            assert_eq!(cancel_state(), PTHREAD_CANCEL_ENABLE, "back on");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn raw_calls_report_errors_through_errno() {
        let mut b = [0u8; 4];
        // SAFETY: a 4-byte read into a local buffer; fd -1 is invalid.
        assert_eq!(unsafe { read(-1, b.as_mut_ptr().cast(), 4) }, -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EBADF));
        assert_eq!(write_all(-1, b"x").unwrap_err().raw_os_error(), Some(libc::EBADF));
        let mut fds = [0; 2];
        // SAFETY: a 2-int array for pipe(2).
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        write_all(fds[1], b"hello").unwrap();
        // SAFETY: a 4-byte read into a local buffer from our pipe.
        assert_eq!(unsafe { read(fds[0], b.as_mut_ptr().cast(), 4) }, 4);
        assert_eq!(&b, b"hell");
        // SAFETY: closing the pipe's two fds, ours.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn cached_ids_are_the_callers_and_a_fork_child_reads_its_own() {
        // SAFETY: gettid/getpid take no argument.
        let (tid, pid) = unsafe { (libc::gettid(), libc::getpid()) };
        assert_eq!(thread_id(), tid);
        assert_eq!(thread_id(), tid, "cached");
        assert!(thread_alive(tid));
        let other = std::thread::spawn(thread_id).join().unwrap();
        assert_ne!(other, tid, "each thread its own");
        // Gone once joined (the kernel reaps it at exit; bounded wait for that).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while thread_alive(other) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!thread_alive(other));
        // SAFETY: the child only makes system calls (no allocation, no lock) and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            // SAFETY: gettid/getpid take no argument; _exit ends the child at once.
            unsafe {
                let ok = thread_id() == libc::gettid() && thread_id() != tid && libc::getpid() != pid;
                let alive = thread_alive(libc::gettid());
                libc::_exit(if ok && alive { 0 } else { 1 });
            }
        }
        let mut st = 0;
        // SAFETY: waiting for our own child into a local int.
        assert_eq!(unsafe { libc::waitpid(child, &mut st, 0) }, child);
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "the child read its own ids: {st:#x}");
    }
}
