//! Transport layer: UDP 4791 sockets, the progress thread, batching and timers. The only
//! layer that reads the clock. See docs/DESIGN.md.

pub mod device;
pub mod memory;
pub mod socket;
pub mod tap;

pub use device::{Device, EventSink, TransportCounters};
