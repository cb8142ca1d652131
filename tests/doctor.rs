//! `urxe doctor` finds each problem when it is set up on purpose, each in a network namespace
//! of its own (`cli-doc-<pid>-<n>`) with a runtime directory of its own. Kernel rxe cannot be
//! loaded outside the qemu lab: "held by kernel rxe" is set up with a VXLAN device on UDP port
//! 4791, which holds the port through a kernel socket exactly as rdma_rxe does (no process has
//! it open); other holders are Python sockets bound as root (no SO_REUSEPORT) or as nobody.

mod abi_util;
mod urxe_bin;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

struct Ns {
    name: String,
    rt: PathBuf,
}

impl Ns {
    fn new() -> Ns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!("cli-doc-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        assert!(Command::new("ip").args(["netns", "add", &name]).status().unwrap().success(), "ip netns add {name}");
        assert!(Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]).status().unwrap().success());
        let rt = std::env::temp_dir().join(format!("{name}-rt"));
        std::fs::create_dir_all(&rt).unwrap();
        Ns { name, rt }
    }

    fn ip(&self, args: &[&str]) {
        let o = Command::new("ip").arg("-n").arg(&self.name).args(args).output().unwrap();
        assert!(o.status.success(), "ip -n {} {args:?}: {}", self.name, String::from_utf8_lossy(&o.stderr));
    }

    /// `program args` inside the namespace, with a clean urxe environment.
    fn cmd(&self, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]).args(args);
        for v in ["URXE_ADDR", "URXE_LIB_DIR", "LD_LIBRARY_PATH", "URXE_PCAP"] {
            c.env_remove(v);
        }
        c.env("URXE_RUNTIME_DIR", &self.rt).env("XDG_RUNTIME_DIR", &self.rt);
        c
    }

    fn doctor(&self, envs: &[(&str, &str)], args: &[&str]) -> (i32, String) {
        let mut c = self.cmd(urxe_bin::urxe(), &[&["doctor", "--lib", lib()], args].concat());
        c.envs(envs.iter().copied());
        finish(c.output().unwrap())
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = std::fs::remove_dir_all(&self.rt);
    }
}

fn finish(o: Output) -> (i32, String) {
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

fn lib() -> &'static str {
    abi_util::lib_dir().to_str().unwrap()
}

/// The finding line of `topic` and its fix lines.
fn finding<'a>(text: &'a str, topic: &str) -> (&'a str, Vec<&'a str>) {
    let mut lines = text.lines().skip_while(|l| !(l.starts_with('[') && l.contains(&format!("] {topic}: "))));
    let head = lines.next().unwrap_or_else(|| panic!("no '{topic}' finding in:\n{text}"));
    (head, lines.take_while(|l| l.starts_with("    fix: ")).collect())
}

/// A process holding UDP `addr`:4791 (no SO_REUSEPORT) until dropped, started as `user`.
struct Holder(Child);

impl Holder {
    fn start(ns: &Ns, addr: &str, uid: Option<u32>) -> Holder {
        let code = format!(
            "import os,socket,sys,time\n{}s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.bind(('{addr}',4791))\nprint('bound',flush=True)\ntime.sleep(60)",
            uid.map(|u| format!("os.setgid({u})\nos.setuid({u})\n")).unwrap_or_default()
        );
        let mut c = ns.cmd("python3", &["-c", &code]);
        let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "bound");
        Holder(child)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn libraries_a_program_would_load_system_or_urxe() {
    let ns = Ns::new();
    let (_, plain) = ns.doctor(&[], &[]);
    let (head, fixes) = finding(&plain, "urxe libraries");
    assert!(head.starts_with("[ok]") && head.contains(lib()), "{plain}");
    // Without LD_LIBRARY_PATH the loader's cache answers: Debian's libibverbs1 (rdma-core).
    let (head, fixes2) = finding(&plain, "libibverbs.so.1 a program loads");
    assert!(head.starts_with("[note]") && head.contains("the system's") && head.contains("rdma-core"), "{plain}");
    assert!(fixes2.iter().any(|f| f.contains("urxe run -- PROGRAM")), "{plain}");
    assert!(fixes.is_empty());
    let (head, _) = finding(&plain, "librdmacm.so.1 a program loads");
    assert!(head.contains("the system's"), "{plain}");
    // With urxe's on LD_LIBRARY_PATH: urxe's.
    let (_, with) = ns.doctor(&[("LD_LIBRARY_PATH", lib())], &[]);
    let (head, _) = finding(&with, "libibverbs.so.1 a program loads");
    assert!(head.starts_with("[ok]") && head.contains("urxe's"), "{with}");
    // No urxe library where it is looked for: a problem, exit 1.
    let empty = std::env::temp_dir().join(format!("cli-doc-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let (code, text) = finish(ns.cmd(urxe_bin::urxe(), &["doctor"]).env("URXE_LIB_DIR", &empty).output().unwrap());
    let (head, fixes) = finding(&text, "urxe libraries");
    assert!(head.starts_with("[PROBLEM]") && head.contains("URXE_LIB_DIR"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("provider/build.sh")), "{text}");
    assert_eq!(code, 1, "{text}");
}

#[test]
fn port_4791_free_then_held_by_kernel_rxe_stand_in() {
    let ns = Ns::new();
    let (code, text) = ns.doctor(&[("URXE_ADDR", "127.0.0.1")], &[]);
    let (head, _) = finding(&text, "port 4791");
    assert!(head.starts_with("[ok]") && head.contains("127.0.0.1:4791 is free"), "{text}");
    assert_eq!(code, 0, "{text}");
    // A kernel socket on UDP 4791, as rdma_rxe opens one: a VXLAN device with that port.
    ns.ip(&["link", "add", "cli-vx0", "type", "vxlan", "id", "7", "dstport", "4791", "local", "127.0.0.1"]);
    ns.ip(&["link", "set", "cli-vx0", "up"]);
    let (code, text) = ns.doctor(&[("URXE_ADDR", "127.0.0.1")], &[]);
    let (head, fixes) = finding(&text, "port 4791");
    assert!(head.starts_with("[PROBLEM]") && head.contains("kernel socket") && head.contains("kernel rxe"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("rdma link delete")), "{text}");
    assert!(fixes.iter().any(|f| f.contains("URXE_ADDR")), "{text}");
    assert_eq!(code, 1, "{text}");
}

#[test]
fn port_4791_held_by_another_user_or_by_a_program_that_is_not_urxe() {
    let ns = Ns::new();
    {
        let _h = Holder::start(&ns, "127.0.0.1", Some(65534));
        let (code, text) = ns.doctor(&[("URXE_ADDR", "127.0.0.1")], &[]);
        let (head, fixes) = finding(&text, "port 4791");
        assert!(head.starts_with("[PROBLEM]") && head.contains("held by uid 65534"), "{text}");
        assert!(fixes.iter().any(|f| f.contains("run as uid 65534")), "{text}");
        assert_eq!(code, 1);
    }
    let _h = Holder::start(&ns, "127.0.0.1", None);
    let (code, text) = ns.doctor(&[("URXE_ADDR", "127.0.0.1")], &[]);
    let (head, fixes) = finding(&text, "port 4791");
    assert!(head.starts_with("[PROBLEM]") && head.contains("not urxe"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("ss -ulpn")), "{text}");
    assert_eq!(code, 1);
}

#[test]
fn the_shared_address_group_and_its_members() {
    let ns = Ns::new();
    let (_, text) = ns.doctor(&[], &[]);
    assert!(finding(&text, "group").0.contains("no urxe process of this user"), "{text}");
    // An ibv_rc_pingpong server over urxe joins the group of the default address.
    let mut server = ns.cmd("ibv_rc_pingpong", &["-g", "1", "-p", "18515"]);
    server.env("LD_LIBRARY_PATH", lib()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = server.spawn().unwrap();
    let start = Instant::now();
    let mut last = String::new();
    let mut seen = false;
    while start.elapsed() < Duration::from_secs(30) {
        last = ns.doctor(&[], &[]).1;
        let (head, _) = finding(&last, "group");
        if head.contains("1 process(es)") {
            assert!(head.contains("pid ") && head.contains("ibv_rc_pingpong"), "{last}");
            seen = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (port, _) = finding(&last, "port 4791");
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen, "the server never showed in the group:\n{last}");
    assert!(port.starts_with("[ok]") && port.contains("this user's urxe group"), "{last}");
}

#[test]
fn address_family_interface_and_mtu() {
    let ns = Ns::new();
    let (_, text) = ns.doctor(&[], &[]);
    let (head, _) = finding(&text, "address");
    assert!(head.contains("127.77.") && head.contains("IPv4 on lo") && head.contains("no URXE_ADDR"), "{text}");
    assert!(finding(&text, "MTU").0.contains("RoCE path MTU 4096"), "{text}");
    let (_, text) = ns.doctor(&[("URXE_ADDR", "::1")], &[]);
    assert!(finding(&text, "address").0.contains("IPv6 on lo"), "{text}");
    // A smaller interface MTU gives a smaller path MTU; one too small is a problem.
    ns.ip(&["link", "set", "lo", "mtu", "1500"]);
    let (_, text) = ns.doctor(&[], &[]);
    assert!(finding(&text, "MTU").0.contains("lo MTU 1500: RoCE path MTU 1024"), "{text}");
    ns.ip(&["link", "set", "lo", "mtu", "300"]);
    let (code, text) = ns.doctor(&[], &[]);
    let (head, fixes) = finding(&text, "MTU");
    assert!(head.starts_with("[PROBLEM]") && head.contains("too small"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("ip link set lo mtu 1500")), "{text}");
    assert_eq!(code, 1);
    // An address this host does not have.
    let (code, text) = ns.doctor(&[("URXE_ADDR", "10.99.0.1")], &[]);
    let (head, fixes) = finding(&text, "address");
    assert!(head.starts_with("[PROBLEM]") && head.contains("not assigned"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("ip addr add")), "{text}");
    assert_eq!(code, 1);
}

#[test]
fn ucx_device_gate_absent_on_the_host_present_in_urxe_runs_view() {
    let ns = Ns::new();
    let host_has = Path::new("/dev/infiniband/uverbs0").exists() && Path::new("/sys/class/infiniband/urxe0").exists();
    let (_, text) = ns.doctor(&[], &[]);
    let (head, fixes) = finding(&text, "UCX device gate");
    if !host_has {
        assert!(head.starts_with("[note]") && head.contains("absent"), "{text}");
        assert!(fixes.iter().any(|f| f.contains("urxe setup")), "{text}");
    }
    // Under `urxe run` the program sees the private view.
    let exe = urxe_bin::urxe();
    let (_, text) =
        finish(ns.cmd(exe, &["run", "--lib", lib(), "--", exe, "doctor", "--lib", lib()]).output().unwrap());
    let (head, _) = finding(&text, "UCX device gate");
    assert!(head.starts_with("[ok]") && head.contains("present, /sys/class/infiniband/urxe0 present"), "{text}");
}

#[test]
fn user_namespaces_refused_for_urxe_runs_view() {
    // User namespace A (root mapped to root) allows one user namespace below it; doctor runs
    // as uid 65534 in B, inside A, so that `urxe run`'s view would need a third one (C), which
    // A's limit refuses (ENOSPC), as `user.max_user_namespaces` does on a host.
    let ns = Ns::new();
    let exe = urxe_bin::urxe();
    let run = |limit: &str| {
        let script =
            format!("{limit}exec unshare --user --map-user=65534 --map-group=65534 {exe} doctor --lib {}", lib());
        let mut c = ns.cmd("unshare", &["--user", "--map-root-user", "sh", "-c", &script]);
        finish(c.output().unwrap()).1
    };
    let text = run("echo 1 > /proc/sys/user/max_user_namespaces && ");
    let (head, fixes) = finding(&text, "user namespaces");
    assert!(
        head.starts_with("[note]") && head.contains("cannot build its private view") && head.contains("os error 28"),
        "{text}"
    );
    assert!(fixes.iter().any(|f| f.contains("user.max_user_namespaces")), "{text}");
    assert!(fixes.iter().any(|f| f.contains("urxe setup")), "{text}");
    // The same without the limit: the view can be built.
    let text = run("");
    let (head, _) = finding(&text, "user namespaces");
    assert!(head.starts_with("[ok]") && head.contains("user + mount namespace"), "{text}");
}

#[test]
fn locked_memory_limit() {
    let ns = Ns::new();
    let exe = urxe_bin::urxe();
    let run = |lim: &str| {
        finish(ns.cmd("prlimit", &[&format!("--memlock={lim}"), exe, "doctor", "--lib", lib()]).output().unwrap())
    };
    let (_, text) = run("65536:65536");
    let (head, fixes) = finding(&text, "locked memory");
    assert!(head.starts_with("[note]") && head.contains("soft 64 KiB, hard 64 KiB"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("ulimit -l unlimited")), "{text}");
    // The soft limit as set, below the hard one (raising the hard limit needs CAP_SYS_RESOURCE).
    let (_, text) = run("1048576:");
    assert!(finding(&text, "locked memory").0.contains("soft 1024 KiB"), "{text}");
}

#[test]
fn huge_pages_none_reserved_or_some() {
    // /proc/meminfo replaced by a file of ours in a private mount namespace.
    let ns = Ns::new();
    let exe = urxe_bin::urxe();
    let real = std::fs::read_to_string("/proc/meminfo").unwrap();
    let fake = |total: u32| {
        let text: String = real
            .lines()
            .map(|l| match l.split(':').next() {
                Some("HugePages_Total") => format!("HugePages_Total: {total}\n"),
                Some("HugePages_Free") => format!("HugePages_Free: {total}\n"),
                _ => format!("{l}\n"),
            })
            .collect();
        let p = ns.rt.join(format!("meminfo-{total}"));
        std::fs::write(&p, text).unwrap();
        let script = format!("mount --bind {} /proc/meminfo && exec {exe} doctor --lib {}", p.display(), lib());
        finish(ns.cmd("unshare", &["--mount", "sh", "-c", &script]).output().unwrap()).1
    };
    let text = fake(0);
    let (head, fixes) = finding(&text, "huge pages");
    assert!(head.starts_with("[note]") && head.contains("0 reserved"), "{text}");
    assert!(fixes.iter().any(|f| f.contains("vm.nr_hugepages")), "{text}");
    let text = fake(16);
    assert!(finding(&text, "huge pages").0.starts_with("[ok] huge pages: 16 reserved, 16 free"), "{text}");
}
