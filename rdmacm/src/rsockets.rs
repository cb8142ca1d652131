//! rsockets (`rsocket`, `rsend`, `rpoll`, …): exported so that every program linked against
//! librdmacm.so.1 loads, but not implemented yet: each call fails cleanly with -1 and errno
//! EOPNOTSUPP (riowrite: `(size_t)-1`, riomap: `(off_t)-1`). Follow-up work.
//!
//! The functions are defined without their parameters: on x86-64 SysV the caller owns the
//! argument registers and stack, so a callee that ignores them is ABI-compatible (also for
//! the variadic `rfcntl`).

macro_rules! not_yet {
    ($($name:ident),* $(,)?) => {
        $(
            /// rsockets call: not implemented yet (-1, errno EOPNOTSUPP).
            #[no_mangle]
            pub extern "C" fn $name() -> isize {
                crate::export::set_errno(libc::EOPNOTSUPP);
                -1
            }
        )*
    };
}

not_yet!(
    rsocket,
    rbind,
    rlisten,
    raccept,
    rconnect,
    rshutdown,
    rclose,
    rrecv,
    rrecvfrom,
    rrecvmsg,
    rsend,
    rsendto,
    rsendmsg,
    rread,
    rreadv,
    rwrite,
    rwritev,
    rpoll,
    rselect,
    rgetpeername,
    rgetsockname,
    rsetsockopt,
    rgetsockopt,
    rfcntl,
    riomap,
    riounmap,
    riowrite,
);
