//! rsockets: the socket calls of `<rdma/rsocket.h>` (`rsocket`, `rconnect`, `rsend`, `rpoll`,
//! `riomap`, …) over an RC QP, speaking rdma-core's rsockets protocol on the wire so that a
//! urxe rsocket talks to one of Debian's librdmacm as well as to another urxe process.
//!
//! The protocol (as rdma-core's librdmacm defines it):
//! - The connection is rdma_cm over the TCP port space; REQ and REP carry a 40-byte
//!   `rs_conn_data`: version 1, flags (IOMAP; NET when the host is big-endian), the receive
//!   queue depth as send credits, the scaled size of the target iomap, and two SGEs (address,
//!   rkey, length; big-endian): the peer's *target SGL* (where this side writes updates of its
//!   receive-buffer grants) and the first half of its receive buffer.
//! - Data goes by RDMA WRITE WITH IMMEDIATE into the granted half of the peer's receive buffer;
//!   the immediate is `op << 29 | value` (op 0 data with its length, 4 SGL with a new credit
//!   sequence, 6 IOMAP_SGL with an index, 7 control: 0 disconnect, 1 keepalive, 2 shutdown).
//!   Each consumes one receive WR (posted with no SGE), which the receiver reposts.
//! - As the receiver drains its buffer it grants the next half by an RDMA WRITE of an SGE into
//!   the sender's target SGL (2 entries, used in turn) with immediate SGL(credits); when no
//!   half is free it sends the credits alone (a zero-length WRITE WITH IMMEDIATE).
//! - `riomap` registers a buffer and sends `{offset, sge}` into the peer's target iomap;
//!   `riowrite` then RDMA WRITEs (no immediate) straight into the mapped buffer.
//!
//! Stream sockets only: `rsocket(…, SOCK_DGRAM, …)` (rsockets over UD with its UDP helper
//! service) fails with EOPNOTSUPP, as does AF_IB. rdma-core's datagram rsockets make an address
//! handle to the socket's own QP from the port's LID, without a GRH (`ds_add_qp_dest`), and do
//! not run on RoCE: Debian's `udpong` fails in `rconnect` on kernel rxe, so there is no RoCE
//! peer to speak that protocol with. Keepalive is accepted and reported by `rgetsockopt` but
//! sends no probes (the RC transport's retries detect a dead peer).
//!
//! An rsocket's number is the fd of its own rdma_cm event channel (as in librdmacm), so it is
//! a real, unique fd number that select/poll sets can hold. Each rsocket is a
//! `Mutex<Stream>` in one table; blocking calls wait in `poll(2)` on the socket's completion
//! channel and event channel with the lock released, so `rsend` and `rrecv` on one socket
//! can wait in two threads at once, and a waiting thread can be cancelled (see [`blocking`]).

mod buffers;
pub mod dp;
mod proto;
mod stream;
#[macro_use]
mod wait;
mod conn;
mod io;
mod opts;
mod poll;

pub use conn::*;
pub use io::*;
pub use opts::*;
pub use poll::*;
pub use proto::{RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA};
