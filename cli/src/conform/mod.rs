//! `urxe conform`: scripted RoCEv2 scenarios against a remote peer, each graded against the
//! IBTA statement it tests.
//!
//! The peer (kernel rxe, a RoCE NIC, urxe in another process) runs the small verbs program
//! `tests/conform/peer.c`, which owns a PD, a CQ, two MRs and the QPs the scenarios ask for and
//! answers one-line commands over TCP ([`PeerLink`]). This side plays the other end of every
//! connection without a verbs stack: it crafts each packet with the wire layer and sends it from
//! a UDP socket bound to `local:4791` ([`Wire`]), then looks at what the peer answers on the wire
//! and, through the peer program, at its completions, memory and QP state.
//!
//! Grades: **pass** (every check held), **fail**, or **deviation** (every failed check is one the
//! chosen peer profile documents, with the reason; see [`profile`]).
#![forbid(unsafe_code)]

pub mod peer;
pub mod profile;
pub mod report;
pub mod scenarios;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use urxe::transport::socket::{RecvBatch, RoceSocket};
use urxe::wire::aeth::{AethRepr, Syndrome};
use urxe::wire::icrc::{IpFields, ROCEV2_PORT};
use urxe::wire::packet::{finish, Headers};
use urxe::wire::{parse, Psn};

pub use peer::{PeerLink, Wc};
pub use profile::Profile;
pub use report::{Grade, ScenarioResult};

/// What to run against whom.
#[derive(Clone, Debug)]
pub struct Config {
    /// The peer program's TCP address.
    pub peer: SocketAddr,
    /// This side's address (same family as the peer's GID); `local:4791` is bound for the
    /// crafted traffic.
    pub local: IpAddr,
    /// How long to wait for an answer that should come (a missing answer fails after this).
    pub wait: Duration,
    /// How long to watch for an answer that should not come.
    pub quiet: Duration,
    /// Scenario ids to run (all when empty).
    pub only: Vec<String>,
    /// Write one capture per scenario here (tcpdump on `iface`).
    pub pcap_dir: Option<PathBuf>,
    pub iface: Option<String>,
    pub profile: Profile,
}

/// One received packet, decoded.
#[derive(Clone, Debug)]
pub struct Rx {
    pub at: Instant,
    pub headers: Headers,
    pub payload: Vec<u8>,
}

impl Rx {
    pub fn opcode(&self) -> u8 {
        self.headers.bth.opcode
    }
    pub fn psn(&self) -> Psn {
        self.headers.bth.psn
    }
    pub fn syndrome(&self) -> Option<Syndrome> {
        self.headers.aeth.map(|a| a.syndrome)
    }
}

/// This side's end of the crafted traffic: one UDP socket on `local:4791`.
pub struct Wire {
    sock: RoceSocket,
    batch: RecvBatch,
    local: IpAddr,
    peer: IpAddr,
    /// Packets received but not yet taken.
    pending: Vec<Rx>,
    /// Packets that did not parse (counted, reported in the notes).
    pub malformed: usize,
}

impl Wire {
    pub fn open(local: IpAddr, peer: IpAddr) -> io::Result<Wire> {
        if local.is_ipv4() != peer.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("local address {local} and the peer's GID address {peer} are not of one family"),
            ));
        }
        let sock = RoceSocket::bind(SocketAddr::new(local, ROCEV2_PORT))?;
        Ok(Wire { sock, batch: RecvBatch::new(), local, peer, pending: Vec::new(), malformed: 0 })
    }

    /// See [`build_packet`].
    pub fn build(&self, h: &Headers, payload: &[u8], corrupt_icrc: bool) -> io::Result<Vec<u8>> {
        build_packet(self.local, self.peer, h, payload, corrupt_icrc)
    }

    /// Sends one crafted packet. Returns the time taken just before the send: never later
    /// than the packet's departure, even when this thread is preempted around the call, so a
    /// delay measured from it to a received packet's [`Rx::at`] (taken after the receive) can
    /// only come out long, never short.
    pub fn send(&mut self, h: &Headers, payload: &[u8], corrupt_icrc: bool) -> io::Result<Instant> {
        let pkt = self.build(h, payload, corrupt_icrc)?;
        let before = Instant::now();
        self.sock.send_to(&pkt, SocketAddr::new(self.peer, ROCEV2_PORT))?;
        Ok(before)
    }

    fn pump(&mut self) -> io::Result<usize> {
        let n = self.sock.recv_batch(&mut self.batch)?;
        if n == 0 {
            return Ok(0);
        }
        let at = Instant::now();
        let mut got = 0;
        for (src, data) in self.batch.packets() {
            if src.map(|s| s.ip()) != Some(self.peer) {
                continue;
            }
            match parse(data) {
                Ok(p) => {
                    self.pending.push(Rx { at, headers: p.headers, payload: p.payload.to_vec() });
                    got += 1;
                }
                Err(_) => self.malformed += 1,
            }
        }
        Ok(got)
    }

    /// Waits until a pending packet satisfies `want` (and takes it) or `limit` passes.
    pub fn wait_for(&mut self, limit: Duration, mut want: impl FnMut(&Rx) -> bool) -> io::Result<Option<Rx>> {
        let end = Instant::now() + limit;
        loop {
            if let Some(i) = self.pending.iter().position(&mut want) {
                return Ok(Some(self.pending.remove(i)));
            }
            if Instant::now() >= end {
                return Ok(None);
            }
            if self.pump()? == 0 {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }

    /// Everything that arrives within `window` (plus what was pending), in arrival order.
    pub fn gather(&mut self, window: Duration) -> io::Result<Vec<Rx>> {
        let end = Instant::now() + window;
        while Instant::now() < end {
            if self.pump()? == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(std::mem::take(&mut self.pending))
    }

    /// Forgets whatever arrived so far.
    pub fn clear(&mut self) -> io::Result<()> {
        while self.pump()? > 0 {}
        self.pending.clear();
        Ok(())
    }
}

/// Builds the UDP payload for `h` + `payload` with the ICRC for the IP/UDP headers our socket
/// sends from `local` to `peer` (IPv4: DF and ID 0; or IPv6), UDP ports 4791 both.
/// `corrupt_icrc` flips one ICRC bit.
pub fn build_packet(
    local: IpAddr,
    peer: IpAddr,
    h: &Headers,
    payload: &[u8],
    corrupt_icrc: bool,
) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; h.header_len() + payload.len() + 8];
    let hl = h.emit(&mut buf).map_err(io::Error::other)?;
    buf[hl..hl + payload.len()].copy_from_slice(payload);
    let ip = match (local, peer) {
        (IpAddr::V4(l), IpAddr::V4(p)) => IpFields::v4_df(l, p),
        (IpAddr::V6(l), IpAddr::V6(p)) => IpFields::v6(l, p),
        _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
    };
    let n = finish(&mut buf, hl, payload.len(), &ip, ROCEV2_PORT, ROCEV2_PORT).map_err(io::Error::other)?;
    buf.truncate(n);
    if corrupt_icrc {
        buf[n - 1] ^= 0x01;
    }
    Ok(buf)
}

/// An RC connection between a peer QP and this side's stand-in QP.
#[derive(Clone, Copy, Debug)]
pub struct Rc {
    /// The peer's QPN (destination of what we send).
    pub peer_qpn: u32,
    /// Our QPN (destination of what the peer sends).
    pub our_qpn: u32,
    /// The PSN the peer's responder expects first.
    pub our_psn: Psn,
    /// The peer requester's first PSN.
    pub peer_psn: Psn,
}

/// Peer QP attributes for [`Ctx::connect`].
#[derive(Clone, Copy, Debug)]
pub struct RcOpts {
    pub our_psn: u32,
    pub peer_psn: u32,
    pub min_rnr: u8,
    pub rnr_retry: u8,
    pub retry_cnt: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Access bits: 1 local write, 2 remote write, 4 remote read, 8 atomic.
    pub access: u8,
}

impl Default for RcOpts {
    fn default() -> Self {
        RcOpts {
            our_psn: 0x10_0000,
            peer_psn: 0x20_0000,
            min_rnr: 1,
            rnr_retry: 7,
            retry_cnt: 7,
            timeout: 14,
            access: 15,
        }
    }
}

/// The MR the peer program registered with every access right, and the read-only one.
#[derive(Clone, Copy, Debug)]
pub struct PeerMem {
    pub rkey: u32,
    pub addr: u64,
    pub len: u32,
    pub ro_rkey: u32,
    pub ro_addr: u64,
    pub ro_len: u32,
}

/// Everything a scenario works with; also collects its checks and notes.
pub struct Ctx {
    pub peer: PeerLink,
    pub wire: Wire,
    pub mem: PeerMem,
    pub wait: Duration,
    pub quiet: Duration,
    next_qpn: u32,
    checks: Vec<(String, bool)>,
    notes: Vec<String>,
}

impl Ctx {
    /// Records one graded check.
    pub fn check(&mut self, ok: bool, what: impl Into<String>) -> bool {
        self.checks.push((what.into(), ok));
        ok
    }

    /// Records an observation that is not graded.
    pub fn note(&mut self, what: impl Into<String>) {
        self.notes.push(what.into());
    }

    /// A fresh peer RC QP in RTS connected to a fresh QPN of ours.
    pub fn connect(&mut self, o: RcOpts) -> io::Result<Rc> {
        self.next_qpn = (self.next_qpn + 1) & 0xFF_FFFF;
        let our_qpn = self.next_qpn;
        let gid = self.our_gid();
        let peer_qpn = self.peer.new_rc(our_qpn, o, &gid)?;
        self.wire.clear()?;
        Ok(Rc { peer_qpn, our_qpn, our_psn: Psn::new(o.our_psn), peer_psn: Psn::new(o.peer_psn) })
    }

    /// A fresh QPN for a UD stand-in.
    pub fn fresh_qpn(&mut self) -> u32 {
        self.next_qpn = (self.next_qpn + 1) & 0xFF_FFFF;
        self.next_qpn
    }

    fn our_gid(&self) -> String {
        let g = match self.wire.local {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        g.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Waits for the first response packet to `rc` (an ACK, NAK, READ response or atomic ACK).
    pub fn response(&mut self, rc: &Rc) -> io::Result<Option<Rx>> {
        let (q, w) = (rc.our_qpn, self.wait);
        self.wire.wait_for(w, |r| r.headers.bth.dest_qp == q && is_response(r.opcode()))
    }

    /// Waits for a response to `rc` with this PSN.
    pub fn response_at(&mut self, rc: &Rc, psn: Psn) -> io::Result<Option<Rx>> {
        let (q, w) = (rc.our_qpn, self.wait);
        self.wire.wait_for(w, |r| r.headers.bth.dest_qp == q && is_response(r.opcode()) && r.psn() == psn)
    }

    /// Completions on the peer: polls until `n` arrived or the wait passes, then once more
    /// after the quiet window so that extra completions show.
    pub fn completions(&mut self, n: usize) -> io::Result<Vec<Wc>> {
        let end = Instant::now() + self.wait;
        let mut all = Vec::new();
        while all.len() < n && Instant::now() < end {
            all.extend(self.peer.poll()?);
            if all.len() < n {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        std::thread::sleep(self.quiet / 4);
        all.extend(self.peer.poll()?);
        Ok(all)
    }
}

/// An opcode a responder sends (ACK, atomic ACK, READ response).
pub fn is_response(op: u8) -> bool {
    urxe::wire::opcode::Opcode(op).info().is_response()
}

/// An ACK-class packet's syndrome rendered for notes.
pub fn describe(r: &Rx) -> String {
    let op = urxe::wire::opcode::Opcode(r.opcode());
    match r.headers.aeth {
        Some(AethRepr { syndrome, msn }) => format!("{op} psn={:#x} {syndrome:?} msn={}", r.psn().value(), msn.value()),
        None => format!("{op} psn={:#x}", r.psn().value()),
    }
}

/// tcpdump around one scenario.
struct Capture {
    child: Child,
}

impl Capture {
    fn start(iface: &str, file: &std::path::Path, peer: IpAddr) -> io::Result<Capture> {
        let mut child = Command::new("tcpdump")
            .args(["-i", iface, "--immediate-mode", "-U", "-n", "-s", "0", "-w"])
            .arg(file)
            .args(["udp", "port", "4791", "and", "host", &peer.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        // tcpdump prints "listening on ..." once the capture is armed.
        let err = child.stderr.take().ok_or_else(|| io::Error::other("tcpdump: no stderr"))?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = io::BufReader::new(err).lines();
            if let Some(Ok(l)) = lines.next() {
                let _ = tx.send(l);
            }
            for _ in lines {}
        });
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(l) if l.contains("listening") => Ok(Capture { child }),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                Err(io::Error::other(format!("tcpdump did not start: {other:?}")))
            }
        }
    }

    fn stop(mut self) -> io::Result<()> {
        // SIGTERM lets tcpdump close the file properly (SIGKILL would cut the last record).
        std::thread::sleep(Duration::from_millis(100));
        let st = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status()?;
        if !st.success() {
            let _ = self.child.kill();
        }
        self.child.wait()?;
        Ok(())
    }
}

/// Runs the selected scenarios; returns one result per scenario.
pub fn run(cfg: &Config, mut progress: impl FnMut(&ScenarioResult)) -> io::Result<Vec<ScenarioResult>> {
    let list = scenarios::all();
    for id in &cfg.only {
        if !list.iter().any(|s| s.id == id) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("no scenario '{id}' (see --list)")));
        }
    }
    let (peer, mem, peer_ip) = PeerLink::connect(cfg.peer)?;
    let wire = Wire::open(cfg.local, peer_ip)?;
    let mut ctx = Ctx {
        peer,
        wire,
        mem,
        wait: cfg.wait,
        quiet: cfg.quiet,
        next_qpn: 0xC0_0000,
        checks: Vec::new(),
        notes: Vec::new(),
    };
    if let Some(d) = &cfg.pcap_dir {
        std::fs::create_dir_all(d)?;
    }
    let mut out = Vec::new();
    for s in list.iter().filter(|s| cfg.only.is_empty() || cfg.only.iter().any(|o| o == s.id)) {
        let capture = match (&cfg.pcap_dir, &cfg.iface) {
            (Some(d), Some(i)) => {
                let file = d.join(format!("{}.pcap", s.id));
                Some((Capture::start(i, &file, peer_ip)?, file))
            }
            _ => None,
        };
        ctx.checks.clear();
        ctx.notes.clear();
        ctx.wire.malformed = 0;
        let t0 = Instant::now();
        let err = (s.run)(&mut ctx).err();
        let elapsed = t0.elapsed();
        if ctx.wire.malformed > 0 {
            let m = ctx.wire.malformed;
            ctx.note(format!("{m} packet(s) from the peer did not parse"));
        }
        let file = match capture {
            Some((c, f)) => {
                c.stop()?;
                Some(f)
            }
            None => None,
        };
        let r = report::grade(s, &cfg.profile, &ctx.checks, &ctx.notes, err, elapsed, file);
        progress(&r);
        out.push(r);
    }
    let _ = ctx.peer.quit();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use urxe::wire::bth::BthRepr;
    use urxe::wire::icrc::icrc;
    use urxe::wire::opcode::op;

    fn send_only() -> Headers {
        Headers {
            bth: BthRepr {
                opcode: op::RC_SEND_ONLY,
                dest_qp: 0x12,
                psn: Psn::new(0xff_ffff),
                ack_req: true,
                ..BthRepr::default()
            },
            ..Headers::default()
        }
    }

    #[test]
    fn crafted_packets_carry_the_icrc_of_our_headers_unless_told_to_break_it() {
        for (l, p) in [("10.77.0.1", "10.77.0.2"), ("fd77::1", "fd77::2")] {
            let (l, p): (IpAddr, IpAddr) = (l.parse().unwrap(), p.parse().unwrap());
            let ip = match (l, p) {
                (IpAddr::V4(a), IpAddr::V4(b)) => IpFields::v4_df(a, b),
                (IpAddr::V6(a), IpAddr::V6(b)) => IpFields::v6(a, b),
                _ => unreachable!(),
            };
            let good = build_packet(l, p, &send_only(), b"abcde", false).unwrap();
            let parsed = parse(&good).unwrap();
            assert_eq!(parsed.payload, b"abcde");
            assert_eq!(parsed.headers.bth.psn, Psn::new(0xff_ffff));
            assert_eq!(parsed.icrc, icrc(&ip, ROCEV2_PORT, ROCEV2_PORT, parsed.icrc_covered(&good)));
            let bad = build_packet(l, p, &send_only(), b"abcde", true).unwrap();
            let parsed = parse(&bad).unwrap();
            assert_ne!(parsed.icrc, icrc(&ip, ROCEV2_PORT, ROCEV2_PORT, parsed.icrc_covered(&bad)));
            assert_eq!(good[..good.len() - 4], bad[..bad.len() - 4]);
        }
        let mixed = build_packet("10.0.0.1".parse().unwrap(), "fd77::2".parse().unwrap(), &send_only(), b"", false);
        assert!(mixed.is_err());
    }
}
