//! The slot sockets of a shared address and how members get them.
//!
//! - The pool: `N` UDP sockets on `addr:4791`, each with SO_REUSEPORT, bound in index order
//!   by the group's creator, never connected (a connected member makes the kernel rescore
//!   the lookup and bypass the program). Index `i` of the reuseport group is slot `i`.
//! - Every member holds a duplicate of every slot socket, received over SCM_RIGHTS from a
//!   live member through an abstract Unix SEQPACKET socket; both ends check the other's UID
//!   with SO_PEERCRED. Since each socket lives as long as any member holds it, an exit or a
//!   crash closes nothing and the kernel never moves a socket to another index.
//! - Probes: a well-formed RoCEv2 UD SEND to QPN `i << 16` (counter 0: never a QP) carrying a
//!   nonce, sent from the address to itself; the program steers it like any packet by the
//!   QPN's high byte. Reading it back from socket `i` proves that socket `i` is index `i`;
//!   whatever was queued before it belonged to a dead owner and is dropped (counted). Being
//!   a valid packet (ICRC included), it passes `urxe check` on a loopback capture.
//! - When `addr:4791` cannot be bound, [`diagnose_in_use`] reads /proc/net/udp{,6} to name
//!   the holder: a kernel socket (rdma_rxe) or another UID.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};

use super::JoinError;
use crate::transport::socket::{RoceSocket, ROCE_PORT};
use crate::wire::bth::BthRepr;
use crate::wire::deth::DethRepr;
use crate::wire::icrc::IpFields;
use crate::wire::opcode::op::UD_SEND_ONLY;
use crate::wire::packet::{finish, Headers};
use crate::wire::psn::Psn;

/// Most descriptors in one SCM_RIGHTS message (the kernel allows 253).
const FDS_PER_MESSAGE: usize = 32;
const FD_MAGIC: &[u8; 8] = b"URXEFDS1";
/// Length of a probe datagram: BTH + DETH + magic + nonce + ICRC.
pub const PROBE_LEN: usize = 12 + 8 + 16 + 4;
/// Q_Key of probes ("urxe").
const PROBE_QKEY: u32 = 0x7572_7865;
const PROBE_MAGIC: &[u8; 8] = b"URXEPROB";
/// How long a member waits for its own probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds one slot socket: SO_REUSEPORT on `addr:4791`, non-blocking, close-on-exec.
pub fn bind_slot(addr: IpAddr) -> io::Result<Socket> {
    let domain = if addr.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM.nonblocking().cloexec(), None)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_reuse_port(true)?;
    s.bind(&SockAddr::from(SocketAddr::new(addr, ROCE_PORT)))?;
    // The RoCE options (DF and IP ID 0, no IPv6 UDP checksum, buffers, GRO) go on the socket
    // itself, shared by every member: set them through a duplicate the transport's way.
    drop(RoceSocket::adopt(s.try_clone()?.into())?);
    // ...but the receive buffer stays at the kernel's minimum until a member owns the slot
    // (its transport adopts the socket and raises it): a slot nobody reads must not be able
    // to hold more than a datagram or two of host memory.
    shrink(&s);
    Ok(s)
}

/// Sets `s`'s receive buffer to the kernel's minimum (a slot without a member).
pub fn shrink(s: &Socket) {
    let _ = s.set_recv_buffer_size(0);
}

/// Reads and drops what is queued on `s` (at most `max` datagrams): how many.
pub fn drain(s: &Socket, max: u32) -> u64 {
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < max as u64 {
        // SAFETY: `buf` is valid for writes of its length for the duration of the call; a
        // longer datagram is truncated, which is what dropping it means.
        let r =
            unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
        if r < 0 {
            break;
        }
        n += 1;
    }
    n
}

/// Checks that `s` is a slot socket of `addr`: a UDP socket bound to `addr:4791` with
/// SO_REUSEPORT. Guards against a member handing over something else.
pub fn check_slot(s: &Socket, addr: IpAddr) -> io::Result<()> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    if s.r#type()? != Type::DGRAM {
        return Err(bad("received descriptor is not a datagram socket"));
    }
    if s.local_addr()?.as_socket() != Some(SocketAddr::new(addr, ROCE_PORT)) {
        return Err(bad("received socket is not bound to the group address"));
    }
    if !s.reuse_port()? {
        return Err(bad("received socket lacks SO_REUSEPORT"));
    }
    Ok(())
}

/// Builds the probe for slot `index` of the group on `addr`, carrying `nonce`: a UD SEND
/// Only to QPN `index << 16` from `addr`:4791 to itself, ICRC computed as the slot sockets
/// send it (IPv4 DF, ID 0).
pub fn probe(index: u8, addr: IpAddr, nonce: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    let qpn = (index as u32) << 16;
    let h = Headers {
        bth: BthRepr { opcode: UD_SEND_ONLY, dest_qp: qpn, psn: Psn::new(0), ..BthRepr::default() },
        deth: Some(DethRepr { qkey: PROBE_QKEY, src_qp: qpn }),
        ..Headers::default()
    };
    let hl = h.emit(&mut p).unwrap_or(20);
    p[hl..hl + 8].copy_from_slice(PROBE_MAGIC);
    p[hl + 8..hl + 16].copy_from_slice(&nonce.to_le_bytes());
    let ip = match addr {
        IpAddr::V4(a) => IpFields::v4_df(a, a),
        IpAddr::V6(a) => IpFields::v6(a, a),
    };
    let _ = finish(&mut p, hl, 16, &ip, ROCE_PORT, ROCE_PORT);
    p
}

/// Whether a received datagram is a probe (any nonce): members drop these, counted.
pub fn is_probe(d: &[u8]) -> bool {
    d.len() == PROBE_LEN && d[0] == UD_SEND_ONLY && d[6..8] == [0, 0] && &d[20..28] == PROBE_MAGIC
}

/// The nonce of a probe.
fn probe_nonce(d: &[u8]) -> Option<u64> {
    is_probe(d).then(|| u64::from_le_bytes([d[28], d[29], d[30], d[31], d[32], d[33], d[34], d[35]]))
}

/// A nonce nobody can guess in advance: time, pid and the address of a stack variable.
pub fn nonce() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let local = 0u8;
    let mut x = (t as u64) ^ (std::process::id() as u64) << 32 ^ (&local as *const u8 as u64);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Sends the probe for `index` from `via` (any slot socket) to the address itself.
pub fn send_probe(via: &Socket, addr: IpAddr, index: u8, nonce: u64) -> io::Result<()> {
    via.send_to(&probe(index, addr, nonce), &SockAddr::from(SocketAddr::new(addr, ROCE_PORT)))?;
    Ok(())
}

/// How long a probe may take before it is sent again (same nonce).
const PROBE_RESEND: Duration = Duration::from_millis(200);

/// What [`confirm_slot`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Confirmed {
    /// The probe came back: datagrams queued before it (a dead owner's), dropped.
    pub dropped: Option<u64>,
    /// Sends that failed (EPERM from a firewall drop, ENOBUFS...): lost packets, sent again.
    pub send_errors: u64,
}

/// Sends the probe for slot `index` from `s` and reads `s` until it comes back, within
/// `timeout`. A send error or a probe lost on the way is a lost packet, as anywhere else:
/// counted, and the probe is sent again (every [`PROBE_RESEND`]); only the timeout ends it.
pub fn confirm_slot(s: &Socket, addr: IpAddr, index: u8, timeout: Duration) -> io::Result<Confirmed> {
    let end = Instant::now() + timeout;
    let nonce = nonce();
    let mut c = Confirmed::default();
    let mut dropped = 0;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(c);
        }
        let wait = if send_probe(s, addr, index, nonce).is_ok() {
            left.min(PROBE_RESEND)
        } else {
            c.send_errors += 1;
            left.min(Duration::from_millis(5))
        };
        if await_counting(s, nonce, wait, &mut dropped)? {
            c.dropped = Some(dropped);
            return Ok(c);
        }
    }
}

/// Reads `s` until the probe carrying `nonce` arrives (true) or `timeout` passes (false),
/// adding the datagrams read before it (a dead owner's traffic, or an earlier copy of a
/// resent probe) to `dropped`.
fn await_counting(s: &Socket, nonce: u64, timeout: Duration, dropped: &mut u64) -> io::Result<bool> {
    let end = Instant::now() + timeout;
    let mut buf = vec![0u8; 65536];
    loop {
        // SAFETY: `buf` is valid for writes of its length for the duration of the call.
        let n =
            unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            let d = &buf[..n as usize];
            if probe_nonce(d) == Some(nonce) {
                return Ok(true);
            }
            // A resent probe's earlier copy, or a dead owner's traffic.
            *dropped += 1;
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let mut pfd = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = left.as_millis().clamp(1, 1000) as libc::c_int;
        // SAFETY: one valid pollfd that lives across the call.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }
}

/// Who holds UDP 4791 on an address, from /proc/net/udp{,6}.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A kernel socket (no process holds it): kernel rdma_rxe, or a UDP tunnel (VXLAN...)
    /// on port 4791.
    Kernel,
    /// A socket of this UID (bound without SO_REUSEPORT, e.g. an older urxe).
    SameUser,
    /// A socket of another UID.
    OtherUser(u32),
}

/// Names who holds `addr:4791` (bound on that address or on the wildcard).
pub fn find_holder(addr: IpAddr) -> Option<Holder> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut found = None;
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let Some((ip_hex, port_hex)) = f[1].split_once(':') else { continue };
            if u16::from_str_radix(port_hex, 16) != Ok(ROCE_PORT) {
                continue;
            }
            let Some(ip) = parse_proc_ip(ip_hex) else { continue };
            let same_family_any = ip.is_unspecified() && (ip.is_ipv4() == addr.is_ipv4() || ip.is_ipv6());
            if ip != addr && !same_family_any && ip != map_v4(addr) {
                continue;
            }
            let uid: u32 = f[7].parse().unwrap_or(u32::MAX);
            let inode: u64 = f[9].parse().unwrap_or(0);
            let h = if uid == 0 && held_by_a_process(inode) == Some(false) {
                Holder::Kernel
            } else if uid == me {
                Holder::SameUser
            } else {
                Holder::OtherUser(uid)
            };
            // A kernel socket explains everything; otherwise report the first foreign holder.
            match (found, h) {
                (_, Holder::Kernel) => return Some(Holder::Kernel),
                (None, _) | (Some(Holder::SameUser), Holder::OtherUser(_)) => found = Some(h),
                _ => {}
            }
        }
    }
    found
}

/// IPv4 addresses on which a socket of another UID holds UDP 4791 (one read of
/// /proc/net/udp): the zero-configuration address walk skips them without a bind.
pub fn held_by_others_v4() -> std::collections::HashSet<std::net::Ipv4Addr> {
    let me = euid();
    let text = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (ip_hex, port_hex) = f.get(1)?.split_once(':')?;
            let uid: u32 = f.get(7)?.parse().ok()?;
            match parse_proc_ip(ip_hex)? {
                IpAddr::V4(a) if u16::from_str_radix(port_hex, 16) == Ok(ROCE_PORT) && uid != me => Some(a),
                _ => None,
            }
        })
        .collect()
}

/// Whether some process has socket `inode` open: `Some(false)` only when every process's
/// descriptors could be read (as root), `None` when some could not.
fn held_by_a_process(inode: u64) -> Option<bool> {
    // A kernel socket (sock_create_kern: rdma_rxe, VXLAN) has no file and shows inode 0.
    if inode == 0 {
        return Some(false);
    }
    let want = format!("socket:[{inode}]");
    let mut complete = true;
    let procs = std::fs::read_dir("/proc").ok()?;
    for p in procs.flatten() {
        if !p.file_name().as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let fds = match std::fs::read_dir(p.path().join("fd")) {
            Ok(fds) => fds,
            // The process exited while we looked: it holds nothing any more.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => {
                complete = false;
                continue;
            }
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
                return Some(true);
            }
        }
    }
    complete.then_some(false)
}

fn map_v4(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        v6 => v6,
    }
}

/// /proc/net/udp prints each 32-bit word of the address as a host-order integer.
fn parse_proc_ip(hex: &str) -> Option<IpAddr> {
    let word = |s: &str| u32::from_str_radix(s, 16).ok().map(u32::to_ne_bytes);
    match hex.len() {
        8 => Some(IpAddr::from(word(hex)?)),
        32 => {
            let mut o = [0u8; 16];
            for i in 0..4 {
                o[i * 4..i * 4 + 4].copy_from_slice(&word(&hex[i * 8..i * 8 + 8])?);
            }
            Some(IpAddr::from(o))
        }
        _ => None,
    }
}

/// The error for an `addr:4791` that cannot be bound with SO_REUSEPORT.
pub fn diagnose_in_use(addr: IpAddr) -> JoinError {
    match find_holder(addr) {
        Some(Holder::Kernel) => JoinError::KernelRxe { addr },
        Some(Holder::OtherUser(uid)) => JoinError::OtherUser { addr, uid: Some(uid) },
        Some(Holder::SameUser) => JoinError::NotShared { addr },
        None => JoinError::OtherUser { addr, uid: None },
    }
}

/// Abstract Unix socket name on which the member owning `slot` (pid `pid`) hands out the
/// slot sockets. Abstract names belong to the network namespace, like the address.
pub fn handout_name(addr: IpAddr, slot: u8, pid: u32) -> Vec<u8> {
    let mut n = vec![0u8];
    n.extend_from_slice(format!("urxe-group/{addr}/{slot}/{pid}").as_bytes());
    n
}

fn unix_addr(name: &[u8]) -> io::Result<SockAddr> {
    use std::os::unix::ffi::OsStrExt;
    SockAddr::unix(std::ffi::OsStr::from_bytes(name))
}

/// Listens for members that want the slot sockets.
pub fn handout_listener(name: &[u8]) -> io::Result<Socket> {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET.nonblocking().cloexec(), None)?;
    s.bind(&unix_addr(name)?)?;
    s.listen(16)?;
    Ok(s)
}

/// (pid, uid) of the process at the other end of a Unix socket.
pub fn peer_cred(fd: RawFd) -> io::Result<(u32, u32)> {
    // SAFETY: ucred is plain data.
    let mut c: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` and `len` are valid for writes and live across the call; `len` is its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut c as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((c.pid as u32, c.uid))
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Sends `data` with `fds` attached as one SEQPACKET message.
fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let mut cbuf = [0u64; (FDS_PER_MESSAGE * 4 + 32) / 8];
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    // SAFETY: msghdr is plain data. Every pointer refers to a local that outlives sendmsg; the
    // control message is built inside `cbuf`, whose size bounds CMSG_SPACE of at most
    // FDS_PER_MESSAGE descriptors (checked by the assert).
    unsafe {
        assert!(fds.len() <= FDS_PER_MESSAGE);
        let mut msg: libc::msghdr = zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        let bytes = size_of_val(fds);
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = libc::CMSG_SPACE(bytes as u32) as usize;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
        std::ptr::copy_nonoverlapping(fds.as_ptr() as *const u8, libc::CMSG_DATA(c), bytes);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives one message and the descriptors attached to it (close-on-exec).
fn recv_with_fds(sock: RawFd, data: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cbuf = [0u64; (FDS_PER_MESSAGE * 4 + 32) / 8];
    let mut iov = libc::iovec { iov_base: data.as_mut_ptr() as *mut libc::c_void, iov_len: data.len() };
    let mut fds = Vec::new();
    // SAFETY: msghdr is plain data; its pointers refer to locals that outlive recvmsg. The
    // kernel writes at most msg_controllen bytes of control data; we walk it with the CMSG_*
    // helpers and take ownership of each descriptor exactly once.
    let n = unsafe {
        let mut msg: libc::msghdr = zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = size_of_val(&cbuf);
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c) as *const RawFd;
                for k in 0..bytes / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(p.add(k))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "descriptor message truncated"));
        }
        n as usize
    };
    Ok((n, fds))
}

/// Serves one waiting member (if any) on `listener`: checks its UID and sends it `slots` in
/// index order. `Ok(false)` when nobody was waiting; a peer of another UID is refused.
pub fn serve_one(listener: &Socket, slots: &[Socket]) -> io::Result<bool> {
    let (conn, _) = match listener.accept() {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
        Err(e) => return Err(e),
    };
    conn.set_nonblocking(false)?;
    conn.set_write_timeout(Some(Duration::from_secs(1)))?;
    let (_, uid) = peer_cred(conn.as_raw_fd())?;
    if uid != euid() {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("uid {uid} asked for the slot sockets")));
    }
    let n = slots.len();
    for (k, chunk) in slots.chunks(FDS_PER_MESSAGE).enumerate() {
        let mut head = [0u8; 11];
        head[..8].copy_from_slice(FD_MAGIC);
        head[8] = n as u8;
        head[9] = (k * FDS_PER_MESSAGE) as u8;
        head[10] = chunk.len() as u8;
        let fds: Vec<RawFd> = chunk.iter().map(|s| s.as_raw_fd()).collect();
        send_with_fds(conn.as_raw_fd(), &head, &fds)?;
    }
    Ok(true)
}

/// Asks the member listening on `name` (expected pid `pid`, our UID) for the slot sockets of
/// `addr`, and checks each one.
pub fn fetch(name: &[u8], pid: u32, addr: IpAddr) -> io::Result<Vec<Socket>> {
    let s = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
    s.connect(&unix_addr(name)?)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let (peer_pid, uid) = peer_cred(s.as_raw_fd())?;
    if uid != euid() || peer_pid != pid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("slot-socket handout answered by pid {peer_pid} uid {uid}, expected pid {pid} uid {}", euid()),
        ));
    }
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    let mut out: Vec<Socket> = Vec::new();
    let mut total = None;
    for _ in 0..256 / FDS_PER_MESSAGE + 1 {
        let mut head = [0u8; 16];
        let (len, fds) = recv_with_fds(s.as_raw_fd(), &mut head)?;
        if len != 11 || &head[..8] != FD_MAGIC {
            return Err(bad("bad slot-socket handout message"));
        }
        let (n, first, count) = (head[8] as usize, head[9] as usize, head[10] as usize);
        if *total.get_or_insert(n) != n || first != out.len() || count != fds.len() || n == 0 {
            return Err(bad("inconsistent slot-socket handout"));
        }
        for fd in fds {
            let sock = Socket::from(fd);
            check_slot(&sock, addr)?;
            sock.set_nonblocking(true)?;
            out.push(sock);
        }
        if out.len() == n {
            return Ok(out);
        }
    }
    Err(bad("slot-socket handout never completed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_udp_addresses_parse_in_host_order() {
        assert_eq!(parse_proc_ip("0100007F"), Some("127.0.0.1".parse().unwrap()));
        assert_eq!(parse_proc_ip("00000000000000000000000001000000"), Some("::1".parse().unwrap()));
        assert_eq!(parse_proc_ip("0000000000000000FFFF00000100007F"), Some("::ffff:127.0.0.1".parse().unwrap()));
        assert_eq!(parse_proc_ip("zz"), None);
    }

    #[test]
    fn probes_are_valid_rocev2_packets_recognised_by_shape() {
        let addr: IpAddr = "10.77.0.1".parse().unwrap();
        let p = probe(7, addr, 0x1122);
        assert!(is_probe(&p));
        assert_eq!(probe_nonce(&p), Some(0x1122));
        let parsed = crate::wire::packet::parse(&p).unwrap();
        assert_eq!(parsed.headers.bth.dest_qp, 7 << 16);
        let ip = IpFields::v4_df("10.77.0.1".parse().unwrap(), "10.77.0.1".parse().unwrap());
        assert_eq!(crate::wire::icrc::icrc(&ip, ROCE_PORT, ROCE_PORT, parsed.icrc_covered(&p)), parsed.icrc);
        assert!(!is_probe(&p[..20]));
        let mut q = p;
        q[20] = b'X';
        assert!(!is_probe(&q));
        q = p;
        q[7] = 0x11; // a real QP of slot 7
        assert!(!is_probe(&q));
        assert_ne!(nonce(), nonce());
    }
}
