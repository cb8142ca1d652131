//! urxe's librdmacm.so.1: the RDMA connection manager's C ABI (rdma-core 44's
//! `<rdma/rdma_cma.h>`), over the sans-IO connection manager in `urxe::cm`.
//!
//! Layer rules: this crate converts C structs and calls; protocol logic lives in `urxe::cm`
//! and `urxe::wire`. Verbs objects (QPs, CQs, PDs) are made through the libibverbs.so.1 the
//! application loaded, never through a second copy of the provider; CM MADs travel through
//! that library's private GSI calls.
//!
//! Rooms: [`entries`] (the export table and version script), [`export`] (the one macro every
//! export goes through), [`verbs`] (what is called in libibverbs.so.1), [`core`] (state, the CM
//! thread, CM events → rdma_cm events), [`ids`] (the IDs by handle), [`channel`] (event queues and their eventfds, what taking
//! an event does: [`retrieve`]), [`requests`] (connection requests on a listener: backlog, expiry),
//! [`forward`] (CM requests for another process of the shared address), [`api`] (the rdma_cm
//! calls), [`qp`] (the QP calls), [`path`] (an ID's route and QP attributes), [`addrinfo`] (`rdma_getaddrinfo`), [`mcast`]
//! (multicast joins), [`rsockets`] (the r* calls: stream rsockets on rdma-core's wire protocol).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(clippy::missing_safety_doc)]

pub mod abi;
pub mod addrinfo;
pub mod api;
pub mod channel;
pub mod core;
pub mod endpoints;
pub mod entries;
pub mod events;
pub mod export;
pub mod faults;
pub mod forward;
pub mod ids;
pub mod layout;
pub mod mcast;
pub mod path;
pub mod qp;
pub mod requests;
pub mod retrieve;
pub mod rsockets;
pub mod verbs;

pub use layout::layout_report;

/// The calling thread's errno (after a failed libc or verbs call; EIO when none is set).
pub use urxe_cabi::export::last_errno as export_errno;
#[cfg(test)]
mod tests;
