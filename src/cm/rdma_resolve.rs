//! Address and route resolution of an rdma_cm ID (`rdma_resolve_addr`, `rdma_resolve_route`),
//! sans-IO like the rest of [`crate::cm`]: which call is valid when, the query in flight and its
//! deadline, and which rdma_cm event with which status each outcome produces. The C shim does
//! the I/O (asks the host for a route, fills the C route) and hands the outcome in.
//!
//! The life of one resolution (the kernel's `RDMA_CM_ADDR_QUERY` / `RDMA_CM_ROUTE_QUERY`):
//! ```text
//! idle/bound --start_addr_query--> addr query --handle_addr(Ok)--> AddrResolved   ADDR_RESOLVED, 0
//!                                             --handle_addr(Err e)--> bound       ADDR_ERROR, -e
//!                                             --deadline passed--> bound          ADDR_ERROR, -ETIMEDOUT
//! AddrResolved --start_route_query--> route query --handle_route(Ok)--> RouteResolved  ROUTE_RESOLVED, 0
//!                                                 --handle_route(Err e)--> AddrResolved ROUTE_ERROR, -e
//!                                                 --deadline passed--> AddrResolved     ROUTE_ERROR, -ETIMEDOUT
//! ```
//! While a query is in flight every other resolve call is EINVAL (as the kernel's state
//! exchange). A failed query leaves the ID where it was, so the application may try again.
//!
//! Driver order: `start_*_query(now, timeout_ms)`, then the I/O, then `handle_*` with its
//! outcome; if the outcome comes later, `poll_resolve_timeout` names the moment to call
//! `handle_resolve_timeout`. Every event returned is queued for the ID as it is.

use super::rdma_conn::event;
pub use super::rdma_id::Resolution;
use super::rdma_id::{Before, Errno, IdState, RdmaId};
use super::Nanos;

/// The rdma_cm event an outcome produces: `event` (`RDMA_CM_EVENT_*`) with `status` (0, or a
/// negative errno as the kernel reports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub event: i32,
    pub status: i32,
}

/// A query's deadline: `timeout_ms` after `now` (a negative or zero timeout is the kernel's
/// smallest, 1 ms, never "no deadline").
fn deadline(now: Nanos, timeout_ms: i32) -> Nanos {
    now.saturating_add(u64::from(timeout_ms.max(1).unsigned_abs()) * 1_000_000)
}

impl RdmaId {
    fn querying(&self) -> bool {
        matches!(self.resolution, Resolution::AddrQuery { .. } | Resolution::RouteQuery { .. })
    }

    /// `rdma_resolve_addr`: valid from idle (bind to the wildcard first, [`Before::BindAny`]) or
    /// bound, and not while a query is in flight.
    pub fn start_addr_query(&mut self, now: Nanos, timeout_ms: i32) -> Result<Before, Errno> {
        if self.querying() {
            return Err(libc::EINVAL);
        }
        let before = self.state.resolve_addr()?;
        self.resolution = Resolution::AddrQuery { deadline: deadline(now, timeout_ms) };
        Ok(before)
    }

    /// The address query's outcome (`Err(errno)`: no route to the destination). None if no
    /// address query is in flight (it already timed out).
    pub fn handle_addr(&mut self, outcome: Result<(), Errno>) -> Option<Resolved> {
        if !matches!(self.resolution, Resolution::AddrQuery { .. }) {
            return None;
        }
        Some(match outcome {
            Ok(()) => {
                self.resolution = Resolution::AddrResolved;
                self.state = IdState::AddrResolved;
                Resolved { event: event::ADDR_RESOLVED, status: 0 }
            }
            Err(e) => {
                self.resolution = Resolution::AddrError;
                Resolved { event: event::ADDR_ERROR, status: -e.abs() }
            }
        })
    }

    /// `rdma_resolve_route`: only with the address resolved and no query in flight.
    pub fn start_route_query(&mut self, now: Nanos, timeout_ms: i32) -> Result<(), Errno> {
        if self.querying() || self.state != IdState::AddrResolved {
            return Err(libc::EINVAL);
        }
        self.resolution = Resolution::RouteQuery { deadline: deadline(now, timeout_ms) };
        Ok(())
    }

    /// The route query's outcome. None if no route query is in flight.
    pub fn handle_route(&mut self, outcome: Result<(), Errno>) -> Option<Resolved> {
        if !matches!(self.resolution, Resolution::RouteQuery { .. }) {
            return None;
        }
        Some(match outcome {
            Ok(()) => {
                self.resolution = Resolution::RouteResolved;
                self.state = IdState::RouteResolved;
                Resolved { event: event::ROUTE_RESOLVED, status: 0 }
            }
            Err(e) => {
                self.resolution = Resolution::RouteError;
                Resolved { event: event::ROUTE_ERROR, status: -e.abs() }
            }
        })
    }

    /// When the query in flight times out (None: none in flight).
    pub fn poll_resolve_timeout(&self) -> Option<Nanos> {
        match self.resolution {
            Resolution::AddrQuery { deadline } | Resolution::RouteQuery { deadline } => Some(deadline),
            _ => None,
        }
    }

    /// The clock reached `now`: a query past its deadline fails with ETIMEDOUT.
    pub fn handle_resolve_timeout(&mut self, now: Nanos) -> Option<Resolved> {
        match self.resolution {
            Resolution::AddrQuery { deadline } if now >= deadline => self.handle_addr(Err(libc::ETIMEDOUT)),
            Resolution::RouteQuery { deadline } if now >= deadline => self.handle_route(Err(libc::ETIMEDOUT)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::rdma_id::QPT_RC;

    const MS: Nanos = 1_000_000;
    const TCP: i32 = 0x0106;

    fn bound() -> RdmaId {
        let mut id = RdmaId::new(TCP, QPT_RC);
        id.state = IdState::AddrBound;
        id
    }

    #[test]
    fn an_idle_id_binds_first_and_a_bound_one_does_not() {
        assert_eq!(RdmaId::new(TCP, QPT_RC).start_addr_query(0, 100), Ok(Before::BindAny));
        assert_eq!(bound().start_addr_query(0, 100), Ok(Before::Nothing));
    }

    #[test]
    fn addr_then_route_resolve_with_their_events_and_states() {
        let mut id = bound();
        id.start_addr_query(5 * MS, 100).unwrap();
        assert_eq!(id.poll_resolve_timeout(), Some(105 * MS));
        assert_eq!(id.handle_addr(Ok(())), Some(Resolved { event: event::ADDR_RESOLVED, status: 0 }));
        assert_eq!(
            (id.state, id.resolution, id.poll_resolve_timeout()),
            (IdState::AddrResolved, Resolution::AddrResolved, None)
        );
        id.start_route_query(6 * MS, 50).unwrap();
        assert_eq!(id.poll_resolve_timeout(), Some(56 * MS));
        assert_eq!(id.handle_route(Ok(())), Some(Resolved { event: event::ROUTE_RESOLVED, status: 0 }));
        assert_eq!(id.state, IdState::RouteResolved);
        // Resolved once: neither call is valid again.
        assert_eq!(id.start_addr_query(7 * MS, 100), Err(libc::EINVAL));
        assert_eq!(id.start_route_query(7 * MS, 100), Err(libc::EINVAL));
    }

    #[test]
    fn a_failed_query_reports_minus_errno_and_leaves_the_id_where_it_was() {
        let mut id = bound();
        id.start_addr_query(0, 100).unwrap();
        let r = id.handle_addr(Err(libc::ENETUNREACH));
        assert_eq!(r, Some(Resolved { event: event::ADDR_ERROR, status: -libc::ENETUNREACH }));
        assert_eq!((id.state, id.resolution), (IdState::AddrBound, Resolution::AddrError));
        // Retry allowed; the route too after a route error.
        id.start_addr_query(0, 100).unwrap();
        id.handle_addr(Ok(())).unwrap();
        id.start_route_query(0, 100).unwrap();
        let r = id.handle_route(Err(libc::EHOSTUNREACH));
        assert_eq!(r, Some(Resolved { event: event::ROUTE_ERROR, status: -libc::EHOSTUNREACH }));
        assert_eq!(id.state, IdState::AddrResolved);
        assert_eq!(id.start_route_query(0, 100), Ok(()));
    }

    #[test]
    fn a_query_in_flight_times_out_once_at_its_deadline() {
        let mut id = bound();
        id.start_addr_query(0, 10).unwrap();
        assert_eq!(id.start_addr_query(0, 10), Err(libc::EINVAL), "second query while one is in flight");
        assert_eq!(id.start_route_query(0, 10), Err(libc::EINVAL));
        assert_eq!(id.handle_resolve_timeout(10 * MS - 1), None, "before the deadline");
        let r = id.handle_resolve_timeout(10 * MS);
        assert_eq!(r, Some(Resolved { event: event::ADDR_ERROR, status: -libc::ETIMEDOUT }));
        assert_eq!(id.handle_resolve_timeout(20 * MS), None, "one event per query");
        assert_eq!(id.handle_addr(Ok(())), None, "a late outcome after the timeout is dropped");
        assert_eq!(id.state, IdState::AddrBound);
        // The route query likewise, with a zero timeout taken as 1 ms.
        id.start_addr_query(0, 10).unwrap();
        id.handle_addr(Ok(())).unwrap();
        id.start_route_query(100 * MS, 0).unwrap();
        assert_eq!(id.poll_resolve_timeout(), Some(101 * MS));
        let r = id.handle_resolve_timeout(101 * MS);
        assert_eq!(r, Some(Resolved { event: event::ROUTE_ERROR, status: -libc::ETIMEDOUT }));
        assert_eq!(id.state, IdState::AddrResolved);
    }

    #[test]
    fn outcomes_without_a_query_change_nothing() {
        let mut id = bound();
        assert_eq!(id.handle_addr(Ok(())), None);
        assert_eq!(id.handle_route(Ok(())), None);
        assert_eq!(id.handle_resolve_timeout(u64::MAX), None);
        assert_eq!((id.state, id.resolution), (IdState::AddrBound, Resolution::Idle));
        assert_eq!(id.start_route_query(0, 10), Err(libc::EINVAL), "route before the address");
    }
}
