//! The `urxe` command: `check` (capture verifier), and the tools around the drop-in library.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use urxe::check::{check_file, Format, Options, Totals};

const USAGE: &str = "\
usage: urxe <command> [options]

commands:
  check [--verbose | --json | --quiet] [--flows] FILE...
        Verify every RoCEv2 (UDP 4791) packet of pcap/pcapng captures: ICRC, header rules,
        UDP checksum. One line per packet, then a summary; exit 0 only if every packet passes.
        --verbose  every header field      --json   one JSON object per packet
        --quiet    only failures + totals  --flows  per-flow PSN report (gaps, retransmissions, NAKs)
  help  this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        "check" => cmd_check(&args[1..]),
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
                if t.rocev2 == 0 {
                    let _ = out.flush();
                    eprintln!("urxe check: {}: no RoCEv2 packets (UDP port 4791)", f.display());
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

fn add(g: &mut Totals, t: &Totals) {
    g.frames += t.frames;
    g.rocev2 += t.rocev2;
    g.ok += t.ok;
    g.bad += t.bad;
    g.icrc_bad += t.icrc_bad;
    g.header_errors += t.header_errors;
    g.udp_checksum_bad += t.udp_checksum_bad;
    g.ip_checksum_bad += t.ip_checksum_bad;
    g.malformed_frames += t.malformed_frames;
    g.other += t.other;
    g.retransmissions += t.retransmissions;
    g.naks += t.naks;
    g.rnr_naks += t.rnr_naks;
    g.gaps += t.gaps;
}
