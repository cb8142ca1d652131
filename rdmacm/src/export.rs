//! The C conventions of librdmacm.so.1's entry points, from the toolkit both C libraries share
//! (`urxe-cabi`): an entry point is written out as `pub unsafe extern "C" fn NAME` under
//! `#[urxe_cabi::export(neg1)]` (`int`, `ssize_t`, `off_t`, rsockets' `size_t`: -1 with
//! `errno` set) or `#[urxe_cabi::export(ptr)]` (NULL with `errno` set); a panic (a bug in urxe,
//! never a user error) reports EIO and `URXE_TRACE=1` prints failing calls. Every call runs
//! with the thread's cancellation off (`CancelOff`: the calls close files, write eventfds and
//! poll, glibc cancellation points, and a thread unwound from inside one would meet the panic
//! guard, which aborts the process) except the waits, which are cancellation points while they
//! wait: `rdma_get_cm_event` and `rdma_get_request` (`api::event_call`) and rsockets' blocking
//! calls (`rsockets::blocking`). The synchronous rdma_cm calls (an ID without a channel),
//! `rshutdown` and `rclose` wait, bounded, without being cancellation points.

pub use urxe_cabi::export::*;
