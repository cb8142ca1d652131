//! The `urxe` command line (clap): every subcommand answers --help and -h with exit 0 and a
//! usage line, --version names the rdma-core ABI the libraries implement, usage errors exit 2
//! naming the bad argument, `urxe run` hands everything after the program name (or `--`) to
//! the program, and the completions and man pages cover every subcommand.

use std::path::Path;
use std::process::{Command, Output};

fn urxe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_urxe")).args(args).output().expect("run urxe")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The subcommands `urxe --help` lists (so a new one is covered without editing this test).
fn subcommands() -> Vec<String> {
    let o = urxe(&["--help"]);
    assert!(o.status.success());
    let text = out(&o);
    let list = text.split("Commands:").nth(1).expect("a Commands: section").split("\n\n").next().unwrap().to_string();
    list.lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect()
}

#[test]
fn every_subcommand_answers_help_and_h_with_exit_0_and_usage() {
    let subs = subcommands();
    for want in
        ["check", "conform", "run", "setup", "devinfo", "stat", "doctor", "install", "completions", "man", "help"]
    {
        assert!(subs.iter().any(|s| s == want), "`urxe --help` does not list {want}: {subs:?}");
    }
    for sub in &subs {
        for flag in ["--help", "-h"] {
            let o = urxe(&[sub, flag]);
            assert_eq!(o.status.code(), Some(0), "urxe {sub} {flag}: {}{}", out(&o), err(&o));
            assert!(
                out(&o).contains(&format!("Usage: urxe {sub}")),
                "urxe {sub} {flag} prints no usage line:\n{}",
                out(&o)
            );
        }
    }
    // `urxe help SUB` as well, and bare `urxe` prints the help but exits 2 (as before).
    let o = urxe(&["help", "run"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).contains("Usage: urxe run [OPTIONS] [--] PROGRAM [ARGS]..."));
    let o = urxe(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("Usage: urxe <COMMAND>"));
}

/// The highest `<prefix>N` symbol version in an entry table.
fn highest(file: &str, prefix: &str) -> u32 {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file)).unwrap();
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let digits: String = text[i + prefix.len()..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .max()
        .expect("symbol versions in the entry table")
}

#[test]
fn version_names_the_version_and_the_abi_of_both_libraries() {
    let o = urxe(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    let v = out(&o);
    assert!(v.starts_with(&format!("urxe {} ", env!("CARGO_PKG_VERSION"))), "{v}");
    let ibv = highest("provider/src/entries.rs", "IBVERBS_1.");
    let cm = highest("rdmacm/src/entries.rs", "RDMACM_1.");
    assert!(v.contains(&format!("IBVERBS_1.0..IBVERBS_1.{ibv} ")), "{v} vs IBVERBS_1.{ibv}");
    assert!(v.contains(&format!("RDMACM_1.0..RDMACM_1.{cm})")), "{v} vs RDMACM_1.{cm}");
    assert!(v.contains("rdma-core 44"), "{v}");
    // Every subcommand answers it too.
    let sub = out(&urxe(&["check", "--version"]));
    assert!(sub.ends_with(v.strip_prefix("urxe").unwrap()), "{sub}");
}

#[test]
fn usage_errors_exit_2_naming_the_argument_with_a_usage_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["check", "--bogus", "x.pcap"], "'--bogus'"),
        (&["check"], "<FILE>"),
        (&["stat", "abc"], "'abc'"),
        (&["conform", "--wait-ms", "0"], "--wait-ms"),
        (&["conform", "--peer", "nowhere", "--local", "127.0.0.1"], "--peer"),
        (&["conform", "--peer", "127.0.0.1:9", "--local", "127.0.0.1", "--pcap-dir", "/tmp"], "--iface"),
        (&["conform", "--profile", "lax"], "'lax'"),
        (&["setup", "--force"], "'--force'"),
        (&["devinfo", "extra"], "'extra'"),
        (&["run"], "<PROGRAM>"),
        (&["run", "--pcap"], "--pcap"),
        (&["completions", "tcsh"], "'tcsh'"),
        (&["frobnicate"], "'frobnicate'"),
    ];
    for (args, names) in cases {
        let o = urxe(args);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "urxe {args:?}: {e}");
        assert!(e.contains(names), "urxe {args:?} does not name {names}: {e}");
        assert!(e.contains("Usage: urxe"), "urxe {args:?}: no usage line: {e}");
    }
}

#[test]
fn check_keeps_its_exit_codes_and_last_format_flag_wins() {
    let dir = std::env::temp_dir().join(format!("urxe-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A pcap with a header and no frame: valid, 0 packets, exit 0.
    let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&1u32.to_le_bytes());
    let f = dir.join("empty.pcap");
    std::fs::write(&f, &pcap).unwrap();
    let p = f.to_str().unwrap();
    let o = urxe(&["check", "--json", "-q", p]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // -q after --json: the summary goes to stdout (JSON would have sent it to stderr).
    assert!(out(&o).contains("PASS"), "{}", out(&o));
    let o = urxe(&["check", "-q", "--json", p]);
    assert!(err(&o).contains("PASS") && !out(&o).contains("PASS"));
    let o = urxe(&["check", p, "/nonexistent.pcap"]);
    assert_eq!(o.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_passes_everything_after_the_program_or_double_dash_to_it() {
    let dir = std::env::temp_dir().join(format!("urxe-cli-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libibverbs.so.1"), b"").unwrap();
    let lib = dir.to_str().unwrap();
    let o = urxe(&["run", "--lib", lib, "--no-view", "--", "/bin/echo", "--addr", "x", "-h", "--", "--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(out(&o), "--addr x -h -- --help\n");
    let o = urxe(&["run", "--lib", lib, "--no-view", "/bin/echo", "-n", "--lib", "y"]);
    assert_eq!(out(&o), "--lib y");
    // urxe's own options set the environment the program sees.
    let o =
        urxe(&["run", "--lib", lib, "--no-view", "--addr", "10.1.2.3", "--pcap", "/tmp/c%p.pcapng", "/usr/bin/env"]);
    let env = out(&o);
    assert!(env.lines().any(|l| l == "URXE_ADDR=10.1.2.3"), "{env}");
    assert!(env.lines().any(|l| l == "URXE_PCAP=/tmp/c%p.pcapng"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("LD_LIBRARY_PATH=") && l.contains(lib)), "{env}");
    // A program that cannot be executed: 127, as before.
    let o = urxe(&["run", "--lib", lib, "--no-view", "/nonexistent/prog"]);
    assert_eq!(o.status.code(), Some(127));
    assert!(err(&o).contains("cannot execute /nonexistent/prog"));
    let o = urxe(&["run", "--lib", "/nonexistent", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--lib /nonexistent: no libibverbs.so.1 there"), "{}", err(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = urxe(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let text = out(&o);
        for sub in subs.iter().filter(|s| *s != "help") {
            assert!(text.contains(sub.as_str()), "{shell} completion lacks {sub}");
        }
    }
    assert!(out(&urxe(&["completions", "bash"])).contains("--no-view"));
    let dir = std::env::temp_dir().join(format!("urxe-cli-man-{}", std::process::id()));
    let o = urxe(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let page = std::fs::read_to_string(dir.join("urxe.1")).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH urxe"), "{page}");
    for sub in subs.iter().filter(|s| *s != "help") {
        let p =
            std::fs::read_to_string(dir.join(format!("urxe-{sub}.1"))).unwrap_or_else(|e| panic!("urxe-{sub}.1: {e}"));
        assert!(p.contains(&format!(".TH urxe-{sub}")), "urxe-{sub}.1:\n{p}");
    }
    let run = std::fs::read_to_string(dir.join("urxe-run.1")).unwrap();
    assert!(run.contains("no\\-view"), "{run}");
    std::fs::remove_dir_all(&dir).unwrap();
    let o = urxe(&["man"]);
    assert!(out(&o).contains(".TH urxe"));
}
