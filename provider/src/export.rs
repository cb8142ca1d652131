//! Provider layer: the one way a C entry point is defined.
//!
//! [`export!`](crate::export!) turns a Rust body into an `unsafe extern "C"` `#[no_mangle]`
//! function that catches panics and maps the body's `Result` onto the verb's C convention:
//!
//! | convention | body returns | on `Err(e)` / panic |
//! |---|---|---|
//! | `ptr` | `Result<*mut T, i32>` | NULL, `errno = e` (panic: `EIO`) |
//! | `neg1` | `Result<c_int, i32>` | -1, `errno = e` |
//! | `errno` | `Result<(), i32>` | returns `e` (positive errno) and sets `errno = e` |
//! | `negerrno` | `Result<c_int, i32>` | returns `-e` and sets `errno = e` |
//! | `void` | `()` | nothing (panic is swallowed after the hook printed it) |
//! | `value(default)` | `T` | panic: `default` |
//!
//! Which verb uses which convention follows its rdma-core man page. Never let a panic cross
//! into C: unwinding through a C frame is undefined behaviour.
//!
//! `URXE_TRACE=1` prints every failing call (`urxe: ibv_xxx -> errno N (...)`) to stderr.

use libc::c_int;
use std::sync::OnceLock;
use std::thread;

/// errno reported when a Rust body panicked (a bug in urxe, never a user error).
pub const PANIC_ERRNO: i32 = libc::EIO;

fn trace_enabled() -> bool {
    static T: OnceLock<bool> = OnceLock::new();
    *T.get_or_init(|| std::env::var_os("URXE_TRACE").is_some_and(|v| v != "0"))
}

/// Set the calling thread's errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the valid, thread-local errno slot of this thread.
    unsafe { *libc::__errno_location() = e };
}

/// Read the calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn fail(name: &str, e: i32) -> i32 {
    if trace_enabled() {
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

pub fn conv_ptr<P: NullPtr>(name: &str, r: thread::Result<Result<P, i32>>) -> P {
    match r {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            fail(name, e);
            P::null()
        }
        Err(_) => {
            panicked(name);
            P::null()
        }
    }
}

pub fn conv_neg1(name: &str, r: thread::Result<Result<c_int, i32>>) -> c_int {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            fail(name, e);
            -1
        }
        Err(_) => {
            panicked(name);
            -1
        }
    }
}

pub fn conv_errno(name: &str, r: thread::Result<Result<(), i32>>) -> c_int {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => fail(name, e),
        Err(_) => panicked(name),
    }
}

pub fn conv_negerrno(name: &str, r: thread::Result<Result<c_int, i32>>) -> c_int {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => -fail(name, e),
        Err(_) => -panicked(name),
    }
}

pub fn conv_void(name: &str, r: thread::Result<()>) {
    if r.is_err() {
        panicked(name);
    }
}

pub fn conv_value<T>(name: &str, r: thread::Result<T>, default: T) -> T {
    match r {
        Ok(v) => v,
        Err(_) => {
            panicked(name);
            default
        }
    }
}

/// Define one exported C entry point. See the module documentation for the conventions.
///
/// ```ignore
/// export! {
///     /// Doc.
///     fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int as errno { ... Ok(()) }
/// }
/// ```
#[macro_export]
macro_rules! export {
    ($($t:tt)*) => { $crate::c_fn! { [let _cancel = urxe::sys::CancelOff::begin();] #[no_mangle] $($t)* } };
}

/// Like [`export!`](crate::export!) but without `#[no_mangle]`: for functions C reaches
/// only through a pointer we hand out (context ops, the `ibv_cq_ex`/`ibv_qp_ex` tables).
#[macro_export]
macro_rules! c_fn {
    ([$($pre:tt)*] $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty as value($default:expr) $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Called from C: pointer arguments must satisfy the libibverbs contract of this verb.
        #[allow(unused_variables, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $($pre)*
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || -> $ret { $body }));
            $crate::export::conv_value(stringify!($name), r, $default)
        }
    };
    ([$($pre:tt)*] $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) as void $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Called from C: pointer arguments must satisfy the libibverbs contract of this verb.
        #[allow(unused_variables, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) {
            $($pre)*
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || { $body }));
            $crate::export::conv_void(stringify!($name), r)
        }
    };
    ([$($pre:tt)*] $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty as ptr $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Called from C: pointer arguments must satisfy the libibverbs contract of this verb.
        #[allow(unused_variables, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $($pre)*
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || -> Result<$ret, i32> { $body }));
            $crate::export::conv_ptr(stringify!($name), r)
        }
    };
    ([$($pre:tt)*] $(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> c_int as $conv:ident $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// Called from C: pointer arguments must satisfy the libibverbs contract of this verb.
        #[allow(unused_variables, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> libc::c_int {
            $($pre)*
            $crate::c_fn!(@body $name $conv $body)
        }
    };
    (@body $name:ident errno $body:block) => {{
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || -> Result<(), i32> { $body }));
        $crate::export::conv_errno(stringify!($name), r)
    }};
    (@body $name:ident neg1 $body:block) => {{
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || -> Result<libc::c_int, i32> { $body }));
        $crate::export::conv_neg1(stringify!($name), r)
    }};
    (@body $name:ident negerrno $body:block) => {{
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || -> Result<libc::c_int, i32> { $body }));
        $crate::export::conv_negerrno(stringify!($name), r)
    }};
    // No statements ahead of the body: the ops tables (the data path), which make no
    // cancellation-point call (see `urxe::sys::CancelOff`).
    ($(#[$m:meta])* fn $($rest:tt)*) => { $crate::c_fn! { [] $(#[$m])* fn $($rest)* } };
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

#[cfg(test)]
mod tests {
    use super::*;

    crate::export! {
        /// Test export: fails with EAGAIN.
        fn urxe_test_fail_errno(x: c_int) -> c_int as errno {
            if x > 0 { Err(libc::EAGAIN) } else { Ok(()) }
        }
    }
    crate::export! {
        /// Test export: panics.
        fn urxe_test_panic_ptr(x: c_int) -> *mut u8 as ptr {
            if x > 0 { panic!("boom") }
            Ok(std::ptr::null_mut())
        }
    }
    crate::export! {
        /// Test export: neg1.
        fn urxe_test_neg1(x: c_int) -> c_int as neg1 {
            if x > 0 { Err(libc::ENOENT) } else { Ok(7) }
        }
    }

    #[test]
    fn conventions_map_errors_and_panics() {
        // SAFETY: the test exports take no pointers.
        unsafe {
            assert_eq!(urxe_test_fail_errno(1), libc::EAGAIN);
            assert_eq!(errno(), libc::EAGAIN);
            assert_eq!(urxe_test_fail_errno(0), 0);
            assert!(urxe_test_panic_ptr(1).is_null());
            assert_eq!(errno(), PANIC_ERRNO);
            assert_eq!(urxe_test_neg1(1), -1);
            assert_eq!(errno(), libc::ENOENT);
            assert_eq!(urxe_test_neg1(0), 7);
        }
    }
}
