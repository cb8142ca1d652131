//! Runtime layer: the device as the provider sees it, and the threads and timers that drive the
//! engine. The only layer that reads the clock. See docs/DESIGN.md.
//!
//! Uses every layer below it ([`crate::engine`], [`crate::transport`], [`crate::host`],
//! [`crate::observe`], [`crate::sys`], [`crate::spawn`]); nothing in this crate uses it. Must not
//! know the C ABI (that is the provider's) or parse packets itself (that is the engine's).
//!
//! Rooms, from the façade down:
//! - [`device`]: [`Device`], the typed façade the provider calls (post, poll, control), the
//!   engine behind its lock;
//! - `pacing`: when packets move and who is woken to move them (doorbell batching, arming
//!   of packet wakeups, the progress thread's doorbell);
//! - `progress`: the progress thread; `moderation`: how long it naps while a stream arrives;
//!   `away`: the timer that wakes it when the application leaves;
//! - `hub`: the device's state (the engine and its I/O under one lock) and what application
//!   threads and the progress thread share;
//! - `clock`: the device's epoch, the one clock the engine is given;
//! - `faultplan`: `URXE_FAULTS`, the fault plan the engine carries out, and its trace.

mod away;
mod clock;
mod control;
pub mod device;
mod faultplan;
mod hub;
mod moderation;
mod owner;
mod pacing;
mod progress;

pub use device::{Device, EventSink, PostSend};
pub use faultplan::fault_setting;
