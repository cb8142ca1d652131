//! Issue #39 case 10: two processes given one `URXE_PCAP` file (a server and its client, an MPI
//! job's ranks) must never corrupt it. The first process to open it writes it; the second
//! finds it locked and writes `<stem>.<pid>.<ext>` beside it. Both files are whole captures.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use urxe_cli::check::{check_file, Format, Options};

mod tap_support;
use tap_support::{urxe_lib_dir, wait_bounded};

#[test]
fn two_processes_with_one_urxe_pcap_never_corrupt_it() {
    let lib = urxe_lib_dir();
    let d = std::env::temp_dir().join(format!("urxe-check-tap-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let cap = d.join("cap.pcapng");
    let pid = std::process::id();
    let net = format!("127.{}.{}", 100 + pid % 100, (pid / 100) % 250 + 1);
    let (a, b) = (format!("{net}.201"), format!("{net}.202"));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let pp = ["-d", "urxe0", "-g", "1", "-p", &port.to_string(), "-n", "50", "-s", "3000"];
    let mut server = Command::new("ibv_rc_pingpong")
        .args(pp)
        .env("LD_LIBRARY_PATH", &lib)
        .env("URXE_ADDR", &a)
        .env("URXE_PCAP", &cap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ibv_rc_pingpong (Debian package ibverbs-utils)");
    let listening =
        || std::fs::read_to_string("/proc/net/tcp").unwrap().contains(&format!(":{port:04X} 00000000:0000 0A"));
    let end = Instant::now() + Duration::from_secs(10);
    while !listening() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = Command::new("ibv_rc_pingpong")
        .args(pp)
        .arg("127.0.0.1")
        .env("LD_LIBRARY_PATH", &lib)
        .env("URXE_ADDR", &b)
        .env("URXE_PCAP", &cap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client_pid = client.id();
    let mut client = client;
    let client_ok = wait_bounded(&mut client, Duration::from_secs(30)) == Some(true);
    let server_ok = wait_bounded(&mut server, Duration::from_secs(10)) == Some(true);
    let mut client_err = String::new();
    std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut client_err).unwrap();
    assert!(client_ok && server_ok, "pingpong failed: client {client_ok}, server {server_ok}\n{client_err}");

    // The named file is whole (before: "Block: initial_length != trailer_length" part-way).
    let own = d.join(format!("cap.{client_pid}.pcapng"));
    let mut packets = Vec::new();
    for f in [&cap, &own] {
        let mut out = Vec::new();
        let opts = Options { format: Format::Quiet, ..Default::default() };
        let t = check_file(f, opts, &mut out).unwrap_or_else(|e| {
            panic!("{}: {e}\n{}\nclient: {client_err}", f.display(), String::from_utf8_lossy(&out))
        });
        assert!(t.passed(), "{}: {}\n{}", f.display(), t.line(), String::from_utf8_lossy(&out));
        packets.push(t.rocev2);
    }
    // The server opened the file first; the client wrote its own beside it and said so.
    assert!(client_err.contains("URXE_PCAP=") && client_err.contains(&own.display().to_string()), "{client_err}");
    // Each process records what it sent and received: 50 round trips of 3000-byte messages
    // (3 packets each way at MTU 1024, plus ACKs) leave the same packets in both files.
    assert!(packets[0] >= 300, "{packets:?}");
    assert_eq!(packets[0], packets[1], "both files hold the pair's whole exchange");
    let _ = std::fs::remove_dir_all(&d);
}
