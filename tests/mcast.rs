//! UD multicast over urxe (`ibv_attach_mcast`, `rdma_join_multicast`), between processes on one
//! host over loopback, with `LD_LIBRARY_PATH=target/urxe/lib`:
//! - our C program tests/verbs_c/mcast.c (ASan/UBSan): two QPs of one process and one of
//!   another attached to a group, delivery to each, none after detach, the error cases;
//! - Debian's unmodified `mckey` (rdmacm-utils): a sender and two receivers, on three addresses
//!   and within one shared address, every process captured (`URXE_PCAP`) and the captures
//!   checked by `urxe check` and counted: each receiver took exactly the sender's messages, all
//!   UD SENDs to the group's address with destination QPN 0xFFFFFF;
//! - tests/rdmacm_c/mcast_join.c (ASan/UBSan): `rdma_join_multicast` on an event channel and
//!   `rdma_join_multicast_ex` send-only on a synchronous ID, the join events' UD parameters,
//!   delivery (a send-only member sends but receives nothing), leave, and the error cases;
//! - mckey joining a unicast address fails cleanly.
//!
//! Addresses 127.44.0.x, groups 239.44.x.y. Every wait is bounded.
//!
//! ```sh
//! cargo test --release --test mcast -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;
mod urxe_bin;

use harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);
/// mckey's messages per run (`-C`); it sends them without waiting, so all are in flight at once.
const COUNT: usize = 40;

/// librdmacm.so.1 next to libibverbs.so.1: both come from provider/build.sh.
fn libs() -> PathBuf {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let dir = lib_dir();
    DONE.get_or_init(|| {
        if dir.join("librdmacm.so.1").is_file() {
            return Ok(());
        }
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("provider/build.sh")).arg("--release").current_dir(repo_root());
        let out = run_bounded(&mut cmd, Duration::from_secs(900)).map_err(|e| e.to_string())?;
        if out.success() {
            Ok(())
        } else {
            Err(format!("provider/build.sh failed:\n{out}"))
        }
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"));
    dir
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("urxe-mcast-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// A C program of ours built with the sanitizers, as the other C programs are.
fn c_prog(src: &str, libs: &[&str]) -> PathBuf {
    let name = Path::new(src).file_stem().unwrap().to_string_lossy().into_owned();
    let out_path = scratch(&name);
    let mut cmd = Command::new("gcc");
    cmd.args(["-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-g", "-o"])
        .arg(&out_path)
        .arg(repo_root().join(src))
        .args(libs);
    let out = run_bounded(&mut cmd, Duration::from_secs(120)).unwrap_or_else(|e| panic!("could not run gcc: {e}"));
    assert!(out.success(), "gcc failed for {src}:\n{out}");
    out_path
}

/// tests/verbs_c/mcast.c.
fn mcast_program() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| c_prog("tests/verbs_c/mcast.c", &["-libverbs"])).clone()
}

fn with_addr(program: impl AsRef<Path>, addr: &str, args: &[&str]) -> Command {
    libs();
    let mut c = urxe_cmd(program);
    c.env("URXE_ADDR", addr).args(args);
    c
}

/// [`with_addr`] run inside network namespace `ns` (`None`: here).
fn with_addr_in(ns: Option<&str>, program: impl AsRef<Path>, addr: &str, args: &[&str]) -> Command {
    let Some(ns) = ns else { return with_addr(program, addr, args) };
    let mut c = with_addr("ip", addr, &["netns", "exec", ns]);
    c.arg(program.as_ref()).args(args);
    c
}

/// A network namespace with a veth pair whose ends hold the given addresses (deleted on drop).
struct Netns(String);

impl Netns {
    fn new(name: &str, a: &str, b: &str) -> Netns {
        let ns = Netns(format!("{name}-{}", std::process::id()));
        let ip = |args: &[&str]| {
            let out = run_bounded(Command::new("ip").args(args), Duration::from_secs(20)).expect("run ip");
            assert!(out.success(), "ip {args:?} failed (this test needs root)\n{out}");
        };
        let n = ns.0.as_str();
        ip(&["netns", "add", n]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ip(&["-n", n, "link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
        ip(&["-n", n, "addr", "add", a, "dev", "v0", "nodad"]);
        ip(&["-n", n, "addr", "add", b, "dev", "v1", "nodad"]);
        ip(&["-n", n, "link", "set", "v0", "up"]);
        ip(&["-n", n, "link", "set", "v1", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run_bounded(Command::new("ip").args(["netns", "del", &self.0]), Duration::from_secs(20));
    }
}

#[test]
fn verbs_two_qps_of_one_process_and_one_of_another_get_every_message_and_none_after_detach() {
    let mut cmd = with_addr(mcast_program(), "127.44.0.10", &["239.44.1.1"]);
    let out = run_bounded(&mut cmd, TIMEOUT).expect("run mcast");
    eprintln!("{out}");
    assert!(out.success(), "mcast must exit 0\n{out}");
    assert_lacks(&out, "FAIL");
    assert_lacks(&out, "ERROR: AddressSanitizer");
    assert_contains(&out, "both processes passed");
    for line in [
        "A/a1 round 1: 16 messages received and verified",
        "A/a2 round 1: 16 messages received and verified",
        "B/b1 round 1: 16 messages received and verified",
        "A/a1 round 2: 16 messages received and verified",
        "B/b1 round 2: 16 messages received and verified",
        "A/a2 after_detach: 0 messages",
        "A/a1 (own) round 3: 16 messages received and verified",
        "B/b1 round 3: 16 messages received and verified",
        "A/a1 (own) round 4: 16 messages received and verified",
        "B/b1 after_detach: 0 messages",
        "A/a1 (from a3) round 5: 16 messages received and verified",
        "A/a3 own_blocked: 0 messages",
        "PASS A block_self_lb_rc_einval",
        "PASS A attach_rc_qp_einval",
        "PASS A attach_unicast_gid_einval",
        "PASS A detach_unattached_einval",
        "PASS A destroy_attached_ebusy",
        "PASS A detach_twice_einval",
        "PASS A device_mcast_limits",
    ] {
        assert_contains(&out, line);
    }
}

/// What `urxe check` says about one capture: it passes, and how many UD SENDs to `group`
/// with destination QPN 0xFFFFFF it lists.
fn check_capture(pcap: &Path, group: &str) -> usize {
    let mut cmd = Command::new(urxe_bin::urxe());
    cmd.arg("check").arg(pcap);
    let out = run_bounded(&mut cmd, TIMEOUT).expect("run urxe check");
    assert!(out.success() && out.stdout.contains(": PASS:"), "urxe check must pass {}\n{out}", pcap.display());
    let to_group = if group.contains(':') { format!("> [{group}]:4791 ") } else { format!("> {group}:4791 ") };
    let lines: Vec<&str> = out.stdout.lines().filter(|l| l.contains(&to_group)).collect();
    for l in &lines {
        assert!(
            l.contains(" UD SEND_ONLY_WITH_IMMEDIATE qp=0xffffff ")
                && l.contains("qkey=0x1234567")
                && l.contains("icrc=ok"),
            "a packet to the group is not a UD SEND to QPN 0xFFFFFF with Q_Key RDMA_UDP_QKEY and a good ICRC: {l}"
        );
    }
    lines.len()
}

/// One mckey sender and two receivers: `addrs` = (sender, receiver 1, receiver 2).
fn mckey_run(tag: &str, group: &str, addrs: [&str; 3]) {
    mckey_run_in(None, tag, group, addrs)
}

fn mckey_run_in(ns: Option<&str>, tag: &str, group: &str, addrs: [&str; 3]) {
    let mckey = tool("mckey");
    let count = COUNT.to_string();
    let pcaps: Vec<PathBuf> = (0..3).map(|i| scratch(&format!("{tag}-{i}.pcap"))).collect();
    let receivers: Vec<_> = (1..3)
        .map(|i| {
            let mut c = with_addr_in(ns, &mckey, addrs[i], &["-m", group, "-b", addrs[i], "-C", &count]);
            c.env("URXE_PCAP", &pcaps[i]);
            thread::spawn(move || run_bounded(&mut c, TIMEOUT).expect("run mckey receiver"))
        })
        .collect();
    // The receivers join within a fraction of a second; the sender waits 3 s after its own
    // join before it sends (mckey's pause "to give SM chance to configure switches").
    thread::sleep(Duration::from_millis(500));
    let mut s = with_addr_in(ns, &mckey, addrs[0], &["-m", group, "-b", addrs[0], "-s", "-C", &count]);
    s.env("URXE_PCAP", &pcaps[0]);
    let sender = run_bounded(&mut s, TIMEOUT).expect("run mckey sender");
    let recv: Vec<_> = receivers.into_iter().map(|h| h.join().expect("receiver thread")).collect();
    let all = format!("{sender}\n{}\n{}", recv[0], recv[1]);
    eprintln!("{all}");
    let gid = if group.contains(':') { group.to_string() } else { format!("::ffff:{group}") };
    let mgid = format!("mckey: joined dgid: {gid} mlid 0x0 sl 0");
    for o in [&sender, &recv[0], &recv[1]] {
        assert!(o.success(), "every mckey must exit 0\n{all}");
        assert_contains(o, &mgid);
        assert_contains(o, "data transfers complete");
        assert_contains(o, "return status 0");
    }
    // A receiver completes only once it has polled `-C` completions for its `-C` receives; its
    // capture shows exactly the sender's messages arriving. The sender's shows them leaving
    // and coming back to it (its QP is attached too, as mckey's are: it has no receive posted,
    // so they are dropped) — those it read before it exited (tests/verbs_c/mcast.c checks the
    // loopback itself): mckey leaves right after its last
    // send completes, and copies still queued on its socket then are never read.
    let sent = check_capture(&pcaps[0], group);
    assert!(
        (COUNT..=2 * COUNT).contains(&sent),
        "the sender's capture: {COUNT} sent + up to {COUNT} looped back, got {sent}\n{all}"
    );
    for p in &pcaps[1..] {
        assert_eq!(check_capture(p, group), COUNT, "a receiver's capture ({}) \n{all}", p.display());
    }
}

#[test]
fn mckey_sender_reaches_two_receivers_on_other_addresses() {
    mckey_run("three", "239.44.1.2", ["127.44.0.11", "127.44.0.12", "127.44.0.13"]);
}

#[test]
fn mckey_sender_reaches_two_receivers_sharing_its_address() {
    mckey_run("shared", "239.44.1.3", ["127.44.0.14"; 3]);
}

/// IPv6 (a group ff0e::/16, beyond what the kernel's rdma_cm does on RoCE v2) across a veth
/// pair: the sender on one end, the receivers sharing the other end's address. Each receiver
/// takes the messages once (its socket is bound to its interface, so the copy that the
/// sender's end also gets stays out), the sender its own copies once.
#[test]
fn mckey_over_ipv6_across_a_veth_pair() {
    let ns = Netns::new("hmc-v6", "fd44::1/64", "fd44::2/64");
    mckey_run_in(Some(&ns.0), "v6", "ff0e::44:1", ["fd44::1", "fd44::2", "fd44::2"]);
}

#[test]
fn rdma_cm_joins_full_and_send_only_members_leave_and_refuse_bad_arguments() {
    let bin = c_prog("tests/rdmacm_c/mcast_join.c", &["-lrdmacm", "-libverbs"]);
    let mut cmd = with_addr(bin, "127.44.0.17", &["127.44.0.17", "239.44.1.4"]);
    let out = run_bounded(&mut cmd, TIMEOUT).expect("run mcast_join");
    eprintln!("{out}");
    assert!(out.success(), "mcast_join must exit 0\n{out}");
    assert_lacks(&out, "FAIL");
    assert_lacks(&out, "ERROR: AddressSanitizer");
    assert_contains(&out, "17 checks, 0 failed");
}

#[test]
fn mckey_joining_a_unicast_address_fails_cleanly() {
    let mut c = with_addr(tool("mckey"), "127.44.0.15", &["-m", "127.44.0.16", "-b", "127.44.0.15", "-C", "1"]);
    let out = run_bounded(&mut c, TIMEOUT).expect("run mckey");
    eprintln!("{out}");
    assert!(!out.success() && !out.timed_out && out.signal().is_none(), "mckey must fail, not hang or crash\n{out}");
    assert_contains(&out, "mckey: failure joining: Invalid argument");
}
