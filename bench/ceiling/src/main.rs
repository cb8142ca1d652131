//! urxe-ceiling: what plain kernel UDP over loopback can do on this machine, so that urxe's
//! perftest figures can be set beside ceilings measured in the same run (see ../README.md).
//!
//! Modes, each printing exactly one `mode=NAME key=value ...` line on stdout:
//!   gso       UDP_SEGMENT sends of 15 x 4136-byte segments into a UDP_GRO receiver
//!             (the bandwidth ceiling; `gbps` is RDMA payload = UDP payload x 4096/4136)
//!   mmsg64    64-byte datagrams, sendmmsg / recvmmsg in batches of 64
//!   gso64     64-byte messages as UDP_SEGMENT trains of 64 into a UDP_GRO receiver (the
//!             message-rate ceiling of a UDP engine that batches small messages, as urxe does)
//!   pingpong  64-byte ping-pong, both sides spinning on non-blocking receives (the latency floor)
//!   pingpong_srvblock  the same with a server that sleeps in poll() between pings: the round
//!             trip to a process that is not polling (a passive READ responder)
//!   pingpong_block  the same with both sides asleep in a blocking recv() (the limit of an
//!             event-driven program: one wake-up per one-way trip)
//!   pingpong_rc  the busy-poll ping-pong of a reliable-connected RoCE engine: each one-way trip
//!             carries two 20-byte datagrams, the message (a 2-byte SEND or WRITE is 20 bytes of
//!             UDP payload) and the ACK of the peer's last one (20 bytes too), as one UDP_SEGMENT
//!             train into a UDP_GRO receiver, the cheapest way found here to move two datagrams
//!             per trip (ib_send_lat's and ib_write_lat's floor over UDP on this machine)
//!
//! `-w NS` makes each side of the busy-poll ping-pong compute (spin on the clock) NS ns before
//! each send, so that a one-way trip takes as long as another engine's: what the platform's
//! interruptions (timer ticks, the host) do to the tail of a trip that long.
//!
//! Sender / client thread pinned to CPU 0, receiver / server thread to CPU 1 (`-c`), receiver on
//! 127.0.0.2:4791 (another port if 4791 is taken), sender on 127.0.0.3. Loopback only. Every loop
//! ends on a deadline and on a count.

use std::io;
use std::mem;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

// Linux UDP socket options (uapi linux/udp.h); spelled out so the libc version does not matter.
const SOL_UDP: i32 = 17;
pub(crate) const UDP_SEGMENT: i32 = 103;
pub(crate) const UDP_GRO: i32 = 104;

const RX_IP: [u8; 4] = [127, 0, 0, 2];
const TX_IP: [u8; 4] = [127, 0, 0, 3];
const ROCEV2_PORT: u16 = 4791;

/// One RoCEv2 packet carrying 4096 bytes of RDMA payload, as a UDP payload (payload + transport
/// headers + ICRC), the segment size the gso mode sends.
const SEG: usize = 4136;
const RDMA_PAYLOAD: usize = 4096;
/// 15 x 4136 = 62040 B: the most equal segments that fit in one UDP datagram (64 KiB limit).
const SEGS_PER_SEND: usize = 15;
const SMALL: usize = 64;
/// An RC one-way trip of `pingpong_rc`: the message and the ACK, 20 bytes of UDP payload each
/// (BTH 12 + 2 bytes of payload padded to 4 + ICRC 4; BTH 12 + AETH 4 + ICRC 4).
const RC_SEG: usize = 20;
const RC_TRIP: usize = 2 * RC_SEG;
const BATCH: usize = 64;

/// How long a receiver keeps draining after the sender stopped, when packets are still missing.
const DRAIN_QUIET: Duration = Duration::from_millis(200);
/// A ping-pong round trip that takes longer than this counts as lost.
const RTT_TIMEOUT: Duration = Duration::from_millis(50);

struct Cfg {
    secs: f64,
    round_trips: u64,
    tx_cpu: Option<usize>,
    rx_cpu: Option<usize>,
    buf: usize,
    /// ns each side of the busy-poll ping-pong computes before each send (`-w`).
    work_ns: u64,
}

// ---------------------------------------------------------------- small socket layer over libc

struct Fd(i32);

impl Drop for Fd {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn sockaddr(ip: [u8; 4], port: u16) -> libc::sockaddr_in {
    let mut a: libc::sockaddr_in = unsafe { mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_port = port.to_be();
    a.sin_addr = libc::in_addr { s_addr: u32::from_ne_bytes(ip) };
    a
}

pub(crate) fn set_int(fd: i32, level: i32, name: i32, val: i32) -> io::Result<()> {
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const i32 as *const libc::c_void,
            mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    cvt(r).map(|_| ())
}

fn get_int(fd: i32, level: i32, name: i32) -> io::Result<i32> {
    let mut val: i32 = 0;
    let mut len = mem::size_of::<i32>() as libc::socklen_t;
    let r = unsafe { libc::getsockopt(fd, level, name, &mut val as *mut i32 as *mut libc::c_void, &mut len) };
    cvt(r).map(|_| val)
}

/// A UDP socket bound to ip:port with big buffers (the FORCE variants need CAP_NET_ADMIN; the
/// plain ones are capped by net.core.{r,w}mem_max) and DF set, as an RDMA engine would set it.
fn udp_socket(ip: [u8; 4], port: u16, buf: usize) -> io::Result<(Fd, u16)> {
    let fd = Fd(cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?);
    let b = buf.min(i32::MAX as usize / 2) as i32;
    if set_int(fd.0, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, b).is_err() {
        let _ = set_int(fd.0, libc::SOL_SOCKET, libc::SO_RCVBUF, b);
    }
    if set_int(fd.0, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, b).is_err() {
        let _ = set_int(fd.0, libc::SOL_SOCKET, libc::SO_SNDBUF, b);
    }
    set_int(fd.0, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
    let a = sockaddr(ip, port);
    cvt(unsafe {
        libc::bind(
            fd.0,
            &a as *const libc::sockaddr_in as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    })?;
    let mut got: libc::sockaddr_in = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    cvt(unsafe { libc::getsockname(fd.0, &mut got as *mut libc::sockaddr_in as *mut libc::sockaddr, &mut len) })?;
    Ok((fd, u16::from_be(got.sin_port)))
}

/// The receiving side: 127.0.0.2:4791, or an ephemeral port there if 4791 is in use (another
/// engineer's engine may hold it; the port number changes nothing in the kernel's path).
fn rx_socket(buf: usize) -> io::Result<(Fd, u16)> {
    match udp_socket(RX_IP, ROCEV2_PORT, buf) {
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => udp_socket(RX_IP, 0, buf),
        r => r,
    }
}

fn connect(fd: &Fd, ip: [u8; 4], port: u16) -> io::Result<()> {
    let a = sockaddr(ip, port);
    cvt(unsafe {
        libc::connect(
            fd.0,
            &a as *const libc::sockaddr_in as *const libc::sockaddr,
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Pin the calling thread; false if that failed (then it runs wherever the scheduler puts it).
fn pin(cpu: Option<usize>) -> bool {
    let Some(c) = cpu else { return true };
    unsafe {
        let mut set: libc::cpu_set_t = mem::zeroed();
        libc::CPU_SET(c, &mut set);
        libc::sched_setaffinity(0, mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// User + system CPU seconds of the calling thread.
fn thread_cpu_s() -> f64 {
    let mut ru: libc::rusage = unsafe { mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `Udp: RcvbufErrors` from /proc/net/snmp (machine-wide: drops because a receive queue was full).
fn udp_rcvbuf_errors() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("Udp: "));
    let names: Vec<&str> = lines.next()?.split_whitespace().collect();
    let vals: Vec<&str> = lines.next()?.split_whitespace().collect();
    let i = names.iter().position(|n| *n == "RcvbufErrors")?;
    vals.get(i)?.parse().ok()
}

fn seq_at(buf: &[u8], off: usize) -> Option<u64> {
    buf.get(off..off + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()))
}

// ---------------------------------------------------------------- one-way stream framework

#[derive(Default)]
struct TxOut {
    sent: u64,
    calls: u64,
    would_block: u64,
    secs: f64,
    cpu_s: f64,
    pinned: bool,
    err: Option<String>,
}

#[derive(Default)]
struct RxOut {
    msgs: u64,
    bytes: u64,
    recvs: u64,
    gro_cmsgs: u64,
    intact: u64,
    gaps: u64,
    reordered: u64,
    next_seq: u64,
    window_s: f64,
    in_recv_s: f64,
    cpu_s: f64,
    pinned: bool,
    err: Option<String>,
}

impl RxOut {
    /// Account one received message's sequence number.
    fn seq(&mut self, s: u64) {
        if s > self.next_seq {
            self.gaps += s - self.next_seq;
        } else if s < self.next_seq {
            self.reordered += 1;
        }
        self.next_seq = self.next_seq.max(s + 1);
    }
}

/// What a receive call did.
enum Got {
    Data,
    Empty,
}

/// Run a sender thread for `cfg.secs` and a busy-polling receiver thread until it has everything
/// the sender sent (or nothing came for DRAIN_QUIET after the sender stopped, or a hard deadline).
/// `send(seq)` sends messages numbered from `seq` and returns how many went (0 if the socket would
/// block); `recv(&mut RxOut)` makes one non-blocking receive call and accounts what it got.
fn stream<S, R>(cfg: &Cfg, mut send: S, mut recv: R) -> (TxOut, RxOut)
where
    S: FnMut(u64) -> io::Result<u64> + Send,
    R: FnMut(&mut RxOut) -> io::Result<Got> + Send,
{
    let barrier = Barrier::new(2);
    let done = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let secs = Duration::from_secs_f64(cfg.secs);
    std::thread::scope(|s| {
        let tx = s.spawn(|| {
            let mut o = TxOut { pinned: pin(cfg.tx_cpu), ..Default::default() };
            barrier.wait();
            let c0 = thread_cpu_s();
            let t0 = Instant::now();
            let deadline = t0 + secs;
            // a count bound as well: far above what a kernel can do in that time
            let max_calls = (cfg.secs * 50e6) as u64 + 1000;
            while o.calls < max_calls && Instant::now() < deadline {
                o.calls += 1;
                match send(o.sent) {
                    Ok(0) => o.would_block += 1,
                    Ok(n) => o.sent += n,
                    Err(e) => {
                        o.err = Some(format!("send: {e}"));
                        break;
                    }
                }
            }
            o.secs = t0.elapsed().as_secs_f64();
            o.cpu_s = thread_cpu_s() - c0;
            total.store(o.sent, Ordering::Release);
            done.store(true, Ordering::Release);
            o
        });
        let rx = s.spawn(|| {
            let mut o = RxOut { pinned: pin(cfg.rx_cpu), ..Default::default() };
            barrier.wait();
            let c0 = thread_cpu_s();
            let t0 = Instant::now();
            let hard = t0 + secs + Duration::from_secs(5);
            let mut t_last = t0;
            let mut stopped_at: Option<Instant> = None;
            loop {
                let a = Instant::now();
                match recv(&mut o) {
                    Ok(Got::Data) => {
                        t_last = Instant::now();
                        o.in_recv_s += (t_last - a).as_secs_f64();
                        continue;
                    }
                    Ok(Got::Empty) => {}
                    Err(e) => {
                        o.err = Some(format!("recv: {e}"));
                        break;
                    }
                }
                let now = Instant::now();
                if now > hard {
                    break;
                }
                if done.load(Ordering::Acquire) {
                    if o.msgs >= total.load(Ordering::Acquire) {
                        break;
                    }
                    let since = *stopped_at.get_or_insert(now);
                    if now.duration_since(since.max(t_last)) > DRAIN_QUIET {
                        break;
                    }
                }
            }
            o.window_s = (t_last - t0).as_secs_f64();
            o.cpu_s = thread_cpu_s() - c0;
            o
        });
        (tx.join().expect("sender thread"), rx.join().expect("receiver thread"))
    })
}

fn loss_pct(tx: &TxOut, rx: &RxOut) -> f64 {
    if tx.sent == 0 {
        0.0
    } else {
        100.0 * (tx.sent.saturating_sub(rx.msgs)) as f64 / tx.sent as f64
    }
}

fn common_fields(tx: &TxOut, rx: &RxOut, drops: Option<u64>) -> String {
    let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    format!(
        "tx_msgs={} rx_msgs={} loss_pct={:.3} seq_gaps={} reordered={} udp_rcvbuf_errors={} \
         tx_pps={:.0} tx_secs={:.3} rx_window_s={:.3} tx_cpu_s={:.2} rx_cpu_s={:.2} rx_in_recv_pct={:.0} \
         tx_would_block={} pinned={}{}",
        tx.sent,
        rx.msgs,
        loss_pct(tx, rx),
        rx.gaps,
        rx.reordered,
        drops.map(|d| d.to_string()).unwrap_or_else(|| "NA".into()),
        rate(tx.sent, tx.secs),
        tx.secs,
        rx.window_s,
        tx.cpu_s,
        rx.cpu_s,
        if rx.window_s > 0.0 { 100.0 * rx.in_recv_s / rx.window_s } else { 0.0 },
        tx.would_block,
        if tx.pinned && rx.pinned { 1 } else { 0 },
        match (&tx.err, &rx.err) {
            (None, None) => String::new(),
            (a, b) => format!(
                " error={}",
                clean(&[a.as_deref(), b.as_deref()].iter().flatten().cloned().collect::<Vec<_>>().join("; "))
            ),
        }
    )
}

/// A value without blanks, so the line stays `key=value ...`.
fn clean(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join("_")
}

fn is_would_block(e: i32) -> bool {
    e == libc::EAGAIN || e == libc::EWOULDBLOCK || e == libc::ENOBUFS || e == libc::EINTR
}

// ---------------------------------------------------------------- gso

fn mode_gso(cfg: &Cfg) -> Result<String, String> {
    gso_stream(cfg, SEG, SEGS_PER_SEND, "gso")
}

fn mode_gso64(cfg: &Cfg) -> Result<String, String> {
    gso_stream(cfg, SMALL, BATCH, "gso64")
}

/// UDP_SEGMENT sends of `segs` segments of `seg` bytes into a UDP_GRO receiver.
fn gso_stream(cfg: &Cfg, seg: usize, segs: usize, name: &str) -> Result<String, String> {
    let (rx, port) = rx_socket(cfg.buf).map_err(|e| format!("rx socket: {e}"))?;
    set_int(rx.0, SOL_UDP, UDP_GRO, 1).map_err(|e| format!("UDP_GRO: {e}"))?;
    let rcvbuf = get_int(rx.0, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0);
    let (tx, _) = udp_socket(TX_IP, 0, cfg.buf).map_err(|e| format!("tx socket: {e}"))?;
    connect(&tx, RX_IP, port).map_err(|e| format!("connect: {e}"))?;
    set_int(tx.0, SOL_UDP, UDP_SEGMENT, seg as i32).map_err(|e| format!("UDP_SEGMENT: {e}"))?;
    let (txfd, rxfd) = (tx.0, rx.0);

    let mut sbuf = vec![0u8; seg * segs];
    let send = move |seq: u64| -> io::Result<u64> {
        for i in 0..segs {
            sbuf[i * seg..i * seg + 8].copy_from_slice(&(seq + i as u64).to_le_bytes());
        }
        let r = unsafe { libc::send(txfd, sbuf.as_ptr() as *const libc::c_void, sbuf.len(), 0) };
        if r < 0 {
            let e = errno();
            return if is_would_block(e) { Ok(0) } else { Err(io::Error::from_raw_os_error(e)) };
        }
        Ok(segs as u64)
    };

    let mut rbuf = vec![0u8; 65536];
    let mut cbuf = [0u64; 16];
    let recv = move |o: &mut RxOut| -> io::Result<Got> {
        let mut iov = libc::iovec { iov_base: rbuf.as_mut_ptr() as *mut libc::c_void, iov_len: rbuf.len() };
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = mem::size_of_val(&cbuf) as _;
        let n = unsafe { libc::recvmsg(rxfd, &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = errno();
            return if is_would_block(e) { Ok(Got::Empty) } else { Err(io::Error::from_raw_os_error(e)) };
        }
        let n = n as usize;
        let mut gso: Option<usize> = None;
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const i32);
                    gso = Some(v as usize);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let gseg = gso.filter(|g| *g > 0).unwrap_or(n.max(1));
        let nseg = n.div_ceil(gseg).max(1);
        let first = seq_at(&rbuf, 0);
        let mut consecutive = true;
        for k in 0..nseg {
            if let Some(s) = seq_at(&rbuf[..n], k * gseg) {
                o.seq(s);
                if first.map(|f| f + k as u64) != Some(s) {
                    consecutive = false;
                }
            }
        }
        o.recvs += 1;
        o.msgs += nseg as u64;
        o.bytes += n as u64;
        if gso.is_some() {
            o.gro_cmsgs += 1;
        }
        if n == seg * segs && gso == Some(seg) && consecutive {
            o.intact += 1;
        }
        Ok(Got::Data)
    };

    let d0 = udp_rcvbuf_errors();
    let (t, r) = stream(cfg, send, recv);
    let drops = d0.and_then(|a| udp_rcvbuf_errors().map(|b| b.saturating_sub(a)));
    let udp_gbps = if r.window_s > 0.0 { r.bytes as f64 * 8.0 / r.window_s / 1e9 } else { 0.0 };
    // The RDMA payload share of a full-size RoCE packet; for small messages, the rate matters.
    let gbps = udp_gbps * RDMA_PAYLOAD as f64 / SEG as f64;
    let seg_per_s = if r.window_s > 0.0 { r.msgs as f64 / r.window_s } else { 0.0 };
    Ok(format!(
        "mode={name} gbps={:.2} udp_gbps={:.2} mmsg_per_s={:.4} seg_per_s={:.0} seg_bytes={} segs_per_send={} recvs={} \
         gro_cmsg_recvs={} intact_pct={:.1} rcvbuf={} port={} {}",
        gbps,
        udp_gbps,
        seg_per_s / 1e6,
        seg_per_s,
        seg,
        segs,
        r.recvs,
        r.gro_cmsgs,
        if r.recvs > 0 { 100.0 * r.intact as f64 / r.recvs as f64 } else { 0.0 },
        rcvbuf,
        port,
        common_fields(&t, &r, drops)
    ))
}

// ---------------------------------------------------------------- mmsg64

fn mode_mmsg64(cfg: &Cfg) -> Result<String, String> {
    let (rx, port) = rx_socket(cfg.buf).map_err(|e| format!("rx socket: {e}"))?;
    let rcvbuf = get_int(rx.0, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap_or(0);
    let (tx, _) = udp_socket(TX_IP, 0, cfg.buf).map_err(|e| format!("tx socket: {e}"))?;
    connect(&tx, RX_IP, port).map_err(|e| format!("connect: {e}"))?;
    let (txfd, rxfd) = (tx.0, rx.0);

    let mut sbuf = vec![0u8; SMALL * BATCH];
    let send = move |seq: u64| -> io::Result<u64> {
        let mut iov: [libc::iovec; BATCH] = unsafe { mem::zeroed() };
        let mut hdr: [libc::mmsghdr; BATCH] = unsafe { mem::zeroed() };
        for i in 0..BATCH {
            let m = &mut sbuf[i * SMALL..(i + 1) * SMALL];
            m[..8].copy_from_slice(&(seq + i as u64).to_le_bytes());
            iov[i] = libc::iovec { iov_base: m.as_mut_ptr() as *mut libc::c_void, iov_len: SMALL };
            hdr[i].msg_hdr.msg_iov = &mut iov[i];
            hdr[i].msg_hdr.msg_iovlen = 1;
        }
        let r = unsafe { libc::sendmmsg(txfd, hdr.as_mut_ptr(), BATCH as _, 0) };
        if r < 0 {
            let e = errno();
            return if is_would_block(e) { Ok(0) } else { Err(io::Error::from_raw_os_error(e)) };
        }
        Ok(r as u64)
    };

    const SLOT: usize = 256;
    let mut rbuf = vec![0u8; SLOT * BATCH];
    let recv = move |o: &mut RxOut| -> io::Result<Got> {
        let mut iov: [libc::iovec; BATCH] = unsafe { mem::zeroed() };
        let mut hdr: [libc::mmsghdr; BATCH] = unsafe { mem::zeroed() };
        for i in 0..BATCH {
            iov[i] = libc::iovec { iov_base: rbuf[i * SLOT..].as_mut_ptr() as *mut libc::c_void, iov_len: SLOT };
            hdr[i].msg_hdr.msg_iov = &mut iov[i];
            hdr[i].msg_hdr.msg_iovlen = 1;
        }
        let r = unsafe { libc::recvmmsg(rxfd, hdr.as_mut_ptr(), BATCH as _, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if r < 0 {
            let e = errno();
            return if is_would_block(e) { Ok(Got::Empty) } else { Err(io::Error::from_raw_os_error(e)) };
        }
        if r == 0 {
            return Ok(Got::Empty);
        }
        for (i, h) in hdr.iter().enumerate().take(r as usize) {
            let len = h.msg_len as usize;
            if let Some(s) = seq_at(&rbuf[i * SLOT..i * SLOT + len.min(SLOT)], 0) {
                o.seq(s);
            }
            o.bytes += len as u64;
        }
        o.recvs += 1;
        o.msgs += r as u64;
        Ok(Got::Data)
    };

    let d0 = udp_rcvbuf_errors();
    let (t, r) = stream(cfg, send, recv);
    let drops = d0.and_then(|a| udp_rcvbuf_errors().map(|b| b.saturating_sub(a)));
    let mps = if r.window_s > 0.0 { r.msgs as f64 / r.window_s } else { 0.0 };
    Ok(format!(
        "mode=mmsg64 mmsg_per_s={:.4} msgs_per_s={:.0} msg_bytes={} batch={} recvs={} rcvbuf={} port={} {}",
        mps / 1e6,
        mps,
        SMALL,
        BATCH,
        r.recvs,
        rcvbuf,
        port,
        common_fields(&t, &r, drops)
    ))
}

// ---------------------------------------------------------------- pingpong

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

/// What one ping-pong trip carries and how the server waits for it.
#[derive(Clone, Copy, PartialEq)]
enum Trip {
    /// One 64-byte datagram; the server busy-polls.
    Plain,
    /// One 64-byte datagram; the server sleeps in poll() until it arrives.
    ServerBlocks,
    /// One 64-byte datagram; both sides sleep in a blocking receive until it arrives (the
    /// round trip of two programs asleep in `ibv_get_cq_event`).
    BothBlock,
    /// Two 20-byte datagrams as one GSO train (an RC message and the ACK of the peer's).
    Rc,
}

fn mode_pingpong(cfg: &Cfg) -> Result<String, String> {
    pingpong(cfg, Trip::Plain)
}

/// The busy-poll ping-pong of a reliable-connected engine: what each one-way trip of
/// ib_send_lat / ib_write_lat must move over UDP (see the module doc).
fn mode_pingpong_rc(cfg: &Cfg) -> Result<String, String> {
    pingpong(cfg, Trip::Rc)
}

/// The client busy-polls, the server sleeps in poll() until each ping arrives: the round trip of
/// a request to a process that is not polling (ib_read_lat's passive responder, whose progress
/// thread must be woken on its CPU).
fn mode_pingpong_srvblock(cfg: &Cfg) -> Result<String, String> {
    pingpong(cfg, Trip::ServerBlocks)
}

/// Both sides sleep in a blocking `recv` until the other's datagram arrives: every one-way
/// trip is one wake-up of a sleeping thread, the limit of an event-driven program (one that
/// sleeps in `ibv_get_cq_event` or poll()s its completion channel). `../shared/bench/udp-ceiling`
/// calls it `pingpong_block`.
fn mode_pingpong_block(cfg: &Cfg) -> Result<String, String> {
    pingpong(cfg, Trip::BothBlock)
}

/// Sets `SO_RCVTIMEO` on `fd`: a blocking receive returns EAGAIN after `ms`.
fn recv_timeout(fd: i32, ms: i64) -> io::Result<()> {
    let tv = libc::timeval { tv_sec: ms / 1000, tv_usec: (ms % 1000) * 1000 };
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    cvt(r).map(|_| ())
}

fn pingpong(cfg: &Cfg, trip: Trip) -> Result<String, String> {
    let both_block = trip == Trip::BothBlock;
    let server_blocks = trip == Trip::ServerBlocks;
    let name = match trip {
        Trip::Plain => "pingpong",
        Trip::ServerBlocks => "pingpong_srvblock",
        Trip::BothBlock => "pingpong_block",
        Trip::Rc => "pingpong_rc",
    };
    let (srv, port) = rx_socket(cfg.buf).map_err(|e| format!("server socket: {e}"))?;
    let (cli, cport) = udp_socket(TX_IP, 0, cfg.buf).map_err(|e| format!("client socket: {e}"))?;
    // An RC engine's sockets stay unconnected: a connected socket numbers its datagrams' IP ID
    // from a counter, and the ICRC covers the IP ID, so every send names its destination (and
    // the kernel looks up the route each time).
    if trip != Trip::Rc {
        connect(&cli, RX_IP, port).map_err(|e| format!("connect: {e}"))?;
        connect(&srv, TX_IP, cport).map_err(|e| format!("connect: {e}"))?;
    }
    let (cfd, sfd) = (cli.0, srv.0);
    // Asleep in recv(): each side wakes at least every 50 ms to look at its bounds.
    let (recv_flags, look_every) = if both_block { (0, 1) } else { (libc::MSG_DONTWAIT, 64) };
    if both_block {
        for fd in [cfd, sfd] {
            recv_timeout(fd, RTT_TIMEOUT.as_millis() as i64).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        }
    }
    // Bytes of one trip and of each of its segments; an RC trip leaves as one train of two
    // segments and arrives as one GRO datagram (or, should the kernel split it, as two: both
    // carry the trip's sequence number), each send naming its destination.
    let (msg, seg, to_srv, to_cli) = if trip == Trip::Rc {
        for fd in [cfd, sfd] {
            set_int(fd, SOL_UDP, UDP_SEGMENT, RC_SEG as i32).map_err(|e| format!("UDP_SEGMENT: {e}"))?;
            set_int(fd, SOL_UDP, UDP_GRO, 1).map_err(|e| format!("UDP_GRO: {e}"))?;
        }
        (RC_TRIP, RC_SEG, Some(sockaddr(RX_IP, port)), Some(sockaddr(TX_IP, cport)))
    } else {
        (SMALL, SMALL, None, None)
    };
    let n = cfg.round_trips.max(1);
    let warmup = (n / 10).min(1000);
    // time bound: generous for n round trips at a few µs, but finite whatever happens
    let cap = Duration::from_secs_f64((cfg.secs * 10.0).max(10.0));
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(2);

    struct Cli {
        rtt_ns: Vec<u64>,
        lost: u64,
        stale: u64,
        done: u64,
        wall_s: f64,
        cpu_s: f64,
        pinned: bool,
        err: Option<String>,
    }
    let (c, s_echoed, s_cpu, s_pinned, s_err) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let pinned = pin(cfg.rx_cpu);
            let mut buf = [0u8; 2048];
            let mut echoed = 0u64;
            let mut err = None;
            barrier.wait();
            let c0 = thread_cpu_s();
            let hard = Instant::now() + cap + Duration::from_secs(1);
            let mut polls = 0u64;
            // Bytes of the current trip received so far, and the reply (the trip's sequence
            // number in every segment).
            let mut held = 0usize;
            let mut reply = [0u8; SMALL];
            loop {
                if server_blocks {
                    let mut pfd = libc::pollfd { fd: sfd, events: libc::POLLIN, revents: 0 };
                    // Sleeps until the ping arrives (or 100 ms pass, to look at `stop`).
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                }
                let r = unsafe { libc::recv(sfd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), recv_flags) };
                if r > 0 {
                    if held == 0 {
                        for s in reply[..msg].chunks_mut(seg) {
                            s[..8].copy_from_slice(&buf[..8]);
                        }
                    }
                    held += r as usize;
                    if held < msg {
                        continue;
                    }
                    held = 0;
                    work(cfg.work_ns);
                    let w = send_to(sfd, &reply[..msg], to_cli.as_ref());
                    if w < 0 && !is_would_block(errno()) {
                        err = Some(format!("server send: {}", io::Error::last_os_error()));
                        break;
                    }
                    echoed += 1;
                    continue;
                }
                if r < 0 && !is_would_block(errno()) {
                    err = Some(format!("server recv: {}", io::Error::last_os_error()));
                    break;
                }
                polls += 1;
                if (server_blocks || polls.is_multiple_of(look_every))
                    && (stop.load(Ordering::Acquire) || Instant::now() > hard)
                {
                    break;
                }
            }
            (echoed, thread_cpu_s() - c0, pinned, err)
        });
        let client = s.spawn(|| {
            let mut o = Cli {
                rtt_ns: Vec::with_capacity(n as usize),
                lost: 0,
                stale: 0,
                done: 0,
                wall_s: 0.0,
                cpu_s: 0.0,
                pinned: pin(cfg.tx_cpu),
                err: None,
            };
            let mut buf = [0u8; SMALL];
            let mut rbuf = [0u8; 2048];
            barrier.wait();
            let c0 = thread_cpu_s();
            let t0 = Instant::now();
            let hard = t0 + cap;
            'trips: for i in 0..warmup + n {
                if Instant::now() > hard {
                    break;
                }
                for s in buf[..msg].chunks_mut(seg) {
                    s[..8].copy_from_slice(&i.to_le_bytes());
                }
                let ts = Instant::now();
                work(cfg.work_ns);
                let w = send_to(cfd, &buf[..msg], to_srv.as_ref());
                if w < 0 && !is_would_block(errno()) {
                    o.err = Some(format!("client send: {}", io::Error::last_os_error()));
                    break;
                }
                let mut held = 0usize;
                loop {
                    let r = unsafe { libc::recv(cfd, rbuf.as_mut_ptr() as *mut libc::c_void, rbuf.len(), recv_flags) };
                    if r >= 8 {
                        if seq_at(&rbuf, 0) == Some(i) {
                            held += r as usize;
                            if held < msg {
                                continue;
                            }
                            let rtt = ts.elapsed().as_nanos() as u64;
                            if i >= warmup {
                                o.rtt_ns.push(rtt);
                            }
                            o.done += 1;
                            continue 'trips;
                        }
                        o.stale += 1;
                        continue;
                    }
                    if r < 0 && !is_would_block(errno()) {
                        o.err = Some(format!("client recv: {}", io::Error::last_os_error()));
                        break 'trips;
                    }
                    if ts.elapsed() > RTT_TIMEOUT {
                        o.lost += 1;
                        continue 'trips;
                    }
                }
            }
            o.wall_s = t0.elapsed().as_secs_f64();
            o.cpu_s = thread_cpu_s() - c0;
            stop.store(true, Ordering::Release);
            o
        });
        let c = client.join().expect("client thread");
        let (e, cpu, pinned, err) = server.join().expect("server thread");
        (c, e, cpu, pinned, err)
    });

    let mut rtt = c.rtt_ns.clone();
    rtt.sort_unstable();
    let ow = |ns: u64| ns as f64 / 2.0 / 1000.0;
    let avg = if rtt.is_empty() { 0.0 } else { rtt.iter().sum::<u64>() as f64 / rtt.len() as f64 / 2.0 / 1000.0 };
    let errs: Vec<String> = [c.err, s_err].into_iter().flatten().collect();
    Ok(format!(
        "mode={name} rtt_p50_us={:.2} ow_p50_us={:.2} ow_p99_us={:.2} ow_avg_us={:.2} ow_min_us={:.2} ow_max_us={:.2} \
         round_trips={} warmup={} measured={} lost={} stale={} echoed={} wall_s={:.3} cli_cpu_s={:.2} srv_cpu_s={:.2} \
         msg_bytes={} segs={} work_ns={} port={} pinned={}{}",
        percentile(&rtt, 50.0) as f64 / 1000.0,
        ow(percentile(&rtt, 50.0)),
        ow(percentile(&rtt, 99.0)),
        avg,
        ow(rtt.first().copied().unwrap_or(0)),
        ow(rtt.last().copied().unwrap_or(0)),
        c.done,
        warmup,
        rtt.len(),
        c.lost,
        c.stale,
        s_echoed,
        c.wall_s,
        c.cpu_s,
        s_cpu,
        msg,
        msg / seg,
        cfg.work_ns,
        port,
        if c.pinned && s_pinned { 1 } else { 0 },
        if errs.is_empty() { String::new() } else { format!(" error={}", clean(&errs.join("; "))) }
    ))
}

/// One datagram (or GSO train) on `fd`: to its connected peer, or to `to`.
fn send_to(fd: i32, data: &[u8], to: Option<&libc::sockaddr_in>) -> isize {
    let p = data.as_ptr() as *const libc::c_void;
    match to {
        None => unsafe { libc::send(fd, p, data.len(), 0) },
        Some(a) => unsafe {
            libc::sendto(
                fd,
                p,
                data.len(),
                0,
                a as *const libc::sockaddr_in as *const libc::sockaddr,
                mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        },
    }
}

/// Computes for `ns` nanoseconds (spins on the clock): the stand-in for an engine's own work
/// on each one-way trip.
fn work(ns: u64) {
    if ns == 0 {
        return;
    }
    let t = Instant::now();
    while (t.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

// ---------------------------------------------------------------- main

const USAGE: &str =
    "usage: urxe-ceiling [-t SECS] [-n ROUND_TRIPS] [-c TXCPU,RXCPU|none] [-b SOCKBUF_BYTES] [-w NS] MODE...
modes: gso gso64 mmsg64 pingpong pingpong_srvblock pingpong_block pingpong_rc all
   or: urxe-ceiling pp-server ADDR:PORT [-t SECS] [-r] | pp-client ADDR:PORT [-n TRIPS] [-t SECS] [-r]
       (the busy-poll ping-pong between two processes, e.g. two network namespaces)
  -t  seconds each throughput mode sends (default 3)
  -n  ping-pong round trips (default 100000; a 10% warm-up, at most 1000, is added)
  -c  CPUs of the sender/client and receiver/server threads (default 0,1)
  -b  socket buffer size requested (default 33554432; the kernel doubles it)
  -w  ns each side of the busy-poll ping-pong computes before each send (default 0, at most 1000000)";

const ALL_MODES: [&str; 7] =
    ["gso", "gso64", "mmsg64", "pingpong", "pingpong_srvblock", "pingpong_block", "pingpong_rc"];

fn parse_args(args: &[String]) -> Result<(Cfg, Vec<String>), String> {
    let mut cfg = Cfg { secs: 3.0, round_trips: 100_000, tx_cpu: Some(0), rx_cpu: Some(1), buf: 32 << 20, work_ns: 0 };
    let mut modes = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "-t" => {
                cfg.secs = val("-t")?.parse().map_err(|_| "bad -t".to_string())?;
                if !(cfg.secs > 0.0 && cfg.secs <= 600.0) {
                    return Err("-t must be in (0, 600]".into());
                }
            }
            "-n" => {
                cfg.round_trips = val("-n")?.parse().map_err(|_| "bad -n".to_string())?;
                if cfg.round_trips == 0 || cfg.round_trips > 100_000_000 {
                    return Err("-n must be in [1, 1e8]".into());
                }
            }
            "-b" => cfg.buf = val("-b")?.parse().map_err(|_| "bad -b".to_string())?,
            "-w" => {
                cfg.work_ns = val("-w")?.parse().map_err(|_| "bad -w".to_string())?;
                if cfg.work_ns > 1_000_000 {
                    return Err("-w must be in [0, 1000000]".into());
                }
            }
            "-c" => {
                let v = val("-c")?;
                if v == "none" {
                    cfg.tx_cpu = None;
                    cfg.rx_cpu = None;
                } else {
                    let (a, b) = v.split_once(',').ok_or("-c wants TXCPU,RXCPU or none")?;
                    cfg.tx_cpu = Some(a.parse().map_err(|_| "bad -c".to_string())?);
                    cfg.rx_cpu = Some(b.parse().map_err(|_| "bad -c".to_string())?);
                }
            }
            "-h" | "--help" => return Err(String::new()),
            "all" => modes.extend(ALL_MODES.map(String::from)),
            m if ALL_MODES.contains(&m) => modes.push(a.clone()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if modes.is_empty() {
        return Err("no mode given".into());
    }
    Ok((cfg, modes))
}

mod pair;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The ping-pong between two processes (bench/hosts.sh: one per network namespace).
    if let Some(r) = pair::run(&args) {
        return match r {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("mode={} error={}", args[0], clean(&e));
                ExitCode::FAILURE
            }
        };
    }
    let (cfg, modes) = match parse_args(&args) {
        Ok(x) => x,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("urxe-ceiling: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for m in &modes {
        let r = match m.as_str() {
            "gso" => mode_gso(&cfg),
            "gso64" => mode_gso64(&cfg),
            "pingpong_srvblock" => mode_pingpong_srvblock(&cfg),
            "pingpong_block" => mode_pingpong_block(&cfg),
            "pingpong_rc" => mode_pingpong_rc(&cfg),
            "mmsg64" => mode_mmsg64(&cfg),
            _ => mode_pingpong(&cfg),
        };
        match r {
            Ok(line) => {
                if line.contains(" error=") {
                    failed = true;
                }
                println!("{line}");
            }
            Err(e) => {
                failed = true;
                println!("mode={m} error={}", clean(&e));
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn sequence_accounting() {
        let mut o = RxOut::default();
        for s in [0, 1, 2, 5, 3, 6] {
            o.seq(s);
        }
        assert_eq!(o.gaps, 2);
        assert_eq!(o.reordered, 1);
        assert_eq!(o.next_seq, 7);
    }

    #[test]
    fn args() {
        let a: Vec<String> = ["-t", "1", "-c", "none", "all"].iter().map(|s| s.to_string()).collect();
        let (c, m) = parse_args(&a).unwrap();
        assert_eq!(c.secs, 1.0);
        assert_eq!(c.tx_cpu, None);
        assert_eq!(m, ["gso", "gso64", "mmsg64", "pingpong", "pingpong_srvblock", "pingpong_block", "pingpong_rc"]);
        let rc: Vec<String> = ["pingpong_rc"].iter().map(|s| s.to_string()).collect();
        assert_eq!(parse_args(&rc).unwrap().1, ["pingpong_rc"]);
        assert!(parse_args(&["pingpong_xx".to_string()]).is_err());
        assert!(parse_args(&["-t".to_string(), "0".to_string(), "gso".to_string()]).is_err());
        assert!(parse_args(&[]).is_err());
        let w: Vec<String> = ["-w", "3500", "pingpong"].iter().map(|s| s.to_string()).collect();
        assert_eq!(parse_args(&w).unwrap().0.work_ns, 3500);
        let too_long: Vec<String> = ["-w", "1000001", "pingpong"].iter().map(|s| s.to_string()).collect();
        assert!(parse_args(&too_long).is_err());
        let bad: Vec<String> = ["-w", "x", "pingpong"].iter().map(|s| s.to_string()).collect();
        assert!(parse_args(&bad).is_err());
    }
}
