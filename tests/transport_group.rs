//! Shared address groups (transport::group) with real processes, real sockets and network
//! namespaces. No libtest harness: `main` runs each scenario in a fresh network namespace
//! (`unshare --net`, needs root), and the scenarios start member processes by re-running this
//! binary with `URXE_GROUP_ROLE=member`, or Debian's ibv_rc_pingpong / ib_send_bw over urxe's
//! libibverbs.so.1 (target/urxe/lib, built with provider/build.sh if missing). Every wait is
//! bounded.
//!
//! ```sh
//! cargo test --release --test transport_group              # every scenario
//! cargo test --release --test transport_group -- pairs     # scenarios whose name has "pairs"
//! ```

mod urxe_bin;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use urxe::transport::group::{Delivery, GroupConfig, Member};

const ADDR: &str = "10.77.1.1";
const NOBODY: u32 = 65534;

fn main() {
    if std::env::var_os("URXE_GROUP_ROLE").is_some() {
        member();
        return;
    }
    let scenarios: &[(&str, fn())] = &[
        ("eight_members_get_their_traffic_and_a_crashed_slot_is_taken_over", eight_members_and_a_crash),
        ("nobody_runs_a_group_of_four", nobody_group),
        ("two_users_on_one_address_each_get_a_clear_outcome", two_users),
        ("a_kernel_socket_on_4791_is_named", kernel_socket),
        ("registry_and_address_problems_are_named", setup_problems),
        ("eight_processes_four_pairs_of_pingpong_and_send_bw_at_once", four_pairs),
        ("sigkill_one_of_eight_mid_transfer_the_rest_finish_and_the_slot_is_reused", four_pairs_and_a_crash),
        ("uid_65534_pairs_and_a_second_uid_on_the_address", apps_two_users),
        ("ipv6_group_and_strays_past_the_pool_are_recognised", ipv6_and_strays),
    ];
    if let Ok(name) = std::env::var("URXE_GROUP_INNER") {
        let (_, f) = scenarios.iter().find(|(n, _)| *n == name).expect("known scenario");
        sh("ip link set lo up");
        sh(&format!("ip addr add {ADDR}/32 dev lo"));
        f();
        return;
    }
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "transport_group needs root for network namespaces (unshare --net)");
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let mut failed = 0;
    for (name, _) in scenarios {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let start = Instant::now();
        let st = Command::new("timeout")
            .args(["120", "unshare", "--net", "--"])
            .arg(std::env::current_exe().unwrap())
            .env("URXE_GROUP_INNER", name)
            .status()
            .expect("run unshare");
        println!(
            "test {name} ... {} ({:.1} s)",
            if st.success() { "ok" } else { "FAILED" },
            start.elapsed().as_secs_f64()
        );
        failed += !st.success() as u32;
    }
    assert_eq!(failed, 0, "{failed} scenario(s) failed");
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd} failed");
}

// ---------------------------------------------------------------- member process

/// A member: joins, reports, then prints every datagram of its slot socket and obeys stdin
/// commands (`listen <sid>`, `members`, `quit`/EOF) for at most 60 s.
fn member() {
    let addr: IpAddr = std::env::var("URXE_GROUP_ADDR").unwrap().parse().unwrap();
    let cfg = GroupConfig::from_env(addr);
    let m = match Member::join(&cfg) {
        Ok(m) => m,
        Err(e) => {
            println!("error errno={} msg={e}", e.errno());
            std::process::exit(3);
        }
    };
    let qpn_start = m.reserve_qpns(1000).unwrap();
    println!(
        "joined slot={} created={} drops={} qpn_start={} pid={}",
        m.slot(),
        m.created() as u8,
        m.takeover_drops(),
        qpn_start,
        std::process::id()
    );
    let end = Instant::now() + Duration::from_secs(60);
    let stdin = std::io::stdin();
    let mut line = String::new();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < end {
        let mut pfd = [
            libc::pollfd { fd: m.socket().as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds that live across the call.
        unsafe { libc::poll(pfd.as_mut_ptr(), 2, 200) };
        if pfd[0].revents != 0 {
            // SAFETY: `buf` is valid for writes of its length.
            let n =
                unsafe { libc::recv(pfd[0].fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
            if n > 0 {
                let d = &buf[..n as usize];
                let qpn = if d.len() >= 8 { u32::from_be_bytes([0, d[5], d[6], d[7]]) } else { 0 };
                let kind = match m.classify(d) {
                    Delivery::Mine => "mine",
                    Delivery::Probe => "probe",
                    Delivery::Stray => "stray",
                };
                println!("got qpn={qpn:#08x} len={} kind={kind}", d.len());
            }
        }
        if pfd[1].revents != 0 {
            line.clear();
            if stdin.lock().read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["listen", sid] => {
                    m.listen(u64::from_str_radix(sid.trim_start_matches("0x"), 16).unwrap()).unwrap();
                    println!("listening");
                }
                ["members"] => {
                    let ms = m.members().unwrap();
                    let list: Vec<String> = ms.iter().map(|i| format!("{}:{}", i.slot, i.pid)).collect();
                    println!("members {}", list.join(","));
                }
                ["quit"] => break,
                _ => println!("unknown command"),
            }
        }
    }
    drop(m);
    println!("left");
}

// ---------------------------------------------------------------- driver side

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    slot: u8,
    joined: String,
}

fn spawn(dir: &str, uid: Option<u32>, extra: &[(&str, &str)]) -> (Child, Option<ChildStdin>, Receiver<String>) {
    spawn_on(ADDR, dir, uid, extra)
}

fn spawn_on(
    addr: &str,
    dir: &str,
    uid: Option<u32>,
    extra: &[(&str, &str)],
) -> (Child, Option<ChildStdin>, Receiver<String>) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match uid {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={u}"), format!("--regid={u}"), "--clear-groups".into()]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.env("URXE_GROUP_ROLE", "member")
        .env("URXE_GROUP_ADDR", addr)
        .env("URXE_RUNTIME_DIR", dir)
        .env("URXE_GROUP_SLOTS", "16")
        .env_remove("URXE_GROUP_INNER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let stdin = child.stdin.take();
    (child, stdin, rx)
}

fn expect(rx: &Receiver<String>, prefix: &str, secs: u64) -> String {
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(l) if l.starts_with(prefix) => l,
        Ok(l) => panic!("expected `{prefix}...`, got `{l}`"),
        Err(_) => panic!("no `{prefix}...` line within {secs} s"),
    }
}

/// Nothing more arrives within `ms`.
fn quiet(rx: &Receiver<String>, ms: u64) {
    if let Ok(l) = rx.recv_timeout(Duration::from_millis(ms)) {
        panic!("unexpected line `{l}`");
    }
}

fn field(line: &str, key: &str) -> u64 {
    let v = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    v.parse().unwrap()
}

fn join(dir: &str, uid: Option<u32>) -> Proc {
    let (child, stdin, lines) = spawn(dir, uid, &[]);
    let joined = expect(&lines, "joined", 20);
    Proc { child, stdin, lines, slot: field(&joined, "slot") as u8, joined }
}

impl Proc {
    fn say(&mut self, cmd: &str) {
        writeln!(self.stdin.as_mut().unwrap(), "{cmd}").unwrap();
    }
    fn quit(mut self) {
        drop(self.stdin.take());
        expect(&self.lines, "left", 10);
        assert!(self.child.wait().unwrap().success());
    }
}

fn sender() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").unwrap()
}

fn dst() -> SocketAddr {
    SocketAddr::new(ADDR.parse().unwrap(), 4791)
}

fn data(qpn: u32) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    b[0] = 0x04;
    b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    b
}

/// A CM MAD on QP1: `attr` with a 4-byte or 8-byte field at `at`.
fn cm(attr: u16, at: usize, field: &[u8]) -> Vec<u8> {
    let mut b = data(1);
    b[0] = 0x64;
    b.resize(12 + 8 + 256 + 4, 0);
    b[20] = 1;
    b[21] = 7;
    b[36..38].copy_from_slice(&attr.to_be_bytes());
    b[at..at + field.len()].copy_from_slice(field);
    b
}

fn tmpdir(tag: &str, uid: u32) -> String {
    let d = format!("/tmp/urxe-group-test-{}-{tag}-{uid}", std::process::id());
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn no_socket_on_4791() -> bool {
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let t = std::fs::read_to_string("/proc/net/udp").unwrap();
        if !t.lines().any(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(":12B7"))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn by_slot(ps: &mut [Proc], slot: u8) -> &mut Proc {
    ps.iter_mut().find(|p| p.slot == slot).unwrap()
}

// ---------------------------------------------------------------- scenarios

fn eight_members_and_a_crash() {
    let dir = tmpdir("eight", 0);
    // All eight join at once: the join lock orders them.
    let spawned: Vec<_> = (0..8).map(|_| spawn(&dir, None, &[])).collect();
    let mut ps: Vec<Proc> = spawned
        .into_iter()
        .map(|(child, stdin, lines)| {
            let joined = expect(&lines, "joined", 30);
            Proc { child, stdin, lines, slot: field(&joined, "slot") as u8, joined }
        })
        .collect();
    let mut slots: Vec<u8> = ps.iter().map(|p| p.slot).collect();
    slots.sort();
    assert_eq!(slots, (0..8).collect::<Vec<u8>>());
    assert_eq!(ps.iter().filter(|p| field(&p.joined, "created") == 1).count(), 1, "exactly one creator");
    for p in &ps {
        assert_eq!(field(&p.joined, "qpn_start"), 0x11, "{}", p.joined);
    }

    let tx = sender();
    // Data by QPN: each slot's packet reaches exactly that member.
    for s in 0..8u32 {
        tx.send_to(&data(s << 16 | 0x11), dst()).unwrap();
    }
    for p in &ps {
        let l = expect(&p.lines, "got", 5);
        assert_eq!(l, format!("got qpn={:#08x} len=32 kind=mine", (p.slot as u32) << 16 | 0x11));
    }
    // CM: REP by RemoteCommID (body + 4 = 48), SIDR_REP by RequestID (44).
    tx.send_to(&cm(0x0013, 48, &(6u32 << 24 | 9).to_be_bytes()), dst()).unwrap();
    assert_eq!(expect(&by_slot(&mut ps, 6).lines, "got", 5), "got qpn=0x000001 len=280 kind=mine");
    tx.send_to(&cm(0x0018, 44, &(2u32 << 24 | 9).to_be_bytes()), dst()).unwrap();
    assert_eq!(expect(&by_slot(&mut ps, 2).lines, "got", 5), "got qpn=0x000001 len=280 kind=mine");
    // REQ by service ID: slot 5 listens; an unknown service goes to the default (lowest) slot.
    let sid: u64 = 0x0106_0000_0000_1c06;
    by_slot(&mut ps, 5).say(&format!("listen {sid:x}"));
    expect(&by_slot(&mut ps, 5).lines, "listening", 5);
    tx.send_to(&cm(0x0010, 52, &sid.to_be_bytes()), dst()).unwrap();
    assert_eq!(expect(&by_slot(&mut ps, 5).lines, "got", 5), "got qpn=0x000001 len=280 kind=mine");
    tx.send_to(&cm(0x0010, 52, &(sid + 1).to_be_bytes()), dst()).unwrap();
    assert_eq!(expect(&by_slot(&mut ps, 0).lines, "got", 5), "got qpn=0x000001 len=280 kind=mine");
    by_slot(&mut ps, 1).say("members");
    let ml = expect(&by_slot(&mut ps, 1).lines, "members", 5);
    assert_eq!(ml.split(',').count(), 8, "{ml}");
    for p in &ps {
        quiet(&p.lines, 50);
    }

    // SIGKILL the listener (slot 5); what arrives for slot 5 meanwhile waits in its socket
    // until a survivor's watch (once a second) sees it there, rebuilds the program without
    // slot 5 and drains the slot (issue #37: a memberless slot must not hold memory).
    let victim = ps.iter().position(|p| p.slot == 5).unwrap();
    let mut dead = ps.remove(victim);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    tx.send_to(&data(5 << 16 | 0x12), dst()).unwrap();
    tx.send_to(&data(5 << 16 | 0x13), dst()).unwrap();
    // The others keep working.
    tx.send_to(&data(3 << 16 | 0x14), dst()).unwrap();
    assert_eq!(expect(&by_slot(&mut ps, 3).lines, "got", 5), "got qpn=0x030014 len=32 kind=mine");
    // Within about a second a member notices the dead listener and rebuilds the program:
    // REQs for its service go to the default slot (which rejects them) instead of queueing.
    let end = Instant::now() + Duration::from_secs(5);
    let (mut rerouted, mut queued_for_the_dead) = (false, 0);
    while !rerouted && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(500));
        tx.send_to(&cm(0x0010, 52, &sid.to_be_bytes()), dst()).unwrap();
        rerouted = by_slot(&mut ps, 0).lines.recv_timeout(Duration::from_millis(300)).is_ok();
        queued_for_the_dead += !rerouted as u64;
    }
    assert!(rerouted, "REQs for a dead listener's service still go to its slot");
    // A newcomer takes slot 5, drops its predecessor's two datagrams, continues its QPN
    // counter past the dead owner's reservation and prunes the dead listener.
    let mut newcomer = join(&dir, None);
    assert_eq!(newcomer.slot, 5, "{}", newcomer.joined);
    // Its predecessor's two datagrams and the REQs sent before the program was refreshed
    // ({queued_for_the_dead}) were drained by the survivor that refreshed it, under the join
    // lock the newcomer then waited for: nothing is left to take over.
    assert_eq!(field(&newcomer.joined, "drops"), 0, "{} ({queued_for_the_dead} REQs queued)", newcomer.joined);
    assert_eq!(field(&newcomer.joined, "qpn_start"), 0x11 + 1000, "{}", newcomer.joined);
    assert_eq!(field(&newcomer.joined, "created"), 0);
    tx.send_to(&data(5 << 16 | 0x15), dst()).unwrap();
    assert_eq!(expect(&newcomer.lines, "got", 5), "got qpn=0x050015 len=32 kind=mine");
    tx.send_to(&cm(0x0010, 52, &sid.to_be_bytes()), dst()).unwrap();
    assert_eq!(expect(&by_slot(&mut ps, 0).lines, "got", 5), "got qpn=0x000001 len=280 kind=mine");
    quiet(&newcomer.lines, 50);
    newcomer.say("members");
    let ml = expect(&newcomer.lines, "members", 5);
    assert_eq!(ml.split(',').count(), 8, "{ml}");
    assert!(ml.contains(&format!("5:{}", newcomer.child.id())), "{ml}");

    // Everyone leaves: no socket stays on 4791 and no lock blocks the next run.
    newcomer.quit();
    for p in ps {
        p.quit();
    }
    assert!(no_socket_on_4791(), "a socket on 4791 outlived every member");
    let again = join(&dir, None);
    assert_eq!((again.slot, field(&again.joined, "created")), (0, 1), "{}", again.joined);
    again.quit();
    assert!(no_socket_on_4791());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn nobody_group() {
    let dir = tmpdir("nobody", NOBODY);
    let mut ps: Vec<Proc> = (0..4).map(|_| join(&dir, Some(NOBODY))).collect();
    let tx = sender();
    for p in &ps {
        tx.send_to(&data((p.slot as u32) << 16 | 0x20), dst()).unwrap();
    }
    for p in &ps {
        assert_eq!(
            expect(&p.lines, "got", 5),
            format!("got qpn={:#08x} len=32 kind=mine", (p.slot as u32) << 16 | 0x20)
        );
    }
    // A crash as an unprivileged user: the slot comes back.
    let mut dead = ps.remove(1);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let again = join(&dir, Some(NOBODY));
    assert_eq!(again.slot, dead.slot);
    again.quit();
    for p in ps {
        p.quit();
    }
    assert!(no_socket_on_4791());
    let md = std::fs::metadata(&dir).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((md.uid(), md.mode() & 0o777), (NOBODY, 0o700));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn refused(dir: &str, uid: Option<u32>) -> String {
    let (mut child, _stdin, lines) = spawn(dir, uid, &[]);
    let l = expect(&lines, "error", 20);
    assert_eq!(child.wait().unwrap().code(), Some(3));
    l
}

fn two_users() {
    let (root_dir, nobody_dir) = (tmpdir("two", 0), tmpdir("two", NOBODY));
    let root = join(&root_dir, None);
    let l = refused(&nobody_dir, Some(NOBODY));
    assert!(l.starts_with("error errno=98 "), "{l}");
    assert!(l.contains("held by uid 0") && l.contains("URXE_ADDR"), "{l}");
    root.quit();
    assert!(no_socket_on_4791());
    let nobody = join(&nobody_dir, Some(NOBODY));
    let l = refused(&root_dir, None);
    assert!(l.starts_with("error errno=98 ") && l.contains("held by uid 65534"), "{l}");
    nobody.quit();
    std::fs::remove_dir_all(&root_dir).unwrap();
    std::fs::remove_dir_all(&nobody_dir).unwrap();
}

fn kernel_socket() {
    // A VXLAN device on UDP 4791 is a kernel socket on *:4791, as kernel rdma_rxe's is.
    sh(&format!("ip link add vx0 type vxlan id 7 dstport 4791 local {ADDR} && ip link set vx0 up"));
    let dir = tmpdir("kernel", 0);
    let l = refused(&dir, None);
    assert!(l.starts_with("error errno=98 ") && l.contains("rdma_rxe") && l.contains("URXE_ADDR"), "{l}");
    sh("ip link del vx0");
    assert!(no_socket_on_4791());
    join(&dir, None).quit();
    std::fs::remove_dir_all(&dir).unwrap();
}

fn setup_problems() {
    use std::os::unix::fs::PermissionsExt;
    // A registry directory others may write to.
    let dir = tmpdir("open", 0);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let l = refused(&dir, None);
    assert!(
        l.starts_with("error errno=13 ") && l.contains("URXE_RUNTIME_DIR") && l.contains("others may write"),
        "{l}"
    );
    // One the user cannot create.
    let l = refused("/proc/urxe-cannot-exist", Some(NOBODY));
    assert!(l.starts_with("error errno=13 ") && l.contains("URXE_RUNTIME_DIR"), "{l}");
    // Someone else's directory.
    let l = refused(&dir, Some(NOBODY));
    assert!(l.contains("belongs to uid 0"), "{l}");
    std::fs::remove_dir_all(&dir).unwrap();
    // An address that is not ours.
    let dir = tmpdir("notlocal", 0);
    let (mut child, _stdin, lines) = spawn(&dir, None, &[("URXE_GROUP_ADDR", "10.77.99.9")]);
    let l = expect(&lines, "error", 20);
    assert_eq!(child.wait().unwrap().code(), Some(3));
    assert!(l.starts_with("error errno=99 ") && l.contains("not assigned"), "{l}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------- applications over the group

/// urxe's libibverbs.so.1 directory, built if missing.
fn lib_dir() -> std::path::PathBuf {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/urxe/lib");
    if !dir.join("libibverbs.so.1").is_file() {
        let st = Command::new("bash").arg(root.join("provider/build.sh")).arg("--release").status().unwrap();
        assert!(st.success(), "provider/build.sh failed");
    }
    dir
}

/// A verbs program running over urxe on the group address, its output collected.
struct App {
    child: Child,
    out: Receiver<String>,
    lines: Vec<String>,
    what: String,
}

fn app(tool: &str, args: &[&str], uid: Option<u32>, dir: &str) -> App {
    // stdbuf: line-buffered stdout, so lines arrive while the program runs.
    let mut cmd = match uid {
        Some(u) => {
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={u}"), format!("--regid={u}"), "--clear-groups".into()]).arg("stdbuf");
            c
        }
        None => Command::new("stdbuf"),
    };
    cmd.arg("-oL")
        .arg(tool)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("URXE_ADDR", ADDR)
        .env("URXE_RUNTIME_DIR", dir)
        .env_remove("URXE_GROUP_INNER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let (tx, out) = channel();
    for r in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(r).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
    }
    App { child, out, lines: Vec::new(), what: format!("{tool} {}", args.join(" ")) }
}

impl App {
    fn drain(&mut self) {
        while let Ok(l) = self.out.try_recv() {
            self.lines.push(l);
        }
    }
    /// Waits (bounded) for a line containing `pat`.
    fn wait_line(&mut self, pat: &str, secs: u64) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(l) = self.lines.iter().find(|l| l.contains(pat)) {
                return l.clone();
            }
            match self.out.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(l) => self.lines.push(l),
                Err(_) => panic!("{}: no line with {pat:?} within {secs} s:\n{}", self.what, self.lines.join("\n")),
            }
        }
    }
    /// Waits (bounded) for the exit; returns success and the whole output.
    fn finish(mut self, secs: u64) -> (bool, String) {
        let end = Instant::now() + Duration::from_secs(secs);
        let ok = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st.success();
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break false;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(50));
        self.drain();
        (ok, format!("{}:\n{}", self.what, self.lines.join("\n")))
    }
    /// The QPN on this pingpong's `local address:` line.
    fn qpn(&mut self) -> u32 {
        let l = self.wait_line("local address:", 30);
        let q = l.split("QPN ").nth(1).and_then(|r| r.split(',').next()).expect("QPN on the local address line");
        u32::from_str_radix(q.trim_start_matches("0x"), 16).unwrap()
    }
    /// The slot of this process: its QPN's high byte.
    fn slot(&mut self) -> u32 {
        self.qpn() >> 16
    }
}

fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let t = std::fs::read_to_string(f).unwrap_or_default();
            if t.lines().any(|l| l.contains(&want) && l.split_whitespace().nth(3) == Some("0A")) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

const PINGPONG: &str = "/usr/bin/ibv_rc_pingpong";
const SEND_BW: &str = "/usr/bin/ib_send_bw";

/// A pair: (server, client) of `tool` on TCP `port` with `extra` arguments.
fn pair(tool: &str, port: u16, extra: &[&str], uid: Option<u32>, dir: &str) -> (App, App) {
    let p = port.to_string();
    let mut args: Vec<&str> = if tool == PINGPONG {
        vec!["-d", "urxe0", "-g", "0", "-p", &p]
    } else {
        vec!["-d", "urxe0", "-x", "0", "-F", "-p", &p]
    };
    args.extend_from_slice(extra);
    let server = app(tool, &args, uid, dir);
    assert!(tcp_listening(port), "{tool} server on port {port} never listened");
    args.push("127.0.0.1");
    let client = app(tool, &args, uid, dir);
    (server, client)
}

fn check_pair(tool: &str, (s, c): (App, App)) {
    for a in [s, c] {
        let (ok, out) = a.finish(90);
        assert!(ok, "{out}");
        if tool == PINGPONG {
            assert!(out.contains(" iters in ") && !out.contains("invalid data"), "{out}");
            assert!(out.contains(&format!("GID ::ffff:{ADDR}")), "{out}");
        } else {
            // perftest prints GIDs in decimal and a numeric row under its `#bytes` header.
            assert!(out.contains("GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:01:01"), "{out}");
            let row = out.lines().skip_while(|l| !l.contains("#bytes")).nth(1).unwrap_or("");
            assert!(row.split_whitespace().next().is_some_and(|w| w.parse::<u64>().is_ok()), "no result row:\n{out}");
        }
    }
}

fn four_pairs() {
    let dir = tmpdir("pairs", 0);
    let pairs = vec![
        (PINGPONG, pair(PINGPONG, 18611, &["-c", "-n", "500", "-s", "4096"], None, &dir)),
        (PINGPONG, pair(PINGPONG, 18612, &["-c", "-n", "500"], None, &dir)),
        (SEND_BW, pair(SEND_BW, 18613, &["-n", "500", "-s", "65536"], None, &dir)),
        (SEND_BW, pair(SEND_BW, 18614, &["-n", "2000", "-s", "64"], None, &dir)),
    ];
    for (tool, p) in pairs {
        check_pair(tool, p);
    }
    assert!(no_socket_on_4791());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn four_pairs_and_a_crash() {
    let dir = tmpdir("crash", 0);
    // The victim pair runs long; the three others run to completion while it dies.
    let (mut vs, mut vc) = pair(PINGPONG, 18621, &["-c", "-n", "1000000"], None, &dir);
    let dead_slot = vs.slot();
    let dead_client_slot = vc.slot();
    let others = vec![
        (PINGPONG, pair(PINGPONG, 18622, &["-c", "-n", "2000", "-s", "4096"], None, &dir)),
        (SEND_BW, pair(SEND_BW, 18623, &["-n", "1000", "-s", "65536"], None, &dir)),
        (SEND_BW, pair(SEND_BW, 18624, &["-n", "3000", "-s", "1024"], None, &dir)),
    ];
    std::thread::sleep(Duration::from_millis(300));
    // `urxe stat` shows every process of the group: its slot, QPs, counters and the members.
    let stat = Command::new(urxe_bin::urxe()).arg("stat").output().unwrap();
    let stat = String::from_utf8_lossy(&stat.stdout).to_string();
    for p in [vs.child.id(), vc.child.id()] {
        assert!(stat.contains(&format!("pid {p}\n")), "pid {p} missing from urxe stat:\n{stat}");
    }
    assert!(stat.contains(&format!("group slot {dead_slot} of 64")) && stat.contains("1 QPs"), "{stat}");
    let members = stat.lines().find(|l| l.starts_with("group members")).unwrap_or_default().to_string();
    assert!(members.contains(&format!(" {dead_slot} {}", vs.child.id())), "{members}");
    assert!(stat.contains("rx_group_strays"), "{stat}");
    vs.drain();
    assert!(vs.child.try_wait().unwrap().is_none(), "the victim finished before it was killed");
    // SIGKILL mid-transfer.
    vs.child.kill().unwrap();
    vs.child.wait().unwrap();
    for (tool, p) in others {
        check_pair(tool, p);
    }
    // Its client cannot finish (its peer is gone); stop it too.
    let (ok, out) = vc.finish(1);
    assert!(!ok, "the victim's client finished without its server:\n{out}");
    // A new pair takes the two freed slots (the dead server's and its client's) and works.
    let (mut ns, mut nc) = pair(PINGPONG, 18625, &["-c", "-n", "300"], None, &dir);
    let mut new_slots = [ns.slot(), nc.slot()];
    new_slots.sort();
    let mut freed = [dead_slot, dead_client_slot];
    freed.sort();
    assert_eq!(new_slots, freed, "the newcomers did not get the slots of the killed pair");
    // Their QPN counters continue past what the killed owners reserved (256 at a time), so
    // no QPN the dead processes handed out comes back.
    for q in [ns.qpn(), nc.qpn()] {
        assert!(q & 0xFFFF >= 0x11 + 256, "newcomer QPN {q:#08x} reuses the dead owner's range");
    }
    check_pair(PINGPONG, (ns, nc));
    assert!(no_socket_on_4791(), "sockets on 4791 outlived every process");
    // No stale lock: the next process creates the group afresh at slot 0.
    let (mut fs, fc) = pair(PINGPONG, 18626, &["-c", "-n", "50"], None, &dir);
    assert_eq!(fs.slot(), 0);
    check_pair(PINGPONG, (fs, fc));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn apps_two_users() {
    let nobody_dir = tmpdir("apps-nobody", NOBODY);
    let root_dir = tmpdir("apps-root", 0);
    // Unprivileged: two pairs at once as uid 65534.
    let a = pair(PINGPONG, 18631, &["-c", "-n", "300"], Some(NOBODY), &nobody_dir);
    let b = pair(SEND_BW, 18632, &["-n", "500"], Some(NOBODY), &nobody_dir);
    // Meanwhile root cannot join uid 65534's address: a clear message, no device.
    let (ok, out) = app(PINGPONG, &["-d", "urxe0", "-g", "0", "-p", "18633"], None, &root_dir).finish(20);
    assert!(!ok && out.contains("held by uid 65534") && out.contains("URXE_ADDR"), "{out}");
    check_pair(PINGPONG, a);
    check_pair(SEND_BW, b);
    assert!(no_socket_on_4791());
    std::fs::remove_dir_all(&nobody_dir).unwrap();
    std::fs::remove_dir_all(&root_dir).unwrap();
}

fn ipv6_and_strays() {
    // Two members on ::1 in a pool of two: IPv6 slot sockets, probes with an IPv6 ICRC.
    let dir = tmpdir("v6", 0);
    let mut ps: Vec<Proc> = (0..2)
        .map(|_| {
            let (child, stdin, lines) = spawn_on("::1", &dir, None, &[("URXE_GROUP_SLOTS", "2")]);
            let joined = expect(&lines, "joined", 20);
            Proc { child, stdin, lines, slot: field(&joined, "slot") as u8, joined }
        })
        .collect();
    ps.sort_by_key(|p| p.slot);
    assert_eq!((ps[0].slot, ps[1].slot), (0, 1));
    let tx = UdpSocket::bind("[::1]:0").unwrap();
    let dst: SocketAddr = "[::1]:4791".parse().unwrap();
    for p in &ps {
        tx.send_to(&data((p.slot as u32) << 16 | 0x30), dst).unwrap();
        assert_eq!(
            expect(&p.lines, "got", 5),
            format!("got qpn={:#08x} len=32 kind=mine", (p.slot as u32) << 16 | 0x30)
        );
    }
    // Slot 20 is past the pool: the kernel's hash picks a member, which sees a stray.
    tx.send_to(&data(20 << 16 | 0x30), dst).unwrap();
    let mut strays = 0;
    for p in &ps {
        if let Ok(l) = p.lines.recv_timeout(Duration::from_millis(500)) {
            assert_eq!(l, "got qpn=0x140030 len=32 kind=stray");
            strays += 1;
        }
    }
    assert_eq!(strays, 1);
    for p in ps {
        p.quit();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
