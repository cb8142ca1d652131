//! Issue 37 item 1: 100 k spoofed REQs at a listener that never polls (tests/rdmacm_c/
//! idle_listener.c, backlog 16) and 100 k spoofed SIDR_REQs at Debian's `udaddy` server
//! (which stops reading CM events once it has its one connection), at once, paced at about
//! 20 k MADs a second each. Both stay bounded in RSS and CPU (the backlog holds at most
//! 16 / 1024 requests, the rest are refused), the requests they hold expire when their
//! requesters would have given up (about 68 s: the MRA's 2^16 ms and the path's round trip;
//! SIDR: 65.5 s), `urxe stat` counts all of it, and afterwards a legitimate client connects
//! to the listener, which then finds no stale request queued. A few forged MADs of the other
//! kinds (GET method, UC REQ to the RC listener, SIDR_REQ to it) are counted too.
//!
//! Spoofed MADs are real RoCEv2 packets (UD SEND_ONLY to QP1, GSI Q_Key, valid ICRC) sent from
//! a UDP socket on 127.37.0.9. Run it in a network namespace of your own:
//! ```sh
//! ip netns add hx-seccm; ip -n hx-seccm link set lo up
//! ip netns exec hx-seccm cargo test --release --test cm_flood -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;
mod stat_text;
mod urxe_bin;

use harness::*;
use stat_text::stat_counter;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};
use urxe::wire::bth::BthRepr;
use urxe::wire::cm::{port_space, rdma_cm_service_id, CmMessage, CmPath, CmaHeader, Req, SidrReq, CMA_HEADER_LEN};
use urxe::wire::deth::DethRepr;
use urxe::wire::icrc::IpFields;
use urxe::wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use urxe::wire::opcode::op;
use urxe::wire::packet::finish;
use urxe::wire::{Headers, Psn};

const LISTENER: Ipv4Addr = Ipv4Addr::new(127, 37, 0, 2);
const UDADDY: Ipv4Addr = Ipv4Addr::new(127, 37, 0, 3);
const CLIENT: Ipv4Addr = Ipv4Addr::new(127, 37, 0, 4);
const SPOOF: Ipv4Addr = Ipv4Addr::new(127, 37, 0, 9);
const PORT: u16 = 7471;
/// udaddy always listens on 7174.
const UDADDY_PORT: u16 = 7174;
const BACKLOG: u32 = 16;
const FLOOD: u32 = 100_000;
/// MADs per pacing step (each step 5 ms: about 20 k a second per target).
const BURST: u32 = 100;
/// Bounds: RSS growth and CPU time of each victim over the flood. Before the fix udaddy grew
/// 3.3 -> 177 MB and used 17.5 CPU-s for the same flood; after it, 3.3 -> 6.2 MB and 9 CPU-s
/// (each refused SIDR_REQ is answered with a SIDR_REP, as the kernel does), the listener
/// 3.3 -> 3.6 MB and 2 CPU-s.
const RSS_GROWTH_MAX_KB: u64 = 32 * 1024;
const CPU_MAX_S: f64 = 14.0;
/// A MAD received in the second half of the flood may cost at most this many times one of the
/// first half: the cost of a MAD does not grow with what is pending (before the fix: 35 -> 130
/// -> 630 µs a MAD at 0 / 10 k / 40 k pending). Counted per MAD the victim received, not per
/// half of the wall time, so a victim starved of CPU early (other work on the machine) and
/// catching up later does not look like one whose MADs got dearer.
const HALF_RATIO_MAX: f64 = 2.0;
/// Below this CPU time per MAD a first half is measuring noise, not a cost.
const PER_MAD_FLOOR_S: f64 = 2e-6;
/// How long the requests may take to expire (68 s expected) before the test fails.
const EXPIRY_WAIT: Duration = Duration::from_secs(100);

fn ensure_rdmacm() {
    if lib_dir().join("librdmacm.so.1").is_file() {
        return;
    }
    let out = run_bounded(
        Command::new("bash").arg(repo_root().join("rdmacm/build.sh")).current_dir(repo_root()),
        Duration::from_secs(900),
    )
    .expect("run rdmacm/build.sh");
    assert!(out.success(), "rdmacm/build.sh failed:\n{out}");
}

fn idle_listener() -> PathBuf {
    let bin = std::env::temp_dir().join(format!("urxe-cm-flood-{}", std::process::id()));
    let out = run_bounded(
        Command::new("gcc")
            .args(["-Wall", "-Wextra", "-Werror", "-g", "-o"])
            .arg(&bin)
            .arg(repo_root().join("tests/rdmacm_c/idle_listener.c"))
            .args(["-lrdmacm", "-libverbs"]),
        Duration::from_secs(120),
    )
    .expect("run gcc");
    assert!(out.success(), "gcc failed for tests/rdmacm_c/idle_listener.c:\n{out}");
    bin
}

/// A process whose stdout lines arrive on a channel; killed when dropped.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn start(program: impl AsRef<std::path::Path>, addr: Ipv4Addr, args: &[&str]) -> Proc {
        ensure_rdmacm();
        let mut cmd = urxe_cmd(program);
        cmd.env("URXE_ADDR", addr.to_string()).env_remove("URXE_TRACE").args(args);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("start victim");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Proc { child, stdin, lines, seen: Vec::new() }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (at most `limit`) for a stdout line equal to `want`.
    fn expect(&mut self, want: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.seen.iter().any(|l| l == want) {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no line {want:?} within {limit:?}; saw {:?}", self.seen),
            }
        }
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// User + system CPU seconds of a process.
fn cpu_s(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // SAFETY: sysconf has no memory arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) as f64 / hz
}

/// The GSI QP's `mads_received` counter of process `pid`.
fn mads_received(pid: u32) -> u64 {
    stat_counter(&stat(pid), "GsiCounters", "mads_received").expect("urxe stat shows GsiCounters mads_received")
}

/// `urxe stat PID`.
fn stat(pid: u32) -> String {
    let out = Command::new(urxe_bin::urxe()).args(["stat", &pid.to_string()]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cma_header(dst: Ipv4Addr, i: u32) -> [u8; CMA_HEADER_LEN] {
    let mut h = [0u8; CMA_HEADER_LEN];
    CmaHeader { version: 0, src_port: 40000 + (i % 20000) as u16, src: IpAddr::V4(SPOOF), dst: IpAddr::V4(dst) }
        .emit(&mut h);
    h
}

/// A REQ from a spoofed QP: 1 try of 2.048 s + 256 ms (the MRA then sets the wait).
fn req_mad(i: u32, tst: u8, method: u8) -> [u8; MAD_LEN] {
    let h = cma_header(LISTENER, i);
    let mut mad = [0u8; MAD_LEN];
    CmMessage::Req(Req {
        local_comm_id: 0x0900_0000 | i,
        service_id: rdma_cm_service_id(port_space::TCP, PORT),
        local_ca_guid: 0x0900_0000_0000_0001,
        local_qkey: 0,
        local_qpn: 0x10 + i,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 16,
        transport_service_type: tst,
        end_to_end_flow_control: false,
        starting_psn: 1,
        local_cm_response_timeout: 16,
        retry_count: 7,
        pkey: 0xFFFF,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 0,
        srq: false,
        extended_transport_type: 0,
        primary: CmPath::default(),
        alternate: CmPath::default(),
        private_data: &h,
    })
    .emit(u64::from(i) | 0x0900_0000_0000, &mut mad)
    .unwrap();
    mad[3] = method;
    mad
}

fn sidr_mad(i: u32, dst: Ipv4Addr, service: u64) -> [u8; MAD_LEN] {
    let h = cma_header(dst, i);
    let mut mad = [0u8; MAD_LEN];
    CmMessage::SidrReq(SidrReq { request_id: 0x0900_0000 | i, pkey: 0xFFFF, service_id: service, private_data: &h })
        .emit(u64::from(i) | 0x0A00_0000_0000, &mut mad)
        .unwrap();
    mad
}

/// Sends `mad` to QP1 at `dst` as a RoCEv2 packet from `sock`.
fn send(sock: &UdpSocket, dst: Ipv4Addr, psn: u32, mad: &[u8; MAD_LEN]) {
    let h = Headers {
        bth: BthRepr { opcode: op::UD_SEND_ONLY, dest_qp: GSI_QPN, psn: Psn::new(psn), ..BthRepr::default() },
        deth: Some(DethRepr { qkey: GSI_QKEY, src_qp: GSI_QPN }),
        ..Headers::default()
    };
    let mut buf = [0u8; 512];
    let hl = h.emit(&mut buf).unwrap();
    buf[hl..hl + MAD_LEN].copy_from_slice(mad);
    let sport = sock.local_addr().unwrap().port();
    let n = finish(&mut buf, hl, MAD_LEN, &IpFields::v4_df(SPOOF, dst), sport, 4791).unwrap();
    // A full socket buffer is a lost packet, as on a wire.
    let _ = sock.send_to(&buf[..n], (dst, 4791));
}

#[test]
fn spoofed_request_floods_are_bounded_expire_and_a_legitimate_client_still_connects() {
    let _serial = heavy_lock();
    let idle = idle_listener();
    let mut lis = Proc::start(&idle, LISTENER, &["-s", &LISTENER.to_string(), &PORT.to_string(), &BACKLOG.to_string()]);
    lis.expect("listening", Duration::from_secs(20));
    let mut uda = Proc::start(tool("udaddy"), UDADDY, &["-b", &UDADDY.to_string()]);
    // udaddy says nothing when it listens: give it the time rdmacm_apps.rs gives servers.
    thread::sleep(Duration::from_secs(2));
    assert!(uda.alive(), "udaddy exited before the flood");
    let (rss0, cpu0) = ([rss_kb(lis.pid()), rss_kb(uda.pid())], [cpu_s(lis.pid()), cpu_s(uda.pid())]);
    let mads0 = [mads_received(lis.pid()), mads_received(uda.pid())];

    let sock = UdpSocket::bind((SPOOF, 0)).unwrap();
    let udp_service = rdma_cm_service_id(port_space::UDP, UDADDY_PORT);
    let t = Instant::now();
    let mut i = 0;
    let mut half = [0.0f64; 2];
    let mut half_mads = [0u64; 2];
    while i < FLOOD {
        if i == FLOOD / 2 {
            half = [cpu_s(lis.pid()), cpu_s(uda.pid())];
            half_mads = [mads_received(lis.pid()), mads_received(uda.pid())];
        }
        for k in i..(i + BURST).min(FLOOD) {
            send(&sock, LISTENER, k, &req_mad(k, 0, 0x03));
            send(&sock, UDADDY, k, &sidr_mad(k, UDADDY, udp_service));
        }
        i += BURST;
        thread::sleep(Duration::from_millis(5));
    }
    // Other forgeries, 100 each, after the flood: a GET-method REQ, a UC REQ to the RC
    // listener, a SIDR_REQ to it (TCP port space).
    for k in 0..100 {
        send(&sock, LISTENER, k, &req_mad(FLOOD + k, 0, 0x01));
        send(&sock, LISTENER, k, &req_mad(FLOOD + 100 + k, 1, 0x03));
        send(&sock, LISTENER, k, &sidr_mad(FLOOD + 200 + k, LISTENER, rdma_cm_service_id(port_space::TCP, PORT)));
        thread::sleep(Duration::from_millis(1));
    }
    let flood_s = t.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(2));
    let (rss1, cpu1) = ([rss_kb(lis.pid()), rss_kb(uda.pid())], [cpu_s(lis.pid()), cpu_s(uda.pid())]);
    let (sl, su) = (stat(lis.pid()), stat(uda.pid()));
    let gsi = |t: &str| stat_counter(t, "GsiCounters", "mads_received").expect("GsiCounters mads_received");
    let mads1 = [gsi(&sl), gsi(&su)];
    eprintln!("flood of {FLOOD} REQs + {FLOOD} SIDR_REQs took {flood_s:.1} s");
    for (k, name) in ["idle listener", "udaddy"].iter().enumerate() {
        eprintln!(
            "{name}: RSS {} -> {} kB, CPU {:.2} s over the flood ({:.2} s for {} MADs in the first half, \
             {:.2} s for {} in the second)",
            rss0[k],
            rss1[k],
            cpu1[k] - cpu0[k],
            half[k] - cpu0[k],
            half_mads[k] - mads0[k],
            cpu1[k] - half[k],
            mads1[k] - half_mads[k]
        );
    }
    eprintln!("--- urxe stat, idle listener ---\n{sl}--- urxe stat, udaddy ---\n{su}");
    assert!(lis.alive() && uda.alive(), "a victim died");
    for k in 0..2 {
        assert!(rss1[k].saturating_sub(rss0[k]) < RSS_GROWTH_MAX_KB, "RSS grew {} -> {} kB", rss0[k], rss1[k]);
        assert!(cpu1[k] - cpu0[k] < CPU_MAX_S, "CPU {:.2} s", cpu1[k] - cpu0[k]);
        let per_mad = |cpu: f64, mads: u64| cpu / mads.max(1) as f64;
        let first = per_mad(half[k] - cpu0[k], half_mads[k] - mads0[k]);
        let second = per_mad(cpu1[k] - half[k], mads1[k] - half_mads[k]);
        assert!(
            second < HALF_RATIO_MAX * first.max(PER_MAD_FLOOR_S),
            "CPU per MAD received: {:.1} µs in the first half, {:.1} µs in the second",
            first * 1e6,
            second * 1e6
        );
    }
    let got = |t: &str, b: &str, n: &str| stat_counter(t, b, n).unwrap_or(0);
    assert!(got(&sl, "CmCounters", "backlog_refused") > 0, "the listener's backlog refused nothing");
    assert!(got(&su, "CmCounters", "backlog_refused") > 0, "udaddy's backlog refused nothing");
    assert_eq!(got(&sl, "CmCounters", "bad_method_dropped"), 100);
    assert_eq!(got(&sl, "CmCounters", "qp_type_rejected"), 200);
    assert!(got(&sl, "GsiCounters", "mads_received") > 0);

    // The held requests expire (16 at the listener; udaddy's 1,023 queued behind its one
    // connection) once their requesters would have given up.
    let end = Instant::now() + EXPIRY_WAIT;
    let (mut el, mut eu) = (0, 0);
    while Instant::now() < end {
        thread::sleep(Duration::from_secs(2));
        el = got(&stat(lis.pid()), "CmCounters", "requests_expired");
        eu = got(&stat(uda.pid()), "CmCounters", "requests_expired");
        if el >= u64::from(BACKLOG) && eu >= 1000 {
            break;
        }
    }
    eprintln!("expired after {:.0} s: listener {el}, udaddy {eu}", t.elapsed().as_secs_f64());
    assert!(el >= u64::from(BACKLOG) && eu >= 1000, "requests did not expire: {el} / {eu}");
    let rss2 = [rss_kb(lis.pid()), rss_kb(uda.pid())];
    eprintln!("RSS after expiry: listener {} kB, udaddy {} kB", rss2[0], rss2[1]);

    // A legitimate client connects; the listener found only its request queued.
    lis.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let c = run_bounded(
        urxe_cmd(&idle).env("URXE_ADDR", CLIENT.to_string()).args(["-c", &LISTENER.to_string(), &PORT.to_string()]),
        Duration::from_secs(60),
    )
    .unwrap();
    assert!(c.success() && c.all().contains("connected"), "client:\n{c}");
    lis.expect("established", Duration::from_secs(20));
    lis.expect("requests 1", Duration::from_secs(5));
}
