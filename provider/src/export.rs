//! Provider layer: the C conventions of every entry point, from the toolkit both C libraries
//! share (`urxe-cabi`): an entry point is written out as `pub unsafe extern "C" fn NAME` under
//! `#[urxe_cabi::export(CONV)]` (exported) or `#[urxe_cabi::c_fn(CONV)]` (reached through a
//! pointer we hand out: the context ops, the `ibv_cq_ex`/`ibv_qp_ex` tables); the conventions
//! (`ptr`, `neg1`, `errno`, `negerrno`, `void`, `value(DEFAULT)`) are tabled in
//! `urxe_cabi::export`. Which verb uses which follows its rdma-core man page.

pub use urxe_cabi::export::*;
