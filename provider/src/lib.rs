//! provider: the libibverbs.so.1 drop-in (C ABI). See docs/DESIGN.md.
