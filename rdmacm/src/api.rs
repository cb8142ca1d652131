//! The rdma_cm calls of `<rdma/rdma_cma.h>` (RDMACM_1.0 … 1.3, rsockets aside): thin C shims
//! over [`crate::core`]. Each checks its arguments (EINVAL for NULL or unknown handles,
//! never a crash), runs under the one lock, and for a synchronous ID (NULL channel) waits for
//! the event that completes the call, as librdmacm does.

use crate::abi::*;
use crate::core::*;
use crate::events::*;
pub use crate::qp::*;
use crate::verbs::*;
use libc::{c_int, c_void, sockaddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::ptr;
use urxe::cm::rdma_conn::{Accept, ConnParam, Connect, DevicePath, Reject};
use urxe::cm::rdma_id::{Before, Resolution};
use urxe::cm::{reject, sidr_status, ListenQp, State};
use urxe::engine::faults::CmStep;

// ---- IDs ------------------------------------------------------------------------------------

pub(crate) fn create_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
) -> Result<*mut rdma_cm_id, i32> {
    if ![ps::TCP, ps::UDP, ps::IB, ps::IPOIB].contains(&ps) {
        return Err(libc::EINVAL);
    }
    let mut lib = lock();
    let (ch, sync) = if channel.is_null() {
        (lib.new_channel()?, true)
    } else if lib.has_channel(channel as usize) {
        (channel, false)
    } else {
        return Err(libc::EINVAL);
    };
    let b = new_id_box(ch, context, ps, ptr::null_mut());
    lib.insert_id(b, Id::new(ps, ch as usize, sync));
    Ok(b)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return Err(libc::EINVAL);
    }
    let b = create_id(channel, context, ps)?;
    // SAFETY: the caller's out-parameter.
    unsafe { *id = b };
    Ok(0)
}

/// How long `rdma_destroy_id` of a connection waits for the peer's DREP, and how often it sends
/// the DREQ again meanwhile.
pub(crate) const DESTROY_LINGER: std::time::Duration = std::time::Duration::from_millis(300);
pub(crate) const DESTROY_DREQ_EVERY: std::time::Duration = std::time::Duration::from_millis(30);

/// A connection that is up or waits for its DREP when its ID is destroyed: the kernel's CM
/// would go on retrying the DREQ after the process exits (its state lives in the kernel), but a
/// userspace CM goes with the process, and a lost DREQ would leave the peer connected forever
/// (an idle RC QP never notices). So the destroy sends the DREQ (tracked, as
/// `rdma_disconnect`) and waits up to [`DESTROY_LINGER`] for the DREP, sending the DREQ again
/// every [`DESTROY_DREQ_EVERY`] (the peer answers each copy). A peer that is gone costs the
/// linger once; one that answers, a round trip.
pub(crate) fn linger_for_drep(
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
pub(crate) const DESTROY_WAITS_FOR_ACKS: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) fn destroy_id(id: *mut rdma_cm_id) -> Result<(), i32> {
    let lib = lock();
    let k = lib.key(id)?;
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
        !lib.outstanding().any(|b| {
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
        lib.forget_comm(c);
    }
    // Only the ID that holds the service gives it up (a REUSEADDR successor may hold it now).
    if let Some(s) = st.listen_service.filter(|s| lib.listener(*s) == Some(k)) {
        let _ = lib.cm.as_mut().map(|cm| cm.unlisten(s));
        lib.forget_listener(s);
        if let Some(d) = lib.dev.as_ref() {
            // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
            let _ = unsafe { (d.gsi.unlisten)(s) };
        }
    }
    // A service steered at bind that no other ID of this process still holds.
    let still_held = |l: &Lib, s: u64| l.listener(s).is_some() || l.ids.values().any(|o| o.steered == Some(s));
    if let Some(s) = st.steered.filter(|&s| st.listen_service != Some(s) && !still_held(&lib, s)) {
        if let Some(d) = lib.dev.as_ref() {
            // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
            let _ = unsafe { (d.gsi.unlisten)(s) };
        }
    }
    if let Some(src) = st.src.filter(|_| st.bound) {
        lib.release_port(st.ps, src.port());
    }
    // Its queued events go too (a CONNECT_REQUEST waits on the listener's channel).
    for c in lib.channels_mut() {
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

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    destroy_id(id)?;
    Ok(0)
}

/// True if something (a urxe group, kernel rxe) holds UDP port 4791 on `ip`.
pub(crate) fn roce_port_held(ip: IpAddr) -> bool {
    matches!(UdpSocket::bind(SocketAddr::new(ip, 4791)), Err(e) if e.kind() == std::io::ErrorKind::AddrInUse)
}

/// True if `ip` is an address of this host (a socket can bind to it).
pub(crate) fn is_local(ip: IpAddr) -> bool {
    ip.is_unspecified() || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// True if a connection to `dst` is one to this host's urxe at `dev_addr` (see resolve_addr):
/// the device is on loopback (zero-config or a loopback URXE_ADDR), `dst` is a loopback
/// address, or another address of this host of the same family, and nothing holds UDP 4791
/// on it.
pub(crate) fn this_hosts_urxe(dst: IpAddr, dev_addr: IpAddr) -> bool {
    let here = dst.is_loopback() || (dst.is_ipv4() == dev_addr.is_ipv4() && !dst.is_unspecified() && is_local(dst));
    here && dev_addr.is_loopback() && !roce_port_held(dst)
}

/// `a` with port `port`, its IPv6 scope id kept.
pub(crate) fn with_port(mut a: SocketAddr, port: u16) -> SocketAddr {
    a.set_port(port);
    a
}

pub(crate) fn bind(lib: &mut Lib, id: *mut rdma_cm_id, addr: SocketAddr) -> Result<(), i32> {
    let k = lib.key(id)?;
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    st.state.bind(st.bound)?;
    let (ps, reuse) = (st.ps, st.reuseaddr);
    // With its scope id: a link-local address is local on the interface it names.
    let mut probe = addr;
    probe.set_port(0);
    if !addr.ip().is_unspecified() && UdpSocket::bind(probe).is_err() {
        return Err(libc::EADDRNOTAVAIL);
    }
    lib.device()?;
    let port = if addr.port() == 0 { lib.ephemeral_port(ps)? } else { addr.port() };
    if lib.port_held(ps, port) && !reuse {
        return Err(libc::EADDRINUSE);
    }
    lib.hold_port(ps, port);
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

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    key(id)?;
    // SAFETY: the caller passes a valid sockaddr (or NULL).
    let a = unsafe { load_sockaddr(addr) }?.ok_or(libc::EINVAL)?;
    bind(&mut lock(), id, a)?;
    Ok(0)
}

/// `rdma_resolve_addr`: the sans-IO core ([`urxe::cm::rdma_resolve`]) checks the call and
/// decides the event; this asks the host for a route to `dst` and fills the C route.
pub(crate) fn resolve_addr(
    id: *mut rdma_cm_id,
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout_ms: c_int,
) -> Result<(), i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    let dev_addr = lib.device()?.addr;
    if lib.id(id)?.start_addr_query(now(), timeout_ms)? == Before::BindAny {
        let any =
            if dev_addr.is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
        if let Err(e) = bind(&mut lib, id, src.unwrap_or(SocketAddr::new(any, 0))) {
            // The call fails: no query is in flight after all.
            lib.id(id)?.resolution = Resolution::Idle;
            return Err(e);
        }
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
    if crate::faults::resolution_fails(&mut lib, k, CmStep::ResolveAddr) {
        // The fault hook queued the planned ADDR_ERROR: the query ends failed.
        let _ = lib.id(id)?.handle_addr(Err(libc::EIO));
        return Ok(());
    }
    let outcome =
        if routable { Ok(()) } else { Err(probe.err().and_then(|e| e.raw_os_error()).unwrap_or(libc::EHOSTUNREACH)) };
    let Some(r) = lib.id(id)?.handle_addr(outcome) else { return Ok(()) };
    if r.status == 0 {
        lib.fill_route(k);
    }
    lib.post(k, 0, r.event, r.status, |_| {});
    Ok(())
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: valid sockaddrs or NULL, per the man page.
    let (src, dst) = unsafe { (load_sockaddr(src_addr)?, load_sockaddr(dst_addr)?) };
    resolve_addr(id, src, dst.ok_or(libc::EINVAL)?, timeout_ms)?;
    sync_wait(id, event::ADDR_RESOLVED)?;
    Ok(0)
}

/// `rdma_resolve_route`: the route is the one the address resolution found (one device, no
/// path query), so the query ends at once; the core decides the event.
pub(crate) fn resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> Result<(), i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    lib.id(id)?.start_route_query(now(), timeout_ms)?;
    if crate::faults::resolution_fails(&mut lib, k, CmStep::ResolveRoute) {
        // The fault hook queued the planned ROUTE_ERROR: the query ends failed.
        let _ = lib.id(id)?.handle_route(Err(libc::EIO));
        return Ok(());
    }
    let Some(r) = lib.id(id)?.handle_route(Ok(())) else { return Ok(()) };
    lib.fill_route(k);
    lib.post(k, 0, r.event, r.status, |_| {});
    Ok(())
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    resolve_route(id, timeout_ms)?;
    sync_wait(id, event::ROUTE_RESOLVED)?;
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    let mut lib = lock();
    let k = lib.key(id)?;
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    if st.state.listen()? == Before::BindAny {
        bind(&mut lib, id, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
    }
    let st = lib.id(id)?;
    let service = st.listen(backlog)?;
    let steered = st.steered == Some(service);
    // The kernel's cma_check_req_qp_type: requests for the listener's own QP type only.
    let qp = match st.qp_type {
        qp_type::RC => ListenQp::Rc,
        qp_type::UC => ListenQp::Uc,
        qp_type::UD => ListenQp::Ud,
        _ => ListenQp::Any,
    };
    lib.cm()?.listen(service, qp).map_err(|e| e.errno())?;
    // At a shared address, REQs for the service must be steered to this process.
    let gsi = lib.device()?.gsi;
    // SAFETY: urxe's libibverbs function of this signature (verbs::GsiApi).
    if !steered && unsafe { (gsi.listen)(service) } != 0 {
        let e = crate::export_errno();
        let _ = lib.cm.as_mut().map(|cm| cm.unlisten(service));
        return Err(e);
    }
    lib.set_listener(service, k);
    lib.id(id)?.listening(service);
    Ok(0)
}

pub(crate) fn qp_num(id: *mut rdma_cm_id) -> Option<u32> {
    // SAFETY: `id` is live; its qp (if any) is a QP libibverbs created for it.
    unsafe { (*id).qp.as_ref().map(|q| q.qp_num) }
}

/// The private data a C call names (`len` bytes at `p`; none for NULL or 0): any length a
/// `u8` allows; the sans-IO core checks it against the message's room.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes (the caller's contract).
pub(crate) unsafe fn private_data<'a>(p: *const c_void, len: u8) -> &'a [u8] {
    if len == 0 || p.is_null() {
        return &[];
    }
    // SAFETY: the caller's private data of `len` bytes.
    unsafe { std::slice::from_raw_parts(p as *const u8, usize::from(len)) }
}

/// `struct rdma_conn_param` converted for the sans-IO core; NULL is librdmacm's default.
///
/// # Safety
/// As [`private_data`] for the parameters' private data.
pub(crate) unsafe fn conn_param_of<'a>(p: Option<&rdma_conn_param>) -> ConnParam<'a> {
    let Some(p) = p else { return ConnParam::librdmacm_default() };
    ConnParam {
        // SAFETY: the caller's contract.
        private_data: unsafe { private_data(p.private_data, p.private_data_len) },
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq != 0,
        qp_num: p.qp_num,
    }
}

pub(crate) fn connect(id: *mut rdma_cm_id, param: Option<rdma_conn_param>) -> Result<(), i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
    // Refused before the device is asked for anything (the core checks again).
    st.state.connect()?;
    let ud = st.qp_type == qp_type::UD;
    // SAFETY: the caller's parameters name their private data.
    let p = unsafe { conn_param_of(param.as_ref()) };
    let (psn, dev) = if ud { (0, DevicePath { gid: [0; 16], active_mtu: 0 }) } else { (lib.psn(), lib.device_path()?) };
    let qp = qp_num(id);
    let plan = lib.with_core(k, |c, f| c.connect(&p, qp, psn, &dev, f))??;
    let t = now();
    let comm = match plan {
        Connect::Sidr { peer, service_id, timeout, max_retries, private_data } => {
            lib.cm()?.sidr_request(t, peer, service_id, timeout, max_retries, &private_data).map_err(|e| e.errno())?
        }
        Connect::Req(cp) => {
            let lose = crate::faults::on_connect(lib.ids.get(&k).map_or(u64::MAX, |st| st.created))?;
            let comm = lib.cm()?.connect(t, &cp).map_err(|e| e.errno())?;
            if lose {
                crate::faults::lose_req(comm);
            }
            comm
        }
    };
    lib.set_comm_owner(comm, k);
    lib.with_core(k, |c, _| c.connect_sent(comm))?;
    lib.flush();
    Ok(())
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    // SAFETY: NULL or the caller's parameters.
    let p = unsafe { conn_param.as_ref().copied() };
    connect(id, p)?;
    sync_wait(id, event::ESTABLISHED)?;
    Ok(0)
}

pub(crate) fn accept(id: *mut rdma_cm_id, param: Option<rdma_conn_param>) -> Result<bool, i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    lib.ids.get(&k).ok_or(libc::EINVAL)?;
    // SAFETY: the caller's parameters name their private data.
    let p = unsafe { conn_param_of(param.as_ref()) };
    let qp = qp_num(id);
    match lib.with_core(k, |c, f| c.accept(&p, qp, f))?? {
        Accept::SidrRep { comm, qpn, qkey, private_data } => {
            lib.cm()?.send_sidr_rep(comm, sidr_status::VALID, qpn, qkey, &private_data).map_err(|e| e.errno())?;
            lib.forget_comm(comm);
            lib.with_core(k, |c, _| c.accept_sent())?;
            lib.flush();
            Ok(false)
        }
        Accept::Rep { comm, params } => {
            if qp.is_some() {
                if let Err(e) = lib.qp_to_rts(k) {
                    let _ = lib.cm()?.reject(comm, reject::CONSUMER_DEFINED, &[]);
                    lib.flush();
                    return Err(e);
                }
            }
            lib.cm()?.accept(now(), comm, &params).map_err(|e| e.errno())?;
            lib.with_core(k, |c, _| c.accept_sent())?;
            lib.flush();
            Ok(true)
        }
    }
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int {
    // SAFETY: NULL or the caller's parameters.
    let p = unsafe { conn_param.as_ref().copied() };
    if accept(id, p)? {
        sync_wait(id, event::ESTABLISHED)?;
    }
    Ok(0)
}

pub(crate) fn reject_id(id: *mut rdma_cm_id, pdata: *const c_void, len: u8) -> Result<(), i32> {
    let mut lib = lock();
    let k = lib.key(id)?;
    // SAFETY: NULL or the caller's `len` bytes.
    let user = unsafe { private_data(pdata, len) };
    let comm = match lib.with_core(k, |c, f| c.reject(user, f))?? {
        Reject::SidrRep { comm, status, private_data } => {
            lib.cm()?.send_sidr_rep(comm, status, 0, 0, &private_data).map_err(|e| e.errno())?;
            comm
        }
        Reject::Rej { comm, reason, private_data } => {
            lib.cm()?.reject(comm, reason, &private_data).map_err(|e| e.errno())?;
            comm
        }
    };
    lib.forget_comm(comm);
    lib.with_core(k, |c, _| c.reject_sent())?;
    lib.flush();
    Ok(())
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int {
    reject_id(id, private_data, private_data_len)?;
    Ok(0)
}

/// ECE is not negotiated (rxe has none): a plain reject.
#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    reject_id(id, private_data, private_data_len)?;
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    let mut lib = lock();
    let k = lib.key(id)?;
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
                lib.forget_comm(c);
            }
            _ => {}
        }
    }
    lib.flush();
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    let mut lib = lock();
    let k = lib.key(id)?;
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

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    let mut lib = lock();
    let k = lib.key(id)?;
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

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    if qp_attr.is_null() || qp_attr_mask.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's attribute struct (qp_state says which transition).
    let state = unsafe { (*qp_attr).qp_state };
    let lib = lock();
    let k = lib.key(id)?;
    let (a, m) = lib.qp_attr(k, state)?;
    // SAFETY: the caller's out-parameters.
    unsafe {
        *qp_attr = a;
        *qp_attr_mask = m;
    }
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    let mut lib = lock();
    let k = lib.key(id)?;
    let (old, was_sync) = {
        let st = lib.ids.get(&k).ok_or(libc::EINVAL)?;
        (st.channel, st.sync)
    };
    let (new, sync) = if channel.is_null() {
        (lib.new_channel()? as usize, true)
    } else if lib.has_channel(channel as usize) {
        (channel as usize, false)
    } else {
        return Err(libc::EINVAL);
    };
    // Queued events of this ID follow it to the new channel.
    // Their counts go with them: the old channel's fd is readable only while it still
    // has events, the new one's as soon as they are there.
    let moved = lib.channel_mut(old).map_or_else(Vec::new, |c| c.retain(|b| b.ev.id != id));
    let st = lib.id(id)?;
    st.channel = new;
    st.sync = sync;
    // SAFETY: a live ID box.
    unsafe { (*id).channel = new as *mut rdma_event_channel };
    if let Some(c) = lib.channel_mut(new) {
        for b in moved {
            c.push(b);
        }
    }
    if was_sync && old != new {
        lib.free_channel(old);
    }
    Ok(0)
}

#[urxe_cabi::export(neg1)]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    if optval.is_null() {
        return Err(libc::EINVAL);
    }
    let mut lib = lock();
    let k = lib.key(id)?;
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

pub(crate) fn port_of(id: *mut rdma_cm_id, dst: bool) -> u16 {
    let lib = lock();
    let Ok(k) = lib.key(id) else { return 0 };
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
