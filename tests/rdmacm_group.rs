//! rdma_cm at a shared address: a CM request that the steering program delivered to a member
//! that does not listen on its service (the group's default slot) while another member does
//! listen on it is taken by the listener, as one kernel CM with one listener table would take
//! it; a request for a service nobody listens on is still refused at once with REJ 8.
//!
//! The peers are tests/rdmacm_group/peer.py (pyverbs over urxe's librdmacm.so.1), each step
//! taken on the test's word, on a loopback address of the test's own with a private registry
//! directory. The race is made certain: the default slot's process is stopped (SIGSTOP) while
//! the client's REQ (or SIDR_REQ) is queued on its socket and the server starts listening,
//! then resumed. Without the table lookup the client is refused (REJ 8, or SIDR_REP "not
//! supported": UNREACHABLE). Also here: children forked after their parent opened urxe0 are
//! members of their own (the RDMA-CM tests of rdma-core's suite fork both sides).
//!
//! ```sh
//! cargo test --release --test rdmacm_group
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;

use harness::*;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use urxe::transport::group::registry::Registry;

/// One rdma_cm peer process (peer.py) with its stdout as lines.
struct Peer {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

fn peer_script() -> PathBuf {
    repo_root().join("tests/rdmacm_group/peer.py")
}

impl Peer {
    /// `role` on `addr` (its URXE_ADDR); a client connects to `dst`.
    fn start(name: &'static str, role: &str, addr: &str, dst: &str, dir: &str, port: u16) -> Peer {
        Peer::start_ps(name, role, addr, dst, dir, port, "tcp")
    }

    /// As [`Peer::start`] in port space `ps` (`tcp`, or `udp`: UD QPs and SIDR).
    fn start_ps(name: &'static str, role: &str, addr: &str, dst: &str, dir: &str, port: u16, ps: &str) -> Peer {
        assert!(lib_dir().join("librdmacm.so.1").is_file(), "provider/build.sh did not build librdmacm.so.1");
        let mut cmd = urxe_cmd("/usr/bin/python3");
        cmd.arg(peer_script())
            .args([role, addr, &port.to_string(), dst, ps])
            .env("URXE_ADDR", addr)
            .env("URXE_RUNTIME_DIR", dir)
            .env("URXE_GROUP_SLOTS", "8")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("run /usr/bin/python3 (python3-pyverbs)");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Peer { name, child, stdin, lines, seen: Vec::new() }
    }

    /// Waits (at most `secs`) for the line `want`; fails naming everything the peer said.
    fn expect(&mut self, want: &str, secs: u64) {
        let end = Instant::now() + Duration::from_secs(secs);
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) if l == want => {
                    self.seen.push(l);
                    return;
                }
                Ok(l) => self.seen.push(l),
                Err(_) => break,
            }
        }
        panic!("{}: no `{want}` within {secs} s; it said {:?}", self.name, self.seen);
    }

    fn go(&mut self) {
        writeln!(self.stdin.as_mut().unwrap(), "go").unwrap();
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Exit status, waiting at most `secs`.
    fn finish(&mut self, secs: u64) -> bool {
        drop(self.stdin.take());
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{}: still running after {secs} s; it said {:?}", self.name, self.seen);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // SAFETY: kill has no memory arguments; the pid is our own child's (not yet reaped).
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (at most 10 s) until every thread of `p` is stopped (state T in /proc).
fn stopped(p: &Peer) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let dir = format!("/proc/{}/task", p.pid());
        let all_stopped = std::fs::read_dir(&dir).map(|d| {
            d.filter_map(|e| e.ok()).all(|e| {
                let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
                // The state follows the parenthesised command name.
                stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
            })
        });
        if all_stopped.unwrap_or(false) {
            return;
        }
        assert!(Instant::now() < end, "{} did not stop after SIGSTOP", p.name);
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(p: &Peer, sig: i32) {
    // SAFETY: as in Drop.
    assert_eq!(unsafe { libc::kill(p.pid(), sig) }, 0);
}

/// A registry directory of the test's own (mode 0700, as urxe requires).
fn runtime_dir(tag: &str) -> String {
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("urxe-rdmacm-group-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    d.to_string_lossy().into_owned()
}

/// Bytes queued on the UDP sockets bound to `addr`:4791 (from /proc/net/udp).
fn queued_on(addr: &str) -> u64 {
    let ip: std::net::Ipv4Addr = addr.parse().unwrap();
    let local = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    let text = std::fs::read_to_string("/proc/net/udp").unwrap();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&local.as_str())).then(|| f.get(4)?.split(':').nth(1)).flatten()
        })
        .map(|rx| u64::from_str_radix(rx, 16).unwrap_or(0))
        .sum()
}

/// The race of the module doc with the client at `client_addr` (the group's address, or
/// another one: its own group), connected within `secs` after the stray resumes.
fn stray_default_slot_race(tag: &str, addr: &'static str, client_addr: &'static str, port: u16, secs: u64, ps: &str) {
    let _serial = heavy_lock();
    let dir = runtime_dir(tag);
    // The stray: first on the address, so the group's default slot (0); it listens on
    // another port only.
    let mut stray = Peer::start("stray", "stray", addr, addr, &dir, port);
    stray.expect("listening", 30);
    let reg = Registry::open(std::path::Path::new(&dir), addr.parse().unwrap()).unwrap();
    assert_eq!(reg.record(0).unwrap().pid, stray.pid() as u32, "the stray holds slot 0, the default");
    let mut server = Peer::start_ps("server", "server", addr, addr, &dir, port + 1, ps);
    server.expect("bound", 30);
    let mut client = Peer::start_ps("client", "client", client_addr, addr, &dir, port + 1, ps);
    client.expect("resolved", 30);
    signal(&stray, libc::SIGSTOP);
    // SIGSTOP takes effect asynchronously: on a loaded machine the stray could still read the
    // REQ (and drop it as not for it) if the client went at once.
    stopped(&stray);
    // The REQ, for a port nobody listens on yet, goes to the stopped default slot.
    client.go();
    let end = Instant::now() + Duration::from_secs(10);
    while queued_on(addr) == 0 {
        assert!(Instant::now() < end, "the client's REQ was never queued at {addr}:4791");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.go();
    server.expect("listening", 10);
    // Now the stray reads the REQ: the group's table names the listener.
    signal(&stray, libc::SIGCONT);
    let resumed = Instant::now();
    client.expect("established", secs);
    server.expect("established", 20);
    eprintln!("{tag}: connected {:?} after the stray resumed", resumed.elapsed());
    assert!(client.finish(20), "client failed: {:?}", client.seen);
    assert!(server.finish(20), "server failed: {:?}", server.seen);
    assert!(stray.finish(20), "stray failed: {:?}", stray.seen);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_request_queued_at_a_stray_default_slot_reaches_the_listener_that_started_meanwhile() {
    // From the group's own address: sent on at once.
    stray_default_slot_race("race", "127.43.0.21", "127.43.0.21", 7611, 5, "tcp");
}

#[test]
fn a_sidr_request_queued_at_a_stray_default_slot_reaches_the_listener_that_started_meanwhile() {
    stray_default_slot_race("sidr", "127.43.0.26", "127.43.0.26", 7641, 5, "udp");
}

#[test]
fn a_request_from_another_address_is_dropped_there_and_its_retry_reaches_the_listener() {
    // From another address: dropped by the stray, the REQ's retransmission (the CM's REQ timer)
    // is steered to the listener.
    stray_default_slot_race("remote", "127.43.0.23", "127.43.0.24", 7631, 30, "tcp");
}

#[test]
fn a_request_nobody_listens_on_is_refused_at_once_with_rej_8() {
    let _serial = heavy_lock();
    let (addr, dir) = ("127.43.0.22", runtime_dir("nobody"));
    let mut stray = Peer::start("stray", "stray", addr, addr, &dir, 7621);
    stray.expect("listening", 30);
    let mut rping = urxe_cmd(tool("rping"));
    rping
        .args(["-c", "-a", addr, "-p", "7622", "-C", "1"])
        .env("URXE_ADDR", addr)
        .env("URXE_RUNTIME_DIR", &dir)
        .env("URXE_GROUP_SLOTS", "8");
    let start = Instant::now();
    let out = run_bounded(&mut rping, Duration::from_secs(30)).unwrap();
    assert!(!out.success(), "rping connected to a port nobody listens on:\n{out}");
    assert_contains(&out, "RDMA_CM_EVENT_REJECTED, error 8");
    assert!(start.elapsed() < Duration::from_secs(5), "the refusal took {:?}", start.elapsed());
    assert!(stray.finish(20), "stray failed: {:?}", stray.seen);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Parent and two children forked after the parent opened the device: three members of the
/// address, each with QPNs of its own slot (rdma-core's RDMA-CM tests fork both sides from a
/// process that already opened urxe0).
const FORK_SCRIPT: &str = r#"
import os
import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
def qpn():
    ctx = d.Context(name="urxe0"); pd = PD(ctx); cq = CQ(ctx, 4)
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap())).qp_num
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()
# One write(2) per line: the children share the pipe, and print() may write a line in pieces
# (seen: "childchild 131089 65553").
os.write(1, b"parent %d\n" % qpn())
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        os.close(ready_r); os.close(go_w)
        os.write(1, b"child %d\n" % qpn())
        os.write(ready_w, b"x")
        os.read(go_r, 1)  # until the parent closes its end: both children live together
        os._exit(0)
    kids.append(pid)
os.close(ready_w); os.close(go_r)
got = b""
while len(got) < 2:
    chunk = os.read(ready_r, 2)
    if not chunk:
        break
    got += chunk
os.close(go_w)
for k in kids:
    assert os.waitpid(k, 0)[1] == 0
assert got == b"xx", got
"#;

#[test]
fn forked_children_get_their_own_slot_of_the_address() {
    let _serial = heavy_lock();
    let dir = runtime_dir("fork");
    let mut py = urxe_cmd("/usr/bin/python3");
    py.args(["-c", FORK_SCRIPT]).env("URXE_ADDR", "127.43.0.25").env("URXE_RUNTIME_DIR", &dir);
    let out = run_bounded(&mut py, Duration::from_secs(60)).unwrap();
    assert!(out.success(), "{out}");
    let slot = |l: &str| l.split_whitespace().nth(1).and_then(|q| q.parse::<u32>().ok()).map(|q| q >> 16);
    let parent: Vec<u32> = out.stdout.lines().filter(|l| l.starts_with("parent")).filter_map(slot).collect();
    let mut children: Vec<u32> = out.stdout.lines().filter(|l| l.starts_with("child")).filter_map(slot).collect();
    assert_eq!((parent.len(), children.len()), (1, 2), "{out}");
    children.sort();
    // Both children are alive together (the parent waits for both): three distinct slots.
    assert!(children[0] != children[1] && !children.contains(&parent[0]), "slots {parent:?} {children:?}\n{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
