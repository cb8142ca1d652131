//! Issue #39: the captures a RoCE engineer brings that `urxe check` once failed. Every case is
//! a capture built here from the kernel-rxe captures of tests/captures (frames edited, wrapped
//! or cut as a capture point or a NIC would), or written by editcap, and checked through the
//! `urxe check` command as a user runs it.

use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use pcap_file::pcap::{PcapHeader, PcapReader, PcapWriter, RawPcapPacket};
use pcap_file::DataLink;
use urxe::wire::icrc::icrc_from_headers;

const ETH: usize = 14;
const IP: usize = ETH;
const UDP: usize = ETH + 20;
const BTH: usize = ETH + 20 + 8;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures").join(name)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("urxe-check39-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The frames of a classic pcap (raw records: no length rule applied).
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(File::open(path).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_raw_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

/// Writes frames as a classic pcap; `orig` gives each record's original length (default: its
/// captured length).
fn write_pcap(path: &Path, frames: &[Vec<u8>], orig: Option<&[u32]>, snaplen: u32) {
    let hdr = PcapHeader { datalink: DataLink::ETHERNET, snaplen, ..Default::default() };
    let mut w = PcapWriter::with_header(File::create(path).unwrap(), hdr).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let o = orig.map(|o| o[i]).unwrap_or(f.len() as u32);
        let raw = RawPcapPacket {
            ts_sec: 1,
            ts_frac: i as u32,
            incl_len: f.len() as u32,
            orig_len: o,
            data: Cow::Borrowed(f),
        };
        w.write_raw_packet(&raw).unwrap();
    }
}

fn run_check(args: &[&str], file: &Path) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_urxe")).arg("check").args(args).arg(file).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

fn ipv4_checksum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let mut acc: u32 = h.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    h[10..12].copy_from_slice(&(!(acc as u16)).to_be_bytes());
}

/// An Ethernet/IPv4/UDP frame with `template`'s addresses and ports carrying `roce` (BTH up to
/// the ICRC, exclusive) and its ICRC; IP/UDP lengths and the IPv4 checksum made to fit.
fn rebuild(template: &[u8], roce: &[u8]) -> Vec<u8> {
    let mut f = template[..BTH].to_vec();
    f.extend_from_slice(roce);
    let ip_len = (20 + 8 + roce.len() + 4) as u16;
    f[IP + 2..IP + 4].copy_from_slice(&ip_len.to_be_bytes());
    ipv4_checksum(&mut f[IP..IP + 20]);
    f[UDP + 4..UDP + 6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f[UDP + 6..UDP + 8].copy_from_slice(&[0, 0]);
    let c = icrc_from_headers(&f[IP..IP + 20], &f[UDP..UDP + 8], &f[BTH..]).unwrap();
    f.extend_from_slice(&c.to_le_bytes());
    f
}

fn count(out: &str, what: &str) -> usize {
    out.matches(what).count()
}

// ------------------------------------------------------------------ 1, 6: snap length, cut frames

/// 1 and 6: `editcap -s 128` of an rxe capture (what `tcpdump -s 128` writes: records with
/// orig_len > incl_len, and orig_len > the file's snap length). Before: "capture is corrupt
/// after frame 0", exit 1. Now every packet is read, its headers decoded, its ICRC reported as
/// not captured; the flow report sees every PSN (no phantom gaps); exit 0, and 1 with --strict.
#[test]
fn a_snap_length_capture_is_read_and_its_cut_packets_still_count_in_flows() {
    let d = tmpdir("snap");
    let cut = d.join("rc_send_s128.pcap");
    let st = Command::new("editcap")
        .args(["-s", "128"])
        .arg(golden("rc_send.pcap"))
        .arg(&cut)
        .status()
        .expect("editcap (Debian package wireshark-common, installed with tshark by scripts/deps.sh)");
    assert!(st.success());
    let (code, out, err) = run_check(&["--flows"], &cut);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("corrupt"), "{err}");
    // 80 SEND packets of 1024 bytes are cut; the 20 ACKs (62 bytes) fit in 128.
    assert_eq!(count(&out, "[deviation: truncated: "), 80, "{out}");
    assert!(out.contains("bytes missing (ICRC not captured?)"), "{out}");
    assert!(out.contains("100 RoCEv2 packets: 20 ok, 0 bad"), "{out}");
    assert!(out.contains("80 truncated by the capture, ICRC unverified"), "{out}");
    assert!(out.contains("psn gaps 0") && out.contains("retransmissions 0"), "{out}");
    let (code, _, _) = run_check(&["--strict", "--quiet"], &cut);
    assert_eq!(code, 1, "--strict fails what it could not verify");
}

/// 6: a tool that recorded the cut length as the frame length (orig_len == incl_len) while
/// the IP header says more. Before: an internal parser error as a malformed frame.
#[test]
fn a_frame_cut_with_its_recorded_length_says_how_many_bytes_are_missing() {
    let d = tmpdir("cutlen");
    let mut fr = frames(&golden("rc_send.pcap"));
    let n = fr[1].len();
    fr[1].truncate(n - 100);
    let f = d.join("cut.pcap");
    write_pcap(&f, &fr[..4], None, 65535);
    let (code, out, err) = run_check(&[], &f);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("[deviation: truncated: 100 bytes missing (ICRC not captured?)]"), "{out}");
    assert!(!out.contains("malformed frame:") && out.contains("0 malformed frames"), "{out}");
    // Its headers are decoded: the SEND_MIDDLE and its PSN.
    let line = out.lines().find(|l| l.starts_with("2 ")).unwrap();
    assert!(line.contains("RC SEND_MIDDLE qp=") && line.contains("icrc=n/a"), "{line}");
}

// ------------------------------------------------------------------ 2: phantom GSO split

/// 2: one 1024-byte SEND_MIDDLE whose payload is zeros, with its last ICRC byte flipped.
/// Before: cut into a "GSO train" of 4 phantom packets (one an RC SEND_FIRST to QP 0) with
/// retransmissions and a QP 0 flow. A split must be proven by every piece's ICRC.
#[test]
fn a_bad_icrc_never_splits_a_packet_into_phantoms() {
    let d = tmpdir("phantom");
    let fr = frames(&golden("rc_send.pcap"));
    let mid = &fr[1];
    assert_eq!(mid[BTH], 0x01, "frame 2 is a SEND_MIDDLE");
    let mut roce = mid[BTH..mid.len() - 4].to_vec();
    roce[12..].fill(0);
    let mut f = rebuild(mid, &roce);
    let n = f.len();
    f[n - 1] ^= 0x01;
    let p = d.join("phantom.pcap");
    write_pcap(&p, &[fr[0].clone(), f], None, 65535);
    let (code, out, _) = run_check(&["--flows"], &p);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("2 RoCEv2 packets: 1 ok, 1 bad (icrc 1"), "{out}");
    assert!(!out.contains("GSO") && !out.contains("qp=0x000000"), "{out}");
    assert!(out.contains("retransmissions 0"), "{out}");
}

// ------------------------------------------------------------------ 3: reserved bits, --strict

/// 3: a reserved bit of BTH byte 4 set on every request (as a Huawei NIC does; the byte is
/// masked in the ICRC, so ICRCs stay valid). Default: reported, counted, exit 0. --strict:
/// exit 1. Before: exit 1 always.
#[test]
fn reserved_bits_are_a_deviation_and_fail_only_with_strict() {
    let d = tmpdir("resv");
    let mut fr = frames(&golden("rc_send_only.pcap"));
    let mut set = 0;
    for f in fr.iter_mut().filter(|f| f[BTH] == 0x04) {
        f[BTH + 4] |= 0x01;
        set += 1;
    }
    assert_eq!(set, 20);
    let p = d.join("resv.pcap");
    write_pcap(&p, &fr, None, 65535);
    let (code, out, _) = run_check(&[], &p);
    assert_eq!(code, 0, "{out}");
    assert_eq!(count(&out, "[deviation: reserved bits set]"), 20, "{out}");
    assert!(out.contains("40 RoCEv2 packets: 40 ok, 0 bad") && out.contains("20 with deviations"), "{out}");
    let (code, out, _) = run_check(&["--strict"], &p);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("20 bad"), "{out}");
}

// ------------------------------------------------------------------ 4: RD opcodes (DC traffic)

/// An RD SEND_ONLY (0x44) as ConnectX DC traffic carries: BTH, RDETH (EE context), DETH
/// (Q_Key, source QP), 64 bytes of payload.
fn rd_send_only(template: &[u8], qp: u32, psn: u32) -> Vec<u8> {
    let mut roce = vec![0x44, 0x00, 0xFF, 0xFF, 0];
    roce.extend_from_slice(&qp.to_be_bytes()[1..]);
    roce.push(0);
    roce.extend_from_slice(&psn.to_be_bytes()[1..]);
    roce.extend_from_slice(&[0, 0x00, 0x12, 0x34]); // RDETH: EE context 0x1234
    roce.extend_from_slice(&[0x11, 0x22, 0x33, 0x44, 0, 0x00, 0x00, 0x99]); // DETH
    roce.extend((0..64).map(|i| i as u8));
    rebuild(template, &roce)
}

/// 4: RD opcodes are ICRC-checked and decoded (QP, PSN, RDETH, DETH). Before: "unsupported
/// opcode", ICRC n/a, exit 1.
#[test]
fn rd_opcodes_are_icrc_checked_and_decoded() {
    let d = tmpdir("rd");
    let fr = frames(&golden("rc_send_only.pcap"));
    let a = rd_send_only(&fr[0], 0xABCDE, 77);
    let mut b = rd_send_only(&fr[0], 0xABCDE, 78);
    let n = b.len();
    b[n - 20] ^= 0x80; // a payload bit: this one's ICRC must fail
    let p = d.join("rd.pcap");
    write_pcap(&p, &[a, b], None, 65535);
    let (code, out, _) = run_check(&["--json"], &p);
    assert_eq!(code, 1, "{out}");
    let l: Vec<&str> = out.lines().collect();
    assert!(l[0].contains("\"icrc\":\"ok\"") && l[0].contains("\"ok\":true"), "{}", l[0]);
    assert!(l[0].contains("\"dest_qp\":703710") && l[0].contains("\"psn\":77"), "{}", l[0]);
    assert!(l[0].contains("\"transport\":\"RD\"") && l[0].contains("\"opcode_name\":\"SEND_ONLY\""), "{}", l[0]);
    assert!(l[0].contains("\"rdeth_eecnxt\":4660") && l[0].contains("\"deth\":{\"qkey\":287454020,\"src_qp\":153}"));
    assert!(l[1].contains("\"icrc\":\"BAD\"") && l[1].contains("\"psn\":78"), "{}", l[1]);
}

// ------------------------------------------------------------------ 5: RoCEv1

/// CRC-32 (reflected 0xEDB88320), bit by bit: the reference the RoCEv1 ICRC is built with here.
fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// The RoCEv1 frame of a RoCEv2 one: ethertype 0x8915, a GRH (IPv6 layout, next header 0x1B,
/// GIDs = the IPv4-mapped addresses, hop limit 1), the same BTH onward, and the ICRC of IBTA
/// Annex A16: over 8 bytes of 1s (the LRH), the GRH with traffic class, flow label and hop
/// limit as 1s, the BTH with byte 4 as 1s, and the rest.
fn rocev1_of(v2: &[u8], tclass: u8, flow: u32) -> Vec<u8> {
    let roce = &v2[BTH..v2.len() - 4];
    let mut f = v2[..12].to_vec();
    f.extend_from_slice(&[0x89, 0x15]);
    let mut grh = [0u8; 40];
    let w0 = (6u32 << 28) | ((tclass as u32) << 20) | (flow & 0xFFFFF);
    grh[..4].copy_from_slice(&w0.to_be_bytes());
    grh[4..6].copy_from_slice(&((roce.len() + 4) as u16).to_be_bytes());
    grh[6] = 0x1B;
    grh[7] = 1;
    for (g, a) in [(8, IP + 12), (24, IP + 16)] {
        grh[g + 10] = 0xFF;
        grh[g + 11] = 0xFF;
        grh[g + 12..g + 16].copy_from_slice(&v2[a..a + 4]);
    }
    let mut cov = vec![0xFF; 8];
    let mut m = grh;
    m[0] |= 0x0F;
    m[1..4].fill(0xFF);
    m[7] = 0xFF;
    cov.extend_from_slice(&m);
    let mut b = roce.to_vec();
    b[4] = 0xFF;
    cov.extend_from_slice(&b);
    f.extend_from_slice(&grh);
    f.extend_from_slice(roce);
    f.extend_from_slice(&crc32_bitwise(&cov).to_le_bytes());
    f
}

/// 5: RoCEv1 only, and mixed (one direction v1, the other v2). Before: "no RoCEv2 packets",
/// exit 1; the v1 half of a mixed capture vanished.
#[test]
fn rocev1_packets_are_icrc_checked_alone_and_beside_rocev2() {
    let d = tmpdir("v1");
    let fr = frames(&golden("rc_send_only.pcap"));
    let v1: Vec<Vec<u8>> = fr.iter().enumerate().map(|(i, f)| rocev1_of(f, (i * 3) as u8, i as u32 * 7919)).collect();
    let only = d.join("v1.pcap");
    write_pcap(&only, &v1, None, 65535);
    let (code, out, err) = run_check(&["--flows"], &only);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 RoCEv2 packets and 40 RoCEv1 packets: 40 ok, 0 bad"), "{out}");
    assert!(out.contains("RoCEv1 RC SEND_ONLY qp="), "{out}");
    // The flows are there too (GIDs as addresses).
    assert!(
        out.contains("[::ffff:10.77.0.3] > [::ffff:10.77.0.2]") || out.contains("::ffff:10.77.0.3 > ::ffff:10.77.0.2")
    );
    // Requests as v1, responses as v2.
    let mixed: Vec<Vec<u8>> =
        fr.iter().zip(&v1).map(|(f, v)| if f[BTH] == 0x04 { v.clone() } else { f.clone() }).collect();
    let m = d.join("mixed.pcap");
    write_pcap(&m, &mixed, None, 65535);
    let (code, out, _) = run_check(&[], &m);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("20 RoCEv2 packets and 20 RoCEv1 packets: 40 ok, 0 bad"), "{out}");
    // A flipped bit in a v1 packet fails it.
    let mut bad = v1.clone();
    let n = bad[0].len();
    bad[0][n - 10] ^= 4;
    let b = d.join("v1bad.pcap");
    write_pcap(&b, &bad, None, 65535);
    let (code, out, _) = run_check(&["--quiet"], &b);
    assert_eq!(code, 1);
    assert!(out.contains("39 ok, 1 bad (icrc 1"), "{out}");
}

// ------------------------------------------------------------------ 7: encapsulations

/// An outer Ethernet/IPv4 header for `proto` around `inner` (IP payload).
fn outer_ip(proto: u8, inner: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xAA, 0x02, 0, 0, 0, 0, 0xBB, 0x08, 0x00];
    let mut ip = [0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
    ip[2..4].copy_from_slice(&((20 + inner.len()) as u16).to_be_bytes());
    ipv4_checksum(&mut ip);
    f.extend_from_slice(&ip);
    f.extend_from_slice(inner);
    f
}

fn vxlan(eth: &[u8]) -> Vec<u8> {
    let mut u = vec![0xC3, 0x50, 0x12, 0xB5, 0, 0, 0, 0]; // 50000 -> 4789
    u[4..6].copy_from_slice(&((16 + eth.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0x08, 0, 0, 0, 0, 0x01, 0x00, 0]); // I flag, VNI 256
    u.extend_from_slice(eth);
    outer_ip(17, &u)
}

fn gre_teb(eth: &[u8]) -> Vec<u8> {
    let mut g = vec![0x20, 0, 0x65, 0x58, 0, 0, 0, 7]; // K flag, key 7
    g.extend_from_slice(eth);
    outer_ip(47, &g)
}

fn erspan2(eth: &[u8], seq: u32) -> Vec<u8> {
    let mut g = vec![0x10, 0, 0x88, 0xBE];
    g.extend_from_slice(&seq.to_be_bytes());
    g.extend_from_slice(&[0x10, 0x64, 0x00, 0x05, 0, 0, 0, 0]); // ver 1, VLAN 100, session 5
    g.extend_from_slice(eth);
    outer_ip(47, &g)
}

fn erspan3(eth: &[u8], seq: u32, platform: bool) -> Vec<u8> {
    let mut g = vec![0x10, 0, 0x22, 0xEB];
    g.extend_from_slice(&seq.to_be_bytes());
    let mut h = [0x20, 0x64, 0x00, 0x05, 0, 0, 0, 42, 0, 0, 0, 0];
    h[11] = platform as u8; // O flag
    g.extend_from_slice(&h);
    if platform {
        g.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 0, 0]); // platform subheader
    }
    g.extend_from_slice(eth);
    outer_ip(47, &g)
}

/// 7: every packet of an rxe capture inside VXLAN, GRE (TEB), ERSPAN II and ERSPAN III (with
/// and without the platform subheader): every ICRC verified. Before: all "other frames",
/// "no RoCEv2 packets", exit 1.
#[test]
fn vxlan_gre_and_erspan_are_opened_and_every_icrc_verified() {
    let d = tmpdir("encap");
    let fr = frames(&golden("rc_send.pcap"));
    let n = fr.len();
    type Wrap = Box<dyn Fn(&[u8], u32) -> Vec<u8>>;
    let kinds: [(&str, &str, Wrap); 5] = [
        ("vxlan", "VXLAN", Box::new(|e, _| vxlan(e))),
        ("gre", "GRE", Box::new(|e, _| gre_teb(e))),
        ("erspan2", "ERSPAN II", Box::new(erspan2)),
        ("erspan3", "ERSPAN III", Box::new(|e, s| erspan3(e, s, false))),
        ("erspan3o", "ERSPAN III", Box::new(|e, s| erspan3(e, s, true))),
    ];
    for (file, name, wrap) in kinds {
        let w: Vec<Vec<u8>> = fr.iter().enumerate().map(|(i, f)| wrap(f, i as u32)).collect();
        let p = d.join(format!("{file}.pcap"));
        write_pcap(&p, &w, None, 65535);
        let (code, out, err) = run_check(&[], &p);
        assert_eq!(code, 0, "{file}: {out}{err}");
        assert!(out.contains(&format!("{n} RoCEv2 packets ({n} in VXLAN/GRE/ERSPAN): {n} ok, 0 bad")), "{file}: {out}");
        assert_eq!(count(&out, &format!(" via {name} RC ")), n, "{file}: {out}");
        // A flipped payload bit inside the tunnel still fails.
        let mut bad = w.clone();
        let l = bad[1].len();
        bad[1][l - 40] ^= 1;
        let p = d.join(format!("{file}-bad.pcap"));
        write_pcap(&p, &bad, None, 65535);
        let (code, out, _) = run_check(&["--quiet"], &p);
        assert_eq!(code, 1, "{file}");
        assert!(out.contains("1 bad (icrc 1"), "{file}: {out}");
    }
}

// ------------------------------------------------------------------ 8: how things are printed

/// 8: the ICRC in wire byte order (as Wireshark and scapy), "CNP" once, frame numbers from 1
/// in the corrupt-capture message. Before: byte-swapped, "CNP CNP", "after frame 0".
#[test]
fn icrc_in_wire_order_cnp_named_once_frames_counted_from_one() {
    let d = tmpdir("print");
    let mut fr = frames(&golden("rc_send_only.pcap"));
    let n = fr[0].len();
    let wire: [u8; 4] = fr[0][n - 4..].try_into().unwrap();
    fr[0][BTH + 20] ^= 0xFF; // payload: the stored ICRC no longer matches
    let want = format!("stored 0x{:02x}{:02x}{:02x}{:02x}", wire[0], wire[1], wire[2], wire[3]);
    // A CNP (opcode 0x81): BTH, 16 reserved bytes.
    let mut cnp = vec![0x81, 0, 0xFF, 0xFF, 0x40, 0, 0, 0x11, 0, 0, 0, 0];
    cnp.extend_from_slice(&[0; 16]);
    let cnp = rebuild(&fr[1], &cnp);
    let p = d.join("print.pcap");
    write_pcap(&p, &[fr[0].clone(), cnp], None, 65535);
    let (code, out, _) = run_check(&["--verbose"], &p);
    assert_eq!(code, 1);
    assert!(out.contains(&want), "{want} in {out}");
    let c = &wire;
    assert!(out.contains(&format!("icrc=0x{:02x}{:02x}{:02x}{:02x} (BAD)", c[0], c[1], c[2], c[3])), "{out}");
    assert!(out.contains(" CNP qp=0x000011") && out.contains("(CNP)"), "{out}");
    assert!(!out.contains("CNP CNP"), "{out}");
    // A record cut in the middle of frame 3: Wireshark calls it frame 3.
    let whole = std::fs::read(golden("rc_send_only.pcap")).unwrap();
    let first3: usize = 24 + frames(&golden("rc_send_only.pcap"))[..2].iter().map(|f| 16 + f.len()).sum::<usize>();
    let t = d.join("cut.pcap");
    std::fs::write(&t, &whole[..first3 + 20]).unwrap();
    let (code, _, err) = run_check(&[], &t);
    assert_eq!(code, 1);
    assert!(err.contains("corrupt at frame 3 (2 frames read before it)"), "{err}");
}

// ------------------------------------------------------------------ 9: rewritten source port

/// 9: a capture point that rewrote every UDP source port to 4791: every ICRC fails, and each
/// says which source port would make it verify. Before: only "ICRC mismatch".
#[test]
fn a_rewritten_udp_source_port_is_named() {
    let d = tmpdir("sport");
    let mut fr = frames(&golden("rc_send_only.pcap"));
    let orig = u16::from_be_bytes([fr[0][UDP], fr[0][UDP + 1]]);
    for f in fr.iter_mut() {
        f[UDP..UDP + 2].copy_from_slice(&4791u16.to_be_bytes());
    }
    let p = d.join("sport.pcap");
    write_pcap(&p, &fr, None, 65535);
    let (code, out, _) = run_check(&[], &p);
    assert_eq!(code, 1);
    let hint = format!("[hint: ICRC verifies with UDP source port {orig} instead of 4791");
    assert_eq!(count(&out, &hint), 40, "{out}");
    assert!(out.contains("40 whose ICRC verifies with another UDP source port"), "{out}");
    // A packet that is merely damaged gets no such hint.
    let mut dmg = frames(&golden("rc_send_only.pcap"));
    dmg[0][BTH + 20] ^= 1;
    write_pcap(&p, &dmg, None, 65535);
    let (_, out, _) = run_check(&[], &p);
    assert!(!out.contains("hint:"), "{out}");
}

/// 1: no capture Wireshark opens is rejected whole: every rxe capture through editcap with
/// snap lengths from the shortest useful to none, as pcap and as pcapng.
#[test]
fn editcap_outputs_of_every_golden_capture_are_read_whole() {
    let d = tmpdir("editcap");
    let mut n = 0;
    for e in std::fs::read_dir(golden("")).unwrap() {
        let src = e.unwrap().path();
        if src.extension().is_none_or(|x| x != "pcap") {
            continue;
        }
        for (snap, fmt) in [("60", "pcap"), ("96", "pcapng"), ("200", "pcap"), ("65535", "pcapng")] {
            let out = d.join(format!("{}-{snap}.{fmt}", src.file_stem().unwrap().to_string_lossy()));
            let st = Command::new("editcap").args(["-s", snap, "-F", fmt]).arg(&src).arg(&out).status().unwrap();
            assert!(st.success());
            let (code, o, err) = run_check(&["--quiet"], &out);
            assert_eq!(code, 0, "{}: {o}{err}", out.display());
            assert!(!o.contains("malformed frame:") && !err.contains("corrupt"), "{}: {o}{err}", out.display());
            n += 1;
        }
    }
    assert_eq!(n, 15 * 4);
}

/// tests/captures/issue39: the first 10 frames of the encapsulated and RoCEv1 captures the
/// tests above build (cut with `editcap -r FILE OUT 1-10`), for users to try: every packet
/// passes with a verified ICRC.
#[test]
fn committed_encapsulated_and_rocev1_captures_verify_every_icrc() {
    let dir = golden("issue39");
    let mut files = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "pcapng") {
            continue;
        }
        let (code, out, err) = run_check(&["--json"], &p);
        assert_eq!(code, 0, "{}: {out}{err}", p.display());
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() >= 10, "{}: {out}", p.display());
        assert!(lines.iter().all(|l| l.contains("\"icrc\":\"ok\"") && l.contains("\"ok\":true")), "{out}");
        files += 1;
    }
    assert_eq!(files, 6, "vxlan, gre, erspan2, erspan3, rocev1, rocev1_mixed");
}

/// No capture Wireshark opens is rejected whole: a pcapng whose second interface has a link
/// type `check` does not read (as a capture of several interfaces may) is checked, that
/// interface's frames counted as other frames. Before: "unsupported link type", exit 1.
#[test]
fn a_pcapng_interface_of_another_link_type_does_not_reject_the_file() {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    let d = tmpdir("mixedlink");
    let fr = frames(&golden("rc_send_only.pcap"));
    let ng = d.join("two-interfaces.pcapng");
    let mut w = PcapNgWriter::new(File::create(&ng).unwrap()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 0xFFFF)).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::USER0, 0xFFFF)).unwrap();
    for (i, f) in fr.iter().enumerate() {
        for iface in [0, 1] {
            let b = EnhancedPacketBlock {
                interface_id: iface,
                timestamp: std::time::Duration::from_micros(i as u64),
                original_len: f.len() as u32,
                data: Cow::Borrowed(f),
                options: vec![],
            };
            w.write_pcapng_block(b).unwrap();
        }
    }
    drop(w);
    let (code, out, err) = run_check(&["--quiet"], &ng);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("40 RoCEv2 packets: 40 ok, 0 bad") && out.contains("40 other frames skipped"), "{out}");
}
