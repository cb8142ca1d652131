//! The `URXE_PCAP` tap (urxe::observe::tap) read back by `urxe check`'s reader and verifier:
//! records are raw IP with the headers the ICRC was computed for, reach the file on age with no
//! further traffic, stay within `URXE_PCAP_MAX` as whole blocks, and a file another writer
//! holds is left alone. In this crate because the verifier is here.

use std::fs::OpenOptions;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pcap_file::DataLink;
use urxe::observe::tap::{lock_whole, per_process_path, Tap, MIN_MAX};
use urxe::wire::icrc::IpFields;
use urxe_cli::check::capture::{decode, Capture, Decoded, UdpChecksum};
use urxe_cli::check::{check_file, Format, Options};

/// An RC ACK to QP 0x11, PSN 5, with its ICRC for `ip` and source port `sport`.
fn ack(ip: &IpFields, sport: u16) -> Vec<u8> {
    let mut b = vec![0u8; 24];
    b[..16].copy_from_slice(&[0x11, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 5, 0x1F, 0, 0, 1]);
    let n = urxe::wire::packet::finish(&mut b, 16, 0, ip, sport, 4791).unwrap();
    b.truncate(n);
    b
}

/// A file path in a scratch directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("urxe-tap-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `(file, our address, the peer's, an ACK we send to it)`.
fn one_flow(name: &str) -> (PathBuf, SocketAddr, SocketAddr, Vec<u8>) {
    let (a, b): (SocketAddr, SocketAddr) = ("127.1.2.3:49441".parse().unwrap(), "127.4.5.6:4791".parse().unwrap());
    let (IpAddr::V4(s), IpAddr::V4(d)) = (a.ip(), b.ip()) else { unreachable!() };
    (scratch(name), a, b, ack(&IpFields::v4_df(s, d), a.port()))
}

#[test]
fn records_are_raw_ip_with_the_headers_the_icrc_was_computed_for() {
    let path = scratch("t.pcapng");
    let (a4, b4): (SocketAddr, SocketAddr) = ("127.1.2.3:49441".parse().unwrap(), "127.4.5.6:4791".parse().unwrap());
    let (a6, b6): (SocketAddr, SocketAddr) = ("[fd00::1]:49441".parse().unwrap(), "[fd00::2]:4791".parse().unwrap());
    let ip4 = |s: SocketAddr, d: SocketAddr| match (s.ip(), d.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpFields::v4_df(s, d),
        _ => unreachable!(),
    };
    let ip6 = |s: SocketAddr, d: SocketAddr| match (s.ip(), d.ip()) {
        (IpAddr::V6(s), IpAddr::V6(d)) => IpFields::v6(s, d),
        _ => unreachable!(),
    };
    let p1 = ack(&ip4(a4, b4), a4.port());
    // The peer's packet from its flow port to our 4791.
    let (pb, pa): (SocketAddr, SocketAddr) = ("127.4.5.6:49441".parse().unwrap(), "127.1.2.3:4791".parse().unwrap());
    let p2 = ack(&ip4(pb, pa), pb.port());
    let p3 = ack(&ip6(a6, b6), a6.port());
    {
        let t4 = Tap::open(path.clone(), u64::MAX, a4.ip()).unwrap();
        // A second device of the process joins the same file with its own interfaces.
        let t6 = Tap::open(path.clone(), u64::MAX, a6.ip()).unwrap();
        // The second as the second segment of a GSO train: ID 1, its ICRC for ID 1.
        let mut p1b = p1.clone();
        let v = urxe::wire::icrc::stored_icrc(&p1b).unwrap();
        let d1 = urxe::wire::gso_id::IdShift::new(p1b.len()).delta(1);
        urxe::wire::icrc::store_icrc(&mut p1b, v ^ d1);
        t4.sent(a4, b4, 0, [(0, &p1[..]), (1, &p1b[..])].into_iter());
        t4.received(pb, pa, 0, &p2);
        t6.sent(a6, b6, 0, std::iter::once((0, &p3[..])));
        assert_eq!(t4.dropped(), 0);
    }
    let mut c = Capture::open(&path).unwrap();
    let mut frames = Vec::new();
    while let Some(f) = c.next_frame() {
        frames.push(f.unwrap());
    }
    assert_eq!(frames.len(), 4);
    assert!(frames.iter().all(|f| f.link == DataLink::RAW));
    assert_eq!(frames.iter().map(|f| f.ip_id_unknown).collect::<Vec<_>>(), [false, false, true, false]);
    for ((f, want), id) in frames.iter().zip([&p1, &p1, &p2, &p3]).zip([0u8, 1, 0, 0]) {
        let Decoded::Udp(d) = decode(f) else { panic!("frame {} is not UDP", f.number) };
        let n = want.len() - 4;
        assert_eq!(d.payload[..n], want[..n]);
        assert_eq!(d.dport, 4791);
        if d.ip_header[0] >> 4 == 4 {
            assert_eq!(&d.ip_header[4..8], &[0, id, 0x40, 0], "the ID it was sent with, DF");
            assert_eq!(d.ip_checksum_ok, Some(true));
        } else {
            assert_eq!(d.ip_header.len(), 40);
            assert_eq!(d.udp_checksum, UdpChecksum::Zero);
        }
    }
    // Sent IPv4 carries the UDP checksum the kernel fills in; received records carry 0.
    let Decoded::Udp(d) = decode(&frames[0]) else { unreachable!() };
    assert_eq!(d.udp_checksum, UdpChecksum::Ok);
    let Decoded::Udp(d) = decode(&frames[2]) else { unreachable!() };
    assert_eq!(d.udp_checksum, UdpChecksum::Zero);
    let t = check_file(&path, Options { format: Format::Quiet, flows: false, ..Default::default() }, &mut Vec::new())
        .unwrap();
    assert!(t.passed(), "{}", t.line());
    assert_eq!(t.rocev2, 4);
}

#[test]
fn records_reach_the_file_within_the_flush_age_with_no_further_traffic() {
    let (path, a, b, p) = one_flow("aged.pcapng");
    let t = Tap::open(path.clone(), u64::MAX, a.ip()).unwrap();
    let headers = std::fs::metadata(&path).unwrap().len();
    t.sent(a, b, 0, std::iter::once((0, &p[..])));
    // Still open (as in a process that then hangs or is killed): the flusher writes it.
    let end = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(&path).unwrap().len() == headers && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = check_file(&path, Options { format: Format::Quiet, flows: false, ..Default::default() }, &mut Vec::new())
        .unwrap();
    assert_eq!(t0.rocev2, 1, "{}", t0.line());
    drop(t);
}

#[test]
fn the_size_bound_keeps_whole_blocks_and_counts_the_rest() {
    let (path, a, b, p) = one_flow("bounded.pcapng");
    let t = Tap::open(path.clone(), MIN_MAX, a.ip()).unwrap();
    for _ in 0..200 {
        t.sent(a, b, 0, std::iter::once((0, &p[..])));
    }
    let dropped = t.dropped();
    drop(t);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len <= MIN_MAX && len > MIN_MAX - 100, "{len}");
    let tot = check_file(&path, Options { format: Format::Quiet, flows: false, ..Default::default() }, &mut Vec::new())
        .unwrap();
    assert!(tot.passed(), "{}", tot.line());
    assert!(dropped > 0);
    assert_eq!(tot.rocev2 + dropped, 200);
}

#[test]
fn a_file_another_writer_holds_is_left_alone_and_a_per_process_file_written() {
    let (path, a, b, p) = one_flow("held.pcapng");
    std::fs::write(&path, b"someone else's capture").unwrap();
    // Another open file description holding the lock stands for another process.
    let other = OpenOptions::new().write(true).open(&path).unwrap();
    assert!(lock_whole(&other).unwrap());
    let pid = std::process::id();
    let own = per_process_path(&path, pid);
    assert_eq!(own.file_name().unwrap().to_string_lossy(), format!("held.{pid}.pcapng"));
    {
        let t = Tap::open(path.clone(), u64::MAX, a.ip()).unwrap();
        t.sent(a, b, 0, std::iter::once((0, &p[..])));
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's capture");
    let t = check_file(&own, Options { format: Format::Quiet, ..Default::default() }, &mut Vec::new()).unwrap();
    assert!(t.passed() && t.rocev2 == 1, "{}", t.line());
    drop(other);
    // Once the other writer is gone, the named file is this process's again.
    {
        let t = Tap::open(path.clone(), u64::MAX, a.ip()).unwrap();
        t.sent(a, b, 0, std::iter::once((0, &p[..])));
    }
    let t = check_file(&path, Options { format: Format::Quiet, ..Default::default() }, &mut Vec::new()).unwrap();
    assert!(t.passed() && t.rocev2 == 1, "{}", t.line());
}

#[test]
/// A fault note (`Tap::note`) is a record of its own interface (USER0), which check passes over.
fn fault_notes_are_records_of_their_own_interface_that_check_passes_over() {
    let (path, a, b, p) = one_flow("notes.pcapng");
    {
        let t = Tap::open(path.clone(), u64::MAX, a.ip()).unwrap();
        t.sent(a, b, 0, std::iter::once((0, &p[..])));
        t.note("urxe: fault injected: drop -> Drop at Tx qp 0x11 psn 5 (t=1 ns)");
        t.note("second");
    }
    let mut c = Capture::open(&path).unwrap();
    let frames: Vec<_> = std::iter::from_fn(|| c.next_frame()).map(Result::unwrap).collect();
    assert_eq!(frames.len(), 3);
    assert_eq!(frames[0].link, DataLink::RAW);
    assert_eq!(frames[1].link, DataLink::USER0);
    assert_eq!(frames[1].data, b"urxe: fault injected: drop -> Drop at Tx qp 0x11 psn 5 (t=1 ns)");
    assert_eq!((frames[2].link, &frames[2].data[..]), (DataLink::USER0, &b"second"[..]));
    let t = check_file(&path, Options { format: Format::Quiet, ..Default::default() }, &mut Vec::new()).unwrap();
    assert!(t.passed() && t.rocev2 == 1, "{}", t.line());
}
