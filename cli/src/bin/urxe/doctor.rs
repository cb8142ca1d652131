//! `urxe doctor`: what a program would load and use, and what stands in the way. Each finding
//! is one line `[ok|note|PROBLEM] topic: what was found`, then `fix:` lines with the setting or
//! command that changes it. Exit 1 when a PROBLEM would stop a program, else 0.
//!
//! It only looks: it never binds port 4791, joins a group or creates a registry (the user
//! namespace probe runs `urxe doctor --probe-view` as a child, which exits at once).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use urxe::transport::group::{registry, slots};

use crate::cli::DevArgs;
use crate::libs;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    Note,
    Problem,
}

struct Report {
    problems: usize,
}

impl Report {
    fn say(&mut self, level: Level, topic: &str, what: &str, fixes: &[String]) {
        let tag = match level {
            Level::Ok => "ok",
            Level::Note => "note",
            Level::Problem => "PROBLEM",
        };
        if level == Level::Problem {
            self.problems += 1;
        }
        println!("[{tag}] {topic}: {what}");
        for f in fixes {
            println!("    fix: {f}");
        }
    }
}

pub fn run(dev: &DevArgs, probe_view: bool) -> ExitCode {
    if probe_view {
        return probe_view_child();
    }
    let mut r = Report { problems: 0 };
    libraries(&mut r, dev.lib.as_deref());
    let setting = dev.addr.clone().or_else(|| std::env::var("URXE_ADDR").ok().filter(|a| !a.is_empty()));
    let addr = address(&mut r, setting.as_deref());
    if let Some((addr, ifname)) = &addr {
        group(&mut r, *addr);
        view(&mut r, ifname);
    }
    memlock(&mut r);
    hugepages(&mut r);
    println!("{} problem(s)", r.problems);
    if r.problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Is the library at `p` urxe's (it carries urxe's private symbol version)?
fn is_urxe(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.windows(14).any(|w| w == b"URXE_PRIVATE_1" || w == b"urxe_gsi_post_"))
}

/// Which `name` the dynamic loader would give a program started now: $LD_LIBRARY_PATH first,
/// then its cache (`ldconfig -p`).
fn loader_pick(name: &str) -> Option<PathBuf> {
    let ldp = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    for d in ldp.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    let out = std::process::Command::new("ldconfig").arg("-p").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let arch = if cfg!(target_pointer_width = "64") { "64" } else { "" };
    text.lines()
        .filter(|l| l.trim_start().starts_with(&format!("{name} ")))
        .filter(|l| arch.is_empty() || l.contains(arch) || !l.contains("libc6,"))
        .find_map(|l| l.split("=> ").nth(1).map(|p| PathBuf::from(p.trim())))
}

/// `libibverbs.so.1.14.44.0` -> "rdma-core 44, ABI 1.14".
fn system_version(p: &Path) -> String {
    let real = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let v: Vec<&str> = name.split(".so.").nth(1).map(|s| s.split('.').collect()).unwrap_or_default();
    match v.as_slice() {
        [major, minor, rc, ..] => format!("rdma-core {rc}, ABI {major}.{minor} ({})", real.display()),
        _ => real.display().to_string(),
    }
}

fn libraries(r: &mut Report, lib: Option<&Path>) {
    let urxe_dir = match libs::find_lib_dir(lib) {
        Ok((d, src)) => {
            let v = env!("CARGO_PKG_VERSION");
            r.say(
                Level::Ok,
                "urxe libraries",
                &format!("{} ({}), urxe {v}; `urxe run` uses them", d.display(), src.describe()),
                &[],
            );
            Some(d)
        }
        Err(e) => {
            r.say(
                Level::Problem,
                "urxe libraries",
                &e,
                &["`bash provider/build.sh` in the source tree, or `urxe install --prefix DIR` then URXE_LIB_DIR=DIR/lib/urxe".into()],
            );
            None
        }
    };
    for name in libs::LIBS {
        let topic = format!("{name} a program loads");
        let how = match &urxe_dir {
            Some(d) => format!("run it as `urxe run -- PROGRAM`, or export LD_LIBRARY_PATH={}", d.display()),
            None => "build or install urxe's libraries first (above)".into(),
        };
        match loader_pick(name) {
            Some(p) if is_urxe(&p) => {
                r.say(Level::Ok, &topic, &format!("urxe's, {} (from LD_LIBRARY_PATH)", p.display()), &[]);
            }
            Some(p) => r.say(
                Level::Note,
                &topic,
                &format!(
                    "the system's, {}: a program started plainly sees kernel RDMA devices only, not urxe",
                    system_version(&p)
                ),
                &[how],
            ),
            None => r.say(Level::Note, &topic, "none (neither LD_LIBRARY_PATH nor the loader cache has it)", &[how]),
        }
    }
}

/// `(interface, address)` of every address of this network namespace, from `ip -o addr`.
fn host_addrs() -> Vec<(String, IpAddr)> {
    let out = std::process::Command::new("ip").args(["-o", "addr", "show"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let name = f.get(1)?.split('@').next()?.to_string();
            let a = f.get(3)?.split('/').next()?.parse().ok()?;
            Some((name, a))
        })
        .collect()
}

fn mtu_of(ifname: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu")).ok()?.trim().parse().ok()
}

/// The zero-configuration candidate `attempt` for this uid: as provider/src/config.rs's
/// `loopback_candidate(zero_config_seed(uid), attempt)` (127.77.c.d, last octet not 0/255).
fn loopback_candidate(uid: u32, attempt: u32) -> IpAddr {
    let mut v = uid & 0xffff;
    let mut left = attempt;
    loop {
        let d = (v & 0xff) as u8;
        if d != 0 && d != 255 {
            if left == 0 {
                return IpAddr::from([127, 77, (v >> 8) as u8, d]);
            }
            left -= 1;
        }
        v = (v + 1) & 0xffff;
    }
}

/// Whether this user's urxe group holds `addr` (its registry has a live member).
fn group_members(addr: IpAddr) -> Vec<(u8, u32)> {
    let dir = registry::default_dir();
    let path = dir.join(registry::file_name(registry::netns_id(), addr));
    if !path.is_file() {
        return Vec::new();
    }
    let Ok(reg) = registry::Registry::open(&dir, addr) else { return Vec::new() };
    let n = reg.slots().ok().flatten().unwrap_or(0);
    (0..n)
        .filter(|&i| reg.held_by_other(i).unwrap_or(false))
        .map(|i| (i, reg.record(i).map(|r| r.pid).unwrap_or(0)))
        .collect()
}

/// What holds UDP 4791 on `addr`, as a finding: `(level, text, fixes)`.
fn port_finding(addr: IpAddr, explicit: bool) -> (Level, String, Vec<String>) {
    let other =
        if explicit { "set URXE_ADDR (or --addr) to another address" } else { "set URXE_ADDR to another address" };
    match slots::find_holder(addr) {
        None => (Level::Ok, format!("UDP {addr}:4791 is free"), vec![]),
        Some(slots::Holder::SameUser) if !group_members(addr).is_empty() => {
            (Level::Ok, format!("UDP {addr}:4791 is held by this user's urxe group (below): new processes join it"), vec![])
        }
        Some(slots::Holder::SameUser) => (
            Level::Problem,
            format!("UDP {addr}:4791 is held by a program of this user that is not urxe (or an older urxe, without SO_REUSEPORT)"),
            vec![format!("stop it (`ss -ulpn 'sport = :4791'` names it), or {other}")],
        ),
        Some(slots::Holder::Kernel) => (
            Level::Problem,
            format!("UDP {addr}:4791 is held by a kernel socket: kernel rxe (rdma_rxe) or a UDP tunnel (VXLAN...) on port 4791"),
            vec![
                "`rdma link show` lists rxe devices: `rdma link delete rxe0` removes one (root); `ip -d link` shows tunnels".into(),
                other.into(),
            ],
        ),
        Some(slots::Holder::OtherUser(uid)) => (
            Level::Problem,
            format!("UDP {addr}:4791 is held by uid {uid}: an address is shared only among the processes of one user"),
            vec![format!("run as uid {uid}, or {other}")],
        ),
    }
}

/// The address urxe would use, its family, interface and MTU, and who holds its port.
fn address(r: &mut Report, setting: Option<&str>) -> Option<(IpAddr, String)> {
    let addrs = host_addrs();
    let (addr, how) = match setting {
        Some(s) => match s.parse::<IpAddr>() {
            Ok(ip) => (ip, format!("URXE_ADDR={s}")),
            Err(_) => {
                let mine: Vec<IpAddr> = addrs.iter().filter(|(n, _)| n == s).map(|(_, a)| *a).collect();
                let pick = mine.iter().find(|a| a.is_ipv4()).or_else(|| mine.first()).copied();
                match pick {
                    Some(ip) => (ip, format!("URXE_ADDR={s} (the interface's first address)")),
                    None => {
                        r.say(
                            Level::Problem,
                            "address",
                            &format!("URXE_ADDR={s}: neither an IP address nor an interface with an address"),
                            &["set URXE_ADDR to an address of `ip -o addr` or the name of an interface that has one"
                                .into()],
                        );
                        return None;
                    }
                }
            }
        },
        None => {
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() };
            let first = loopback_candidate(uid, 0);
            let (lvl, text, _) = port_finding(first, false);
            if lvl == Level::Problem {
                r.say(
                    Level::Note,
                    "port 4791",
                    &format!("{text}; with no setting urxe takes the next free 127.77.x.y"),
                    &[],
                );
            }
            let pick =
                (0..16).map(|i| loopback_candidate(uid, i)).find(|a| port_finding(*a, false).0 != Level::Problem);
            (pick.unwrap_or(first), format!("no URXE_ADDR: the loopback address of uid {uid}"))
        }
    };
    let on_lo = matches!(addr, IpAddr::V4(v4) if v4.is_loopback());
    let ifname =
        addrs.iter().find(|(_, a)| *a == addr).map(|(n, _)| n.clone()).or_else(|| on_lo.then(|| "lo".to_string()));
    let Some(ifname) = ifname else {
        r.say(
            Level::Problem,
            "address",
            &format!("{addr} ({how}) is not assigned to this host (this network namespace)"),
            &[format!(
                "`ip addr add {addr}/<prefix> dev <iface>` (root), or set URXE_ADDR to an address of `ip -o addr`"
            )],
        );
        return None;
    };
    let family = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
    let gid = match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_string(),
        IpAddr::V6(v6) => v6.to_string(),
    };
    r.say(Level::Ok, "address", &format!("{addr} ({how}), {family} on {ifname}, GID {gid}"), &[]);
    match mtu_of(&ifname) {
        Some(mtu) => match urxe::engine::Mtu::for_netdev(mtu) {
            Some(m) => r.say(
                Level::Ok,
                "MTU",
                &format!(
                    "{ifname} MTU {mtu}: RoCE path MTU {} (the largest of 256..4096 that fits MTU - 80)",
                    m.bytes()
                ),
                &[],
            ),
            None => r.say(
                Level::Problem,
                "MTU",
                &format!("{ifname} MTU {mtu} is too small for RoCE (needs 336 for a 256-byte path MTU)"),
                &[format!(
                    "`ip link set {ifname} mtu 1500` (root), or set URXE_ADDR to an address on another interface"
                )],
            ),
        },
        None => r.say(Level::Note, "MTU", &format!("cannot read /sys/class/net/{ifname}/mtu"), &[]),
    }
    let (lvl, text, fixes) = port_finding(addr, setting.is_some());
    r.say(lvl, "port 4791", &text, &fixes);
    Some((addr, ifname))
}

fn group(r: &mut Report, addr: IpAddr) {
    let members = group_members(addr);
    let dir = registry::default_dir();
    if members.is_empty() {
        r.say(
            Level::Ok,
            "group",
            &format!("no urxe process of this user on {addr} (registries in {})", dir.display()),
            &[],
        );
        return;
    }
    let list: Vec<String> = members
        .iter()
        .map(|(slot, pid)| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("slot {slot}: pid {pid} {}", comm.trim())
        })
        .collect();
    r.say(
        Level::Ok,
        "group",
        &format!(
            "{} process(es) share {addr}:4791 (registry in {}): {}",
            members.len(),
            dir.display(),
            list.join(", ")
        ),
        &["`urxe stat` prints their counters; URXE_GROUP_SLOTS (set by the first process) bounds their number".into()],
    );
}

/// The UCX device gate and whether `urxe run` can build its private view.
fn view(r: &mut Report, ifname: &str) {
    let spec = urxe_cli::hostview::Spec::urxe(ifname);
    let have = urxe_cli::hostview::Present::of(&spec);
    let yesno = |b: bool| if b { "present" } else { "absent" };
    let text =
        format!("{} {}, {} {}", spec.dev_path().display(), yesno(have.dev), spec.sys_path().display(), yesno(have.sys));
    if have.complete() {
        r.say(Level::Ok, "UCX device gate", &format!("{text}: UCX and Open MPI list urxe0"), &[]);
        return;
    }
    r.say(
        Level::Note,
        "UCX device gate",
        &format!("{text}: UCX and Open MPI skip urxe0 unless the program runs under `urxe run`"),
        &["`urxe run -- PROGRAM` (private view), or as root `urxe setup` (creates the device node; sysfs stays absent)".into()],
    );
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("urxe"));
    let out = std::process::Command::new(exe).args(["doctor", "--probe-view"]).output();
    let why = match out {
        Ok(o) if o.status.success() => {
            r.say(
                Level::Ok,
                "user namespaces",
                &format!("`urxe run` can build its private view ({})", String::from_utf8_lossy(&o.stdout).trim()),
                &[],
            );
            return;
        }
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => e.to_string(),
    };
    let mut fixes = Vec::new();
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    if why.contains("os error 28") || read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        fixes.push(
            "the count of user namespaces is at its limit: `sysctl user.max_user_namespaces=15000` (root; the limit of \
             an enclosing namespace counts too: a container's is set by its host)"
                .into(),
        );
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        fixes.push("`sysctl kernel.unprivileged_userns_clone=1` (root)".into());
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        fixes.push("`sysctl kernel.apparmor_restrict_unprivileged_userns=0` (root), or an AppArmor profile allowing userns for urxe".into());
    }
    if why.contains("os error 1)") {
        fixes.push(
            "in a container: a seccomp profile that allows unshare (docker: --security-opt seccomp=unconfined)".into(),
        );
    }
    fixes.push("without a view: as root, `urxe setup` once creates the device node UCX checks".into());
    r.say(Level::Note, "user namespaces", &format!("`urxe run` cannot build its private view: {why}"), &fixes);
}

/// `urxe doctor --probe-view` (the child of [`view`]): enters the view and exits.
fn probe_view_child() -> ExitCode {
    let spec = urxe_cli::hostview::Spec::urxe("lo");
    match urxe_cli::hostview::enter_view(&spec) {
        Ok(mode) => {
            println!(
                "{}",
                if mode == urxe_cli::hostview::Mode::UserNamespace {
                    "user + mount namespace"
                } else {
                    "mount namespace"
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `Max locked memory` of /proc/self/limits: (soft, hard) in bytes, None = unlimited.
fn limit(name: &str) -> Option<(Option<u64>, Option<u64>)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with(name))?;
    let f: Vec<&str> = line[name.len()..].split_whitespace().collect();
    let v = |s: &str| s.parse::<u64>().ok();
    Some((v(f.first()?), v(f.get(1)?)))
}

fn memlock(r: &mut Report) {
    const WANT: u64 = 64 << 20;
    let Some((soft, hard)) = limit("Max locked memory") else { return };
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |b| format!("{} KiB", b >> 10));
    let text = format!("RLIMIT_MEMLOCK soft {}, hard {}", show(soft), show(hard));
    if soft.is_none_or(|s| s >= WANT) {
        r.say(Level::Ok, "locked memory", &text, &[]);
    } else {
        r.say(
            Level::Note,
            "locked memory",
            &format!("{text}: urxe pins nothing and ignores it, but programs that check it themselves (Open MPI, UCX, libfabric) warn or refuse below 64 MiB"),
            &[
                "`ulimit -l unlimited` in the shell (up to the hard limit), `* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for a systemd unit, `--ulimit memlock=-1` for docker".into(),
            ],
        );
    }
}

fn hugepages(r: &mut Report) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |k: &str| -> Option<u64> {
        meminfo.lines().find(|l| l.starts_with(k))?.split_whitespace().nth(1)?.parse().ok()
    };
    let (total, free, size) = (field("HugePages_Total:"), field("HugePages_Free:"), field("Hugepagesize:"));
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let thp = thp.split_whitespace().find(|w| w.starts_with('[')).unwrap_or("?").trim_matches(['[', ']']).to_string();
    let text = format!(
        "{} reserved, {} free ({} KiB each); transparent huge pages: {thp}",
        total.unwrap_or(0),
        free.unwrap_or(0),
        size.unwrap_or(0)
    );
    if total.unwrap_or(0) == 0 {
        r.say(
            Level::Note,
            "huge pages",
            &format!("{text}: programs that ask for huge pages (ibv_*_pingpong / perftest --use_hugepages, UCX, MPI allocators) fall back or fail"),
            &["`sysctl vm.nr_hugepages=512` (root) reserves 512 of them".into()],
        );
    } else {
        r.say(Level::Ok, "huge pages", &text, &[]);
    }
}
