//! urxe's librdmacm.so.1: the RDMA connection manager's C ABI (rdma-core 44's
//! `<rdma/rdma_cma.h>`), over the sans-IO connection manager in `urxe::cm`.
//!
//! Layer rules: this crate converts C structs and calls; protocol logic lives in `urxe::cm`
//! and `urxe::wire`. Verbs objects (QPs, CQs, PDs) are made through the libibverbs.so.1 the
//! application loaded, never through a second copy of the provider.

pub mod abi;
pub mod layout;

pub use layout::layout_report;
