//! Fault plans (`URXE_FAULTS`, `urxe run --faults`): which faults to inject, where and when.
//! Sans-IO and pure like the engine: no clock, no I/O, no threads; time is an argument and the
//! only randomness is a seeded generator, so one plan and one seed give the same decisions for
//! the same sequence of points, run after run.
//!
//! A plan is parsed once ([`parse`], grammar in `spec`); each layer that can
//! inject asks it at its injection points ([`FaultPlan::decide`]) with a [`Point`]: a packet
//! sent or received, a work request posted, a completion, a registration, a CM step. The plan
//! answers with the [`Action`] to carry out, or none. Carrying it out — dropping a packet,
//! returning an errno, moving a QP to ERROR — is the caller's job, so that the injected state is
//! exactly what the real path produces.
//!
//! Rooms: `plan` (the plan, its faults and the decision), `spec` (the text form). Part of the
//! engine (which injects the packet faults) and used by the provider and librdmacm for the
//! verbs, device and CM faults; it uses the wire layer's opcode table for opcode names.
#![forbid(unsafe_code)]

mod cm;
mod door;
mod inject;
mod plan;
mod spec;

pub use cm::{cm_effect, CmEffect, CM_FAULT_KINDS};
pub use inject::Injected;
pub(crate) use inject::Injector;
pub use plan::*;
pub use spec::{parse, SpecError};

#[cfg(test)]
mod tests;
