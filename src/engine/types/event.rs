//! Async events and what the engine asks its driver to deliver.

use super::handles::*;

/// `enum ibv_event_type`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum AsyncEventType {
    CqErr = 0,
    QpFatal = 1,
    QpReqErr = 2,
    QpAccessErr = 3,
    CommEst = 4,
    SqDrained = 5,
    PathMig = 6,
    PathMigErr = 7,
    DeviceFatal = 8,
    PortActive = 9,
    PortErr = 10,
    LidChange = 11,
    PkeyChange = 12,
    SmChange = 13,
    SrqErr = 14,
    SrqLimitReached = 15,
    QpLastWqeReached = 16,
    ClientReregister = 17,
    GidChange = 18,
    WqFatal = 19,
}

/// The object an async event is about.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AsyncElement {
    Qp(Qpn),
    Cq(CqId),
    Srq(SrqId),
    Port(u8),
    Device,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AsyncEvent {
    pub kind: AsyncEventType,
    pub element: AsyncElement,
}

/// What the engine asks its driver to deliver.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Event {
    /// An armed CQ received a completion (one-shot: the CQ is disarmed).
    Completion(CqId),
    Async(AsyncEvent),
    /// MADs for QP1 are queued (the queue was empty): read them with `Engine::poll_gsi`.
    Gsi,
}
