//! Issue #37, the host side: neither a remote sender nor another local user can make a urxe
//! process hold host memory for nothing, break its packets, deny it a device, forge its
//! counters or read its multicast datagrams, and a firewall drop is a lost packet, not a
//! failure (see docs/security.md).
//!
//! Every test runs its urxe processes in a network namespace of its own (`sech-*`), with a
//! runtime directory of its own; the attacking user is uid 12345 (`setpriv`), the victim root,
//! as the tests run. Floods are bounded in count and time.

#[path = "apps/mod.rs"]
#[allow(dead_code)]
mod harness;
mod urxe_bin;

use harness::*;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The attacking local user.
const ATTACKER: &str = "12345";
const PY: &str = "/usr/bin/python3";

/// A network namespace of this test, deleted on drop.
struct Ns(String);

impl Ns {
    fn new(what: &str) -> Ns {
        let name = format!("sech-{what}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let ok = Command::new("ip").args(["netns", "add", &name]).status().unwrap().success()
            && Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]).status().unwrap().success();
        assert!(ok, "could not create network namespace {name} (iproute2, root)");
        Ns(name)
    }

    /// `cmd` run inside the namespace (program, arguments and environment kept).
    fn cmd(&self, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }

    fn run(&self, cmd: &Command, timeout: Duration) -> Output {
        run_bounded(&mut self.cmd(cmd), timeout).unwrap()
    }

    /// `urxe stat [pid]` in the namespace.
    fn stat(&self, pid: u32) -> Output {
        let mut c = Command::new(urxe_bin::urxe());
        c.args(["stat", &pid.to_string()]);
        self.run(&c, Duration::from_secs(10))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A runtime directory of this test.
fn runtime_dir(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sech-rt-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A urxe program with the test's runtime directory.
fn victim(program: impl AsRef<std::path::Path>, rt: &PathBuf) -> Command {
    let mut c = urxe_cmd(program);
    c.env("URXE_RUNTIME_DIR", rt).env_remove("XDG_RUNTIME_DIR");
    c
}

/// `python3 -c script args` as the attacking user.
fn as_attacker(script: &str, args: &[String]) -> Command {
    let mut c = Command::new("setpriv");
    c.args([&format!("--reuid={ATTACKER}"), &format!("--regid={ATTACKER}"), "--clear-groups", PY, "-c", script])
        .args(args);
    c
}

/// A long-running urxe process in `ns` (an ibv_rc_pingpong server waiting for a client) and
/// its `urxe stat` text once its device is up. The caller kills and waits for it.
#[allow(clippy::zombie_processes)] // returned to the caller, who waits
fn start_waiting_server(ns: &Ns, rt: &PathBuf, port: u16) -> (std::process::Child, String) {
    let mut srv = victim(tool("ibv_rc_pingpong"), rt);
    srv.args(["-d", DEV, "-g", "1", "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = ns.cmd(&srv).spawn().unwrap();
    // `ip netns exec` execs the program: the child's pid is the server's.
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = ns.stat(pid).stdout;
        if text.contains("group slot") {
            return (child, text);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server's device never came up: {text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A counter of `urxe stat` (`name: N` or `name N,`).
fn text_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
        .or_else(|| text.split(&format!("{name} ")).nth(1).and_then(|r| r.split([',', '\n']).next()))
        .and_then(|v| v.trim().parse().ok())
}

/// Sum of the receive queues (bytes) of the UDP sockets on `addr`:4791, from /proc/net/udp of
/// the namespace.
fn rx_queued(ns: &Ns, addr: IpAddr) -> u64 {
    let mut c = Command::new("cat");
    c.arg("/proc/net/udp");
    let out = ns.run(&c, Duration::from_secs(5));
    let IpAddr::V4(a) = addr else { panic!("IPv4 expected") };
    let want = format!("{:08X}:12B7", u32::from_ne_bytes(a.octets()));
    out.stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 4 && f[1] == want).then(|| u64::from_str_radix(f[4].split(':').nth(1)?, 16).ok()).flatten()
        })
        .sum()
}

/// Host-wide UDP memory (pages), /proc/net/sockstat `UDP: inuse N mem M`.
fn udp_mem_pages() -> u64 {
    let t = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    t.lines().find(|l| l.starts_with("UDP:")).and_then(|l| text_field(l.trim_start_matches("UDP:"), "mem")).unwrap()
}

/// Sends `count` RoCE-shaped datagrams (UD SEND to QPN `slot << 16 | 0x11`, slots taken in
/// turn) to `addr`:4791, for at most 30 s.
const SLOT_FLOOD: &str = r#"
import socket, sys, time
addr, count = sys.argv[1], int(sys.argv[2])
slots = [int(s) for s in sys.argv[3].split(',')]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
pkts = [bytes([0x64, 0, 0xff, 0xff, 0, slot, 0, 0x11]) + bytes(36) for slot in slots]
end = time.time() + 30
sent = 0
while sent < count and time.time() < end:
    try:
        s.sendto(pkts[sent % len(pkts)], (addr, 4791))
    except OSError:
        pass
    sent += 1
print('sent=%d' % sent)
"#;

/// Item 2: datagrams for slots nobody owns are not kept: 150,000 of them to three slots that
/// never had a member and one whose member was killed leave no receive queue on the address
/// once the flood is over, and urxe stat counts them (strays at the default slot, drained
/// from the dead member's slot).
#[test]
fn datagrams_for_unowned_slots_hold_no_host_memory() {
    let _g = heavy_lock();
    let ns = Ns::new("slots");
    let rt = runtime_dir("slots");
    let (mut srv, text) = start_waiting_server(&ns, &rt, 18951);
    let pid = srv.id();
    let addr: IpAddr = text.lines().find_map(|l| l.strip_prefix("address ")).unwrap().trim().parse().unwrap();
    assert!(text.contains("group slot 0 of 64"), "{text}");
    // A member of slot 1 that dies (SIGKILL): its slot keeps the buffer it had, and the
    // program names it until the survivor sees datagrams there.
    let (mut dead, text1) = start_waiting_server(&ns, &rt, 18952);
    assert!(text1.contains("group slot 1 of 64"), "{text1}");
    let _ = dead.kill();
    let _ = dead.wait();
    let before = udp_mem_pages();
    let mut flood = Command::new(PY);
    flood.args(["-c", SLOT_FLOOD, &addr.to_string(), "150000", "1,5,9,33"]);
    let out = ns.run(&flood, Duration::from_secs(60));
    assert!(out.success() && out.stdout.contains("sent=150000"), "{out}");
    let during = udp_mem_pages();
    // The member drains what reached it (at once) and, within its one-second watch, what a
    // slot without a member may hold: give it three.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut queued = rx_queued(&ns, addr);
    while queued > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        queued = rx_queued(&ns, addr);
    }
    let after = udp_mem_pages();
    let stat = ns.stat(pid).stdout;
    let _ = srv.kill();
    let _ = srv.wait();
    let _ = std::fs::remove_dir_all(&rt);
    let counter = |name| text_field(&stat, name).unwrap_or(0);
    let (strays, drained) = (counter("rx_group_strays"), counter("unowned_drops"));
    eprintln!(
        "150000 datagrams to slots 1 (its member killed), 5, 9, 33 of {addr}: {queued} bytes still queued on its sockets; \
         host UDP memory {before} -> {during} -> {after} pages; rx_group_strays {strays}, unowned_drops {drained}"
    );
    assert_eq!(queued, 0, "datagrams for unowned slots still held in the kernel\n{stat}");
    assert!(strays + drained >= 15_000, "the drops are not counted in urxe stat: {strays} + {drained}\n{stat}");
    assert!(drained > 0, "nothing drained from the dead member's slot\n{stat}");
    assert!(stat.contains("unowned_drops") && stat.contains("rx_group_strays"), "{stat}");
}

/// Binds UDP on every port of `ports` ("lo-hi") on each address, as long as the file
/// `argv[3]` does not exist (at most 120 s); prints `bound=N` once bound.
const PORT_SQUAT: &str = r#"
import os, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
lo, hi = [int(p) for p in sys.argv[2].split('-')]
socks = []
for a in sys.argv[1].split(','):
    for p in range(lo, hi + 1):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind((a, p))
            socks.append(s)
        except OSError:
            s.close()
print('bound=%d' % len(socks), flush=True)
end = time.time() + 120
while not os.path.exists(sys.argv[3]) and time.time() < end:
    time.sleep(0.05)
"#;

/// Starts `script` as the attacker in `ns` and waits for its first line (bound=...).
fn start_squatter(ns: &Ns, script: &str, args: &[String]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = ns.cmd(&as_attacker(script, args)).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("bound="), "the squatter did not start: {line:?}");
    (child, line)
}

/// Item 3: another user holding the flow source ports of a victim's address (QP1's 55410 and
/// every data-flow port, 49152-65535) does not break its traffic: the packets leave from
/// 4791 with an ICRC computed for 4791, `urxe check` passes them and rping's data arrives.
#[test]
fn squatted_flow_ports_leave_packets_with_a_valid_icrc() {
    let _g = heavy_lock();
    let ns = Ns::new("ports");
    let rt = runtime_dir("ports");
    std::fs::create_dir_all(&rt).unwrap();
    let (srv_addr, cli_addr) = ("127.37.0.2", "127.37.0.3");
    let stop = rt.join("stop");
    let (squat, bound) =
        start_squatter(&ns, PORT_SQUAT, &[srv_addr.into(), "49152-65535".into(), stop.display().to_string()]);
    let (squat2, _) = start_squatter(
        &ns,
        PORT_SQUAT,
        &[cli_addr.into(), "55410-55410".into(), rt.join("stop").display().to_string()],
    );
    let (sp, cp) = (rt.join("server.pcap"), rt.join("client.pcap"));
    let rping = |addr: &str, pcap: &PathBuf, args: &[&str]| {
        let mut c = victim(tool("rping"), &rt);
        c.env("URXE_ADDR", addr).env("URXE_PCAP", pcap).args(args);
        ns.cmd(&c)
    };
    let mut srv = rping(srv_addr, &sp, &["-s", "-C", "5", "-p", "7351", "-a", srv_addr]);
    let srv = srv.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let c = run_bounded(&mut rping(cli_addr, &cp, &["-c", "-a", srv_addr, "-C", "5", "-V", "-p", "7351"]), RUN_TIMEOUT)
        .unwrap();
    let s = finish(srv, RUN_TIMEOUT);
    std::fs::write(&stop, b"").unwrap();
    for mut q in [squat, squat2] {
        let _ = q.wait();
    }
    assert!(c.success() && s.0, "rping with its ports squatted ({bound})\nserver: {}\n{c}", s.1);
    let mut checked = String::new();
    for pcap in [&sp, &cp] {
        let mut check = Command::new(urxe_bin::urxe());
        check.arg("check").arg(pcap);
        let out = run_bounded(&mut check, Duration::from_secs(60)).unwrap();
        assert!(out.success(), "urxe check failed on {}\n{out}", pcap.display());
        assert_contains(&out, "0 bad");
        checked.push_str(out.stdout.lines().find(|l| l.contains(" ok, ")).unwrap_or(""));
        checked.push('\n');
        if pcap == &sp {
            // The server's packets (CM and data) left from 4791, its flow ports being taken.
            assert_contains(&out, &format!("{srv_addr}:4791 > {cli_addr}:4791"));
            assert_lacks(&out, &format!("{srv_addr}:55410 >"));
        }
    }
    eprintln!("squatter {bound}; urxe check:\n{checked}");
    let _ = std::fs::remove_dir_all(&rt);
}

/// Waits for `child` at most `timeout` (then kills it): whether it exited 0, and its output.
fn finish(mut child: std::process::Child, timeout: Duration) -> (bool, String) {
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), format!("{:?}\n{text}", out.status))
}

/// Item 4: another user pre-creating the runtime directories root would use in /tmp
/// (`/tmp/urxe-0` and its old fallbacks) and holding UDP 4791 on the first 512 loopback
/// candidates of root's zero-configuration walk does not deny root a device (its directory
/// is /run/urxe); nor does pre-creating `/tmp/urxe-23456` and `-1` deny uid 23456, a user
/// with no home (it walks on to `-2`). Runs with a private /tmp and /run (a mount namespace
/// of its own) so the host's stay untouched.
#[test]
fn squatted_runtime_dirs_and_loopback_addresses_deny_nothing() {
    let _g = heavy_lock();
    let ns = Ns::new("squat");
    let script = format!(
        r#"set -e
# A checkout under /tmp has its libraries there, which the tmpfs below hides: reach them
# through /mnt (bound in this mount namespace only).
mount --bind "$LD_LIBRARY_PATH" /mnt
export LD_LIBRARY_PATH=/mnt
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
userns=$(stat -L -c %i /proc/self/ns/user)
setpriv --reuid={ATTACKER} --regid={ATTACKER} --clear-groups sh -c "mkdir -m 0777 /tmp/urxe-0 /tmp/urxe-0-u$userns /tmp/urxe-0-1 /tmp/urxe-23456 /tmp/urxe-23456-1"
ls -ld /tmp/urxe-0*
setpriv --reuid={ATTACKER} --regid={ATTACKER} --clear-groups {PY} -c '
import socket, sys, time
socks = []
for k in range(512):
    v, left = 0, k
    while True:
        d = v & 0xff
        if d not in (0, 255):
            if left == 0:
                break
            left -= 1
        v = (v + 1) & 0xffff
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.77.%d.%d" % (v >> 8, v & 0xff), 4791))
    socks.append(s)
print("bound=%d" % len(socks), flush=True)
time.sleep(30)
' > /tmp/squat.out &
squatter=$!
for i in $(seq 100); do grep -q bound= /tmp/squat.out 2>/dev/null && break; sleep 0.1; done
cat /tmp/squat.out
env -u URXE_RUNTIME_DIR -u XDG_RUNTIME_DIR -u URXE_ADDR ibv_devinfo -v
echo "uid 23456 (no home):"
env -u URXE_RUNTIME_DIR -u XDG_RUNTIME_DIR -u URXE_ADDR setpriv --reuid=23456 --regid=23456 --clear-groups ibv_devinfo
stat -c 'dir %u %a %n' /run/urxe /tmp/urxe-23456-2
kill $squatter
"#
    );
    let mut c = urxe_cmd("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    let out = ns.run(&c, Duration::from_secs(60));
    eprintln!("{out}");
    assert!(out.success(), "ibv_devinfo failed under squatting\n{out}");
    assert_contains(&out, "bound=512");
    assert_eq!(out.stdout.matches("hca_id:\turxe0").count(), 2, "root and uid 23456 both have the device\n{out}");
    assert_contains(&out, "dir 0 700 /run/urxe\n");
    assert_contains(&out, "dir 23456 700 /tmp/urxe-23456-2\n");
    // Root's registry went where no other user can create anything.
    assert_lacks(&out, "urxe group registry directory");
    let gid = out.stdout.lines().find(|l| l.contains("GID[  0]:")).unwrap_or_default().to_string();
    // Candidates 0..511 are 127.77.0.1 ... 127.77.2.4: the first free one is the 513th.
    assert!(gid.contains("::ffff:127.77.2.5,"), "the first candidate the attacker does not hold: {gid}");
}

/// A fake stats server: binds `urxe-stat-<argv[1]>-127.0.0.1-forged` (claiming the victim's
/// pid) and answers every connection with forged text, for at most 30 s.
const FORGER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind('\0urxe-stat-%s-127.0.0.1-forged' % sys.argv[1])
s.listen(16)
s.settimeout(0.2)
print('bound=1', flush=True)
end = time.time() + 30
while time.time() < end:
    try:
        c, _ = s.accept()
    except OSError:
        continue
    c.sendall(b'pid %s\nFORGED counters\n' % sys.argv[1].encode())
    c.close()
"#;

/// Item 5: another user serving a stats socket that claims the victim's pid is not believed:
/// `urxe stat <pid>` prints the victim's own counters and names the forgery.
#[test]
fn a_forged_stats_socket_is_not_believed() {
    let _g = heavy_lock();
    let ns = Ns::new("stat");
    let rt = runtime_dir("stat");
    let (mut srv, _) = start_waiting_server(&ns, &rt, 18953);
    let pid = srv.id();
    let (mut forger, _) = start_squatter(&ns, FORGER, &[pid.to_string()]);
    let out = ns.stat(pid);
    let _ = forger.kill();
    let _ = forger.wait();
    let _ = srv.kill();
    let _ = srv.wait();
    let _ = std::fs::remove_dir_all(&rt);
    eprintln!("{out}");
    assert_lacks(&out, "FORGED");
    assert_contains(&out, &format!("pid {pid}\n"));
    assert_contains(&out, "rx_datagrams");
    assert!(out.stderr.contains("forged") && out.stderr.contains(&format!("uid {ATTACKER}")), "{out}");
}

/// Binds `argv[1]`:4791 with SO_REUSEADDR and SO_REUSEPORT, joins the group on `argv[2]`'s
/// interface, and counts the datagrams it receives in 2 s.
const MCAST_SPY: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    s.bind((sys.argv[1], 4791))
except OSError as e:
    print('bound=0 errno=%d' % e.errno, flush=True)
    sys.exit(0)
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(sys.argv[1]) + socket.inet_aton(sys.argv[2]))
print('bound=1', flush=True)
s.settimeout(0.1)
got, end = 0, time.time() + 2
while time.time() < end:
    try:
        s.recv(2048)
        got += 1
    except OSError:
        pass
print('got=%d' % got, flush=True)
"#;

/// Item 9: another user cannot bind a group a urxe process receives on, so it reads none of
/// its datagrams (the same user's processes still share the group). Runs in the test's own
/// network namespace (run the tests in a private one).
#[test]
fn another_user_cannot_receive_a_users_multicast_group() {
    use urxe::transport::socket::{RecvBatch, RoceSocket};
    let _g = heavy_lock();
    let (local, group): (IpAddr, IpAddr) = ("127.38.0.1".parse().unwrap(), "239.38.0.9".parse().unwrap());
    let mine = RoceSocket::bind_multicast(group, local).unwrap();
    let mine2 = RoceSocket::bind_multicast(group, local).expect("the same user shares the group");
    let mut spy = as_attacker(MCAST_SPY, &[group.to_string(), local.to_string()]);
    let spy = spy.stdout(Stdio::piped()).spawn().unwrap();
    let tx = RoceSocket::bind(SocketAddr::new(local, 0)).unwrap();
    // The spy binds and joins within its first few hundred ms; 50 datagrams over 1 s.
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..50u8 {
        tx.send_to(&[i; 64], SocketAddr::new(group, 4791)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, out) = finish(spy, Duration::from_secs(10));
    let mut b = RecvBatch::new();
    let (n1, n2) = (mine.recv_batch(&mut b).unwrap(), mine2.recv_batch(&mut b).unwrap());
    eprintln!("uid {ATTACKER}: {out}; our two sockets received {n1} and {n2} (first batch)");
    assert!(n1 > 0 && n2 > 0, "the same user's sockets receive the group");
    let got: u64 = out.split("got=").nth(1).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0);
    assert_eq!(got, 0, "another user read {got} of our group's datagrams: {out}");
    assert!(out.contains("bound=0"), "another user bound our group's address: {out}");
}

/// Item 10: with an nftables rule in the namespace dropping 10 % of UDP 4791 output (sendmsg
/// then fails with EPERM), `ibv_devinfo` finds the device in every run (10 or more, until 3
/// packets were dropped): the group's probe is sent again instead of failing the join.
#[test]
fn a_firewall_dropping_a_tenth_of_4791_output_never_hides_the_device() {
    let _g = heavy_lock();
    let ns = Ns::new("nft");
    let rules = "table inet sech {\n chain out {\n  type filter hook output priority 0;\n  \
                 udp dport 4791 numgen random mod 10 0 counter drop\n }\n}\n";
    let mut nft = Command::new("nft");
    nft.args(["-f", "-"]);
    let mut child = ns.cmd(&nft).stdin(Stdio::piped()).spawn().expect("nft (nftables) is installed");
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
    }
    assert!(child.wait().unwrap().success(), "nft refused the rule");
    let rt = runtime_dir("nft");
    let dropped = || -> u64 {
        let mut list = Command::new("nft");
        list.args(["list", "ruleset"]);
        let out = ns.run(&list, Duration::from_secs(5));
        out.stdout.split("counter packets ").nth(1).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap()
    };
    // At least 10 runs, and on until the rule has dropped 3 packets (a run sends 2 or 3 to
    // port 4791; each drop failed a run before the fix), 40 runs at most.
    let (mut runs, mut found) = (0, 0);
    let mut failures = String::new();
    while runs < 10 || (dropped() < 3 && runs < 40) {
        let out = ns.run(&victim(tool("ibv_devinfo"), &rt), Duration::from_secs(30));
        runs += 1;
        if out.success() && out.stdout.contains("hca_id:\turxe0") {
            found += 1;
        } else {
            failures.push_str(&out.to_string());
        }
    }
    let drops = dropped();
    let _ = std::fs::remove_dir_all(&rt);
    eprintln!("ibv_devinfo found urxe0 in {found}/{runs} runs; the rule dropped {drops} packets");
    assert!(drops >= 1, "the rule never dropped anything: nothing shown");
    assert_eq!(found, runs, "{failures}");
}
