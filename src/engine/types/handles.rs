//! Object handles and the clock type.

/// Protection domain handle.
pub type PdId = u32;
/// Completion queue handle.
pub type CqId = u32;
/// Shared receive queue handle.
pub type SrqId = u32;
/// XRC domain handle.
pub type XrcdId = u32;
/// Address handle.
pub type AhId = u32;
/// Memory region handle (distinct from its keys).
pub type MrId = u32;
/// Memory window handle.
pub type MwId = u32;
/// Queue pair number (24 bits). QP0/QP1 are reserved; the first user QPN is 0x11 as in rxe.
pub type Qpn = u32;

/// Nanoseconds on a monotonic clock with an arbitrary epoch, supplied by the driver.
pub type Nanos = u64;
