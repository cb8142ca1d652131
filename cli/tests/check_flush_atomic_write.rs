//! `urxe check` on ATOMIC WRITE and FLUSH (IBTA 1.5): a capture of a well-formed exchange
//! passes with every field decoded, and each rule the responder enforces is reported as a
//! problem naming it (the file then fails).

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use urxe::wire::aeth::{AethRepr, CreditCode, Syndrome};
use urxe::wire::bth::BthRepr;
use urxe::wire::feth::FethRepr;
use urxe::wire::icrc::IpFields;
use urxe::wire::opcode::op;
use urxe::wire::packet::finish;
use urxe::wire::reth::RethRepr;
use urxe::wire::{Headers, Msn, Psn};
use urxe_cli::check::capture::{fold, ones_complement_sum};
use urxe_cli::check::{check_file, Format, Options};

const A: Ipv4Addr = Ipv4Addr::new(127, 46, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 46, 0, 2);

/// A raw-IPv4 frame (IP ID 0, DF, UDP checksum 0, as urxe sends) carrying `h` + `payload`.
fn frame(src: Ipv4Addr, dst: Ipv4Addr, h: &Headers, payload: &[u8]) -> Vec<u8> {
    let mut roce = vec![0u8; 2048];
    let hl = h.emit(&mut roce).unwrap();
    roce[hl..hl + payload.len()].copy_from_slice(payload);
    let n = finish(&mut roce, hl, payload.len(), &IpFields::v4_df(src, dst), 0xC123, 4791).unwrap();
    roce.truncate(n);
    let total = 20 + 8 + n;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let sum = fold(ones_complement_sum(0, &ip));
    ip[10..12].copy_from_slice(&(!sum).to_be_bytes());
    let mut f = ip;
    f.extend_from_slice(&0xC123u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&((8 + n) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&roce);
    f
}

fn write(name: &str, frames: &[Vec<u8>]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("urxe-check-awf-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join(name);
    let hdr = PcapHeader { datalink: DataLink::IPV4, ..Default::default() };
    let mut w = PcapWriter::with_header(File::create(&path).unwrap(), hdr).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(&PcapPacket::new(Duration::from_micros(i as u64), f.len() as u32, f)).unwrap();
    }
    path
}

fn bth(opcode: u8, dest_qp: u32, psn: u32, ack_req: bool) -> BthRepr {
    BthRepr { opcode, dest_qp, psn: Psn::new(psn), ack_req, ..BthRepr::default() }
}

fn atomic_write(va: u64, dma_len: u32, psn: u32) -> Headers {
    Headers {
        bth: bth(op::RC_ATOMIC_WRITE, 0x12, psn, true),
        reth: Some(RethRepr { va, rkey: 0x1234, dma_len }),
        ..Headers::default()
    }
}

fn flush(placement: u8, level: u8, psn: u32) -> Headers {
    Headers {
        bth: bth(op::RC_FLUSH, 0x12, psn, true),
        feth: Some(FethRepr { placement, level }),
        reth: Some(RethRepr { va: 0x7000, rkey: 0x1234, dma_len: 4096 }),
        ..Headers::default()
    }
}

fn read_response_only(psn: u32, msn: u32) -> Headers {
    Headers {
        bth: bth(op::RC_RDMA_READ_RESPONSE_ONLY, 0x11, psn, false),
        aeth: Some(AethRepr { syndrome: Syndrome::Ack { credits: CreditCode::UNLIMITED }, msn: Msn::new(msn) }),
        ..Headers::default()
    }
}

fn run(path: &Path, format: Format) -> (urxe_cli::check::Totals, String) {
    let mut out = Vec::new();
    let t =
        check_file(path, Options { format, flows: format == Format::Summary, ..Default::default() }, &mut out).unwrap();
    (t, String::from_utf8(out).unwrap())
}

#[test]
fn a_good_exchange_passes_with_every_field_decoded() {
    let frames = vec![
        frame(A, B, &atomic_write(0x6008, 8, 10), &0x1122_3344_5566_7788u64.to_be_bytes()),
        frame(B, A, &read_response_only(10, 1), &[]),
        frame(A, B, &flush(1, 0, 11), &[]),
        frame(B, A, &read_response_only(11, 2), &[]),
        frame(A, B, &flush(1, 1, 12), &[]),
        frame(B, A, &read_response_only(12, 3), &[]),
    ];
    let f = write("good.pcap", &frames);
    let (t, out) = run(&f, Format::Summary);
    assert!(t.passed(), "{out}");
    assert_eq!((t.rocev2, t.ok), (6, 6));
    assert!(out.contains("RC ATOMIC_WRITE qp=0x000012 psn=0x00000a len=8 A va=0x6008 rkey=0x1234 dlen=8"), "{out}");
    assert!(out.contains("RC FLUSH qp=0x000012 psn=0x00000b len=0 A placement=global level=range va=0x7000"), "{out}");
    assert!(out.contains("placement=global level=mr"), "{out}");
    assert!(out.contains("RC RDMA_READ_RESPONSE_ONLY qp=0x000011 psn=0x00000a len=0 ACK msn=1"), "{out}");
    let (_, out) = run(&f, Format::Verbose);
    assert!(out.contains("    FETH: placement=global level=range (0x1/0)"), "{out}");
    let (_, out) = run(&f, Format::Json);
    assert!(out.contains("\"feth\":{\"placement\":1,\"level\":1}"), "{out}");
}

#[test]
fn each_broken_rule_is_named() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (frame(A, B, &atomic_write(0x6004, 8, 1), &[0; 8]), "ATOMIC WRITE VA is not 8-byte aligned"),
        (frame(A, B, &atomic_write(0x6008, 16, 1), &[0; 8]), "ATOMIC WRITE RETH DMA length is not 8"),
        (frame(A, B, &atomic_write(0x6008, 8, 1), &[0; 4]), "ATOMIC WRITE payload is not 8 bytes"),
        (frame(A, B, &flush(0, 0, 1), &[]), "FLUSH FETH placement type undefined"),
        (frame(A, B, &flush(4, 0, 1), &[]), "FLUSH FETH placement type undefined"),
        (frame(A, B, &flush(2, 2, 1), &[]), "FLUSH FETH selectivity level reserved"),
    ];
    for (i, (fr, want)) in cases.into_iter().enumerate() {
        let f = write(&format!("bad{i}.pcap"), &[fr]);
        let (t, out) = run(&f, Format::Summary);
        assert!(!t.passed(), "{want}: {out}");
        assert_eq!(t.bad, 1, "{want}");
        assert!(out.contains(&format!("[{want}]")), "{want}: {out}");
    }
}
