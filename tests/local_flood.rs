//! No local user can harm a urxe process through its `urxe stat` socket (issue #16): another
//! user's connections are refused unanswered, counted, and a connect flood of theirs leaves a
//! latency test's figure within 2x of its unloaded value.
//!
//! The flooding user is uid 65534 (`setpriv --reuid=65534 ...`); the tests run as root, as CI does.

#[path = "apps/mod.rs"]
#[allow(dead_code)]
mod harness;
mod urxe_bin;

use harness::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A Python loop, run as another user, that connects to every `@urxe-stat-*` socket it finds for
/// `secs` seconds and prints `connects=N bytes=M` (M: bytes the sockets answered it).
const FLOOD: &str = r#"
import socket, sys, time
end = time.time() + float(sys.argv[1])
connects = got = 0
names = []
rounds = 0
while time.time() < end:
    if rounds % 20 == 0:
        want = '@urxe-stat-' + (sys.argv[2] + '-' if len(sys.argv) > 2 else '')
        names = [l.split()[-1][1:] for l in open('/proc/net/unix') if l.split()[-1].startswith(want)]
    rounds += 1
    if not names:
        time.sleep(0.01)
        continue
    for n in names:
        # 32 connections at once, then read each: a wakeup of the stats thread finds many.
        batch = []
        for _ in range(32):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1.0)
            try:
                s.connect('\0' + n)
                connects += 1
                batch.append(s)
            except OSError:
                s.close()
        for s in batch:
            try:
                got += len(s.recv(4096))
            except OSError:
                pass
            finally:
                s.close()
print('connects=%d bytes=%d' % (connects, got))
"#;

/// Floods every urxe stat socket (or only process `pid`'s) for `secs` seconds as uid 65534.
fn flood_as_nobody(secs: f64, pid: Option<u32>) -> std::process::Child {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", FLOOD])
        .arg(secs.to_string())
        .args(pid.map(|p| p.to_string()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) and python3 run the flood")
}

fn flood_result(child: std::process::Child) -> (u64, u64) {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "flood failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    let field = |k: &str| -> u64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text:?}"))
    };
    (field("connects="), field("bytes="))
}

/// ib_send_lat 2 B over urxe; the client's typical latency in µs.
fn send_lat_typical(port: u16) -> f64 {
    let args = |c: &mut Command| {
        c.args(["-d", DEV, "-x", "1", "-p", &port.to_string(), "-F", "-s", "2", "-n", "5000"]);
    };
    let mut srv = urxe_cmd(tool("ib_send_lat"));
    args(&mut srv);
    let mut cli = urxe_cmd(tool("ib_send_lat"));
    args(&mut cli);
    cli.arg(HOST);
    let (_, c) = run_pair(port, srv, cli);
    // The results line follows the header naming t_typical: fields bytes iters min max typical …
    let mut lines = c.stdout.lines().skip_while(|l| !l.contains("t_typical"));
    lines.next();
    let v: Vec<f64> = lines.next().unwrap_or_default().split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(v.len() >= 5, "no result line in ib_send_lat's output\n{c}");
    v[4]
}

#[test]
fn another_users_connect_flood_is_refused_and_leaves_latency_within_2x() {
    let _g = heavy_lock();
    let mut verdicts = Vec::new();
    // Bounded retries: a 2-core machine has other load now and then; the claim must hold in
    // one of three paired measurements.
    for attempt in 0..3u16 {
        let quiet = send_lat_typical(18861 + 2 * attempt);
        let flood = flood_as_nobody(12.0, None);
        std::thread::sleep(Duration::from_millis(300));
        let loaded = send_lat_typical(18862 + 2 * attempt);
        let (connects, bytes) = flood_result(flood);
        assert_eq!(bytes, 0, "another user read {bytes} bytes from a urxe stat socket");
        assert!(connects >= 100, "the flood made only {connects} connections: not a flood");
        verdicts.push(format!("unloaded {quiet:.2} µs, under {connects} refused connects {loaded:.2} µs"));
        if loaded <= 2.0 * quiet {
            eprintln!("{}", verdicts.join("\n"));
            return;
        }
    }
    panic!("latency under another user's stats-socket flood exceeded 2x its unloaded figure:\n{}", verdicts.join("\n"));
}

#[test]
fn the_stats_socket_answers_the_same_user_and_counts_refusals() {
    let _g = heavy_lock();
    // A device in a long-running process of ours: an ibv_rc_pingpong server waiting for a client.
    let port = 18871;
    let mut srv = urxe_cmd(tool("ibv_rc_pingpong"));
    srv.args(["-d", DEV, "-g", "1", "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = srv.spawn().unwrap();
    let pid = child.id();
    let urxe = urxe_bin::urxe();
    let stat = || Command::new(urxe).args(["stat", &pid.to_string()]).output().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut first = stat();
    while !String::from_utf8_lossy(&first.stdout).contains("stats_refused") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        first = stat();
    }
    let text = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(text.contains(&format!("pid {pid}")), "root reads the counters: {text}");
    let (connects, bytes) = flood_result(flood_as_nobody(1.0, Some(pid)));
    let after = String::from_utf8_lossy(&stat().stdout).to_string();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(bytes, 0);
    let refused: u64 = after
        .lines()
        .find_map(|l| l.trim().strip_prefix("stats_refused:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stats_refused counter in {after}"));
    assert!(connects > 0 && refused >= connects, "{connects} connects by uid 65534, {refused} refused counted");
}
