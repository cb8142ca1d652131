//! Neighbour resolution before a connected QP's first burst.
//!
//! A datagram toward a peer whose neighbour entry (ARP / NDP) is not resolved waits in the
//! kernel's queue of unresolved packets, which holds `unres_qlen_bytes` (212992 by default) of
//! socket buffers; the rest of a burst is dropped without a word (on a veth pair at MTU 1500,
//! 36 of a 128-packet write toward an IPv6 peer, all resent after a NAK). Kernel rxe does not
//! meet this: `ib_modify_qp` to RTR resolves the destination's L2 address and waits for it.
//!
//! [`resolve`] does the same from userspace at RTR: it reads the neighbour table (an
//! rtnetlink dump, which needs no privilege); if the peer has no usable entry, it sends one
//! small UDP datagram to the peer's discard port (9) — the kernel starts resolution for it and
//! the peer answers at most an ICMP port unreachable — and polls the table until the entry is
//! usable, has failed, or `bound` has passed. A peer with no entry of its own after the probe
//! is not on the link (local, or behind a router whose entry is the router's): nothing to wait
//! for. No `unsafe`: socket2 carries the netlink socket.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

const NETLINK_ROUTE: i32 = 0;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NDA_DST: u16 = 1;
/// `NUD_INCOMPLETE`: resolution under way.
const NUD_INCOMPLETE: u16 = 0x01;
/// `NUD_FAILED`.
const NUD_FAILED: u16 = 0x20;
/// `NUD_VALID`: REACHABLE, STALE, DELAY, PROBE, NOARP, PERMANENT (packets leave at once).
const NUD_VALID: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// What [`resolve`] found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Neighbour {
    /// The entry was usable before we asked.
    Known,
    /// The probe made the kernel resolve it; it is usable now.
    Resolved,
    /// No entry of the peer's own (local address, or reached through a router).
    NotOnLink,
    /// Resolution failed (the peer does not answer) or outlasted the bound.
    Unresolved,
}

/// Makes sure packets toward `peer` leave at once: see the module comment. `local` is the
/// device's address (the probe leaves from it, so through the device's interface).
pub fn resolve(local: IpAddr, peer: IpAddr, bound: Duration) -> io::Result<Neighbour> {
    let peer = canonical(peer);
    if peer.is_loopback() || peer.is_multicast() || peer.is_unspecified() || peer == canonical(local) {
        return Ok(Neighbour::NotOnLink);
    }
    let nl = Socket::new(Domain::from(libc::AF_NETLINK), Type::DGRAM, Some(Protocol::from(NETLINK_ROUTE)))?;
    nl.set_read_timeout(Some(Duration::from_millis(200)))?;
    if let Some(s) = state(&nl, peer)? {
        if s & NUD_VALID != 0 {
            return Ok(Neighbour::Known);
        }
    }
    let probe = UdpSocket::bind(SocketAddr::new(canonical(local), 0))?;
    // Errors (no route...) leave the table as it is: the loop below then finds no entry.
    let _ = probe.send_to(&[0], SocketAddr::new(peer, 9));
    let start = Instant::now();
    loop {
        match state(&nl, peer)? {
            None => return Ok(Neighbour::NotOnLink),
            Some(s) if s & NUD_VALID != 0 => return Ok(Neighbour::Resolved),
            Some(s) if s & NUD_FAILED != 0 || s & NUD_INCOMPLETE == 0 => return Ok(Neighbour::Unresolved),
            Some(_) if start.elapsed() >= bound => return Ok(Neighbour::Unresolved),
            Some(_) => std::thread::sleep(Duration::from_micros(500)),
        }
    }
}

fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

/// The `ndm_state` of `peer`'s entry in the neighbour table (any interface), if it has one.
fn state(nl: &Socket, peer: IpAddr) -> io::Result<Option<u16>> {
    let family = if peer.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 } as u8;
    // nlmsghdr (16) + ndmsg (12).
    let mut req = [0u8; 28];
    req[0..4].copy_from_slice(&28u32.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = family;
    nl.send(&req)?;
    let want: Vec<u8> = match peer {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut found = None;
    let mut buf = vec![0u8; 32 << 10];
    // A dump ends with NLMSG_DONE; bounded by the socket's read timeout per datagram and by a
    // count that no neighbour table reaches in practice.
    for _ in 0..4096 {
        let n = (&*nl).read(&mut buf)?;
        match parse(&buf[..n], &want, &mut found) {
            Walk::More => continue,
            Walk::Done => return Ok(found),
        }
    }
    Ok(found)
}

enum Walk {
    More,
    Done,
}

/// Walks the netlink messages of one datagram; sets `found` to the state of the entry whose
/// NDA_DST is `want`.
fn parse(d: &[u8], want: &[u8], found: &mut Option<u16>) -> Walk {
    let mut at = 0;
    while at + 16 <= d.len() {
        let len = u32::from_ne_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]) as usize;
        let ty = u16::from_ne_bytes([d[at + 4], d[at + 5]]);
        if len < 16 || at + len > d.len() {
            return Walk::Done;
        }
        match ty {
            NLMSG_DONE | NLMSG_ERROR => return Walk::Done,
            RTM_NEWNEIGH if len >= 28 => {
                let m = &d[at + 16..at + len];
                let st = u16::from_ne_bytes([m[8], m[9]]);
                let mut a = 12;
                while a + 4 <= m.len() {
                    let alen = u16::from_ne_bytes([m[a], m[a + 1]]) as usize;
                    let aty = u16::from_ne_bytes([m[a + 2], m[a + 3]]);
                    if alen < 4 || a + alen > m.len() {
                        break;
                    }
                    if aty == NDA_DST && &m[a + 4..a + alen] == want {
                        *found = Some(st);
                    }
                    a += (alen + 3) & !3;
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    Walk::More
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(body);
        m
    }

    fn neigh(state: u16, dst: &[u8]) -> Vec<u8> {
        let mut b = vec![10u8, 0, 0, 0, 2, 0, 0, 0];
        b.extend_from_slice(&state.to_ne_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&((4 + dst.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&NDA_DST.to_ne_bytes());
        b.extend_from_slice(dst);
        msg(RTM_NEWNEIGH, &b)
    }

    #[test]
    fn parse_finds_the_peers_state_and_stops_at_done() {
        let want = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let other = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
        let mut d = neigh(0x02, &other);
        d.extend(neigh(NUD_INCOMPLETE, &want));
        let mut found = None;
        assert!(matches!(parse(&d, &want, &mut found), Walk::More));
        assert_eq!(found, Some(NUD_INCOMPLETE));
        let done = msg(NLMSG_DONE, &[0; 4]);
        assert!(matches!(parse(&done, &want, &mut found), Walk::Done));
        // A truncated message ends the walk instead of reading past the datagram.
        let mut cut = neigh(0x02, &want);
        cut.truncate(20);
        let mut f2 = None;
        assert!(matches!(parse(&cut, &want, &mut f2), Walk::Done));
        assert_eq!(f2, None);
    }
}
