//! The TCP link to the peer program (`tests/conform/peer.c`): one command line out, one reply
//! line back.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use super::{PeerMem, RcOpts};

/// `ibv_qp_state` values the peer reports.
pub const QPS_RTS: u32 = 3;
pub const QPS_ERR: u32 = 6;
/// `ibv_wc_status` / `ibv_wc_opcode` values the scenarios look at.
pub const WC_SUCCESS: u32 = 0;
pub const WC_RETRY_EXC_ERR: u32 = 12;
pub const WC_SEND: u32 = 0;
pub const WC_RECV: u32 = 128;

/// One work completion as the peer reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub qp_num: u32,
}

pub struct PeerLink {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn field<'a>(line: &'a str, key: &str) -> io::Result<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .ok_or_else(|| bad(format!("peer: no '{key}=' in \"{line}\"")))
}

fn num(s: &str) -> io::Result<u64> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| bad(format!("peer: bad number '{s}'")))
}

impl PeerLink {
    /// Connects (retrying for up to 30 s while the peer program starts), reads its HELLO.
    /// Returns the link, its memory and the IP address of its GID.
    pub fn connect(addr: SocketAddr) -> io::Result<(PeerLink, PeerMem, IpAddr)> {
        let mut last = None;
        let mut stream = None;
        for _ in 0..300 {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        let s = stream.ok_or_else(|| last.unwrap_or_else(|| io::Error::other("peer: connect failed")))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        let mut link = PeerLink { out: s.try_clone()?, input: BufReader::new(s) };
        let hello = link.line()?;
        if !hello.starts_with("HELLO ") {
            return Err(bad(format!("peer: expected HELLO, got \"{hello}\"")));
        }
        let gid = field(&hello, "gid")?;
        let raw: Vec<u8> = (0..gid.len() / 2)
            .map(|i| u8::from_str_radix(gid.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
            .collect::<Result<_, _>>()
            .map_err(|_| bad("peer: bad gid"))?;
        let raw: [u8; 16] = raw.try_into().map_err(|_| bad(format!("peer: GID {gid} is not 16 bytes")))?;
        let v6 = Ipv6Addr::from(raw);
        // A RoCEv2 GID is the IPv6 address, or ::ffff:a.b.c.d for IPv4.
        let ip = v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6));
        let mem = PeerMem {
            rkey: num(field(&hello, "rkey")?)? as u32,
            addr: num(field(&hello, "addr")?)?,
            len: num(field(&hello, "len")?)? as u32,
            ro_rkey: num(field(&hello, "ro_rkey")?)? as u32,
            ro_addr: num(field(&hello, "ro_addr")?)?,
            ro_len: num(field(&hello, "ro_len")?)? as u32,
        };
        Ok((link, mem, ip))
    }

    fn line(&mut self) -> io::Result<String> {
        let mut l = String::new();
        if self.input.read_line(&mut l)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection"));
        }
        Ok(l.trim_end().to_string())
    }

    /// Sends one command, returns the reply; an "ERR" reply is an error.
    pub fn cmd(&mut self, c: &str) -> io::Result<String> {
        self.out.write_all(format!("{c}\n").as_bytes())?;
        let r = self.line()?;
        if let Some(e) = r.strip_prefix("ERR") {
            return Err(io::Error::other(format!("peer: {c}: {}", e.trim())));
        }
        Ok(r)
    }

    fn expect_word(&mut self, c: &str, word: &str) -> io::Result<u32> {
        let r = self.cmd(c)?;
        r.strip_prefix(word)
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| bad(format!("peer: {c}: unexpected reply \"{r}\"")))
    }

    pub fn new_rc(&mut self, our_qpn: u32, o: RcOpts, our_gid: &str) -> io::Result<u32> {
        let c = format!(
            "QP {our_qpn} {} {} {our_gid} {} {} {} {} {}",
            o.our_psn, o.peer_psn, o.min_rnr, o.rnr_retry, o.retry_cnt, o.timeout, o.access
        );
        self.expect_word(&c, "QP ")
    }

    pub fn new_ud(&mut self, qkey: u32) -> io::Result<u32> {
        self.expect_word(&format!("UD {qkey}"), "UD ")
    }

    pub fn post_recv(&mut self, n: u32, len: u32) -> io::Result<()> {
        self.cmd(&format!("RECV {n} {len}")).map(drop)
    }

    pub fn post_send(&mut self, off: u32, len: u32) -> io::Result<()> {
        self.cmd(&format!("SEND {off} {len}")).map(drop)
    }

    /// Byte i of the RW MR at `off` becomes `seed + i` (mod 256).
    pub fn fill(&mut self, off: u32, len: u32, seed: u8) -> io::Result<()> {
        self.cmd(&format!("FILL {off} {len} {seed}")).map(drop)
    }

    pub fn dump(&mut self, off: u32, len: u32) -> io::Result<Vec<u8>> {
        let r = self.cmd(&format!("DUMP {off} {len}"))?;
        let hex = r.strip_prefix("DATA").map(str::trim).ok_or_else(|| bad(format!("peer: DUMP: \"{r}\"")))?;
        (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| bad("peer: DUMP: bad hex"))
    }

    /// The RC QP's `ibv_qp_state`.
    pub fn state(&mut self) -> io::Result<u32> {
        self.expect_word("STATE", "STATE ")
    }

    pub fn poll(&mut self) -> io::Result<Vec<Wc>> {
        let r = self.cmd("POLL")?;
        let mut it = r.split_whitespace();
        if it.next() != Some("WC") {
            return Err(bad(format!("peer: POLL: \"{r}\"")));
        }
        let _count = it.next();
        it.map(|w| {
            let v: Vec<u32> = w.split(':').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [status, opcode, byte_len, qp_num] => Ok(Wc { status, opcode, byte_len, qp_num }),
                _ => Err(bad(format!("peer: POLL: bad completion '{w}'"))),
            }
        })
        .collect()
    }

    pub fn quit(&mut self) -> io::Result<()> {
        self.cmd("QUIT").map(drop)
    }
}

/// Expected bytes of [`PeerLink::fill`].
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    /// A stand-in for peer.c: HELLO, then canned replies to the commands the test sends.
    fn fake_peer(hello: &'static str, replies: &'static [&'static str]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut out = s.try_clone().unwrap();
            let mut input = BufReader::new(s);
            writeln!(out, "{hello}").unwrap();
            for r in replies {
                let mut cmd = String::new();
                if input.read_line(&mut cmd).unwrap() == 0 {
                    return;
                }
                writeln!(out, "{r}").unwrap();
            }
        });
        addr
    }

    const HELLO_V4: &str = "HELLO gid=00000000000000000000ffff0a4d0002 rkey=0x1234 addr=0x7f0000001000 \
                            len=65536 ro_rkey=0x99 ro_addr=0x7f0000020000 ro_len=4096";

    #[test]
    fn hello_gives_memory_and_address() {
        let (_, mem, ip) = PeerLink::connect(fake_peer(HELLO_V4, &[])).unwrap();
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2)));
        assert_eq!((mem.rkey, mem.addr, mem.len), (0x1234, 0x7f00_0000_1000, 65536));
        assert_eq!((mem.ro_rkey, mem.ro_addr, mem.ro_len), (0x99, 0x7f00_0002_0000, 4096));
        let v6 = "HELLO gid=fd770000000000000000000000000002 rkey=1 addr=2 len=3 ro_rkey=4 ro_addr=5 ro_len=6";
        let (_, _, ip) = PeerLink::connect(fake_peer(v6, &[])).unwrap();
        assert_eq!(ip, "fd77::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn bad_hellos_are_refused() {
        for h in [
            "HELO gid=00000000000000000000ffff0a4d0002",
            "HELLO gid=00ff rkey=1 addr=2 len=3 ro_rkey=4 ro_addr=5 ro_len=6",
            "HELLO gid=00000000000000000000ffff0a4d0002 rkey=zz addr=2 len=3 ro_rkey=4 ro_addr=5 ro_len=6",
            "HELLO gid=00000000000000000000ffff0a4d0002 addr=2 len=3 ro_rkey=4 ro_addr=5 ro_len=6",
        ] {
            assert!(PeerLink::connect(fake_peer(h, &[])).is_err(), "{h}");
        }
    }

    #[test]
    fn replies_are_parsed_and_errors_surface() {
        let replies = &["QP 17", "DATA 00ff10", "WC 2 0:128:40:17 12:0:16:17", "STATE 6", "ERR no QP", "WC 1 0:1"];
        let (mut p, _, _) = PeerLink::connect(fake_peer(HELLO_V4, replies)).unwrap();
        let o = RcOpts::default();
        assert_eq!(p.new_rc(0xC0_0001, o, "00000000000000000000ffff0a4d0001").unwrap(), 17);
        assert_eq!(p.dump(0, 3).unwrap(), vec![0x00, 0xff, 0x10]);
        let wcs = p.poll().unwrap();
        assert_eq!(wcs[0], Wc { status: WC_SUCCESS, opcode: WC_RECV, byte_len: 40, qp_num: 17 });
        assert_eq!(wcs[1].status, WC_RETRY_EXC_ERR);
        assert_eq!(p.state().unwrap(), QPS_ERR);
        let e = p.state().unwrap_err();
        assert!(e.to_string().contains("no QP"), "{e}");
        assert!(p.poll().is_err(), "a completion with 2 fields is malformed");
        assert!(p.quit().is_err(), "the fake peer closed the connection");
    }
}
