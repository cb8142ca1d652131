//! Unmodified programs under a fault plan (`URXE_FAULTS`, docs/faults.md): what they see is
//! what a lossy, refusing or silent peer gives them — recovery where RC recovers, the IBTA
//! completion status where it cannot, and a clear refusal of a plan that does not parse.
//!
//! An Open MPI/UCX job whose rank 0 takes a QP fatal error ends at once with UCX's error, no
//! hang.
//!
//! ```sh
//! cargo test --release --test faults_apps -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;
mod urxe_bin;

use harness::*;
use std::time::Instant;

fn perftest_cmd(
    tool_name: &str,
    port: u16,
    extra: &[&str],
    faults: Option<&str>,
    server: bool,
) -> std::process::Command {
    let mut c = urxe_cmd(tool(tool_name));
    c.args(["-d", DEV, "-x", "1", "-p", &port.to_string()]).args(extra);
    if !server {
        c.arg(HOST);
    }
    if let Some(f) = faults {
        c.env("URXE_FAULTS", f);
    }
    c
}

#[test]
fn ib_write_bw_recovers_from_loss_duplicates_and_reordering_on_both_sides() {
    let _g = heavy_lock();
    let plan = "seed=3; drop:prob=0.01; dup:every=97; reorder:every=89; drop:site=rx,every=113";
    let extra = ["-n", "300", "-s", "65536", "--report_gbits"];
    let (s, c) = run_pair(
        18931,
        perftest_cmd("ib_write_bw", 18931, &extra, Some(plan), true),
        perftest_cmd("ib_write_bw", 18931, &extra, Some(plan), false),
    );
    // Both ran to the end; the faults were really injected (URXE_TRACE is on in urxe_cmd).
    assert_contains(&c, "65536      300");
    let injected =
        s.stderr.matches("urxe: fault injected:").count() + c.stderr.matches("urxe: fault injected:").count();
    assert!(injected >= 10, "only {injected} faults injected\n{s}\n{c}");
}

#[test]
fn a_silent_peer_ends_ib_send_bw_in_retry_exceeded_within_the_ibta_bounds() {
    let _g = heavy_lock();
    // Local ACK timeout 14 (4.096 us * 2^14 = 67 ms) and 7 retries: IBTA lets each timeout last
    // between that and four times it, so the WR fails after 8 timeouts: 0.54 s to 2.1 s.
    let extra = ["-n", "100", "-u", "14", "-r", "7"];
    let start = Instant::now();
    let (_s, mut c) = run_server_clients_any(
        18932,
        perftest_cmd("ib_send_bw", 18932, &extra, None, true),
        vec![perftest_cmd("ib_send_bw", 18932, &extra, Some("silent:after=3"), false)],
    );
    let c = c.remove(0);
    let took = start.elapsed().as_secs_f64();
    assert!(!c.success(), "the client must fail\n{c}");
    assert_contains(&c, "Failed status 12");
    assert!(c.stderr.matches("-> Drop at Rx").count() >= 8, "a first try and 7 retries were all unanswered\n{c}");
    assert!((0.5..30.0).contains(&took), "took {took:.2} s");
}

#[test]
fn rnr_naks_from_the_plan_are_retried_by_an_unmodified_pingpong() {
    let _g = heavy_lock();
    let pp = |faults: Option<&str>, server: bool| {
        let mut c = urxe_cmd(tool("ibv_rc_pingpong"));
        c.args(["-d", DEV, "-g", "1", "-p", "18933", "-n", "200"]);
        if !server {
            c.arg(HOST);
        }
        if let Some(f) = faults {
            c.env("URXE_FAULTS", f);
        }
        c
    };
    let (s, c) = run_pair(18933, pp(Some("rnr-nak:count=5"), true), pp(None, false));
    assert_contains(&c, "200 iters");
    assert_eq!(s.stderr.matches("-> RnrNak at Rx").count(), 5, "{s}");
}

#[test]
fn a_plan_that_does_not_parse_stops_the_program_naming_urxe_faults() {
    let mut c = urxe_cmd(tool("ibv_rc_pingpong"));
    c.args(["-d", DEV, "-g", "1", "-p", "18934", HOST]).env("URXE_FAULTS", "drop:qpn=zz");
    let out = run_bounded(&mut c, RUN_TIMEOUT).expect("run ibv_rc_pingpong");
    assert!(!out.success(), "{out}");
    assert_contains(&out, "URXE_FAULTS: item 1 \"drop:qpn=zz\": qpn: 'zz' is not a whole number");
}

#[test]
fn device_faults_reach_the_program_as_a_real_devices_events_and_states() {
    // tests/verbs_c/faults_device.c checks each event, its element, the port state in between,
    // the QP's state and its flushed receive, in order.
    let plan = "port-down=300ms:at=200ms; qp-fatal:at=900ms; cq-overrun:at=1000ms; device-fatal:at=1100ms";
    let mut c = urxe_cmd(c_program("faults_device"));
    c.env("URXE_FAULTS", plan);
    let out = run_bounded(&mut c, RUN_TIMEOUT).expect("run faults_device");
    assert!(out.success(), "{out}");
    assert_contains(&out, "faults_device: 17 checks, 0 failed");
    for f in ["PortDown(300000000)", "QpFatal", "CqOverrun", "DeviceFatal"] {
        assert_contains(&out, &format!("-> {f} at Device"));
    }
}

/// `urxe run --faults SPEC|@FILE -- PROGRAM` gives the program the plan (URXE_FAULTS); a plan
/// that does not parse is refused before the program runs, exit 2 naming the item.
#[test]
fn urxe_run_faults_hands_the_plan_to_the_program_and_refuses_a_bad_one() {
    let urxe = urxe_bin::urxe();
    let run = |plan: &str| {
        std::process::Command::new(urxe)
            .args(["run", "--no-view", "--faults", plan, "--", "sh", "-c", "echo \"plan=$URXE_FAULTS\""])
            .output()
            .expect("run urxe")
    };
    let o = run("seed=5; drop:every=10");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "plan=seed=5; drop:every=10\n");
    let file = std::env::temp_dir().join(format!("urxe-faults-plan-{}", std::process::id()));
    std::fs::write(&file, "seed=5\nrnr-nak:count=3 # a comment\n").unwrap();
    let o = run(&format!("@{}", file.display()));
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("plan=@{}\n", file.display()));
    std::fs::write(&file, "drop\nteleport\n").unwrap();
    let o = run(&format!("@{}", file.display()));
    let _ = std::fs::remove_file(&file);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(o.stdout.is_empty(), "the program must not run: {o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("urxe run: --faults: URXE_FAULTS: item 2 \"teleport\": unknown fault 'teleport'"), "{err}");
}

/// rping with a DREQ in the middle of its run (`disconnect:at=1s` on the client): both sides
/// get RDMA_CM_EVENT_DISCONNECTED ("DISCONNECT EVENT..."), the ping loop stops on the flushed
/// QP (state ERROR, 10) and both processes end — the path rping takes when its peer
/// disconnects on the kernel's CMA.
#[test]
fn rping_meets_a_dreq_mid_run_on_both_sides_and_ends() {
    let _g = heavy_lock();
    ensure_rdmacm();
    let addr = "127.41.9.1";
    let rping = |args: &[&str]| {
        let mut c = urxe_cmd(tool("rping"));
        c.env("URXE_ADDR", addr).args(args).args(["-a", addr, "-p", "7490", "-C", "1000000"]);
        c
    };
    let start = Instant::now();
    let mut server = rping(&["-s"]);
    let srv = std::thread::spawn(move || run_bounded(&mut server, std::time::Duration::from_secs(30)));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut client = rping(&["-c"]);
    client.env("URXE_FAULTS", "disconnect:at=1s");
    let c = run_bounded(&mut client, std::time::Duration::from_secs(30)).expect("run rping -c");
    let s = srv.join().expect("server thread").expect("run rping -s");
    eprintln!("{s}\n{c}");
    assert_contains(&c, "urxe: fault injected: disconnect:at=1s -> Disconnect at Cm");
    assert_contains(&c, "client DISCONNECT EVENT...");
    assert_contains(&s, "server DISCONNECT EVENT...");
    // Where in its ping loop each side is when the DREQ lands varies: it waits for the next
    // READ or WRITE advertisement or completion and finds the connection in ERROR (10).
    for o in [&c, &s] {
        assert!(
            o.stderr.contains("wait for RDMA_") && o.stderr.contains(" state 10\n"),
            "the ping loop ends on state ERROR\n{o}"
        );
    }
    assert!(!c.timed_out && !s.timed_out, "both end by themselves\n{s}\n{c}");
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

/// The fault lines of a run's stderr without their times ("… (t=123 ns)").
fn fault_lines(o: &Output) -> Vec<String> {
    o.stderr
        .lines()
        .filter(|l| l.starts_with("urxe: fault injected:"))
        .map(|l| l.split(" (t=").next().unwrap_or(l).to_string())
        .collect()
}

/// Every injected fault is marked in the `URXE_PCAP` capture: a record on the device's
/// `urxe-faults` interface whose pcapng comment is the fault's trace line, read back with
/// tshark (`-e frame.comment`); and one seed gives the same faults at the same QP and PSN
/// sequence positions twice (the plan's decisions are a function of the packets).
#[test]
fn injected_faults_are_comments_in_the_capture_and_one_seed_replays_them() {
    let _g = heavy_lock();
    let dir = std::env::temp_dir().join(format!("urxe-faults-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Requests only: ibv_rc_pingpong has one SEND outstanding at a time, so the requests a side
    // sends (a lost one resent once per loss) do not depend on timing; ACKs would (coalescing).
    let plan = "seed=11; drop:class=req,prob=0.05; dup:class=req,every=40";
    let run = |n: usize| {
        let pcap = dir.join(format!("server-{n}.pcapng"));
        let pp = |server: bool| {
            let mut c = urxe_cmd(tool("ibv_rc_pingpong"));
            c.args(["-d", DEV, "-g", "1", "-p", "18934", "-n", "200"]);
            if server {
                c.env("URXE_FAULTS", plan).env("URXE_PCAP", &pcap);
            } else {
                c.arg(HOST);
            }
            c
        };
        let (s, c) = run_pair(18934, pp(true), pp(false));
        assert_contains(&c, "200 iters");
        (s, pcap)
    };
    let (s1, pcap1) = run(1);
    let lines = fault_lines(&s1);
    assert!(lines.len() >= 5, "few faults injected: {}\n{s1}", lines.len());
    let mut tshark = std::process::Command::new("tshark");
    tshark.arg("-r").arg(&pcap1).args(["-Y", "frame.comment", "-T", "fields", "-e", "frame.comment"]);
    let t = run_bounded(&mut tshark, std::time::Duration::from_secs(60)).expect("run tshark");
    assert!(t.success(), "{t}");
    let comments: Vec<String> = t
        .stdout
        .lines()
        .filter(|l| l.starts_with("urxe: fault injected:"))
        .map(|l| l.split(" (t=").next().unwrap_or(l).to_string())
        .collect();
    assert_eq!(comments, lines, "one comment per fault, in order, each its trace line");
    // The replay: the same faults at the same packets. QPNs and starting PSNs are random per
    // run (ibv_rc_pingpong draws them), so each line is compared with its PSN as an offset in
    // its stream (requests one way, ACKs the other: bases far apart), streams numbered in the
    // order they first appear.
    let shape = |ls: &[String]| -> Vec<String> {
        let mut bases: Vec<u32> = Vec::new();
        ls.iter()
            .map(|l| {
                let head = l.split(" qp ").next().unwrap_or(l);
                let Some(p) = l.split(" psn ").nth(1).and_then(|p| p.parse::<u32>().ok()) else {
                    return head.to_string();
                };
                let near = |b: &u32| {
                    let d = p.wrapping_sub(*b) & 0xFF_FFFF;
                    !((1 << 16)..=(1 << 24) - (1 << 16)).contains(&d)
                };
                let i = bases.iter().position(near).unwrap_or_else(|| {
                    bases.push(p);
                    bases.len() - 1
                });
                let off = ((p.wrapping_sub(bases[i]) & 0xFF_FFFF) << 8) as i32 >> 8;
                format!("{head} stream {i} {off:+}")
            })
            .collect()
    };
    let (s2, _) = run(2);
    let (a, b) = (shape(&lines), shape(&fault_lines(&s2)));
    let same = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    eprintln!("replay: {same} of {} / {} fault lines alike", a.len(), b.len());
    assert_eq!(a, b, "the same seed, the same faults\n{s1}\n{s2}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// rping across a port flap (`port-down=300ms:at=500ms` on the client): nothing is sent or
/// received for 300 ms, RC retransmission rides it out (rping's QPs have rdma_cm's retry
/// count 7), and all 3000 pings complete: both exit 0, as over a real link that flaps for
/// less than the retry budget. rping takes no async events, so PORT_ERR / PORT_ACTIVE pass
/// unseen, as on the kernel.
#[test]
fn rping_rides_out_a_port_flap() {
    let _g = heavy_lock();
    ensure_rdmacm();
    let addr = "127.41.10.1";
    let rping = |args: &[&str]| {
        let mut c = urxe_cmd(tool("rping"));
        c.env("URXE_ADDR", addr).args(args).args(["-a", addr, "-p", "7491", "-C", "3000"]);
        c
    };
    let mut server = rping(&["-s"]);
    let srv = std::thread::spawn(move || run_bounded(&mut server, std::time::Duration::from_secs(60)));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut client = rping(&["-c"]);
    client.env("URXE_FAULTS", "port-down=300ms:at=500ms");
    let c = run_bounded(&mut client, std::time::Duration::from_secs(60)).expect("run rping -c");
    let s = srv.join().expect("server thread").expect("run rping -s");
    eprintln!("{s}\n{c}");
    assert_contains(&c, "urxe: fault injected: port-down=300ms:at=500ms -> PortDown(300000000) at Device");
    assert!(c.success() && s.success(), "both complete their 3000 pings\n{s}\n{c}");
    assert_lacks(&c, "cq completion failed");
    assert_lacks(&s, "cq completion failed");
}

/// tests/mpi/mpi_check.c compiled with mpicc (Debian package libopenmpi-dev), once.
fn mpi_check() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("urxe-faults-mpi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("mpi_check");
        let mut c = std::process::Command::new("mpicc");
        c.args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"]).arg(&bin).arg(repo_root().join("tests/mpi/mpi_check.c"));
        let out = run_bounded(&mut c, RUN_TIMEOUT).expect("run mpicc (Debian package libopenmpi-dev)");
        assert!(out.success(), "mpicc failed\n{out}");
        bin
    })
    .clone()
}

/// Issue #41: `mpirun -np 2` of tests/mpi/mpi_check.c over UCX's rc_verbs/ud_verbs on urxe,
/// rank 0 alone under `qp-fatal:at=3s` (an MPMD command line: `-x` per app context), the
/// ranks in a ping-pong long enough to outlast it. At 3 s rank 0's QPs go to ERROR with
/// `IBV_EVENT_QP_FATAL`: UCX reports the async event ("local work queue catastrophic error")
/// and the flushed completion, aborts the rank, and mpirun ends the job, non-zero, in seconds.
/// A hang is the `timeout` wrapper's 60 s (exit 124) or the harness's kill: both fail.
#[test]
fn an_mpi_job_with_a_qp_fatal_on_one_rank_reports_ucxs_error_and_ends() {
    let bin = mpi_check();
    let _g = heavy_lock();
    let bin = bin.to_str().expect("a UTF-8 path");
    let script = format!(
        "timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe --mca pml ucx --mca btl self -x UCX_TLS \
         -np 1 -x URXE_FAULTS=qp-fatal:at=3s -x URXE_TRACE=1 {bin} 3000000 --lat : -np 1 {bin} 3000000 --lat"
    );
    let mut c = std::process::Command::new(urxe_bin::urxe());
    c.args(["run", "--lib"])
        .arg(lib_dir())
        .args(["--", "sh", "-c", &script])
        .env("UCX_TLS", "rc_verbs,ud_verbs,self")
        .env_remove("URXE_FAULTS")
        .env_remove("URXE_TRACE")
        .env_remove("UCX_UD_ETH_DGID_CHECK");
    let start = Instant::now();
    let out = run_bounded(&mut c, std::time::Duration::from_secs(80)).expect("run mpirun");
    let took = start.elapsed();
    eprintln!("mpirun under qp-fatal on rank 0 ended after {:.1} s: {:?}\n{out}", took.as_secs_f64(), out.status);
    assert!(!out.timed_out, "the job hung: killed after 80 s\n{out}");
    let code = out.status.and_then(|s| s.code());
    assert!(code != Some(124) && code != Some(137), "the job hung: timeout ended it after 60 s\n{out}");
    assert!(!out.success(), "the job must fail\n{out}");
    assert_lacks(&out, "mpi_check: lat8");
    // Only rank 0 runs under the plan, and its one fault fired.
    assert_eq!(out.all().matches("urxe: fault injected: qp-fatal:at=3s -> QpFatal at Device").count(), 1, "{out}");
    // UCX's report of IBV_EVENT_QP_FATAL, and of the flushed completion it then met.
    assert_contains(&out, "IB Async event on urxe0: local work queue catastrophic error on QPN");
    assert_contains(&out, "Work Request Flushed Error");
    assert_contains(&out, "mpirun noticed that process rank 0");
}
