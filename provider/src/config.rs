//! Provider layer: which address (and so which GID) this process's `urxe0` uses.
//!
//! Pure decisions, unit-tested here; the system calls (interface list, `bind`) are passed in.
//!
//! - No `URXE_ADDR`: every process of a user shares one loopback address `127.77.c.d` derived
//!   from the uid (`c.d` = its low 16 bits, last octet never 0 or 255) and joins that address's
//!   group (transport::group); if another user holds the candidate (EADDRINUSE) it probes the
//!   next one, and so do all of that user's processes. Two processes on one host then reach
//!   each other with no setting, and see one GID as on a NIC. Like the kernel's choice of an
//!   ephemeral port (a hashed start, then the whole range, skipping what is in use), the walk
//!   covers all of 127.0.0.0/8 but 127.0/16 after 127.77/16 (16.6 million addresses), and
//!   addresses another user already holds are skipped without a bind (`taken`, from one read
//!   of /proc/net/udp): another user denies this one an address only by holding all of them,
//!   millions of sockets (issue #37: 512 were enough).
//! - `URXE_ADDR=<IPv4|IPv6|ifname>`: that address, or the interface's first IPv4 address (else its
//!   first global IPv6 address). A bad value, an address that is not local, or port 4791 already
//!   bound there (kernel rxe, another process) is an error whose message names `URXE_ADDR`, the
//!   address and port 4791. `ibv_get_device_list` then prints it and returns NULL with errno
//!   EINVAL (bad value / not local) or EADDRINUSE (port taken).
//!
//! Must not: touch the engine, keep state, or read the environment itself.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The RoCEv2 UDP port.
pub const ROCE_PORT: u16 = 4791;
/// Second octet of the zero-configuration loopback addresses ('M').
pub const LOOPBACK_NET: u8 = 77;
/// How many loopback candidates to try to bind (candidates known to be taken are skipped
/// without counting) before giving up.
pub const LOOPBACK_PROBES: u32 = 512;
/// Loopback candidates in all: 255 second octets (not 0) × 65,024 (last octet not 0 or 255).
pub const LOOPBACK_CANDIDATES: u64 = 255 * 65024;

/// A parsed `URXE_ADDR`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AddrSpec {
    Ip(IpAddr),
    Interface(String),
}

/// One address of one network interface (from `getifaddrs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub index: u32,
    pub addr: IpAddr,
    pub netmask: IpAddr,
    /// Netdev MTU in bytes.
    pub mtu: u32,
}

/// The decision: address, the interface it lives on, and whatever `bind` produced.
#[derive(Debug)]
pub struct Chosen<T> {
    pub addr: IpAddr,
    pub ifname: Option<String>,
    pub ifindex: u32,
    pub netdev_mtu: u32,
    pub bound: T,
}

#[derive(Debug)]
pub enum ConfigError {
    /// `URXE_ADDR` is empty, unspecified, multicast or not an address/interface name.
    BadValue { value: String, why: &'static str },
    /// `URXE_ADDR` names no interface (and is not an IP address).
    NoSuchInterface { value: String },
    /// The interface has no usable address.
    InterfaceWithoutAddress { value: String },
    /// The address is not assigned to this host (EADDRNOTAVAIL at bind).
    NotLocal { addr: IpAddr },
    /// UDP port 4791 is already bound on the address.
    PortInUse { addr: IpAddr, from_env: bool },
    /// Any other bind failure.
    Bind { addr: IpAddr, err: io::Error },
    /// Every zero-configuration loopback candidate was taken.
    LoopbackExhausted,
}

impl ConfigError {
    /// The errno `ibv_get_device_list` reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            ConfigError::PortInUse { .. } | ConfigError::LoopbackExhausted => libc::EADDRINUSE,
            ConfigError::Bind { err, .. } => err.raw_os_error().unwrap_or(libc::EINVAL),
            _ => libc::EINVAL,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::BadValue { value, why } => {
                write!(f, "URXE_ADDR={value:?} is not usable: {why}; expected an IPv4 address, an IPv6 address or an interface name")
            }
            ConfigError::NoSuchInterface { value } => write!(
                f,
                "URXE_ADDR={value:?} is neither an IP address nor the name of a network interface"
            ),
            ConfigError::InterfaceWithoutAddress { value } => write!(
                f,
                "URXE_ADDR={value:?}: the interface has no IPv4 or global IPv6 address"
            ),
            ConfigError::NotLocal { addr } => write!(
                f,
                "URXE_ADDR={addr}: that address is not assigned to this host (cannot bind UDP port {ROCE_PORT})"
            ),
            ConfigError::PortInUse { addr, from_env } => write!(
                f,
                "UDP port {ROCE_PORT} on {addr}{} is already in use (kernel rxe or another RoCE process?); choose another address with URXE_ADDR",
                if *from_env { " (URXE_ADDR)" } else { "" }
            ),
            ConfigError::Bind { addr, err } => {
                write!(f, "cannot bind UDP port {ROCE_PORT} on {addr} (URXE_ADDR): {err}")
            }
            ConfigError::LoopbackExhausted => write!(
                f,
                "no free loopback address 127.x.y.z for UDP port {ROCE_PORT} (all {LOOPBACK_CANDIDATES} held by others, or {LOOPBACK_PROBES} refused binds); set URXE_ADDR"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Parse the value of `URXE_ADDR`.
pub fn parse_urxe_addr(value: &str) -> Result<AddrSpec, ConfigError> {
    let v = value.trim();
    let bad = |why| ConfigError::BadValue { value: value.to_string(), why };
    if v.is_empty() {
        return Err(bad("empty"));
    }
    if let Ok(ip) = v.parse::<IpAddr>() {
        if ip.is_unspecified() {
            return Err(bad("the unspecified address cannot be a GID"));
        }
        if ip.is_multicast() {
            return Err(bad("a multicast address cannot be a GID"));
        }
        if let IpAddr::V4(v4) = ip {
            if v4.is_broadcast() {
                return Err(bad("the broadcast address cannot be a GID"));
            }
        }
        return Ok(AddrSpec::Ip(ip));
    }
    // Linux interface names: 1..=15 bytes, no '/', no whitespace, not "." or "..".
    let ifname_ok =
        v.len() <= 15 && v != "." && v != ".." && v.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if !ifname_ok {
        return Err(bad("not an IP address and not a valid interface name"));
    }
    Ok(AddrSpec::Interface(v.to_string()))
}

/// The seed of the zero-configuration address walk: the uid, so that all processes of one
/// user land on the same address (their group) and different users on different ones.
pub fn zero_config_seed(uid: u32) -> u32 {
    uid
}

/// The zero-configuration loopback candidates for `seed` (see [`zero_config_seed`]), in order:
/// 127.77/16 from the seed's low 16 bits, then the same walk in 127.78/16 ... 127.255/16,
/// 127.1/16 ... 127.76/16 ([`LOOPBACK_CANDIDATES`] addresses; last octets 0 and 255, which
/// look like network/broadcast addresses to some tools, skipped).
pub fn loopback_candidates(seed: u32) -> impl Iterator<Item = Ipv4Addr> {
    let start = seed & 0xffff;
    (0..255u32).flat_map(move |block| {
        let b = 1 + (LOOPBACK_NET as u32 - 1 + block) % 255;
        (0..0x10000u32).filter_map(move |j| {
            let v = (start + j) & 0xffff;
            let d = (v & 0xff) as u8;
            (d != 0 && d != 255).then(|| Ipv4Addr::new(127, b as u8, (v >> 8) as u8, d))
        })
    })
}

/// The `attempt`-th of [`loopback_candidates`]`(seed)`.
pub fn loopback_candidate(seed: u32, attempt: u32) -> Ipv4Addr {
    loopback_candidates(seed).nth(attempt as usize).unwrap_or(Ipv4Addr::new(127, LOOPBACK_NET, 0, 1))
}

/// The RoCEv2 GID of an address: IPv4-mapped `::ffff:a.b.c.d` for IPv4, the address itself for
/// IPv6.
pub fn gid_of(addr: IpAddr) -> [u8; 16] {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Node GUID (big-endian bytes) from the address: locally administered `02:75:72:78` ("urx")
/// followed by the IPv4 address, or for IPv6 `06:75:72:78` and a fold of the address.
pub fn node_guid_of(addr: IpAddr) -> [u8; 8] {
    match addr {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            [0x02, 0x75, 0x72, 0x78, o[0], o[1], o[2], o[3]]
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let mut f = [0u8; 4];
            for (i, b) in o.iter().enumerate() {
                f[i % 4] ^= b;
            }
            [0x06, 0x75, 0x72, 0x78, f[0], f[1], f[2], f[3]]
        }
    }
}

fn masked_eq(a: IpAddr, b: IpAddr, mask: IpAddr) -> bool {
    match (a, b, mask) {
        (IpAddr::V4(a), IpAddr::V4(b), IpAddr::V4(m)) => u32::from(a) & u32::from(m) == u32::from(b) & u32::from(m),
        (IpAddr::V6(a), IpAddr::V6(b), IpAddr::V6(m)) => u128::from(a) & u128::from(m) == u128::from(b) & u128::from(m),
        _ => false,
    }
}

/// The interface an address belongs to: exact match first, then the subnet that contains it
/// (127.77.x.y is on `lo` through 127.0.0.1/8).
pub fn interface_of(addr: IpAddr, ifaces: &[IfAddr]) -> Option<&IfAddr> {
    ifaces.iter().find(|i| i.addr == addr).or_else(|| ifaces.iter().find(|i| masked_eq(i.addr, addr, i.netmask)))
}

fn is_v6_link_local(a: &Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

/// Decide the address and bind it. `bind(addr)` must bind UDP `addr:4791` and return what it
/// bound (a socket, or a test token).
/// [`choose_skipping`] with nothing known to be taken.
pub fn choose<T>(
    urxe_addr: Option<&str>,
    pid: u32,
    ifaces: &[IfAddr],
    bind: impl FnMut(IpAddr) -> io::Result<T>,
) -> Result<Chosen<T>, ConfigError> {
    choose_skipping(urxe_addr, pid, ifaces, |_| false, bind)
}

/// Decide the address and bind it. `bind(addr)` must bind UDP `addr:4791` and return what it
/// bound (a socket, or a test token); `taken(addr)`: another user is known to hold
/// `addr:4791` (zero configuration skips it without a bind).
pub fn choose_skipping<T>(
    urxe_addr: Option<&str>,
    pid: u32,
    ifaces: &[IfAddr],
    taken: impl Fn(Ipv4Addr) -> bool,
    mut bind: impl FnMut(IpAddr) -> io::Result<T>,
) -> Result<Chosen<T>, ConfigError> {
    let finish = |addr: IpAddr, bound: T| {
        let ifc = interface_of(addr, ifaces);
        Chosen {
            addr,
            ifname: ifc.map(|i| i.name.clone()),
            ifindex: ifc.map_or(0, |i| i.index),
            netdev_mtu: ifc.map_or(if addr.is_loopback() { 65536 } else { 1500 }, |i| i.mtu),
            bound,
        }
    };
    let Some(value) = urxe_addr else {
        let mut binds = 0;
        for c in loopback_candidates(pid).filter(|&c| !taken(c)) {
            let a = IpAddr::V4(c);
            match bind(a) {
                Ok(b) => return Ok(finish(a, b)),
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {}
                Err(err) => return Err(ConfigError::Bind { addr: a, err }),
            }
            binds += 1;
            if binds == LOOPBACK_PROBES {
                break;
            }
        }
        return Err(ConfigError::LoopbackExhausted);
    };
    let addr = match parse_urxe_addr(value)? {
        AddrSpec::Ip(ip) => ip,
        AddrSpec::Interface(name) => {
            let mine: Vec<&IfAddr> = ifaces.iter().filter(|i| i.name == name).collect();
            if mine.is_empty() {
                return Err(ConfigError::NoSuchInterface { value: name });
            }
            let v4 = mine.iter().find(|i| i.addr.is_ipv4());
            let v6 = mine.iter().find(|i| matches!(i.addr, IpAddr::V6(a) if !is_v6_link_local(&a)));
            match v4.or(v6) {
                Some(i) => i.addr,
                None => return Err(ConfigError::InterfaceWithoutAddress { value: name }),
            }
        }
    };
    match bind(addr) {
        Ok(b) => Ok(finish(addr, b)),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Err(ConfigError::PortInUse { addr, from_env: true }),
        Err(e) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => Err(ConfigError::NotLocal { addr }),
        Err(err) => Err(ConfigError::Bind { addr, err }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn lo() -> IfAddr {
        IfAddr {
            name: "lo".into(),
            index: 1,
            addr: "127.0.0.1".parse().unwrap(),
            netmask: "255.0.0.0".parse().unwrap(),
            mtu: 65536,
        }
    }
    fn eth() -> Vec<IfAddr> {
        vec![
            IfAddr {
                name: "eth0".into(),
                index: 2,
                addr: "fe80::1".parse().unwrap(),
                netmask: "ffff:ffff:ffff:ffff::".parse().unwrap(),
                mtu: 1500,
            },
            IfAddr {
                name: "eth0".into(),
                index: 2,
                addr: "10.1.2.3".parse().unwrap(),
                netmask: "255.255.255.0".parse().unwrap(),
                mtu: 9000,
            },
        ]
    }
    fn inuse() -> io::Error {
        io::Error::from_raw_os_error(libc::EADDRINUSE)
    }

    #[test]
    fn loopback_candidate_follows_pid_and_skips_0_and_255() {
        assert_eq!(loopback_candidate(0x1234, 0), Ipv4Addr::new(127, 77, 0x12, 0x34));
        assert_eq!(loopback_candidate(0x1234, 1), Ipv4Addr::new(127, 77, 0x12, 0x35));
        assert_eq!(loopback_candidate(0x12ff, 0), Ipv4Addr::new(127, 77, 0x13, 1));
        assert_eq!(loopback_candidate(0x1200, 0), Ipv4Addr::new(127, 77, 0x12, 1));
        assert_eq!(loopback_candidate(0x12fe, 1), Ipv4Addr::new(127, 77, 0x13, 1));
        assert_eq!(loopback_candidate(0xfffe, 1), Ipv4Addr::new(127, 77, 0, 1));
        let all: HashSet<_> = (0..1000).map(|a| loopback_candidate(4242, a)).collect();
        assert_eq!(all.len(), 1000, "candidates repeat");
        assert!(all.iter().all(|a| a.octets()[3] != 0 && a.octets()[3] != 255));
    }

    #[test]
    fn zero_config_probes_past_addresses_in_use() {
        let mut tried = vec![];
        let c = choose(None, 0x0102, &[lo()], |a| {
            tried.push(a);
            if tried.len() < 3 {
                Err(inuse())
            } else {
                Ok(7)
            }
        })
        .unwrap();
        assert_eq!(c.addr, "127.77.1.4".parse::<IpAddr>().unwrap());
        assert_eq!(tried.len(), 3);
        assert_eq!(c.ifname.as_deref(), Some("lo"));
        assert_eq!(c.netdev_mtu, 65536);
        assert_eq!(c.ifindex, 1);
        assert_eq!(c.bound, 7);
    }

    #[test]
    fn zero_config_gives_up_after_the_probe_budget() {
        let e = choose(None, 1, &[lo()], |_| -> io::Result<()> { Err(inuse()) }).unwrap_err();
        assert!(matches!(e, ConfigError::LoopbackExhausted));
        assert_eq!(e.errno(), libc::EADDRINUSE);
        assert!(e.to_string().contains("URXE_ADDR"));
    }

    #[test]
    fn candidates_cover_127_slash_8_but_127_0_slash_16_after_127_77() {
        let mut it = loopback_candidates(0x1234);
        assert_eq!(it.next(), Some(Ipv4Addr::new(127, 77, 0x12, 0x34)));
        // Every /16 but 127.0 once, each block the 65,024 addresses of the first walk.
        let first: HashSet<(u8, u8)> =
            loopback_candidates(0x1234).take(65024).map(|a| (a.octets()[2], a.octets()[3])).collect();
        assert_eq!(first.len(), 65024);
        let (mut n, mut blocks) = (0u64, Vec::new());
        for (i, a) in loopback_candidates(0x1234).enumerate() {
            let o = a.octets();
            assert!(o[1] != 0 && o[3] != 0 && o[3] != 255, "{a}");
            if i % 65024 == 0 {
                assert_eq!((o[2], o[3]), (0x12, 0x34), "block {} starts at the seed", i / 65024);
                blocks.push(o[1]);
            }
            n += 1;
        }
        assert_eq!(n, LOOPBACK_CANDIDATES);
        assert_eq!(&blocks[..3], &[77, 78, 79]);
        assert_eq!(blocks[255 - 77 + 1], 1, "after 127.255 comes 127.1");
        blocks.sort_unstable();
        assert_eq!(blocks, (1..=255).collect::<Vec<u8>>(), "each /16 once, 127.0 never");
    }

    /// Another user holding 4791 on the first 100,000 candidates (as many as a local user may
    /// bind) costs no bind each: the walk skips them and binds the next.
    #[test]
    fn addresses_held_by_others_are_skipped_without_a_bind() {
        let held: HashSet<Ipv4Addr> = loopback_candidates(7).take(100_000).collect();
        let mut binds = 0;
        let c = choose_skipping(
            None,
            7,
            &[lo()],
            |a| held.contains(&a),
            |a| {
                binds += 1;
                Ok(a)
            },
        )
        .unwrap();
        assert_eq!(binds, 1);
        assert_eq!(c.addr, IpAddr::V4(loopback_candidate(7, 100_000)));
        assert!(!held.contains(&loopback_candidate(7, 100_000)));
    }

    #[test]
    fn urxe_addr_ip_and_ifname() {
        let ifs = [vec![lo()], eth()].concat();
        let c = choose(Some("10.1.2.3"), 1, &ifs, Ok).unwrap();
        assert_eq!(c.addr, "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(c.netdev_mtu, 9000);
        let c = choose(Some("eth0"), 1, &ifs, Ok).unwrap();
        assert_eq!(c.addr, "10.1.2.3".parse::<IpAddr>().unwrap(), "IPv4 preferred");
        assert_eq!(c.ifindex, 2);
        let c = choose(Some("lo"), 1, &ifs, Ok).unwrap();
        assert_eq!(c.addr, "127.0.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn bad_urxe_addr_values_name_the_variable() {
        let ifs = [vec![lo()], eth()].concat();
        for v in ["", "0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "a/b", "x y", "much-too-long-interface-name"] {
            let e = choose(Some(v), 1, &ifs, Ok).unwrap_err();
            assert!(matches!(e, ConfigError::BadValue { .. }), "{v}: {e:?}");
            assert!(e.to_string().contains("URXE_ADDR"), "{e}");
            assert_eq!(e.errno(), libc::EINVAL);
        }
        let e = choose(Some("1.2.3"), 1, &ifs, Ok).unwrap_err();
        assert!(matches!(e, ConfigError::NoSuchInterface { .. }));
        assert!(e.to_string().contains("URXE_ADDR=\"1.2.3\""));
        let only_ll = vec![eth()[0].clone()];
        let e = choose(Some("eth0"), 1, &only_ll, Ok).unwrap_err();
        assert!(matches!(e, ConfigError::InterfaceWithoutAddress { .. }));
    }

    #[test]
    fn port_conflicts_and_foreign_addresses_are_reported() {
        let e = choose(Some("10.1.2.3"), 1, &eth(), |_| -> io::Result<()> { Err(inuse()) }).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("4791") && msg.contains("10.1.2.3") && msg.contains("URXE_ADDR"), "{msg}");
        assert_eq!(e.errno(), libc::EADDRINUSE);
        let e = choose(Some("192.0.2.1"), 1, &eth(), |_| -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EADDRNOTAVAIL))
        })
        .unwrap_err();
        assert!(matches!(e, ConfigError::NotLocal { .. }));
        assert!(e.to_string().contains("192.0.2.1"));
    }

    #[test]
    fn gid_and_guid_derive_from_the_address() {
        let a: IpAddr = "127.77.1.2".parse().unwrap();
        assert_eq!(gid_of(a), [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 77, 1, 2]);
        assert_eq!(node_guid_of(a), [2, 0x75, 0x72, 0x78, 127, 77, 1, 2]);
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(gid_of(b), "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(node_guid_of(b)[0], 6);
    }
}
