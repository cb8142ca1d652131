//! Transport layer: one address, many processes. Every urxe process of a user on an address
//! joins that address's group and shares UDP port 4791 with the others, like the processes
//! sharing a RoCE NIC; no daemon, no root, no capability.
//!
//! - [`slots`]: a fixed pool of N SO_REUSEPORT sockets on `addr:4791`, created in index order
//!   by the first process; every member holds duplicates of all N (passed over SCM_RIGHTS), so
//!   an exit or a crash closes nothing and indices never move.
//! - [`registry`]: a per-user file per (network namespace, address): slot `i` is claimed by an
//!   OFD lock on byte `i` (the kernel drops it when the owner dies), plus per-slot counters
//!   that a new owner continues and the CM listener table.
//! - [`steer`]: the classic BPF program that picks the slot socket for each datagram: QPN
//!   `i << 16 | n` and CM comm / SIDR request IDs `i << 24 | n` belong to slot `i`; CM REQ and
//!   SIDR_REQ go by service ID to the listener's slot.
//!
//! This module does socket and file I/O but never touches the engine: a [`Member`] hands the
//! transport its slot socket, its QPN and comm-ID bases and a way to tell its own datagrams
//! from strays.

#![deny(clippy::undocumented_unsafe_blocks)]

mod error;
pub mod registry;
pub mod slots;
pub mod steer;

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::Socket;

use error::SETUP_WAIT;
pub use error::{JoinError, MAX_SLOTS};
use registry::{Listener, Registry, SlotRecord};
use steer::Steering;

/// Slots of a group created with no `URXE_GROUP_SLOTS` setting.
pub const DEFAULT_SLOTS: u8 = 64;
/// First QPN counter value of a slot (QP0/QP1 and rxe's reserved range stay unused).
pub const FIRST_QPN_N: u32 = 0x11;
/// QPN counters run below this (so `slot << 16 | n` is never 0xFFFFFF).
pub const QPN_N_END: u32 = 0xFFFF;
/// Comm-ID counters run from 1 below this.
pub const COMM_N_END: u32 = 0xFF_FFFF;
/// Join attempts when a dying group or a member mid-exit gets in the way.
const JOIN_ATTEMPTS: u32 = 6;

/// How to join.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    pub addr: IpAddr,
    /// Slots of the pool if this process creates the group (joiners take the creator's).
    pub slots: u8,
    /// Registry directory.
    pub dir: PathBuf,
}

impl GroupConfig {
    /// `addr` with the settings from the environment: `URXE_GROUP_SLOTS` (1..=255, default
    /// [`DEFAULT_SLOTS`]) and the registry directory of [`registry::default_dir`].
    pub fn from_env(addr: IpAddr) -> GroupConfig {
        let slots = std::env::var("URXE_GROUP_SLOTS")
            .ok()
            .and_then(|v| v.trim().parse::<u8>().ok())
            .filter(|&n| (1..=MAX_SLOTS).contains(&n))
            .unwrap_or(DEFAULT_SLOTS);
        GroupConfig { addr, slots, dir: registry::default_dir() }
    }
}

/// What a member reports about itself and the others (`urxe stat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    pub slot: u8,
    pub pid: u32,
    pub record: SlotRecord,
}

/// Counters of this member's group machinery.
#[derive(Debug, Default)]
pub struct GroupCounters {
    /// Slot-socket handouts served to joining members.
    pub handouts: AtomicU64,
    /// Handout requests refused (another UID) or failed.
    pub handouts_refused: AtomicU64,
    /// Times the handout thread rebuilt the program after a member it named died.
    pub program_refreshes: AtomicU64,
    /// Datagrams found queued on slots without a member (sent before the program knew their
    /// member had died) and dropped by this member's handout thread.
    pub unowned_drops: AtomicU64,
    /// Join probes whose send failed (a firewall drop, ENOBUFS...) and were sent again.
    pub probe_send_errors: AtomicU64,
}

/// How a received datagram relates to this member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Addressed to one of our QPNs (or QP1/CM traffic the program sent us).
    Mine,
    /// A join probe (a member confirming its slot): drop, counted.
    Probe,
    /// Another slot's QPN (the kernel fell back to its hash, or a slot count mismatch):
    /// drop, counted.
    Stray,
}

/// How a datagram received on `slot`'s socket relates to that slot. Runts and malformed
/// packets count as `Mine`: the engine drops and counts them.
pub fn classify(slot: u8, payload: &[u8]) -> Delivery {
    if slots::is_probe(payload) {
        return Delivery::Probe;
    }
    if payload.len() < 8 {
        return Delivery::Mine;
    }
    let qpn = u32::from_be_bytes([0, payload[5], payload[6], payload[7]]);
    if qpn == 1 || steer::slot_of_qpn(qpn) == slot {
        Delivery::Mine
    } else {
        Delivery::Stray
    }
}

/// This process's membership of an address's group. Dropping it leaves the group: the slot is
/// released and the sockets stay with the other members.
pub struct Member {
    addr: IpAddr,
    slot: u8,
    pid: u32,
    sockets: Arc<Vec<Socket>>,
    registry: Registry,
    takeover_drops: u64,
    created: bool,
    counters: Arc<GroupCounters>,
    server: Option<(JoinHandle<()>, OwnedFd)>,
}

/// The outcome of a successful join attempt.
struct Joined {
    slot: u8,
    sockets: Vec<Socket>,
    takeover_drops: u64,
    created: bool,
    probe_send_errors: u64,
}

/// The pool, its slot confirmed by its probe.
struct Confirmed {
    sockets: Vec<Socket>,
    /// Datagrams a dead owner left queued on the slot, dropped.
    dropped: u64,
    /// Probe sends that failed and were repeated.
    send_errors: u64,
}

/// A failed join attempt: `Retry` may succeed a moment later (a dying group, a member
/// mid-exit).
enum Attempt {
    Retry(JoinError),
    Fail(JoinError),
}

impl From<JoinError> for Attempt {
    fn from(e: JoinError) -> Attempt {
        Attempt::Fail(e)
    }
}

impl Member {
    /// Joins (or creates) the group of `cfg.addr`.
    pub fn join(cfg: &GroupConfig) -> Result<Member, JoinError> {
        let mut registry = Registry::open(&cfg.dir, cfg.addr)?;
        let mut last = None;
        for attempt in 0..JOIN_ATTEMPTS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(20 << attempt.min(4)));
            }
            if !registry.lock_setup(SETUP_WAIT).map_err(JoinError::io("lock the group registry"))? {
                return Err(JoinError::Busy { path: registry.path().to_path_buf() });
            }
            match Self::join_locked(cfg, &registry) {
                Ok(j) => {
                    // From here the member owns the registry (and the slot lock on it); its
                    // Drop releases the slot if the last steps fail.
                    let counters = Arc::new(GroupCounters::default());
                    counters.probe_send_errors.store(j.probe_send_errors, Ordering::Relaxed);
                    let mut m = Member {
                        addr: cfg.addr,
                        slot: j.slot,
                        pid: std::process::id(),
                        sockets: Arc::new(j.sockets),
                        registry,
                        takeover_drops: j.takeover_drops,
                        created: j.created,
                        counters,
                        server: None,
                    };
                    let r = m.refresh_program_with(&m.registry);
                    let _ = m.registry.unlock_setup();
                    r?;
                    let watch = Registry::open(&cfg.dir, cfg.addr)?;
                    let server = start_handout(m.addr, m.slot, m.pid, m.sockets.clone(), m.counters.clone(), watch)
                        .map_err(JoinError::io("start the slot-socket handout"))?;
                    m.server = Some(server);
                    return Ok(m);
                }
                Err(a) => {
                    let _ = registry.unlock_setup();
                    match a {
                        Attempt::Fail(e) => return Err(e),
                        Attempt::Retry(e) => last = Some(e),
                    }
                }
            }
            // Re-open between attempts: nothing of a failed attempt stays locked.
            registry = Registry::open(&cfg.dir, cfg.addr)?;
        }
        Err(last.unwrap_or(JoinError::Probe { addr: cfg.addr, slot: 0 }))
    }

    /// One join attempt under the join lock: finds the live members, gets (or creates) the
    /// pool, claims a slot, confirms it and updates the slot's record.
    fn join_locked(cfg: &GroupConfig, reg: &Registry) -> Result<Joined, Attempt> {
        let addr = cfg.addr;
        let recorded = reg.slots().map_err(JoinError::io("read the group registry"))?;
        let mut live = Vec::new();
        for i in 0..recorded.unwrap_or(0) {
            if reg.held_by_other(i).map_err(JoinError::io("test a slot lock"))? {
                live.push(i);
            }
        }
        let (sockets, n, created) = if live.is_empty() {
            (None, cfg.slots, true)
        } else {
            let n = recorded.unwrap_or(cfg.slots);
            let mut got = None;
            let mut why = None;
            for &j in &live {
                let rec = reg.record(j).map_err(JoinError::io("read a slot record"))?;
                match slots::fetch(&slots::handout_name(addr, j, rec.pid), rec.pid, addr) {
                    Ok(s) if s.len() == n as usize => {
                        got = Some(s);
                        break;
                    }
                    Ok(_) => why = Some(io::Error::new(io::ErrorKind::InvalidData, "slot count mismatch")),
                    Err(e) => why = Some(e),
                }
            }
            match got {
                Some(s) => (Some(s), n, false),
                None => {
                    let source = why.unwrap_or_else(|| io::Error::from(io::ErrorKind::NotFound));
                    return Err(Attempt::Retry(JoinError::Io {
                        what: "get the slot sockets from a live member",
                        source,
                    }));
                }
            }
        };
        let mut slot = None;
        for i in 0..n {
            if reg.claim(i).map_err(JoinError::io("lock a slot"))? {
                slot = Some(i);
                break;
            }
        }
        let Some(slot) = slot else { return Err(Attempt::Fail(JoinError::Full { addr, slots: n })) };
        // Datagrams for slots without a member go elsewhere (see `steer`): make ours live
        // before its probe is sent.
        if let Some(s) = &sockets {
            if let Err(e) = rebuild_program(reg, s, slot) {
                let _ = reg.release(slot);
                return Err(Attempt::Fail(e));
            }
        }
        let r = Self::confirm(cfg, sockets, n, slot).and_then(|c| {
            let (sockets, takeover_drops, probe_send_errors) = (c.sockets, c.dropped, c.send_errors);
            if created {
                reg.set_slots(n).map_err(JoinError::io("write the group registry"))?;
            }
            let mut rec = reg.record(slot).map_err(JoinError::io("read a slot record"))?;
            rec.pid = std::process::id();
            rec.owners = rec.owners.wrapping_add(1);
            rec.qpn_mark = rec.qpn_mark.clamp(FIRST_QPN_N, QPN_N_END - 1);
            rec.comm_mark = rec.comm_mark.clamp(1, COMM_N_END - 1);
            rec.takeover_drops += takeover_drops;
            reg.write_record(slot, &rec).map_err(JoinError::io("write a slot record"))?;
            Ok(Joined { slot, sockets, takeover_drops, created, probe_send_errors })
        });
        if r.is_err() {
            let _ = reg.release(slot);
        }
        r
    }

    /// Creates the pool (if `sockets` is None) and confirms the slot indices with probes.
    fn confirm(cfg: &GroupConfig, sockets: Option<Vec<Socket>>, n: u8, slot: u8) -> Result<Confirmed, Attempt> {
        let addr = cfg.addr;
        match sockets {
            Some(s) => {
                // Joining: confirm our index; what the dead owner left queued is dropped.
                let c = slots::confirm_slot(&s[slot as usize], addr, slot, slots::PROBE_TIMEOUT)
                    .map_err(JoinError::io("read a probe"))?;
                match c.dropped {
                    Some(dropped) => Ok(Confirmed { sockets: s, dropped, send_errors: c.send_errors }),
                    None => Err(Attempt::Retry(JoinError::Probe { addr, slot })),
                }
            }
            None => {
                let mut pool = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let s = slots::bind_slot(addr).map_err(|e| match e.raw_os_error() {
                        Some(libc::EADDRINUSE) => slots::diagnose_in_use(addr),
                        Some(libc::EADDRNOTAVAIL) => JoinError::NotLocal { addr },
                        _ => JoinError::Io { what: "bind a slot socket", source: e },
                    })?;
                    if i == 0 {
                        let prog = steer::program(&Steering {
                            default_slot: slot,
                            listeners: Vec::new(),
                            live: (0..n).collect(),
                        })
                        .map_err(|e| JoinError::Io {
                            what: "build the steering program",
                            source: io::Error::other(e),
                        })?;
                        steer::attach(s.as_raw_fd(), &prog).map_err(JoinError::io("attach the steering program"))?;
                    }
                    pool.push(s);
                }
                // Our slot must answer on its socket, and so must the last index: if an old
                // group is still closing, our sockets joined it behind its survivors, so
                // index N-1 is not our socket N-1 and its probe goes astray. Two probes
                // instead of N keep creation fast and captures quiet.
                let (mut dropped, mut send_errors) = (0, 0);
                for i in [slot, n - 1] {
                    let c = slots::confirm_slot(&pool[i as usize], addr, i, slots::PROBE_TIMEOUT)
                        .map_err(JoinError::io("read a probe"))?;
                    send_errors += c.send_errors;
                    match c.dropped {
                        Some(d) if i == slot => dropped = d,
                        Some(_) => {}
                        None => return Err(Attempt::Retry(JoinError::Probe { addr, slot: i })),
                    }
                }
                Ok(Confirmed { sockets: pool, dropped, send_errors })
            }
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// This member's slot index.
    pub fn slot(&self) -> u8 {
        self.slot
    }

    /// Slots in the group's pool.
    pub fn slot_count(&self) -> u8 {
        self.sockets.len() as u8
    }

    /// Whether this process created the pool.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Datagrams found queued for a dead predecessor of this slot and dropped at join.
    pub fn takeover_drops(&self) -> u64 {
        self.takeover_drops
    }

    pub fn counters(&self) -> &GroupCounters {
        &self.counters
    }

    /// The socket this member receives on (and may send from). Never connect it.
    pub fn socket(&self) -> &Socket {
        &self.sockets[self.slot as usize]
    }

    /// A duplicate of this member's socket as a std UDP socket, for the transport to adopt.
    pub fn socket_dup(&self) -> io::Result<std::net::UdpSocket> {
        Ok(self.socket().try_clone()?.into())
    }

    /// QPNs of this member are `qpn_base() | n`.
    pub fn qpn_base(&self) -> u32 {
        (self.slot as u32) << 16
    }

    /// CM comm IDs and SIDR request IDs of this member are `comm_base() | n`.
    pub fn comm_base(&self) -> u32 {
        (self.slot as u32) << 24
    }

    /// Reserves `count` QPN counter values: returns the first `n` (QPN = `qpn_base() | n`).
    /// The slot's mark moves past them first, so a later owner of the slot (after this
    /// process dies) starts beyond anything this one may have used. Counters wrap from
    /// [`QPN_N_END`] back to [`FIRST_QPN_N`].
    pub fn reserve_qpns(&self, count: u32) -> io::Result<u32> {
        self.reserve(count, |r| &mut r.qpn_mark, FIRST_QPN_N, QPN_N_END)
    }

    /// Reserves `count` comm-ID counter values (ID = `comm_base() | n`), like
    /// [`Member::reserve_qpns`].
    pub fn reserve_comm_ids(&self, count: u32) -> io::Result<u32> {
        self.reserve(count, |r| &mut r.comm_mark, 1, COMM_N_END)
    }

    fn reserve(&self, count: u32, field: fn(&mut SlotRecord) -> &mut u32, first: u32, end: u32) -> io::Result<u32> {
        if count == 0 || count > end - first {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // Our slot lock makes us the only writer of our record.
        let mut rec = self.registry.record(self.slot)?;
        let mut start = (*field(&mut rec)).clamp(first, end);
        if start + count > end {
            start = first;
        }
        *field(&mut rec) = start + count;
        self.registry.write_record(self.slot, &rec)?;
        Ok(start)
    }

    /// Classifies a received datagram (its UDP payload): see [`classify`].
    pub fn classify(&self, payload: &[u8]) -> Delivery {
        classify(self.slot, payload)
    }

    /// Every live member of the group (this one included), by slot.
    pub fn members(&self) -> io::Result<Vec<MemberInfo>> {
        let mut out = Vec::new();
        for i in 0..self.slot_count() {
            if i == self.slot || self.registry.held_by_other(i)? {
                let record = self.registry.record(i)?;
                out.push(MemberInfo { slot: i, pid: record.pid, record });
            }
        }
        Ok(out)
    }

    /// Starts steering CM REQ / SIDR_REQ for `service_id` to this member.
    ///
    /// Slot 0, while held, is every program's default slot (the lowest live one), so a
    /// request for a service of slot 0's member reaches it with or without an entry: there
    /// only the table is written (for the programs other members build, and their
    /// [`listener_elsewhere`]) and the program is left as it is, unless another member's entry
    /// for the service is replaced. That keeps `rdma_listen` cheap for the common case of one
    /// process at an address (#35: 95 µs before, most of it the 64 slot-lock probes and the
    /// attach of a rebuild).
    pub fn listen(&self, service_id: u64) -> Result<(), JoinError> {
        self.edit_listeners(|ls, me| {
            let replaced = ls.iter().any(|l| l.service_id == service_id && l.slot != me.slot);
            ls.retain(|l| l.service_id != service_id);
            ls.push(me.listener(service_id)?);
            Ok(replaced || me.slot != 0)
        })
    }

    /// Stops steering `service_id` to this member (slot 0: the table only, as
    /// [`Member::listen`]; its requests go to the default slot, itself, either way).
    pub fn unlisten(&self, service_id: u64) -> Result<(), JoinError> {
        self.edit_listeners(|ls, me| {
            ls.retain(|l| !(l.service_id == service_id && l.slot == me.slot));
            Ok(me.slot != 0)
        })
    }

    /// Regenerates the program: drops listeners of dead members and moves the default slot
    /// to a live one. Cheap; call it when [`Member::program_may_be_stale`] says so.
    pub fn refresh_program(&self) -> Result<(), JoinError> {
        self.edit_listeners(|_, _| Ok(true))
    }

    fn listener(&self, service_id: u64) -> Result<Listener, JoinError> {
        let rec = self.registry.record(self.slot).map_err(JoinError::io("read a slot record"))?;
        Ok(Listener { service_id, slot: self.slot, owner: rec.owners })
    }

    fn edit_listeners(
        &self,
        f: impl FnOnce(&mut Vec<Listener>, &Member) -> Result<bool, JoinError>,
    ) -> Result<(), JoinError> {
        if !self.registry.lock_setup(SETUP_WAIT).map_err(JoinError::io("lock the group registry"))? {
            return Err(JoinError::Busy { path: self.registry.path().to_path_buf() });
        }
        let r = (|| {
            let mut ls = self.registry.listeners().map_err(JoinError::io("read the listener table"))?;
            let rebuild = f(&mut ls, self)?;
            if ls.len() > steer::MAX_LISTENERS {
                return Err(JoinError::Io {
                    what: "add a CM listener",
                    source: io::Error::other(steer::ProgramError::TooManyListeners(ls.len())),
                });
            }
            self.registry.write_listeners(&ls).map_err(JoinError::io("write the listener table"))?;
            if rebuild {
                self.refresh_program_with(&self.registry)?;
            }
            Ok(())
        })();
        let _ = self.registry.unlock_setup();
        r
    }

    /// Rebuilds and attaches the program from the registry (the caller holds the join lock).
    fn refresh_program_with(&self, reg: &Registry) -> Result<(), JoinError> {
        rebuild_program(reg, &self.sockets, self.slot)
    }

    /// Whether the program's default slot or a listener may belong to a dead member: true if
    /// any slot below ours is free (the default slot is the lowest live one) or a listener's
    /// slot is free. The handout thread checks this every second and refreshes the program.
    pub fn program_may_be_stale(&self) -> bool {
        program_may_be_stale(&self.registry, self.slot)
    }

    /// The registry file (for diagnostics).
    pub fn registry_path(&self) -> &Path {
        self.registry.path()
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("addr", &self.addr)
            .field("slot", &self.slot)
            .field("slots", &self.slot_count())
            .finish()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some((thread, stop)) = self.server.take() {
            drop(stop); // closing the write end wakes the handout thread
            let _ = thread.join();
        }
        // The slot stays with the others, memberless until someone claims it.
        slots::shrink(self.socket());
        if let Ok(mut rec) = self.registry.record(self.slot) {
            if rec.pid == self.pid {
                rec.pid = 0;
                let _ = self.registry.write_record(self.slot, &rec);
            }
        }
        let _ = self.registry.release(self.slot);
    }
}

/// Rebuilds the program from the registry and attaches it through `sockets` (the caller
/// holds the join lock): listeners of dead members are dropped, the default slot is the
/// lowest live one.
fn rebuild_program(reg: &Registry, sockets: &[Socket], slot: u8) -> Result<(), JoinError> {
    let mut live = Vec::new();
    for i in 0..sockets.len() as u8 {
        if i == slot || reg.held_by_other(i).map_err(JoinError::io("test a slot lock"))? {
            live.push(i);
        }
    }
    let mut ls = reg.listeners().map_err(JoinError::io("read the group registry"))?;
    let before = ls.len();
    ls.retain(|l| live.contains(&l.slot) && reg.record(l.slot).map(|r| r.owners == l.owner).unwrap_or(false));
    if ls.len() != before {
        reg.write_listeners(&ls).map_err(JoinError::io("write the listener table"))?;
    }
    let steering = Steering {
        default_slot: live.first().copied().unwrap_or(slot),
        listeners: ls.iter().map(|l| (l.service_id, l.slot)).collect(),
        live,
    };
    let prog = steer::program(&steering)
        .map_err(|e| JoinError::Io { what: "build the steering program", source: io::Error::other(e) })?;
    steer::attach(sockets[slot as usize].as_raw_fd(), &prog).map_err(JoinError::io("attach the steering program"))
}

/// Whether a slot other than `slot` that has no member has datagrams queued.
fn unowned_queued(reg: &Registry, sockets: &[Socket], slot: u8) -> bool {
    (0..sockets.len() as u8).any(|i| {
        let mut pfd = libc::pollfd { fd: sockets[i as usize].as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd that lives across the call; a zero timeout never blocks.
        let readable = unsafe { libc::poll(&mut pfd, 1, 0) } == 1;
        i != slot && readable && !reg.held_by_other(i).unwrap_or(true)
    })
}

/// Drops what is queued on the slots without a member (the caller holds the join lock, so no
/// member is joining one of them and waiting for its probe) and shrinks their receive
/// buffers back to the minimum; returns how many datagrams were dropped. Bounded per call.
fn drain_unowned(reg: &Registry, sockets: &[Socket], slot: u8) -> u64 {
    let mut n = 0;
    for i in 0..sockets.len() as u8 {
        if i != slot && !reg.held_by_other(i).unwrap_or(true) {
            slots::shrink(&sockets[i as usize]);
            n += slots::drain(&sockets[i as usize], 1 << 16);
        }
    }
    n
}

/// See [`Member::program_may_be_stale`]; `reg` may be any handle on the registry.
fn program_may_be_stale(reg: &Registry, slot: u8) -> bool {
    let free = |i: u8| i != slot && !reg.held_by_other(i).unwrap_or(true);
    (0..slot).any(free) || reg.listeners().map(|ls| ls.iter().any(|l| free(l.slot))).unwrap_or(false)
}

/// The live member of `addr`'s group (registry in `dir`), other than `own_slot`, whose
/// listener table entry names `service_id`: where a CM REQ / SIDR_REQ for the service belongs
/// when it reached `own_slot`, which does not listen on it (it was queued at the default slot
/// before the listener's entry existed). None if no other member listens on it: then the
/// request is refused, as the kernel's CM refuses a service nobody listens on.
pub fn listener_elsewhere(dir: &Path, addr: IpAddr, own_slot: u8, service_id: u64) -> Result<Option<u8>, JoinError> {
    let reg = Registry::open(dir, addr)?;
    // The table is rewritten under the join lock: read it under that lock when it is free at
    // once; a member holding it for a while (joining) must not stall the caller's CM, and the
    // table, written in one piece, is then read as it is.
    let locked = reg.lock_setup(Duration::ZERO).map_err(JoinError::io("lock the group registry"))?;
    let r = (|| {
        for l in reg.listeners()? {
            if l.service_id == service_id
                && l.slot != own_slot
                && reg.held_by_other(l.slot)?
                && reg.record(l.slot)?.owners == l.owner
            {
                return Ok(Some(l.slot));
            }
        }
        Ok(None)
    })()
    .map_err(JoinError::io("read the listener table"));
    if locked {
        let _ = reg.unlock_setup();
    }
    r
}

/// Starts the thread that hands the slot sockets to joining members and, once a second,
/// refreshes the program if a member it names died (through `watch`, its own handle on the
/// registry). Returns it and the write end of its stop pipe (closing it stops the thread).
fn start_handout(
    addr: IpAddr,
    slot: u8,
    pid: u32,
    sockets: Arc<Vec<Socket>>,
    counters: Arc<GroupCounters>,
    watch: Registry,
) -> io::Result<(JoinHandle<()>, OwnedFd)> {
    let listener = slots::handout_listener(&slots::handout_name(addr, slot, pid))?;
    let mut p = [0 as libc::c_int; 2];
    // SAFETY: `p` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    let thread = crate::spawn::spawn_started("urxe-group", move || {
        loop {
            let mut pfd = [
                libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: rd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: two valid pollfds that live across the call.
            let r = unsafe { libc::poll(pfd.as_mut_ptr(), 2, 1000) };
            if r < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            if pfd[1].revents != 0 {
                return;
            }
            if r == 0 {
                // A second without requests: is the default slot or a listener dead, or did a
                // slot without a member receive datagrams (its member died since the program
                // was built)?
                let queued = unowned_queued(&watch, &sockets, slot);
                if (queued || program_may_be_stale(&watch, slot))
                    && watch.lock_setup(Duration::from_millis(100)).unwrap_or(false)
                {
                    if rebuild_program(&watch, &sockets, slot).is_ok() {
                        counters.program_refreshes.fetch_add(1, Ordering::Relaxed);
                    }
                    if queued {
                        let n = drain_unowned(&watch, &sockets, slot);
                        counters.unowned_drops.fetch_add(n, Ordering::Relaxed);
                    }
                    let _ = watch.unlock_setup();
                }
                continue;
            }
            // Serve everyone waiting; a refused or broken peer does not stop the others.
            for _ in 0..64 {
                match slots::serve_one(&listener, &sockets) {
                    Ok(true) => {
                        counters.handouts.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => break,
                    Err(_) => {
                        counters.handouts_refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    })?;
    Ok((thread, wr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_elsewhere_only_for_a_live_other_listener_of_its_service() {
        let dir = std::env::temp_dir().join(format!("urxe-group-elsewhere-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let addr: IpAddr = "127.0.0.1".parse().unwrap();
        let (sid, other_sid) = (0x0106_0000_0000_4853u64, 0x0106_0000_0000_4854u64);
        // Slot 2 is a live member (its lock held through another open file), slot 5 is not.
        let member = Registry::open(&dir, addr).unwrap();
        assert!(member.claim(2).unwrap());
        let mut rec = member.record(2).unwrap();
        rec.owners = 7;
        member.write_record(2, &rec).unwrap();
        let listen = |ls: &[Listener]| member.write_listeners(ls).unwrap();
        let l = |service_id, slot, owner| Listener { service_id, slot, owner };
        listen(&[l(sid, 2, 7)]);
        assert_eq!(listener_elsewhere(&dir, addr, 0, sid).unwrap(), Some(2));
        assert_eq!(listener_elsewhere(&dir, addr, 2, sid).unwrap(), None, "our own slot is not elsewhere");
        assert_eq!(listener_elsewhere(&dir, addr, 0, other_sid).unwrap(), None, "nobody listens: refuse");
        listen(&[l(sid, 5, 0)]);
        assert_eq!(listener_elsewhere(&dir, addr, 0, sid).unwrap(), None, "slot 5 has no live member");
        listen(&[l(sid, 2, 6)]);
        assert_eq!(listener_elsewhere(&dir, addr, 0, sid).unwrap(), None, "a listener of slot 2's previous owner");
        listen(&[l(sid, 2, 7)]);
        member.release(2).unwrap();
        assert_eq!(listener_elsewhere(&dir, addr, 0, sid).unwrap(), None, "the listener's member died");
        drop(member);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
