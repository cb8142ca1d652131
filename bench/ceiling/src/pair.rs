//! The busy-poll UDP ping-pong between two processes (two network namespaces, two hosts):
//! `pp-server ADDR:PORT` echoes every datagram back to its sender until `-t` seconds pass or a
//! one-byte datagram 0xFF (the client's end) arrives; `pp-client ADDR:PORT` sends `-n` round
//! trips of `PP_BYTES` (an RC SEND of 2 bytes: BTH 12 + 4 + ICRC 4) after `PP_WARMUP` unmeasured
//! ones, both sides spinning on non-blocking receives, and prints one line
//! `mode=pp_pair trips=N lost=L half_rtt_typical_us=.. half_rtt_p99_us=.. half_rtt_min_us=..`
//! (half the round trip, as ib_send_lat reports its one-way latency). With `-r` both sides move
//! an RC engine's trip instead (`mode=pp_pair_rc`): every send is two 20-byte datagrams (the
//! message and the ACK of the peer's last one) as one `UDP_SEGMENT` train from an unconnected
//! socket into a `UDP_GRO` receiver, as `pingpong_rc` does on one host. Every loop ends on a
//! deadline and on a count.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const PP_BYTES: usize = 20;
const PP_WARMUP: u64 = 1000;
/// A round trip that takes longer than this counts as lost (and is sent again).
const PP_TIMEOUT: Duration = Duration::from_millis(50);

/// Sets the RC shape's socket options: sends cut into `PP_BYTES` segments, receives coalesced.
fn rc_shape(s: &UdpSocket) -> Result<(), String> {
    for (name, val) in [(crate::UDP_SEGMENT, PP_BYTES as i32), (crate::UDP_GRO, 1)] {
        crate::set_int(s.as_raw_fd(), libc::IPPROTO_UDP, name, val).map_err(|e| format!("setsockopt {name}: {e}"))?;
    }
    Ok(())
}

fn spin_recv(s: &UdpSocket, buf: &mut [u8], until: Instant) -> io::Result<Option<(usize, SocketAddr)>> {
    loop {
        match s.recv_from(buf) {
            Ok(x) => return Ok(Some(x)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return Ok(None);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

pub fn server(addr: SocketAddr, secs: f64, rc: bool) -> Result<String, String> {
    let s = UdpSocket::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    if rc {
        rc_shape(&s)?;
    }
    // RC shape: a trip is answered once both of its segments are in (one read when GRO joins
    // them, two when it does not).
    let per_trip = if rc { 2 * PP_BYTES } else { 1 };
    let (mut pending, mut joined) = (0usize, 0u64);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut buf = [0u8; 2048];
    let mut echoed = 0u64;
    while let Some((n, from)) = spin_recv(&s, &mut buf, end).map_err(|e| e.to_string())? {
        if n == 1 && buf[0] == 0xFF {
            break;
        }
        if rc {
            joined += u64::from(pending == 0 && n == per_trip);
            pending += n;
            if pending < per_trip {
                continue;
            }
            pending = 0;
            buf.copy_within(..PP_BYTES, PP_BYTES);
            s.send_to(&buf[..per_trip], from).map_err(|e| e.to_string())?;
        } else {
            s.send_to(&buf[..n], from).map_err(|e| e.to_string())?;
        }
        echoed += 1;
    }
    if rc {
        // How many trips came as one read: the RC shape's segments joined by GRO.
        return Ok(format!("mode=pp_server echoed={echoed} joined={joined}"));
    }
    Ok(format!("mode=pp_server echoed={echoed}"))
}

pub fn client(addr: SocketAddr, trips: u64, secs: f64, rc: bool) -> Result<String, String> {
    let local: SocketAddr = if addr.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().unwrap();
    let s = UdpSocket::bind(local).map_err(|e| e.to_string())?;
    if rc {
        rc_shape(&s)?;
    } else {
        s.connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    }
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    let send = |m: &[u8]| if rc { s.send_to(m, addr) } else { s.send(m) };
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut msg = [0u8; 2 * PP_BYTES];
    let out = if rc { 2 * PP_BYTES } else { PP_BYTES };
    let mut buf = [0u8; 2048];
    let mut rtts = Vec::with_capacity(trips as usize);
    let (mut lost, mut seq) = (0u64, 0u64);
    while (rtts.len() as u64) < trips && Instant::now() < end {
        seq += 1;
        msg[..8].copy_from_slice(&seq.to_le_bytes());
        let t0 = Instant::now();
        // The server may not be up yet: a refused send is a lost trip.
        let _ = send(&msg[..out]);
        let deadline = (t0 + PP_TIMEOUT).min(end);
        let mut back = false;
        while let Some((n, _)) = spin_recv(&s, &mut buf, deadline).map_err(|e| e.to_string()).or_else(|e| {
            if e.contains("refused") {
                Ok(None)
            } else {
                Err(e)
            }
        })? {
            // The RC shape's reply: its first segment carries the sequence number (a reply
            // that GRO did not join comes as two reads; the first is enough).
            if (n == PP_BYTES || n == out) && buf[..8] == seq.to_le_bytes() {
                back = true;
                break;
            }
        }
        if !back {
            lost += 1;
            if lost > trips {
                break;
            }
            continue;
        }
        if seq > PP_WARMUP {
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
    }
    if rc {
        // One byte is its own segment whatever UDP_SEGMENT says.
        let _ = s.send_to(&[0xFF], addr);
    } else {
        let _ = s.send(&[0xFF]);
    }
    if rtts.is_empty() {
        return Err(format!("no round trip measured ({lost} lost)"));
    }
    rtts.sort_unstable();
    let us = |ns: u64| ns as f64 / 2000.0;
    Ok(format!(
        "mode=pp_pair{} trips={} lost={lost} half_rtt_typical_us={:.2} half_rtt_p99_us={:.2} half_rtt_min_us={:.2}",
        if rc { "_rc" } else { "" },
        rtts.len(),
        us(crate::percentile(&rtts, 50.0)),
        us(crate::percentile(&rtts, 99.0)),
        us(rtts[0])
    ))
}

/// `pp-server ADDR [-t SECS] [-r]` / `pp-client ADDR [-n TRIPS] [-t SECS] [-r]`; None if `args`
/// is neither.
pub fn run(args: &[String]) -> Option<Result<String, String>> {
    let role = args.first()?.as_str();
    if role != "pp-server" && role != "pp-client" {
        return None;
    }
    let parse = || -> Result<(SocketAddr, u64, f64, bool), String> {
        let addr: SocketAddr = args.get(1).ok_or("no ADDR:PORT")?.parse().map_err(|_| "bad ADDR:PORT")?;
        let (mut trips, mut secs, mut rc) = (20_000u64, 10.0f64, false);
        let mut it = args[2..].iter();
        while let Some(a) = it.next() {
            if a == "-r" {
                rc = true;
                continue;
            }
            let v = it.next().ok_or(format!("{a} needs a value"))?;
            match a.as_str() {
                "-n" => trips = v.parse().ok().filter(|&n| n > 0 && n <= 10_000_000).ok_or("bad -n")?,
                "-t" => secs = v.parse().ok().filter(|&t| t > 0.0 && t <= 600.0).ok_or("bad -t")?,
                _ => return Err(format!("unknown argument {a}")),
            }
        }
        Ok((addr, trips, secs, rc))
    };
    Some(parse().and_then(
        |(addr, trips, secs, rc)| {
            if role == "pp-server" {
                server(addr, secs, rc)
            } else {
                client(addr, trips, secs, rc)
            }
        },
    ))
}
