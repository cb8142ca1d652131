//! Transport layer: the wire side of the engine's I/O. UDP 4791 sockets and their batches, the
//! batching between the engine and those sockets, and the address a user's processes share.
//! See docs/DESIGN.md.
//!
//! Uses [`crate::wire`], [`crate::engine`], [`crate::host`] (the memory the engine reads while
//! it sends), [`crate::observe`] (counters, capture), [`crate::sys`] and [`crate::spawn`]. Must
//! not use [`crate::runtime`]: it owns no device, no lock and no progress thread, and keeps no
//! clock of its own (time reaches it as an argument).
//!
//! Rooms:
//! - `io`: socket I/O and batching between the engine and the sockets (GSO trains,
//!   sendmmsg/recvmmsg);
//! - [`socket`]: one RoCEv2 UDP socket and its batches (the libc calls);
//! - [`group`]: one address shared by every process of a user (slot sockets, registry,
//!   steering program).

pub mod group;
pub(crate) mod io;
pub mod neigh;
pub mod socket;
