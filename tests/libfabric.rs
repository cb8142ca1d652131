//! Debian 12's unmodified libfabric 1.17 (`fi_info`, `fi_pingpong` of libfabric-bin) runs its
//! verbs provider over urxe's libibverbs.so.1 and librdmacm.so.1: `fi_info` lists urxe0's
//! FI_EP_MSG endpoint (verbs) and FI_EP_RDM endpoint (verbs;ofi_rxm), and `fi_pingpong`
//! completes data-checked (`-c`) ping-pongs of every size over both, server and client in two
//! processes with no setting at all.
//!
//! Each test runs in a network namespace of its own: its loopback, a veth pair with an address
//! (libfabric's verbs provider offers FI_EP_MSG only for the addresses of up, non-loopback
//! interfaces, see README), and so a zero-config urxe address, TCP ports and rdma_cm services
//! that no other process of the host shares.
//!
//! ```sh
//! cargo test --release --test libfabric -- --nocapture
//! ```

#[allow(dead_code)]
#[path = "apps/mod.rs"]
mod harness;

use harness::*;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(90);
/// fi_pingpong's out-of-band TCP port (its default; each namespace has its own).
const CTRL_PORT: u16 = 47592;

fn ip(args: &[&str]) {
    let out = run_bounded(Command::new("ip").args(args), TIMEOUT).expect("run ip");
    assert!(out.success(), "ip {args:?} failed (these tests create network namespaces: run as root)\n{out}");
}

/// A network namespace with its loopback up and, unless `loopback_only`, a veth pair
/// `fab0`/`fab1` with 10.42.0.1/24 on `fab0`; deleted on drop. A `sleep` inside it (the
/// anchor) shows its sockets in `/proc/<pid>/net/tcp`.
struct Netns {
    name: String,
    anchor: Option<Child>,
}

impl Netns {
    fn new(tag: &str, loopback_only: bool) -> Netns {
        let name = format!("urxe-fi-{tag}-{}", std::process::id());
        ip(&["netns", "add", &name]);
        let mut ns = Netns { name, anchor: None };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        if !loopback_only {
            ip(&["-n", &ns.name, "link", "add", "fab0", "type", "veth", "peer", "name", "fab1"]);
            ip(&["-n", &ns.name, "addr", "add", "10.42.0.1/24", "dev", "fab0"]);
            ip(&["-n", &ns.name, "link", "set", "fab0", "up"]);
            ip(&["-n", &ns.name, "link", "set", "fab1", "up"]);
        }
        // `ip netns exec` enters the namespace and execs in place: the pid is the sleep's.
        let anchor = Command::new("ip")
            .args(["netns", "exec", &ns.name, "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("start the namespace's anchor");
        ns.anchor = Some(anchor);
        ns
    }

    /// `program args` inside the namespace, against urxe's libraries (provider/build.sh
    /// builds librdmacm.so.1 with libibverbs.so.1).
    fn cmd(&self, program: &str, args: &[&str]) -> Command {
        let lib = lib_dir();
        assert!(
            lib.join("librdmacm.so.1").is_file(),
            "no librdmacm.so.1 in {}: run bash provider/build.sh",
            lib.display()
        );
        let mut c = urxe_cmd("ip");
        // libfabric probes XRC and other optional verbs; their clean failures are expected.
        c.env_remove("URXE_TRACE").args(["netns", "exec", &self.name]).arg(tool(program)).args(args);
        c
    }

    /// True while some socket of the namespace listens on TCP `port`.
    fn listens(&self, port: u16) -> bool {
        let pid = self.anchor.as_ref().map_or(0, |a| a.id());
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")) else { return false };
        text.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "0A"
                && f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(mut a) = self.anchor.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// A server run to completion (killed after `limit`) on a thread of its own.
fn serve(mut cmd: Command, limit: Duration) -> JoinHandle<Output> {
    thread::spawn(move || run_bounded(&mut cmd, limit).expect("start server"))
}

/// `fi_pingpong ARGS` as server, and once it listens on its control port, `fi_pingpong ARGS
/// 127.0.0.1` as client, in `ns`, both with `env`; both must exit 0. Returns (server, client).
fn pingpong(ns: &Netns, args: &[&str], env: &[(&str, &str)]) -> (Output, Output) {
    let cmd = |args: &[&str]| {
        let mut c = ns.cmd("fi_pingpong", args);
        c.envs(env.iter().copied());
        c
    };
    let mut cargs = args.to_vec();
    cargs.push("127.0.0.1");
    let _serial = heavy_lock();
    let srv = serve(cmd(args), TIMEOUT);
    let deadline = Instant::now() + TIMEOUT;
    while !ns.listens(CTRL_PORT) {
        if srv.is_finished() || Instant::now() >= deadline {
            panic!("fi_pingpong server did not listen on TCP {CTRL_PORT}\n{}", srv.join().expect("server thread"));
        }
        thread::sleep(Duration::from_millis(20));
    }
    let c = run_bounded(&mut cmd(&cargs), TIMEOUT).expect("start client");
    finish_pair(srv, c)
}

/// The server's end after the client's; both must have exited 0.
fn finish_pair(srv: JoinHandle<Output>, c: Output) -> (Output, Output) {
    let s = srv.join().expect("server thread");
    eprintln!("{s}\n{c}");
    assert!(c.success() && s.success(), "server and client must both exit 0\n{s}\n{c}");
    (s, c)
}

/// The rows of fi_pingpong's table: (bytes, #sent, #ack).
fn rows(out: &Output) -> Vec<(String, u64, String)> {
    out.stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let sent = f.get(1)?.parse().ok()?;
            Some((f[0].to_string(), sent, f.get(2)?.to_string()))
        })
        .collect()
}

/// Every size of `-S all` ran `iters` ping-pongs, each acknowledged: libfabric 1.17's 46
/// sizes from 0 B to 6 MiB, or for datagrams its 25 up to the MTU (4 KiB).
#[track_caller]
fn assert_all_sizes(out: &Output, iters: u64) {
    assert_sizes(out, iters, 46, "6m");
}

#[track_caller]
fn assert_sizes(out: &Output, iters: u64, count: usize, last: &str) {
    let r = rows(out);
    assert_eq!(r.len(), count, "sizes of {}\n{out}", out.what);
    assert_eq!(r.last().map(|(s, _, _)| s.as_str()), Some(last), "{out}");
    for size in ["0", "1", "64", "1.5k", "4k"] {
        assert!(r.iter().any(|(s, _, _)| s == size), "no {size} row in {}\n{out}", out.what);
    }
    for (size, sent, ack) in &r {
        assert_eq!((*sent, ack.as_str()), (iters, format!("={iters}").as_str()), "row {size} of {}\n{out}", out.what);
    }
}

#[test]
fn fi_info_lists_urxe0_msg_and_rdm_endpoints() {
    let ns = Netns::new("info", false);
    let msg = run_bounded(&mut ns.cmd("fi_info", &["-p", "verbs", "-t", "FI_EP_MSG"]), TIMEOUT).expect("fi_info");
    eprintln!("{msg}");
    assert!(msg.success(), "{msg}");
    for needle in ["provider: verbs", "domain: urxe0", "type: FI_EP_MSG", "protocol: FI_PROTO_RDMA_CM_IB_RC"] {
        assert_contains(&msg, needle);
    }
    let rdm =
        run_bounded(&mut ns.cmd("fi_info", &["-p", "verbs;ofi_rxm", "-t", "FI_EP_RDM"]), TIMEOUT).expect("fi_info");
    eprintln!("{rdm}");
    assert!(rdm.success(), "{rdm}");
    for needle in ["provider: verbs;ofi_rxm", "domain: urxe0", "type: FI_EP_RDM", "protocol: FI_PROTO_RXM"] {
        assert_contains(&rdm, needle);
    }
    // An endpoint asked for on the interface's address: rdma_bind_addr maps it to urxe0.
    let v = run_bounded(&mut ns.cmd("fi_info", &["-p", "verbs", "-t", "FI_EP_MSG", "-s", "10.42.0.1", "-v"]), TIMEOUT)
        .expect("fi_info");
    assert!(v.success(), "{v}");
    assert_contains(&v, "src_addr: fi_sockaddr_in://10.42.0.1:0");
    assert_contains(&v, "name: urxe0");
}

#[test]
fn without_a_non_loopback_interface_verbs_offers_no_msg_endpoint() {
    // libfabric skips loopback interfaces when it maps addresses to devices (README): on a
    // host with only `lo`, urxe0 gets its datagram domain and nothing connected.
    let ns = Netns::new("lo", true);
    let out = run_bounded(&mut ns.cmd("fi_info", &["-p", "verbs"]), TIMEOUT).expect("fi_info");
    eprintln!("{out}");
    assert!(out.success(), "{out}");
    assert_contains(&out, "domain: urxe0-dgram");
    assert_lacks(&out, "type: FI_EP_MSG");
}

#[test]
fn fi_pingpong_msg_endpoint_all_sizes_data_checked() {
    let ns = Netns::new("msg", false);
    let (s, c) = pingpong(&ns, &["-p", "verbs", "-e", "msg", "-c", "-I", "10", "-S", "all"], &[]);
    assert_all_sizes(&s, 10);
    assert_all_sizes(&c, 10);
}

#[test]
fn fi_pingpong_rdm_endpoint_over_ofi_rxm_all_sizes_data_checked() {
    let ns = Netns::new("rdm", false);
    // `-p verbs -e rdm` selects verbs;ofi_rxm too; name it once, and use tagged messages once.
    for prov in [&["-p", "verbs;ofi_rxm"][..], &["-p", "verbs", "-m", "tagged"]] {
        let args = [prov, &["-e", "rdm", "-c", "-I", "10", "-S", "all"]].concat();
        let (s, c) = pingpong(&ns, &args, &[]);
        assert_all_sizes(&s, 10);
        assert_all_sizes(&c, 10);
    }
}

#[test]
fn fi_pingpong_dgram_endpoint_and_rdm_over_ofi_rxd_data_checked() {
    // UD underneath both: verbs' own FI_EP_DGRAM, and ofi_rxd's reliable datagrams on it.
    let ns = Netns::new("ud", false);
    let (s, c) = pingpong(&ns, &["-p", "verbs", "-e", "dgram", "-c", "-I", "10", "-S", "all"], &[]);
    assert_sizes(&s, 10, 25, "4k");
    assert_sizes(&c, 10, 25, "4k");
    let (s, c) = pingpong(&ns, &["-p", "verbs;ofi_rxd", "-e", "rdm", "-c", "-I", "10", "-S", "all"], &[]);
    assert_all_sizes(&s, 10);
    assert_all_sizes(&c, 10);
}

#[test]
fn fi_pingpong_two_processes_on_one_urxe_addr() {
    // URXE_ADDR given to both: one address, many processes, as with no setting; endpoints
    // libfabric binds to "localhost" reach that address's group.
    let ns = Netns::new("addr", false);
    let args = ["-p", "verbs", "-e", "msg", "-c", "-I", "10", "-S", "4096"];
    let (s, c) = pingpong(&ns, &args, &[("URXE_ADDR", "127.42.0.1")]);
    for out in [&s, &c] {
        assert_eq!(rows(out), vec![("4k".to_string(), 10, "=10".to_string())], "{out}");
    }
}

#[test]
fn the_interface_address_libfabric_lists_reaches_this_hosts_urxe() {
    // fi_info lists urxe0 under 10.42.0.1 (rdma_bind_addr takes any local address); with no
    // setting urxe's device is at its zero-config loopback address, and a connection to
    // another address of this host loops back to it, as in the kernel's CM.
    let ns = Netns::new("iface", false);
    let _serial = heavy_lock();
    let srv = serve(ns.cmd("rping", &["-s", "-a", "10.42.0.1", "-p", "7390", "-C", "20", "-v", "-V"]), TIMEOUT);
    // An rdma_cm listener shows nowhere a test could watch: a client that comes before the
    // server listens is refused (REJ 8) and tries again, at most 10 times.
    let mut attempt = 0;
    let c = loop {
        attempt += 1;
        thread::sleep(Duration::from_millis(500));
        let c = run_bounded(
            &mut ns.cmd("rping", &["-c", "-a", "10.42.0.1", "-p", "7390", "-C", "20", "-v", "-V"]),
            TIMEOUT,
        )
        .expect("start rping client");
        if c.success() || !c.all().contains("REJECTED, error 8") || attempt == 10 {
            break c;
        }
        eprintln!("attempt {attempt}: refused (the server does not listen yet)\n{c}");
    };
    let (s, c) = finish_pair(srv, c);
    assert_eq!(c.stdout.matches("ping data: rdma-ping-").count(), 20, "{c}");
    assert!(s.stdout.contains("server ping data: rdma-ping-19"), "{s}");
}
