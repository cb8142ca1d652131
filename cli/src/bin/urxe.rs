//! The `urxe` command: `check` (capture verifier), and the tools around the drop-in library.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use urxe_cli::check::{check_file, Format, Options, Totals};
use urxe_cli::hostview;

// The crate root stays src/bin/urxe.rs; its modules live in src/bin/urxe/.
#[path = "urxe/cli.rs"]
mod cli;
#[path = "urxe/doctor.rs"]
mod doctor;
#[path = "urxe/libs.rs"]
mod libs;

use cli::Command;

fn main() -> ExitCode {
    // Usage errors exit 2 and --help / --version 0, as clap does (and as the hand parser did).
    let cli = cli::parse();
    match cli.command {
        Command::Check(a) => {
            let mut opts = Options::default();
            if a.verbose {
                opts.format = Format::Verbose;
            } else if a.json {
                opts.format = Format::Json;
            } else if a.quiet {
                opts.format = Format::Quiet;
            }
            opts.flows = a.flows;
            opts.strict = a.strict;
            cmd_check(opts, &a.files)
        }
        Command::Conform(a) => cmd_conform(a),
        Command::Run(a) => cmd_run(a),
        Command::Setup(a) => cmd_setup(a.check),
        Command::Devinfo(a) => cmd_devinfo(a),
        Command::Stat(a) => cmd_stat(&a.pids),
        Command::Doctor(a) => doctor::run(&a.dev, a.probe_view),
        Command::Install(a) => cmd_install(&a.prefix),
        Command::Completions(a) => {
            clap_complete::generate(a.shell, &mut cli::command(), "urxe", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man(a) => cmd_man(a.dir.as_deref()),
        Command::Help(a) => cli::print_help(a.command.as_deref()),
    }
}

fn cmd_install(prefix: &Path) -> ExitCode {
    match libs::install(prefix) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("urxe install: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cmd_man(dir: Option<&Path>) -> ExitCode {
    let res = match dir {
        Some(d) => cli::write_man_pages(d).map(|files| {
            for f in files {
                println!("{}", f.display());
            }
        }),
        None => clap_mangen::Man::new(cli::command()).render(&mut std::io::stdout()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("urxe man: {e}");
            ExitCode::FAILURE
        }
    }
}

fn cmd_check(opts: Options, files: &[PathBuf]) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut all_ok = true;
    let mut grand = Totals::default();
    for f in files {
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

fn cmd_conform(a: cli::ConformArgs) -> ExitCode {
    use std::time::Duration;
    use urxe_cli::conform::{self, Config, Profile};
    if a.list {
        for s in conform::scenarios::all() {
            println!("{:<22} {} ({})", s.id, s.statement, s.ibta);
        }
        return ExitCode::SUCCESS;
    }
    // clap requires both unless --list (handled above).
    let (Some(peer), Some(local)) = (a.peer, a.local) else {
        eprintln!("urxe conform: --peer and --local are required");
        return ExitCode::from(2);
    };
    let profile = match a.profile {
        cli::ProfileArg::Strict => Profile::Strict,
        cli::ProfileArg::Rxe => Profile::Rxe,
    };
    let (json, cfg_only, pcap_dir, iface) = (a.json, a.only, a.pcap_dir, a.iface);
    let (wait, quiet) = (Duration::from_millis(a.wait_ms), Duration::from_millis(a.quiet_ms));
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

fn exec_with_urxe(lib: &Path, addr: Option<&str>, prog: &OsString, args: &[OsString]) -> ExitCode {
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
    eprintln!("urxe run: cannot execute {}: {err}", prog.to_string_lossy());
    ExitCode::from(127)
}

fn cmd_run(a: cli::RunArgs) -> ExitCode {
    // clap takes urxe's own options before the program; everything from the program name on
    // (or after `--`) is the program's, passed on untouched.
    if let Some(path) = &a.pcap {
        std::env::set_var("URXE_PCAP", path);
    }
    if let Some(plan) = &a.faults {
        std::env::set_var("URXE_FAULTS", plan);
        if let Err(e) = urxe::runtime::fault_setting() {
            eprintln!("urxe run: --faults: {e}");
            return ExitCode::from(2);
        }
    }
    let (view, addr) = (!a.no_view, a.dev.addr);
    let Some((prog, pargs)) = a.command.split_first() else {
        eprintln!("urxe run: no program given (urxe run [--addr A] -- PROGRAM ARGS...)");
        return ExitCode::from(2);
    };
    let dir = match libs::find_lib_dir(a.dev.lib.as_deref()) {
        Ok((d, _)) => d,
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
pub(crate) fn ndev_of(setting: Option<&str>) -> String {
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

fn cmd_setup(check_only: bool) -> ExitCode {
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

fn cmd_devinfo(a: cli::DevArgs) -> ExitCode {
    match libs::find_lib_dir(a.lib.as_deref()) {
        Ok((d, _)) => exec_with_urxe(&d, a.addr.as_deref(), &"ibv_devinfo".into(), &["-v".into()]),
        Err(e) => {
            eprintln!("urxe devinfo: {e}");
            ExitCode::from(2)
        }
    }
}

/// Stats sockets of running urxe devices, from /proc/net/unix (abstract names show as
/// `@name`): `(pid, socket name)`.
fn stat_sockets() -> Vec<(u32, String)> {
    use urxe::observe::stats::STATS_SOCKET_PREFIX;
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

fn cmd_stat(pids: &[u32]) -> ExitCode {
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
        match urxe::observe::stats::read_stats(&name) {
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
    for p in pids {
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
