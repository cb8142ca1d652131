//! The device's state and who shares it: [`Core`] (the engine and everything the data path
//! touches, behind one lock) and [`Hub`] (the core plus the lock-free signals, shared by the
//! application threads and the progress thread).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::clock::Epoch;
use super::pacing::{Pacing, Signals};
use crate::engine::{Engine, Event, Nanos};
use crate::host::memory::ProcessMemory;
use crate::observe::stats::{counters_text, TransportCounters};
use crate::transport::group::Member;
use crate::transport::io::Io;

/// Where engine events (completion notifications, async events) go. Called with the device
/// lock held: it must be quick and must not call back into the device. Returns the completion
/// channel (its fd, the one applications wait on) whose waiter the event's record reached, if
/// any: a socket owner waiting on that channel then reads it without polling first.
pub type EventSink = Box<dyn FnMut(Event) -> Option<RawFd> + Send>;

/// The engine and everything the data path touches, behind one lock.
pub(super) struct Core {
    pub(super) engine: Engine<ProcessMemory>,
    /// Sockets and batches (socket I/O).
    io: Io,
    /// When packets move (the pacing policy).
    pub(super) pacing: Pacing,
    sink: EventSink,
    epoch: Epoch,
    pub(super) counters: TransportCounters,
    /// Shared address: QPN counter values below this are reserved in the slot's record.
    pub(super) qpn_reserved: u32,
}

impl Core {
    pub(super) fn new(engine: Engine<ProcessMemory>, io: Io, sink: EventSink, epoch: Epoch) -> Core {
        Core { engine, io, pacing: Pacing::new(), sink, epoch, counters: TransportCounters::default(), qpn_reserved: 0 }
    }

    /// The device's clock, to read later (a copy).
    pub(super) fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The time since the device started, which also moves the engine clock (completion
    /// timestamps) to it.
    pub(super) fn now(&mut self) -> Nanos {
        let now = self.epoch.now();
        self.engine.advance_clock(now);
        now
    }

    /// Moves every packet the engine has into the sockets, owed ones included. Returns false if
    /// a socket is full (the rest stays queued).
    pub(super) fn transmit(&mut self, now: Nanos) -> bool {
        self.pacing.paid();
        self.io.transmit(&mut self.engine, now, &mut self.counters)
    }

    pub(super) fn deliver_events(&mut self) {
        self.deliver_events_to(-1);
    }

    /// [`Core::deliver_events`]; true if a record reached channel `channel`.
    pub(super) fn deliver_events_to(&mut self, channel: RawFd) -> bool {
        let mut reached = false;
        while let Some(ev) = self.engine.poll_event() {
            reached |= (self.sink)(ev).is_some_and(|fd| fd == channel && fd >= 0);
        }
        while let Some(i) = self.engine.poll_injected() {
            let name = self.engine.fault_plan().and_then(|p| p.faults.get(i.fault)).map_or("", |f| f.name.as_str());
            super::faultplan::log(&i, name);
            if let Some(t) = self.io.tap() {
                t.note(&super::faultplan::trace_line(&i, name));
            }
        }
        reached
    }

    /// Takes in what arrived and what is due: queued datagrams, then expired timers.
    /// `poller`: an application's poll (see `Io::receive`).
    pub(super) fn take_in(&mut self, now: Nanos, poller: bool) {
        let epoch = self.epoch;
        // Every caller read `now` just before: the first receive batch takes it (a clock read,
        // about 30 ns here, per poll that receives); later batches read the clock again.
        let first = std::cell::Cell::new(Some(now));
        let clock = || first.take().unwrap_or_else(|| epoch.now());
        let last = self.io.receive(&mut self.engine, clock, &mut self.counters, poller);
        // A drain of several batches took time: timers are checked against the clock as it
        // read last (after its last batch's receive call); a drain of one batch or none leaves
        // `now` as it was.
        let now = last.map_or(now, |t| t.max(now));
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
    }

    /// The `URXE_PCAP` tap, if one is open.
    pub(super) fn tap(&self) -> Option<&crate::observe::tap::Tap> {
        self.io.tap()
    }

    /// The last drain stopped at its bound with datagrams maybe still queued (see
    /// `Io::left_behind`).
    pub(super) fn rx_left_behind(&self) -> bool {
        self.io.left_behind()
    }

    /// Opens the receive socket of a multicast group (see `Io::join_mcast`).
    pub(super) fn join_mcast(&mut self, group: std::net::IpAddr) -> std::io::Result<std::os::fd::RawFd> {
        self.io.join_mcast(group)
    }

    /// Closes the receive socket of a multicast group (see `Io::leave_mcast`).
    pub(super) fn leave_mcast(&mut self, group: std::net::IpAddr, before_close: impl FnOnce(std::os::fd::RawFd)) {
        self.io.leave_mcast(group, before_close)
    }

    pub(super) fn stats_text(&self) -> String {
        counters_text(self.engine.counters(), &self.counters)
            + &crate::observe::cmstat::text(&self.engine.gsi_counters())
            + &crate::observe::ccstat::text(&self.engine)
    }
}

/// What the application threads and the progress thread of one device share: the core under
/// its lock, and the lock-free signals between them.
pub(super) struct Hub {
    pub(super) core: Mutex<Core>,
    pub(super) signals: Signals,
    pub(super) stop: AtomicBool,
    /// The progress thread runs at real-time priority.
    pub(super) rt: AtomicBool,
    /// The slot of a shared address this device receives on (dropped last: the sockets
    /// stay open while any thread may still use them).
    pub(super) group: Option<Member>,
}

impl Hub {
    pub(super) fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock is caught at the FFI boundary; the engine's state is
        // still consistent enough to keep serving (no invariant spans a panic point), so
        // recover the guard rather than poisoning every later call.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the stats socket answers.
    pub(super) fn stats_report(&self) -> String {
        let c = self.lock();
        let prio = if self.rt.load(Ordering::Relaxed) { "real-time" } else { "normal" };
        let (local, counters, qps) = (c.io.local(), c.stats_text(), c.engine.qp_count());
        drop(c);
        // The member list reads the registry (a lock test per slot): outside the device lock.
        let group = self.group.as_ref().map(|m| group_text(m, qps)).unwrap_or_default();
        format!(
            "pid {}\naddress {local}\n{group}progress thread {prio}\n{counters}{}",
            std::process::id(),
            self.signals.wake_counters.text()
        )
    }
}

/// The group lines of `urxe stat`: this process's slot and QPs, then every live member.
fn group_text(m: &Member, qps: u32) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "group slot {} of {} (QPNs {:#08x}..{:#08x}), {qps} QPs, takeover_drops {}, handouts {}, program_refreshes {}, unowned_drops {}, probe_send_errors {}\n",
        m.slot(),
        m.slot_count(),
        m.qpn_base(),
        m.qpn_base() | 0xFFFF,
        m.takeover_drops(),
        m.counters().handouts.load(Ordering::Relaxed),
        m.counters().program_refreshes.load(Ordering::Relaxed),
        m.counters().unowned_drops.load(Ordering::Relaxed),
        m.counters().probe_send_errors.load(Ordering::Relaxed),
    );
    match m.members() {
        Ok(ms) => {
            s.push_str("group members (slot pid):");
            for i in ms {
                let _ = write!(s, " {} {}", i.slot, i.pid);
            }
            s.push('\n');
        }
        Err(e) => {
            let _ = writeln!(s, "group members: {e}");
        }
    }
    s
}
