//! `urxe check` and the wire layer against the golden kernel-rxe captures in tests/captures.

use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use urxe::wire::icrc::IpFields;
use urxe::wire::packet::finish;
use urxe::wire::parse;
use urxe_cli::check::capture::{decode, Capture, Decoded, Frame};
use urxe_cli::check::{check_file, Format, Options};

mod tap_support;
use tap_support::{urxe_lib_dir, wait_bounded};

fn captures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    v
}

fn frames(path: &Path) -> Vec<Frame> {
    let mut c = Capture::open(path).unwrap();
    let mut v = Vec::new();
    while let Some(f) = c.next_frame() {
        v.push(f.unwrap());
    }
    v
}

fn quiet() -> Options {
    Options { format: Format::Quiet, flows: false, ..Default::default() }
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("urxe-check-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes Ethernet frames as a classic pcap.
fn write_pcap(path: &Path, link: DataLink, frames: &[Vec<u8>]) {
    let hdr = PcapHeader { datalink: link, ..Default::default() };
    let mut w = PcapWriter::with_header(File::create(path).unwrap(), hdr).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f)).unwrap();
    }
}

fn bytes_of(path: &Path) -> Vec<Vec<u8>> {
    frames(path).into_iter().map(|f| f.data).collect()
}

#[test]
fn every_captured_packet_passes() {
    let mut total = 0;
    for p in captures() {
        let mut out = Vec::new();
        let t = check_file(&p, quiet(), &mut out).unwrap();
        assert!(t.passed(), "{}: {}\n{}", p.display(), t.line(), String::from_utf8_lossy(&out));
        assert_eq!(t.ok, t.rocev2);
        total += t.rocev2;
    }
    assert_eq!(total, 943, "the README of tests/captures counts 943 RoCEv2 packets");
}

#[test]
fn parse_then_emit_reproduces_every_captured_packet() {
    let mut n = 0;
    for p in captures() {
        for f in frames(&p) {
            let Decoded::Udp(d) = decode(&f) else { panic!("frame {} of {} is not UDP", f.number, p.display()) };
            let parsed = parse(d.payload).unwrap();
            let ip = match d.ip_header[0] >> 4 {
                4 => IpFields::V4 {
                    src: d.ip_header[12..16].try_into().unwrap(),
                    dst: d.ip_header[16..20].try_into().unwrap(),
                    id: u16::from_be_bytes([d.ip_header[4], d.ip_header[5]]),
                    flags_frag: u16::from_be_bytes([d.ip_header[6], d.ip_header[7]]),
                },
                _ => unreachable!("captures are IPv4"),
            };
            let mut buf = vec![0u8; d.payload.len() + 8];
            let hl = parsed.headers.emit(&mut buf).unwrap();
            assert_eq!(hl, parsed.header_len);
            buf[hl..hl + parsed.payload.len()].copy_from_slice(parsed.payload);
            let len = finish(&mut buf, hl, parsed.payload.len(), &ip, d.sport, d.dport).unwrap();
            assert_eq!(&buf[..len], d.payload, "{} frame {}", p.display(), f.number);
            n += 1;
        }
    }
    assert_eq!(n, 943);
}

/// Flips one bit at `at` (offset in the Ethernet frame) of frame `idx` of rc_send.pcap.
fn flipped(idx: usize, at: usize, mask: u8) -> (PathBuf, u64) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rc_send.pcap");
    let mut fr = bytes_of(&src);
    fr[idx][at] ^= mask;
    let d = tmpdir("flip");
    let out = d.join(format!("flip-{idx}-{at}-{mask}.pcap"));
    write_pcap(&out, DataLink::ETHERNET, &fr);
    (out, idx as u64 + 1)
}

const ETH: usize = 14;
const IP_TOS: usize = ETH + 1;
const IP_ID: usize = ETH + 4;
const IP_TTL: usize = ETH + 8;
const BTH: usize = ETH + 20 + 8;

#[test]
fn a_flipped_covered_bit_fails_naming_the_packet() {
    for (what, at) in [("payload", BTH + 12 + 100), ("BTH PSN", BTH + 11), ("IPv4 ID", IP_ID + 1)] {
        let (file, frame) = flipped(1, at, 0x01); // a SEND_MIDDLE with 1024 bytes
        let mut out = Vec::new();
        let t = check_file(&file, Options { format: Format::Summary, flows: false, ..Default::default() }, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!t.passed(), "{what}");
        assert_eq!((t.bad, t.icrc_bad), (1, 1), "{what}: exactly one packet with a bad ICRC");
        let line = text.lines().find(|l| l.starts_with(&format!("{frame} "))).unwrap();
        assert!(line.contains("icrc=BAD"), "{what}: {line}");
        // The CLI exits nonzero and names the packet.
        let o = Command::new(env!("CARGO_BIN_EXE_urxe")).args(["check", "--quiet"]).arg(&file).output().unwrap();
        assert!(!o.status.success(), "{what}");
        let stdout = String::from_utf8(o.stdout).unwrap();
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{frame} ")) && l.contains("icrc=BAD")),
            "{what}: {stdout}"
        );
    }
}

#[test]
fn a_flipped_masked_bit_keeps_the_icrc_verdict() {
    for (what, at) in [("IPv4 TTL", IP_TTL), ("IPv4 TOS", IP_TOS)] {
        let (file, frame) = flipped(1, at, 0x04);
        let mut out = Vec::new();
        let t = check_file(&file, Options { format: Format::Summary, flows: false, ..Default::default() }, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let line = text.lines().find(|l| l.starts_with(&format!("{frame} "))).unwrap();
        assert!(line.contains("icrc=ok"), "{what}: {line}");
        assert_eq!(t.icrc_bad, 0, "{what}");
        // The IPv4 header checksum still catches it.
        assert_eq!(t.ip_checksum_bad, 1, "{what}");
    }
}

#[test]
fn pcapng_and_cooked_link_types_are_read() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rdma_read.pcap");
    let eth = bytes_of(&src);
    let d = tmpdir("links");

    // pcapng with an Ethernet interface
    let ng = d.join("read.pcapng");
    {
        let mut w = PcapNgWriter::new(File::create(&ng).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0xFFFF)).unwrap();
        for f in &eth {
            let b = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::ZERO,
                original_len: f.len() as u32,
                data: Cow::Borrowed(f),
                options: vec![],
            };
            w.write_pcapng_block(b).unwrap();
        }
    }
    // Linux cooked v1: 16-byte header, protocol at 14..16
    let sll: Vec<Vec<u8>> = eth
        .iter()
        .map(|f| {
            let mut h = vec![0, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0x77, 0, 3, 0, 0, 0x08, 0x00];
            h.extend_from_slice(&f[ETH..]);
            h
        })
        .collect();
    let sll_path = d.join("read-sll.pcap");
    write_pcap(&sll_path, DataLink::LINUX_SLL, &sll);
    // Linux cooked v2: 20-byte header, protocol at 0..2
    let sll2: Vec<Vec<u8>> = eth
        .iter()
        .map(|f| {
            let mut h = vec![0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0x52, 0x54, 0, 0x77, 0, 3, 0, 0];
            h.extend_from_slice(&f[ETH..]);
            h
        })
        .collect();
    let sll2_path = d.join("read-sll2.pcap");
    write_pcap(&sll2_path, DataLink::LINUX_SLL2, &sll2);
    // raw IP
    let raw: Vec<Vec<u8>> = eth.iter().map(|f| f[ETH..].to_vec()).collect();
    let raw_path = d.join("read-raw.pcap");
    write_pcap(&raw_path, DataLink::RAW, &raw);
    // Ethernet with an 802.1Q tag
    let vlan: Vec<Vec<u8>> = eth
        .iter()
        .map(|f| {
            let mut v = f[..12].to_vec();
            v.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
            v.extend_from_slice(&f[12..]);
            v
        })
        .collect();
    let vlan_path = d.join("read-vlan.pcap");
    write_pcap(&vlan_path, DataLink::ETHERNET, &vlan);

    for p in [&ng, &sll_path, &sll2_path, &raw_path, &vlan_path] {
        let t = check_file(p, quiet(), &mut Vec::new()).unwrap();
        assert!(t.passed(), "{}: {}", p.display(), t.line());
        assert_eq!(t.rocev2, 100, "{}", p.display());
    }
}

fn run_check(args: &[&str], file: &Path) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_urxe")).arg("check").args(args).arg(file).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

#[test]
fn bad_files_get_one_clear_message_and_a_nonzero_exit() {
    let d = tmpdir("bad");
    let empty = d.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let text = d.join("notes.txt");
    std::fs::write(&text, b"this is not a capture at all\n").unwrap();
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rc_send.pcap");
    let whole = std::fs::read(&good).unwrap();
    let trunc = d.join("truncated.pcap");
    std::fs::write(&trunc, &whole[..whole.len() - 100]).unwrap();
    let mut unknown = whole.clone();
    unknown[20] = 147; // LINKTYPE_USER0
    let unk = d.join("unknown-link.pcap");
    std::fs::write(&unk, &unknown).unwrap();
    let missing = d.join("does-not-exist.pcap");

    for (file, expect) in [
        (&empty, "empty file"),
        (&text, "not a pcap or pcapng capture"),
        (&trunc, "corrupt"),
        (&unk, "unsupported link type"),
        (&missing, "cannot read"),
    ] {
        let (code, _out, err) = run_check(&[], file);
        assert_eq!(code, 1, "{}: {err}", file.display());
        assert!(err.contains(expect), "{}: expected '{expect}' in: {err}", file.display());
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.lines().filter(|l| l.starts_with("urxe check:")).count(), 1, "{err}");
    }
}

#[test]
fn json_and_verbose_outputs_describe_every_packet() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/atomic.pcap");
    let (code, out, _) = run_check(&["--json"], &f);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 40);
    assert!(lines.iter().all(|l| l.starts_with('{') && l.ends_with('}') && l.contains("\"icrc\":\"ok\"")));
    assert!(lines[0].contains("\"opcode_name\":\"FETCH_ADD\"") && lines[0].contains("\"atomic_eth\":{"));
    assert!(lines.iter().any(|l| l.contains("\"atomic_ack_orig\":")));
    let (code, out, _) = run_check(&["--verbose"], &f);
    assert_eq!(code, 0);
    assert!(out.contains("    BTH: opcode=0x14 (RC FETCH_ADD)"));
    assert!(out.contains("    AtomicETH: va="));
    assert!(out.contains("    AETH: syndrome=0x1f (ACK)"));
}

#[test]
fn flow_report_counts_retransmissions_and_naks() {
    // Build a capture with a retransmitted SEND and a NAK from rc_send_only: duplicate frame 1
    // (a request) at the end, and turn one ACK into a PSN-sequence NAK (fixing its ICRC).
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rc_send_only.pcap");
    let mut fr = bytes_of(&src);
    let dup = fr[0].clone();
    fr.push(dup);
    let ack = fr.iter().position(|f| f[BTH] == 0x11).unwrap();
    fr[ack][BTH + 12] = 0x60; // AETH syndrome: NAK, PSN sequence error
    let f = fr[ack].clone();
    let ip = IpFields::V4 {
        src: f[ETH + 12..ETH + 16].try_into().unwrap(),
        dst: f[ETH + 16..ETH + 20].try_into().unwrap(),
        id: u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]),
        flags_frag: u16::from_be_bytes([f[ETH + 6], f[ETH + 7]]),
    };
    let sport = u16::from_be_bytes([f[ETH + 20], f[ETH + 21]]);
    let udp = &mut fr[ack][BTH..];
    let n = udp.len();
    finish(udp, 16, 0, &ip, sport, 4791).unwrap();
    assert_eq!(n, 20);
    let d = tmpdir("flows");
    let file = d.join("flows.pcap");
    write_pcap(&file, DataLink::ETHERNET, &fr);
    let mut out = Vec::new();
    let t = check_file(&file, Options { format: Format::Quiet, flows: true, ..Default::default() }, &mut out).unwrap();
    assert!(t.passed(), "{}", t.line());
    assert_eq!((t.retransmissions, t.naks, t.rnr_naks), (1, 1, 0));
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("retrans"), "{text}");
}

fn urxe_capture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/urxe").join(name)
}

/// tcpdump on `lo` while two urxe processes ran `ibv_rc_pingpong -n 5 -s 16`: frames 6-12 are
/// each one GSO train of a 32-byte SEND and a 20-byte ACK. Before the fix the pair was read as
/// one 52-byte SEND_ONLY with a bad ICRC.
#[test]
fn gso_train_of_unequal_packets_is_split_where_the_icrc_confirms() {
    let f = urxe_capture("gso_send_ack.pcap");
    let mut out = Vec::new();
    let t = check_file(&f, Options { format: Format::Summary, flows: false, ..Default::default() }, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(t.passed(), "{}\n{text}", t.line());
    assert_eq!((t.frames, t.rocev2, t.gso_trains, t.icrc_bad, t.header_errors), (13, 20, 7, 0, 0), "{text}");
    let sends = text.lines().filter(|l| l.contains(".1/2 ") && l.contains("SEND_ONLY") && l.contains("len=16"));
    assert_eq!(sends.count(), 7, "{text}");
    let acks = text.lines().filter(|l| l.contains(".2/2 ") && l.contains("ACKNOWLEDGE") && l.contains("icrc=ok"));
    assert_eq!(acks.count(), 7, "{text}");
    assert!(!text.contains("BAD") && !text.contains("reserved"), "{text}");

    // The same train with one bit of the ACK's ICRC flipped: no split is confirmed by the ICRC,
    // so the frame is reported bad, not passed.
    let mut fr = bytes_of(&f);
    let last = fr[5].len() - 1;
    fr[5][last] ^= 0x01;
    let d = tmpdir("gso");
    let bad = d.join("gso-bad.pcap");
    write_pcap(&bad, DataLink::ETHERNET, &fr);
    let t = check_file(&bad, quiet(), &mut Vec::new()).unwrap();
    assert!(!t.passed(), "{}", t.line());
    assert_eq!(t.bad, 1, "{}", t.line());
}

/// In a pingpong both QPs send SENDs and ACKs on the same (source, destination, QP): the flow
/// report keeps the request PSNs and the response PSNs apart.
#[test]
fn flow_report_keeps_request_and_response_psns_apart() {
    let f = urxe_capture("gso_send_ack.pcap");
    let mut out = Vec::new();
    check_file(&f, Options { format: Format::Quiet, flows: true, ..Default::default() }, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().next().unwrap().contains("req_psns             resp_psns"), "{text}");
    let row = |from: &str| {
        text.lines().find(|l| l.starts_with(from)).unwrap_or_else(|| panic!("no flow from {from}\n{text}")).to_string()
    };
    // .64's requests are 0xa2836e..=0xa28372; the ACKs it sends answer .73's 0x72f796..=0x72f79a.
    let a = row("127.77.15.64 > 127.77.15.73");
    assert!(a.contains(" 5     5  0xa2836e-0xa28372    0x72f796-0x72f79a "), "{a}");
    let b = row("127.77.15.73 > 127.77.15.64");
    assert!(b.contains(" 5     5  0x72f796-0x72f79a    0xa2836e-0xa28372 "), "{b}");
}

/// tcpdump's file of a capture that saw nothing: a 24-byte header. Valid, 0 packets, exit 0.
#[test]
fn a_header_only_capture_is_valid_with_zero_packets() {
    let f = urxe_capture("empty.pcap");
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 24);
    let t = check_file(&f, quiet(), &mut Vec::new()).unwrap();
    assert!(t.passed(), "{}", t.line());
    assert_eq!((t.frames, t.rocev2), (0, 0));
    let (code, out, err) = run_check(&[], &f);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS: 0 RoCEv2 packets"), "{out}");
    assert!(err.is_empty(), "{err}");
    // A pcapng with only its section header and an interface is the same.
    let d = tmpdir("empty-ng");
    let ng = d.join("empty.pcapng");
    let mut w = PcapNgWriter::new(File::create(&ng).unwrap()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0xFFFF)).unwrap();
    drop(w);
    let (code, out, err) = run_check(&[], &ng);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS: 0 RoCEv2 packets"), "{out}");
    // A file of frames none of which is RoCEv2 still fails: the capture missed its traffic.
    let fr = bytes_of(&urxe_capture("gso_send_ack.pcap"));
    let other: Vec<Vec<u8>> = fr
        .into_iter()
        .map(|mut f| {
            f[ETH + 22..ETH + 24].copy_from_slice(&53u16.to_be_bytes());
            f
        })
        .collect();
    let dns = d.join("not-roce.pcap");
    write_pcap(&dns, DataLink::ETHERNET, &other);
    let (code, _out, err) = run_check(&[], &dns);
    assert_eq!(code, 1);
    assert!(err.contains("no RoCE packets"), "{err}");
}

// ------------------------------------------------------------------ the capture tap

/// A free TCP port for the pingpong's out-of-band exchange.
fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `(source, destination, IP header, UDP payload)` of every RoCEv2 packet of a capture, and
/// for pcapng the interface each came from.
fn roce_packets(path: &Path) -> Vec<(std::net::IpAddr, std::net::IpAddr, Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    for f in frames(path) {
        if let Decoded::Udp(d) = decode(&f) {
            if d.dport == 4791 {
                v.push((d.src, d.dst, d.ip_header.to_vec(), d.payload.to_vec()));
            }
        }
    }
    v
}

/// What one pingpong run with taps left: tcpdump's file of lo, the two taps, the two addresses.
struct TapRun {
    dump: PathBuf,
    tap_a: PathBuf,
    tap_b: PathBuf,
    a: std::net::IpAddr,
    b: std::net::IpAddr,
}

/// Two urxe processes run `ibv_rc_pingpong -n 20 -s 3000` over loopback (URXE_GSO=`gso`) while
/// tcpdump captures lo; the server's tap comes from `urxe run --pcap`, the client's from
/// URXE_PCAP with `%p`. Every wait is bounded.
fn pingpong_with_taps(name: &str, gso: &str) -> TapRun {
    // One pair at a time (2-core machines; tcpdump must keep up).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    use std::process::Stdio;
    let lib = urxe_lib_dir();
    let d = tmpdir(name);
    let pid = std::process::id();
    // Addresses of our own (per process and per call), so the filter ignores other urxe
    // processes on lo.
    let call = name.bytes().fold(0u32, |h, c| h.wrapping_mul(31).wrapping_add(c as u32)) % 120;
    let net = format!("127.{}.{}", 100 + pid % 100, (pid / 100) % 250 + 1);
    let (a, b) = (format!("{net}.{}", 2 * call + 1), format!("{net}.{}", 2 * call + 2));
    let dump = d.join("lo.pcap");
    let mut td = Command::new("tcpdump")
        .args(["-i", "lo", "-U", "-n", "-w"])
        .arg(&dump)
        // Traffic between the two only: a shared address's join probes go from an address to
        // itself and never through the device (nor its tap).
        .arg(format!("udp port 4791 and ((src host {a} and dst host {b}) or (src host {b} and dst host {a}))"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump (Debian package tcpdump) must be installed");
    // tcpdump says "listening on lo" once its filter is in place.
    let mut err = std::io::BufReader::new(td.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut err, &mut line).unwrap();
    assert!(line.contains("listening on lo"), "tcpdump: {line}");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));

    let port = free_tcp_port().to_string();
    let pp = ["-d", "urxe0", "-g", "1", "-p", &port, "-n", "20", "-s", "3000"];
    let tap_a = d.join("tap-a.pcapng");
    let tap_b = d.join("tap-b-%p.pcapng");
    let mut server = Command::new(env!("CARGO_BIN_EXE_urxe"))
        .args(["run", "--addr", &a, "--lib"])
        .arg(&lib)
        .arg("--pcap")
        .arg(&tap_a)
        .args(["--", "ibv_rc_pingpong"])
        .args(pp)
        .env("URXE_GSO", gso)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let listening = || {
        std::fs::read_to_string("/proc/net/tcp")
            .unwrap()
            .contains(&format!(":{:04X} 00000000:0000 0A", port.parse::<u16>().unwrap()))
    };
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !listening() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = Command::new("ibv_rc_pingpong")
        .args(pp)
        .arg("127.0.0.1")
        .env("LD_LIBRARY_PATH", &lib)
        .env("URXE_ADDR", &b)
        .env("URXE_GSO", gso)
        .env("URXE_PCAP", &tap_b)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let client_ok = wait_bounded(&mut client, Duration::from_secs(30)) == Some(true);
    let server_ok = wait_bounded(&mut server, Duration::from_secs(10)) == Some(true);
    // tcpdump may lag behind on a loaded machine and drops what it has not read when stopped:
    // let it catch up with the taps (bounded) before stopping it.
    // Packets, GSO trains counted as the packets they hold; 0 while a record is half written.
    let readable = |p: &Path| check_file(p, quiet(), &mut Vec::new()).map(|t| t.rocev2).unwrap_or(0);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while readable(&dump) < readable(&tap_a) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill").arg(td.id().to_string()).status();
    let _ = wait_bounded(&mut td, Duration::from_secs(10));
    assert!(client_ok && server_ok, "pingpong failed: client {client_ok}, server {server_ok}");
    let tap_b = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("tap-b-"))
        .expect("the client's URXE_PCAP file (%p = its pid)");

    let (a, b) = (a.parse().unwrap(), b.parse().unwrap());
    TapRun { dump, tap_a, tap_b, a, b }
}

/// Two urxe processes run ibv_rc_pingpong (3000-byte messages: SEND FIRST/MIDDLE/LAST and
/// ACKs) over loopback with URXE_GSO=0 while tcpdump captures lo. Each process writes its own
/// tap file — one through `urxe run --pcap`, one through URXE_PCAP. Every record of each tap
/// equals tcpdump's packet, packet for packet in order per direction: the UDP payload, and for
/// sent packets the whole IPv4 header (ID 0, DF, TTL, checksum). `urxe check` passes both taps.
#[test]
fn tap_records_equal_tcpdump_on_lo_packet_for_packet() {
    let TapRun { dump, tap_a, tap_b, a: ia, b: ib } = pingpong_with_taps("tap", "0");
    let wire = roce_packets(&dump);
    // 20 iterations x 3 packets each way, plus ACKs.
    assert!(wire.len() >= 120, "tcpdump saw {} packets", wire.len());
    for (tap, me) in [(&tap_a, ia), (&tap_b, ib)] {
        let t = check_file(tap, quiet(), &mut Vec::new()).unwrap();
        assert!(t.passed(), "{}: {}", tap.display(), t.line());
        assert_eq!(t.rocev2 as usize, wire.len(), "{}: the tap holds every packet", tap.display());
        let recs = roce_packets(tap);
        let sent: Vec<_> = recs.iter().filter(|r| r.0 == me).collect();
        let got: Vec<_> = recs.iter().filter(|r| r.1 == me).collect();
        let wire_sent: Vec<_> = wire.iter().filter(|r| r.0 == me).collect();
        let wire_got: Vec<_> = wire.iter().filter(|r| r.1 == me).collect();
        assert_eq!(sent.len(), wire_sent.len(), "{}", tap.display());
        assert_eq!(got.len(), wire_got.len(), "{}", tap.display());
        for (i, (r, w)) in sent.iter().zip(&wire_sent).enumerate() {
            assert_eq!(r.3, w.3, "{} sent packet {i}: UDP payload", tap.display());
            assert_eq!(r.2, w.2, "{} sent packet {i}: IPv4 header", tap.display());
        }
        for (i, (r, w)) in got.iter().zip(&wire_got).enumerate() {
            assert_eq!(r.3, w.3, "{} received packet {i}: UDP payload", tap.display());
            assert_eq!((r.0, r.1), (w.0, w.1), "{} received packet {i}", tap.display());
        }
    }
}

/// With GSO on, the sender's trains show on lo as one frame each, but the taps hold one record
/// per packet (trains sent and GRO super-packets received alike), and as many packets as
/// `urxe check` finds in tcpdump's file once it has split the trains.
#[test]
fn tap_records_each_packet_of_gso_trains() {
    let r = pingpong_with_taps("tap-gso", "1");
    let wire = check_file(&r.dump, quiet(), &mut Vec::new()).unwrap();
    assert!(wire.passed(), "{}", wire.line());
    for tap in [&r.tap_a, &r.tap_b] {
        let t = check_file(tap, quiet(), &mut Vec::new()).unwrap();
        assert!(t.passed(), "{}: {}", tap.display(), t.line());
        assert_eq!(t.gso_trains, 0, "{}: every record is one packet", tap.display());
        assert_eq!(t.rocev2, wire.rocev2, "{}: {} vs tcpdump {}", tap.display(), t.line(), wire.line());
        assert_eq!(t.frames, t.rocev2);
    }
    let _ = (r.a, r.b);
}

/// Kernel rxe picks IPv4 IDs a receiving socket never sees. A received record the tap marks as
/// "ID unknown" (written here from rc_send.pcap with every ID set to 0) still verifies: check
/// solves the ID from the ICRC and finds the one rxe sent. Unmarked, the same records fail,
/// and a marked record whose payload was damaged fails too.
#[test]
fn received_records_without_their_ip_id_verify_with_the_solved_id() {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
    use urxe_cli::check::capture::TAP_IP_ID_UNKNOWN;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rc_send.pcap");
    let fr = bytes_of(&src);
    let ids: Vec<u16> = fr.iter().map(|f| u16::from_be_bytes([f[IP_ID], f[IP_ID + 1]])).collect();
    assert!(ids.iter().all(|&i| i != 0));
    let d = tmpdir("ipid");
    let write = |name: &str, marked: bool, damage: Option<usize>| {
        let path = d.join(name);
        let mut w = PcapNgWriter::new(File::create(&path).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::RAW, 0)).unwrap();
        for (i, f) in fr.iter().enumerate() {
            let mut ip = f[ETH..].to_vec();
            ip[4] = 0;
            ip[5] = 0;
            // Keep the IPv4 header checksum right for the new ID.
            ip[10] = 0;
            ip[11] = 0;
            let c = !urxe_cli::check::capture::fold(urxe_cli::check::capture::ones_complement_sum(0, &ip[..20]));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            if damage == Some(i) {
                ip[20 + 8 + 12 + 5] ^= 0x10;
            }
            let options = if marked { vec![EnhancedPacketOption::Comment(TAP_IP_ID_UNKNOWN.into())] } else { vec![] };
            let epb = EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_micros(i as u64),
                original_len: ip.len() as u32,
                data: Cow::Owned(ip),
                options,
            };
            w.write_pcapng_block(epb).unwrap();
        }
        path
    };
    let marked = write("marked.pcapng", true, None);
    let mut out = Vec::new();
    let t =
        check_file(&marked, Options { format: Format::Summary, flows: false, ..Default::default() }, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(t.passed(), "{}\n{text}", t.line());
    assert_eq!(t.rocev2, 100);
    for (line, id) in text.lines().zip(&ids) {
        assert!(line.contains(&format!(" ipid={id:#06x}(solved)")), "{line} (want {id:#06x})");
    }
    let plain = write("unmarked.pcapng", false, None);
    let t = check_file(&plain, quiet(), &mut Vec::new()).unwrap();
    assert_eq!(t.icrc_bad, 100, "{}", t.line());
    let damaged = write("damaged.pcapng", true, Some(7));
    let t = check_file(&damaged, quiet(), &mut Vec::new()).unwrap();
    assert_eq!((t.bad, t.icrc_bad), (1, 1), "{}", t.line());
}

/// Bad URXE_PCAP / URXE_PCAP_MAX values stop the program with a message naming the variable.
#[test]
fn bad_tap_settings_stop_the_program_naming_the_variable() {
    let lib = urxe_lib_dir();
    let d = tmpdir("tap-bad");
    let missing_dir = d.join("no-such-dir/x.pcapng");
    let cases: [(&str, &std::ffi::OsStr, &str); 4] = [
        ("URXE_PCAP_MAX", "12abc".as_ref(), "URXE_PCAP_MAX=12abc"),
        ("URXE_PCAP_MAX", "100".as_ref(), "URXE_PCAP_MAX=100"),
        ("URXE_PCAP", "".as_ref(), "URXE_PCAP is set but empty"),
        ("URXE_PCAP", missing_dir.as_os_str(), "URXE_PCAP="),
    ];
    for (var, val, want) in cases {
        let mut c = Command::new("ibv_rc_pingpong");
        c.args(["-d", "urxe0", "-g", "1", "-p", &free_tcp_port().to_string()])
            .env("LD_LIBRARY_PATH", &lib)
            .env(var, val)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if var == "URXE_PCAP_MAX" {
            c.env("URXE_PCAP", d.join("unused.pcapng"));
        }
        let mut child = c.spawn().unwrap();
        let mut err = String::new();
        let mut pipe = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
            err
        });
        let status = wait_bounded(&mut child, Duration::from_secs(20));
        let err = reader.join().unwrap();
        assert_eq!(status, Some(false), "{var}={val:?}: the program did not stop with a failure: {err}");
        assert!(err.contains(want), "{var}={val:?}: expected {want:?} in: {err}");
    }
}
