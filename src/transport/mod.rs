//! Transport layer: UDP 4791 sockets, the progress thread, batching and timers. The only
//! layer that reads the clock. See docs/DESIGN.md.

pub mod device;
pub mod fault;
pub mod memory;
pub mod registration;
pub mod socket;

pub use device::{Device, EventSink, TransportCounters};
