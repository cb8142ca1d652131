//! The one way an entry point of librdmacm.so.1 is defined: [`rdmacm_export!`] wraps a Rust
//! body returning `Result<T, i32>` into a `#[no_mangle] extern "C"` function that never lets a
//! panic reach C and follows librdmacm's convention: `int` calls return the value or -1 with
//! `errno` set; pointer calls return the pointer or NULL with `errno` set. A panic (a bug in
//! urxe, never a user error) reports EIO. `URXE_TRACE=1` prints failing calls to stderr.

use std::sync::OnceLock;

/// errno for a body that panicked.
pub const PANIC_ERRNO: i32 = libc::EIO;

pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's valid errno slot.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn traced() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("URXE_TRACE").is_some_and(|v| v != "0"))
}

/// The C value of a body's outcome: `ok` as is, else `failed` with errno set.
pub fn finish<T>(name: &str, r: std::thread::Result<Result<T, i32>>, failed: T) -> T {
    let e = match r {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(_) => {
            eprintln!("urxe: internal error: {name} panicked; returning EIO");
            PANIC_ERRNO
        }
    };
    if traced() {
        eprintln!("urxe: {name} -> errno {e} ({})", std::io::Error::from_raw_os_error(e));
    }
    set_errno(e);
    failed
}

/// `rdmacm_export! { fn name(args) -> T as int|ptr { body } }`: `int` (any integer type:
/// `int`, `ssize_t`, `off_t`, rsockets' `size_t`) returns -1 on error, `ptr` NULL.
#[macro_export]
macro_rules! rdmacm_export {
    ([$($pre:tt)*] $(#[$m:meta])* fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $r:ty as int $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The pointer arguments are what librdmacm's man page says they are.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            $($pre)*
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<$r, i32> { $body }));
            $crate::export::finish(stringify!($name), r, (-1isize) as $r)
        }
    };
    ([$($pre:tt)*] $(#[$m:meta])* fn $name:ident($($a:ident : $t:ty),* $(,)?) -> $r:ty as ptr $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The pointer arguments are what librdmacm's man page says they are.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            $($pre)*
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<$r, i32> { $body }));
            $crate::export::finish(stringify!($name), r, std::ptr::null_mut())
        }
    };
}

/// [`rdmacm_export!`] with the thread's cancellation off for the call
/// (`urxe::sys::CancelOff`): the calls close files, write eventfds and poll, glibc
/// cancellation points, and a thread unwound from inside one would meet the panic guard, which
/// aborts the process; a cancellation requested meanwhile acts at the thread's next
/// cancellation point. Every call of the library is made so except the waits, which are
/// cancellation points while they wait: `rdma_get_cm_event` and `rdma_get_request`
/// (`api::event_call`) and rsockets' blocking calls (`rsockets::blocking`). The synchronous
/// rdma_cm calls (an ID without a channel), `rshutdown` and `rclose` wait, bounded, without
/// being cancellation points.
#[macro_export]
macro_rules! cm_export {
    ($($t:tt)*) => { $crate::rdmacm_export! { [let _cancel = urxe::sys::CancelOff::begin();] $($t)* } };
}
