//! `urxe check` on XRC traffic: the server's own capture (URXE_PCAP) of two urxe processes
//! running Debian's `ibv_xsrq_pingpong -n 3 -s 3000 -m 1024` — XRC SEND FIRST/MIDDLE/LAST with
//! their XRCETH and the XRC ACKs, both directions. Every packet passes (ICRC, header rules),
//! the XRCETH is decoded in every view, and a flipped bit of an XRCETH fails the ICRC.

use std::path::{Path, PathBuf};

use urxe_cli::check::{check_file, Format, Options};

fn capture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/urxe/xrc_pingpong.pcapng")
}

fn run(path: &Path, format: Format, flows: bool) -> (urxe_cli::check::Totals, String) {
    let mut out = Vec::new();
    let t = check_file(path, Options { format, flows, ..Default::default() }, &mut out).unwrap();
    (t, String::from_utf8(out).unwrap())
}

#[test]
fn xrc_pingpong_capture_passes_with_xrceth_on_every_request() {
    let (t, text) = run(&capture(), Format::Summary, false);
    assert!(t.passed(), "{}\n{text}", t.line());
    assert_eq!((t.rocev2, t.ok, t.icrc_bad, t.header_errors), (24, 24, 0, 0), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" XRC ")).collect();
    assert_eq!(lines.len(), 24, "{text}");
    let requests = lines.iter().filter(|l| l.contains(" SEND_")).collect::<Vec<_>>();
    assert_eq!(requests.len(), 18, "{text}");
    assert!(requests.iter().all(|l| l.contains("xrcsrq=0x1")), "{text}");
    let acks = lines.iter().filter(|l| l.contains("ACKNOWLEDGE")).collect::<Vec<_>>();
    assert_eq!(acks.len(), 6, "{text}");
    assert!(acks.iter().all(|l| !l.contains("xrcsrq")), "an XRC response carries no XRCETH\n{text}");
}

#[test]
fn xrceth_in_the_verbose_json_and_flow_views() {
    let (_, verbose) = run(&capture(), Format::Verbose, false);
    assert_eq!(verbose.matches("    XRCETH: xrcsrq=0x000001").count(), 18, "{verbose}");
    let (_, json) = run(&capture(), Format::Json, false);
    assert_eq!(json.matches("\"xrc_srqn\":1").count(), 18, "{json}");
    let (t, flows) = run(&capture(), Format::Quiet, true);
    assert_eq!((t.gaps, t.retransmissions, t.naks), (0, 0, 0));
    // Two request flows of 9 SENDs each, two response flows of 3 ACKs each.
    let rows: Vec<&str> = flows.lines().filter(|l| l.contains(" XRC ")).collect();
    assert_eq!(rows.len(), 4, "{flows}");
}

#[test]
fn a_flipped_xrceth_bit_fails_the_icrc() {
    let mut bytes = std::fs::read(capture()).unwrap();
    // The first XRC SEND FIRST (opcode 0xA0, P_Key 0xFFFF): flip the low bit of its XRC SRQ
    // number (BTH is 12 bytes; the XRCETH's last byte is at +15).
    let at = bytes.windows(4).position(|w| w == [0xA0, 0x00, 0xFF, 0xFF]).expect("an XRC SEND FIRST");
    assert_eq!(bytes[at + 15], 0x01);
    bytes[at + 15] ^= 0x01;
    let dir = std::env::temp_dir().join(format!("urxe-check-xrc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("xrc-flipped.pcapng");
    std::fs::write(&bad, &bytes).unwrap();
    let (t, text) = run(&bad, Format::Summary, false);
    let _ = std::fs::remove_dir_all(&dir);
    // The frame no longer verifies as one packet, so check also tries it as a GSO train (every
    // cut fails too): the first piece is the SEND FIRST with its altered XRCETH, ICRC bad.
    assert!(!t.passed(), "{}\n{text}", t.line());
    assert!(t.icrc_bad >= 1 && t.ok == 23, "{}\n{text}", t.line());
    assert!(text.contains("XRC SEND_FIRST qp=0x012811 psn=0xabffc5") && text.contains("xrcsrq=0x0 icrc=BAD"), "{text}");
}
