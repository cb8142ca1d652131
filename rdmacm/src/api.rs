//! The rdma_cm calls of `<rdma/rdma_cma.h>` (RDMACM_1.0 … 1.3, rsockets aside): thin C shims
//! over [`crate::core`]. Each checks its arguments (EINVAL for NULL or unknown handles,
//! never a crash), runs under the one lock, and for a synchronous ID (NULL channel) waits for
//! the event that completes the call, as librdmacm does.

use crate::abi::*;
use crate::cm_export;
use crate::core::*;
pub use crate::qp::*;
use crate::verbs::*;
use libc::{c_char, c_int, c_void, sockaddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::Arc;
use urxe::cm::{reject, sidr_status, ListenQp, State};
use urxe::transport::sys::cancellable_poll;
use urxe::wire::cm::{rdma_cm_service_id, CmaHeader, CMA_HEADER_LEN};

/// The responder resources / initiator depth a NULL `rdma_conn_param` stands for: the
/// device's `max_qp_rd_atom` (urxe reports rxe's 128).
const DEVICE_MAX_RD_ATOMIC: u8 = 128;
/// `IBV_EVENT_COMM_EST`.
const IBV_EVENT_COMM_EST: c_int = 4;

fn key<T>(p: *mut T) -> Result<usize, i32> {
    if p.is_null() {
        Err(libc::EINVAL)
    } else {
        Ok(p as usize)
    }
}

// ---- event channels and events ------------------------------------------------------------

cm_export! {
    /// A channel whose fd is readable exactly while events are queued.
    fn rdma_create_event_channel() -> *mut rdma_event_channel as ptr {
        lock().new_channel()
    }
}

cm_export! {
    fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) -> c_int as int {
        let ch = key(channel)?;
        let mut lib = lock();
        if !lib.channels.contains_key(&ch) {
            return Err(libc::EINVAL);
        }
        // IDs still on it lose their channel: their later events are dropped.
        for st in lib.ids.values_mut().filter(|s| s.channel == ch) {
            st.channel = 0;
        }
        lib.free_channel(ch);
        Ok(0)
    }
}

/// Takes the next event of a channel for a synchronous call (`sync_wait`): blocks unless its fd
/// is O_NONBLOCK (then EAGAIN).
///
/// A channel destroyed while a thread waits here is what the kernel's does to a thread blocked
/// in librdmacm's read of the ucma file: that thread keeps waiting (the file stays open under
/// it) and no event ever comes; it does not return an error. rping relies on it: its CM thread
/// waits for the next event while `main` destroys the ID and the channel and returns, and an
/// error there would make the thread `exit(-1)` first. So the waiter keeps blocking on the
/// channel's (still open, never again written) eventfd, taking no CPU; a non-blocking channel
/// gives EAGAIN.
fn get_event(ch: usize) -> Result<*mut EventBox, i32> {
    let fd = lock().channels.get(&ch).map(|c| Arc::clone(&c.fd)).ok_or(libc::EINVAL)?;
    loop {
        if let Some(b) = take_ready(ch, Arc::as_ptr(&fd))? {
            return Ok(b);
        }
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the call. The synchronous calls that wait here run
        // with cancellation off (`cm_export!`): no cancellation point.
        unsafe { libc::poll(&mut p, 1, -1) };
    }
}

fn ack(ev: usize) -> Result<(), i32> {
    if !lock().outstanding.remove(&ev) {
        return Err(libc::EINVAL);
    }
    notify_acked();
    // SAFETY: `ev` came from Box::into_raw in get_event and was outstanding until now.
    drop(unsafe { Box::from_raw(ev as *mut EventBox) });
    Ok(())
}

/// One step of taking a channel's event after a wait: the next event of channel `ch` whose
/// eventfd is `fd` (`Ok(None)`: none yet, wait again); a non-blocking channel with nothing
/// queued gives EAGAIN. The event and its eventfd count are taken together under the lock
/// ([`Channel::pop`]), so the fd is readable exactly while an event is queued. A channel
/// destroyed (or its key reused) since the wait began gives `Ok(None)` for ever: the waiter
/// keeps waiting on the still-open eventfd, drained and never again written (see
/// [`get_event`]). What taking the event does to the ID's QP happens here, in the caller's
/// thread ([`Lib::on_retrieved`]).
fn take_ready(ch: usize, fd: *const std::os::fd::OwnedFd) -> Result<Option<*mut EventBox>, i32> {
    // SAFETY: `fd` is a reference the caller holds across its wait.
    let raw = unsafe { (*fd).as_raw_fd() };
    let mut lib = lock();
    // The same key may name a newer channel: only this channel's own queue counts.
    let same = |c: &&mut Channel| std::ptr::eq(Arc::as_ptr(&c.fd), fd);
    let Some(mut b) = lib.channels.get_mut(&ch).filter(same).and_then(|c| c.pop()) else {
        drop(lib);
        return if nonblocking(raw) { Err(libc::EAGAIN) } else { Ok(None) };
    };
    crate::mcast::on_retrieved(&mut lib, &mut b);
    lib.on_retrieved(&mut b);
    if b.ev.event == event::CONNECT_REQUEST {
        lib.request_taken(b.ev.id as usize);
    }
    let p = Box::into_raw(b);
    lib.outstanding.insert(p as usize);
    Ok(Some(p))
}

/// The shape of the calls that wait for a channel's next event (`rdma_get_cm_event`, and
/// `rdma_get_request` on a synchronous listener): `start` checks the arguments and names the
/// channel (and what `finish` needs, `Copy`: nothing to drop), the call waits for the event,
/// and `finish` takes it.
///
/// A cancellation point while it waits, as librdmacm's read of its fd is. `start`, the taking
/// of the event and `finish` run under the panic guard with cancellation off (as `cm_export!`
/// calls do); the wait, a `poll` declared `C-unwind`, runs between them in frames that hold
/// nothing to drop (the channel's eventfd is held by a raw `Arc` reference), so a thread
/// cancelled there unwinds through them to its own cleanup handlers. Such a thread leaves its
/// reference behind: a channel destroyed later keeps its eventfd open.
fn event_call<T: Copy>(
    name: &str,
    start: impl FnOnce() -> Result<(usize, T), i32>,
    finish: impl FnOnce(*mut EventBox, T) -> Result<c_int, i32>,
) -> c_int {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use urxe::transport::sys::CancelOff;
    let (ch, fd, extra) = {
        let _off = CancelOff::begin();
        let r = catch_unwind(AssertUnwindSafe(|| -> Result<_, i32> {
            let (ch, extra) = start()?;
            let fd = lock().channels.get(&ch).map(|c| Arc::clone(&c.fd)).ok_or(libc::EINVAL)?;
            Ok((ch, Arc::into_raw(fd), extra))
        }));
        match r {
            Ok(Ok(v)) => v,
            r => return crate::export::finish(name, r.map(|r| r.map(|_| 0)), -1),
        }
    };
    loop {
        // The wait, with the caller's cancellation setting: until the eventfd is readable
        // (at once on a non-blocking channel, which `take_ready` answers with EAGAIN).
        // SAFETY: `fd` is the reference taken above, released only below.
        let raw = unsafe { (*fd).as_raw_fd() };
        if !nonblocking(raw) {
            let mut p = libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd for the call.
            unsafe { cancellable_poll(&mut p, 1, -1) };
        }
        let _off = CancelOff::begin();
        let taken = match catch_unwind(AssertUnwindSafe(|| take_ready(ch, fd))) {
            Ok(Ok(None)) => continue,
            Ok(Ok(Some(b))) => Ok(Ok(b)),
            Ok(Err(e)) => Ok(Err(e)),
            Err(p) => Err(p),
        };
        // SAFETY: releases the reference taken above, once.
        drop(unsafe { Arc::from_raw(fd) });
        let r = match taken {
            Ok(Ok(b)) => catch_unwind(AssertUnwindSafe(|| finish(b, extra))),
            Ok(Err(e)) => Ok(Err(e)),
            Err(p) => Err(p),
        };
        return crate::export::finish(name, r, -1);
    }
}

/// `rdma_get_cm_event(3)`: 0, or -1 with errno (EAGAIN on an empty non-blocking channel). A
/// cancellation point while it waits (see [`event_call`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    let start = || {
        let ch = key(channel)?;
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        Ok((ch, ()))
    };
    let finish = |b: *mut EventBox, ()| {
        // SAFETY: `event` is the caller's out-parameter (checked non-null in `start`); `ev` is
        // the box's first field.
        unsafe { *event = b as *mut rdma_cm_event };
        Ok(0)
    };
    event_call("rdma_get_cm_event", start, finish)
}

/// Whether `fd` is in non-blocking mode.
fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no pointer.
    unsafe { libc::fcntl(fd, libc::F_GETFL) & libc::O_NONBLOCK != 0 }
}

cm_export! {
    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int as int {
        ack(key(event)?)?;
        Ok(0)
    }
}

/// `rdma_event_str`: the name of an event type.
///
/// # Safety
/// None: any value is accepted.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&std::ffi::CStr; 16] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(event).ok().and_then(|i| NAMES.get(i)).map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
}

/// A synchronous ID's call completes with the next event on its private channel: `want`, or
/// the errno the event stands for. The event stays in `id->event` until the next one (or
/// `rdma_destroy_id`), as librdmacm keeps it.
fn sync_wait(id: *mut rdma_cm_id, want: c_int) -> Result<(), i32> {
    let ch = {
        let mut lib = lock();
        let st = lib.id(id)?;
        if !st.sync {
            return Ok(());
        }
        st.channel
    };
    // SAFETY: `id` is a live ID (checked above); only its owner thread waits on it.
    let prev = unsafe { std::mem::replace(&mut (*id).event, ptr::null_mut()) };
    if !prev.is_null() {
        let _ = ack(prev as usize);
    }
    let b = get_event(ch)?;
    // SAFETY: `b` is an outstanding event box.
    let (ev, status) = unsafe { ((*b).ev.event, (*b).ev.status) };
    // SAFETY: as above.
    unsafe { (*id).event = b as *mut rdma_cm_event };
    if ev == want || (want == event::ESTABLISHED && ev == event::CONNECT_RESPONSE) {
        return Ok(());
    }
    Err(match ev {
        event::REJECTED => libc::ECONNREFUSED,
        _ if status < 0 => -status,
        _ => libc::EINVAL,
    })
}

// ---- IDs ------------------------------------------------------------------------------------

fn create_id(channel: *mut rdma_event_channel, context: *mut c_void, ps: c_int) -> Result<*mut rdma_cm_id, i32> {
    if ![ps::TCP, ps::UDP, ps::IB, ps::IPOIB].contains(&ps) {
        return Err(libc::EINVAL);
    }
    let mut lib = lock();
    let (ch, sync) = if channel.is_null() {
        (lib.new_channel()?, true)
    } else if lib.channels.contains_key(&(channel as usize)) {
        (channel, false)
    } else {
        return Err(libc::EINVAL);
    };
    let b = new_id_box(ch, context, ps, ptr::null_mut());
    lib.ids.insert(b as usize, Id::new(ps, ch as usize, sync));
    Ok(b)
}

cm_export! {
    fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: c_int,
    ) -> c_int as int {
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let b = create_id(channel, context, ps)?;
        // SAFETY: the caller's out-parameter.
        unsafe { *id = b };
        Ok(0)
    }
}

/// How long `rdma_destroy_id` of a connection waits for the peer's DREP, and how often it sends
/// the DREQ again meanwhile.
const DESTROY_LINGER: std::time::Duration = std::time::Duration::from_millis(300);
const DESTROY_DREQ_EVERY: std::time::Duration = std::time::Duration::from_millis(30);

/// A connection that is up or waits for its DREP when its ID is destroyed: the kernel's CM
/// would go on retrying the DREQ after the process exits (its state lives in the kernel), but a
/// userspace CM goes with the process, and a lost DREQ would leave the peer connected forever
/// (an idle RC QP never notices). So the destroy sends the DREQ (tracked, as
/// `rdma_disconnect`) and waits up to [`DESTROY_LINGER`] for the DREP, sending the DREQ again
/// every [`DESTROY_DREQ_EVERY`] (the peer answers each copy). A peer that is gone costs the
/// linger once; one that answers, a round trip.
fn linger_for_drep(
    mut lib: std::sync::MutexGuard<'static, Lib>,
    c: urxe::cm::CommId,
) -> std::sync::MutexGuard<'static, Lib> {
    let t = now();
    let Some(cm) = lib.cm.as_mut() else { return lib };
    match cm.state(c) {
        Some(State::Established) => {
            if cm.disconnect(t, c, &[]).is_err() {
                return lib;
            }
            lib.flush();
        }
        Some(State::DreqSent) => {}
        _ => return lib,
    }
    let end = std::time::Instant::now() + DESTROY_LINGER;
    loop {
        let waiting = |l: &Lib| l.cm.as_ref().is_some_and(|cm| cm.state(c) == Some(State::DreqSent));
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return lib;
        }
        let (l, _) = wait_acked(lib, left.min(DESTROY_DREQ_EVERY), |l| !waiting(l));
        lib = l;
        if !waiting(&lib) {
            return lib;
        }
        if lib.cm.as_mut().is_some_and(|cm| cm.resend_dreq(c)) {
            lib.flush();
        }
    }
}

/// How long `rdma_destroy_id` waits for another thread to acknowledge the ID's events.
const DESTROY_WAITS_FOR_ACKS: std::time::Duration = std::time::Duration::from_secs(2);

fn destroy_id(id: *mut rdma_cm_id) -> Result<(), i32> {
    let k = key(id)?;
    let lib = lock();
    if !lib.ids.contains_key(&k) {
        return Err(libc::EINVAL);
    }
    // As librdmacm: the ID goes once every event reported for it (its own, or a
    // CONNECT_REQUEST on a listener) is acknowledged, so a CM thread still handling one (rping's
    // DISCONNECTED) finishes with it before the caller goes on to destroy the channel. A
    // synchronous ID's own pending event is acknowledged here. librdmacm waits forever; a
    // program that never acknowledges is not left hanging: after DESTROY_WAITS_FOR_ACKS the ID
    // goes anyway (URXE_TRACE=1 says so).
    // SAFETY: `id` is a live ID box (it is in `ids`).
    let own = unsafe { (*id).event } as usize;
    let (mut lib, acked) = wait_acked(lib, DESTROY_WAITS_FOR_ACKS, |lib| {
        !lib.outstanding.iter().any(|&b| {
            // SAFETY: outstanding boxes are live until acked, which needs the lock we hold.
            let ev = unsafe { &(*(b as *const EventBox)).ev };
            // A CONNECT_REQUEST counts on its listener (the new ID may go before its ack).
            b != own && ((ev.id == id && ev.listen_id.is_null()) || ev.listen_id == id)
        })
    });
    if !acked && crate::export::traced() {
        eprintln!("urxe: rdma_destroy_id: events of the ID still unacknowledged after {DESTROY_WAITS_FOR_ACKS:?}; destroying it anyway");
    }
    // Another thread may have destroyed it while we waited.
    if !lib.ids.contains_key(&k) {
        return Err(libc::EINVAL);
    }
    // From here no event is queued for the ID (its channel is detached): a DISCONNECTED that
    // the linger below brings about must not reach the application for an ID it destroyed.
    let (comm, channel) = {
        let st = lib.ids.get_mut(&k).ok_or(libc::EINVAL)?;
        let ch = st.channel;
        st.channel = 0;
        (st.comm, ch)
    };
    if let Some(c) = comm {
        lib = linger_for_drep(lib, c);
    }
    lib.request_taken(k);
    let mut st = lib.ids.remove(&k).ok_or(libc::EINVAL)?;
    st.channel = channel;
    if let Some(c) = st.comm {
        if let Some(cm) = lib.cm.as_mut() {
            cm.destroy(c);
        }
        lib.by_comm.remove(&c);
    }
    // Only the ID that holds the service gives it up (a REUSEADDR successor may hold it now).
    if let Some(s) = st.listen_service.filter(|s| lib.listeners.get(s) == Some(&k)) {
        let _ = lib.cm.as_mut().map(|cm| cm.unlisten(s));
        lib.listeners.remove(&s);
        if let Some(d) = lib.dev.as_ref() {
            // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
            let _ = unsafe { (d.gsi.unlisten)(s) };
        }
    }
    // A service steered at bind that no other ID of this process still holds.
    let still_held = |l: &Lib, s: u64| l.listeners.contains_key(&s) || l.ids.values().any(|o| o.steered == Some(s));
    if let Some(s) = st.steered.filter(|&s| st.listen_service != Some(s) && !still_held(&lib, s)) {
        if let Some(d) = lib.dev.as_ref() {
            // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
            let _ = unsafe { (d.gsi.unlisten)(s) };
        }
    }
    if let Some(src) = st.src.filter(|_| st.bound) {
        lib.ports.remove(&(st.ps, src.port()));
    }
    // Its queued events go too (a CONNECT_REQUEST waits on the listener's channel).
    for c in lib.channels.values_mut() {
        drop(c.retain(|b| b.ev.id != id));
    }
    // SAFETY: `id` was a live ID box until now; its event (if any) is outstanding.
    let ev = unsafe { (*id).event };
    if st.sync {
        lib.free_channel(st.channel);
    }
    lib.flush();
    drop(lib);
    if !ev.is_null() {
        let _ = ack(ev as usize);
    }
    if !st.path_rec.is_null() {
        // SAFETY: our own boxed path record, no longer referenced.
        drop(unsafe { Box::from_raw(st.path_rec) });
    }
    // SAFETY: the box came from new_id_box and is removed from every map.
    drop(unsafe { Box::from_raw(id) });
    Ok(())
}

cm_export! {
    fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int as int {
        destroy_id(id)?;
        Ok(0)
    }
}

/// True if something (a urxe group, kernel rxe) holds UDP port 4791 on `ip`.
fn roce_port_held(ip: IpAddr) -> bool {
    matches!(UdpSocket::bind(SocketAddr::new(ip, 4791)), Err(e) if e.kind() == std::io::ErrorKind::AddrInUse)
}

/// True if `ip` is an address of this host (a socket can bind to it).
fn is_local(ip: IpAddr) -> bool {
    ip.is_unspecified() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// True if a connection to `dst` is one to this host's urxe at `dev_addr` (see resolve_addr):
/// the device is on loopback (zero-config or a loopback URXE_ADDR), `dst` is a loopback
/// address, or another address of this host of the same family, and nothing holds UDP 4791
/// on it.
fn this_hosts_urxe(dst: IpAddr, dev_addr: IpAddr) -> bool {
    let here = dst.is_loopback() || (dst.is_ipv4() == dev_addr.is_ipv4() && !dst.is_unspecified() && is_local(dst));
    here && dev_addr.is_loopback() && !roce_port_held(dst)
}

/// `a` with port `port`, its IPv6 scope id kept.
fn with_port(mut a: SocketAddr, port: u16) -> SocketAddr {
    a.set_port(port);
    a
}

fn bind(lib: &mut Lib, id: *mut rdma_cm_id, addr: SocketAddr) -> Result<(), i32> {
    let k = id as usize;
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    if st.bound || !matches!(st.state, IdState::Idle) {
        return Err(libc::EINVAL);
    }
    let (ps, reuse) = (st.ps, st.reuseaddr);
    // With its scope id: a link-local address is local on the interface it names.
    let mut probe = addr;
    probe.set_port(0);
    if !addr.ip().is_unspecified() && UdpSocket::bind(probe).is_err() {
        return Err(libc::EADDRNOTAVAIL);
    }
    lib.device()?;
    let port = if addr.port() == 0 { lib.ephemeral_port(ps)? } else { addr.port() };
    if lib.ports.contains(&(ps, port)) && !reuse {
        return Err(libc::EADDRINUSE);
    }
    lib.ports.insert((ps, port));
    let st = lib.id(id)?;
    st.src = Some(with_port(addr, port));
    st.bound = true;
    st.state = IdState::AddrBound;
    // SAFETY: a live ID box.
    let c = unsafe { &mut *id };
    store_sockaddr(&mut c.route.addr.src_storage, with_port(addr, port));
    if !addr.ip().is_unspecified() {
        lib.fill_route(k);
    }
    Ok(())
}

cm_export! {
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int as int {
        key(id)?;
        // SAFETY: the caller passes a valid sockaddr (or NULL).
        let a = unsafe { load_sockaddr(addr) }?.ok_or(libc::EINVAL)?;
        let mut lib = lock();
        bind(&mut lib, id, a)?;
        steer_at_bind(&mut lib, id as usize);
        Ok(0)
    }
}

/// At most this many IDs of a process have their service steered at bind time: the group's
/// listener table (shared by every process of the address) holds 128.
const BIND_STEERED_MAX: usize = 16;

/// Steers the bound ID's service to this process now, at `rdma_bind_addr`, instead of in
/// `rdma_listen`: the group's listener table is a locked file and a rebuilt steering program,
/// 60-150 us, which made `rdma_listen` slower than the peer's address and route resolution.
/// A program that tells its peer the bound port before it listens (qperf 0.4.11) then lost the
/// race more often: a REQ that reached the group before the steering went to another process
/// of the address (the default slot), which answered REJ 8. Best effort: without steering
/// here, `rdma_listen` steers as before. A REQ for a steered service that is not listened on
/// yet gets this process's REJ 8, as it would have got another's.
fn steer_at_bind(lib: &mut Lib, k: usize) {
    if lib.ids.values().filter(|s| s.steered.is_some()).count() >= BIND_STEERED_MAX {
        return;
    }
    let Some(service) = lib.ids.get(&k).and_then(|st| st.src.map(|s| rdma_cm_service_id(st.ps as u16, s.port())))
    else {
        return;
    };
    let Ok(gsi) = lib.device().map(|d| d.gsi) else { return };
    // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
    if unsafe { (gsi.listen)(service) } == 0 {
        if let Some(st) = lib.ids.get_mut(&k) {
            st.steered = Some(service);
        }
    }
}

fn resolve_addr(id: *mut rdma_cm_id, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), i32> {
    let k = key(id)?;
    let mut lib = lock();
    let dev_addr = lib.device()?.addr;
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    if !matches!(st.state, IdState::Idle | IdState::AddrBound) {
        return Err(libc::EINVAL);
    }
    if st.state == IdState::Idle {
        let any =
            if dev_addr.is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
        bind(&mut lib, id, src.unwrap_or(SocketAddr::new(any, 0)))?;
    }
    // The route the host would take to the peer; the source is the urxe device's address. A
    // multicast group is reached through the interface of that address (as the kernel
    // resolves one from the bound source), whether or not a route covers the group.
    let any = if dst.is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
    let from = if dst.ip().is_multicast() && dst.is_ipv4() == dev_addr.is_ipv4() { dev_addr } else { any };
    let probe = UdpSocket::bind(SocketAddr::new(from, 0)).and_then(|s| s.connect(SocketAddr::new(dst.ip(), 4791)));
    let port = lib.ids[&k].src.map_or(0, |s| s.port());
    // A loopback destination where no RoCE endpoint holds UDP 4791, seen from a loopback
    // device, is this host's urxe: every process of a user shares the device address (the
    // zero-config group, docs/DESIGN.md), so that is where the peer's QP1 is (`rping -c -a
    // 127.0.0.1` reaches `rping -s` of the same user). A loopback address that another urxe
    // group (URXE_ADDR) or kernel rxe holds is left as it is. The same holds for the other
    // addresses of this host (the kernel's CM loops a local destination back too): libfabric
    // lists urxe0 under every interface address, since rdma_bind_addr takes any local one.
    let dst = if this_hosts_urxe(dst.ip(), dev_addr) { SocketAddr::new(dev_addr, dst.port()) } else { dst };
    let st = lib.id(id)?;
    st.dst = Some(dst);
    st.src = Some(SocketAddr::new(dev_addr, port));
    let routable = probe.is_ok() && dst.is_ipv4() == dev_addr.is_ipv4() && !dst.ip().is_unspecified();
    if routable {
        st.state = IdState::AddrResolved;
        lib.fill_route(k);
        lib.post(k, 0, event::ADDR_RESOLVED, 0, |_| {});
    } else {
        let e = probe.err().and_then(|e| e.raw_os_error()).unwrap_or(libc::EHOSTUNREACH);
        lib.post(k, 0, event::ADDR_ERROR, -e, |_| {});
    }
    Ok(())
}

cm_export! {
    fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut sockaddr,
        dst_addr: *mut sockaddr,
        timeout_ms: c_int,
    ) -> c_int as int {
        let _ = timeout_ms;
        // SAFETY: valid sockaddrs or NULL, per the man page.
        let (src, dst) = unsafe { (load_sockaddr(src_addr)?, load_sockaddr(dst_addr)?) };
        resolve_addr(id, src, dst.ok_or(libc::EINVAL)?)?;
        sync_wait(id, event::ADDR_RESOLVED)?;
        Ok(0)
    }
}

fn resolve_route(id: *mut rdma_cm_id) -> Result<(), i32> {
    let k = key(id)?;
    let mut lib = lock();
    let st = lib.id(id)?;
    if st.state != IdState::AddrResolved {
        return Err(libc::EINVAL);
    }
    st.state = IdState::RouteResolved;
    lib.fill_route(k);
    lib.post(k, 0, event::ROUTE_RESOLVED, 0, |_| {});
    Ok(())
}

cm_export! {
    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int as int {
        let _ = timeout_ms;
        resolve_route(id)?;
        sync_wait(id, event::ROUTE_RESOLVED)?;
        Ok(0)
    }
}

cm_export! {
    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int as int {
        let k = key(id)?;
        let mut lib = lock();
        let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
        if st.state == IdState::Idle {
            bind(&mut lib, id, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
        }
        let st = lib.id(id)?;
        if st.state != IdState::AddrBound {
            return Err(libc::EINVAL);
        }
        let service = rdma_cm_service_id(st.ps as u16, st.src.map_or(0, |s| s.port()));
        let steered = st.steered == Some(service);
        // The kernel's cma_check_req_qp_type: requests for the listener's own QP type only.
        let qp = match st.qp_type {
            qp_type::RC => ListenQp::Rc,
            qp_type::UC => ListenQp::Uc,
            qp_type::UD => ListenQp::Ud,
            _ => ListenQp::Any,
        };
        // As the kernel's ucma: a backlog of 0 or less, or above max_backlog, is max_backlog.
        st.backlog = u32::try_from(backlog).ok().filter(|&b| b > 0 && b < MAX_BACKLOG).unwrap_or(MAX_BACKLOG);
        lib.cm()?.listen(service, qp).map_err(|e| e.errno())?;
        // At a shared address, REQs for the service must be steered to this process (done
        // already if rdma_bind_addr could, see steer_at_bind).
        let gsi = lib.device()?.gsi;
        // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
        if !steered && unsafe { (gsi.listen)(service) } != 0 {
            let e = crate::export_errno();
            let _ = lib.cm.as_mut().map(|cm| cm.unlisten(service));
            return Err(e);
        }
        lib.listeners.insert(service, k);
        let st = lib.id(id)?;
        st.listen_service = Some(service);
        st.state = IdState::Listening;
        Ok(0)
    }
}

fn qp_num(id: *mut rdma_cm_id) -> Option<u32> {
    // SAFETY: `id` is live; its qp (if any) is a QP libibverbs created for it.
    unsafe { (*id).qp.cast::<ibv_qp_head>().as_ref().map(|q| q.qp_num) }
}

/// The user's private data (at most `max` bytes), or EINVAL.
fn user_data(p: *const c_void, len: u8, max: usize) -> Result<Vec<u8>, i32> {
    if len == 0 || p.is_null() {
        return Ok(Vec::new());
    }
    if usize::from(len) > max {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's private data of `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, usize::from(len)) }.to_vec())
}

fn default_param() -> rdma_conn_param {
    rdma_conn_param {
        private_data: ptr::null(),
        private_data_len: 0,
        responder_resources: DEVICE_MAX_RD_ATOMIC,
        initiator_depth: DEVICE_MAX_RD_ATOMIC,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}

fn connect(id: *mut rdma_cm_id, param: Option<rdma_conn_param>) -> Result<(), i32> {
    let k = key(id)?;
    let mut lib = lock();
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    if st.state != IdState::RouteResolved {
        return Err(libc::EINVAL);
    }
    let (src, dst, ps, ud) = (st.src, st.dst, st.ps, st.qp_type == qp_type::UD);
    let (src, dst) = (src.ok_or(libc::EINVAL)?, dst.ok_or(libc::EINVAL)?);
    let mut p = param.unwrap_or_else(default_param);
    let qpn = qp_num(id).unwrap_or(p.qp_num);
    let max = if ud { 216 } else { 92 } - CMA_HEADER_LEN;
    let user = user_data(p.private_data, p.private_data_len, max)?;
    let mut pdata = vec![0u8; CMA_HEADER_LEN];
    CmaHeader { version: 0, src_port: src.port(), src: src.ip(), dst: dst.ip() }.emit(&mut pdata);
    pdata.extend_from_slice(&user);
    let t = now();
    let comm = if ud {
        let service = rdma_cm_service_id(ps as u16, dst.port());
        lib.cm()?.sidr_request(t, dst.ip(), service, SIDR_TIMEOUT, MAX_CM_RETRIES, &pdata).map_err(|e| e.errno())?
    } else {
        p.responder_resources = p.responder_resources.min(DEVICE_MAX_RD_ATOMIC);
        p.initiator_depth = p.initiator_depth.min(DEVICE_MAX_RD_ATOMIC);
        let psn = (lib.random() as u32) & 0xFF_FFFF;
        let mtu = lib.device()?.active_mtu;
        let st = lib.id(id)?;
        st.agreed.local_psn = psn;
        st.agreed.retry_count = p.retry_count.min(7);
        st.agreed.path_mtu = mtu;
        let cp = lib.connect_params(k, &p, qpn, pdata)?;
        lib.cm()?.connect(t, &cp).map_err(|e| e.errno())?
    };
    lib.by_comm.insert(comm, k);
    let st = lib.id(id)?;
    st.comm = Some(comm);
    st.state = IdState::Connecting;
    lib.flush();
    Ok(())
}

cm_export! {
    fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int as int {
        // SAFETY: NULL or the caller's parameters.
        let p = unsafe { conn_param.as_ref().copied() };
        connect(id, p)?;
        sync_wait(id, event::ESTABLISHED)?;
        Ok(0)
    }
}

fn accept(id: *mut rdma_cm_id, param: Option<rdma_conn_param>) -> Result<bool, i32> {
    let k = key(id)?;
    let mut lib = lock();
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    if st.state != IdState::RequestReceived {
        return Err(libc::EINVAL);
    }
    let comm = st.comm.ok_or(libc::EINVAL)?;
    let ud = st.qp_type == qp_type::UD;
    let p = param.unwrap_or_else(default_param);
    let qpn = qp_num(id).unwrap_or(p.qp_num);
    if ud {
        let user = user_data(p.private_data, p.private_data_len, 136)?;
        lib.cm()?.send_sidr_rep(comm, sidr_status::VALID, qpn, RDMA_UDP_QKEY, &user).map_err(|e| e.errno())?;
        lib.by_comm.remove(&comm);
        let st = lib.id(id)?;
        st.comm = None;
        st.state = IdState::Connected;
        lib.flush();
        return Ok(false);
    }
    let user = user_data(p.private_data, p.private_data_len, 196)?;
    let st = lib.id(id)?;
    st.agreed.responder_resources = p.responder_resources.min(st.agreed.responder_resources.max(1));
    st.agreed.initiator_depth = p.initiator_depth.min(st.agreed.initiator_depth);
    if !id.is_null() && qp_num(id).is_some() {
        if let Err(e) = lib.qp_to_rts(k) {
            let _ = lib.cm()?.reject(comm, reject::CONSUMER_DEFINED, &[]);
            lib.flush();
            return Err(e);
        }
    }
    let ap = lib.accept_params(k, &p, qpn, user);
    lib.cm()?.accept(now(), comm, &ap).map_err(|e| e.errno())?;
    lib.id(id)?.state = IdState::Accepted;
    lib.flush();
    Ok(true)
}

cm_export! {
    fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int as int {
        // SAFETY: NULL or the caller's parameters.
        let p = unsafe { conn_param.as_ref().copied() };
        if accept(id, p)? {
            sync_wait(id, event::ESTABLISHED)?;
        }
        Ok(0)
    }
}

fn reject_id(id: *mut rdma_cm_id, pdata: *const c_void, len: u8) -> Result<(), i32> {
    let k = key(id)?;
    let mut lib = lock();
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    let comm = st.comm.ok_or(libc::EINVAL)?;
    let ud = st.qp_type == qp_type::UD;
    let user = user_data(pdata, len, if ud { 136 } else { 148 })?;
    if ud {
        lib.cm()?.send_sidr_rep(comm, sidr_status::REJECTED, 0, 0, &user).map_err(|e| e.errno())?;
    } else {
        lib.cm()?.reject(comm, reject::CONSUMER_DEFINED, &user).map_err(|e| e.errno())?;
    }
    lib.by_comm.remove(&comm);
    let st = lib.id(id)?;
    st.comm = None;
    st.state = IdState::Disconnected;
    lib.flush();
    Ok(())
}

cm_export! {
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int as int {
        reject_id(id, private_data, private_data_len)?;
        Ok(0)
    }
}

cm_export! {
    /// ECE is not negotiated (rxe has none): a plain reject.
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int as int {
        reject_id(id, private_data, private_data_len)?;
        Ok(0)
    }
}

cm_export! {
    fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int as int {
        let k = key(id)?;
        let mut lib = lock();
        let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
        let (comm, state) = (st.comm, st.state);
        if !matches!(state, IdState::Connected | IdState::Disconnected | IdState::Accepted | IdState::ResponseReceived) {
            return Err(libc::EINVAL);
        }
        lib.qp_to_err(k);
        let t = now();
        if let Some(c) = comm {
            let cm = lib.cm()?;
            match cm.state(c) {
                Some(State::Established) => cm.disconnect(t, c, &[]).map_err(|e| e.errno())?,
                Some(State::DreqRcvd) => cm.send_drep(t, c, &[]).map_err(|e| e.errno())?,
                Some(State::RepSent | State::MraRepRcvd | State::RepRcvd | State::MraRepSent) => {
                    cm.destroy(c);
                    lib.by_comm.remove(&c);
                }
                _ => {}
            }
        }
        lib.flush();
        Ok(0)
    }
}

cm_export! {
    fn rdma_establish(id: *mut rdma_cm_id) -> c_int as int {
        let k = key(id)?;
        let mut lib = lock();
        let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
        if st.state != IdState::ResponseReceived {
            return Err(libc::EINVAL);
        }
        let comm = st.comm.ok_or(libc::EINVAL)?;
        lib.cm()?.send_rtu(comm, &[]).map_err(|e| e.errno())?;
        lib.id(id)?.state = IdState::Connected;
        lib.flush();
        Ok(0)
    }
}

cm_export! {
    fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int as int {
        let k = key(id)?;
        let mut lib = lock();
        let comm = lib.ids.get(&k).ok_or(libc::EINVAL)?.comm;
        if event == IBV_EVENT_COMM_EST {
            if let Some(c) = comm {
                let cm = lib.cm()?;
                if matches!(cm.state(c), Some(State::RepSent | State::MraRepRcvd)) {
                    cm.establish(c).map_err(|e| e.errno())?;
                }
            }
        }
        lib.flush();
        Ok(0)
    }
}

cm_export! {
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int as int {
        let k = key(id)?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attribute struct (qp_state says which transition).
        let state = unsafe { (*qp_attr).qp_state };
        let (a, m) = lock().qp_attr(k, state)?;
        // SAFETY: the caller's out-parameters.
        unsafe {
            *qp_attr = a;
            *qp_attr_mask = m;
        }
        Ok(0)
    }
}

cm_export! {
    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int as int {
        let k = key(id)?;
        let mut lib = lock();
        let (old, was_sync) = {
            let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
            (st.channel, st.sync)
        };
        let (new, sync) = if channel.is_null() {
            (lib.new_channel()? as usize, true)
        } else if lib.channels.contains_key(&(channel as usize)) {
            (channel as usize, false)
        } else {
            return Err(libc::EINVAL);
        };
        // Queued events of this ID follow it to the new channel.
        // Their counts go with them: the old channel's fd is readable only while it still
        // has events, the new one's as soon as they are there.
        let moved = lib.channels.get_mut(&old).map_or_else(Vec::new, |c| c.retain(|b| b.ev.id != id));
        let st = lib.id(id)?;
        st.channel = new;
        st.sync = sync;
        // SAFETY: a live ID box.
        unsafe { (*id).channel = new as *mut rdma_event_channel };
        if let Some(c) = lib.channels.get_mut(&new) {
            for b in moved {
                c.push(b);
            }
        }
        if was_sync && old != new {
            lib.free_channel(old);
        }
        Ok(0)
    }
}

cm_export! {
    fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: usize,
    ) -> c_int as int {
        let k = key(id)?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        let mut lib = lock();
        let st = lib.ids.get_mut(&k).ok_or(libc::EINVAL)?;
        // SAFETY: `optval` holds `optlen` bytes (checked per option below).
        let byte = || unsafe { *(optval as *const u8) };
        // SAFETY: as above.
        let int = || unsafe { (optval as *const c_int).read_unaligned() };
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen >= 1 => st.tos = byte(),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) if optlen >= 4 => st.reuseaddr = int() != 0,
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) if optlen >= 4 => {}
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen >= 1 => st.ack_timeout = Some(byte().min(31)),
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => return Err(libc::EOPNOTSUPP),
            (RDMA_OPTION_ID | RDMA_OPTION_IB, _) if optlen == 0 => return Err(libc::EINVAL),
            _ => return Err(libc::ENOSYS),
        }
        Ok(0)
    }
}

fn port_of(id: *mut rdma_cm_id, dst: bool) -> u16 {
    let Ok(k) = key(id) else { return 0 };
    let lib = lock();
    let st = lib.ids.get(&k);
    let a = if dst { st.and_then(|s| s.dst) } else { st.and_then(|s| s.src) };
    a.map_or(0, |s| s.port().to_be())
}

/// `rdma_get_src_port`: the local port in network byte order (0 for an unknown ID).
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    std::panic::catch_unwind(|| port_of(id, false)).unwrap_or(0)
}

/// `rdma_get_dst_port`: the peer's port in network byte order (0 for an unknown ID).
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    std::panic::catch_unwind(|| port_of(id, true)).unwrap_or(0)
}

// ---- devices, QPs, SRQs -----------------------------------------------------------------------

cm_export! {
    fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context as ptr {
        let ctx = lock().device()?.ctx;
        // SAFETY: calloc of two pointers, freed by rdma_free_devices.
        let list = unsafe { libc::calloc(2, std::mem::size_of::<*mut ibv_context>()) } as *mut *mut ibv_context;
        if list.is_null() {
            return Err(libc::ENOMEM);
        }
        // SAFETY: `list` has two slots; `num_devices` is NULL or the caller's.
        unsafe {
            *list = ctx;
            if !num_devices.is_null() {
                *num_devices = 1;
            }
        }
        Ok(list)
    }
}

/// `rdma_free_devices`.
///
/// # Safety
/// `list` is NULL or came from `rdma_get_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: calloc'd by rdma_get_devices (free(NULL) is a no-op).
    unsafe { libc::free(list as *mut c_void) };
}

cm_export! {
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int as int {
        let k = key(id)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let mut lib = lock();
        lib.device()?;
        lib.ids.get(&k).ok_or(libc::EINVAL)?;
        let pd = if pd.is_null() { lib.shared_pd()? } else { pd };
        // SAFETY: a PD and the caller's attributes.
        let srq = unsafe { ibv_create_srq(pd, attr) };
        if srq.is_null() {
            return Err(crate::export_errno());
        }
        // SAFETY: a live ID box.
        unsafe {
            (*id).srq = srq;
            (*id).pd = pd;
        }
        Ok(0)
    }
}

cm_export! {
    /// Extended SRQs (XRC, tag matching) are not offered through rdma_cm: EOPNOTSUPP.
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> c_int as int {
        key(id)?;
        key(attr)?;
        Err(libc::EOPNOTSUPP)
    }
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(), i32> {
        let k = key(id)?;
        lock().ids.get(&k).ok_or(libc::EINVAL)?;
        // SAFETY: a live ID box; its SRQ is destroyed once.
        unsafe {
            if !(*id).srq.is_null() {
                ibv_destroy_srq((*id).srq);
                (*id).srq = ptr::null_mut();
            }
        }
        Ok(())
    }));
    crate::export::finish("rdma_destroy_srq", r, ());
}

// ---- synchronous endpoints --------------------------------------------------------------------

/// `rdma_get_request(3)` on a synchronous listening endpoint: the next connection request's
/// ID (its QP created when the endpoint has QP attributes). A cancellation point while it
/// waits, as librdmacm's is (see [`event_call`]).
///
/// # Safety
/// The pointer arguments are what librdmacm's man page says they are.
#[no_mangle]
pub unsafe extern "C-unwind" fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int {
    let start = || {
        let k = key(listen)?;
        if id.is_null() {
            return Err(libc::EINVAL);
        }
        let lib = lock();
        let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
        if !st.sync || st.state != IdState::Listening {
            return Err(libc::EINVAL);
        }
        Ok((st.channel, st.ep_qp))
    };
    let finish = |b: *mut EventBox, ep: Option<(ibv_qp_init_attr, *mut ibv_pd)>| {
        // SAFETY: an outstanding event box.
        let (ev, status, child) = unsafe { ((*b).ev.event, (*b).ev.status, (*b).ev.id) };
        if ev != event::CONNECT_REQUEST || status != 0 {
            let _ = ack(b as usize);
            return Err(if status < 0 { -status } else { libc::EINVAL });
        }
        // SAFETY: the child ID the event names is live (its destroy would have dropped the
        // event); the request event stays with it, as librdmacm keeps it in `id->event`.
        unsafe { (*child).event = b as *mut rdma_cm_event };
        if let Some((mut attr, pd)) = ep {
            if let Err(e) = create_qp(child, pd, &mut attr) {
                let _ = reject_id(child, ptr::null(), 0);
                let _ = destroy_id(child);
                return Err(e);
            }
        }
        // SAFETY: the caller's out-parameter (checked non-null in `start`).
        unsafe { *id = child };
        Ok(0)
    };
    event_call("rdma_get_request", start, finish)
}

cm_export! {
    fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> c_int as int {
        if id.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's address info (from rdma_getaddrinfo).
        let r = unsafe { &*res };
        let ps = if r.ai_port_space != 0 {
            r.ai_port_space
        } else if r.ai_qp_type == qp_type::UD {
            ps::UDP
        } else {
            ps::TCP
        };
        let cid = create_id(ptr::null_mut(), ptr::null_mut(), ps)?;
        let setup = || -> Result<(), i32> {
            if r.ai_qp_type != 0 {
                lock().id(cid)?.qp_type = r.ai_qp_type;
            }
            let qpt = lock().id(cid)?.qp_type;
            // SAFETY: sockaddrs of the address info (or NULL).
            let (src, dst) = unsafe { (load_sockaddr(r.ai_src_addr)?, load_sockaddr(r.ai_dst_addr)?) };
            if r.ai_flags & RAI_PASSIVE != 0 {
                let src = src.unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
                bind(&mut lock(), cid, src)?;
                if !qp_init_attr.is_null() {
                    // SAFETY: the caller's attributes, copied for every request.
                    let mut a = unsafe { *qp_init_attr };
                    a.qp_type = qpt;
                    lock().id(cid)?.ep_qp = Some((a, pd));
                }
                return Ok(());
            }
            resolve_addr(cid, src, dst.ok_or(libc::EINVAL)?)?;
            sync_wait(cid, event::ADDR_RESOLVED)?;
            resolve_route(cid)?;
            sync_wait(cid, event::ROUTE_RESOLVED)?;
            if !qp_init_attr.is_null() {
                // As librdmacm: the endpoint's QP type is the address info's.
                // SAFETY: the caller's attributes.
                unsafe { (*qp_init_attr).qp_type = qpt };
                create_qp(cid, pd, qp_init_attr)?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            let _ = destroy_id(cid);
            return Err(e);
        }
        // SAFETY: the caller's out-parameter.
        unsafe { *id = cid };
        Ok(0)
    }
}

/// `rdma_destroy_ep`: the QP (and the CQs made for it), then the ID.
///
/// # Safety
/// `id` is NULL or an ID of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        destroy_qp(id)?;
        destroy_id(id)
    }));
    crate::export::finish("rdma_destroy_ep", r, ());
}

// ---- multicast and ECE ------------------------------------------------------------------------

cm_export! {
    /// Joins the group at `addr` as a full member (see [`crate::mcast`]).
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int as int {
        key(id)?;
        // SAFETY: `addr` is a sockaddr per the man page (NULL is refused).
        unsafe { crate::mcast::join(id, key(addr)? as *const sockaddr, context, false) }?;
        sync_wait(id, event::MULTICAST_JOIN)?;
        Ok(0)
    }
}

cm_export! {
    /// `rdma_join_multicast` with join flags: full member, or send-only full member (the QP is
    /// not attached, so it sends to the group without receiving from it). Both attributes are
    /// required (EINVAL), unknown ones are EOPNOTSUPP, as librdmacm.
    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int as int {
        use crate::mcast::*;
        key(id)?;
        key(attr)?;
        // SAFETY: the caller's attribute struct.
        let (comp_mask, join_flags, addr) = unsafe { ((*attr).comp_mask, (*attr).join_flags, (*attr).addr) };
        if comp_mask & !(JOIN_MC_ATTR_ADDRESS | JOIN_MC_ATTR_JOIN_FLAGS) != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if comp_mask & JOIN_MC_ATTR_ADDRESS == 0
            || comp_mask & JOIN_MC_ATTR_JOIN_FLAGS == 0
            || !matches!(join_flags, JOIN_FLAG_FULLMEMBER | JOIN_FLAG_SENDONLY_FULLMEMBER)
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: `addr` is a sockaddr per the man page (NULL is refused).
        unsafe { join(id, key(addr)? as *const sockaddr, context, join_flags == JOIN_FLAG_SENDONLY_FULLMEMBER) }?;
        sync_wait(id, event::MULTICAST_JOIN)?;
        Ok(0)
    }
}

cm_export! {
    /// Leaves a joined group: EADDRNOTAVAIL if `addr` was not joined on this ID.
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int as int {
        key(id)?;
        // SAFETY: `addr` is a sockaddr per the man page (NULL is refused).
        unsafe { crate::mcast::leave(id, key(addr)? as *const sockaddr) }?;
        Ok(0)
    }
}

cm_export! {
    /// Kept for `rdma_get_remote_ece` symmetry; urxe (like rxe) negotiates no ECE options.
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int as int {
        let k = key(id)?;
        if ece.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's ECE value.
        let e = unsafe { *ece };
        lock().ids.get_mut(&k).ok_or(libc::EINVAL)?.local_ece = e;
        Ok(0)
    }
}

cm_export! {
    /// The peer's ECE: always none (vendor 0): no ECE options travel in urxe's CM messages.
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int as int {
        let k = key(id)?;
        if ece.is_null() {
            return Err(libc::EINVAL);
        }
        lock().ids.get(&k).ok_or(libc::EINVAL)?;
        // SAFETY: the caller's out-parameter.
        unsafe { *ece = ibv_ece::default() };
        Ok(0)
    }
}
