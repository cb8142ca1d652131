//! urxe's drop-in librdmacm.so.1 runs Debian's unmodified rdmacm-utils and perftest `-R`, and
//! our own rdma_cm C program (tests/rdmacm_c/msg_mr.c, built with ASan/UBSan), server and
//! client in two processes on one host against `LD_LIBRARY_PATH=target/urxe/lib`.
//!
//! Most pairs run the server with `URXE_ADDR=127.31.0.2` and the client with
//! `URXE_ADDR=127.31.0.3` (two hosts' worth of addresses); one runs rping with no setting at
//! all, both on the user's shared zero-config address. The server is given
//! [`SETTLE`] to listen (an rdma_cm listener shows nowhere a test could watch); a client that
//! came too early is refused with REJ 8 ("no listener") and run again (see `pair`).
//!
//! ```sh
//! cargo test --release --test rdmacm_apps -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;
mod urxe_bin;

use harness::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

const SERVER_ADDR: &str = "127.31.0.2";
const CLIENT_ADDR: &str = "127.31.0.3";
const SETTLE: Duration = Duration::from_millis(2000);
const TIMEOUT: Duration = Duration::from_secs(60);

fn cmd(program: impl AsRef<std::path::Path>, addr: &str, args: &[&str]) -> Command {
    ensure_rdmacm();
    let mut c = urxe_cmd(program);
    c.env("URXE_ADDR", addr).args(args);
    c
}

/// Server, then (after [`SETTLE`]) client; returns both outputs. The server may be one that
/// never exits on its own (`server_exits = false`): it is then stopped at the client's end.
///
/// A client refused with REJ 8 met a server that was not listening yet — at start, or between
/// perftest's two listens: its client opens the test connection right after the parameter
/// exchange on the first one, and on a loaded machine the server may not have re-listened yet
/// (the kernel's CM refuses the same way; its slower address resolution hides the race). Then
/// the whole pair is run again, at most [`ATTEMPTS`] times. Every attempt is a whole, checked
/// run.
fn pair(server: &str, sargs: &[&str], client: &str, cargs: &[&str], server_exits: bool) -> (Output, Output) {
    let _serial = heavy_lock();
    let (server, client) = (resolve(server), resolve(client));
    for attempt in 1..=ATTEMPTS {
        let mut srv = Server::start(cmd(&server, SERVER_ADDR, sargs));
        thread::sleep(SETTLE);
        let c = run_bounded(&mut cmd(&client, CLIENT_ADDR, cargs), TIMEOUT).expect("start client");
        let all = c.all();
        let refused =
            ["REJECTED, error 8", "REJECTED; error: 8", "Unexpected CM event bl blka 8", "Connection refused"]
                .iter()
                .any(|m| all.contains(m));
        if refused && !c.success() && attempt < ATTEMPTS {
            eprintln!("attempt {attempt}: the client was refused (no listener yet); running the pair again\n{c}");
            srv.stop();
            continue;
        }
        let s = if server_exits && c.success() { srv.wait(TIMEOUT) } else { srv.wait(Duration::from_secs(5)) };
        eprintln!("{s}\n{c}");
        assert!(c.success(), "client failed\n{s}\n{c}");
        if server_exits {
            assert!(s.success(), "server failed\n{s}\n{c}");
        }
        return (s, c);
    }
    unreachable!("the last attempt returns or fails");
}

const ATTEMPTS: u32 = 5;

/// A server process whose output goes to files, so it can be stopped at any point.
struct Server {
    child: std::process::Child,
    out: PathBuf,
    err: PathBuf,
    what: String,
}

impl Server {
    fn start(mut c: Command) -> Server {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir();
        let (out, err) = (
            dir.join(format!("urxe-rdmacm-{}-{n}.out", std::process::id())),
            dir.join(format!("urxe-rdmacm-{}-{n}.err", std::process::id())),
        );
        let what = format!("{:?}", c);
        c.stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).expect("server stdout file"))
            .stderr(std::fs::File::create(&err).expect("server stderr file"));
        Server { child: c.spawn().expect("start server"), out, err, what }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits at most `limit` for the server to exit (then stops it) and collects its output.
    fn wait(mut self, limit: Duration) -> Output {
        let deadline = std::time::Instant::now() + limit;
        let mut status = None;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                status = Some(st);
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let timed_out = status.is_none();
        if timed_out {
            self.stop();
        }
        Output {
            what: self.what.clone(),
            status,
            timed_out,
            stdout: std::fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.err).unwrap_or_default(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
    }
}

fn resolve(p: &str) -> String {
    if p.starts_with('/') {
        p.to_string()
    } else {
        tool(p).display().to_string()
    }
}

#[test]
fn rping_100_verified_pings() {
    let (s, c) = pair(
        "rping",
        &["-s", "-v", "-V", "-C", "100", "-p", "7301"],
        "rping",
        &["-c", "-a", SERVER_ADDR, "-v", "-V", "-C", "100", "-p", "7301"],
        true,
    );
    assert_eq!(c.stdout.matches("ping data: rdma-ping-").count(), 100, "{c}");
    assert!(c.stdout.contains("rdma-ping-99: "), "{c}");
    assert!(s.stdout.contains("server ping data: rdma-ping-99"), "{s}");
}

#[test]
fn ucmatose_connects_transfers_and_disconnects() {
    let (s, c) = pair("ucmatose", &["-p", "7302"], "ucmatose", &["-s", SERVER_ADDR, "-p", "7302"], true);
    for o in [&s, &c] {
        assert_contains(o, "test complete");
        assert_contains(o, "return status 0");
    }
    assert_contains(&s, "disconnected");
}

#[test]
fn udaddy_resolves_the_service_by_sidr_and_exchanges_datagrams() {
    // udaddy's -p is the port space; it always uses port 7174.
    let (s, c) = pair("udaddy", &[], "udaddy", &["-s", SERVER_ADDR], true);
    for o in [&s, &c] {
        assert_contains(o, "data transfers complete");
        assert_contains(o, "return status 0");
    }
}

#[test]
fn rdma_server_and_client_synchronous_endpoints() {
    let (s, c) = pair("rdma_server", &["-p", "7304"], "rdma_client", &["-s", SERVER_ADDR, "-p", "7304"], true);
    assert_contains(&s, "rdma_server: end 0");
    assert_contains(&c, "rdma_client: end 0");
}

#[test]
fn rdma_xserver_and_xclient_rc() {
    let (s, c) = pair("rdma_xserver", &["-p", "7305"], "rdma_xclient", &["-s", SERVER_ADDR, "-p", "7305"], true);
    assert_contains(&s, "rdma_xserver: end 0");
    assert_contains(&c, "rdma_xclient: end 0");
}

#[test]
fn cmtime_client_times_every_step() {
    // cmtime's server serves until it is stopped.
    let (_, c) = pair("cmtime", &["-p", "7306"], "cmtime", &["-s", SERVER_ADDR, "-p", "7306", "-c", "20"], false);
    for step in ["resolve addr", "resolve route", "connect", "disconnect", "destroy"] {
        assert_contains(&c, step);
    }
}

fn perftest(name: &str, port: &str, extra: &[&str]) {
    let mut args = vec!["-R", "-F", "-p", port];
    args.extend_from_slice(extra);
    let mut cargs = args.clone();
    cargs.push(SERVER_ADDR);
    let (s, c) = pair(name, &args, name, &cargs, true);
    for o in [&s, &c] {
        assert_contains(o, "rdma_cm QPs\t : ON");
        // The peer's GID is its IPv4-mapped address.
        assert_contains(o, "GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:31:00:0");
    }
}

#[test]
fn perftest_send_bw_over_rdma_cm() {
    perftest("ib_send_bw", "7311", &["-n", "500"]);
}

#[test]
fn perftest_read_lat_over_rdma_cm() {
    perftest("ib_read_lat", "7312", &["-n", "200"]);
}

#[test]
fn perftest_write_bw_and_read_bw_over_rdma_cm() {
    perftest("ib_write_bw", "7313", &["-n", "500"]);
    perftest("ib_read_bw", "7314", &["-n", "500"]);
}

#[test]
fn perftest_send_lat_and_write_lat_over_rdma_cm() {
    perftest("ib_send_lat", "7315", &["-n", "200"]);
    perftest("ib_write_lat", "7316", &["-n", "200"]);
}

fn msg_mr() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let out_dir = std::env::temp_dir().join(format!("urxe-rdmacm-{}", std::process::id()));
        std::fs::create_dir_all(&out_dir).map_err(|e| e.to_string())?;
        let bin = out_dir.join("msg_mr");
        let mut gcc = Command::new("gcc");
        gcc.args(["-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-g", "-o"])
            .arg(&bin)
            .arg(repo_root().join("tests/rdmacm_c/msg_mr.c"))
            .args(["-lrdmacm", "-libverbs"]);
        let out = run_bounded(&mut gcc, Duration::from_secs(120)).map_err(|e| e.to_string())?;
        if out.success() {
            Ok(bin)
        } else {
            Err(format!("gcc failed for tests/rdmacm_c/msg_mr.c:\n{out}"))
        }
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn msg_mr_write_read_verified_byte_for_byte_under_asan() {
    let bin = msg_mr().display().to_string();
    let (s, c) = pair(&bin, &["-s", "7321"], &bin, &["-c", SERVER_ADDR, "7321"], true);
    assert_contains(&s, "server: READ of 65536 bytes verified, MSG_DONE sent");
    assert_contains(&c, "client: WRITE of 65536 bytes verified, disconnected");
    for o in [&s, &c] {
        assert_lacks(o, "AddressSanitizer");
        assert_lacks(o, "runtime error");
    }
}

/// An rsockets pair (rstream or riostream, Debian's) with the same test options on both
/// sides; each side prints its one result line ("custom", the -S/-C/-I test).
fn rsockets_pair(prog: &str, port: &str, opts: &[&str]) {
    let mut args = vec!["-p", port];
    args.extend_from_slice(opts);
    let mut cargs = vec!["-s", SERVER_ADDR];
    cargs.extend_from_slice(&args);
    let (s, c) = pair(prog, &args, prog, &cargs, true);
    for o in [&s, &c] {
        assert_contains(o, "custom");
        assert_lacks(o, "failed");
    }
}

#[test]
fn rstream_blocking_ping_pong_and_stream_verified() {
    // -T b: blocking with MSG_WAITALL; -T v: every byte checked against the sender's pattern.
    rsockets_pair("rstream", "7321", &["-T", "b", "-T", "v", "-S", "64", "-C", "1", "-I", "1000"]);
    // 1 MB transfers through the 1 MiB receive ring: wraps, partial grants, SGL updates.
    rsockets_pair("rstream", "7322", &["-T", "b", "-T", "v", "-S", "1000000", "-C", "40"]);
}

#[test]
fn rstream_non_blocking_and_async_verified() {
    // -T n: MSG_DONTWAIT, retried on EAGAIN; -T a: rpoll before every call (also the
    // non-blocking connect: rconnect EINPROGRESS, rpoll POLLOUT, SO_ERROR).
    rsockets_pair("rstream", "7323", &["-T", "n", "-T", "v", "-S", "4096", "-C", "2000"]);
    rsockets_pair("rstream", "7324", &["-T", "a", "-T", "n", "-T", "v", "-S", "100000", "-C", "100"]);
    rsockets_pair("rstream", "7325", &["-T", "a", "-T", "v", "-S", "64", "-C", "1", "-I", "500"]);
}

#[test]
fn riostream_riomap_and_riowrite_blocking_and_non_blocking() {
    // The server riomaps its buffer; the client riowrites into it and rsends a byte after
    // each transfer, which the server waits for.
    rsockets_pair("riostream", "7326", &["-T", "b", "-S", "1000000", "-C", "40"]);
    rsockets_pair("riostream", "7327", &["-T", "n", "-S", "4096", "-C", "1", "-I", "1000"]);
    rsockets_pair("riostream", "7328", &["-T", "a", "-S", "65536", "-C", "200"]);
}

#[test]
fn rcopy_copies_a_file_byte_for_byte() {
    // rcopy (rsockets, blocking): the client sends the file's name, size and mode, then its
    // 24 MiB of contents; the server writes them where it is told and answers; the server
    // then waits for the next client (it is stopped at the client's end).
    let dir = std::env::temp_dir().join(format!("urxe-rcopy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("src.bin"), dir.join("dst.bin"));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..24usize << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(&src, &data).unwrap();
    let target = format!("{SERVER_ADDR}:{}", dst.display());
    let (s, c) = pair("rcopy", &["-p", "7329"], "rcopy", &[src.to_str().unwrap(), &target, "-p", "7329"], false);
    assert_contains(&c, "transferring...closing...done");
    assert_contains(&s, &format!("client: {CLIENT_ADDR}"));
    let got = std::fs::read(&dst).expect("the server wrote the file");
    assert_eq!(got.len(), data.len(), "size of the copy");
    assert!(got == data, "the copy differs from the original");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_listener_is_rejected_with_reason_8() {
    // The client connects to its own address, where nothing listens on the port: its own
    // passive CM answers REJ "invalid service ID" (8) at once, as the kernel's does.
    let _serial = heavy_lock();
    let c =
        run_bounded(&mut cmd(tool("rping"), CLIENT_ADDR, &["-c", "-a", CLIENT_ADDR, "-C", "1", "-p", "7332"]), TIMEOUT)
            .unwrap();
    assert!(!c.success() && c.signal().is_none() && !c.timed_out, "rping must fail cleanly at once\n{c}");
    assert_contains(&c, "RDMA_CM_EVENT_REJECTED, error 8");
}

#[test]
fn rping_cm_exchange_and_flows_pass_urxe_check() {
    // Both processes capture what their device sends and receives (URXE_PCAP); `urxe check`
    // decodes every CM MAD of the connection and its teardown and finds every packet valid.
    let _serial = heavy_lock();
    let dir = std::env::temp_dir().join(format!("urxe-rdmacm-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (sp, cp) = (dir.join("server.pcap"), dir.join("client.pcap"));
    let mut s = cmd(tool("rping"), SERVER_ADDR, &["-s", "-C", "5", "-p", "7341"]);
    s.env("URXE_PCAP", &sp);
    let srv = Server::start(s);
    thread::sleep(SETTLE);
    let mut c = cmd(tool("rping"), CLIENT_ADDR, &["-c", "-a", SERVER_ADDR, "-C", "5", "-V", "-p", "7341"]);
    c.env("URXE_PCAP", &cp);
    let c = run_bounded(&mut c, TIMEOUT).unwrap();
    let s = srv.wait(TIMEOUT);
    assert!(c.success() && s.success(), "{s}\n{c}");
    for pcap in [&sp, &cp] {
        let mut check = Command::new(urxe_bin::urxe());
        check.arg("check").arg(pcap);
        let out = run_bounded(&mut check, Duration::from_secs(60)).unwrap();
        assert!(out.success(), "urxe check failed on {}\n{out}", pcap.display());
        assert_contains(&out, ": PASS: ");
        assert_contains(&out, "0 bad");
        for msg in ["CM REQ", "CM MRA", "CM REP", "CM RTU", "CM DREQ", "55410 > "] {
            assert_contains(&out, msg);
        }
        // The client exits right after its DREQ; the server's DREP is in the server's capture.
        if pcap == &sp {
            assert_contains(&out, "CM DREP");
        }
        assert_contains(&out, "RC RDMA_READ_REQUEST");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With no setting at all, every process of a user shares one loopback address (the
/// zero-config group): `rping -c -a 127.0.0.1` reaches `rping -s` there. A third process holds
/// the group's first slot, so the REQ reaches the server only through the group's listener
/// table (CM steering by service ID), and the REP comes back by the client's comm ID.
#[test]
fn rping_with_no_settings_on_the_shared_loopback_address() {
    ensure_rdmacm();
    let _serial = heavy_lock();
    let mut holder = Server::start({
        let mut c = urxe_cmd(tool("ibv_rc_pingpong"));
        c.args(["-g", "1", "-p", "18791"]);
        c
    });
    thread::sleep(Duration::from_millis(500));
    let rping = tool("rping");
    for attempt in 1..=ATTEMPTS {
        let mut srv = Server::start({
            let mut c = urxe_cmd(&rping);
            c.args(["-s", "-v", "-V", "-C", "100", "-p", "7311"]);
            c
        });
        thread::sleep(SETTLE);
        let mut cli = urxe_cmd(&rping);
        cli.args(["-c", "-a", "127.0.0.1", "-v", "-V", "-C", "100", "-p", "7311"]);
        let c = run_bounded(&mut cli, TIMEOUT).expect("start client");
        if !c.success() && c.all().contains("error 8") && attempt < ATTEMPTS {
            srv.stop();
            continue;
        }
        let s = srv.wait(TIMEOUT);
        holder.stop();
        assert!(c.success() && s.success(), "rping with no settings failed\n{s}\n{c}");
        assert_eq!(c.stdout.matches("ping data: rdma-ping-").count(), 100, "{c}");
        assert!(s.stdout.contains("server ping data: rdma-ping-99"), "{s}");
        return;
    }
}
