//! Transport layer: UDP 4791 sockets, the progress thread, batching and timers. The only
//! layer that reads the clock. See docs/DESIGN.md.

pub mod device;
pub mod group;
pub mod memory;
pub mod socket;

pub use device::{Device, EventSink, TransportCounters};
