//! DCQCN end to end (issue #42): two urxe processes (`ib_write_bw`) in a network namespace of
//! the test's own, an nftables rule that sets CE on the client's RoCEv2 packets above
//! 20 MiB/s (a congested switch), and `urxe stat` read while they run:
//! - DCQCN on (the default): the server's NP sees CE marks and sends CNPs, the client's RP
//!   handles them and its bandwidth falls to about the marking rate, far below the unmarked
//!   run's; a capture of the namespace's loopback shows the CE and CNP columns of
//!   `urxe check --flows`;
//! - `URXE_DCQCN=0`: the marks are counted, no CNP is sent or handled, and the bandwidth stays
//!   that of the unmarked run.
//!
//! Runs as root (namespace, nftables). Every wait is bounded.
//!
//! ```sh
//! cargo test --release --test congestion -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;
mod urxe_bin;

use harness::*;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const SRV: &str = "10.80.0.1";
const CLI: &str = "10.80.0.2";
const PORT: u16 = 18850;
/// The marking threshold: 20 MiB/s = 0.168 Gbit/s.
const MARK: &str = "20 mbytes/second";

/// A network namespace of the test's own with two addresses on its loopback (deleted on drop).
struct Netns(String);

fn ip(args: &[&str]) {
    let out = run_bounded(Command::new("ip").args(args), Duration::from_secs(20)).expect("run ip");
    assert!(out.success(), "ip {args:?} failed (this test needs root)\n{out}");
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let ns = Netns(format!("hx-cc-{tag}{}", std::process::id()));
        let n = ns.0.as_str();
        ip(&["netns", "add", n]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ip(&["-n", n, "addr", "add", &format!("{SRV}/32"), "dev", "lo"]);
        ip(&["-n", n, "addr", "add", &format!("{CLI}/32"), "dev", "lo"]);
        ns
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }

    /// CE on every RoCEv2 packet from the client to the server above [`MARK`] (whatever its
    /// ECN field: the run with DCQCN off sends Not-ECT and must see marks too).
    fn mark(&self) {
        let rules = format!(
            "table inet hxcc {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n  \
             ip saddr {CLI} ip daddr {SRV} udp dport 4791 limit rate over {MARK} burst 65536 bytes ip ecn set ce\n }}\n}}\n"
        );
        let file = std::env::temp_dir().join(format!("{}.nft", self.0));
        std::fs::write(&file, rules).unwrap();
        let out = run_bounded(self.cmd("nft").arg("-f").arg(&file), Duration::from_secs(10)).expect("run nft");
        let _ = std::fs::remove_file(&file);
        assert!(out.success(), "nftables CE marker\n{out}");
    }

    fn listening(&self, port: u16) -> bool {
        run_bounded(self.cmd("ss").args(["-Hltn", &format!("sport = :{port}")]), Duration::from_secs(5))
            .map(|o| o.success() && !o.stdout.trim().is_empty())
            .unwrap_or(false)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_bounded(Command::new("ip").args(["netns", "del", &self.0]), Duration::from_secs(20));
    }
}

/// One ib_write_bw run; its bandwidth (Gb/s) and the last `urxe stat` taken while both ran.
struct BwRun {
    gbps: f64,
    stat: String,
}

fn write_bw(ns: &Netns, port: u16, env: &[(&str, &str)], iters: u32) -> BwRun {
    let bw = tool("ib_write_bw");
    let args = |c: &mut Command| {
        c.env("LD_LIBRARY_PATH", lib_dir()).env("URXE_GSO", "0");
        for (k, v) in env {
            c.env(k, v);
        }
        c.arg(&bw).args(["-d", DEV, "-x", "1", "-F", "--report_gbits", "-s", "65536", "-n"]);
        c.arg(iters.to_string()).args(["-p", &port.to_string()]);
    };
    let mut server = ns.cmd("env");
    server.arg(format!("URXE_ADDR={SRV}"));
    args(&mut server);
    let srv = thread::spawn(move || run_bounded(&mut server, Duration::from_secs(120)).expect("server"));
    let t0 = Instant::now();
    while !ns.listening(port) {
        assert!(t0.elapsed() < Duration::from_secs(20) && !srv.is_finished(), "ib_write_bw server did not listen");
        thread::sleep(Duration::from_millis(50));
    }
    // `urxe stat` every 100 ms while the client runs (at most 1200 samples): the last answer
    // that holds both processes' counters.
    let stop = Arc::new(AtomicBool::new(false));
    let last = Arc::new(Mutex::new(String::new()));
    let sampler = {
        let (stop, last, nsname) = (stop.clone(), last.clone(), ns.0.clone());
        thread::spawn(move || {
            for _ in 0..1200 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &nsname, urxe_bin::urxe(), "stat"]);
                if let Ok(o) = run_bounded(&mut c, Duration::from_secs(10)) {
                    if o.stdout.matches("rp_cnp_handled").count() >= 2 {
                        *last.lock().unwrap() = o.stdout.clone();
                    }
                }
                thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut client = ns.cmd("env");
    client.arg(format!("URXE_ADDR={CLI}"));
    args(&mut client);
    client.arg(SRV);
    let c = run_bounded(&mut client, Duration::from_secs(90)).expect("client");
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let s = srv.join().unwrap();
    assert!(c.success() && s.success(), "ib_write_bw failed\n{s}\n{c}");
    let gbps = c
        .stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 5 && f[0] == "65536").then(|| f[3].parse::<f64>().ok()).flatten()
        })
        .next_back()
        .unwrap_or_else(|| panic!("no result row\n{c}"));
    let stat = last.lock().unwrap().clone();
    BwRun { gbps, stat }
}

/// The sum over the processes of counter `name` in a `urxe stat` answer.
fn counter(stat: &str, name: &str) -> u64 {
    stat.lines().filter_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':')?.trim().parse::<u64>().ok()).sum()
}

#[test]
fn ce_marks_bring_cnps_and_slow_the_sender_and_dcqcn_off_ignores_them() {
    let ns = Netns::new("t");
    let plain = write_bw(&ns, PORT, &[], 3000);
    ns.mark();
    // Both processes record what they send and receive (the first 48 MiB each: nftables lets about the first 20 MiB through unmarked) for urxe check.
    let caps = std::env::temp_dir().join(format!("hx-cc-caps-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&caps);
    std::fs::create_dir_all(&caps).unwrap();
    let pattern = caps.join("cap-%p.pcapng").to_string_lossy().into_owned();
    let on = write_bw(&ns, PORT + 1, &[("URXE_PCAP", &pattern), ("URXE_PCAP_MAX", "48M")], 3000);
    let off = write_bw(&ns, PORT + 2, &[("URXE_DCQCN", "0")], 3000);
    let c = |r: &BwRun| {
        ["np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored"].map(|n| counter(&r.stat, n))
    };
    println!(
        "unmarked {:.3} Gb/s; marked, DCQCN on {:.3} Gb/s {:?}; off {:.3} Gb/s {:?}",
        plain.gbps,
        on.gbps,
        c(&on),
        off.gbps,
        c(&off)
    );
    let [marked, sent, handled, ignored] = c(&on);
    assert!(marked > 0 && sent > 0, "the server's NP saw CE and sent CNPs\n{}", on.stat);
    assert!(handled > 0 && ignored == 0, "the client's RP handled them\n{}", on.stat);
    assert!(on.gbps < 0.5 * plain.gbps && on.gbps < 0.5, "paced near the 0.168 Gb/s marking rate");
    // urxe check --flows: the client's flow to the server shows CE marks (in the server's
    // capture, which recorded the TOS each packet arrived with), and the server's flow to the
    // client shows the CNPs.
    let (mut ce_rows, mut cnp_rows) = (0, 0);
    for f in std::fs::read_dir(&caps).unwrap() {
        let path = f.unwrap().path();
        let mut cmd = Command::new(urxe_bin::urxe());
        cmd.arg("check").arg("--flows").arg(&path);
        let out = run_bounded(&mut cmd, Duration::from_secs(120)).expect("urxe check");
        assert!(out.stdout.contains("     ce   cnp"), "the flow table has ce and cnp columns\n{out}");
        for l in out.stdout.lines().filter(|l| l.contains(" qp=")) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (Ok(ce), Ok(cnp)) = (f[f.len() - 2].parse::<u64>(), f[f.len() - 1].parse::<u64>()) else {
                continue; // not a row of the flow table (the CM table names QPs too)
            };
            if ce > 0 || cnp > 0 {
                println!("{}: {l}", path.display());
            }
            ce_rows += (l.starts_with(&format!("{CLI} > {SRV}")) && ce > 0) as u32;
            cnp_rows += (l.starts_with(&format!("{SRV} > {CLI}")) && cnp > 0) as u32;
        }
    }
    if ce_rows == 0 || cnp_rows == 0 {
        for f in std::fs::read_dir(&caps).unwrap() {
            let mut cmd = Command::new(urxe_bin::urxe());
            cmd.arg("check").arg("--flows").arg(f.unwrap().path());
            println!("{}", run_bounded(&mut cmd, Duration::from_secs(120)).expect("urxe check"));
        }
    }
    let _ = std::fs::remove_dir_all(&caps);
    assert!(ce_rows > 0 && cnp_rows > 0, "urxe check --flows: {ce_rows} flows with CE, {cnp_rows} with CNPs");
    let [marked, sent, handled, _] = c(&off);
    assert!(marked > 0, "marks are still counted with DCQCN off\n{}", off.stat);
    assert_eq!((sent, handled), (0, 0), "no CNP with DCQCN off\n{}", off.stat);
    assert!(off.gbps > 2.0 * on.gbps, "not paced with DCQCN off");
}
