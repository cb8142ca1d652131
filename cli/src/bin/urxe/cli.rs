//! The command line of `urxe`, declared with clap's derive API: every subcommand gets `--help`
//! and `-h`, usage errors name the bad argument and print a usage line (exit 2), and the same
//! declaration feeds the shell completions and the man pages (`urxe completions`, `urxe man`).
//! Only parsing lives here; what each subcommand does stays in `urxe.rs`.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// What `urxe --version` prints after the name: the version and the rdma-core ABI urxe's two
/// libraries implement (tests/cli.rs checks the symbol versions against the entry tables).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (rdma-core 44 ABI: libibverbs.so.1 IBVERBS_1.0..IBVERBS_1.14 + IBVERBS_PRIVATE_34, ",
    "librdmacm.so.1 RDMACM_1.0..RDMACM_1.3)"
);

const AFTER_HELP: &str = "\
Environment:
  URXE_ADDR      IPv4/IPv6 address or interface name the device uses, shared by all of the
                 user's processes on it (default: one 127.77.x.y loopback address per user, so
                 processes on one host reach each other with no setting)
  URXE_LIB_DIR   directory holding urxe's libibverbs.so.1 and librdmacm.so.1 (default: beside
                 this binary, else the copy this binary carries, unpacked into a cache)
  URXE_PCAP      pcapng file the device writes every RoCEv2 packet it sends and receives to,
                 one record per packet with its IP/UDP headers; `%p` becomes the process id
  URXE_PCAP_MAX  largest capture file in bytes (suffix K, M, G); records beyond it are dropped

Something does not work? `urxe doctor` tells what a program would load and use, and how to
change it.";

#[derive(Parser, Debug)]
#[command(
    name = "urxe",
    version = VERSION,
    about = "Userspace soft-RoCE: run unmodified verbs / rdma_cm programs over UDP, verify RoCEv2 captures",
    after_help = AFTER_HELP,
    arg_required_else_help = true,
    propagate_version = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Verify every RoCEv2 and RoCEv1 packet of pcap/pcapng captures: ICRC, header rules, UDP
    /// checksum.
    ///
    /// RoCEv2 is UDP 4791, also inside VXLAN, GRE and ERSPAN II/III; RoCEv1 is ethertype
    /// 0x8915. One line per packet, then a summary; exit 0 only if every packet passes (1
    /// otherwise). Deviations (reserved bits set, manufacturer-specific opcodes, packets cut
    /// short by the capture) are shown and counted but do not fail; --strict makes them fail.
    /// A capture with no frame at all (header only) is valid: 0 packets, exit 0. See
    /// docs/check.md.
    Check(CheckArgs),
    /// Scripted RoCEv2 scenarios against a remote peer running tests/conform/peer.c.
    ///
    /// Crafted packets from LOCAL:4791, each scenario graded pass / FAIL / documented deviation
    /// against the IBTA rule it tests. Table on stdout, JSON report with --json, one tcpdump
    /// capture per scenario with --pcap-dir and --iface. Exit 0 when nothing failed.
    Conform(ConformArgs),
    /// Run an unmodified verbs / rdma_cm program over urxe.
    ///
    /// Puts urxe's libibverbs.so.1 and librdmacm.so.1 first on LD_LIBRARY_PATH (and sets
    /// URXE_ADDR when --addr is given), then executes PROGRAM with ARGS (everything after the
    /// program name, or after `--`, is the program's). Unless the host already has them,
    /// PROGRAM and its children get a private view with /dev/infiniband/uverbs0 and
    /// /sys/class/infiniband/urxe0 (what UCX and Open MPI look for), through a user + mount
    /// namespace (no root needed where the host allows them). Exit status: the program's;
    /// 127 if it cannot be executed, 2 for a usage error.
    Run(RunArgs),
    /// As root: create /dev/infiniband/uverbs0 so that UCX finds urxe without `urxe run`.
    ///
    /// Creates a character device with /dev/null's numbers, on a host or in a container. sysfs
    /// cannot be written: /sys/class/infiniband stays as the kernel has it.
    Setup(SetupArgs),
    /// Describe the urxe device as verbs programs see it (runs `ibv_devinfo -v` over urxe).
    Devinfo(DevArgs),
    /// Counters of the urxe devices of running processes (all of this user's without PID).
    Stat(StatArgs),
    /// What a program would load and use, and what stands in the way, each with the setting
    /// or command that changes it.
    ///
    /// Looks at: the libibverbs / librdmacm a program would load; UDP port 4791 on the address
    /// urxe would use (free, urxe's group, kernel rxe, another user or program); the group of
    /// processes sharing that address; the UCX device gate (/dev/infiniband/uverbs0, sysfs);
    /// user namespaces for `urxe run`'s view; RLIMIT_MEMLOCK; huge pages; the address family
    /// and MTU. Exit 0 when nothing stops a program, 1 when something does.
    Doctor(DoctorArgs),
    /// Write urxe's libibverbs.so.1 and librdmacm.so.1 to PREFIX/lib/urxe (and the man pages to
    /// PREFIX/share/man/man1), for a urxe in PREFIX/bin or for LD_LIBRARY_PATH.
    Install(InstallArgs),
    /// Print a shell completion script to stdout.
    ///
    /// bash: `urxe completions bash > /etc/bash_completion.d/urxe`
    /// (or ~/.local/share/bash-completion/completions/urxe); zsh: into a directory of $fpath
    /// as `_urxe`; fish: ~/.config/fish/completions/urxe.fish.
    Completions(CompletionsArgs),
    /// Write the man pages (urxe.1 and urxe-SUBCOMMAND.1) to a directory, or urxe.1 to stdout.
    Man(ManArgs),
    /// Print this message or the help of the given subcommand.
    Help(HelpArgs),
}

#[derive(Args, Debug)]
pub struct HelpArgs {
    /// The subcommand.
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
}

/// `urxe help [SUB]`: the long help of urxe or of SUB on stdout (exit 0); an unknown SUB is a
/// usage error (exit 2).
pub fn print_help(sub: Option<&str>) -> std::process::ExitCode {
    let mut cmd = command();
    cmd.build();
    let target = match sub {
        None => &mut cmd,
        Some(name) => match cmd.find_subcommand_mut(name) {
            Some(c) => c,
            None => {
                let mut root = command();
                let e =
                    root.error(clap::error::ErrorKind::InvalidSubcommand, format!("unrecognized subcommand '{name}'"));
                e.print().ok();
                return std::process::ExitCode::from(2);
            }
        },
    };
    let _ = target.print_long_help();
    std::process::ExitCode::SUCCESS
}

/// Parses the command line; on a usage error prints it with the usage line of the subcommand
/// it concerns (clap leaves that line out of value errors) and exits 2.
pub fn parse() -> Cli {
    use clap::error::ErrorKind;
    let args: Vec<OsString> = std::env::args_os().collect();
    match <Cli as clap::Parser>::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => e.exit(),
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        Err(e) => {
            let text = e.render().to_string();
            eprint!("{text}");
            if !text.contains("Usage:") {
                let mut cmd = command();
                cmd.build();
                let sub = args.get(1).and_then(|a| a.to_str()).map(String::from);
                let usage = match sub.as_deref().and_then(|s| cmd.find_subcommand_mut(s)) {
                    Some(c) => c.render_usage(),
                    None => cmd.render_usage(),
                };
                eprintln!("\n{usage}");
            }
            std::process::exit(2);
        }
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Every header field of every packet.
    #[arg(short, long, overrides_with_all = ["json", "quiet", "verbose"])]
    pub verbose: bool,
    /// One JSON object per packet (summaries go to stderr).
    #[arg(long, overrides_with_all = ["json", "quiet", "verbose"])]
    pub json: bool,
    /// Only failures and totals.
    #[arg(short, long, overrides_with_all = ["json", "quiet", "verbose"])]
    pub quiet: bool,
    /// Per-flow PSN report: request and response PSN ranges apart, gaps, retransmissions, NAKs.
    #[arg(long)]
    pub flows: bool,
    /// Deviations (reserved bits set, manufacturer-specific opcodes, packets the capture cut
    /// short) fail as errors do; by default they are shown and counted but do not fail.
    #[arg(long)]
    pub strict: bool,
    /// pcap or pcapng capture files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// The IBTA rules as written.
    Strict,
    /// The rules as Linux's rdma_rxe applies them (documented deviations).
    Rxe,
}

#[derive(Args, Debug)]
pub struct ConformArgs {
    /// List the scenarios (id, statement, IBTA rule) and exit.
    #[arg(long, exclusive = true)]
    pub list: bool,
    /// The peer's control address (tests/conform/peer.c).
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "list", value_parser = parse_peer)]
    pub peer: Option<SocketAddr>,
    /// This host's address the crafted packets leave from (UDP 4791).
    #[arg(long, value_name = "IP", required_unless_present = "list")]
    pub local: Option<IpAddr>,
    /// Only these scenarios (comma-separated ids, see --list).
    #[arg(long, value_name = "ID,...", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Write a JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// One tcpdump capture per scenario in DIR (with --iface).
    #[arg(long, value_name = "DIR", requires = "iface")]
    pub pcap_dir: Option<PathBuf>,
    /// The interface tcpdump captures on (with --pcap-dir).
    #[arg(long, value_name = "IF", requires = "pcap_dir")]
    pub iface: Option<String>,
    /// Which rules a scenario is graded against.
    #[arg(long, value_enum, default_value_t = ProfileArg::Strict)]
    pub profile: ProfileArg,
    /// How long to wait for the peer's answer, in ms.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub wait_ms: u64,
    /// How long the wire must stay quiet after a scenario, in ms.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub quiet_ms: u64,
}

fn parse_peer(v: &str) -> Result<SocketAddr, String> {
    std::net::ToSocketAddrs::to_socket_addrs(v).ok().and_then(|mut i| i.next()).ok_or_else(|| "not HOST:PORT".into())
}

/// `--addr` and `--lib`, shared by `run`, `devinfo` and `doctor`.
#[derive(Args, Debug, Default)]
pub struct DevArgs {
    /// IP address or interface name the device uses (sets URXE_ADDR).
    #[arg(long, value_name = "IP|IFACE", value_parser = non_empty)]
    pub addr: Option<String>,
    /// Directory holding urxe's libibverbs.so.1 (instead of URXE_LIB_DIR or the default).
    #[arg(long, value_name = "DIR")]
    pub lib: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(override_usage = "urxe run [OPTIONS] [--] PROGRAM [ARGS]...")]
pub struct RunArgs {
    #[command(flatten)]
    pub dev: DevArgs,
    /// Capture every RoCEv2 packet the device sends and receives to FILE (sets URXE_PCAP).
    #[arg(long, value_name = "FILE", value_parser = non_empty)]
    pub pcap: Option<String>,
    /// Do not build the private view of /dev/infiniband and /sys/class/infiniband.
    #[arg(long)]
    pub no_view: bool,
    /// Run the program under a fault plan: the plan itself or @FILE (sets URXE_FAULTS; see
    /// docs/faults.md). A plan that does not parse is refused here, before the program runs.
    #[arg(long, value_name = "SPEC|@FILE", value_parser = non_empty)]
    pub faults: Option<String>,
    /// The program and its arguments (all passed on as given).
    #[arg(required = true, value_name = "PROGRAM", trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<OsString>,
}

fn non_empty(v: &str) -> Result<String, String> {
    if v.is_empty() {
        Err("needs a value".into())
    } else {
        Ok(v.to_string())
    }
}

#[derive(Args, Debug)]
pub struct SetupArgs {
    /// Only report what is present (exit 1 if the device node is missing).
    #[arg(long)]
    pub check: bool,
}

#[derive(Args, Debug)]
pub struct StatArgs {
    /// Process ids (default: every process of this user with a urxe device open).
    #[arg(value_name = "PID")]
    pub pids: Vec<u32>,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub dev: DevArgs,
    /// (internal) enter `urxe run`'s private view and exit: the user namespace probe.
    #[arg(long, hide = true)]
    pub probe_view: bool,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// Installation prefix: the libraries go to PREFIX/lib/urxe, the man pages to
    /// PREFIX/share/man/man1.
    #[arg(long, value_name = "PREFIX")]
    pub prefix: PathBuf,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write urxe.1 and one page per subcommand (urxe-run.1, ...) into DIR.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The clap command, for completions and man pages.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Writes urxe.1 and urxe-SUB.1 for every subcommand into `dir`; returns the files written.
pub fn write_man_pages(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let cmd = command();
    let mut written = Vec::new();
    let mut page = |c: clap::Command, name: String| -> std::io::Result<()> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(c.name(name.clone())).render(&mut buf)?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, buf)?;
        written.push(path);
        Ok(())
    };
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("urxe-{}", sub.get_name());
        page(sub.clone().version(VERSION), name)?;
    }
    page(cmd, "urxe".into())?;
    Ok(written)
}
