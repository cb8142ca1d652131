//! Observe layer: what the device counts and captures, for `urxe stat` and `URXE_PCAP`. See
//! docs/DESIGN.md.
//!
//! Uses [`crate::wire`] (checksums of the captured headers), [`crate::engine`] and
//! [`crate::cm`] (their counters), [`crate::sys`] and [`crate::spawn`]. Must not use the
//! transport or the runtime: they hand it what to count and record, it never reaches back.
//!
//! Rooms:
//! - [`stats`]: counters and the `urxe stat` socket; [`cmstat`]: the CM's counters for it;
//! - [`tap`]: the `URXE_PCAP` capture of every packet sent and received.

pub mod ccstat;
pub mod cmstat;
pub mod stats;
pub mod tap;

pub use stats::TransportCounters;
