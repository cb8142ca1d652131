//! Event channels: the queue of `rdma_cm_event`s and the eventfd that tells of them, and what
//! is done when the application takes an event ([`Lib::on_retrieved`]), in its own thread.

use crate::abi::*;
use libc::c_void;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use urxe::cm::CommId;

/// An event as handed to the application: the C struct first, then what it points into.
#[repr(C)]
pub struct EventBox {
    pub ev: rdma_cm_event,
    pub private_data: Vec<u8>,
    /// A CONNECT_RESPONSE whose QP work (RTR, RTS, then the RTU of this connection) is still
    /// to be done, in the application's own `rdma_get_cm_event` ([`Lib::on_retrieved`]).
    pub rep: Option<CommId>,
}

pub struct Channel {
    /// The eventfd, shared with the threads waiting in `rdma_get_cm_event`: a channel destroyed
    /// under a waiter keeps its file open until that waiter returns, so its fd number is never
    /// read after another open reused it.
    pub fd: Arc<OwnedFd>,
    /// Only changed through [`Channel::push`], [`Channel::pop`] and [`Channel::retain`], under
    /// the lock: the eventfd's count is the queue's length at every release of the lock, so
    /// the fd is readable exactly while an event is queued (as the kernel's ucma file).
    queue: VecDeque<Box<EventBox>>,
}

impl Channel {
    pub fn new(fd: Arc<OwnedFd>) -> Channel {
        Channel { fd, queue: VecDeque::new() }
    }

    pub fn queue(&self) -> &VecDeque<Box<EventBox>> {
        &self.queue
    }

    pub fn push(&mut self, b: Box<EventBox>) {
        self.queue.push_back(b);
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a local u64 to our eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), &one as *const u64 as *const c_void, 8) };
    }

    pub fn pop(&mut self) -> Option<Box<EventBox>> {
        let b = self.queue.pop_front()?;
        self.unready(1);
        Some(b)
    }

    /// Keeps the events `keep` says to keep; the others are returned, in order, and their
    /// counts taken off the eventfd.
    pub fn retain(&mut self, mut keep: impl FnMut(&EventBox) -> bool) -> Vec<Box<EventBox>> {
        let mut gone = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for b in self.queue.drain(..) {
            if keep(&b) {
                kept.push_back(b);
            } else {
                gone.push(b);
            }
        }
        self.queue = kept;
        self.unready(gone.len());
        gone
    }

    /// Takes `n` counts off the eventfd (semaphore mode: one a read). Each read is done only
    /// when a zero-timeout poll says the fd is readable, so it never blocks; under the lock
    /// the count is at least the queue's length, so the counts are there.
    fn unready(&self, n: usize) {
        let raw = self.fd.as_raw_fd();
        for _ in 0..n {
            let mut p = libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; a zero timeout does not block.
            if unsafe { libc::poll(&mut p, 1, 0) } != 1 {
                return;
            }
            let mut v = 0u64;
            // SAFETY: an 8-byte read into a local u64 from our readable eventfd.
            unsafe { libc::read(raw, &mut v as *mut u64 as *mut c_void, 8) };
        }
    }
}
