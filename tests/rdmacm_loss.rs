//! rping over urxe with 5 % of the RoCEv2 packets lost on receive (root: a network namespace of
//! its own with an nftables rule). rping posts from its main thread while its CQ thread waits in
//! `ibv_get_cq_event`: nobody polls, so a lost packet is resent only if the progress thread runs
//! the retransmission timer the post armed. It once did not (the post was taken for a poller's
//! and did not ring the thread), and rping hung at its first loss.

#[path = "apps/mod.rs"]
#[allow(dead_code)]
mod apps;

use std::process::Command;
use std::thread;
use std::time::Duration;

use apps::{assert_contains, run_bounded, tool, urxe_cmd};

const NS: &str = "urxe-cmloss";
const ADDR: &str = "10.89.0.1";
const COUNT: u32 = 200;
const TIMEOUT: Duration = Duration::from_secs(90);

fn sh(args: &[&str]) -> apps::Output {
    run_bounded(Command::new(args[0]).args(&args[1..]), Duration::from_secs(20)).expect(args[0])
}

/// The namespace with `ADDR` on its loopback and a rule dropping 5 % of the datagrams to port
/// 4791 that do not come from it (CM MADs and RC traffic; the group's own probes pass).
struct LossyNs;

impl LossyNs {
    fn new() -> LossyNs {
        let _ = sh(&["ip", "netns", "del", NS]);
        for cmd in [
            vec!["ip", "netns", "add", NS],
            vec!["ip", "-n", NS, "link", "set", "lo", "up"],
            vec!["ip", "-n", NS, "addr", "add", &format!("{ADDR}/24"), "dev", "lo"],
            vec![
                "ip",
                "netns",
                "exec",
                NS,
                "nft",
                "add table inet urxeloss; add chain inet urxeloss inp { type filter hook input priority 0; }; \
                 add rule inet urxeloss inp udp dport 4791 udp sport != 4791 numgen random mod 100 < 5 counter drop",
            ],
        ] {
            let out = sh(&cmd);
            assert!(out.success(), "{cmd:?}\n{out}");
        }
        LossyNs
    }

    fn dropped(&self) -> u64 {
        let out = sh(&["ip", "netns", "exec", NS, "nft", "list", "table", "inet", "urxeloss"]);
        out.stdout
            .split("counter packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no drop counter in\n{out}"))
    }
}

impl Drop for LossyNs {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", NS]);
    }
}

fn rping(args: &[&str]) -> Command {
    let inner = urxe_cmd(tool("rping"));
    let mut c = Command::new("ip");
    c.args(["netns", "exec", NS, "env"]);
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            c.arg(format!("{}={}", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    c.arg(format!("URXE_ADDR={ADDR}")).arg(tool("rping")).args(args);
    c
}

#[test]
fn rping_completes_with_five_percent_loss_while_its_cq_thread_waits_for_events() {
    let ns = LossyNs::new();
    let count = COUNT.to_string();
    let mut server = rping(&["-s", "-a", ADDR, "-v", "-V", "-C", &count]);
    let srv = thread::spawn(move || run_bounded(&mut server, TIMEOUT).expect("run rping -s"));
    thread::sleep(Duration::from_millis(500));
    let client = run_bounded(&mut rping(&["-c", "-a", ADDR, "-v", "-V", "-C", &count]), TIMEOUT).expect("rping -c");
    let server = srv.join().expect("server thread");
    assert!(client.success() && server.success(), "both rpings must finish\n{server}\n{client}");
    // -V: each side checked every ping's data; -v: the server prints each one it received.
    assert_contains(&server, &format!("rdma-ping-{}: ", COUNT - 1));
    let lost = ns.dropped();
    assert!(lost > 0, "the loss rule must have dropped packets (it dropped {lost})");
    eprintln!("rping -C {COUNT} completed with {lost} packets lost");
}
