//! The `urxe` command: `check` (capture verifier), and the tools around the drop-in library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use urxe::check::{check_file, Format, Options, Totals};
use urxe::hostview;

const USAGE: &str = "\
usage: urxe <command> [options]

commands:
  check [--verbose | --json | --quiet] [--flows] [--strict] FILE...
        Verify every RoCEv2 (UDP 4791, also inside VXLAN, GRE, ERSPAN) and RoCEv1 (ethertype
        0x8915) packet of pcap/pcapng captures: ICRC, header rules, UDP checksum. One line per
        packet, then a summary; exit 0 only if every packet passes. Deviations (reserved bits
        set, manufacturer-specific opcodes, packets cut short by the capture) are shown and
        counted but do not fail; --strict makes them fail. See docs/check.md.
        --verbose  every header field      --json   one JSON object per packet
        --quiet    only failures + totals
        --flows    per-flow PSN report: request and response PSN ranges apart, gaps,
                   retransmissions, NAKs
        A capture with no frame at all (header only) is valid: 0 packets, exit 0.
  conform --peer HOST:PORT --local IP [--only ID,...] [--json FILE] [--pcap-dir DIR
          --iface IF] [--profile strict|rxe] [--wait-ms N] [--quiet-ms N] | --list
        Scripted RoCEv2 scenarios against a remote peer running tests/conform/peer.c: crafted
        packets from LOCAL:4791, each scenario graded pass / FAIL / documented deviation against
        the IBTA rule it tests. Table on stdout, JSON report with --json, one tcpdump capture per
        scenario with --pcap-dir and --iface. Exit 0 when nothing failed.
  run [--addr IP|IFACE] [--lib DIR] [--pcap FILE] [--no-view] -- PROGRAM [ARGS...]
        Run an unmodified verbs program over urxe: puts urxe's libibverbs.so.1 first on
        LD_LIBRARY_PATH (and sets URXE_ADDR when --addr is given), then executes PROGRAM.
        Unless the host already has them, PROGRAM and its children get a private view with
        /dev/infiniband/uverbs0 and /sys/class/infiniband/urxe0 (what UCX and Open MPI look
        for), through a user + mount namespace (no root needed where the host allows them).
        --pcap FILE  capture every RoCEv2 packet the device sends and receives (URXE_PCAP)
        --no-view  do not build the view
  setup [--check]
        As root, on a host or in a container: create /dev/infiniband/uverbs0 (a character
        device with /dev/null's numbers) so that UCX finds urxe without `urxe run`. sysfs
        cannot be written: /sys/class/infiniband stays as the kernel has it (see README).
        --check  only report what is present (exit 1 if the device node is missing)
  devinfo [--addr IP|IFACE]
        Describe the urxe device as verbs programs see it (runs ibv_devinfo -v over urxe).
  stat [PID...]
        Counters of the urxe devices of running processes (all of them without PID).
  help  this text

environment:
  URXE_ADDR     IPv4/IPv6 address or interface name the device uses, shared by all of
                the user's processes on it (default: one 127.77.x.y loopback address per
                user, so processes on one host reach each other with no setting)
  URXE_LIB_DIR  directory holding urxe's libibverbs.so.1 (default: found beside this binary)
  URXE_PCAP     pcapng file the device writes every RoCEv2 packet it sends and receives to,
                one record per packet with its IP/UDP headers; `%p` becomes the process id
  URXE_PCAP_MAX largest capture file in bytes (suffix K, M, G); records beyond it are dropped
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        "check" => cmd_check(&args[1..]),
        "run" => cmd_run(&args[1..]),
        "setup" => cmd_setup(&args[1..]),
        "conform" => cmd_conform(&args[1..]),
        "devinfo" => cmd_devinfo(&args[1..]),
        "stat" => cmd_stat(&args[1..]),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("urxe: unknown command '{other}'\n");
            eprint!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn cmd_check(args: &[String]) -> ExitCode {
    let mut opts = Options::default();
    let mut files = Vec::new();
    for a in args {
        match a.as_str() {
            "--verbose" | "-v" => opts.format = Format::Verbose,
            "--json" => opts.format = Format::Json,
            "--quiet" | "-q" => opts.format = Format::Quiet,
            "--flows" => opts.flows = true,
            "--strict" => opts.strict = true,
            s if s.starts_with('-') => {
                eprintln!("urxe check: unknown option '{s}'");
                return ExitCode::from(2);
            }
            f => files.push(PathBuf::from(f)),
        }
    }
    if files.is_empty() {
        eprintln!("urxe check: no capture file given");
        return ExitCode::from(2);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut all_ok = true;
    let mut grand = Totals::default();
    for f in &files {
        if files.len() > 1 && opts.format != Format::Json {
            let _ = writeln!(out, "== {}", f.display());
        }
        match check_file(f, opts, &mut out) {
            Ok(t) => {
                let verdict = if t.passed() { "PASS" } else { "FAIL" };
                let line = format!("{}: {verdict}: {}", f.display(), t.line());
                if opts.format == Format::Json {
                    eprintln!("{line}");
                } else {
                    let _ = writeln!(out, "{line}");
                }
                if t.roce() == 0 && t.frames > 0 {
                    let _ = out.flush();
                    eprintln!("urxe check: {}: no RoCE packets (UDP port 4791 or ethertype 0x8915)", f.display());
                }
                all_ok &= t.passed();
                add(&mut grand, &t);
            }
            Err(e) => {
                let _ = out.flush();
                eprintln!("urxe check: {}: {e}", f.display());
                all_ok = false;
            }
        }
    }
    if files.len() > 1 {
        let line = format!("total: {}: {}", if all_ok { "PASS" } else { "FAIL" }, grand.line());
        if opts.format == Format::Json {
            eprintln!("{line}");
        } else {
            let _ = writeln!(out, "{line}");
        }
    }
    let _ = out.flush();
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn cmd_conform(args: &[String]) -> ExitCode {
    use std::time::Duration;
    use urxe::conform::{self, Config, Profile};
    let fail = |m: String| {
        eprintln!("urxe conform: {m}");
        ExitCode::from(2)
    };
    let mut peer = None;
    let mut local = None;
    let mut json = None;
    let mut cfg_only = Vec::new();
    let mut pcap_dir = None;
    let mut iface = None;
    let mut profile = Profile::Strict;
    let mut wait = Duration::from_millis(1000);
    let mut quiet = Duration::from_millis(300);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--list" {
            for s in conform::scenarios::all() {
                println!("{:<22} {} ({})", s.id, s.statement, s.ibta);
            }
            return ExitCode::SUCCESS;
        }
        let Some(v) = it.next() else {
            return fail(format!("'{a}' needs a value (see urxe help)"));
        };
        let ms = |v: &str| v.parse::<u64>().ok().filter(|&n| n > 0).map(Duration::from_millis);
        match a.as_str() {
            "--peer" => match std::net::ToSocketAddrs::to_socket_addrs(v.as_str()).ok().and_then(|mut i| i.next()) {
                Some(s) => peer = Some(s),
                None => return fail(format!("--peer {v}: not HOST:PORT")),
            },
            "--local" => match v.parse() {
                Ok(ip) => local = Some(ip),
                Err(_) => return fail(format!("--local {v}: not an IP address")),
            },
            "--only" => cfg_only = v.split(',').filter(|s| !s.is_empty()).map(String::from).collect(),
            "--json" => json = Some(PathBuf::from(v)),
            "--pcap-dir" => pcap_dir = Some(PathBuf::from(v)),
            "--iface" => iface = Some(v.clone()),
            "--profile" => match Profile::parse(v) {
                Some(p) => profile = p,
                None => return fail(format!("--profile {v}: strict or rxe")),
            },
            "--wait-ms" => match ms(v) {
                Some(d) => wait = d,
                None => return fail(format!("--wait-ms {v}: a positive number")),
            },
            "--quiet-ms" => match ms(v) {
                Some(d) => quiet = d,
                None => return fail(format!("--quiet-ms {v}: a positive number")),
            },
            other => return fail(format!("unknown option '{other}'")),
        }
    }
    let (Some(peer), Some(local)) = (peer, local) else {
        return fail("--peer and --local are required".into());
    };
    if pcap_dir.is_some() != iface.is_some() {
        return fail("--pcap-dir and --iface go together".into());
    }
    let cfg = Config { peer, local, wait, quiet, only: cfg_only, pcap_dir, iface, profile };
    let results = match conform::run(&cfg, |r| {
        eprintln!("urxe conform: {:<22} {} ({} ms)", r.id, r.grade.word(), r.elapsed.as_millis());
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("urxe conform: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", conform::report::table(&results));
    if let Some(j) = json {
        if let Err(e) = std::fs::write(&j, conform::report::json(&peer.to_string(), profile, &results)) {
            eprintln!("urxe conform: {}: {e}", j.display());
            return ExitCode::FAILURE;
        }
    }
    if conform::report::totals(&results).1 == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn add(g: &mut Totals, t: &Totals) {
    g.add(t);
}

/// Where urxe's libibverbs.so.1 is: $URXE_LIB_DIR, else beside this binary (cargo's
/// `target/<profile>/urxe` -> `target/urxe/lib`; an install's `bin/urxe` -> `lib/urxe`).
fn find_lib_dir(explicit: Option<&str>) -> Result<PathBuf, String> {
    let check = |d: PathBuf| -> Option<PathBuf> { d.join("libibverbs.so.1").is_file().then_some(d) };
    if let Some(d) = explicit {
        return check(PathBuf::from(d)).ok_or_else(|| format!("--lib {d}: no libibverbs.so.1 there"));
    }
    if let Ok(d) = std::env::var("URXE_LIB_DIR") {
        return check(PathBuf::from(&d)).ok_or_else(|| format!("URXE_LIB_DIR={d}: no libibverbs.so.1 there"));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate the urxe binary: {e}"))?;
    let bin = exe.parent().unwrap_or(std::path::Path::new("."));
    let candidates = [bin.join("../urxe/lib"), bin.join("../lib/urxe"), bin.join("../../target/urxe/lib")];
    candidates.iter().find_map(|c| check(c.clone())).ok_or_else(|| {
        "urxe's libibverbs.so.1 not found beside this binary; build it with `bash provider/build.sh` \
         or set URXE_LIB_DIR"
            .to_string()
    })
}

fn exec_with_urxe(lib: &std::path::Path, addr: Option<&str>, prog: &str, args: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt;
    let mut path = lib.canonicalize().unwrap_or_else(|_| lib.to_path_buf()).into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args).env("LD_LIBRARY_PATH", path);
    if let Some(a) = addr {
        cmd.env("URXE_ADDR", a);
    }
    let err = cmd.exec();
    eprintln!("urxe run: cannot execute {prog}: {err}");
    ExitCode::from(127)
}

/// `--addr`, `--lib` and the remaining arguments.
type CommonOpts<'a> = (Option<String>, Option<String>, &'a [String]);

/// Parses `[--addr X] [--lib D]` from the front of `args`; returns them and the rest.
fn common_opts(args: &[String]) -> Result<CommonOpts<'_>, String> {
    let (mut addr, mut lib) = (None, None);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--addr" | "--lib" => {
                let v = args.get(i + 1).ok_or_else(|| format!("{} needs a value", args[i]))?.clone();
                if args[i] == "--addr" {
                    addr = Some(v);
                } else {
                    lib = Some(v);
                }
                i += 2;
            }
            "--" => return Ok((addr, lib, &args[i + 1..])),
            _ => return Ok((addr, lib, &args[i..])),
        }
    }
    Ok((addr, lib, &args[i..]))
}

fn cmd_run(args: &[String]) -> ExitCode {
    // `--no-view` and `--pcap PATH` (before the program) are taken here, `--addr`/`--lib` by
    // common_opts. Only urxe's own leading options are looked at; the program's are its own.
    let mut args = args.to_vec();
    let mut view = true;
    let mut i = 0;
    while i < args.len() && matches!(args[i].as_str(), "--addr" | "--lib" | "--pcap" | "--no-view") {
        match args[i].as_str() {
            "--no-view" => {
                view = false;
                args.remove(i);
            }
            "--pcap" => {
                match args.get(i + 1) {
                    Some(path) if !path.is_empty() && path != "--" => std::env::set_var("URXE_PCAP", path),
                    _ => {
                        eprintln!("urxe run: --pcap needs a file path");
                        return ExitCode::from(2);
                    }
                }
                args.drain(i..i + 2);
            }
            _ => i += 2,
        }
    }
    let (addr, lib, rest) = match common_opts(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("urxe run: {e}");
            return ExitCode::from(2);
        }
    };
    let (view, rest) = match rest.first().map(String::as_str) {
        Some("--no-view") => (false, &rest[1..]),
        Some("--") => (view, &rest[1..]),
        _ => (view, rest),
    };
    let Some((prog, pargs)) = rest.split_first() else {
        eprintln!("urxe run: no program given (urxe run [--addr A] -- PROGRAM ARGS...)");
        return ExitCode::from(2);
    };
    let dir = match find_lib_dir(lib.as_deref()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("urxe run: {e}");
            return ExitCode::from(2);
        }
    };
    if view {
        let addr_setting = addr.clone().or_else(|| std::env::var("URXE_ADDR").ok().filter(|a| !a.is_empty()));
        let spec = hostview::Spec::urxe(&ndev_of(addr_setting.as_deref()));
        if !hostview::Present::of(&spec).complete() {
            if let Err(e) = hostview::enter_view(&spec) {
                // The program still runs over urxe; only tools that look for the device files
                // (UCX, Open MPI) will not see it.
                eprintln!(
                    "urxe run: no private view of {} and {}: {e}; UCX will not list urxe \
                     (as root: `urxe setup`; see README, UCX and Open MPI)",
                    spec.dev_path().display(),
                    spec.sys_path().display()
                );
            }
        }
    }
    exec_with_urxe(&dir, addr.as_deref(), prog, pargs)
}

/// The interface a URXE_ADDR setting puts the device on, for `gid_attrs/ndevs`: the name
/// itself, the interface holding an address (from `ip -o addr`), or `lo` (the default
/// private 127.x address, or an address no interface holds).
fn ndev_of(setting: Option<&str>) -> String {
    let Some(s) = setting else { return "lo".into() };
    let Ok(ip) = s.parse::<std::net::IpAddr>() else { return s.to_string() };
    let out = std::process::Command::new("ip").args(["-o", "addr", "show"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let a = f.get(3)?.split('/').next()?.parse::<std::net::IpAddr>().ok()?;
            (a == ip).then(|| f.get(1).map(|n| n.split('@').next().unwrap_or(n).to_string()))?
        })
        .unwrap_or_else(|| "lo".into())
}

fn cmd_setup(args: &[String]) -> ExitCode {
    let check_only = match args {
        [] => false,
        [a] if a == "--check" => true,
        [a, ..] => {
            eprintln!("urxe setup: unexpected argument '{a}'");
            return ExitCode::from(2);
        }
    };
    let spec = hostview::Spec::urxe("lo");
    let have = hostview::Present::of(&spec);
    let sys_note = if have.sys {
        "present"
    } else {
        "absent (sysfs cannot be written; UCX then takes every GID as RoCE v1, which works between \
         urxe peers; `urxe run` adds it in a private view)"
    };
    if check_only {
        println!("{}: {}", spec.dev_path().display(), if have.dev { "present" } else { "absent" });
        println!("{}: {sys_note}", spec.sys_path().display());
        return if have.dev { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    match hostview::make_device_node(&spec) {
        Ok(made) => {
            let what = if made { "created (char 1:3, mode 0666)" } else { "already present" };
            println!("{}: {what}", spec.dev_path().display());
            println!("{}: {sys_note}", spec.sys_path().display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("urxe setup: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cmd_devinfo(args: &[String]) -> ExitCode {
    let (addr, lib, rest) = match common_opts(args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("urxe devinfo: {e}");
            return ExitCode::from(2);
        }
    };
    if !rest.is_empty() {
        eprintln!("urxe devinfo: unexpected argument '{}'", rest[0]);
        return ExitCode::from(2);
    }
    match find_lib_dir(lib.as_deref()) {
        Ok(d) => exec_with_urxe(&d, addr.as_deref(), "ibv_devinfo", &["-v".to_string()]),
        Err(e) => {
            eprintln!("urxe devinfo: {e}");
            ExitCode::from(2)
        }
    }
}

/// Stats sockets of running urxe devices, from /proc/net/unix (abstract names show as
/// `@name`): `(pid, socket name)`.
fn stat_sockets() -> Vec<(u32, String)> {
    use urxe::transport::device::STATS_SOCKET_PREFIX;
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut v: Vec<(u32, String)> = text
        .lines()
        .filter_map(|l| {
            let name = l.split_whitespace().last()?.strip_prefix('@')?;
            let pid = name.strip_prefix(STATS_SOCKET_PREFIX)?.split('-').next()?.parse().ok()?;
            Some((pid, name.to_string()))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn cmd_stat(args: &[String]) -> ExitCode {
    let mut pids = Vec::new();
    for a in args {
        match a.parse::<u32>() {
            Ok(p) => pids.push(p),
            Err(_) => {
                eprintln!("urxe stat: '{a}' is not a process id");
                return ExitCode::from(2);
            }
        }
    }
    let socks: Vec<(u32, String)> =
        stat_sockets().into_iter().filter(|(p, _)| pids.is_empty() || pids.contains(p)).collect();
    if socks.is_empty() && pids.is_empty() {
        println!("no running process has a urxe device open");
    }
    let mut answered: Vec<u32> = Vec::new();
    let mut ok = true;
    for (pid, name) in socks {
        // The library checks who answers (SO_PEERCRED): a socket another user bound under a
        // urxe name is reported and ignored.
        match urxe::transport::device::read_stats(&name) {
            Ok(t) => {
                print!("{t}");
                answered.push(pid);
            }
            // The device closed between listing and connecting: it is simply gone.
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => eprintln!("urxe stat: {e}"),
            Err(e) => {
                eprintln!("urxe stat: process {pid}: {e}");
                ok = false;
            }
        }
    }
    for p in &pids {
        if !answered.contains(p) {
            eprintln!("urxe stat: process {p} has no urxe device open");
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
