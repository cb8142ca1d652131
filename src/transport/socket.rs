//! UDP sockets for RoCEv2: options that make the wire right, and batched send/receive.
//!
//! - IPv4: `IP_MTU_DISCOVER = IP_PMTUDISC_DO` on unconnected sockets, so Linux sends DF=1 and
//!   IP ID 0 — the ICRC covers the ID, and 0 is the only value a sender can know in advance.
//! - IPv6: `UDP_NO_CHECK6_TX/RX`, UDP checksum 0 as RoCEv2 sends it; `IPV6_FLOWINFO_SEND` on and
//!   `IPV6_AUTOFLOWLABEL` off: the flow label is the one each send names, 0 if it names none.
//!   A GSO train is the exception: the kernel refuses an IPv6 GSO send without the UDP
//!   checksum (`udp_v6_send_skb`: EINVAL with `UDP_NO_CHECK6_TX`), so a send of trains turns
//!   `UDP_NO_CHECK6_TX` off and its segments carry the checksum (offloaded: the device or the
//!   segmentation fills it in); the next send of lone datagrams turns it on again. The ICRC
//!   masks the UDP checksum, so it is the same either way.
//! - Send: UDP GSO (`UDP_SEGMENT`) for runs of equal-size packets to one unicast peer;
//!   `sendmmsg` otherwise. Segmentation gives an IPv4 train's segments the IDs 0, 1, 2...,
//!   which the ICRC covers: the caller stores each segment's ICRC for its ID
//!   ([`crate::wire::gso_id`]).
//! - Receive: `recvmmsg` with `UDP_GRO`, so GSO trains arrive as one buffer plus a segment
//!   size; after a receive that found nothing, one datagram with `recvmsg` (a busy poller's
//!   loop).
//!
//! All buffers are allocated once; nothing here allocates per packet.
//!
//! Unsafe: the libc calls above (setsockopt, sendmsg, sendmmsg, recvmmsg, the CMSG walk) and
//! the all-zero C structs they take. Every block names the invariant it relies on.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// UDP port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;
/// Largest GSO super-packet (IPv4 UDP payload limit).
pub const MAX_GSO_BYTES: usize = 65507;
/// Most segments per GSO send (UDP_MAX_SEGMENTS).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Datagrams per recvmmsg call.
pub const RECV_BATCH: usize = 32;
/// Bytes per receive slot: a whole GRO super-packet.
pub const RECV_SLOT: usize = 65536;

const SOL_UDP: libc::c_int = 17;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
const UDP_NO_CHECK6_TX: libc::c_int = 101;
/// `IPV6_FLOWINFO_SEND` (linux/in6.h): the flow label of `sin6_flowinfo` goes on the wire.
const IPV6_FLOWINFO_SEND: libc::c_int = 33;
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// C structs for which the all-zero byte pattern is a valid value (integers, and raw
/// pointers that are null).
///
/// # Safety
/// Implement only for `#[repr(C)]` plain-data types without references, `NonNull`, enums or
/// other fields with a niche at zero.
unsafe trait ZeroIsValid: Sized {}
// SAFETY: integers, a null pointer and a length.
unsafe impl ZeroIsValid for libc::iovec {}
// SAFETY: integers and null pointers (name, iov, control).
unsafe impl ZeroIsValid for libc::msghdr {}
// SAFETY: a msghdr (above) and an integer.
unsafe impl ZeroIsValid for libc::mmsghdr {}
// SAFETY: a family integer and padding bytes.
unsafe impl ZeroIsValid for libc::sockaddr_storage {}

/// The index of the interface that holds IPv6 address `addr` (from /proc/net/if_inet6), or 0
/// (the kernel then picks by route) if none does.
fn ifindex_v6(addr: std::net::Ipv6Addr) -> u32 {
    interface_v6(addr).map_or(0, |(i, _)| i)
}

/// Index and name of the interface that holds IPv6 address `addr` (/proc/net/if_inet6).
fn interface_v6(addr: std::net::Ipv6Addr) -> Option<(u32, String)> {
    let want: String = addr.octets().iter().map(|b| format!("{b:02x}")).collect();
    let text = std::fs::read_to_string("/proc/net/if_inet6").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let idx = u32::from_str_radix(f.get(1)?, 16).ok()?;
        let name = f.get(5)?.to_string();
        (f[0] == want).then_some((idx, name))
    })
}

/// The all-zero value of a C struct (an empty header to fill in).
fn all_zero<T: ZeroIsValid>() -> T {
    // SAFETY: `T: ZeroIsValid` promises the all-zero pattern is a valid `T`.
    unsafe { std::mem::zeroed() }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` lives across the call and its size is passed; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(fd, level, name, &v as *const _ as *const libc::c_void, size_of::<libc::c_int>() as u32)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One RoCEv2 UDP socket.
pub struct RoceSocket {
    sock: Socket,
    local: SocketAddr,
    gso: bool,
    gro: bool,
    /// The IP TOS / traffic class the socket sends with now (DSCP and ECN; 0 at first).
    tos: std::sync::atomic::AtomicU8,
    /// IPv6: the socket sends with the UDP checksum now (`UDP_NO_CHECK6_TX` off; see above).
    csum6: std::sync::atomic::AtomicBool,
}

impl RoceSocket {
    /// Binds `local` (port 4791 for the receive socket, a flow port for send sockets).
    /// `EADDRINUSE` means another process (or kernel rxe, which holds 4791 on its addresses)
    /// owns that address and port.
    pub fn bind(local: SocketAddr) -> io::Result<RoceSocket> {
        Self::bind_with(local, false)
    }

    /// Like [`RoceSocket::bind`] with SO_REUSEPORT: a send socket for a flow port that other
    /// processes of this user on a shared address may bind too (the engine computes the ICRC
    /// for its flow port, so a packet must leave from exactly that port).
    pub fn bind_shared(local: SocketAddr) -> io::Result<RoceSocket> {
        Self::bind_with(local, true)
    }

    fn bind_with(local: SocketAddr, reuse_port: bool) -> io::Result<RoceSocket> {
        let domain = if local.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let sock = Socket::new(domain, Type::DGRAM.nonblocking().cloexec(), Some(Protocol::UDP))?;
        if local.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        if reuse_port {
            sock.set_reuse_port(true)?;
        }
        sock.bind(&SockAddr::from(local))?;
        Self::configure(sock)
    }

    /// A receive socket for the IP multicast group `group` on the interface of `local`: bound
    /// to `group`:4791 with SO_REUSEPORT alone: every urxe process of this user binds its own
    /// and gets a copy of every datagram (multicast goes to all sockets on the group and port);
    /// another user's bind fails, as the kernel shares a reuseport address within one uid only
    /// and, without SO_REUSEADDR on our side, a SO_REUSEADDR one not at all (issue #37).
    pub fn bind_multicast(group: IpAddr, local: IpAddr) -> io::Result<RoceSocket> {
        let bound = SocketAddr::new(group, ROCE_PORT);
        let domain = if group.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let sock = Socket::new(domain, Type::DGRAM.nonblocking().cloexec(), Some(Protocol::UDP))?;
        sock.set_reuse_port(true)?;
        match (group, local) {
            (IpAddr::V4(g), IpAddr::V4(l)) => {
                // Only the group as joined on our interface: without this a socket also takes
                // the group's datagrams arriving on any other interface where the host joined it.
                sock.set_multicast_all_v4(false)?;
                sock.bind(&SockAddr::from(bound))?;
                sock.join_multicast_v4(&g, &l)?;
            }
            (IpAddr::V6(g), IpAddr::V6(l)) => {
                sock.set_only_v6(true)?;
                sock.set_multicast_all_v6(false)?;
                let (index, name) = interface_v6(l).unwrap_or((0, String::new()));
                // IPv6 membership does not name the interface a datagram came in on: bind the
                // socket to our interface so that the group's datagrams from the host's other
                // interfaces stay out. Best effort: where the process may not (an unprivileged
                // one on an old kernel), such a host delivers those too.
                if !name.is_empty() {
                    let _ = sock.bind_device(Some(name.as_bytes()));
                }
                sock.bind(&SockAddr::from(bound))?;
                sock.join_multicast_v6(&g, index)?;
            }
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
        Self::configure(sock)
    }

    /// Takes over a UDP socket someone else already bound (the provider binds `addr:4791` when
    /// it picks its address, so a conflict shows at device discovery), applying our options.
    pub fn adopt(sock: std::net::UdpSocket) -> io::Result<RoceSocket> {
        sock.set_nonblocking(true)?;
        Self::configure(Socket::from(sock))
    }

    fn configure(sock: Socket) -> io::Result<RoceSocket> {
        let local = sock.local_addr()?.as_socket().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let fd = sock.as_raw_fd();
        match local {
            SocketAddr::V4(_) => {
                setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
            }
            SocketAddr::V6(_) => {
                setsockopt_int(fd, SOL_UDP, UDP_NO_CHECK6_TX, 1)?;
                setsockopt_int(fd, SOL_UDP, UDP_NO_CHECK6_RX, 1)?;
                setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
                // The flow label is ours (the QP's, in each destination's sin6_flowinfo), not
                // one the kernel hashes: label 0 (UD, CM) stays 0.
                setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_FLOWINFO_SEND, 1)?;
                setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_AUTOFLOWLABEL, 0)?;
            }
        }
        // Multicast we send (UD to a group) leaves through the interface of our address, with
        // the hop limit unicast has, and loops back to the host's other members (as rxe's).
        match local {
            SocketAddr::V4(_) => sock.set_multicast_ttl_v4(64)?,
            SocketAddr::V6(a) => {
                sock.set_multicast_hops_v6(64)?;
                if !a.ip().is_unspecified() {
                    sock.set_multicast_if_v6(ifindex_v6(*a.ip()))?;
                }
            }
        }
        // Large buffers: even loopback drops when a receive buffer overflows. FORCE works as
        // root; otherwise the plain option is capped by rmem_max/wmem_max.
        for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
            if setsockopt_int(fd, libc::SOL_SOCKET, force, 16 << 20).is_err() {
                let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, 16 << 20);
            }
        }
        // Probe GSO with a harmless zero (= off) setting; GRO is a receive option.
        let gso = setsockopt_int(fd, SOL_UDP, UDP_SEGMENT, 0).is_ok();
        let gro = setsockopt_int(fd, SOL_UDP, UDP_GRO, 1).is_ok();
        // Every datagram's ECN field comes with it (DCQCN's notification point reads CE).
        let _ = match local {
            SocketAddr::V4(_) => setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1),
            SocketAddr::V6(_) => setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1),
        };
        Ok(RoceSocket {
            sock,
            local,
            gso,
            gro,
            tos: std::sync::atomic::AtomicU8::new(0),
            csum6: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Sends from now on with IP TOS / IPv6 traffic class `tos` (one `setsockopt` when it
    /// changes: a flow's packets share one, a CNP on the flow's port switches twice).
    pub fn set_tos(&self, tos: u8) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.tos.load(Relaxed) == tos {
            return;
        }
        let fd = self.sock.as_raw_fd();
        let r = match self.local {
            SocketAddr::V4(_) => setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos as libc::c_int),
            SocketAddr::V6(_) => setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, tos as libc::c_int),
        };
        if r.is_ok() {
            self.tos.store(tos, Relaxed);
        }
    }

    /// IPv6: sends from now on with the UDP checksum (`on`: what a GSO send needs) or with
    /// checksum 0 (one `setsockopt` when it changes). Nothing on IPv4, whose DF socket sends 0.
    fn udp6_checksum(&self, on: bool) -> io::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.local.is_ipv4() || self.csum6.load(Relaxed) == on {
            return Ok(());
        }
        setsockopt_int(self.sock.as_raw_fd(), SOL_UDP, UDP_NO_CHECK6_TX, libc::c_int::from(!on))?;
        self.csum6.store(on, Relaxed);
        Ok(())
    }

    /// GSO may be used to send to `dst`: the kernel offers it and `dst` is one unicast peer
    /// (never a group: a UD datagram to a group goes alone).
    pub fn gso_to(&self, dst: IpAddr) -> bool {
        self.gso && !dst.is_multicast() && !dst.is_unspecified()
    }

    /// Sends one datagram.
    pub fn send_to(&self, buf: &[u8], dst: SocketAddr) -> io::Result<usize> {
        self.udp6_checksum(false)?;
        self.sock.send_to(buf, &SockAddr::from(dst))
    }

    /// Sends `buf` as segments of `seg` bytes (the last may be shorter) in one GSO call.
    pub fn send_gso(&self, buf: &[u8], seg: u16, dst: SocketAddr) -> io::Result<()> {
        self.udp6_checksum(true)?;
        let addr = SockAddr::from(dst);
        let mut iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
        // cmsg space for one u16: CMSG_SPACE(2) = 16 + 8 on 64-bit Linux.
        let mut cbuf = [0u64; 4];
        let mut msg: libc::msghdr = all_zero();
        // SAFETY: every pointer set below refers to locals (`addr`, `iov`, `cbuf`) that outlive
        // the sendmsg call; `cbuf` has room for CMSG_SPACE(2) bytes, so CMSG_FIRSTHDR returns a
        // header inside it and CMSG_DATA a u16 slot inside it (written unaligned).
        unsafe {
            msg.msg_name = addr.as_ptr() as *mut libc::c_void;
            msg.msg_namelen = addr.len();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg);
            let r = crate::sys::sendmsg(self.sock.as_raw_fd(), &msg, 0);
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Sends up to `n` datagrams described by `batch` in one `sendmmsg` (one `sendmsg` for a
    /// single datagram); returns how many went.
    pub fn send_mmsg(&self, batch: &mut SendBatch) -> io::Result<usize> {
        let n = batch.len;
        if n == 0 {
            return Ok(0);
        }
        self.udp6_checksum(false)?;
        for i in 0..n {
            batch.iov[i] = libc::iovec {
                iov_base: batch.data[batch.spans[i].0..].as_mut_ptr() as *mut libc::c_void,
                iov_len: batch.spans[i].1,
            };
            // Pointers into `batch`, which is borrowed mutably for the whole call so none of
            // them moves before sendmmsg below.
            let mut m: libc::mmsghdr = all_zero();
            m.msg_hdr.msg_name = &mut batch.addrs[i] as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = batch.addr_lens[i];
            m.msg_hdr.msg_iov = &mut batch.iov[i];
            m.msg_hdr.msg_iovlen = 1;
            batch.hdrs[i] = m;
        }
        self.send_headers(&mut batch.hdrs[..n])
    }

    /// Sends the messages `hdrs` describes: one `sendmsg` for one (a `sendmmsg` of one message
    /// costs its loop on top), else one `sendmmsg`. Returns how many went.
    fn send_headers(&self, hdrs: &mut [libc::mmsghdr]) -> io::Result<usize> {
        if let [one] = hdrs {
            // SAFETY: the caller filled `one` with pointers to its batch's own addresses,
            // iovecs, control buffers and data, all alive and unmoved for the call.
            let r = unsafe { crate::sys::sendmsg(self.sock.as_raw_fd(), &one.msg_hdr, 0) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(1);
        }
        // SAFETY: as above, for every header of `hdrs` (at most `hdrs.len()` are read).
        let r = unsafe { crate::sys::sendmmsg(self.sock.as_raw_fd(), hdrs.as_mut_ptr(), hdrs.len() as u32, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    /// Sends the packets of `batch` as GSO trains (see [`SendBatch::train_len`]), every train
    /// one message of a single `sendmmsg` with its own `UDP_SEGMENT` (a one-packet train is a
    /// plain datagram). Packets of different sizes (an RDMA WRITE's first packet carries a
    /// RETH, a READ response's first and last an AETH) then still leave in one system call.
    /// Returns how many *packets* went (whole trains).
    pub fn send_trains(&self, batch: &mut SendBatch) -> io::Result<usize> {
        let n = batch.len;
        let mut trains = 0;
        let mut first = 0;
        while first < n && trains < batch.hdrs.len() {
            let count = batch.train_len(first);
            let start = batch.spans[first].0;
            let (last_start, last_len) = batch.spans[first + count - 1];
            batch.iov[trains] = libc::iovec {
                iov_base: batch.data[start..].as_mut_ptr() as *mut libc::c_void,
                iov_len: last_start + last_len - start,
            };
            batch.train_pkts[trains] = count;
            // Pointers into `batch`, which is borrowed mutably for the whole call so none of
            // them moves before sendmmsg below.
            let mut m: libc::mmsghdr = all_zero();
            m.msg_hdr.msg_name = &mut batch.addrs[first] as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = batch.addr_lens[first];
            m.msg_hdr.msg_iov = &mut batch.iov[trains];
            m.msg_hdr.msg_iovlen = 1;
            if count > 1 {
                let cbuf = &mut batch.cmsgs[trains];
                m.msg_hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
                // SAFETY: CMSG_SPACE is a pure size computation.
                m.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
                // SAFETY: `cbuf` (32 bytes, 8-aligned) has room for CMSG_SPACE(2) = 24 bytes and
                // msg_control/msg_controllen describe it, so CMSG_FIRSTHDR returns a header inside
                // it and CMSG_DATA a u16 slot inside it (written unaligned).
                unsafe {
                    let c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    (*c).cmsg_level = SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, batch.spans[first].1 as u16);
                }
            }
            batch.hdrs[trains] = m;
            trains += 1;
            first += count;
        }
        if trains == 0 {
            return Ok(0);
        }
        // Only a message of several segments needs the checksum; lone datagrams keep 0.
        self.udp6_checksum(batch.train_pkts[..trains].iter().any(|&c| c > 1))?;
        let r = self.send_headers(&mut batch.hdrs[..trains])?;
        Ok(batch.train_pkts[..r].iter().sum())
    }

    /// Receives up to [`RECV_BATCH`] datagrams (each possibly a GRO train) without blocking.
    /// Returns 0 when nothing is queued.
    pub fn recv_batch(&self, b: &mut RecvBatch) -> io::Result<usize> {
        // The headers point at `b`'s own slots from its construction on; the kernel wrote back
        // the lengths and flags of the ones the last call filled: reset just those (rebuilding
        // all RECV_BATCH headers cost about a thousand instructions per call, and most calls
        // of a busy poller find nothing).
        for h in &mut b.hdrs[..b.dirty] {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            h.msg_hdr.msg_controllen = size_of::<[u64; 8]>();
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        b.dirty = 0;
        b.single = b.idle;
        let r = if b.idle {
            // The last call found nothing (a busy poller's loop): one datagram (a GRO train
            // counts as one) with `recvmsg`, which costs less than `recvmmsg` both when
            // nothing is there and when one datagram is, the ping-pong case (64-byte one-way
            // here: 0.2-0.5 µs less). The next call, if this one found something, takes a
            // whole batch.
            // SAFETY: header 0 points at `b`'s own first slot, address storage and cmsg
            // buffer (see `RecvBatch::new`), its lengths reset above; MSG_DONTWAIT keeps it
            // non-blocking.
            let r = unsafe { crate::sys::recvmsg(self.sock.as_raw_fd(), &mut b.hdrs[0].msg_hdr, libc::MSG_DONTWAIT) };
            if r >= 0 {
                b.hdrs[0].msg_len = r as u32;
                1
            } else {
                -1
            }
        } else {
            // SAFETY: all RECV_BATCH headers point at `b`'s own heap slots (RECV_SLOT bytes
            // each), address storage and cmsg buffers, set up by `RecvBatch::new` and never
            // moved or resized (the boxes and vectors are private and keep their length);
            // their lengths were reset above. MSG_DONTWAIT keeps it non-blocking.
            unsafe {
                crate::sys::recvmmsg(self.sock.as_raw_fd(), b.hdrs.as_mut_ptr(), RECV_BATCH as u32, libc::MSG_DONTWAIT)
            }
        };
        if r < 0 {
            // Nothing was received, but reset the headers the call had next time all the
            // same.
            b.dirty = if b.single { 1 } else { RECV_BATCH };
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                b.count = 0;
                b.idle = true;
                return Ok(0);
            }
            return Err(e);
        }
        b.idle = false;
        b.dirty = (r as usize).min(RECV_BATCH);
        let n = r as usize;
        for i in 0..n {
            let h = &b.hdrs[i];
            let len = h.msg_len as usize;
            let mut seg = len;
            let mut tos = 0u8;
            // SAFETY: the kernel filled msg_control/msg_controllen; CMSG_* walk within them.
            // IP_TOS carries one byte, IPV6_TCLASS an int (read unaligned).
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (SOL_UDP, UDP_GRO) if self.gro => {
                            let s = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const u16) as usize;
                            if s > 0 {
                                seg = s;
                            }
                        }
                        (libc::IPPROTO_IP, libc::IP_TOS) => tos = *libc::CMSG_DATA(c),
                        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                            tos = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int) as u8
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
            b.meta[i] = RecvMeta { len, seg, src: sockaddr_to_std(&b.addrs[i]), tos };
        }
        b.count = n;
        Ok(n)
    }
}

fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: family says the storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: family says the storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Writes `a` into `out` as the kernel reads it (the bytes past its length untouched); returns
/// its length. Written field by field: it runs for every packet sent (a `socket2::SockAddr`
/// zeroed and copied a whole `sockaddr_storage` each time).
pub fn write_sockaddr(a: SocketAddr, out: &mut libc::sockaddr_storage) -> u32 {
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: `out` is a sockaddr_storage, larger than a sockaddr_in and aligned for it.
            unsafe { (out as *mut libc::sockaddr_storage as *mut libc::sockaddr_in).write(sin) };
            size_of::<libc::sockaddr_in>() as u32
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: v6.ip().octets() },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for a sockaddr_in6.
            unsafe { (out as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6).write(sin6) };
            size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

/// Where one received datagram sits in a [`RecvBatch`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RecvMeta {
    /// Bytes received (a GRO train may hold several packets).
    pub len: usize,
    /// Segment size: each packet of the train is `seg` bytes, the last possibly shorter.
    pub seg: usize,
    pub src: Option<SocketAddr>,
    /// The IP TOS / traffic class it arrived with (a GRO train's packets share one).
    pub tos: u8,
}

/// Preallocated receive state for `recvmmsg`.
pub struct RecvBatch {
    bufs: Box<[u8]>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; 8]>,
    meta: Vec<RecvMeta>,
    count: usize,
    /// How many headers (from the first) the kernel may have written back since they were
    /// last reset.
    dirty: usize,
    /// The last receive found nothing: the next takes one datagram with `recvmsg`.
    idle: bool,
    /// The last receive was such a one-datagram `recvmsg`: more may be queued.
    single: bool,
}

// SAFETY: the raw pointers inside iov/hdrs only ever point into this struct's own heap
// buffers (which move with it); nothing is shared.
unsafe impl Send for RecvBatch {}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    pub fn new() -> RecvBatch {
        let mut b = RecvBatch {
            bufs: vec![0u8; RECV_BATCH * RECV_SLOT].into_boxed_slice(),
            iov: (0..RECV_BATCH).map(|_| all_zero()).collect(),
            hdrs: (0..RECV_BATCH).map(|_| all_zero()).collect(),
            addrs: (0..RECV_BATCH).map(|_| all_zero()).collect(),
            cmsgs: vec![[0u64; 8]; RECV_BATCH],
            meta: vec![RecvMeta::default(); RECV_BATCH],
            count: 0,
            dirty: 0,
            idle: false,
            single: false,
        };
        // Every header points at its slot once and for all: the slots live on the heap, so
        // moving the batch moves none of them.
        for i in 0..RECV_BATCH {
            b.iov[i] =
                libc::iovec { iov_base: b.bufs[i * RECV_SLOT..].as_mut_ptr() as *mut libc::c_void, iov_len: RECV_SLOT };
            let mut m: libc::mmsghdr = all_zero();
            m.msg_hdr.msg_name = &mut b.addrs[i] as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            m.msg_hdr.msg_iov = &mut b.iov[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = b.cmsgs[i].as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = size_of::<[u64; 8]>();
            b.hdrs[i] = m;
        }
        b
    }

    /// The last receive took one datagram with `recvmsg` (it followed an empty one): it says
    /// nothing about what else is queued, where a `recvmmsg` that returns fewer than
    /// [`RECV_BATCH`] has emptied the socket.
    pub fn was_single(&self) -> bool {
        self.single
    }

    /// Datagrams of the last receive, each split into its packets:
    /// `(source, packet bytes)`.
    pub fn packets(&self) -> impl Iterator<Item = (Option<SocketAddr>, &[u8])> + '_ {
        (0..self.count).flat_map(move |i| {
            let m = self.meta[i];
            let data = &self.bufs[i * RECV_SLOT..i * RECV_SLOT + m.len];
            data.chunks(m.seg.max(1)).map(move |c| (m.src, c))
        })
    }

    /// [`RecvBatch::packets`], writable (the ICRC is hashed in place), each with the IP TOS /
    /// traffic class it arrived with.
    pub fn packets_mut(&mut self) -> impl Iterator<Item = (Option<SocketAddr>, u8, &mut [u8])> + '_ {
        let meta = &self.meta[..self.count];
        self.bufs.chunks_mut(RECV_SLOT).zip(meta).flat_map(|(slot, m)| {
            let (src, tos) = (m.src, m.tos);
            slot[..m.len].chunks_mut(m.seg.max(1)).map(move |c| (src, tos, c))
        })
    }
}

/// Preallocated send state for `sendmmsg`: packets are written straight into `data`.
pub struct SendBatch {
    data: Box<[u8]>,
    spans: Vec<(usize, usize)>,
    addrs: Vec<libc::sockaddr_storage>,
    addr_lens: Vec<u32>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Per message of `send_trains`: its `UDP_SEGMENT` control buffer and packet count.
    cmsgs: Vec<[u64; 4]>,
    train_pkts: Vec<usize>,
    len: usize,
    used: usize,
}

// SAFETY: as for RecvBatch: the raw pointers in iov/hdrs are rebuilt by every send_mmsg and
// point only into this struct's own buffers.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// Room for `slots` packets of up to `slot_bytes` each.
    pub fn new(slots: usize, slot_bytes: usize) -> SendBatch {
        SendBatch {
            data: vec![0u8; slots * slot_bytes].into_boxed_slice(),
            spans: vec![(0, 0); slots],
            addrs: (0..slots).map(|_| all_zero()).collect(),
            addr_lens: vec![0; slots],
            iov: (0..slots).map(|_| all_zero()).collect(),
            hdrs: (0..slots).map(|_| all_zero()).collect(),
            cmsgs: vec![[0; 4]; slots],
            train_pkts: vec![0; slots],
            len: 0,
            used: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self, slot_bytes: usize) -> bool {
        self.len == self.spans.len() || self.used + slot_bytes > self.data.len()
    }

    /// The queued packets, back to back (a GSO train when they are equal-sized).
    pub fn data(&self) -> &[u8] {
        &self.data[..self.used]
    }

    /// Queued packet `i` (`i < len()`), to rewrite in place (its ICRC).
    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let (start, len) = self.spans[i];
        &mut self.data[start..start + len]
    }

    /// Queued packet `i` (`i < len()`).
    pub fn packet(&self, i: usize) -> &[u8] {
        let (start, len) = self.spans[i];
        &self.data[start..start + len]
    }

    /// How many packets from `first` (< `len()`) form one GSO train: all as long as the first
    /// but the last, which may be shorter, within the kernel's limits ([`MAX_GSO_BYTES`],
    /// [`MAX_GSO_SEGMENTS`]).
    pub fn train_len(&self, first: usize) -> usize {
        let seg = self.spans[first].1;
        let (mut count, mut bytes) = (1, seg);
        while first + count < self.len && count < MAX_GSO_SEGMENTS {
            let l = self.spans[first + count].1;
            if l > seg || bytes + l > MAX_GSO_BYTES {
                break;
            }
            count += 1;
            bytes += l;
            if l < seg {
                break;
            }
        }
        count
    }

    /// Space to write the next packet into.
    pub fn next_buf(&mut self) -> &mut [u8] {
        &mut self.data[self.used..]
    }

    /// Records the packet just written into `next_buf()`.
    pub fn push(&mut self, len: usize, dst: SocketAddr) {
        let i = self.len;
        self.spans[i] = (self.used, len);
        self.addr_lens[i] = write_sockaddr(dst, &mut self.addrs[i]);
        self.used += len;
        self.len += 1;
    }

    /// Drops the first `n` packets (sent), keeping the rest in order.
    pub fn consume(&mut self, n: usize) {
        if n >= self.len {
            self.len = 0;
            self.used = 0;
            return;
        }
        let start = self.spans[n].0;
        self.data.copy_within(start..self.used, 0);
        for i in n..self.len {
            self.spans[i - n] = (self.spans[i].0 - start, self.spans[i].1);
            self.addrs[i - n] = self.addrs[i];
            self.addr_lens[i - n] = self.addr_lens[i];
        }
        self.len -= n;
        self.used -= start;
    }
}

#[cfg(test)]
#[path = "socket_tests.rs"]
mod tests;
