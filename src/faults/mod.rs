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
//! Rooms: `plan` (the plan, its faults and the decision), `spec` (the text form). The
//! module depends on nothing of the crate but the wire layer's opcode table (opcode names).
#![forbid(unsafe_code)]

mod plan;
mod spec;

pub use plan::*;
pub use spec::{parse, SpecError};

#[cfg(test)]
mod tests;
