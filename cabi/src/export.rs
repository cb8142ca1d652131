//! The one way a C entry point of urxe's libraries is defined, and the errno and trace helpers.
//!
//! `#[export(CONV)]` (exported, `#[no_mangle]`) and `#[c_fn(CONV)]` (reached through a pointer
//! the library hands out: ops tables, `ibv_cq_ex`/`ibv_qp_ex` methods) sit on a function that
//! is written out as `pub unsafe extern "C" fn NAME(...) -> Ret { body }`, so its C name finds
//! it. They run the body inside `catch_unwind` and map its value onto the C convention:
//!
//! | CONV | body returns | on `Err(e)` / panic |
//! |---|---|---|
//! | `ptr` | `Result<*mut T, i32>` | NULL, `errno = e` (panic: `EIO`) |
//! | `neg1` | `Result<Int, i32>` (any integer: `int`, `ssize_t`, `off_t`, rsockets' `size_t`) | -1, `errno = e` |
//! | `errno` | `Result<(), i32>` (returns `int`) | returns `e` (positive errno) and sets `errno = e` |
//! | `negerrno` | `Result<c_int, i32>` | returns `-e` and sets `errno = e` |
//! | `void` | `()` | nothing (panic is swallowed after it was printed) |
//! | `value(DEFAULT)` | `T` | panic: `DEFAULT` |
//!
//! Which call uses which convention follows its rdma-core man page. Never let a panic cross
//! into C: unwinding through a C frame is undefined behaviour.
//!
//! `#[export]` also turns the thread's cancellation off for the call ([`CancelOff`]): the
//! calls close files, write eventfds and poll, glibc cancellation points, and a thread unwound
//! from inside one would meet the panic guard, which aborts the process. `#[c_fn]` does not:
//! the data path makes no cancellation-point call. `#[export(CONV, cancel = false)]` is for a
//! call that waits as a cancellation point and manages it itself.
//!
//! `URXE_TRACE=1` prints every failing call (`urxe: NAME -> errno N (...)`) to stderr.

use libc::c_int;
use std::sync::OnceLock;
use std::thread;

pub use urxe::sys::CancelOff;

/// errno reported when a Rust body panicked (a bug in urxe, never a user error).
pub const PANIC_ERRNO: i32 = libc::EIO;

/// `URXE_TRACE` is set (and not `0`): failing calls are printed.
pub fn traced() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("URXE_TRACE").is_some_and(|v| v != "0"))
}

/// Set the calling thread's errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the valid, thread-local errno slot of this thread.
    unsafe { *libc::__errno_location() = e };
}

/// Read the calling thread's errno (0 when none is set).
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The calling thread's errno after a failed libc or verbs call (EIO when none is set).
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn fail(name: &str, e: i32) -> i32 {
    if traced() {
        eprintln!("urxe: {name} -> errno {e} ({})", std::io::Error::from_raw_os_error(e));
    }
    set_errno(e);
    e
}

fn panicked(name: &str) -> i32 {
    eprintln!("urxe: internal error: {name} panicked; returning EIO");
    set_errno(PANIC_ERRNO);
    PANIC_ERRNO
}

/// Raw pointer types a `ptr`-convention export may return.
pub trait NullPtr {
    fn null() -> Self;
}
impl<T> NullPtr for *mut T {
    fn null() -> Self {
        std::ptr::null_mut()
    }
}
impl<T> NullPtr for *const T {
    fn null() -> Self {
        std::ptr::null()
    }
}

/// `ptr`: the pointer, or NULL with errno set.
pub fn conv_ptr<P: NullPtr>(name: &str, r: thread::Result<Result<P, i32>>) -> P {
    finish(name, r, P::null())
}

/// The C value of a body's outcome: the value as is, else `failed` with errno set (`neg1`:
/// `failed` is -1 of the return type).
pub fn finish<T>(name: &str, r: thread::Result<Result<T, i32>>, failed: T) -> T {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            fail(name, e);
            failed
        }
        Err(_) => {
            panicked(name);
            failed
        }
    }
}

/// `errno`: 0, or the positive errno (also set in `errno`).
pub fn conv_errno(name: &str, r: thread::Result<Result<(), i32>>) -> c_int {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => fail(name, e),
        Err(_) => panicked(name),
    }
}

/// `negerrno`: the value, or minus the errno (also set in `errno`).
pub fn conv_negerrno(name: &str, r: thread::Result<Result<c_int, i32>>) -> c_int {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -fail(name, e),
        Err(_) => -panicked(name),
    }
}

/// `void`: a panic is printed and swallowed.
pub fn conv_void(name: &str, r: thread::Result<()>) {
    if r.is_err() {
        panicked(name);
    }
}

/// `value(DEFAULT)`: the value, or `default` after a panic.
pub fn conv_value<T>(name: &str, r: thread::Result<T>, default: T) -> T {
    match r {
        Ok(v) => v,
        Err(_) => {
            panicked(name);
            default
        }
    }
}

/// `Err(EINVAL)` for a NULL pointer argument.
pub fn non_null<T>(p: *mut T) -> Result<*mut T, i32> {
    if p.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(p)
    }
}

/// `Err(EINVAL)` for a NULL const pointer argument.
pub fn non_null_const<T>(p: *const T) -> Result<*const T, i32> {
    if p.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(p)
    }
}
