//! UCX and Open MPI over urxe, as Debian 12 ships them (ucx-utils 1.13, openmpi-bin 4.1), with
//! no UCX workaround variable: every program runs under `urxe run`, which gives it the
//! /dev/infiniband and /sys/class/infiniband files UCX looks for.
//!
//! - `ucx_info -d` lists `urxe0:1` with rc_verbs and ud_verbs (as root, and as an unprivileged
//!   user through a user namespace, where mpirun -np 2 runs too); `urxe setup` makes the node;
//! - `ucx_perftest` tag_lat, tag_bw, ucp_put_bw, ucp_get, ucp_am_lat, stream_bw over
//!   `UCX_TLS=rc_verbs,ud_verbs` and over `ud_verbs`; UCT am/put/atomics on rc_verbs;
//! - our MPI program (tests/mpi/mpi_check.c: verified ping-pong, allreduce, alltoall) with
//!   `--mca pml ucx` at -np 2 and -np 4 on one host, and at -np 4 across two network
//!   namespaces joined by a veth pair (mpirun's rsh launcher with an `ip netns exec` agent),
//!   the traffic captured with tcpdump and every packet passed by `urxe check`.
//!
//! `UCX_TLS` names only urxe's transports (+ `self` for MPI): UCX would otherwise move
//! same-host traffic over shared memory, and the tests would prove nothing about urxe.
//! Captured runs set `URXE_GSO=0` so that each RoCE packet is its own frame on the capture.
//!
//! Needs root (network namespaces, tcpdump) and the Debian packages of scripts/deps.sh.

#[path = "apps/mod.rs"]
#[allow(dead_code)]
mod harness;
mod urxe_bin;

use harness::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Upper bound on one mpirun (the `timeout` wrapper ends it and its ranks).
const MPI_TIMEOUT_S: u32 = 120;

fn urxe_bin() -> PathBuf {
    PathBuf::from(urxe_bin::urxe())
}

/// `urxe run -- PROGRAM`, with URXE_LIB_DIR set and no UCX workaround inherited.
fn urxe_run(program: &str, tls: &str) -> Command {
    let mut c = Command::new(urxe_bin());
    c.env("URXE_LIB_DIR", lib_dir()).env("UCX_TLS", tls).arg("run").arg("--").arg(program);
    for v in ["UCX_UD_ETH_DGID_CHECK", "UCX_IB_GID_INDEX", "UCX_NET_DEVICES", "UCX_IB_ROCE_LOCAL_SUBNET"] {
        c.env_remove(v);
    }
    c
}

/// (transport, device) pairs of `ucx_info -d`.
fn ucx_transports(text: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut tl = None;
    for l in text.lines() {
        let l = l.trim_start_matches('#').trim();
        if let Some(t) = l.strip_prefix("Transport:") {
            tl = Some(t.trim().to_string());
        } else if let (Some(d), Some(t)) = (l.strip_prefix("Device:"), tl.take()) {
            v.push((t, d.trim().to_string()));
        }
    }
    v
}

fn assert_lists_urxe(out: &Output) {
    assert!(out.success(), "ucx_info -d failed\n{out}");
    let tls = ucx_transports(&out.stdout);
    for want in ["rc_verbs", "ud_verbs"] {
        assert!(
            tls.iter().any(|(t, d)| t == want && d == "urxe0:1"),
            "ucx_info -d does not list {want} on urxe0:1 (found {tls:?})\n{out}"
        );
    }
}

#[test]
fn ucx_info_lists_urxe0_with_rc_and_ud_verbs() {
    let _serial = heavy_lock();
    let out = run_bounded(urxe_run("ucx_info", "all").arg("-d"), RUN_TIMEOUT).expect("run ucx_info");
    assert_lists_urxe(&out);
}

/// The unprivileged path: as `nobody`, `urxe run` builds the view in a user namespace that maps
/// only nobody's own ids; `ucx_info -d` lists urxe and mpirun (no --allow-run-as-root: the
/// ranks are not root) completes mpi_check at -np 2. The binaries and the library are copied
/// where `nobody` may read them; the directory is nobody's TMPDIR too.
#[test]
fn ucx_and_mpi_for_an_unprivileged_user() {
    let mpi = mpi_check();
    let _serial = heavy_lock();
    let dir = std::env::temp_dir().join(format!("urxe-unpriv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::copy(urxe_bin(), dir.join("urxe")).unwrap();
    std::fs::copy(&mpi, dir.join("mpi_check")).unwrap();
    std::fs::copy(lib_dir().join("libibverbs.so.1"), dir.join("lib/libibverbs.so.1")).unwrap();
    Command::new("chmod").args(["-R", "a+rX"]).arg(&dir).status().unwrap();
    Command::new("chmod").arg("1777").arg(&dir).status().unwrap();
    let script = format!(
        "id -u; ucx_info -d; UCX_TLS=rc_verbs,ud_verbs,self timeout -k 5 {MPI_TIMEOUT_S} mpirun -np 2 \
         --mca pml ucx --mca btl self -x UCX_TLS {}/mpi_check 5",
        dir.display()
    );
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(dir.join("urxe"))
        .args(["run", "--lib"])
        .arg(dir.join("lib"))
        .args(["--", "sh", "-c", &script])
        .env("UCX_TLS", "all")
        .env("HOME", &dir)
        .env("TMPDIR", &dir)
        .env_remove("UCX_UD_ETH_DGID_CHECK");
    let out = run_bounded(&mut c, Duration::from_secs(MPI_TIMEOUT_S as u64 + 10)).expect("run setpriv");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.stdout.lines().next(), Some("65534"), "not run as nobody\n{out}");
    assert_lacks(&out, "no private view");
    assert_lists_urxe(&out);
    assert_contains(&out, "mpi_check: OK ranks=2");
}

/// `urxe setup` (root) makes the node, and UCX then lists urxe with no view. Done inside a
/// `urxe run` view whose /dev/infiniband is a private tmpfs, so the host's /dev is not touched:
/// the view's bind of /dev/null is removed first, and `--no-view` keeps UCX from getting another.
#[test]
fn urxe_setup_makes_the_device_node_ucx_needs() {
    let _serial = heavy_lock();
    let u = urxe_bin();
    let script = format!(
        "set -e; umount /dev/infiniband/uverbs0; rm /dev/infiniband/uverbs0; \
         if {u} setup --check; then echo 'setup --check: node reported present'; exit 1; fi; \
         {u} setup; test -c /dev/infiniband/uverbs0; \
         {u} run --no-view -- ucx_info -d",
        u = u.display()
    );
    let mut c = urxe_run("sh", "rc_verbs,ud_verbs");
    c.args(["-c", &script]);
    let out = run_bounded(&mut c, RUN_TIMEOUT).expect("run sh");
    assert_contains(&out, "/dev/infiniband/uverbs0: absent");
    assert_contains(&out, "/dev/infiniband/uverbs0: created (char 1:3, mode 0666)");
    assert_lists_urxe(&out);
}

/// One ucx_perftest server/client pair over `tls`.
fn perftest(tls: &str, test: &str, size: &str, port: u16) {
    let p = port.to_string();
    let mut server = urxe_run("ucx_perftest", tls);
    server.args(["-p", &p]);
    let mut client = urxe_run("ucx_perftest", tls);
    client.args(["-p", &p, HOST, "-t", test, "-s", size, "-n", "1000"]);
    let _serial = heavy_lock();
    let (s, c) = run_pair(port, server, client);
    assert_contains(&c, "Final:");
    for o in [&s, &c] {
        assert_lacks(o, "unhandled timeout");
        assert_lacks(o, "no private view");
    }
}

const PERFTESTS: [(&str, &str); 6] = [
    ("tag_lat", "8"),
    ("tag_bw", "65536"),
    ("ucp_put_bw", "65536"),
    ("ucp_get", "65536"),
    ("ucp_am_lat", "8"),
    ("stream_bw", "65536"),
];

#[test]
fn ucx_perftest_over_rc_verbs_and_ud_verbs() {
    for (i, (t, s)) in PERFTESTS.iter().enumerate() {
        perftest("rc_verbs,ud_verbs", t, s, 19_310 + i as u16);
    }
}

#[test]
fn ucx_perftest_over_ud_verbs() {
    for (i, (t, s)) in PERFTESTS.iter().enumerate() {
        perftest("ud_verbs", t, s, 19_330 + i as u16);
    }
}

/// UCT-level tests on `urxe0:1` with rc_verbs: active messages, PUT, and the atomics verbs
/// offer (add, fetch-and-add, compare-and-swap; rc_verbs has no plain swap, by UCX's design).
#[test]
fn uct_rc_verbs_am_put_and_atomics() {
    for (i, t) in ["am_lat", "put_lat", "put_bw", "add_lat", "fadd", "cswap"].iter().enumerate() {
        let p = (19_350 + i as u16).to_string();
        let mut server = urxe_run("ucx_perftest", "all");
        server.args(["-p", &p]);
        let mut client = urxe_run("ucx_perftest", "all");
        client.args(["-p", &p, HOST, "-d", "urxe0:1", "-x", "rc_verbs", "-t", t, "-n", "1000"]);
        let _serial = heavy_lock();
        let (_, c) = run_pair(19_350 + i as u16, server, client);
        assert_contains(&c, "Final:");
    }
}

// ------------------------------------------------------------------ Open MPI

/// tests/mpi/mpi_check.c compiled with mpicc, once.
fn mpi_check() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let root = repo_root();
        let out_dir = root.join("target/mpi");
        std::fs::create_dir_all(&out_dir).unwrap();
        let bin = out_dir.join("mpi_check");
        let mut c = Command::new("mpicc");
        c.args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"]).arg(&bin).arg(root.join("tests/mpi/mpi_check.c"));
        let out = run_bounded(&mut c, RUN_TIMEOUT).expect("run mpicc (Debian package libopenmpi-dev)");
        assert!(out.success(), "mpicc failed\n{out}");
        bin
    })
    .clone()
}

/// `timeout mpirun ...` with pml ucx and urxe's transports only.
fn mpirun_args(np: u32) -> Vec<String> {
    let v: Vec<String> = vec![
        "timeout".into(),
        "-k".into(),
        "5".into(),
        MPI_TIMEOUT_S.to_string(),
        "mpirun".into(),
        "--allow-run-as-root".into(),
        "--oversubscribe".into(),
        "-np".into(),
        np.to_string(),
        "--mca".into(),
        "pml".into(),
        "ucx".into(),
        "--mca".into(),
        "btl".into(),
        "self".into(),
        "-x".into(),
        "UCX_TLS".into(),
        "-x".into(),
        "URXE_GSO".into(),
    ];
    v
}

/// A running tcpdump of UDP 4791 on `iface` (in network namespace `ns` if given).
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    fn start(ns: Option<&str>, iface: &str, file: &Path) -> Capture {
        let mut c = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "tcpdump"]);
                c
            }
            None => Command::new("tcpdump"),
        };
        c.args(["-i", iface, "-U", "-B", "65536", "-w"]).arg(file).args(["udp", "port", "4791"]);
        let mut child = c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("tcpdump");
        let err = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains("listening on") => break,
                Ok(l) => seen.push(l),
                Err(_) => {
                    let _ = child.kill();
                    panic!("tcpdump on {iface} did not start: {seen:?}");
                }
            }
        }
        Capture { child, file: file.to_path_buf() }
    }

    /// Stops the capture and returns `urxe check --quiet`'s summary line, or why the capture
    /// does not prove at least `min` RoCEv2 packets, all passing.
    fn stop_and_check(mut self, min: u64) -> Result<String, String> {
        std::thread::sleep(Duration::from_millis(300));
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let out = run_bounded(Command::new(urxe_bin()).arg("check").arg("--quiet").arg(&self.file), RUN_TIMEOUT)
            .expect("urxe check");
        let _ = std::fs::remove_file(&self.file);
        if !out.success() {
            return Err(format!("urxe check failed on the capture\n{out}"));
        }
        let summary = out.stdout.lines().last().unwrap_or_default().to_string();
        let n: u64 = summary
            .split(": ")
            .nth(2)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("no packet count in {summary:?}"))?;
        if n < min {
            return Err(format!("only {n} RoCEv2 packets captured (expected >= {min}): {summary}"));
        }
        eprintln!("capture: {summary}");
        Ok(summary)
    }
}

fn capture_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("urxe-{name}-{}.pcap", std::process::id()))
}

/// One host: every rank in one fresh network namespace (its own loopback, so the capture sees
/// only this test's traffic while other programs use the host's).
fn mpi_one_host(np: u32) {
    let bin = mpi_check();
    let _serial = heavy_lock();
    let host = Netns::new("h0");
    let cap = Capture::start(Some(&host.name), "lo", &capture_file(&format!("mpi{np}")));
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &host.name])
        .arg(urxe_bin())
        .args(["run", "--lib"])
        .arg(lib_dir())
        .arg("--")
        .args(mpirun_args(np))
        .arg(&bin)
        .arg("10")
        .env("UCX_TLS", "rc_verbs,ud_verbs,self")
        .env("URXE_GSO", "0")
        .env_remove("UCX_UD_ETH_DGID_CHECK");
    let out = run_bounded(&mut c, Duration::from_secs(MPI_TIMEOUT_S as u64 + 10)).expect("mpirun");
    let capture = cap.stop_and_check(500);
    assert!(out.success(), "mpirun -np {np} failed (capture: {capture:?})\n{out}");
    assert_contains(&out, &format!("mpi_check: OK ranks={np}"));
    if let Err(e) = capture {
        panic!("{e}");
    }
}

#[test]
fn open_mpi_np2_one_host() {
    mpi_one_host(2);
}

#[test]
fn open_mpi_np4_one_host() {
    mpi_one_host(4);
}

/// A network namespace with its loopback up; deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("urxe-{tag}-{}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn ip(args: &[&str]) {
    let out = run_bounded(Command::new("ip").args(args), RUN_TIMEOUT).expect("ip");
    assert!(out.success(), "ip {args:?} failed\n{out}");
}

/// Two "hosts": network namespaces joined by a veth pair (`fab0` in each), two addresses each.
struct TwoHosts {
    ns: [Netns; 2],
}

const NET: &str = "10.77.0.";

impl TwoHosts {
    fn new() -> TwoHosts {
        let t = TwoHosts { ns: [Netns::new("h1"), Netns::new("h2")] };
        let veth = format!("ux{}", std::process::id() % 100_000);
        let peer = format!("{veth}p");
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &veth, "netns", &t.ns[0].name, "name", "fab0"]);
        ip(&["link", "set", &peer, "netns", &t.ns[1].name, "name", "fab0"]);
        for (n, addrs) in [(&t.ns[0].name, ["1", "3"]), (&t.ns[1].name, ["2", "4"])] {
            for x in addrs {
                ip(&["-n", n, "addr", "add", &format!("{NET}{x}/24"), "dev", "fab0"]);
            }
            ip(&["-n", n, "link", "set", "fab0", "up"]);
        }
        t
    }
}

/// Writes the launcher agent and the per-rank address wrapper into `dir`.
fn write_scripts(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let agent = dir.join("netns-agent");
    // mpirun's rsh launcher calls `AGENT HOST COMMAND...`: HOST is a namespace name here. Each
    // host gets its own TMPDIR, as separate machines would: the namespaces share one /tmp and
    // one host name, and two daemons creating the same session directory race.
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nhost=$1; shift\nexport TMPDIR={}/$host\nmkdir -p \"$TMPDIR\"\n\
             exec ip netns exec \"$host\" {} run --lib {} -- /bin/sh -c \"$*\"\n",
            dir.display(),
            urxe_bin().display(),
            lib_dir().display()
        ),
    )
    .unwrap();
    let rank = dir.join("rank-addr");
    // Each rank takes its own address of the namespace's fabric interface, by local rank.
    std::fs::write(
        &rank,
        format!(
            "#!/bin/sh\nURXE_ADDR=$(ip -o -4 addr show dev fab0 | awk '{{split($4,a,\"/\"); print a[1]}}' \
             | sed -n \"$((OMPI_COMM_WORLD_LOCAL_RANK + 1))p\")\n\
             case $URXE_ADDR in {NET}*) ;; *) echo \"rank-addr: no address\" >&2; exit 1;; esac\n\
             export URXE_ADDR\nexec \"$@\"\n"
        ),
    )
    .unwrap();
    for f in [&agent, &rank] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (agent, rank)
}

#[test]
fn open_mpi_np4_across_two_namespaces() {
    let bin = mpi_check();
    let _serial = heavy_lock();
    let hosts = TwoHosts::new();
    let dir = std::env::temp_dir().join(format!("urxe-mpi2h-{}", std::process::id()));
    let (agent, rank) = write_scripts(&dir);
    let hostfile = dir.join("hosts");
    std::fs::write(&hostfile, format!("{} slots=2\n{} slots=2\n", hosts.ns[0].name, hosts.ns[1].name)).unwrap();
    let mpirun_tmp = dir.join("mpirun");
    std::fs::create_dir_all(&mpirun_tmp).unwrap();
    let cap = Capture::start(Some(&hosts.ns[1].name), "fab0", &capture_file("mpi2h"));
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &hosts.ns[0].name])
        .arg(urxe_bin())
        .args(["run", "--lib"])
        .arg(lib_dir())
        .arg("--")
        .args(mpirun_args(4))
        .arg("--hostfile")
        .arg(&hostfile)
        // Round-robin over the hosts: every ping-pong pair (rank, rank^1) crosses the veth.
        .args(["--map-by", "node", "--mca", "plm_rsh_agent"])
        .arg(&agent)
        .args(["--mca", "oob_tcp_if_include", "fab0", "-x", "PATH", "-x", "LD_LIBRARY_PATH"])
        .arg(&rank)
        .arg(&bin)
        .arg("10")
        .env("UCX_TLS", "rc_verbs,ud_verbs,self")
        .env("URXE_GSO", "0")
        .env("TMPDIR", &mpirun_tmp)
        .env_remove("UCX_UD_ETH_DGID_CHECK");
    let out = run_bounded(&mut c, Duration::from_secs(MPI_TIMEOUT_S as u64 + 10)).expect("mpirun");
    let capture = cap.stop_and_check(2000);
    let _ = std::fs::remove_dir_all(&dir);
    drop(hosts);
    assert!(out.success(), "mpirun -np 4 across two namespaces failed (capture: {capture:?})\n{out}");
    assert_contains(&out, "mpi_check: OK ranks=4");
    if let Err(e) = capture {
        panic!("{e}");
    }
}
