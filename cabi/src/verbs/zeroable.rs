//! [`Zeroable`]: the mirrors whose all-zero value is valid.

use super::*;

// ------------------------------------------------------------------------------------------
// All-zero values
// ------------------------------------------------------------------------------------------

/// Types whose all-zero bit pattern is a valid value, so [`Zeroable::zeroed`] is safe to call.
/// C code builds these structs with `calloc`/`memset(0)`; Rust may only do so when the type
/// says it is allowed.
///
/// # Safety
/// Implement only for `#[repr(C)]` plain data whose every field (recursively) is an integer,
/// a raw pointer, an `Option` of a function pointer, an array or union of those, or a libc
/// `pthread_*_t` (whose all-zero value is the one `PTHREAD_*_INITIALIZER` gives on glibc).
/// Never for a type holding a reference, `NonNull`, `Box`, `bool`, a Rust `enum`, or anything
/// with a destructor.
pub unsafe trait Zeroable: Sized {
    /// The all-zero value.
    fn zeroed() -> Self {
        // SAFETY: the trait's contract: every implementer accepts the all-zero bit pattern.
        unsafe { std::mem::MaybeUninit::zeroed().assume_init() }
    }
}

/// `unsafe impl Zeroable` for C mirrors (and libc structs) that follow the trait's contract.
macro_rules! zeroable {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: `$t` is a `#[repr(C)]` plain-data mirror of a C struct made only of
        // integers, raw pointers, `Option<fn>`, arrays/unions of those and pthread types.
        unsafe impl Zeroable for $t {}
    )*};
}

zeroable!(
    verbs_device,
    verbs_context,
    ibv_device_attr,
    ibv_device_attr_ex,
    ibv_port_attr,
    ibv_cq_ex,
    ibv_cq_init_attr_ex,
    ibv_qp_ex,
    ibv_qp_init_attr_ex,
    ibv_qp_attr,
    ibv_srq,
    ibv_ah_attr,
    ibv_wc,
    ibv_send_wr,
    ibv_recv_wr,
    ibv_async_event,
    ibv_gid,
    ibv_global_route,
    ibv_sa_path_rec,
    libc::stat,
    libc::ifreq,
);

/// `Default` as the all-zero value (what C's `= {0}` gives) for the mirrors both libraries
/// build field by field.
macro_rules! zero_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t as Zeroable>::zeroed()
            }
        }
    )*};
}

zero_default!(ibv_gid, ibv_global_route, ibv_ah_attr, ibv_qp_attr, ibv_wc, ibv_send_wr, ibv_recv_wr, ibv_sa_path_rec);
