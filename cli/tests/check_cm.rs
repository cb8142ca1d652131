//! `urxe check` reads the CM MADs on QP1 (message, comm IDs, service ID, QPN, starting PSN,
//! rdma_cm header), flags malformed ones, and `--flows` ties each CM connection to the RC flows
//! it opened.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use urxe::wire::icrc::icrc_from_headers;
use urxe_cli::check::{check_file, Format, Options};

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/captures/rdma_cm.pcap")
}

fn run(path: &Path, format: Format, flows: bool) -> (urxe_cli::check::Totals, String) {
    let mut out = Vec::new();
    let t = check_file(path, Options { format, flows, ..Default::default() }, &mut out).unwrap();
    (t, String::from_utf8(out).unwrap())
}

#[test]
fn kernel_cm_exchange_is_decoded_and_tied_to_its_rc_flows() {
    let (t, out) = run(&golden(), Format::Summary, true);
    assert!(t.passed(), "{out}");
    assert!(out.contains("CM REQ lcid=0x35303a54 rcid=0x00000000 sid=0x0000000001061c06 cmqpn=0x000011 spsn=0x155a56 cma=10.77.0.3:34582>10.77.0.2"), "{out}");
    assert!(out.contains("CM REP lcid=0xe5bbed21 rcid=0x35303a54 cmqpn=0x000011 spsn=0xd6a275"), "{out}");
    for m in ["CM RTU", "CM DREQ", "CM DREP"] {
        assert!(out.contains(m), "{m} missing:\n{out}");
    }
    assert!(
        out.contains("cid=0x35303a54 sid=0x1061c06 qpn 0x11/0x11 spsn 0x155a56/0xd6a275 : REQ REP RTU DREQ DREP"),
        "{out}"
    );
    assert_eq!(
        out.matches("first request PSN as announced").count(),
        2,
        "both RC directions tie to the REQ/REP:\n{out}"
    );

    let (_, json) = run(&golden(), Format::Json, false);
    let first = json.lines().next().unwrap();
    assert!(first.contains("\"cm\":{\"msg\":\"REQ\""), "{first}");
    assert!(first.contains("\"starting_psn\":1399382") && first.contains("\"src_port\":34582"), "{first}");
}

/// The Ethernet frames of rdma_cm.pcap.
fn frames() -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(File::open(golden()).unwrap()).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        v.push(p.unwrap().data.into_owned());
    }
    v
}

/// Applies `edit` to the UDP payload of frame `i` (0-based) and re-computes its ICRC, so that
/// only the MAD rule under test is broken; writes a one-frame capture.
fn edited(i: usize, name: &str, edit: impl Fn(&mut [u8])) -> PathBuf {
    let mut f = frames().swap_remove(i);
    let n = f.len();
    edit(&mut f[42..n - 4]);
    let icrc = icrc_from_headers(&f[14..34], &f[34..42], &f[42..n - 4]).unwrap();
    f[n - 4..].copy_from_slice(&icrc.to_le_bytes());
    let dir = std::env::temp_dir().join(format!("urxe-check-cm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.pcap"));
    let hdr = PcapHeader { datalink: DataLink::ETHERNET, ..Default::default() };
    let mut w = PcapWriter::with_header(File::create(&path).unwrap(), hdr).unwrap();
    w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, &f)).unwrap();
    path
}

/// An edit of a GSI packet's UDP payload.
type Edit = Box<dyn Fn(&mut [u8])>;

#[test]
fn malformed_cm_mads_are_flagged() {
    // The UDP payload: BTH 12, DETH 8, then the MAD (class version at MAD byte 2, attribute ID
    // at 16..18, the REQ's private data (CMA header) at MAD byte 24 + 140).
    let cases: [(&str, Edit, &str); 4] = [
        ("class-version", Box::new(|p: &mut [u8]| p[20 + 2] = 3), "malformed CM MAD: not a CM MAD"),
        (
            "attribute",
            Box::new(|p: &mut [u8]| p[20 + 16..20 + 18].copy_from_slice(&0x0033u16.to_be_bytes())),
            "malformed CM MAD: CM attribute 0x0033",
        ),
        (
            "qkey",
            Box::new(|p: &mut [u8]| p[12..16].copy_from_slice(&0x1234_5678u32.to_be_bytes())),
            "GSI Q_Key 0x12345678",
        ),
        ("cma-version", Box::new(|p: &mut [u8]| p[20 + 24 + 140] = 1), "rdma_cm private data: CMA header version 1"),
    ];
    for (name, edit, want) in cases {
        let path = edited(0, name, edit);
        let (t, out) = run(&path, Format::Summary, false);
        assert!(!t.passed(), "{name}: a broken MAD must fail the capture\n{out}");
        assert_eq!((t.rocev2, t.bad, t.icrc_bad), (1, 1, 0), "{name}: {out}");
        assert!(out.contains(want), "{name}: expected {want:?} in\n{out}");
    }
    // The unedited frame (ICRC re-computed the same way) passes: the edits above are the cause.
    let (t, out) = run(&edited(0, "unchanged", |_| {}), Format::Summary, false);
    assert!(t.passed(), "{out}");
}
