//! The connection manager's state, shared by every thread of the process: event channels, IDs,
//! the one device context, and `urxe::cm::Cm` with the thread that drives it.
//!
//! One lock ([`lock`]) guards all of it. The CM thread blocks in epoll on the GSI fd (readable
//! while MADs are queued for QP1) and a timerfd armed at `Cm::poll_timeout`; it never spins.
//! Application calls run the CM's commands in their own thread under the same lock, then
//! [`Lib::flush`] sends what the CM queued, turns its events into `rdma_cm_event`s on the
//! right channel, and re-arms the timer.
//!
//! Ownership (written down once): a channel is a `Box<rdma_event_channel>` from
//! `rdma_create_event_channel` to `rdma_destroy_event_channel`; its fd is an eventfd in
//! semaphore mode, readable exactly while events are queued (so poll() and O_NONBLOCK work).
//! An ID is a `Box<rdma_cm_id>` from `rdma_create_id` (or a CONNECT_REQUEST) to
//! `rdma_destroy_id`; its Rust state lives here in `ids`, keyed by a handle ([`IdKey`]; the
//! pointer only finds the handle, see [`crate::ids`]). An event is a
//! `Box<EventBox>` from the moment it is queued until `rdma_ack_cm_event`.

use crate::abi::*;
use crate::verbs::*;
use libc::{c_int, c_void};
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use urxe::cm::rdma_conn::DevicePath;
use urxe::cm::rdma_id::{RdmaId, Rng};
use urxe::cm::{Cm, CmConfig, CmCounters, CmEvent, CommId, Nanos};
use urxe::wire::mad::MAD_LEN;

/// The kernel's CMA figures (packet life time, CM timeouts and retries, hop limit), from the
/// sans-IO core.
pub use urxe::cm::rdma_conn::{flow_label, CM_RESPONSE_TIMEOUT, HOP_LIMIT, MAX_CM_RETRIES, PACKET_LIFE_TIME};
/// The fault hook of the sans-IO core ([`Lib::faults`]).
pub use urxe::cm::rdma_conn::{IdFaults, NoFaults};
/// `CMA_CM_MRA_SETTING`'s service timeout: what the passive side asks for while the user has
/// not answered a CONNECT_REQUEST.
pub const MRA_SERVICE_TIMEOUT: u8 = 24;
pub use urxe::cm::rdma_id::MAX_BACKLOG;

pub use crate::channel::{Channel, EventBox};

/// The ID's state and what a connection agreed: the sans-IO core's ([`urxe::cm::rdma_id`]).
pub use urxe::cm::rdma_id::{Agreed, IdState};

pub use crate::ids::{Id, IdKey, IdTable, Join};

/// The one device, opened once for every ID.
pub struct Dev {
    pub ctx: *mut ibv_context,
    pub addr: IpAddr,
    pub gid: [u8; 16],
    pub active_mtu: u8,
    pub gsi: GsiApi,
    pub pd: *mut ibv_pd,
}

/// The library's state. Its tables are reached through methods (an ID by handle or by the
/// application's pointer, a channel, a comm ID's ID, a service's listener, a held port, an
/// event handed out); `ids` is an [`IdTable`] (no raw map), `cm` the sans-IO CM.
pub struct Lib {
    pub(crate) dev: Option<Dev>,
    pub(crate) cm: Option<Cm>,
    /// Event channels by the `rdma_event_channel` pointer (`Box` from `new_channel`).
    channels: HashMap<usize, Channel>,
    pub(crate) ids: IdTable,
    /// The ID of each CM connection (comm ID, or a SIDR request ID).
    by_comm: HashMap<CommId, IdKey>,
    /// The listening ID of each service ID.
    listeners: HashMap<u64, IdKey>,
    /// Ports held per port space.
    ports: HashSet<(c_int, u16)>,
    /// Events handed to the application and not yet acknowledged (`EventBox` addresses).
    outstanding: HashSet<usize>,
    timerfd: c_int,
    rng: Rng,
    /// Fault injection's hook into the sans-IO core: consulted by every connect / accept /
    /// reject plan and every CM event on an ID ([`IdFaults`]); [`NoFaults`] unless a test
    /// injects some.
    pub faults: Box<dyn IdFaults + Send>,
    /// The CM's counters as `urxe stat` last got them.
    pub(crate) reported: CmCounters,
}

// SAFETY: the raw pointers in `Lib` (device context, PDs, ID boxes) are only dereferenced
// under the one lock, and point to objects that libibverbs / this library keep alive until
// they are removed from it.
unsafe impl Send for Lib {}

static LIB: OnceLock<Mutex<Lib>> = OnceLock::new();
/// Signalled by every `rdma_ack_cm_event` and after the CM thread handled input (see
/// [`wait_acked`]).
static ACKED: Condvar = Condvar::new();

pub fn lock() -> MutexGuard<'static, Lib> {
    let m = LIB.get_or_init(|| {
        let seed = now() ^ u64::from(std::process::id()) << 32;
        Mutex::new(Lib {
            dev: None,
            cm: None,
            channels: HashMap::new(),
            ids: IdTable::default(),
            by_comm: HashMap::new(),
            listeners: HashMap::new(),
            ports: HashSet::new(),
            outstanding: HashSet::new(),
            timerfd: -1,
            rng: Rng::new(seed),
            faults: Box::new(NoFaults),
            reported: CmCounters::default(),
        })
    });
    // A panic under the lock is caught at the C boundary; the maps stay consistent (no
    // invariant spans a panic point), so keep serving rather than poisoning every call.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells [`wait_acked`] waiters that an event was acknowledged or the CM moved.
pub fn notify_acked() {
    ACKED.notify_all();
}

/// Waits (releasing the lock) until `done` holds or `limit` passes; true if it holds.
pub fn wait_acked(
    mut lib: MutexGuard<'static, Lib>,
    limit: std::time::Duration,
    mut done: impl FnMut(&Lib) -> bool,
) -> (MutexGuard<'static, Lib>, bool) {
    let end = std::time::Instant::now() + limit;
    loop {
        if done(&lib) {
            return (lib, true);
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return (lib, false);
        }
        lib = ACKED.wait_timeout(lib, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// CLOCK_MONOTONIC in nanoseconds (the timerfd's clock).
pub fn now() -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn gid_of(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

pub fn ip_of_gid(g: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(g);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Writes `a` into a `sockaddr_storage`, the rest of it zero; rdma_cm's addresses carry no IPv6
/// flow label.
pub fn store_sockaddr(dst: &mut libc::sockaddr_storage, a: SocketAddr) {
    // SAFETY: sockaddr_storage is plain bytes; all-zero is a valid value.
    *dst = unsafe { std::mem::zeroed() };
    let a = match a {
        SocketAddr::V6(v6) => SocketAddr::V6(std::net::SocketAddrV6::new(*v6.ip(), v6.port(), 0, v6.scope_id())),
        v4 => v4,
    };
    urxe::transport::socket::write_sockaddr(a, dst);
}

/// Reads a `sockaddr` the application passed (NULL → None; unknown family → EAFNOSUPPORT).
///
/// # Safety
/// `sa` is NULL or points to a sockaddr whose family tells its real size.
pub unsafe fn load_sockaddr(sa: *const libc::sockaddr) -> Result<Option<SocketAddr>, i32> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller guarantees a valid sockaddr of its announced family.
    unsafe {
        match (*sa).sa_family as c_int {
            libc::AF_INET => {
                let sin = &*(sa as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Ok(Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port))))
            }
            libc::AF_INET6 => {
                let sin6 = &*(sa as *const libc::sockaddr_in6);
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                // The scope id names the interface of a link-local address (fe80::1%eth0).
                let port = u16::from_be(sin6.sin6_port);
                Ok(Some(SocketAddr::V6(std::net::SocketAddrV6::new(ip, port, 0, sin6.sin6_scope_id))))
            }
            _ => Err(libc::EAFNOSUPPORT),
        }
    }
}

impl Lib {
    /// PSNs and ephemeral ports, not secrets ([`Rng`]).
    pub fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A connection's starting PSN, random as the kernel's CMA picks it.
    pub fn psn(&mut self) -> u32 {
        self.rng.psn()
    }

    /// The device, opened on first use (with the CM thread).
    pub fn device(&mut self) -> Result<&Dev, i32> {
        if self.dev.is_none() {
            self.open_device()?;
        }
        self.dev.as_ref().ok_or(libc::ENODEV)
    }

    fn open_device(&mut self) -> Result<(), i32> {
        let gsi = gsi().ok_or(libc::ENODEV)?;
        let mut n: c_int = 0;
        // SAFETY: plain verbs calls; the list is freed below and the context kept.
        let (ctx, guid) = unsafe {
            let list = ibv_get_device_list(&mut n);
            if list.is_null() || n < 1 {
                if !list.is_null() {
                    ibv_free_device_list(list);
                }
                return Err(libc::ENODEV);
            }
            let dev = *list;
            let guid = u64::from_be(ibv_get_device_guid(dev));
            let ctx = ibv_open_device(dev);
            ibv_free_device_list(list);
            (ctx, guid)
        };
        if ctx.is_null() {
            return Err(libc::ENODEV);
        }
        let mut gid = ibv_gid::default();
        // ibv_query_port (the exported, compat entry) fills at most the whole struct.
        let mut port = ibv_port_attr::zeroed();
        // SAFETY: `ctx` is an open context; the out-parameters are ours.
        let ok = unsafe { ibv_query_gid(ctx, 1, 0, &mut gid) == 0 && ibv_query_port(ctx, 1, &mut port) == 0 };
        if !ok {
            return Err(libc::ENODEV);
        }
        // SAFETY: a function of urxe's libibverbs with no arguments.
        let base = unsafe { (gsi.comm_id_base)() };
        // SAFETY: as above.
        let gsi_fd = unsafe { (gsi.fd)() };
        if gsi_fd < 0 {
            return Err(crate::export_errno());
        }
        // SAFETY: timerfd_create has no memory arguments.
        let tfd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) };
        if tfd < 0 {
            return Err(crate::export_errno());
        }
        let first = (self.random() as u32 & 0xFF_FFFF).max(1);
        self.cm = Some(Cm::new(CmConfig {
            local_gid: gid.bytes(),
            ca_guid: guid,
            comm_id_base: base,
            first_comm_id: first,
            packet_life_time: PACKET_LIFE_TIME,
        }));
        self.timerfd = tfd;
        self.dev = Some(Dev {
            ctx,
            addr: ip_of_gid(gid.bytes()),
            gid: gid.bytes(),
            active_mtu: port.active_mtu.clamp(1, 5) as u8,
            gsi,
            pd: ptr::null_mut(),
        });
        // Started before we return (see `spawn_started`: libfabric patches libc right after).
        urxe::spawn::spawn_started("urxe-rdmacm", move || cm_thread(gsi, gsi_fd, tfd)).map_err(|_| libc::EAGAIN)?;
        Ok(())
    }

    pub fn ctx(&self) -> *mut ibv_context {
        self.dev.as_ref().map_or(ptr::null_mut(), |d| d.ctx)
    }

    /// The device's shared PD (`rdma_create_qp` / `rdma_create_srq` without one).
    pub fn shared_pd(&mut self) -> Result<*mut ibv_pd, i32> {
        let dev = self.dev.as_mut().ok_or(libc::EINVAL)?;
        if dev.pd.is_null() {
            // SAFETY: an open context.
            dev.pd = unsafe { ibv_alloc_pd(dev.ctx) };
            if dev.pd.is_null() {
                return Err(crate::export_errno());
            }
        }
        Ok(dev.pd)
    }

    pub fn cm(&mut self) -> Result<&mut Cm, i32> {
        self.cm.as_mut().ok_or(libc::EINVAL)
    }

    /// The ID the application names by `id` (EINVAL: not a live ID of ours).
    pub fn id(&mut self, id: *mut rdma_cm_id) -> Result<&mut Id, i32> {
        let k = self.key(id)?;
        self.ids.get_mut(&k).ok_or(libc::EINVAL)
    }

    /// The handle of the ID the application names by `id` (EINVAL: NULL, destroyed, or not an
    /// ID of ours; nothing is read through it).
    pub fn key(&self, id: *const rdma_cm_id) -> Result<IdKey, i32> {
        self.ids.key_of(id).ok_or(libc::EINVAL)
    }

    /// The ID of handle `k` (EINVAL: gone).
    pub fn id_at(&mut self, k: IdKey) -> Result<&mut Id, i32> {
        self.ids.get_mut(&k).ok_or(libc::EINVAL)
    }

    /// The C struct of handle `k` (NULL: gone).
    pub fn id_ptr(&self, k: IdKey) -> *mut rdma_cm_id {
        self.ids.ptr(k)
    }

    /// Adds an ID whose C struct is `c`; its handle.
    pub fn insert_id(&mut self, c: *mut rdma_cm_id, id: Id) -> IdKey {
        self.ids.insert(c, id)
    }

    /// Takes an ID out of the table (its pointer names nothing from now on).
    pub fn remove_id(&mut self, k: IdKey) -> Option<Id> {
        self.ids.remove(&k)
    }

    // ---- the other tables -------------------------------------------------------------------

    pub fn has_channel(&self, ch: usize) -> bool {
        self.channels.contains_key(&ch)
    }

    pub fn channel_mut(&mut self, ch: usize) -> Option<&mut Channel> {
        self.channels.get_mut(&ch)
    }

    pub fn channel(&self, ch: usize) -> Option<&Channel> {
        self.channels.get(&ch)
    }

    /// Every channel (to drop an ID's queued events wherever they wait).
    pub fn channels_mut(&mut self) -> impl Iterator<Item = &mut Channel> {
        self.channels.values_mut()
    }

    /// The ID of CM connection `c`.
    pub fn comm_owner(&self, c: CommId) -> Option<IdKey> {
        self.by_comm.get(&c).copied()
    }

    pub fn set_comm_owner(&mut self, c: CommId, k: IdKey) {
        self.by_comm.insert(c, k);
    }

    pub fn forget_comm(&mut self, c: CommId) -> Option<IdKey> {
        self.by_comm.remove(&c)
    }

    /// The ID listening on `service`.
    pub fn listener(&self, service: u64) -> Option<IdKey> {
        self.listeners.get(&service).copied()
    }

    pub fn set_listener(&mut self, service: u64, k: IdKey) {
        self.listeners.insert(service, k);
    }

    pub fn forget_listener(&mut self, service: u64) {
        self.listeners.remove(&service);
    }

    pub fn port_held(&self, ps: c_int, port: u16) -> bool {
        self.ports.contains(&(ps, port))
    }

    pub fn hold_port(&mut self, ps: c_int, port: u16) {
        self.ports.insert((ps, port));
    }

    pub fn release_port(&mut self, ps: c_int, port: u16) {
        self.ports.remove(&(ps, port));
    }

    /// An event box handed to the application, until its ack.
    pub fn hand_out(&mut self, ev: usize) {
        self.outstanding.insert(ev);
    }

    /// The ack of a handed-out event: false if `ev` is not one.
    pub fn take_back(&mut self, ev: usize) -> bool {
        self.outstanding.remove(&ev)
    }

    /// Events handed out and not acknowledged.
    pub fn outstanding(&self) -> impl Iterator<Item = usize> + '_ {
        self.outstanding.iter().copied()
    }

    /// Runs `f` on an ID's sans-IO core with the fault hook (EINVAL for an unknown ID).
    pub fn with_core<T>(&mut self, id: IdKey, f: impl FnOnce(&mut RdmaId, &mut dyn IdFaults) -> T) -> Result<T, i32> {
        let Lib { ids, faults, .. } = self;
        let st = ids.get_mut(&id).ok_or(libc::EINVAL)?;
        Ok(f(&mut st.core, faults.as_mut()))
    }

    /// What the one device gives a connection's path (ENODEV without one).
    pub fn device_path(&mut self) -> Result<DevicePath, i32> {
        let d = self.device()?;
        Ok(DevicePath { gid: d.gid, active_mtu: d.active_mtu })
    }

    // ---- channels and events ----------------------------------------------------------------

    pub fn new_channel(&mut self) -> Result<*mut rdma_event_channel, i32> {
        // SAFETY: eventfd has no memory arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(crate::export_errno());
        }
        // SAFETY: a new fd that nothing else owns.
        let owned = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let ch = Box::into_raw(Box::new(rdma_event_channel { fd }));
        self.channels.insert(ch as usize, Channel::new(owned));
        Ok(ch)
    }

    /// Drops a channel with its queued events; its fd closes once no thread waits on it.
    pub fn free_channel(&mut self, ch: usize) {
        if let Some(mut c) = self.channels.remove(&ch) {
            // A CONNECT_REQUEST dropped unread gives its listener's backlog room back.
            let taken: Vec<IdKey> = c
                .queue()
                .iter()
                .filter(|b| b.ev.event == crate::abi::event::CONNECT_REQUEST)
                .filter_map(|b| self.ids.key_of(b.ev.id))
                .collect();
            for id in taken {
                self.request_taken(id);
            }
            // Unreadable from now on: a thread still waiting on the fd waits for good.
            drop(c.retain(|_| false));
            drop(c);
            // SAFETY: the box came from new_channel and is freed once, here.
            unsafe { drop(Box::from_raw(ch as *mut rdma_event_channel)) };
        }
    }

    /// Queues an event for `id` on its channel.
    pub fn post(&mut self, id: IdKey, listen_id: IdKey, event: c_int, status: c_int, fill: impl FnOnce(&mut EventBox)) {
        // A CONNECT_REQUEST goes where the listener's events go (a synchronous listener's
        // child has a private channel of its own for what follows).
        let owner = if listen_id != 0 { listen_id } else { id };
        let Some(ch) = self.ids.get(&owner).map(|i| i.channel) else { return };
        if !self.channels.contains_key(&ch) {
            return;
        }
        let mut b = Box::new(EventBox {
            ev: rdma_cm_event {
                id: self.ids.ptr(id),
                // 0 ("no listener") names no ID: NULL.
                listen_id: self.ids.ptr(listen_id),
                event,
                status,
                // SAFETY: the union of plain C structs is valid all-zero.
                param: unsafe { std::mem::zeroed() },
            },
            private_data: Vec::new(),
            rep: None,
        });
        fill(&mut b);
        if event == crate::abi::event::CONNECT_REQUEST && listen_id != 0 {
            if let Some(l) = self.ids.get_mut(&listen_id) {
                l.pending += 1;
            }
            if let Some(child) = self.ids.get_mut(&id) {
                child.request_of = listen_id;
            }
        }
        let Some(c) = self.channels.get_mut(&ch) else { return };
        // The private data lives in the box, so the pointer stays valid until the ack.
        if !b.private_data.is_empty() {
            let (p, len) = (b.private_data.as_ptr() as *const c_void, b.private_data.len().min(255) as u8);
            // `conn` and `ud` both start with (private_data, private_data_len).
            b.ev.param.conn.private_data = p;
            b.ev.param.conn.private_data_len = len;
        }
        c.push(b);
    }

    // ---- driving the CM -------------------------------------------------------------------

    /// After any CM command or input: send what it queued, deliver its events, re-arm the
    /// timer.
    pub fn flush(&mut self) {
        self.fault_due();
        loop {
            let Some(cm) = self.cm.as_mut() else { return };
            let mut progressed = false;
            while let Some(out) = cm.poll_transmit() {
                progressed = true;
                let created = |c| self.by_comm.get(&c).and_then(|k| self.ids.get(k)).map(|st| st.created);
                if Lib::fault_drops(&out.mad, created) {
                    continue;
                }
                if let Some(d) = &self.dev {
                    let peer = gid_of(out.peer);
                    // SAFETY: both buffers are 16 and 256 bytes as the call requires. A lost
                    // MAD is recovered by the CM's retransmission, so the result is advisory.
                    unsafe { (d.gsi.send)(peer.as_ptr(), out.mad.as_ptr()) };
                }
            }
            let Some(cm) = self.cm.as_mut() else { return };
            if let Some(ev) = cm.poll_event() {
                self.on_cm_event(ev);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        self.report_counters();
        self.arm_timer();
    }

    fn arm_timer(&mut self) {
        let Some(cm) = self.cm.as_ref() else { return };
        // A timed fault's moment wakes the CM thread too (only while it is ahead: one due
        // earlier acts at the next flush that finds what it needs).
        let fault_at = Lib::fault_next_at().filter(|&t| t > now());
        let at = match (cm.poll_timeout(), fault_at) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(0),
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (at / 1_000_000_000) as _, tv_nsec: (at % 1_000_000_000) as _ },
        };
        // SAFETY: our timerfd; a zero value disarms it.
        unsafe { libc::timerfd_settime(self.timerfd, libc::TFD_TIMER_ABSTIME, &spec, ptr::null_mut()) };
    }

    fn on_cm_event(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::ReqReceived { comm_id, peer, req } => self.on_req(comm_id, peer, &req),
            CmEvent::SidrReqReceived { request_id, peer, service_id, private_data, .. } => {
                self.on_sidr_req(request_id, peer, service_id, private_data)
            }
            CmEvent::RequestExpired { comm_id } => self.on_request_expired(comm_id),
            ev => self.on_id_event(ev),
        }
    }

    /// A CM event on one ID: the sans-IO core decides the rdma_cm event, its status and the
    /// ID's state (`RdmaId::handle_cm`); this turns it into the C event.
    fn on_id_event(&mut self, ev: CmEvent) {
        use crate::abi::event as E;
        let comm = match &ev {
            CmEvent::RepReceived { comm_id, .. }
            | CmEvent::Established { comm_id }
            | CmEvent::Rejected { comm_id, .. }
            | CmEvent::Unreachable { comm_id, .. }
            | CmEvent::DreqReceived { comm_id, .. }
            | CmEvent::Disconnected { comm_id, .. }
            | CmEvent::TimewaitExit { comm_id } => *comm_id,
            CmEvent::SidrRepReceived { request_id, .. } | CmEvent::SidrTimeout { request_id } => *request_id,
            _ => return,
        };
        let Some(&id) = self.by_comm.get(&comm) else { return };
        if let (CmEvent::Rejected { reason, .. }, true) = (&ev, crate::export::traced()) {
            eprintln!("urxe: rdmacm: connection {comm:?} rejected by the peer, reason {reason}");
        }
        let Ok(decided) = self.with_core(id, |c, f| c.handle_cm(ev, f)) else {
            self.by_comm.remove(&comm);
            return;
        };
        let Some((post, ev)) = decided else { return };
        if post.forget_comm {
            self.by_comm.remove(&comm);
        }
        let (event, status) = (post.event, post.status);
        match ev {
            CmEvent::RepReceived { rep, .. } => {
                let Some(st) = self.ids.get(&id) else { return };
                let conn = conn_param(&st.agreed, rep.srq);
                // As librdmacm: the QP (the application's) is moved to RTR and RTS, and the RTU
                // sent, when the application takes this event (`on_retrieved`), never here.
                self.post(id, 0, event, status, |b| {
                    b.ev.param.conn = conn;
                    b.private_data = rep.private_data;
                    b.rep = Some(comm);
                });
            }
            CmEvent::Established { .. } => {
                let Some(st) = self.ids.get(&id) else { return };
                let conn = conn_param(&st.agreed, false);
                self.post(id, 0, event, status, |b| b.ev.param.conn = conn);
            }
            CmEvent::DreqReceived { private_data, .. } => {
                // The QP is the application's: it is not touched (as librdmacm; the kernel's
                // CMA never touches a userspace QP). rdma_disconnect moves it to ERR.
                let _ = self.cm.as_mut().map(|cm| cm.send_drep(now(), comm, &[]));
                self.post(id, 0, event, status, |b| b.private_data = private_data);
            }
            // REJECTED: the QP goes to ERR when the application takes the event (`on_retrieved`).
            CmEvent::Rejected { private_data, .. } | CmEvent::Disconnected { private_data, .. } => {
                self.post(id, 0, event, status, |b| b.private_data = private_data)
            }
            CmEvent::SidrRepReceived { qpn, qkey, private_data, .. } if event == E::ESTABLISHED => {
                let ah = self.ah_to_peer(id);
                self.post(id, 0, event, status, |b| {
                    b.ev.param.ud = rdma_ud_param {
                        private_data: ptr::null(),
                        private_data_len: 0,
                        ah_attr: ah,
                        qp_num: qpn,
                        qkey,
                    };
                    b.private_data = private_data;
                });
            }
            CmEvent::SidrRepReceived { private_data, .. } => {
                self.post(id, 0, event, status, |b| b.private_data = private_data)
            }
            _ => self.post(id, 0, event, status, |_| {}),
        }
    }

    pub(crate) fn set_state(&mut self, id: IdKey, s: IdState) {
        if let Some(st) = self.ids.get_mut(&id) {
            st.state = s;
        }
    }

    /// A free port of `ps` (the kernel's ephemeral range).
    pub fn ephemeral_port(&mut self, ps: c_int) -> Result<u16, i32> {
        for _ in 0..4096 {
            let p = 32768 + (self.random() % 28232) as u16;
            if !self.ports.contains(&(ps, p)) {
                return Ok(p);
            }
        }
        Err(libc::EADDRINUSE)
    }
}

pub(crate) fn conn_param(a: &Agreed, srq: bool) -> rdma_conn_param {
    rdma_conn_param {
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: a.responder_resources,
        initiator_depth: a.initiator_depth,
        flow_control: 0,
        retry_count: a.retry_count,
        rnr_retry_count: a.rnr_retry_count,
        srq: u8::from(srq),
        qp_num: a.remote_qpn,
    }
}

/// A fresh `rdma_cm_id` box.
pub fn new_id_box(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    verbs: *mut ibv_context,
) -> *mut rdma_cm_id {
    // SAFETY: rdma_cm_id is plain C data (pointers, ints, sockaddr_storage): all-zero is valid.
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = ch;
    c.context = context;
    c.ps = ps;
    c.verbs = verbs;
    c.qp_type = if ps == ps::UDP || ps == ps::IPOIB { qp_type::UD } else { qp_type::RC };
    Box::into_raw(Box::new(c))
}

/// The CM thread: MADs in, timers due; everything else under the lock in [`Lib::flush`].
fn cm_thread(gsi: GsiApi, gsi_fd: c_int, tfd: c_int) {
    // SAFETY: epoll calls on fds that live for the process; events are ours.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        eprintln!("urxe: rdmacm: epoll_create1 failed; the connection manager is not running");
        return;
    }
    for fd in [gsi_fd, tfd] {
        let mut e = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: as above.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut e) };
    }
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
    let mut peer = [0u8; 16];
    let mut mad = [0u8; MAD_LEN];
    loop {
        // SAFETY: `evs` has room for 4 events.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 4, -1) };
        if n < 0 {
            if crate::export_errno() == libc::EINTR {
                continue;
            }
            eprintln!("urxe: rdmacm: epoll_wait failed; the connection manager stops");
            return;
        }
        let mut buf = 0u64;
        // Both fds are non-blocking counters: reading clears them.
        // SAFETY: 8-byte reads into a local u64.
        unsafe {
            libc::read(gsi_fd, &mut buf as *mut u64 as *mut c_void, 8);
            libc::read(tfd, &mut buf as *mut u64 as *mut c_void, 8);
        }
        let mut lib = lock();
        // Bounded: at most a queue's worth per wakeup; the eventfd stays readable otherwise.
        let mut drained = false;
        for _ in 0..1024 {
            // SAFETY: 16- and 256-byte buffers as the call requires.
            if unsafe { (gsi.recv)(peer.as_mut_ptr(), mad.as_mut_ptr()) } != 0 {
                drained = true;
                break;
            }
            let t = now();
            if lib.divert(&peer, &mad, t) {
                continue; // another process of the address listens on its service
            }
            if let Some(cm) = lib.cm.as_mut() {
                cm.handle_mad(t, ip_of_gid(peer), &mad);
            }
            lib.flush();
        }
        if !drained {
            // More MADs are queued: come back after the timers.
            let one: u64 = 1;
            // SAFETY: an 8-byte write from a local u64 to the GSI eventfd.
            unsafe { libc::write(gsi_fd, &one as *const u64 as *const c_void, 8) };
        }
        let t = now();
        if let Some(cm) = lib.cm.as_mut() {
            if cm.poll_timeout().is_some_and(|d| d <= t) {
                cm.handle_timeout(t);
            }
        }
        lib.flush();
        drop(lib);
        // A destroy lingering for its DREP (api::destroy_id) looks again.
        notify_acked();
    }
}
