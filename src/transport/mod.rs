//! Transport layer: UDP sockets and the progress thread. See docs/DESIGN.md.
