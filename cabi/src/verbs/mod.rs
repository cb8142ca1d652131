//! The C-ABI toolkit: hand-written `#[repr(C)]` mirrors of the parts of `<infiniband/verbs.h>`
//! (rdma-core 44, x86-64 LP64) that urxe's libibverbs.so.1 reads or writes, plus the two
//! private `driver.h` structs system provider libraries reach into (`verbs_device`), and
//! `<infiniband/sa.h>`'s path record, which `<rdma/rdma_cma.h>` embeds.
//!
//! Written from the measured layout facts (../shared/abi/layout.txt), not copied from the
//! header. `tests/abi_layout.rs` compiles a C program against the installed header and checks
//! every size, offset and constant named in [`crate::verbs_layout::layout_report`].
//!
//! No behaviour here: plain data. Field and type names are the C names so the mirrors read like
//! the man pages.
#![allow(non_camel_case_types, non_snake_case)]

mod constants;
mod device;
mod objects;
mod sa;
mod zeroable;

pub use constants::*;
pub use device::*;
pub use objects::*;
pub use sa::*;
pub use zeroable::*;
